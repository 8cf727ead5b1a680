//! A disk that really fails under a 3-replica StatefulSet on two real nodes (issue 37): xfs on a loop device whose
//! FUSE-served backing file starts returning EIO (`support::faulty`). The agent sees the filesystem shut down and
//! marks the LocalDisk `Failed`; the claim and the pod are told. With recovery off nothing is deleted and the claim's
//! Event says what to do by hand; once the StatefulSet opts in, the extender's Lease holder (the chart's Deployment,
//! with the chart's RBAC) deletes the claim and the pod, the StatefulSet makes a new claim, and the replica comes
//! back empty on the free disk of the healthy node while its two siblings are never touched.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use localpv::inventory::LocalDisk;
use serde_json::json;

use crate::common::*;
use crate::support::disks::{LoopDevice, Mount, Unwatched, run};
use crate::support::faulty::{FaultyDisk, Mode};
use crate::support::realnode::{POD_TIMEOUT, RealCluster};

/// Each replica: records what it found at start, then appends to /data/log every second (the writes that meet the
/// failing disk).
const SCRIPT: &str = "if [ -f /data/owner ]; then echo \"found $(cat /data/owner)\" >> /data/history; \
                      else echo empty >> /data/history; hostname > /data/owner; fi; sync; \
                      trap 'exit 0' TERM; while true; do date >> /data/log; sync; sleep 1; done";

