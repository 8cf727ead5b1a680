//! The startup taint on real kubelets (issue 38, point 3): node-1 registers with the reference chart's default
//! `provisionerNotReadyNodeTaintKey` (as Karpenter's `startupTaints` would put it there) and a taint of its own. A
//! pod with a local claim pinned to node-1 stays Pending; the chart, installed with `removeNodeNotReadyTaint`,
//! schedules the agent there anyway (its toleration), and the agent removes that one taint only once node-1's disks
//! have their PVs; the pod then runs on node-1 and writes to its disk. node-2, never tainted, is left as it was.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::Api;
use serde_json::json;

use crate::common::*;
use crate::support::realnode::{POD_TIMEOUT, RealCluster};

const STARTUP: &str = "sig-storage-local-static-provisioner/agent-not-ready";

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| t.key.clone())
        .collect()
}

/// When the agent's field manager last wrote the Node (second resolution), from its managed fields.
fn untainted_at(node: &Node) -> Option<k8s_openapi::jiff::Timestamp> {
    node.metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|m| m.manager.as_deref() == Some("localpv-node"))?
        .time
        .as_ref()
        .map(|t| t.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_registered_with_the_startup_taint_takes_pods_once_its_disks_are_published() {
    let tainted = [
        (
            1,
            "sig-storage-local-static-provisioner/agent-not-ready:NoSchedule",
        ),
        (1, "example.com/kept=yes:PreferNoSchedule"),
    ];
    let c = RealCluster::start_tainted(2, &tainted).await;
    let nodes: Api<Node> = Api::all(c.client());
    let node1 = nodes.get("node-1").await.expect("node-1");
    assert!(
        taint_keys(&node1).contains(&STARTUP.to_string()),
        "the kubelet registered node-1 with the startup taint: {:?}",
        taint_keys(&node1)
    );
    for vol in ["vol1", "vol2"] {
        c.tmpfs("node-1", vol, "64M");
    }
    c.tmpfs("node-2", "vol1", "64M");

    c.kubectl(&["apply", "-f", "config/manifests/namespace.yaml"]);
    let ns = c.plane.namespace("startup-taint").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(&claims, &claim("data", "local-storage", "32Mi", false)).await;
    let write = "echo written on $(hostname) > /data/file && sync";
    create(
        &pods,
        &busybox_pod("first", write, "data", false, Some("node-1")),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pending = pods.get("first").await.expect("the pod");
    assert_eq!(
        pending.spec.as_ref().and_then(|s| s.node_name.clone()),
        None,
        "no node takes the pod while node-1 is tainted and node-2 has no matching PV"
    );

    helm_install(&c, json!({"removeNodeNotReadyTaint": true}));
    let deadline = Instant::now() + POD_TIMEOUT;
    let node1 = loop {
        let n = nodes.get("node-1").await.expect("node-1");
        if !taint_keys(&n).contains(&STARTUP.to_string()) {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "node-1 still has the startup taint after {POD_TIMEOUT:?}\n{}",
            c.container_logs(NAMESPACE, RELEASE)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The taint went after node-1's PVs were there: listed now, and created no later than the patch.
    let at = untainted_at(&node1).expect("the agent's patch is in node-1's managed fields");
    let all = pvs(&c).await;
    let disks = c.disk_root().join("disks");
    for vol in ["vol1", "vol2"] {
        let path = disks.join(vol).display().to_string();
        let pv = all
            .values()
            .find(|p| pv_node(p) == "node-1" && pv_path(p) == path)
            .unwrap_or_else(|| panic!("no PV for {path} on node-1 when the taint went"));
        let created = pv.metadata.creation_timestamp.as_ref().expect("created").0;
        assert!(
            created <= at,
            "{path}: PV created {created}, taint removed {at}"
        );
    }
    assert_eq!(
        taint_keys(&node1),
        ["example.com/kept"],
        "only the startup taint goes"
    );

    wait_agents_ready(&c).await;
    let (phase, node) = wait_pod(&c, &ns, "first", &["Succeeded", "Failed"]).await;
    assert_eq!((phase.as_str(), node.as_str()), ("Succeeded", "node-1"));
    let (_, pv_name) = claim_state(&c, &ns, "data").await;
    let pv = pvs(&c)
        .await
        .remove(&pv_name.expect("the claim is bound"))
        .expect("its PV");
    let file = host_path(&c, "node-1", &pv_path(&pv)).join("file");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
        "written on first\n"
    );
    let node2 = nodes.get("node-2").await.expect("node-2");
    assert_eq!(taint_keys(&node2), Vec::<String>::new(), "node-2 untouched");
    assert_eq!(
        untainted_at(&node2),
        None,
        "the agent on node-2 never wrote its Node"
    );
}
