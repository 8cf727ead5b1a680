//! The objects every extender benchmark sends or stores, as the API server serves them: kubelet-sized Nodes
//! (labels, conditions, addresses, capacity and 30 images with digests, about 8 KiB of JSON each; kube-scheduler
//! strips managedFields), PVs as the node agent publishes them, claims.
//!
//! Node `n<i>` also carries TopoLVM's free-space annotation (`capacity.topolvm.io/<device class>`, which
//! TopoLVM's node daemon writes and its scheduler extender reads): 60 GiB on even nodes, 200 GiB on odd ones,
//! the same split the localpv PVs and open-local's volume groups make (a 75Gi claim fits odd nodes only).
//! Nothing else reads it.

use serde_json::{Value, json};

use localpv_test_support::objects::Pv;

/// TopoLVM's annotation for the free space of the device class `ssd` on a node.
pub const TOPOLVM_CAPACITY: &str = "capacity.topolvm.io/ssd";

/// Free bytes TopoLVM's annotation reports on node `n<i>`.
pub fn topolvm_free_bytes(i: usize) -> u64 {
    if i.is_multiple_of(2) {
        60 << 30
    } else {
        200 << 30
    }
}

pub fn node_json(i: usize) -> Value {
    let name = format!("n{i}");
    let images: Vec<Value> = (0..30)
        .map(|k| {
            json!({"names": [
                format!("registry.example.com/team-{k}/service-{k}@sha256:{:064x}", i * 31 + k),
                format!("registry.example.com/team-{k}/service-{k}:v1.{k}.0"),
            ], "sizeBytes": 50_000_000 + k * 1_000_003})
        })
        .collect();
    let condition = |t: &str, s: &str| {
        json!({"type": t, "status": s, "lastHeartbeatTime": "2026-01-01T00:00:00Z",
               "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": format!("Kubelet{t}"),
               "message": format!("kubelet reports {t} is {s}")})
    };
    json!({
        "metadata": {
            "name": name, "uid": format!("00000000-0000-0000-0000-{i:012}"), "resourceVersion": "123456",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.2xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": format!("eu-west-1{}", ["a", "b", "c"][i % 3]),
                "node-role.kubernetes.io/worker": "", "example.com/pool": format!("pool-{}", i % 8),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                TOPOLVM_CAPACITY: topolvm_free_bytes(i).to_string(),
            },
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256, i % 256), "providerID": format!("aws:///eu-west-1a/i-{i:017x}")},
        "status": {
            "capacity": {"cpu": "8", "memory": "32101256Ki", "pods": "110", "ephemeral-storage": "203070420Ki"},
            "allocatable": {"cpu": "7910m", "memory": "31123456Ki", "pods": "110", "ephemeral-storage": "187149698605"},
            "conditions": [condition("MemoryPressure", "False"), condition("DiskPressure", "False"),
                           condition("PIDPressure", "False"), condition("Ready", "True")],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256, i % 256)},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"),
                         "bootID": format!("{i:032x}"), "kernelVersion": "6.8.0-1019-aws",
                         "osImage": "Ubuntu 24.04.1 LTS", "containerRuntimeVersion": "containerd://1.7.24",
                         "kubeletVersion": "v1.37.1", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64"},
            "images": images,
        },
    })
}

pub fn pv_json(name: &str, node: &str, size_gi: u64, claim: Option<&str>) -> Value {
    let pv = Pv::local(name, node)
        .capacity(&format!("{size_gi}Gi"))
        .class("local")
        .path(&format!("/mnt/localpv/local/{name}"))
        .label("localpv.io/node", node)
        .label("localpv.io/class", "local")
        .provisioned_by("localpv")
        .available();
    match claim {
        Some(c) => pv.claim("apps", c).json(),
        None => pv.json(),
    }
}

pub fn pvc_json(name: &str, size_gi: u64, volume: Option<&str>) -> Value {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "apps", "uid": format!("uid-{name}")},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                 "resources": {"requests": {"storage": format!("{size_gi}Gi")}}},
    });
    if let Some(pv) = volume {
        v["spec"]["volumeName"] = json!(pv);
    }
    v
}
