//! Issue 37 on a real control plane with real filesystems: an xfs that shuts itself down (the kernel's own
//! shutdown, as after a metadata I/O error, here forced with `xfs_io -x -c shutdown`) under an Available PV and under
//! a Bound one. The LocalDisks say `Failed`; the Available PV is withdrawn at the first sign (never handed to a new
//! claim), with a `DiskDegraded` Event; the Bound PV and its claim get `DiskDegraded` then `DiskFailed` Events and
//! nothing else happens to them; a healthy neighbour on the same node is untouched.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, ListParams};
use localpv::inventory::LocalDisk;

use crate::node_agent::{claim_pv, events_of, one_class_plane, phase, pv_at, pvs_of, wait_event};
use crate::support::disks::{LoopDevice, Mount, run};
use crate::support::eventually;

const CLASS: &str = "local-storage";

fn name(pv: &PersistentVolume) -> &str {
    pv.metadata.name.as_deref().expect("name")
}

/// Appends `lines` (configuration keys) to the agent's configuration, before it starts.
pub(crate) fn configure(agent: &crate::support::agent::Agent, lines: &str) {
    let config = std::fs::read_to_string(&agent.config).expect("agent config");
    std::fs::write(&agent.config, format!("{config}{lines}")).expect("agent config written");
}

