//! A StatefulSet across both real nodes: each replica finds its own data again after its pod is deleted (and it
//! comes back on the same node, where its PV is); once scaled down and the claims deleted, the disks are wiped and
//! published again, and the next replicas find their volumes empty.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::common::*;
use crate::support::realnode::RealCluster;

/// Each replica: on first start writes its name to /data/owner; on every start records what it found.
const SCRIPT: &str = "if [ -f /data/owner ]; then echo \"found $(cat /data/owner)\" >> /data/history; \
                      else echo empty >> /data/history; hostname > /data/owner; fi; sync; \
                      trap 'exit 0' TERM; while true; do sleep 1; done";

fn statefulset(replicas: i32) -> StatefulSet {
    obj(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    // One replica per node, so both nodes serve a claim.
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                    "containers": [{
                        "name": "main",
                        "image": crate::support::realnode::images::BUSYBOX,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", SCRIPT],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local-storage",
                    "resources": {"requests": {"storage": "32Mi"}},
                },
            }],
        },
    }))
}

/// The history file on the host disk behind replica `pod`'s claim, and the node it is on.
async fn history(c: &RealCluster, ns: &str, pod: &str) -> (String, String) {
    let (_, pv) = claim_state(c, ns, &format!("data-{pod}")).await;
    let pv = pvs(c)
        .await
        .remove(&pv.expect("claim bound"))
        .expect("PV exists");
    let node = pv_node(&pv);
    let file = host_path(c, &node, &pv_path(&pv)).join("history");
    (std::fs::read_to_string(&file).unwrap_or_default(), node)
}

#[tokio::test(flavor = "multi_thread")]
async fn statefulset_replicas_keep_their_data_across_pod_deletion_and_find_wiped_disks_after_release()
 {
    let c = RealCluster::start(2).await;
    let vols = [
        c.tmpfs("node-1", "vol1", "64M"),
        c.tmpfs("node-2", "vol1", "64M"),
    ];
    install(&c, json!({})).await;
    let path = c.disk_root().join("disks/vol1").display().to_string();
    for node in ["node-1", "node-2"] {
        wait_pv(&c, node, &path, "Available").await;
    }
    let ns = c.plane.namespace("sts").await;
    let sets: Api<StatefulSet> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    create(&sets, &statefulset(2)).await;
    let mut nodes = Vec::new();
    for pod in ["web-0", "web-1"] {
        let (_, node) = wait_pod(&c, &ns, pod, &["Running"]).await;
        nodes.push(node);
    }
    nodes.sort();
    assert_eq!(nodes, ["node-1", "node-2"], "one replica per node");
    let first: Vec<(String, String)> = vec![
        history(&c, &ns, "web-0").await,
        history(&c, &ns, "web-1").await,
    ];
    for (h, _) in &first {
        assert_eq!(h, "empty\n");
    }

    // Pods deleted: the StatefulSet re-creates them; each lands where its PV is and reads its own data.
    for pod in ["web-0", "web-1"] {
        delete_pod(&c, &ns, pod).await;
    }
    for (i, pod) in ["web-0", "web-1"].iter().enumerate() {
        let (_, node) = wait_pod(&c, &ns, pod, &["Running"]).await;
        assert_eq!(node, first[i].1, "{pod} came back on the node of its PV");
        let (h, _) = eventually_history(&c, &ns, pod, 2).await;
        assert_eq!(
            h,
            format!("empty\nfound {pod}\n"),
            "{pod} read its own data"
        );
    }

    // Scaled down, claims deleted: each disk is wiped and published again.
    let uids: Vec<_> = pvs(&c)
        .await
        .values()
        .map(|p| p.metadata.uid.clone())
        .collect();
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await
    .expect("scaled down");
    for pod in ["web-0", "web-1"] {
        let deadline = std::time::Instant::now() + crate::support::realnode::POD_TIMEOUT;
        while pods.get_opt(pod).await.ok().flatten().is_some() {
            assert!(std::time::Instant::now() < deadline, "{pod} not gone");
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
        claims
            .delete(&format!("data-{pod}"), &DeleteParams::default())
            .await
            .expect("claim deleted");
    }
    for node in ["node-1", "node-2"] {
        let pv = wait_pv(&c, node, &path, "Available").await;
        assert!(
            !uids.contains(&pv.metadata.uid),
            "{node}: a new PV after the wipe"
        );
    }
    for v in &vols {
        let left: Vec<_> = std::fs::read_dir(v)
            .expect("disk readable")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{} wiped, found {left:?}", v.display());
    }
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .expect("scaled up");
    for pod in ["web-0", "web-1"] {
        wait_pod(&c, &ns, pod, &["Running"]).await;
        let (h, _) = eventually_history(&c, &ns, pod, 1).await;
        assert_eq!(h, "empty\n", "{pod}'s new claim starts on an empty volume");
    }
}

/// Waits until the replica's history has `lines` lines (the container writes it right after it starts).
async fn eventually_history(
    c: &RealCluster,
    ns: &str,
    pod: &str,
    lines: usize,
) -> (String, String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (h, node) = history(c, ns, pod).await;
        if h.lines().count() >= lines || std::time::Instant::now() > deadline {
            return (h, node);
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}
