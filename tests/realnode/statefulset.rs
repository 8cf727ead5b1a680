//! A StatefulSet across both real nodes: each replica finds its own data again after its pod is deleted (and it
//! comes back on the same node, where its PV is); once scaled down and the claims deleted, the disks are wiped and
//! published again, and the next replicas find their volumes empty.

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use serde_json::json;

use crate::common::*;
use crate::support::realnode::RealCluster;

/// Each replica: on first start writes its name to /data/owner; on every start records what it found.
const SCRIPT: &str = "if [ -f /data/owner ]; then echo \"found $(cat /data/owner)\" >> /data/history; \
                      else echo empty >> /data/history; hostname > /data/owner; fi; sync; \
                      trap 'exit 0' TERM; while true; do sleep 1; done";

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
    create(&sets, &statefulset("web", 2, SCRIPT)).await;
    let mut nodes = Vec::new();
    for pod in ["web-0", "web-1"] {
        let (_, node) = wait_pod(&c, &ns, pod, &["Running"]).await;
        nodes.push(node);
    }
    nodes.sort();
    assert_eq!(nodes, ["node-1", "node-2"], "one replica per node");
    let first: Vec<(String, String)> = vec![
        replica_history(&c, &ns, "web-0", 1).await,
        replica_history(&c, &ns, "web-1", 1).await,
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
        let (h, _) = replica_history(&c, &ns, pod, 2).await;
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
    scale_down_and_delete_claims(&c, &ns, "web", &["web-0", "web-1"]).await;
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
    scale(&c, &ns, "web", 2).await;
    for pod in ["web-0", "web-1"] {
        wait_pod(&c, &ns, pod, &["Running"]).await;
        let (h, _) = replica_history(&c, &ns, pod, 1).await;
        assert_eq!(h, "empty\n", "{pod}'s new claim starts on an empty volume");
    }
}
