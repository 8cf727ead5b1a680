//! The cluster every extender reads, on the harness's control plane, with what each needs to decide:
//!
//! - localpv: PVs as its node agent publishes them, 10 per node, all Available: 10 to 100 GiB on odd nodes, 7 to
//!   70 GiB on even ones (so a 75Gi claim fits odd nodes only, found after scanning every PV of an even node);
//!   the class `local` (no provisioner, WaitForFirstConsumer); the LocalDisk CRD its clean-up watches.
//! - TopoLVM: nothing from the cluster; its free-space annotation on each Node (see `common::objects`) and the
//!   pod's request annotation, both in the request body.
//! - open-local: its CRDs (NodeLocalStorage, VolumeSnapshot*), one NodeLocalStorage per node with one volume
//!   group `pool` of 60 GiB free on even nodes and 200 GiB on odd ones (what its node agent reports), and its
//!   chart's LVM class `open-local-lvm`.
//!
//! Claims in namespace `apps`: `fits` (8Gi) and `data` (75Gi) of `local`, `ol-fits` and `ol-data` of
//! `open-local-lvm` (the same sizes). Every request's pod holds one claim of each extender's class and TopoLVM's
//! annotation for the same size, so the three read the same body and each decides on its own part of it.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::common::objects::{node_json, pv_json, pvc_json};
use crate::support::agent::wait_established;
use crate::support::cluster::ControlPlane;

pub const PVS_PER_NODE: usize = 10;
/// Requests in flight while populating: enough to keep the API server busy, few enough for etcd on 2 cores.
const IN_FLIGHT: usize = 32;

/// PV `j` of node `i`, in GiB (see the module doc).
pub fn pv_size_gi(i: usize, j: usize) -> u64 {
    let step = if i.is_multiple_of(2) { 7 } else { 10 };
    (j as u64 + 1) * step
}

/// Free bytes of open-local's volume group on node `i`.
fn vg_free_bytes(i: usize) -> u64 {
    if i.is_multiple_of(2) {
        60 << 30
    } else {
        200 << 30
    }
}

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("bench object literal is valid")
}

/// Runs `make(i)` for `range` with `IN_FLIGHT` requests at a time.
async fn each<F, Fut>(range: std::ops::Range<usize>, make: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(range)
        .map(make)
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
}

/// Classes, claims, CRDs: everything but the per-node objects.
pub async fn base(cp: &ControlPlane, crds: &Path) {
    let client = cp.client();
    crate::support::agent::install_crd(cp).await;
    install_crds(cp, crds).await;
    let ns: Namespace = obj(json!({"metadata": {"name": "apps"}}));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace apps created");
    let classes = [
        json!({"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
               "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"}),
        // As open-local's chart installs it.
        json!({"metadata": {"name": "open-local-lvm"}, "provisioner": "local.csi.aliyun.com",
               "parameters": {"volumeType": "LVM", "csi.storage.k8s.io/fstype": "ext4"},
               "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
               "allowVolumeExpansion": true}),
    ];
    for class in classes {
        Api::<StorageClass>::all(client.clone())
            .create(&PostParams::default(), &obj(class))
            .await
            .expect("class created");
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client, "apps");
    for (name, size, class) in [
        ("fits", 8, "local"),
        ("data", 75, "local"),
        ("ol-fits", 8, "open-local-lvm"),
        ("ol-data", 75, "open-local-lvm"),
    ] {
        let mut pvc = pvc_json(name, size, None);
        pvc["spec"]["storageClassName"] = json!(class);
        pvcs.create(&PostParams::default(), &obj(pvc))
            .await
            .expect("claim created");
    }
}

/// open-local's CRDs from its chart. NB: NodeLocalStorage is installed without its status subresource, so one
/// create carries the status its node agent would write with a second request; its extender only reads it.
async fn install_crds(cp: &ControlPlane, dir: &Path) {
    let api: Api<CustomResourceDefinition> = Api::all(cp.client());
    let mut names = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("open-local's CRDs at {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("CRD file is readable");
        let mut crd: Value = serde_yaml_ng::from_str(&text)
            .unwrap_or_else(|e| panic!("{} parses: {e}", path.display()));
        if let Some(obj) = crd.as_object_mut() {
            obj.remove("status");
        }
        if crd["spec"]["names"]["kind"] == "NodeLocalStorage" {
            for v in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
                v.as_object_mut().map(|o| o.remove("subresources"));
            }
        }
        let crd: CustomResourceDefinition = obj(crd);
        names.push(crd.metadata.name.clone().expect("CRD has a name"));
        api.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("failed to create {}: {e}", path.display()));
    }
    for name in names {
        wait_established(cp, &name, Duration::from_secs(60)).await;
    }
}

/// Nodes `range` and their NodeLocalStorages.
pub async fn nodes(cp: &ControlPlane, range: std::ops::Range<usize>) {
    let nodes: Api<Node> = Api::all(cp.client());
    let gvk = GroupVersionKind::gvk("csi.aliyun.com", "v1alpha1", "NodeLocalStorage");
    let nls: Api<DynamicObject> = Api::all_with(cp.client(), &ApiResource::from_gvk(&gvk));
    each(range, |i| {
        let (nodes, nls) = (nodes.clone(), nls.clone());
        async move {
            let mut node = node_json(i);
            node["metadata"]
                .as_object_mut()
                .expect("node metadata")
                .retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
            nodes
                .create(&PostParams::default(), &obj(node))
                .await
                .expect("node created");
            let free = vg_free_bytes(i);
            let storage = json!({
                "apiVersion": "csi.aliyun.com/v1alpha1", "kind": "NodeLocalStorage",
                "metadata": {"name": format!("n{i}")},
                "spec": {"nodeName": format!("n{i}"),
                         "listConfig": {"vgs": {"include": ["pool"]}}},
                "status": {
                    "nodeStorageInfo": {"volumeGroups": [{
                        "name": "pool", "physicalVolumes": ["/dev/vdb"],
                        "total": 500u64 << 30, "available": free, "allocatable": free,
                        "condition": "DiskReady"}]},
                    "filteredStorageInfo": {"volumeGroups": ["pool"]},
                },
            });
            nls.create(&PostParams::default(), &obj(storage))
                .await
                .expect("NodeLocalStorage created");
        }
    })
    .await;
}

/// 10 Available PVs on each node of `range` (create, then the status the PV controller would write).
pub async fn volumes(cp: &ControlPlane, range: std::ops::Range<usize>) {
    let pvs: Api<PersistentVolume> = Api::all(cp.client());
    let range = range.start * PVS_PER_NODE..range.end * PVS_PER_NODE;
    each(range, |k| {
        let pvs = pvs.clone();
        async move {
            let (i, j) = (k / PVS_PER_NODE, k % PVS_PER_NODE);
            let (node, name) = (format!("n{i}"), format!("pv-n{i}-{j}"));
            let mut pv = pv_json(&name, &node, pv_size_gi(i, j), None);
            pv.as_object_mut().map(|o| o.remove("status"));
            pvs.create(&PostParams::default(), &obj(pv))
                .await
                .expect("PV created");
            let status = json!({"status": {"phase": "Available"}});
            pvs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .expect("PV status written");
        }
    })
    .await;
}
