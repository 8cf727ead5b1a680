//! Node objects that stand in for machines: enough for kube-scheduler to place pods without a kubelet.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Creates `name` with the `kubernetes.io/hostname` label (plus `labels`), Ready, schedulable, with room for pods.
///
/// NB: admission adds a `node.kubernetes.io/not-ready` NoSchedule taint to new nodes, which the node lifecycle
/// controller would lift once the kubelet reports Ready. There is no kubelet here, so the taint is removed and the
/// status written directly.
pub async fn create_node(client: &kube::Client, name: &str, labels: &[(&str, &str)]) -> Node {
    let api: Api<Node> = Api::all(client.clone());
    let mut all = serde_json::Map::new();
    all.insert("kubernetes.io/hostname".into(), json!(name));
    all.insert("kubernetes.io/os".into(), json!("linux"));
    for (k, v) in labels {
        all.insert((*k).into(), json!(v));
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all},
        "spec": {"taints": []},
    }))
    .expect("node literal is valid");
    api.create(&PostParams::default(), &node)
        .await
        .unwrap_or_else(|e| panic!("failed to create node {name}: {e}"));
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": null}})),
    )
    .await
    .unwrap_or_else(|e| panic!("failed to untaint node {name}: {e}"));
    set_ready(client, name).await
}

/// Writes a Ready status with capacity (4 CPUs, 16Gi memory, 110 pods), as a kubelet would.
pub async fn set_ready(client: &kube::Client, name: &str) -> Node {
    let api: Api<Node> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let resources =
        json!({"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "stand-in node for tests", "lastHeartbeatTime": now, "lastTransitionTime": now,
        }],
        "nodeInfo": {
            "architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v0.0.0-standin",
            "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
            "machineID": "", "osImage": "", "systemUUID": "",
        },
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap_or_else(|e| panic!("failed to set status of node {name}: {e}"))
}
