//! Opt-in recovery of a StatefulSet replica whose local volume is lost (issue 37, point 3), by the extender replica
//! holding the Lease, tried as an attacker and as a careful operator would: off by default (the claim is told what
//! to do), an opt-in forged in another namespace does nothing here, dry-run deletes nothing, nothing moves while
//! another replica is not Ready, then one recovery (claim and pod deleted, the siblings untouched); a flapping disk
//! and a second lost replica of the same set never make a second recovery while the first is in flight.
//!
//! No kubelets here: the test plays the StatefulSet controller and the kubelet (it makes the set's pods and claims
//! and sets their readiness), so each guard is driven exactly. The real-node tier proves the same with real pods.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use localpv::inventory::{LocalDisk, LocalDiskSpec};
use serde_json::json;

use crate::node_agent::{obj, phase};
use crate::support::agent::{install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Options, free_port, kube_minor};
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::proc::Component;

pub(crate) const CLASS: &str = "local-recovery";
pub(crate) const WAIT: Duration = Duration::from_secs(60);

pub(crate) struct Scene {
    pub(crate) client: kube::Client,
    pub(crate) ns: String,
}

impl Scene {
    pub(crate) fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub(crate) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub(crate) fn sets(&self) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// PV `pv` on `node`, pre-bound to claim `claim` of this namespace, its LocalDisk `disk` naming it.
    pub(crate) async fn volume(&self, pv: &str, node: &str, claim: Option<&str>, disk: &str) {
        let mut v = json!({
            "metadata": {"name": pv, "labels": {"localpv.io/node": node}},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                "persistentVolumeReclaimPolicy": "Delete", "local": {"path": format!("/mnt/disks/{pv}")},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        });
        if let Some(c) = claim {
            v["spec"]["claimRef"] = json!({"namespace": self.ns, "name": c});
        }
        Api::<PersistentVolume>::all(self.client.clone())
            .create(&PostParams::default(), &obj(v))
            .await
            .expect("PV created");
        let spec = LocalDiskSpec {
            node: node.into(),
            path: format!("/mnt/disks/{pv}"),
            entry: pv.into(),
            storage_class: CLASS.into(),
            ..Default::default()
        };
        let mut d = LocalDisk::new(disk, spec);
        d.metadata.labels = Some([("localpv.io/node".to_string(), node.to_string())].into());
        d.status = Some(obj(json!({"phase": "Bound", "pv": pv})));
        Api::<LocalDisk>::all(self.client.clone())
            .create(&PostParams::default(), &d)
            .await
            .expect("LocalDisk created");
    }

    /// What the StatefulSet controller and the kubelet would do for replica `i`: its claim (bound to `pv`) and a
    /// Ready pod using it, controlled by the set.
    pub(crate) async fn replica(&self, i: u32, pv: &str) {
        let claim = format!("data-web-{i}");
        let c: PersistentVolumeClaim = obj(json!({"metadata": {"name": claim}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS, "volumeName": pv,
            "resources": {"requests": {"storage": "1Gi"}}}}));
        self.pvcs()
            .create(&PostParams::default(), &c)
            .await
            .expect("PVC created");
        let set = self.sets().get("web").await.expect("set");
        let uid = set.metadata.uid.clone().expect("uid");
        let p: Pod = obj(json!({
            "metadata": {"name": format!("web-{i}"), "labels": {"app": "web"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                              "uid": uid, "controller": true}]},
            "spec": {"containers": [{"name": "db", "image": "busybox"}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
        }));
        self.pods()
            .create(&PostParams::default(), &p)
            .await
            .expect("pod created");
        self.ready(&format!("web-{i}"), true).await;
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        eventually(&format!("{pv} Bound"), WAIT, || async {
            let p = phase(&pvs.get(pv).await.map_err(|e| e.to_string())?);
            if p == "Bound" { Ok(()) } else { Err(p) }
        })
        .await;
    }

    async fn ready(&self, pod: &str, ready: bool) {
        let status = if ready { "True" } else { "False" };
        let patch = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": status}]}});
        self.pods()
            .patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("pod status patched");
    }

