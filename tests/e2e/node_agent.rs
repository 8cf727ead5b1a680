//! The node agent against the real control plane: discovery to Available PVs, delayed binding through them,
//! mounts coming and going, adoption of the reference provisioner's PVs, and quiet restarts.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use localpv::inventory::{LocalDisk, LocalDiskPhase};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::support::agent::{Agent, audited};
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;

pub fn obj<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("test object literal is valid")
}

pub async fn local_storage_class(client: &kube::Client, name: &str, policy: &str) {
    let sc: StorageClass = obj(json!({
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": policy,
    }));
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("class created");
}

/// A plane started with `opts`, the LocalDisk CRD, a StorageClass per `(name, reclaim policy)`, the stand-in
/// Nodes `nodes` and a namespace named after `ns`; with an agent (not started) for `nodes[0]` over `classes`.
pub async fn plane_with_agent(
    opts: Options,
    ns: &str,
    policies: &[(&str, &str)],
    nodes: &[&str],
    classes: &[(&str, &str, &str)],
) -> (ControlPlane, String, Agent) {
    let cp = ControlPlane::start(opts).await;
    let client = cp.client();
    let ns = cp.namespace(ns).await;
    crate::support::agent::install_crd(&cp).await;
    for (class, policy) in policies {
        local_storage_class(&client, class, policy).await;
    }
    for node in nodes {
        create_node(&client, node, &[]).await;
    }
    let agent = Agent::with_classes(&cp, nodes[0], classes);
    (cp, ns, agent)
}

/// A plane with the PV controller, namespace `ns`, node-1 and its agent (not started) with one Delete class
/// `local-storage` on `<plane>/hosts/node-1/disks`: the setup of most attack tests.
pub async fn one_class_plane(ns: &str) -> (ControlPlane, String, Agent) {
    let class = "local-storage";
    plane_with_agent(
        Options {
            controller_manager: true,
            ..Default::default()
        },
        ns,
        &[(class, "Delete")],
        &["node-1"],
        &[(class, "disks", "")],
    )
    .await
}

/// Waits up to `within` for a PV of node-1 at `path` other than `old`, in phase Available (a volume recycled).
pub async fn fresh_pv_at(
    client: &kube::Client,
    path: &Path,
    old: &PersistentVolume,
    within: Duration,
) {
    let path = path.display().to_string();
    let uid = |pv: &PersistentVolume| pv.metadata.uid.clone().unwrap_or_default();
    eventually(
        &format!("{path} to come back as a new Available PV"),
        within,
        || async {
            match pvs_of(client, "node-1").await.get(&path) {
                Some(pv) if uid(pv) != uid(old) && phase(pv) == "Available" => Ok(()),
                other => Err(format!("{:?}", other.map(|p| (uid(p), phase(p))))),
            }
        },
    )
    .await;
}

/// This node's PVs by `spec.local.path`, from the `localpv.io/node` label.
pub async fn pvs_of(client: &kube::Client, node: &str) -> BTreeMap<String, PersistentVolume> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default().labels(&format!("localpv.io/node={node}")))
        .await
        .expect("PV list");
    list.items
        .into_iter()
        .map(|pv| {
            (
                pv.spec
                    .as_ref()
                    .and_then(|s| s.local.as_ref())
                    .map(|l| l.path.clone())
                    .unwrap_or_default(),
                pv,
            )
        })
        .collect()
}

