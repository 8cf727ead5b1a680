//! The agent's pod deleted in the middle of a wipe: the DaemonSet brings a new one, which finishes the wipe; the
//! disk is never published again before it is empty.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use crate::common::*;
use crate::support::realnode::{POD_TIMEOUT, RealCluster};

async fn agent_pod_on(c: &RealCluster, node: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(c.client(), NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/component=node"))
        .await
        .expect("agent pods list")
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_pod_deleted_mid_wipe_is_replaced_and_the_wipe_completes_before_the_disk_is_published()
 {
    let c = RealCluster::start(2).await;
    let vol = c.tmpfs("node-1", "vol1", "64M");
    // The class's cleaner runs after the in-process removal and takes a while: the pod is deleted during it.
    install(
        &c,
        json!({"classes": [{"name": "local-storage", "hostDir": c.disk_root().join("disks"),
                            "fsCleanerCommand": ["sh", "-c", "sleep 8"],
                            "storageClass": {"reclaimPolicy": "Delete"}}]}),
    )
    .await;
    let path = c.disk_root().join("disks/vol1").display().to_string();
    let pv = wait_pv(&c, "node-1", &path, "Available").await;
    let name = pv.metadata.name.clone().expect("PV has a name");
    let ns = c.plane.namespace("midwipe").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(&claims, &claim("data", "local-storage", "16Mi", false)).await;
    let write = "mkdir -p /data/app && echo tenant-secret > /data/app/secret.txt && sync";
    create(&pods, &busybox_pod("tenant", write, "data", false, None)).await;
    let (phase, _) = wait_pod(&c, &ns, "tenant", &["Succeeded", "Failed"]).await;
    assert_eq!(phase, "Succeeded");
    assert!(
        vol.join("app/secret.txt").exists(),
        "the tenant wrote to node-1's disk"
    );
    delete_pod(&c, &ns, "tenant").await;
    claims
        .delete("data", &DeleteParams::default())
        .await
        .expect("claim deleted");

    let pvs: Api<PersistentVolume> = Api::all(c.client());
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let p = pvs.get(&name).await.expect("PV still there while released");
        let ann = p.metadata.annotations.unwrap_or_default();
        if ann.get("localpv.io/wipe-phase").map(String::as_str) == Some("Wiping") {
            break;
        }
        assert!(Instant::now() < deadline, "wipe never started: {ann:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let old = agent_pod_on(&c, "node-1")
        .await
        .expect("agent pod on node-1");
    let old_uid = old.metadata.uid.clone();
    // Grace period 0: the kubelet kills the agent at once, so only a new pod can finish the wipe.
    Api::<Pod>::namespaced(c.client(), NAMESPACE)
        .delete(
            old.metadata.name.as_deref().expect("named"),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .expect("agent pod deleted");

    let survivor = pvs
        .get(&name)
        .await
        .expect("a crash mid-wipe does not delete the PV");
    assert_eq!(survivor.metadata.uid, pv.metadata.uid);
    assert_eq!(pv_phase(&survivor), "Released");

    // Until the disk is published again, nothing may see it as Available with data on it.
    let deadline = Instant::now() + POD_TIMEOUT;
    let mut replaced = false;
    loop {
        let all = pvs
            .list(&ListParams::default())
            .await
            .expect("PVs list")
            .items;
        if let Some(p) = all
            .iter()
            .find(|p| pv_path(p) == path && pv_phase(p) == "Available")
        {
            assert_ne!(
                p.metadata.uid, pv.metadata.uid,
                "the released PV itself never turns Available"
            );
            let left: Vec<_> = std::fs::read_dir(&vol)
                .expect("disk readable")
                .flatten()
                .map(|e| e.file_name())
                .collect();
            assert!(left.is_empty(), "published again with {left:?} on it");
            break;
        }
        replaced |= agent_pod_on(&c, "node-1")
            .await
            .is_some_and(|p| p.metadata.uid != old_uid);
        assert!(
            Instant::now() < deadline,
            "disk not published again after {POD_TIMEOUT:?}\n{}",
            c.container_logs(NAMESPACE, RELEASE)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        replaced,
        "the disk was published by a new agent pod, made by the DaemonSet"
    );
    wait_agents_ready(&c).await;
    assert!(!vol.join("app").exists(), "the tenant's files are gone");
}