/// Waits for an Event `reason` on `name` in `ns` whose note contains `text`.
async fn event(c: &RealCluster, ns: &str, name: &str, reason: &str, text: &str) -> String {
    let api: Api<Event> = Api::namespaced(c.client(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let events = api.list(&lp).await.map(|l| l.items).unwrap_or_default();
        let found = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.message.clone())
            .find(|m| m.contains(text));
        if let Some(note) = found {
            return note;
        }
        let seen: Vec<_> = events.iter().map(|e| (&e.reason, &e.message)).collect();
        assert!(
            Instant::now() < deadline,
            "no {reason} Event on {ns}/{name} saying {text:?}: {seen:#?}\n{}",
            c.container_logs(NAMESPACE, &format!("{RELEASE}-extender"))
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// (UID, restart count) of pod `ns/name`, if it exists.
async fn pod_state(c: &RealCluster, ns: &str, name: &str) -> Option<(String, i32)> {
    let pod = Api::<Pod>::namespaced(c.client(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let restarts = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum());
    Some((pod.metadata.uid?, restarts))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_on_a_failing_disk_comes_back_empty_on_a_free_disk_and_its_siblings_are_never_touched()
 {
    let c = RealCluster::start(2).await;
    let failing = FaultyDisk::new(&c.run_dir().join("faulty"), 300, "xfs", c.undo());
    let vol1 = c.node("node-1").disks.join("disks").join("vol1");
    let mount = failing.mount_at(&vol1, c.undo());
    for v in ["vol1", "vol2"] {
        c.tmpfs("node-2", v, "64M");
    }
    install(
        &c,
        json!({"extender": {"enabled": true, "replicas": 1,
                            "podDisruptionBudget": {"enabled": false},
                            "recovery": {"enabled": true, "interval": "30s"}}}),
    )
    .await;
    let root = c.disk_root().join("disks");
    for (node, v) in [("node-1", "vol1"), ("node-2", "vol1"), ("node-2", "vol2")] {
        wait_pv(&c, node, &root.join(v).display().to_string(), "Available").await;
    }

    // Three replicas on the three disks (no anti-affinity: two share node-2).
    let ns = c.plane.namespace("db").await;
    let mut set = serde_json::to_value(statefulset("db", 3, SCRIPT)).expect("set as JSON");
    set["spec"]["template"]["spec"]
        .as_object_mut()
        .expect("pod spec")
        .remove("affinity");
    let sets: Api<StatefulSet> = Api::namespaced(c.client(), &ns);
    create(&sets, &obj(set)).await;
    let replicas = ["db-0", "db-1", "db-2"];
    let mut victim = None;
    for pod in replicas {
        wait_pod(&c, &ns, pod, &["Running"]).await;
        let (_, node) = replica_history(&c, &ns, pod, 1).await;
        if node == "node-1" {
            victim = Some(pod);
        }
    }
    let victim = victim.expect("one replica on node-1's only disk");
    let mut before = Vec::new();
    for pod in replicas {
        before.push(pod_state(&c, &ns, pod).await.expect("replica exists"));
    }
    let spare = c.tmpfs("node-2", "vol3", "64M");
    wait_pv(
        &c,
        "node-2",
        &root.join("vol3").display().to_string(),
        "Available",
    )
    .await;

    // The disk fails under the replica's writes.
    failing.set(Mode::FailAll);
    let first_error = Instant::now();
    let disks: Api<LocalDisk> = Api::all(c.client());
    let lp = ListParams::default().labels("localpv.io/node=node-1");
    let failed_after = loop {
        let failed = disks.list(&lp).await.map(|l| l.items).unwrap_or_default();
        let health = failed
            .iter()
            .find_map(|d| d.status.as_ref()?.health.clone());
        if health.as_deref() == Some("Failed") {
            break first_error.elapsed();
        }
        assert!(
            first_error.elapsed() < POD_TIMEOUT,
            "node-1's disk never Failed (health {health:?}): {}",
            c.container_logs(NAMESPACE, &format!("{RELEASE}-node"))
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let claim = format!("data-{victim}");
    event(&c, &ns, &claim, "DiskFailed", "").await;
    event(&c, &ns, victim, "DiskFailed", "node-1").await;

    // Recovery off for this workload: told, nothing deleted.
    let off = event(&c, &ns, &claim, "ReplicaRecoveryHeld", "recovery is off").await;
    assert!(off.contains("delete the claim"), "{off}");
    tokio::time::sleep(Duration::from_secs(12)).await;
    for (pod, was) in replicas.iter().zip(&before) {
        assert_eq!(
            pod_state(&c, &ns, pod).await.as_ref(),
            Some(was),
            "{pod} untouched while off"
        );
    }

    // The StatefulSet opts in: the replica is recovered onto the spare disk of node-2, empty.
    let opt_in = json!({"metadata": {"annotations": {"localpv.io/recovery": "on"}}});
    sets.patch("db", &PatchParams::default(), &Patch::Merge(&opt_in))
        .await
        .expect("set annotated");
    let opted_in = Instant::now();
    let done = event(&c, &ns, &claim, "ReplicaRecovered", "deleting claim").await;
    assert!(
        done.contains("FilesystemShutDown") || done.contains("Failed"),
        "{done}"
    );
    let deadline = Instant::now() + POD_TIMEOUT * 2;
    let running_after = loop {
        let now = pod_state(&c, &ns, victim).await;
        let replaced = now.as_ref().is_some_and(|(uid, _)| {
            uid != &before[replicas
                .iter()
                .position(|p| *p == victim)
                .expect("a replica")]
            .0
        });
        if replaced {
            let (phase, _) = wait_pod(&c, &ns, victim, &["Running"]).await;
            assert_eq!(phase, "Running");
            break opted_in.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{victim} never came back: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (history, node) = replica_history(&c, &ns, victim, 1).await;
    assert_eq!(node, "node-2", "{victim} came back on the healthy node");
    assert_eq!(
        history, "empty\n",
        "{victim} starts empty on the spare disk"
    );
    assert!(
        spare.join("owner").exists(),
        "the spare disk holds the replica now"
    );
    for (pod, was) in replicas.iter().zip(&before) {
        if *pod != victim {
            assert_eq!(
                pod_state(&c, &ns, pod).await.as_ref(),
                Some(was),
                "{pod} never touched"
            );
        }
    }
    eprintln!(
        "recovery timings: first EIO -> LocalDisk Failed {:.1}s; opt-in (disk Failed) -> replica Running on a \
         new disk {:.1}s",
        failed_after.as_secs_f64(),
        running_after.as_secs_f64()
    );

    // Tear down the tenant before the failing disk goes.
    sets.delete("db", &DeleteParams::default())
        .await
        .expect("set deleted");
    for pod in replicas {
        let deadline = Instant::now() + POD_TIMEOUT;
        while pod_state(&c, &ns, pod).await.is_some() {
            assert!(Instant::now() < deadline, "{pod} not gone");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    drop(mount);
    drop(failing);
}

/// Chart values for the tests below: the extender (one replica, no disruption budget) with recovery on and a pass
/// a second, `extender` merged into its values and `config` as the agent's extra configuration.
fn recovery_on(extender: serde_json::Value, config: serde_json::Value) -> serde_json::Value {
    let mut values = json!({"enabled": true, "replicas": 1,
                            "podDisruptionBudget": {"enabled": false},
                            "recovery": {"enabled": true, "interval": "1s"}});
    for (key, value) in extender.as_object().into_iter().flatten() {
        match (values.get_mut(key), value) {
            (Some(serde_json::Value::Object(mine)), serde_json::Value::Object(more)) => {
                mine.extend(more.clone());
            }
            _ => {
                values[key] = value.clone();
            }
        }
    }
    json!({"extender": values, "extraConfig": config})
}

/// Replica `db-0` of a one-replica StatefulSet `db` opted in to recovery, in a namespace of its own.
struct Replica {
    ns: String,
    sets: Api<StatefulSet>,
    /// Its pod's (UID, restarts) once Running.
    before: (String, i32),
}

impl Replica {
    /// Makes the set with `script` and waits for its replica to run on `node` (the only node with a free disk).
    async fn opted_in(c: &RealCluster, prefix: &str, script: &str, node: &str) -> Replica {
        let ns = c.plane.namespace(prefix).await;
        let mut set = serde_json::to_value(statefulset("db", 1, script)).expect("set as JSON");
        set["metadata"]["annotations"] = json!({"localpv.io/recovery": "on"});
        let sets: Api<StatefulSet> = Api::namespaced(c.client(), &ns);
        create(&sets, &obj(set)).await;
        wait_pod(c, &ns, "db-0", &["Running"]).await;
        let (_, on) = replica_history(c, &ns, "db-0", 1).await;
        assert_eq!(on, node);
        let before = pod_state(c, &ns, "db-0").await.expect("replica exists");
        Replica { ns, sets, before }
    }

    /// Waits for the claim's `ReplicaRecovered` Event, then until `db-0` is a new pod, Running on node-2 and started
    /// empty on `free` (node-2's free disk); returns the Event's note.
    async fn recovered_onto(&self, c: &RealCluster, free: &std::path::Path) -> String {
        let note = event(
            c,
            &self.ns,
            "data-db-0",
            "ReplicaRecovered",
            "deleting claim",
        )
        .await;
        let deadline = Instant::now() + POD_TIMEOUT * 2;
        loop {
            let now = pod_state(c, &self.ns, "db-0").await;
            if now.as_ref().is_some_and(|(uid, _)| *uid != self.before.0) {
                wait_pod(c, &self.ns, "db-0", &["Running"]).await;
                break;
            }
            assert!(Instant::now() < deadline, "db-0 never came back: {now:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (history, node) = replica_history(c, &self.ns, "db-0", 1).await;
        assert_eq!(node, "node-2", "back on the healthy node");
        assert_eq!(history, "empty\n", "empty on the free disk");
        assert!(free.join("owner").exists(), "the free disk holds it now");
        note
    }

    /// Deletes the set and waits for its pod to go (the tenant goes before its disk).
    async fn delete(self, c: &RealCluster) {
        self.sets
            .delete("db", &DeleteParams::default())
            .await
            .expect("set deleted");
        let deadline = Instant::now() + POD_TIMEOUT;
        while pod_state(c, &self.ns, "db-0").await.is_some() {
            assert!(Instant::now() < deadline, "db-0 not gone");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Installs the chart with [`recovery_on`]`(extender, config)` and waits for node-1's disk `vol1` to be published:
/// its path and its Available PV.
async fn installed_with_vol1(
    c: &RealCluster,
    extender: serde_json::Value,
    config: serde_json::Value,
) -> (String, k8s_openapi::api::core::v1::PersistentVolume) {
    install(c, recovery_on(extender, config)).await;
    let path = c
        .disk_root()
        .join("disks")
        .join("vol1")
        .display()
        .to_string();
    let pv = wait_pv(c, "node-1", &path, "Available").await;
    (path, pv)
}

/// The reasons of the Events in `ns` that `lp` selects.
async fn reasons(c: &RealCluster, ns: &str, lp: &ListParams) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(c.client(), ns);
    let listed = events.list(lp).await.expect("events listed").items;
    listed.into_iter().filter_map(|e| e.reason).collect()
}

/// A free tmpfs disk `name` on node-2, published (Available).
async fn free_disk_on_node_2(c: &RealCluster, name: &str) -> std::path::PathBuf {
    let free = c.tmpfs("node-2", name, "64M");
    let path = c.disk_root().join("disks").join(name);
    wait_pv(c, "node-2", &path.display().to_string(), "Available").await;
    free
}

/// Issue 37's false alarm on real nodes: one transient read error under a replica whose StatefulSet opted in, with
/// recovery on in the chart (a pass every second). The FUSE-served disk under ext4 fails reads until the agent's
/// direct read has failed once, then serves again: the LocalDisk goes `Degraded` and, after `diskHealthyAfter`
/// without a new sign, `Healthy`, never `Failed`. The claim and the pod are told both (`DiskDegraded`, then
/// `DiskHealthy`); the pod, the claim and the PV keep their UIDs and the replica its restart count: nothing is
/// recovered, since only a `Failed` disk loses a volume.
#[tokio::test(flavor = "multi_thread")]
async fn one_transient_read_error_under_an_opted_in_replica_is_a_false_alarm_and_recovers_nothing()
{
    const IDLE: &str =
        "hostname > /data/owner; sync; trap 'exit 0' TERM; while true; do sleep 1; done";
    let c = RealCluster::start(1).await;
    let flaky = FaultyDisk::new(&c.run_dir().join("flaky"), 64, "ext4", c.undo());
    let vol1 = c.node("node-1").disks.join("disks").join("vol1");
    let mount = flaky.mount_at(&vol1, c.undo());
    let config = json!({"diskHealthCheckPeriod": "1s", "diskHealthyAfter": "15s"});
    let (path, pv) = installed_with_vol1(&c, json!({}), config).await;
    let pv_name = pv.metadata.name.clone().expect("named");
    let replica = Replica::opted_in(&c, "flaky", IDLE, "node-1").await;
    let ns = replica.ns.clone();
    let claim = "data-db-0";
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let claim_uid = claims.get(claim).await.expect("claim").metadata.uid;

    flaky.set(Mode::FailReads);
    let deadline = Instant::now() + POD_TIMEOUT;
    while flaky.stats().failed == 0 {
        assert!(Instant::now() < deadline, "no read ever failed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    flaky.set(Mode::Ok);
    event(&c, "default", &pv_name, "DiskDegraded", "ProbeIoError").await;
    event(&c, &ns, claim, "DiskDegraded", "").await;
    event(&c, &ns, "db-0", "DiskDegraded", "").await;
    event(&c, &ns, claim, "DiskHealthy", "").await;
    event(&c, &ns, "db-0", "DiskHealthy", "Healthy again").await;
    let disks: Api<LocalDisk> = Api::all(c.client());
    let lp = ListParams::default().labels("localpv.io/node=node-1");
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let health: Vec<_> = disks
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .iter()
            .map(|d| d.status.as_ref().and_then(|s| s.health.clone()))
            .collect();
        if health == [None] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the LocalDisk never said Healthy again: {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Recovery passes (a second apart) had time to act: nothing was deleted or restarted.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        pod_state(&c, &ns, "db-0").await.as_ref(),
        Some(&replica.before)
    );
    assert_eq!(
        claims.get(claim).await.expect("claim").metadata.uid,
        claim_uid
    );
    let now = wait_pv(&c, "node-1", &path, "Bound").await;
    assert_eq!(now.metadata.uid, pv.metadata.uid);
    let said = reasons(&c, &ns, &ListParams::default()).await;
    for never in ["DiskFailed", "ReplicaRecovered", "ReplicaRecoveryDryRun"] {
        assert!(!said.iter().any(|r| r == never), "{never} in {said:?}");
    }
    replica.delete(&c).await;
    drop(mount);
    drop(flaky);
}

/// Issue 37's disk detached for good, on real nodes: the loop device under a replica's mounted ext4 detached and
/// its backing file deleted (the kernel serves the filesystem until the unmount; the data goes with it). The
/// LocalDisk goes `Degraded` at the next look and `Failed` (`DeviceGone`) past `diskGoneGracePeriod`; the claim and
/// the pod are told. The StatefulSet opted in, so the chart's extender deletes the claim and the pod, and the
/// replica comes back empty on node-2's free disk. The old PV stays: never wiped while its disk is Failed.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_detached_for_good_under_an_opted_in_replica_moves_it_to_a_free_disk_and_wipes_nothing()
 {
    let c = RealCluster::start(2).await;
    let backing = c.run_dir().join("going.img");
    // NB: not in the undo log: detached early, the number may be another test's by teardown.
    let mut device = LoopDevice::new(&backing, 320, Some("ext4"), &Unwatched);
    let vol1 = c.node("node-1").disks.join("disks").join("vol1");
    let _mount = Mount::device(&device.device, &vol1, c.undo()).keep();
    let config = json!({"diskHealthCheckPeriod": "1s", "diskGoneGracePeriod": "6s"});
    let (path, old) = installed_with_vol1(&c, json!({}), config).await;
    let replica = Replica::opted_in(&c, "going", SCRIPT, "node-1").await;
    let free = free_disk_on_node_2(&c, "vol2").await;

    run("losetup", &["-d", &device.device]);
    device.device.clear();
    std::fs::remove_file(&backing).expect("backing file removed");

    let old_name = old.metadata.name.clone().expect("named");
    event(&c, "default", &old_name, "DiskDegraded", "gone").await;
    event(&c, "default", &old_name, "DiskFailed", "gone").await;
    event(&c, &replica.ns, "data-db-0", "DiskFailed", "").await;
    let done = replica.recovered_onto(&c, &free).await;
    assert!(done.contains("Failed"), "{done}");
    // The old PV is Released and stays so: its disk is Failed, so it is never wiped.
    let kept = wait_pv(&c, "node-1", &path, "Released").await;
    assert_eq!(kept.metadata.uid, old.metadata.uid);
    let about_old = ListParams::default().fields(&format!("involvedObject.name={old_name}"));
    let said = reasons(&c, "default", &about_old).await;
    assert!(
        !said.iter().any(|r| r.starts_with("Wipe")),
        "never wiped: {said:?}"
    );
    replica.delete(&c).await;
}

/// Issue 37's node lost for good, on real nodes: node-1's kubelet and containerd killed (the machine died), then its
/// Node deleted. With the chart's node clean-up and `recovery.deletedNodes` on and the StatefulSet opted in, once
/// the Node is gone past `nodeCleanup.grace` the chart's extender (kept on node-2) deletes the claim and the pod of
/// the replica whose disk was on node-1, and the StatefulSet's new replica runs empty on node-2's free disk.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_on_a_deleted_node_comes_back_empty_on_a_free_disk_of_another_node() {
    let c = RealCluster::start(2).await;
    c.tmpfs("node-1", "vol1", "64M");
    let extender = json!({"nodeSelector": {"kubernetes.io/hostname": "node-2"},
                          "nodeCleanup": {"enabled": true, "grace": "5s"},
                          "recovery": {"deletedNodes": true}});
    installed_with_vol1(&c, extender, json!({})).await;
    let replica = Replica::opted_in(&c, "lost", SCRIPT, "node-1").await;
    let free = free_disk_on_node_2(&c, "vol2").await;

    // The machine dies: its kubelet and containerd (one process group) killed; then its Node is deleted.
    c.node("node-1")
        .component
        .signal(nix::sys::signal::Signal::SIGKILL);
    c.kubectl(&["delete", "node", "node-1", "--wait=true"]);

    let done = replica.recovered_onto(&c, &free).await;
    assert!(done.contains("node-1"), "{done}");
    replica.delete(&c).await;
}