    async fn health(&self, disk: &str, state: Option<&str>) {
        let conditions = match state {
            Some(_) => {
                json!([{"type": "Healthy", "status": "False", "reason": "FilesystemShutDown",
                               "message": "the filesystem shut itself down", "lastTransitionTime": "2026-11-29T00:00:00Z"}])
            }
            None => json!([]),
        };
        let patch = json!({"status": {"health": state, "conditions": conditions}});
        Api::<LocalDisk>::all(self.client.clone())
            .patch(disk, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("LocalDisk patched");
    }

    async fn annotate<K>(&self, api: &Api<K>, name: &str, value: Option<&str>)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let patch = json!({"metadata": {"annotations": {"localpv.io/recovery": value}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("annotated");
    }

    pub(crate) async fn uid<K>(&self, api: &Api<K>, name: &str) -> Option<String>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let got = api.get_opt(name).await.expect("read");
        got.and_then(|o| o.meta().uid.clone())
    }

    /// Waits for an Event `reason` on `name` in this namespace whose note contains `text`; returns the note.
    pub(crate) async fn note(&self, name: &str, reason: &str, text: &str) -> String {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        eventually(
            &format!("a {reason} Event on {name} saying {text:?}"),
            WAIT,
            || async {
                let events = api.list(&lp).await.map_err(|e| e.to_string())?.items;
                let seen: Vec<String> = events
                    .iter()
                    .map(|e| format!("{:?}: {:?}", e.reason, e.message))
                    .collect();
                events
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some(reason))
                    .filter_map(|e| e.message)
                    .find(|m| m.contains(text))
                    .ok_or_else(|| format!("so far: {seen:?}"))
            },
        )
        .await
    }

    /// Waits until pod `name` is gone.
    pub(crate) async fn wait_pod_gone(&self, name: &str) {
        eventually(&format!("{}/{name} deleted", self.ns), WAIT, || async {
            match self.uid(&self.pods(), name).await {
                None => Ok(()),
                Some(u) => Err(u),
            }
        })
        .await;
    }

    /// No recovery Event at all in this namespace.
    pub(crate) async fn assert_no_recovery_events(&self, what: &str) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let told = events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        let recovery = told.iter().filter(|e| {
            let reason = e.reason.as_deref().unwrap_or("");
            reason.starts_with("ReplicaRecover")
        });
        let recovery: Vec<_> = recovery.collect();
        assert!(recovery.is_empty(), "{what}: {recovery:?}");
    }

    /// Events `reason` on `name` in any namespace (a PV's are in `default`), counting repeats.
    /// The claim's `status.healthStatus` conditions as (status, reason), once they are `want` (waits).
    /// NB: Kubernetes before 1.37 has no such field: its API server drops what recovery writes, so the claim
    /// shows none there (what an operator of such a cluster sees; the Events still tell).
    async fn claim_health(&self, name: &str, want: &[(&str, &str)]) {
        let served = kube_minor() >= 37;
        let want: Vec<(String, String)> = want
            .iter()
            .filter(|_| served)
            .map(|(s, r)| (s.to_string(), r.to_string()))
            .collect();
        eventually(&format!("{name}'s healthStatus {want:?}"), WAIT, || async {
            let claim = self.pvcs().get(name).await.map_err(|e| e.to_string())?;
            let got: Vec<(String, String)> = claim
                .status
                .and_then(|s| s.health_status)
                .and_then(|h| h.health_conditions)
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c.status, c.reason))
                .collect();
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
    }

    async fn count(&self, name: &str, reason: &str) -> usize {
        let api: Api<Event> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        let events = api.list(&lp).await.expect("events").items;
        let matching = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason));
        matching.map(|e| e.count.unwrap_or(1).max(1) as usize).sum()
    }
}

pub(crate) async fn statefulset(
    client: &kube::Client,
    ns: &str,
    replicas: u32,
    annotation: Option<&str>,
) {
    let mut s = json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "serviceName": "web", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "db", "image": "busybox"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}}}]},
    });
    if let Some(a) = annotation {
        s["metadata"]["annotations"] = json!({"localpv.io/recovery": a});
    }
    Api::<StatefulSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj(s))
        .await
        .expect("StatefulSet created");
}

/// A node `node` and, in a namespace of its own (named after `prefix`), a one-replica set `web` whose replica 0 runs
/// with its claim bound to a PV on that node (LocalDisk `disk`).
async fn single_replica(cp: &ControlPlane, node: &str, prefix: &str, disk: &str) -> Scene {
    let client = cp.client();
    create_node(&client, node, &[]).await;
    let s = Scene {
        client: client.clone(),
        ns: cp.namespace(prefix).await,
    };
    statefulset(&client, &s.ns, 1, None).await;
    let pv = format!("rec-{}", s.ns);
    s.volume(&pv, node, Some("data-web-0"), disk).await;
    s.replica(0, &pv).await;
    s
}

