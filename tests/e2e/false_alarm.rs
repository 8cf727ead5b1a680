//! Issue 37's false alarms, on a real control plane with real loop devices: a disk that goes and comes back within
//! `diskGoneGracePeriod`, and one transient read error. Each goes `Degraded` and back to `Healthy`, never
//! `Failed`; its Bound PV and claim (and, with recovery on, the pod) are told both (`DiskDegraded`, then
//! `DiskHealthy`) and keep their UIDs; nothing
//! is withdrawn, deleted or wiped for them; with recovery on and opted in for the claim's StatefulSet, no claim or
//! pod is deleted.
//!
//! How the device goes and comes back: a raw loop device (a Block class's entry) detached with `losetup -d` shows
//! size 0 in sysfs (what removable media gone shows too), then the same backing file is attached again under the
//! same number: the same device, same data. The number is one far above those `losetup --find` hands out, so no
//! parallel test takes it in between. (A loop device under a mounted filesystem cannot serve here: detached, the
//! kernel keeps serving it until the unmount; see `tests/host/gone.rs`.)

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use localpv::contract::ANN_RECOVERY;
use serde_json::json;

use crate::attack_rawdev::claim_block;
use crate::failure::{available, configure, disk_says, health_of};
use crate::node_agent::{events_of, obj, phase, plane_with_agent, pvs_of, wait_event};
use crate::support::agent::http_get;
use crate::support::cluster::Options;
use crate::support::disks::LoopDevice;
use crate::support::eventually;

const RAW: &str = "raw-block";
const WAIT: Duration = Duration::from_secs(60);

fn name(pv: &PersistentVolume) -> &str {
    pv.metadata.name.as_deref().expect("name")
}

/// Reasons of the Events about `name` that must never appear for a false alarm.
async fn never_said(client: &kube::Client, name: &str) -> Vec<String> {
    const NEVER: [&str; 7] = [
        "DiskFailed",
        "DiskMissing",
        "WipeCompleted",
        "WipeFailed",
        "ReplicaRecovered",
        "ReplicaRecoveryDryRun",
        "DiskIdentityChanged",
    ];
    events_of(client, name)
        .await
        .into_iter()
        .map(|(reason, _)| reason)
        .filter(|r| NEVER.contains(&r.as_str()))
        .collect()
}

fn read_at(device: &str, offset: u64, len: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(device).expect("device opens");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).expect("device reads");
    buf
}

