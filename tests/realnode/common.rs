//! Helpers shared by the real-node scenarios: installing the chart, waiting for real pods and for PVs.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::support::realnode::{POD_TIMEOUT, RealCluster};

pub const NAMESPACE: &str = "localpv-system";
pub const RELEASE: &str = "localpv";

pub fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object literal is valid")
}

/// Values for a release on this cluster: the locally built image (never pulled), a Filesystem class over
/// `R/mnt/disks` and a Block class over `R/mnt/blocks`, the extender off unless `extra` turns it on.
pub fn values(c: &RealCluster, extra: Value) -> PathBuf {
    let root = c.disk_root();
    let mut v = json!({
        "image": {"repository": crate::support::realnode::images::LOCALPV_REPOSITORY,
                  "tag": c.images.localpv_tag, "pullPolicy": "Never"},
        "extender": {"enabled": false},
        "classes": [
            {"name": "local-storage", "hostDir": root.join("disks"), "volumeMode": "Filesystem",
             "storageClass": {"reclaimPolicy": "Delete"}},
            {"name": "local-block", "hostDir": root.join("blocks"), "volumeMode": "Block",
             "storageClass": {"reclaimPolicy": "Delete"}},
        ],
    });
    merge(&mut v, extra);
    let path = c
        .run_dir()
        .join(format!("values-{}.yaml", crate::support::cluster::unique()));
    fs::write(
        &path,
        serde_yaml_ng::to_string(&v).expect("values serialise"),
    )
    .expect("values written");
    path
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Installs as docs/install.md says: the namespace from `config/manifests/namespace.yaml` (Pod Security level
/// `privileged`), then `helm install` of charts/localpv with `values`; waits for the agent on every node.
pub async fn install(c: &RealCluster, extra: Value) {
    c.kubectl(&["apply", "-f", "config/manifests/namespace.yaml"]);
    helm_install(c, extra);
    wait_agents_ready(c).await;
}

/// `helm install` into `localpv-system`, which must exist.
pub fn helm_install(c: &RealCluster, extra: Value) {
    helm_release(c, "install", extra);
}

/// `helm <verb>` (install, upgrade) of the release from charts/localpv with `values(c, extra)`.
pub fn helm_release(c: &RealCluster, verb: &str, extra: Value) {
    let values = values(c, extra);
    helm_with_files(c, verb, &[&values]);
}

/// `helm <verb>` of the release from charts/localpv with these values files, later ones winning.
pub fn helm_with_files(c: &RealCluster, verb: &str, files: &[&std::path::Path]) {
    let mut args: Vec<String> = [verb, RELEASE, "charts/localpv", "--namespace", NAMESPACE]
        .map(str::to_string)
        .to_vec();
    for f in files {
        args.extend(["-f".to_string(), f.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    c.helm(&args);
}

/// Waits until the node DaemonSet has one Ready, up-to-date pod per node.
pub async fn wait_agents_ready(c: &RealCluster) {
    wait_daemonset(c, NAMESPACE, &format!("{RELEASE}-node"), RELEASE).await;
}

/// Waits until DaemonSet `ns/name` has one Ready, up-to-date and available pod per node; on failure shows the logs
/// of the containers of pods named `pod_prefix`*.
pub async fn wait_daemonset(c: &RealCluster, ns: &str, name: &str, pod_prefix: &str) {
    let api: Api<DaemonSet> = Api::namespaced(c.client(), ns);
    let want = c.nodes.len() as i32;
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let ds = api.get_opt(name).await.ok().flatten();
        let st = ds.as_ref().and_then(|d| d.status.clone());
        let gen_ok = ds.as_ref().is_some_and(|d| {
            d.metadata.generation == d.status.as_ref().and_then(|s| s.observed_generation)
        });
        if let Some(s) = &st
            && gen_ok
            && s.number_ready == want
            && s.updated_number_scheduled == Some(want)
            && s.number_available == Some(want)
        {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "DaemonSet {ns}/{name} not Ready on {want} nodes after {POD_TIMEOUT:?}: {st:?}\n{}",
                c.container_logs(ns, pod_prefix)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether the object `name` exists.
pub async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("get").is_some()
}

/// Every PV, by name.
pub async fn pvs(c: &RealCluster) -> BTreeMap<String, PersistentVolume> {
    Api::<PersistentVolume>::all(c.client())
        .list(&ListParams::default())
        .await
        .expect("PVs list")
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect()
}

/// The node a PV is pinned to (its `kubernetes.io/hostname` affinity value).
pub fn pv_node(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .and_then(|r| r.node_selector_terms.first())
        .and_then(|t| t.match_expressions.as_ref())
        .and_then(|e| e.iter().find(|e| e.key == "kubernetes.io/hostname"))
        .and_then(|e| e.values.as_ref())
        .and_then(|v| v.first().cloned())
        .unwrap_or_default()
}

pub fn pv_path(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.local.as_ref())
        .map(|l| l.path.clone())
        .unwrap_or_default()
}

pub fn pv_phase(pv: &PersistentVolume) -> String {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Waits until a PV with local path `path` pinned to `node` is in `phase`; returns it.
pub async fn wait_pv(c: &RealCluster, node: &str, path: &str, phase: &str) -> PersistentVolume {
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let all = pvs(c).await;
        if let Some(pv) = all
            .values()
            .find(|p| pv_node(p) == node && pv_path(p) == path && pv_phase(p) == phase)
        {
            return pv.clone();
        }
        if Instant::now() > deadline {
            let seen: Vec<_> = all
                .values()
                .map(|p| (pv_node(p), pv_path(p), pv_phase(p)))
                .collect();
            panic!(
                "no {phase} PV for {path} on {node} after {POD_TIMEOUT:?}; PVs: {seen:#?}\n{}",
                c.container_logs(NAMESPACE, RELEASE)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A busybox pod running `script` (sh -c) with claim `claim` at `/data` (or as block device `/dev/xvda`).
pub fn busybox_pod(name: &str, script: &str, claim: &str, block: bool, node: Option<&str>) -> Pod {
    let mut container = json!({
        "name": "main",
        "image": crate::support::realnode::images::BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    });
    if block {
        container["volumeDevices"] = json!([{"name": "data", "devicePath": "/dev/xvda"}]);
    } else {
        container["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    }
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    });
    if let Some(n) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    obj(json!({"metadata": {"name": name}, "spec": spec}))
}

pub fn claim(name: &str, class: &str, size: &str, block: bool) -> PersistentVolumeClaim {
    obj(json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeMode": if block { "Block" } else { "Filesystem" },
            "resources": {"requests": {"storage": size}},
        },
    }))
}

pub async fn create<K>(api: &Api<K>, o: &K)
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), o)
        .await
        .unwrap_or_else(|e| panic!("create failed: {e}"));
}

/// Waits until the pod's phase is one of `phases`; returns (phase, node).
pub async fn wait_pod(c: &RealCluster, ns: &str, name: &str, phases: &[&str]) -> (String, String) {
    let api: Api<Pod> = Api::namespaced(c.client(), ns);
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let p = api.get_opt(name).await.ok().flatten();
        let phase = p
            .as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let node = p
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if phases.contains(&phase.as_str()) {
            return (phase, node);
        }
        if Instant::now() > deadline {
            panic!(
                "pod {ns}/{name} not in {phases:?} after {POD_TIMEOUT:?}: {:#?}\n{}",
                p.and_then(|p| p.status),
                c.container_logs(ns, name)
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Deletes a pod and waits until it is gone (its volumes unmounted by the kubelet); a pod of the same name made
/// again by a controller (another UID) counts as gone.
pub async fn delete_pod(c: &RealCluster, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(c.client(), ns);
    let uid = api
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|p| p.metadata.uid);
    let _ = api.delete(name, &DeleteParams::default()).await;
    let deadline = Instant::now() + POD_TIMEOUT;
    while let Some(p) = api.get_opt(name).await.ok().flatten() {
        if p.metadata.uid != uid {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pod {ns}/{name} not gone after {POD_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The claim's phase and bound PV.
pub async fn claim_state(c: &RealCluster, ns: &str, name: &str) -> (String, Option<String>) {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(c.client(), ns)
        .get(name)
        .await
        .expect("PVC exists");
    (
        pvc.status.and_then(|s| s.phase).unwrap_or_default(),
        pvc.spec.and_then(|s| s.volume_name),
    )
}

/// The host path of the disk behind a node-side path `R/mnt/...` on `node` (`R/node-n/mnt/...`).
pub fn host_path(c: &RealCluster, node: &str, node_path: &str) -> PathBuf {
    let rel = std::path::Path::new(node_path)
        .strip_prefix(c.disk_root())
        .unwrap_or_else(|_| panic!("{node_path} is not under {}", c.disk_root().display()));
    c.node(node).disks.join(rel)
}

/// A StatefulSet `name` (pods labelled `app: <name>`) of busybox replicas running `script` (sh -c), each with a 32Mi
/// claim `data` of class local-storage at /data, one replica per node so both nodes serve a claim.
pub fn statefulset(name: &str, replicas: i32, script: &str) -> StatefulSet {
    obj(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                    "containers": [{
                        "name": "main",
                        "image": crate::support::realnode::images::BUSYBOX,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", script],
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

/// Scales StatefulSet `ns/name` to `replicas`.
pub async fn scale(c: &RealCluster, ns: &str, name: &str, replicas: i32) {
    Api::<StatefulSet>::namespaced(c.client(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{name} not scaled to {replicas}: {e}"));
}

/// Scales StatefulSet `ns/name` to 0, then deletes the claim of each of `pods` once that pod is gone.
pub async fn scale_down_and_delete_claims(c: &RealCluster, ns: &str, name: &str, pods: &[&str]) {
    scale(c, ns, name, 0).await;
    let api: Api<Pod> = Api::namespaced(c.client(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), ns);
    for pod in pods {
        let deadline = Instant::now() + POD_TIMEOUT;
        while api.get_opt(pod).await.ok().flatten().is_some() {
            assert!(Instant::now() < deadline, "{pod} not gone");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        claims
            .delete(&format!("data-{pod}"), &DeleteParams::default())
            .await
            .expect("claim deleted");
    }
}

/// The host directory of the disk behind replica `pod`'s claim (`data-<pod>`), and the node it is on.
pub async fn replica_disk(c: &RealCluster, ns: &str, pod: &str) -> (PathBuf, String) {
    let (_, pv) = claim_state(c, ns, &format!("data-{pod}")).await;
    let pv = pvs(c)
        .await
        .remove(&pv.expect("claim bound"))
        .expect("PV exists");
    let node = pv_node(&pv);
    (host_path(c, &node, &pv_path(&pv)), node)
}

/// The replica's `history` file once it has `lines` lines (its container writes one as it starts), or as it is
/// after 30 s; and the node the replica's disk is on.
pub async fn replica_history(
    c: &RealCluster,
    ns: &str,
    pod: &str,
    lines: usize,
) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (disk, node) = replica_disk(c, ns, pod).await;
        let history = fs::read_to_string(disk.join("history")).unwrap_or_default();
        if history.lines().count() >= lines || Instant::now() > deadline {
            return (history, node);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