/// Lets the leader make at least two passes (a tick is 5 s).
pub(crate) async fn passes() {
    tokio::time::sleep(Duration::from_secs(11)).await;
}

/// A control plane with the CRD and the class, recovery's class annotation `class_ask`; the API server serves the
/// claims' `status.healthStatus` (feature gate `CSIVolumeHealth`: alpha since 1.21, serving that field since 1.37).
pub(crate) async fn plane(class_ask: Option<&str>) -> ControlPlane {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        api_feature_gates: vec!["CSIVolumeHealth=true".into()],
        ..Default::default()
    })
    .await;
    install_crd(&cp).await;
    let mut sc = json!({"metadata": {"name": CLASS}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"});
    if let Some(a) = class_ask {
        sc["metadata"]["annotations"] = json!({"localpv.io/recovery": a});
    }
    Api::<StorageClass>::all(cp.client())
        .create(&PostParams::default(), &obj(sc))
        .await
        .expect("class");
    cp
}

/// The extender with `args` beyond the listen address and the Lease.
pub(crate) fn extender(cp: &ControlPlane, args: &[&str]) -> Component {
    let port = free_port();
    let mut all: Vec<String> = vec![
        "extender".into(),
        format!("--listen=127.0.0.1:{port}"),
        "--lease-namespace=default".into(),
        "--identity=extender-recovery".into(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let kubeconfig = cp.admin_kubeconfig.display().to_string();
    Component::spawn_with_env(
        "localpv-extender",
        &localpv_bin(),
        &all,
        &[("KUBECONFIG", kubeconfig.as_str())],
        &cp.log_dir(),
        cp.reaper(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_replica_is_recovered_only_when_opted_in_only_while_its_siblings_are_ready_and_only_once()
 {
    let cp = plane(None).await;
    let client = cp.client();
    for n in ["node-1", "node-2"] {
        create_node(&client, n, &[]).await;
    }
    let s = Scene {
        client: client.clone(),
        ns: cp.namespace("db").await,
    };
    statefulset(&client, &s.ns, 3, None).await;
    for i in 0..3u32 {
        let node = if i == 1 { "node-2" } else { "node-1" };
        let pv = format!("rec-{}-{i}", s.ns);
        s.volume(
            &pv,
            node,
            Some(&format!("data-web-{i}")),
            &format!("disk-{i}"),
        )
        .await;
        s.replica(i, &pv).await;
    }
    s.volume(&format!("rec-{}-spare", s.ns), "node-2", None, "disk-spare")
        .await;

    // Another namespace where an attacker opts in everything, with the same names.
    let other = Scene {
        client: client.clone(),
        ns: cp.namespace("attacker").await,
    };
    statefulset(&client, &other.ns, 3, Some("on")).await;
    let forged: PersistentVolumeClaim = obj(json!({"metadata": {"name": "data-web-0",
        "annotations": {"localpv.io/recovery": "on"}}, "spec": {"accessModes": ["ReadWriteOnce"],
        "storageClassName": CLASS, "resources": {"requests": {"storage": "1Gi"}}}}));
    other
        .pvcs()
        .create(&PostParams::default(), &forged)
        .await
        .expect("forged claim");

    let _extender = extender(&cp, &["--recovery=true", "--recovery-interval=20s"]);
    let claims = s.pvcs();
    let pods = s.pods();
    let mut before = Vec::new();
    for p in ["web-0", "web-1", "web-2"] {
        before.push(s.uid(&pods, p).await);
    }
    let claim0 = s.uid(&claims, "data-web-0").await;

    // A Degraded disk (a false alarm, or not yet Failed) is never a lost volume.
    s.health("disk-2", Some("Degraded")).await;
    // Off by default: the claim is told what to do, the pod is told its disk failed, nothing is deleted; the
    // attacker's opt-in in its own namespace changes nothing here.
    s.health("disk-0", Some("Failed")).await;
    let off = s
        .note("data-web-0", "ReplicaRecoveryHeld", "recovery is off")
        .await;
    assert!(off.contains("delete the claim"), "{off}");
    s.note("web-0", "DiskFailed", "disk-0").await;
    s.claim_health("data-web-0", &[("Inaccessible", "DiskFailed")])
        .await;
    s.claim_health("data-web-2", &[("Degraded", "DiskDegraded")])
        .await;
    passes().await;
    assert_eq!(
        s.uid(&claims, "data-web-0").await,
        claim0,
        "nothing deleted while off"
    );
    assert_eq!(s.uid(&pods, "web-0").await, before[0]);
    assert!(other.uid(&other.pvcs(), "data-web-0").await.is_some());

    // Dry run on the set: said, not done.
    s.annotate(&s.sets(), "web", Some("dry-run")).await;
    s.note("data-web-0", "ReplicaRecoveryDryRun", "would delete")
        .await;
    s.note("web", "ReplicaRecoveryDryRun", "would delete").await;
    passes().await;
    assert_eq!(
        s.uid(&claims, "data-web-0").await,
        claim0,
        "dry-run deletes nothing"
    );

    // Opted in on the claim, but web-2 is not Ready: it waits.
    s.ready("web-2", false).await;
    s.annotate(&claims, "data-web-0", Some("on")).await;
    s.note("data-web-0", "ReplicaRecoveryHeld", "web-2").await;
    passes().await;
    assert_eq!(
        s.uid(&claims, "data-web-0").await,
        claim0,
        "waits for web-2"
    );

    // web-2 Ready: the claim and pod of web-0 go, its siblings stay.
    s.ready("web-2", true).await;
    let done = s
        .note("data-web-0", "ReplicaRecovered", "deleting claim")
        .await;
    for word in ["disk-0", "FilesystemShutDown", "web-0"] {
        assert!(done.contains(word), "{word} in {done}");
    }
    eventually("claim and pod of web-0 deleted", WAIT, || async {
        let c = s.uid(&claims, "data-web-0").await;
        let p = s.uid(&pods, "web-0").await;
        if c.is_none() && p.is_none() {
            Ok(())
        } else {
            Err(format!("claim {c:?} pod {p:?}"))
        }
    })
    .await;
    s.note("web", "ReplicaRecovered", "deleting claim").await;
    for (i, p) in ["web-1", "web-2"].iter().enumerate() {
        assert_eq!(s.uid(&pods, p).await, before[i + 1], "{p} untouched");
    }
    assert!(
        other.uid(&other.pvcs(), "data-web-0").await.is_some(),
        "other namespace untouched"
    );

    // While web-0 is not back: a second lost replica of the set waits, and web-0's disk flapping does nothing.
    s.health("disk-1", Some("Failed")).await;
    s.annotate(&claims, "data-web-1", Some("on")).await;
    s.note("data-web-1", "ReplicaRecoveryHeld", "web-0").await;
    for state in [None, Some("Failed"), None, Some("Failed")] {
        s.health("disk-0", state).await;
    }
    passes().await;
    assert_eq!(
        s.uid(&pods, "web-1").await,
        before[1],
        "one recovery in flight per set"
    );

    // The set makes web-0 again on the spare disk; once it is Ready, web-1 is recovered (after the interval).
    s.replica(0, &format!("rec-{}-spare", s.ns)).await;
    s.note("data-web-1", "ReplicaRecovered", "deleting claim")
        .await;
    s.wait_pod_gone("web-1").await;
    let pv0 = format!("rec-{}-0", s.ns);
    assert_eq!(
        s.count(&pv0, "ReplicaRecovered").await,
        1,
        "one recovery of web-0's volume"
    );
    assert_eq!(
        s.uid(&pods, "web-2").await,
        before[2],
        "web-2 never touched"
    );
    other
        .assert_no_recovery_events("the attacker's namespace")
        .await;
}

/// Each node signal counts once enabled: the out-of-service taint at once, NotReady after its time, a deleted
/// Node after the clean-up grace; a Ready node with another taint loses nothing. One single-replica set per node,
/// its class opted in.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_shut_down_not_ready_or_deleted_loses_its_replicas_volumes_once_each_signal_is_enabled()
 {
    let cp = plane(Some("on")).await;
    let client = cp.client();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let mut scenes = Vec::new();
    for node in ["node-oos", "node-notready", "node-gone", "node-fine"] {
        scenes.push(single_replica(&cp, node, node, &format!("disk-{node}")).await);
    }
    let _extender = extender(
        &cp,
        &[
            "--recovery=true",
            "--recovery-interval=1s",
            "--recover-out-of-service=true",
            "--recover-not-ready-after=10s",
            "--recover-deleted-nodes=true",
            "--node-cleanup-grace=8s",
        ],
    );
    let fine_pod = scenes[3].uid(&scenes[3].pods(), "web-0").await;

    let taints = |key: &str| json!({"spec": {"taints": [{"key": key, "value": "nodeshutdown", "effect": "NoExecute"}]}});
    nodes
        .patch(
            "node-oos",
            &PatchParams::default(),
            &Patch::Merge(&taints("node.kubernetes.io/out-of-service")),
        )
        .await
        .expect("tainted");
    nodes
        .patch(
            "node-fine",
            &PatchParams::default(),
            &Patch::Merge(&taints("example.com/maintenance")),
        )
        .await
        .expect("tainted");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown",
        "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
    nodes
        .patch_status(
            "node-notready",
            &PatchParams::default(),
            &Patch::Merge(&not_ready),
        )
        .await
        .expect("not ready");
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
    nodes
        .patch_status("node-fine", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("ready");
    nodes
        .delete("node-gone", &kube::api::DeleteParams::default())
        .await
        .expect("node deleted");

    for (s, why) in scenes[..3]
        .iter()
        .zip(["out-of-service", "NotReady", "was deleted"])
    {
        let done = s.note("data-web-0", "ReplicaRecovered", why).await;
        assert!(done.contains("deleting claim"), "{done}");
        s.wait_pod_gone("web-0").await;
    }
    passes().await;
    let fine = &scenes[3];
    assert_eq!(
        fine.uid(&fine.pods(), "web-0").await,
        fine_pod,
        "a Ready node with another taint loses nothing"
    );
    assert!(fine.uid(&fine.pvcs(), "data-web-0").await.is_some());
}

/// Without their flags the same signals count for nothing: a node shut down, NotReady or deleted leaves the claim
/// alone (the disk-failure recovery is on).
#[tokio::test(flavor = "multi_thread")]
async fn node_signals_that_are_not_enabled_recover_nothing() {
    let cp = plane(Some("on")).await;
    let client = cp.client();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let s = single_replica(&cp, "node-1", "db", "disk-1").await;
    let _extender = extender(&cp, &["--recovery=true", "--node-cleanup-grace=2s"]);
    let pod = s.uid(&s.pods(), "web-0").await;
    let taint = json!({"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
        "effect": "NoExecute"}]}});
    nodes
        .patch("node-1", &PatchParams::default(), &Patch::Merge(&taint))
        .await
        .expect("tainted");
    nodes
        .delete("node-1", &kube::api::DeleteParams::default())
        .await
        .expect("node deleted");
    passes().await;
    passes().await;
    assert_eq!(
        s.uid(&s.pods(), "web-0").await,
        pod,
        "nothing recovered without the flags"
    );
    s.assert_no_recovery_events("without the flags").await;
}

/// `localpv disks drain` as an operator runs it: the disk is cordoned and its claim moved the guarded way; without
/// an opt-in only `--force` moves it; `uncordon` ends both (issue 37, point 4).
#[tokio::test(flavor = "multi_thread")]
async fn a_drained_disk_moves_its_claim_only_when_opted_in_or_forced_and_uncordon_ends_it() {
    let cp = plane(None).await;
    let client = cp.client();
    let s = single_replica(&cp, "node-1", "db", "disk-1").await;
    let _extender = extender(&cp, &["--recovery=true", "--recovery-interval=1s"]);
    let kubeconfig = cp.kubeconfig_for("operator", "operator", &["system:masters"]);
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(localpv_bin())
            .args(["disks", "--kubeconfig", &kubeconfig.display().to_string()])
            .args(args)
            .output()
            .expect("localpv runs");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let annotations = || async {
        let d = Api::<LocalDisk>::all(client.clone())
            .get("disk-1")
            .await
            .expect("LocalDisk");
        let a = d.metadata.annotations.unwrap_or_default();
        (
            a.get("localpv.io/cordoned").cloned(),
            a.get("localpv.io/drain").cloned(),
        )
    };

    let said = cli(&["drain", &format!("node-1/rec-{}", s.ns)]);
    assert!(said.starts_with("draining disk-1"), "{said}");
    assert_eq!(
        annotations().await,
        (Some("true".into()), Some("true".into()))
    );
    let held = s
        .note("data-web-0", "ReplicaRecoveryHeld", "recovery is off")
        .await;
    assert!(held.contains("drained"), "{held}");
    passes().await;
    let pod = s.uid(&s.pods(), "web-0").await;
    assert!(
        pod.is_some(),
        "a drain without opt-in or --force moves nothing"
    );

    let said = cli(&["drain", "disk-1", "--force"]);
    assert!(said.contains("with --force"), "{said}");
    let done = s
        .note("data-web-0", "ReplicaRecovered", "drained with --force")
        .await;
    assert!(done.contains("deleting claim"), "{done}");
    s.wait_pod_gone("web-0").await;
    let said = cli(&["uncordon", "disk-1"]);
    assert!(said.starts_with("uncordoned disk-1"), "{said}");
    assert_eq!(annotations().await, (None, None));
}