pub fn phase(pv: &PersistentVolume) -> String {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Waits until `node` has exactly PVs for `paths`, all in phase `want`.
pub async fn wait_pvs(
    client: &kube::Client,
    node: &str,
    paths: &[String],
    want: &str,
) -> BTreeMap<String, PersistentVolume> {
    eventually(
        &format!("{node} to have {want} PVs for {paths:?}"),
        Duration::from_secs(30),
        || async {
            let pvs = pvs_of(client, node).await;
            let got: Vec<(&String, String)> = pvs.iter().map(|(p, pv)| (p, phase(pv))).collect();
            let same_paths = pvs.keys().cloned().collect::<Vec<_>>() == paths.to_vec();
            if same_paths && pvs.values().all(|pv| phase(pv) == want) {
                Ok(pvs.clone())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await
}

/// Waits until `node`'s PV at `path` is in phase `want`, for at most `within`; returns it.
pub async fn pv_at(
    client: &kube::Client,
    node: &str,
    path: &Path,
    want: &str,
    within: Duration,
) -> PersistentVolume {
    let path = path.display().to_string();
    eventually(
        &format!("a PV for {path} in phase {want}"),
        within,
        || async {
            match pvs_of(client, node).await.get(&path) {
                Some(pv) if phase(pv) == want => Ok(pv.clone()),
                other => Err(format!("{:?}", other.map(phase))),
            }
        },
    )
    .await
}

/// Binds claim `ns/name` of `class` and `size` straight to `pv` (pre-bound by volumeName: no pod needed); waits
/// until it is Bound.
pub async fn claim_pv(
    client: &kube::Client,
    ns: &str,
    name: &str,
    pv: &PersistentVolume,
    class: &str,
    size: &str,
) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = obj(json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": class,
        "volumeName": pv.metadata.name, "resources": {"requests": {"storage": size}}}}));
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("PVC created");
    wait_claim(client, ns, name, "Bound").await;
}

/// Waits until claim `ns/name` is in phase `want`.
pub async fn wait_claim(client: &kube::Client, ns: &str, name: &str, want: &str) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("{name} to be {want}"),
        Duration::from_secs(60),
        || async {
            let c = pvcs.get(name).await.map_err(|e| e.to_string())?;
            let p = c.status.and_then(|s| s.phase).unwrap_or_default();
            if p == want { Ok(()) } else { Err(p) }
        },
    )
    .await;
}

/// The Events about the object named `name`, as (reason, message).
pub async fn events_of(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("events")
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Waits up to `within` for an Event with `reason` about the object named `name`; returns its message.
pub async fn wait_event(
    client: &kube::Client,
    name: &str,
    reason: &str,
    within: Duration,
) -> String {
    let api: Api<Event> = Api::all(client.clone());
    let about = ListParams::default().fields(&format!("involvedObject.name={name}"));
    eventually(&format!("a {reason} Event on {name}"), within, || async {
        let events = api.list(&about).await.map_err(|e| e.to_string())?.items;
        let reasons: Vec<_> = events.iter().map(|e| e.reason.clone()).collect();
        events
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.message.unwrap_or_default())
            .ok_or_else(|| format!("reasons so far: {reasons:?}"))
    })
    .await
}

/// Deletes claim `ns/name`: its PV is released.
pub async fn release(client: &kube::Client, ns: &str, name: &str) {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("PVC deleted");
}

/// The inventory writes a LocalDisk once the agent has seen its PV; wait until every PV is shown, so a write
/// still in flight from before a restart is not counted against the restart.
async fn wait_inventory_caught_up(
    client: &kube::Client,
    node: &str,
    pvs: &BTreeMap<String, PersistentVolume>,
) {
    let api: Api<LocalDisk> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("localpv.io/node={node}"));
    eventually(
        &format!("{node}'s LocalDisks to show its PVs"),
        Duration::from_secs(30),
        || async {
            let disks = api.list(&lp).await.map_err(|e| e.to_string())?;
            let shown: BTreeMap<&str, Option<&str>> = disks
                .items
                .iter()
                .map(|d| {
                    let status = d.status.as_ref();
                    let pv = status
                        .filter(|s| s.phase == LocalDiskPhase::Available)
                        .and_then(|s| s.pv.as_deref());
                    (d.spec.path.as_str(), pv)
                })
                .collect();
            let missing: Vec<&String> = pvs
                .iter()
                .filter(|(path, pv)| {
                    shown.get(path.as_str()).copied().flatten() != pv.metadata.name.as_deref()
                })
                .map(|(path, _)| path)
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("not shown yet: {missing:?}"))
            }
        },
    )
    .await
}

