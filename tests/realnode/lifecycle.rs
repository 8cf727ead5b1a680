//! The chart's life on real nodes: a namespace labelled as docs/install.md says is what admits the agent (one
//! enforcing `baseline` refuses it); `helm upgrade` with changed values and a new image tag rolls the agents while a
//! tenant pod keeps writing to its volume; `helm uninstall` leaves exactly what docs/uninstall.md lists.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::common::*;
use crate::support::realnode::RealCluster;

async fn agent_pods(c: &RealCluster) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.client(), NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/component=node"))
        .await
        .expect("agent pods list")
        .items
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_security_label_admits_the_agent_and_upgrade_and_uninstall_leave_tenants_alone() {
    let c = RealCluster::start(2).await;
    for node in ["node-1", "node-2"] {
        c.tmpfs(node, "vol1", "64M");
        c.tmpfs(node, "vol2", "64M");
    }
    // A namespace enforcing `baseline` (as many clusters label every namespace): the DaemonSet's pods are refused.
    c.kubectl(&["create", "namespace", NAMESPACE]);
    c.kubectl(&[
        "label",
        "namespace",
        NAMESPACE,
        "pod-security.kubernetes.io/enforce=baseline",
    ]);
    helm_install(&c, json!({}));
    let events: Api<Event> = Api::namespaced(c.client(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let refused = events
            .list(&ListParams::default())
            .await
            .expect("events list")
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("FailedCreate")
                    && e.message
                        .as_deref()
                        .unwrap_or("")
                        .contains("violates PodSecurity")
            });
        if refused {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no FailedCreate ... violates PodSecurity event"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        agent_pods(&c).await.is_empty(),
        "baseline admits no agent pod"
    );
    // The docs' namespace manifest labels it `privileged`: the same release now runs.
    c.kubectl(&["apply", "-f", "config/manifests/namespace.yaml"]);
    wait_agents_ready(&c).await;

    // A tenant writing continuously to a volume on node-2.
    let disks = c.disk_root().join("disks");
    for node in ["node-1", "node-2"] {
        wait_pv(
            &c,
            node,
            &disks.join("vol1").display().to_string(),
            "Available",
        )
        .await;
    }
    let ns = c.plane.namespace("tenant").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(&claims, &claim("data", "local-storage", "16Mi", false)).await;
    let writer = "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo $i > /data/counter; sleep 0.2; done";
    create(
        &pods,
        &busybox_pod("writer", writer, "data", false, Some("node-2")),
    )
    .await;
    wait_pod(&c, &ns, "writer", &["Running"]).await;
    let (_, pv_name) = claim_state(&c, &ns, "data").await;
    let pv = pvs(&c)
        .await
        .remove(&pv_name.expect("bound"))
        .expect("PV exists");
    let counter = host_path(&c, "node-2", &pv_path(&pv)).join("counter");
    let read = || {
        std::fs::read_to_string(&counter)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let tenant_uid = pods.get("writer").await.expect("writer").metadata.uid;

    // helm upgrade: a changed value and a new image tag (the same image, tagged anew on each node).
    let new_tag = "realnode-upgraded";
    for n in &c.nodes {
        n.tag(
            &c.images.localpv(),
            &format!(
                "{}:{new_tag}",
                crate::support::realnode::images::LOCALPV_REPOSITORY
            ),
        );
    }
    let before_upgrade = read();
    let old_uids: Vec<_> = agent_pods(&c)
        .await
        .into_iter()
        .map(|p| p.metadata.uid)
        .collect();
    helm_release(
        &c,
        "upgrade",
        json!({"image": {"tag": new_tag}, "node": {"logLevel": "debug"}}),
    );
    let deadline = Instant::now() + crate::support::realnode::POD_TIMEOUT;
    loop {
        let now = agent_pods(&c).await;
        let rolled = now.len() == 2
            && now.iter().all(|p| {
                !old_uids.contains(&p.metadata.uid)
                    && p.spec.as_ref().is_some_and(|s| {
                        s.containers[0]
                            .image
                            .as_deref()
                            .is_some_and(|i| i.ends_with(new_tag))
                    })
            });
        if rolled {
            break;
        }
        assert!(Instant::now() < deadline, "agents not rolled to {new_tag}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    wait_agents_ready(&c).await;
    let ds: Api<DaemonSet> = Api::namespaced(c.client(), NAMESPACE);
    let env = ds
        .get(&format!("{RELEASE}-node"))
        .await
        .expect("DaemonSet")
        .spec
        .template
        .spec
        .expect("pod spec")
        .containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "RUST_LOG" && e.value.as_deref() == Some("debug")),
        "{env:?}"
    );
    let w = pods.get("writer").await.expect("writer still there");
    assert_eq!(
        w.metadata.uid, tenant_uid,
        "the tenant pod was not replaced"
    );
    assert_eq!(
        w.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    let after_upgrade = read();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        read() > after_upgrade && after_upgrade > before_upgrade,
        "the tenant kept writing through the upgrade"
    );

    // helm uninstall: docs/uninstall.md's list.
    let pv_count = pvs(&c).await.len();
    c.helm(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"]);
    let deadline = Instant::now() + crate::support::realnode::POD_TIMEOUT;
    while !agent_pods(&c).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "agent pods not gone after uninstall"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        ds.get_opt(&format!("{RELEASE}-node"))
            .await
            .expect("get")
            .is_none(),
        "DaemonSet removed"
    );
    let cms: Vec<String> = Api::<ConfigMap>::namespaced(c.client(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    assert!(cms.is_empty(), "ConfigMap removed: {cms:?}");
    let sas: Vec<String> = Api::<ServiceAccount>::namespaced(c.client(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n != "default")
        .collect();
    assert!(sas.is_empty(), "ServiceAccounts removed: {sas:?}");
    let sel = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    assert!(
        Api::<ClusterRole>::all(c.client())
            .list(&sel)
            .await
            .expect("list")
            .items
            .is_empty(),
        "ClusterRoles removed"
    );
    assert!(
        Api::<ClusterRoleBinding>::all(c.client())
            .list(&sel)
            .await
            .expect("list")
            .items
            .is_empty(),
        "ClusterRoleBindings removed"
    );
    assert!(
        !exists(&Api::<StorageClass>::all(c.client()), "local-storage").await,
        "StorageClass removed"
    );
    // What stays: PVs (Available and Bound), the CRD and LocalDisks, the ledger on each node, disks and data.
    assert_eq!(pvs(&c).await.len(), pv_count, "every PV stays");
    assert!(
        Api::<CustomResourceDefinition>::all(c.client())
            .get_opt("localdisks.localpv.io")
            .await
            .expect("get")
            .is_some(),
        "the CRD stays"
    );
    let disks_left = c.kubectl(&["get", "localdisks", "-o", "name"]);
    assert!(!disks_left.trim().is_empty(), "LocalDisks stay");
    for n in &c.nodes {
        assert!(
            n.dir.join("varlib/localpv").is_dir(),
            "{}: the ledger dir stays",
            n.name
        );
    }
    let after_uninstall = read();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        read() > after_uninstall,
        "the tenant keeps writing after uninstall"
    );
}