/// A plane with the PV controller, node-1 and its agent (not started) over one raw-block class `RAW` on
/// `<plane>/hosts/node-1/raw`, and a namespace named after `ns`.
async fn raw_plane(
    ns: &str,
) -> (
    crate::support::cluster::ControlPlane,
    String,
    crate::support::agent::Agent,
) {
    plane_with_agent(
        Options {
            controller_manager: true,
            ..Default::default()
        },
        ns,
        &[(RAW, "Delete")],
        &["node-1"],
        &[(RAW, "raw", "    volumeMode: Block\n")],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_detached_and_back_within_the_grace_is_a_false_alarm_and_nothing_is_done() {
    let (cp, ns, mut agent) = raw_plane("false-alarm-gone").await;
    let client = cp.client();
    // A grace long enough that a loaded machine still sees the device back within it.
    configure(
        &agent,
        "diskHealthCheckPeriod: 1s\ndiskGoneGracePeriod: 90s\n",
    );
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");
    let backing = images.join("blk1.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(64 << 20))
        .expect("backing file");
    let device = LoopDevice::attach_apart(&backing, cp.reaper());
    let entry = agent.disk("blk1");
    std::os::unix::fs::symlink(&device.device, &entry).expect("symlink to the device");
    agent.start(&cp);
    agent.wait_ready().await;
    let pv = available(&client, &entry).await;
    claim_block(&client, &ns, "data", RAW, &pv).await;
    // The tenant's data, to find again after.
    let mark = b"the tenant's bytes, never wiped";
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&device.device)
            .expect("device opens for writing");
        f.seek(SeekFrom::Start(1 << 20)).expect("seek");
        f.write_all(mark).expect("tenant writes");
        f.sync_all().expect("tenant syncs");
    }
    let dev_before = std::fs::read_to_string(format!(
        "/sys/block/{}/dev",
        device.path().file_name().expect("name").to_string_lossy()
    ))
    .expect("sysfs dev");

    device.detach_only();
    let degraded = wait_event(&client, name(&pv), "DiskDegraded", WAIT).await;
    assert!(degraded.contains("gone"), "{degraded}");
    wait_event(&client, "data", "DiskDegraded", WAIT).await;
    eventually("the LocalDisk to say DeviceGone", WAIT, || async {
        match disk_says(&client, &entry).await? {
            (Some(h), r) if h == "Degraded" && r == "DeviceGone" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    device.reattach();
    let dev_after = std::fs::read_to_string(format!(
        "/sys/block/{}/dev",
        device.path().file_name().expect("name").to_string_lossy()
    ))
    .expect("sysfs dev");
    assert_eq!(dev_after, dev_before, "the same device is back");
    let back = wait_event(&client, name(&pv), "DiskHealthy", WAIT).await;
    assert!(back.contains("Healthy again"), "{back}");
    wait_event(&client, "data", "DiskHealthy", WAIT).await;
    eventually("the LocalDisk to say Healthy", WAIT, || async {
        match disk_says(&client, &entry).await? {
            (None, r) if r != "DeviceGone" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // A few more looks: it stays so, and nothing was done to the PV, the claim or the data.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pvs_of(&client, "node-1").await;
    let kept = now.get(&entry.display().to_string()).expect("the PV stays");
    assert_eq!(
        (phase(kept), &kept.metadata.uid),
        ("Bound".to_string(), &pv.metadata.uid)
    );
    for about in [name(&pv), "data"] {
        let bad = never_said(&client, about).await;
        assert!(bad.is_empty(), "{about} got {bad:?}");
    }
    assert_eq!(read_at(&device.device, 1 << 20, mark.len()), mark);
    assert_eq!(
        health_of(&client, std::slice::from_ref(&entry)).await,
        Ok(vec![None])
    );
    agent.process.take();
}

/// What the StatefulSet controller and the kubelet would have made for replica 0 of set `web` (recovery opted in
/// on the set): a claim `data-web-0` bound to `pv` and a Ready pod `web-0` controlled by the set.
async fn opted_in_replica(client: &kube::Client, ns: &str, class: &str, pv: &PersistentVolume) {
    crate::recovery::statefulset(client, ns, 1, Some("on")).await;
    let set = Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .expect("set");
    crate::node_agent::claim_pv(client, ns, "data-web-0", pv, class, "1Mi").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let p: Pod = obj(json!({
        "metadata": {"name": "web-0", "labels": {"app": "web"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                          "uid": set.metadata.uid, "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "db", "image": "busybox"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}]},
    }));
    pods.create(&PostParams::default(), &p)
        .await
        .expect("pod created");
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("web-0", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("pod Ready");
}

/// One transient read error (the FUSE-served disk under an ext4 fails reads until the agent's direct read has
/// failed once): `Degraded` (`ProbeIoError`), then `Healthy` after `diskHealthyAfter` (15 s) without a new sign, never
/// `Failed`. The claim is a StatefulSet replica's, recovery is on in the extender (interval 1 s) and opted in on the
/// set: nothing is deleted, since only a `Failed` disk loses a volume.
#[tokio::test(flavor = "multi_thread")]
async fn one_transient_read_error_degrades_heals_after_the_quiet_period_and_recovers_nothing() {
    use crate::support::faulty::{FaultyDisk, Mode};

    let (cp, ns, mut agent) = crate::node_agent::one_class_plane("false-alarm-eio").await;
    let client = cp.client();
    let reaper = cp.reaper();
    // Healthy again 15 s after the error: the extender (a pass every 5 s) sees the Degraded disk in between.
    configure(&agent, "diskHealthCheckPeriod: 1s\ndiskHealthyAfter: 15s\n");
    let disk = FaultyDisk::new(&cp.dir.join("hosts/node-1/faulty"), 64, "ext4", reaper);
    let vol = agent.disk("flaky");
    let _mounted = disk.mount_at(&vol, reaper);
    agent.start(&cp);
    let _extender = crate::recovery::extender(&cp, &["--recovery=true", "--recovery-interval=1s"]);
    agent.wait_ready().await;
    let pv = available(&client, &vol).await;
    opted_in_replica(&client, &ns, "local-storage", &pv).await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let claim_uid = pvcs.get("data-web-0").await.expect("claim").metadata.uid;
    let pod_uid = pods.get("web-0").await.expect("pod").metadata.uid;
    let annotated = pvcs.get("data-web-0").await.expect("claim");
    assert!(
        annotated
            .metadata
            .annotations
            .is_none_or(|a| !a.contains_key(ANN_RECOVERY)),
        "the set's opt-in is the one in force"
    );

    disk.set(Mode::FailReads);
    eventually("one failed read", WAIT, || async {
        match disk.stats().failed {
            0 => Err("no failed read yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    disk.set(Mode::Ok);
    let said = wait_event(&client, name(&pv), "DiskDegraded", WAIT).await;
    assert!(said.contains("ProbeIoError"), "{said}");
    wait_event(&client, "data-web-0", "DiskDegraded", WAIT).await;
    // The extender's Lease holder saw the Degraded disk too: it tells the pod.
    wait_event(&client, "web-0", "DiskDegraded", WAIT).await;
    // The disk's own series say so (issue 37, point 2).
    let series = |metric: &str| {
        format!("localpv_node_{metric}{{storage_class=\"local-storage\",entry=\"flaky\"}} ")
    };
    let sample = |metric: &str| {
        let text = http_get(agent.port, "/metrics")
            .map(|(_, t)| t)
            .unwrap_or_default();
        let prefix = series(metric);
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str())?.trim().parse::<f64>().ok())
    };
    eventually("the disk's health series to say Degraded", WAIT, || async {
        match sample("disk_health_state") {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let back = wait_event(&client, name(&pv), "DiskHealthy", WAIT).await;
    assert!(back.contains("it was Degraded"), "{back}");
    wait_event(&client, "data-web-0", "DiskHealthy", WAIT).await;
    // And the extender's Lease holder gives the pod it told the all-clear too.
    let pod_back = wait_event(&client, "web-0", "DiskHealthy", WAIT).await;
    assert!(pod_back.contains("Healthy again"), "{pod_back}");
    eventually("the LocalDisk to say Healthy", WAIT, || async {
        match health_of(&client, std::slice::from_ref(&vol)).await?[..] {
            [None] => Ok(()),
            ref other => Err(format!("{other:?}")),
        }
    })
    .await;

    eventually("the disk's health series to say Healthy", WAIT, || async {
        match sample("disk_health_state") {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let errors = sample("disk_io_errors_total").expect("the disk's error counter");
    assert!(errors >= 1.0, "the transient error stays counted: {errors}");

    // Recovery passes (1 s apart) had time to act: nothing was deleted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pvs_of(&client, "node-1").await;
    let kept = now.get(&vol.display().to_string()).expect("the PV stays");
    assert_eq!(
        (phase(kept), &kept.metadata.uid),
        ("Bound".to_string(), &pv.metadata.uid)
    );
    assert_eq!(
        pvcs.get("data-web-0").await.expect("claim").metadata.uid,
        claim_uid
    );
    assert_eq!(pods.get("web-0").await.expect("pod").metadata.uid, pod_uid);
    for about in [name(&pv), "data-web-0", "web-0", "web"] {
        let bad = never_said(&client, about).await;
        assert!(bad.is_empty(), "{about} got {bad:?}");
    }
    agent.process.take();
}

/// A raw device that shows up with a size of 0 (a loop device over an empty file: what a detached device or
/// removable media gone look like) between two health looks: never published. The pass that finds it looks at its
/// health at once instead of at the next period, so the disk is `Degraded` (`DeviceGone`) before the planner sees
/// it, no PV is made, and no create is sent for the API server to refuse (a PV's capacity must be above 0).
#[tokio::test(flavor = "multi_thread")]
async fn a_raw_device_of_size_zero_found_between_health_looks_is_never_published() {
    let (cp, _ns, mut agent) = raw_plane("size-zero").await;
    let client = cp.client();
    // The first look comes at start; the next one an hour later.
    configure(&agent, "diskHealthCheckPeriod: 1h\n");
    agent.start(&cp);
    agent.wait_ready().await;
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");
    let backing = images.join("empty.img");
    std::fs::File::create(&backing).expect("empty backing file");
    // NB: not `attach_apart`: the test beside this one detaches its apart number and attaches it again.
    let device = LoopDevice::attach(&backing, cp.reaper());
    let entry = agent.disk("empty");
    std::os::unix::fs::symlink(&device.device, &entry).expect("symlink to the device");
    eventually(
        "the LocalDisk to say Degraded, DeviceGone",
        WAIT,
        || async {
            match disk_says(&client, &entry).await? {
                (Some(health), reason) if health == "Degraded" && reason == "DeviceGone" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pvs = pvs_of(&client, "node-1").await;
    assert!(
        !pvs.contains_key(&entry.display().to_string()),
        "no PV for a device of size 0: {pvs:?}"
    );
    let log = agent.log();
    assert!(
        !log.contains("failed to write to the API server"),
        "no create sent for the API server to refuse:\n{log}"
    );
    agent.process.take();
}