fn affinity_hosts(pv: &PersistentVolume) -> Vec<String> {
    let terms = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    terms
        .map(|t| t.node_selector_terms.iter())
        .into_iter()
        .flatten()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .filter(|e| e.key == "kubernetes.io/hostname")
        .flat_map(|e| e.values.clone().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_publish_bind_follow_mounts_adopt_and_restart_quietly() {
    let cp = ControlPlane::start(Options::full()).await;
    let client = cp.client();
    let ns = cp.namespace("agent").await;
    crate::support::agent::install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    create_node(&client, "node-1", &[]).await;
    create_node(&client, "node-2", &[]).await;

    let mut a1 = Agent::new(&cp, "node-1", "local-storage");
    let mut a2 = Agent::new(&cp, "node-2", "local-storage");
    let mut mounts = Vec::new();
    for v in ["vol1", "vol2", "vol3"] {
        mounts.push(Mount::tmpfs(&a1.disk(v), "5G", cp.reaper()));
    }
    mounts.push(Mount::tmpfs(&a2.disk("vol1"), "5G", cp.reaper()));
    // A stray file and a plain directory: reported as unusable, never published, never blocking readiness.
    std::fs::write(a1.disk("README"), "not a disk").unwrap();
    std::fs::create_dir_all(a1.disk("lost+found")).unwrap();

    // A PV the reference provisioner made for vol3 earlier: adopted in place, not duplicated.
    let vol3 = a1.disk("vol3").display().to_string();
    let reference: PersistentVolume = obj(json!({
        "metadata": {"name": "local-pv-3d1c5b2a",
                     "annotations": {"pv.kubernetes.io/provisioned-by": "local-volume-provisioner-node-1"}},
        "spec": {
            "capacity": {"storage": "5Gi"}, "volumeMode": "Filesystem", "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "local-storage",
            "local": {"path": vol3},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}},
        },
    }));
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    let reference = pv_api
        .create(&PostParams::default(), &reference)
        .await
        .expect("reference PV created");

    a1.start(&cp);
    a2.start(&cp);
    a1.wait_ready().await;
    a2.wait_ready().await;

    let paths1: Vec<String> = ["vol1", "vol2", "vol3"]
        .iter()
        .map(|v| a1.disk(v).display().to_string())
        .collect();
    let paths2 = vec![a2.disk("vol1").display().to_string()];
    let pvs1 = wait_pvs(&client, "node-1", &paths1, "Available").await;
    let pvs2 = wait_pvs(&client, "node-2", &paths2, "Available").await;
    for pv in pvs1.values() {
        assert_eq!(affinity_hosts(pv), vec!["node-1".to_string()]);
        assert_eq!(
            pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
            "5Gi"
        );
    }
    assert_eq!(
        affinity_hosts(pvs2.values().next().unwrap()),
        vec!["node-2".to_string()]
    );
    let adopted = &pvs1[&vol3];
    assert_eq!(
        adopted.metadata.name, reference.metadata.name,
        "the reference PV is adopted, not re-created"
    );
    assert_eq!(adopted.metadata.uid, reference.metadata.uid);
    let (_, disks) = a1.get("/disks").expect("agent serves /disks");
    assert!(
        disks.contains("README") && disks.contains("NotADiskEntry"),
        "unusable entries reported: {disks}"
    );

    // The classic walkthrough through published PVs: a pod pinned to node-2 gets node-2's disk.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc: PersistentVolumeClaim = obj(
        json!({"metadata": {"name": "example-local-claim"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "local-storage",
        "resources": {"requests": {"storage": "5Gi"}}}}),
    );
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("PVC created");
    let pod: Pod = obj(json!({"metadata": {"name": "example-pv-pod"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": "node-2"},
        "containers": [{"name": "web", "image": "nginx", "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "example-local-claim"}}]}}));
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod created");
    let node2_pv = pvs2.values().next().unwrap().metadata.name.clone().unwrap();
    eventually(
        "the claim to bind to node-2's PV",
        Duration::from_secs(60),
        || async {
            let c = pvcs
                .get("example-local-claim")
                .await
                .map_err(|e| e.to_string())?;
            let bound_to = c.spec.and_then(|s| s.volume_name);
            if bound_to.as_deref() == Some(node2_pv.as_str()) {
                Ok(())
            } else {
                Err(format!("{bound_to:?}"))
            }
        },
    )
    .await;

    // Unmount an unused disk: its Available PV goes. Mount a new one: a PV appears.
    let vol2 = mounts.remove(1);
    vol2.unmount();
    let paths1b: Vec<String> = ["vol1", "vol3"]
        .iter()
        .map(|v| a1.disk(v).display().to_string())
        .collect();
    wait_pvs(&client, "node-1", &paths1b, "Available").await;
    mounts.push(Mount::tmpfs(&a1.disk("vol4"), "1G", cp.reaper()));
    let paths1c: Vec<String> = ["vol1", "vol3", "vol4"]
        .iter()
        .map(|v| a1.disk(v).display().to_string())
        .collect();
    let before = wait_pvs(&client, "node-1", &paths1c, "Available").await;
    wait_inventory_caught_up(&client, "node-1", &before).await;

    // Restart: the agent converges on what is there, with no write request and no duplicate.
    let audit = cp.dir.join("logs/audit.log");
    let writes_before = audited(&audit, &a1.user, &["create", "update", "patch", "delete"]).len();
    a1.process
        .take()
        .expect("agent running")
        .stop(Duration::from_secs(5))
        .expect("clean exit on SIGTERM within 5s");
    a1.start(&cp);
    a1.wait_ready().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes: Vec<_> = audited(&audit, &a1.user, &["create", "update", "patch", "delete"]);
    assert_eq!(
        writes[writes_before..].to_vec(),
        vec![],
        "a restart over an unchanged node writes nothing"
    );
    let after = pvs_of(&client, "node-1").await;
    let uids = |m: &BTreeMap<String, PersistentVolume>| {
        m.values()
            .map(|p| p.metadata.uid.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        uids(&after),
        uids(&before),
        "same PVs after restart:\n{}",
        a1.log()
    );
    drop(mounts);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_rides_out_an_api_server_outage_without_crashing_or_duplicating() {
    let mut cp = ControlPlane::start(Options::default()).await;
    let client = cp.client();
    crate::support::agent::install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    create_node(&client, "node-1", &[]).await;
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    let _m1 = Mount::tmpfs(&agent.disk("vol1"), "1G", cp.reaper());

    // Down at start: the agent waits and retries instead of exiting.
    cp.stop_apiserver();
    agent.start(&cp);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        agent.process.as_mut().expect("started").running(),
        "exited while the API server was down:\n{}",
        agent.log()
    );
    cp.start_apiserver().await;
    agent.wait_ready().await;
    let vol1 = agent.disk("vol1").display().to_string();
    wait_pvs(&client, "node-1", std::slice::from_ref(&vol1), "Pending").await;

    // Down mid-run while a disk appears: picked up once the API server is back, exactly once.
    cp.stop_apiserver();
    let _m2 = Mount::tmpfs(&agent.disk("vol2"), "1G", cp.reaper());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        agent.process.as_mut().expect("started").running(),
        "exited mid-outage:\n{}",
        agent.log()
    );
    cp.start_apiserver().await;
    let both = vec![vol1, agent.disk("vol2").display().to_string()];
    let pvs = wait_pvs(&client, "node-1", &both, "Pending").await;
    assert_eq!(pvs.len(), 2, "one PV per disk");
    // Its watches came back together over one new connection, not one each.
    let pid = agent.process.as_ref().and_then(|p| p.pid()).expect("pid");
    let port = crate::api_cost::api_port(&cp.api_url);
    crate::support::eventually(
        "the agent to hold one connection to the API server again",
        Duration::from_secs(20),
        || async move {
            match crate::api_cost::connections_to(pid, port)? {
                1 => Ok(()),
                n => Err(format!("{n} connections")),
            }
        },
    )
    .await;
}
