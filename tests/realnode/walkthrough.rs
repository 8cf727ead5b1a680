//! The classic local-PV walkthrough on real nodes (REFERENCE section 8): a WaitForFirstConsumer class, a claim that
//! stays Pending, a pod that may only run on node-2; the claim binds to node-2's PV and the file the pod writes is
//! on node-2's disk on the host, and still there for the next pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::Api;
use serde_json::json;

use crate::common::*;
use crate::support::realnode::RealCluster;

#[tokio::test(flavor = "multi_thread")]
async fn pod_pinned_to_node_2_gets_node_2s_disk_and_its_index_html_lands_there() {
    let c = RealCluster::start(2).await;
    for node in ["node-1", "node-2"] {
        for vol in ["vol1", "vol2"] {
            c.tmpfs(node, vol, "64M");
        }
    }
    install(&c, json!({})).await;
    let disks = c.disk_root().join("disks");
    for node in ["node-1", "node-2"] {
        for vol in ["vol1", "vol2"] {
            wait_pv(
                &c,
                node,
                &disks.join(vol).display().to_string(),
                "Available",
            )
            .await;
        }
    }
    let ns = c.plane.namespace("walkthrough").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(
        &claims,
        &claim("example-local-claim", "local-storage", "32Mi", false),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        claim_state(&c, &ns, "example-local-claim").await,
        ("Pending".to_string(), None),
        "WaitForFirstConsumer: no binding before a pod uses the claim"
    );
    let write = "echo \"hello from $(hostname)\" > /data/index.html && sync";
    create(
        &pods,
        &busybox_pod(
            "example-pv-pod",
            write,
            "example-local-claim",
            false,
            Some("node-2"),
        ),
    )
    .await;
    let (phase, node) = wait_pod(&c, &ns, "example-pv-pod", &["Succeeded", "Failed"]).await;
    assert_eq!((phase.as_str(), node.as_str()), ("Succeeded", "node-2"));
    let (phase, pv_name) = claim_state(&c, &ns, "example-local-claim").await;
    assert_eq!(phase, "Bound");
    let pv = pvs(&c)
        .await
        .remove(&pv_name.expect("bound claim names its PV"))
        .expect("PV exists");
    assert_eq!(pv_node(&pv), "node-2", "the claim bound to node-2's PV");
    let on_host = host_path(&c, "node-2", &pv_path(&pv)).join("index.html");
    assert_eq!(
        std::fs::read_to_string(&on_host).unwrap_or_else(|e| panic!("{}: {e}", on_host.display())),
        "hello from example-pv-pod\n"
    );
    for vol in ["vol1", "vol2"] {
        let other = c
            .node("node-1")
            .disks
            .join("disks")
            .join(vol)
            .join("index.html");
        assert!(!other.exists(), "{} must not exist", other.display());
    }
    // A new pod on the same claim reads what the first one wrote.
    delete_pod(&c, &ns, "example-pv-pod").await;
    let read = "cat /data/index.html > /data/seen-by-second-pod";
    create(
        &pods,
        &busybox_pod("second", read, "example-local-claim", false, None),
    )
    .await;
    let (phase, node) = wait_pod(&c, &ns, "second", &["Succeeded", "Failed"]).await;
    assert_eq!((phase.as_str(), node.as_str()), ("Succeeded", "node-2"));
    let seen = on_host.with_file_name("seen-by-second-pod");
    assert_eq!(
        std::fs::read_to_string(&seen).expect("second pod's file on the host"),
        "hello from example-pv-pod\n"
    );
}