/// node-1's PV for `vol`, once Available.
pub(crate) async fn available(client: &kube::Client, vol: &std::path::Path) -> PersistentVolume {
    pv_at(client, "node-1", vol, "Available", Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_that_fails_is_withdrawn_and_its_tenant_told() {
    let (cp, ns, mut agent) = one_class_plane("failure").await;
    let client = cp.client();
    let reaper = cp.reaper();
    let hosts = cp.dir.join("hosts/node-1");
    // Looked at every second, so the bounded waits below stay short.
    configure(&agent, "diskHealthCheckPeriod: 1s\n");
    let mut loops = Vec::new();
    let mut mounts = Vec::new();
    let mut vols = Vec::new();
    for entry in ["free", "bound", "healthy"] {
        let vol = agent.disk(entry);
        let device = LoopDevice::new(
            &hosts.join(format!("{entry}.img")),
            320,
            Some("xfs"),
            reaper,
        );
        mounts.push(Mount::device(&device.device, &vol, reaper));
        loops.push(device);
        vols.push(vol);
    }
    agent.start(&cp);
    agent.wait_ready().await;
    let mut pvs = Vec::new();
    for vol in &vols {
        pvs.push(available(&client, vol).await);
    }
    claim_pv(&client, &ns, "data", &pvs[1], CLASS, "1Mi").await;

    for vol in &vols[..2] {
        run(
            "xfs_io",
            &["-x", "-c", "shutdown", &vol.display().to_string()],
        );
    }

    // The Available PV is withdrawn at the first sign (Degraded), with an Event saying why; the Bound PV and its
    // claim are told, and told again when the disk is Failed.
    let said = wait_event(
        &client,
        name(&pvs[0]),
        "DiskDegraded",
        Duration::from_secs(60),
    )
    .await;
    assert!(said.contains("withdrawn"), "{said}");
    eventually(
        "the free disk's PV to be withdrawn",
        Duration::from_secs(60),
        || async {
            match pvs_of(&client, "node-1")
                .await
                .get(&vols[0].display().to_string())
            {
                None => Ok(()),
                Some(pv) => Err(format!("{} is {}", name(pv), phase(pv))),
            }
        },
    )
    .await;
    wait_event(
        &client,
        name(&pvs[1]),
        "DiskFailed",
        Duration::from_secs(60),
    )
    .await;
    wait_event(&client, "data", "DiskFailed", Duration::from_secs(60)).await;

    // The LocalDisks say so.
    eventually(
        "the LocalDisks to say Failed",
        Duration::from_secs(60),
        || async {
            let got = health_of(&client, &vols).await?;
            match got[..] {
                [Some(ref a), Some(ref b), None] if a == "Failed" && b == "Failed" => Ok(()),
                _ => Err(format!("{got:?}")),
            }
        },
    )
    .await;

    // Nothing happens to the Bound PV, and a healthy neighbour is untouched and still published.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pvs_of(&client, "node-1").await;
    let bound = now
        .get(&vols[1].display().to_string())
        .expect("the Bound PV stays");
    assert_eq!(phase(bound), "Bound");
    let healthy = now
        .get(&vols[2].display().to_string())
        .expect("the healthy PV stays");
    assert_eq!(healthy.metadata.uid, pvs[2].metadata.uid);
    let reasons: Vec<String> = events_of(&client, name(&pvs[2]))
        .await
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert!(
        !reasons.iter().any(|r| r.starts_with("Disk")),
        "the healthy disk got {reasons:?}"
    );
    agent.process.take();
    drop(mounts);
    drop(loops);
}

/// `localpv disks cordon NODE/ENTRY` withdraws the disk's Available PV and keeps it unpublished across an agent
/// restart (the state is on the LocalDisk); `uncordon` publishes it again (issue 37, point 4).
#[tokio::test(flavor = "multi_thread")]
async fn a_cordoned_disk_is_withdrawn_until_uncordoned_across_a_restart() {
    let (cp, _ns, mut agent) = one_class_plane("cordon").await;
    let client = cp.client();
    let vol = agent.disk("vol1");
    let _m = Mount::tmpfs(&vol, "16M", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    let pv = available(&client, &vol).await;
    let cli = |verb: &str| disks_cli(&cp, verb, "node-1/vol1");
    let said = cli("cordon");
    assert!(said.starts_with("cordoned "), "{said}");
    wait_event(&client, name(&pv), "DiskCordoned", Duration::from_secs(30)).await;
    let gone = || async {
        match pvs_of(&client, "node-1")
            .await
            .get(&vol.display().to_string())
        {
            None => Ok(()),
            Some(pv) => Err(format!("{} is {}", name(pv), phase(pv))),
        }
    };
    eventually(
        "the cordoned disk's PV to be withdrawn",
        Duration::from_secs(30),
        gone,
    )
    .await;
    agent
        .process
        .take()
        .expect("running")
        .stop(Duration::from_secs(10));
    agent.start(&cp);
    agent.wait_ready().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    eventually(
        "still unpublished after a restart",
        Duration::from_secs(5),
        gone,
    )
    .await;
    let said = cli("uncordon");
    assert!(said.starts_with("uncordoned "), "{said}");
    pv_at(
        &client,
        "node-1",
        &vol,
        "Available",
        Duration::from_secs(30),
    )
    .await;
    agent.process.take();
}

/// Real I/O errors (issue 37's proof): an ext4 on a disk whose writes start failing (a loop device over a FUSE
/// image, `support::faulty`) while its tenant writes and syncs. The kernel counts the error and stops the filesystem
/// (`emergency_ro`); the agent says `Failed` on the LocalDisk and withdraws the Available PV of the same disk at the
/// first sign; a healthy neighbour keeps its PV.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_whose_writes_fail_is_marked_unhealthy_and_withdrawn() {
    use std::io::Write;

    use crate::support::faulty::{FaultyDisk, Mode};

    let (cp, _ns, mut agent) = one_class_plane("failure-eio").await;
    let client = cp.client();
    let reaper = cp.reaper();
    configure(&agent, "diskHealthCheckPeriod: 1s\n");
    let disk = FaultyDisk::new(&cp.dir.join("hosts/node-1/faulty"), 64, "ext4", reaper);
    let sick = agent.disk("sick");
    let _sick = disk.mount_at(&sick, reaper);
    let well = agent.disk("well");
    let _well = Mount::tmpfs(&well, "16M", reaper);
    agent.start(&cp);
    agent.wait_ready().await;
    let pv = available(&client, &sick).await;
    let neighbour = available(&client, &well).await;

    disk.set(Mode::FailWrites);
    let mut file = std::fs::File::create(sick.join("tenant.txt")).expect("create");
    let _ = file.write_all(&[7u8; 1 << 16]);
    let synced = file.sync_all();
    assert!(
        synced.is_err(),
        "the sync should fail on a disk whose writes fail"
    );

    let said = wait_event(&client, name(&pv), "DiskDegraded", Duration::from_secs(60)).await;
    assert!(said.contains("withdrawn"), "{said}");
    eventually(
        "the LocalDisk to say Degraded or Failed",
        Duration::from_secs(60),
        || async {
            let got = health_of(&client, std::slice::from_ref(&sick)).await?;
            match got[0].as_deref() {
                Some("Degraded" | "Failed") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let now = pvs_of(&client, "node-1").await;
    assert!(!now.contains_key(&sick.display().to_string()), "withdrawn");
    let kept = now
        .get(&well.display().to_string())
        .expect("the healthy PV stays");
    assert_eq!(kept.metadata.uid, neighbour.metadata.uid);
    agent.process.take();
    disk.set(Mode::Ok);
}

/// `localpv disks VERB DISK` as a cluster admin; what it printed.
pub(crate) fn disks_cli(
    cp: &crate::support::cluster::ControlPlane,
    verb: &str,
    disk: &str,
) -> String {
    let kubeconfig = cp.kubeconfig_for("operator", "operator", &["system:masters"]);
    let out = std::process::Command::new(crate::support::agent::localpv_bin())
        .args([
            "disks",
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            verb,
            disk,
        ])
        .output()
        .expect("localpv runs");
    assert!(
        out.status.success(),
        "{verb}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The health the agent judged outlives it (issue 37): `sick` failed by read errors that have since stopped and
/// `blip` degraded by one transient read error under a Bound PV, then the agent restarts. `sick` stays `Failed`
/// (without the kept record its clean reads would publish it again at once) and unpublished; `blip` stays
/// `Degraded` until the rest of its quiet period is over, then its PV and claim get `DiskHealthy` (the warning was
/// given before the restart). Then `localpv disks clear-health` publishes the failed disk again.
#[tokio::test(flavor = "multi_thread")]
async fn the_disks_health_outlives_an_agent_restart() {
    use crate::support::faulty::{FaultyDisk, Mode};

    let (cp, ns, mut agent) = one_class_plane("failure-restart").await;
    let client = cp.client();
    let reaper = cp.reaper();
    configure(
        &agent,
        "diskHealthCheckPeriod: 1s\ndiskHealthyAfter: 25s\ndiskFailedAfterErrors: 2\n",
    );
    let hosts = cp.dir.join("hosts/node-1");
    let failing = FaultyDisk::new(&hosts.join("faulty-sick"), 64, "ext4", reaper);
    let flaky = FaultyDisk::new(&hosts.join("faulty-blip"), 64, "ext4", reaper);
    let (sick, blip) = (agent.disk("sick"), agent.disk("blip"));
    let _sick = failing.mount_at(&sick, reaper);
    let _blip = flaky.mount_at(&blip, reaper);
    agent.start(&cp);
    agent.wait_ready().await;
    available(&client, &sick).await;
    let bound = available(&client, &blip).await;
    claim_pv(&client, &ns, "data", &bound, CLASS, "1Mi").await;

    let one_failed_read = |disk: &FaultyDisk| match disk.stats().failed {
        0 => Err("no failed read yet".to_string()),
        _ => Ok(()),
    };
    failing.set(Mode::FailReads);
    flaky.set(Mode::FailReads);
    eventually("a failed read on blip", Duration::from_secs(60), || async {
        one_failed_read(&flaky)
    })
    .await;
    flaky.set(Mode::Ok);
    eventually("sick to say Failed", Duration::from_secs(60), || async {
        match health_of(&client, std::slice::from_ref(&sick)).await?[0].as_deref() {
            Some("Failed") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    failing.set(Mode::Ok);
    wait_event(
        &client,
        name(&bound),
        "DiskDegraded",
        Duration::from_secs(60),
    )
    .await;
    wait_event(&client, "data", "DiskDegraded", Duration::from_secs(60)).await;

    agent
        .process
        .take()
        .expect("running")
        .stop(Duration::from_secs(10));
    agent.start(&cp);
    agent.wait_ready().await;
    let said = wait_event(
        &client,
        name(&bound),
        "DiskHealthy",
        Duration::from_secs(90),
    )
    .await;
    assert!(said.contains("Degraded"), "{said}");
    wait_event(&client, "data", "DiskHealthy", Duration::from_secs(30)).await;
    // Well past the restart, the failed disk is still Failed and has no PV; the healed one's LocalDisk says so.
    eventually(
        "the LocalDisks to say Failed and healthy",
        Duration::from_secs(30),
        || async {
            match &health_of(&client, &[sick.clone(), blip.clone()]).await?[..] {
                [Some(failed), None] if failed == "Failed" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        !pvs_of(&client, "node-1")
            .await
            .contains_key(&sick.display().to_string()),
        "the failed disk was published again after the restart"
    );

    // The operator says the failed disk is fine: it is published again.
    let said = disks_cli(&cp, "clear-health", "node-1/sick");
    assert!(said.starts_with("cleared the health of "), "{said}");
    available(&client, &sick).await;
    agent.process.take();
}

/// The Healthy condition's reason on the LocalDisk at `vol`, and its health (None: healthy).
pub async fn disk_says(
    client: &kube::Client,
    vol: &std::path::Path,
) -> Result<(Option<String>, String), String> {
    let disk = Api::<LocalDisk>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .find(|d| d.spec.path == vol.display().to_string())
        .ok_or("no LocalDisk for the disk")?;
    let status = disk.status.ok_or("no status")?;
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Healthy")
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    Ok((status.health, reason))
}

/// The `status.health` of the LocalDisk at each of `vols` (None: healthy, or no such LocalDisk).
pub(crate) async fn health_of(
    client: &kube::Client,
    vols: &[std::path::PathBuf],
) -> Result<Vec<Option<String>>, String> {
    let list = Api::<LocalDisk>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let health = |vol: &std::path::PathBuf| {
        list.items
            .iter()
            .find(|d| d.spec.path == vol.display().to_string())
            .and_then(|d| d.status.as_ref()?.health.clone())
    };
    Ok(vols.iter().map(health).collect())
}

/// The device under a Bound PV gone for good (issue 37, point 1): the loop device under its mounted ext4 detached
/// (the kernel keeps it until the unmount) and its backing file deleted (the data goes with that unmount). The PV
/// and its claim are told `DiskDegraded` at the next look and `DiskFailed` once gone past `diskGoneGracePeriod`, the
/// LocalDisk says `Failed` (`DeviceGone`), and the PV stays Bound: nothing is deleted or wiped.
#[tokio::test(flavor = "multi_thread")]
async fn a_device_gone_under_a_bound_pv_is_degraded_at_once_and_failed_past_the_grace() {
    let (cp, ns, mut agent) = one_class_plane("gone").await;
    let client = cp.client();
    let reaper = cp.reaper();
    configure(
        &agent,
        "diskHealthCheckPeriod: 1s\ndiskGoneGracePeriod: 6s\n",
    );
    let vol = agent.disk("vol1");
    let backing = cp.dir.join("hosts/node-1/vol1.img");
    let mut device = LoopDevice::new(&backing, 320, Some("ext4"), reaper);
    let mount = Mount::device(&device.device, &vol, reaper);
    agent.start(&cp);
    agent.wait_ready().await;
    let pv = available(&client, &vol).await;
    claim_pv(&client, &ns, "data", &pv, CLASS, "1Mi").await;

    run("losetup", &["-d", &device.device]);
    // NB: detached already; the unmount below frees it (autoclear), and the number may then be someone else's.
    device.device.clear();
    std::fs::remove_file(&backing).expect("backing file removed");

    let degraded = wait_event(&client, name(&pv), "DiskDegraded", Duration::from_secs(30)).await;
    assert!(degraded.contains("gone"), "{degraded}");
    let failed = wait_event(&client, name(&pv), "DiskFailed", Duration::from_secs(30)).await;
    assert!(failed.contains("gone"), "{failed}");
    wait_event(&client, "data", "DiskFailed", Duration::from_secs(30)).await;
    // The LocalDisk's status is written by the inventory's own writer, which may trail the Events by a pass.
    eventually(
        "the LocalDisk to say Failed with DeviceGone",
        Duration::from_secs(30),
        || async {
            match disk_says(&client, &vol).await? {
                (Some(health), reason) if health == "Failed" && reason == "DeviceGone" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let now = pvs_of(&client, "node-1").await;
    let bound = now.get(&vol.display().to_string()).expect("the PV stays");
    assert_eq!(
        (phase(bound), &bound.metadata.uid),
        ("Bound".into(), &pv.metadata.uid)
    );
    agent.process.take();
    drop(mount);
}
