//! The LocalDisk inventory end to end (issue 6): a node agent over real loop devices (ext4 and xfs mounted, a raw
//! device behind a symlink in a Block class) and entries it cannot use writes one LocalDisk per entry with the
//! disk's identity, follows a volume through its life, keeps a disk's object when its device is renamed, gives a
//! reformatted disk a new one, and writes nothing in a steady state. Read back the ways an operator reads it:
//! `kubectl get ldisk`, `localpv disks` and the agent's `GET /disks`.

mod checks;
mod kit;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use localpv::inventory::format::human_bytes;
use localpv::inventory::{LocalDisk, LocalDiskPhase};
use serde_json::json;

use self::checks::{
    agent_reports_what_it_sees, assert_block_identity, assert_fs_identity, assert_unusable,
    kubectl_shows_the_columns, localpv_disks_lists_them,
};
use self::kit::{
    FsDisk, History, MIB, Step, WAIT, at_path, claim, describe, disk_writes, fs_capacity, fs_disk,
    named, passes, phase_of, plane, pv_of, wait_disks,
};
use crate::node_agent::{phase, pvs_of};
use crate::support::agent::Agent;
use crate::support::cluster::ControlPlane;
use crate::support::disks::{LoopDevice, Mount, blkid, mkfs, run};
use crate::support::eventually;

#[tokio::test(flavor = "multi_thread")]
async fn local_disks_describe_every_entry_follow_a_volume_through_its_life_and_stay_quiet() {
    let cp = plane(&[("local-storage", "Delete"), ("raw-block", "Delete")]).await;
    let client = cp.client();
    let ns = cp.namespace("inventory").await;
    // The cleaner runs after the in-process removal; slow on purpose so the Wiping phase can be seen.
    let slow_cleaner = "    fsCleanerCommand: [\"sleep\", \"4\"]\n";
    let mut agent = Agent::with_classes(
        &cp,
        "node-1",
        &[
            ("local-storage", "disks", slow_cleaner),
            ("raw-block", "raw", "    volumeMode: Block\n"),
        ],
    );
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");

    // ext4 and xfs (xfs needs 300 MiB at least), formatted with labels, mounted under the Filesystem class.
    let ext4_dev = LoopDevice::new(&images.join("ext4.img"), 64, None, cp.reaper());
    let xfs_dev = LoopDevice::new(&images.join("xfs.img"), 320, None, cp.reaper());
    mkfs("ext4", &ext4_dev.device, Some("inv-ext4"));
    mkfs("xfs", &xfs_dev.device, Some("inv-xfs"));
    let _m_ext4 = Mount::device(&ext4_dev.device, &agent.disk("vol-ext4"), cp.reaper());
    let _m_xfs = Mount::device(&xfs_dev.device, &agent.disk("vol-xfs"), cp.reaper());
    let ext4 = fs_disk(&agent.disk("vol-ext4"), &ext4_dev.device);
    let xfs = fs_disk(&agent.disk("vol-xfs"), &xfs_dev.device);
    // Entries the agent cannot use: a stray file and a plain directory.
    std::fs::write(agent.disk("README"), "not a disk").expect("stray file");
    std::fs::create_dir_all(agent.disk("scratch")).expect("plain dir");
    // A raw device in the Block class, behind a symlink as the reference provisioner's docs set them up.
    let raw_dev = LoopDevice::new(&images.join("raw.img"), 64, None, cp.reaper());
    let raw_dir = cp.dir.join("hosts/node-1/raw");
    let blk1 = raw_dir.join("blk1");
    std::os::unix::fs::symlink(&raw_dev.device, &blk1).expect("symlink to the raw device");

    agent.start(&cp);
    agent.wait_ready().await;
    let api: Api<LocalDisk> = Api::all(client.clone());

    // Every entry has its LocalDisk once the PVs exist, with identity and phase.
    let pvs = eventually("three Available PVs", WAIT, || async {
        let pvs = pvs_of(&client, "node-1").await;
        let ready = pvs.len() == 3 && pvs.values().all(|pv| phase(pv) == "Available");
        if ready {
            Ok(pvs)
        } else {
            Err(format!("{:?}", pvs.keys()))
        }
    })
    .await;
    let pv_name = |path: &Path| -> String {
        pvs[&path.display().to_string()]
            .metadata
            .name
            .clone()
            .expect("PV has a name")
    };
    let (readme, scratch, block) = wait_disks(&api, "a LocalDisk per entry", |disks| {
        if disks.len() != 5 {
            return Err(format!("{} LocalDisks, want 5", disks.len()));
        }
        for (d, path) in [(&ext4, &ext4.path), (&xfs, &xfs.path)] {
            let disk = named(disks, &d.name)?;
            if pv_of(disk) != Some(pv_name(path)) {
                return Err(format!("{} does not name its PV yet", d.name));
            }
        }
        let one = |path: &Path| -> Result<LocalDisk, String> {
            match at_path(disks, path).as_slice() {
                [d] => Ok((*d).clone()),
                other => Err(format!("{} LocalDisks at {}", other.len(), path.display())),
            }
        };
        let block = one(&blk1)?;
        if pv_of(&block) != Some(pv_name(&blk1)) {
            return Err("the block disk does not name its PV yet".into());
        }
        Ok((
            one(&agent.disk("README"))?,
            one(&agent.disk("scratch"))?,
            block,
        ))
    })
    .await;
    let disks = api.list(&ListParams::default()).await.expect("list").items;
    for fs in [&ext4, &xfs] {
        let d = named(&disks, &fs.name).expect("listed above");
        assert_fs_identity(d, fs, "local-storage");
        assert_eq!(
            phase_of(d),
            LocalDiskPhase::Available,
            "{}",
            describe(&disks)
        );
    }
    let raw_size = 64 * MIB;
    assert_block_identity(&block, &blk1, &raw_dev.device, raw_size);
    assert_unusable(&readme, "NotADiskEntry");
    assert_unusable(&scratch, "NotAMountPoint");

    agent_reports_what_it_sees(&agent, &[&ext4, &xfs], &blk1);
    kubectl_shows_the_columns(&cp, &ext4, &xfs, &raw_dev.device);
    let capacity = |fs: &FsDisk| fs_capacity(&fs.path);
    let free = capacity(&ext4) + capacity(&xfs);
    let total = free + raw_size;
    let summary = format!(
        "5 disks, {} in total; local-storage: 2 free ({}), 0 bound, 2 other; raw-block: 1 free (64.0MiB), 0 bound",
        human_bytes(total),
        human_bytes(free)
    );
    localpv_disks_lists_them(&cp, &[&ext4, &xfs], &blk1, &summary);

    a_hand_edit_is_put_right(&api, &xfs).await;
    steady_state_writes_nothing(&cp, &agent, &pvs).await;

    a_volume_is_followed_through_its_life(&cp, &ns, &ext4, &pvs[&ext4.path.display().to_string()])
        .await;
    agent.process.take();
    drop((_m_ext4, _m_xfs));
}

/// A volume's life on the LocalDisk of `fs`: bound through a claim pre-bound to `pv`, released, wiped (seen while
/// the slow cleaner runs), published again; the same object all along.
async fn a_volume_is_followed_through_its_life(
    cp: &ControlPlane,
    ns: &str,
    fs: &FsDisk,
    pv: &PersistentVolume,
) {
    let client = cp.client();
    let api: Api<LocalDisk> = Api::all(client.clone());
    let history = History::follow(api.clone(), &fs.name);
    eventually("the watch on the LocalDisk to list it", WAIT, || async {
        if history.steps().is_empty() {
            Err("nothing yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    let before = api.get(&fs.name).await.expect("the LocalDisk exists");
    let first_pv = pv.metadata.name.clone().expect("PV has a name");
    claim(&client, ns, "data-1", &first_pv, "local-storage").await;
    let claim = format!("{ns}/data-1");
    wait_disks(&api, "the LocalDisk to be Bound to the claim", |disks| {
        let d = named(disks, &fs.name)?;
        let status = d.status.clone().unwrap_or_default();
        let bound = status.phase == LocalDiskPhase::Bound
            && status.claim.as_deref() == Some(claim.as_str())
            && status.pv.as_deref() == Some(first_pv.as_str());
        if bound {
            Ok(())
        } else {
            Err("not Bound yet".into())
        }
    })
    .await;
    std::fs::write(fs.path.join("tenant.txt"), "tenant data").expect("tenant writes");
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .delete("data-1", &DeleteParams::default())
        .await
        .expect("PVC deleted");
    // NB: the PV name derives from node, class and entry: the new PV has the old one's name and a new UID.
    let path = fs.path.display().to_string();
    eventually(
        "the disk to come back as a new Available PV",
        WAIT,
        || async {
            let now = pvs_of(&client, "node-1").await;
            match now.get(&path) {
                Some(p) if p.metadata.uid != pv.metadata.uid && phase(p) == "Available" => Ok(()),
                other => Err(format!(
                    "{:?}",
                    other.map(|p| (p.metadata.uid.clone(), phase(p)))
                )),
            }
        },
    )
    .await;
    eventually("the LocalDisk to follow its PV", WAIT, || async {
        followed(&history.steps(), &first_pv, &claim)
    })
    .await;
    assert!(
        !fs.path.join("tenant.txt").exists(),
        "the tenant's data is wiped"
    );
    let after = api.get(&fs.name).await.expect("the LocalDisk exists");
    assert_eq!(
        after.metadata.uid, before.metadata.uid,
        "the disk kept its LocalDisk through the reclaim"
    );
}

/// The agent is the objects' only writer: a status an operator edits by hand (another field manager) is put back
/// at the agent's next list of its LocalDisks: within `minResyncPeriod`, or at once when the Node is marked
/// (`localpv.io/disks-changed`, as `localpv disks` does after its own changes), which is what this does.
async fn a_hand_edit_is_put_right(api: &Api<LocalDisk>, fs: &FsDisk) {
    let edit = json!({"status": {"phase": "Failing", "reason": "EditedByHand"}});
    api.patch(&fs.name, &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("LocalDisk edited");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(api.clone().into_client());
    let mark = json!({"metadata": {"annotations": {"localpv.io/disks-changed": "edited by hand"}}});
    nodes
        .patch("node-1", &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .expect("Node marked");
    wait_disks(
        api,
        "the agent to put the edited LocalDisk right",
        |disks| {
            let d = named(disks, &fs.name)?;
            let status = d.status.clone().unwrap_or_default();
            if status.phase == LocalDiskPhase::Available && status.reason.is_none() {
                Ok(())
            } else {
                Err(format!("{:?} {:?}", status.phase, status.reason))
            }
        },
    )
    .await;
}

/// After things settle, passes over the unchanged node (woken by PV events) write no LocalDisk.
async fn steady_state_writes_nothing(
    cp: &ControlPlane,
    agent: &Agent,
    pvs: &BTreeMap<String, PersistentVolume>,
) {
    eventually("the agent's LocalDisk writes to settle", WAIT, || async {
        let before = disk_writes(cp, agent).len();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = disk_writes(cp, agent).len();
        if before == after {
            Ok(())
        } else {
            Err(format!("{} writes in 3s", after - before))
        }
    })
    .await;
    let writes_before = disk_writes(cp, agent).len();
    let passes_before = passes(agent);
    // Unrelated PV changes wake the agent: each wake is a full discovery and inventory pass.
    let api: Api<PersistentVolume> = Api::all(cp.client());
    for (i, pv) in pvs.values().enumerate() {
        let name = pv.metadata.name.as_deref().expect("PV has a name");
        let patch = json!({"metadata": {"annotations": {"example.com/poke": i.to_string()}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("PV annotated");
    }
    eventually(
        "the agent to run passes after the PV changes",
        WAIT,
        || async {
            let now = passes(agent);
            if now > passes_before {
                Ok(())
            } else {
                Err(format!("{now} passes"))
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = disk_writes(cp, agent);
    assert_eq!(
        writes[writes_before..].to_vec(),
        vec![],
        "a steady state writes no LocalDisk ({} passes ran)",
        passes(agent) - passes_before
    );
}

/// Whether the LocalDisk went Bound (PV and claim) → Wiping (with wipe progress) and Released → Available (the
/// PV again, no claim). Err says what is missing so far.
fn followed(steps: &[Step], first_pv: &str, claim: &str) -> Result<(), String> {
    let show = || format!("{steps:#?}");
    let bound = steps
        .iter()
        .position(|s| s.phase == LocalDiskPhase::Bound)
        .ok_or_else(|| format!("never Bound: {}", show()))?;
    let b = &steps[bound];
    if b.pv.as_deref() != Some(first_pv) || b.claim.as_deref() != Some(claim) {
        return Err(format!("Bound without PV and claim: {}", show()));
    }
    let after_bound = &steps[bound..];
    let wiping = after_bound
        .iter()
        .position(|s| s.phase == LocalDiskPhase::Wiping && s.wipe_reported)
        .ok_or_else(|| format!("never Wiping with progress after Bound: {}", show()))?;
    let released = after_bound
        .iter()
        .find(|s| s.phase == LocalDiskPhase::Released)
        .ok_or_else(|| format!("never Released after Bound: {}", show()))?;
    if released.claim.as_deref() != Some(claim) {
        return Err(format!("the claim is not kept while Released: {}", show()));
    }
    let last = steps.last().filter(|_| after_bound.len() > wiping + 1);
    match last {
        Some(s)
            if s.phase == LocalDiskPhase::Available
                && s.pv.as_deref() == Some(first_pv)
                && s.claim.is_none() =>
        {
            Ok(())
        }
        _ => Err(format!(
            "not Available with its new PV after the wipe: {}",
            show()
        )),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_keeps_its_local_disk_across_a_device_rename_and_a_reformat_gets_a_new_one() {
    let cp = plane(&[("local-storage", "Delete")]).await;
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");
    let backing = images.join("vol1.img");
    let first = LoopDevice::new(&backing, 64, None, cp.reaper());
    mkfs("ext4", &first.device, Some("inv-rename"));
    let vol1 = agent.disk("vol1");
    let mount = Mount::device(&first.device, &vol1, cp.reaper());
    let disk = fs_disk(&vol1, &first.device);
    agent.start(&cp);
    agent.wait_ready().await;
    let api: Api<LocalDisk> = Api::all(cp.client());

    let original = wait_disks(&api, "vol1's LocalDisk to be Available", |disks| {
        let d = named(disks, &disk.name)?;
        let ready = phase_of(d) == LocalDiskPhase::Available
            && d.status.as_ref().is_some_and(|s| s.pv.is_some());
        if ready {
            Ok(d.clone())
        } else {
            Err("not Available with a PV yet".into())
        }
    })
    .await;
    assert_eq!(original.spec.device.as_deref(), Some(first.device.as_str()));

    // Detach and attach again under another number: unmount, detach, take the freed number with an unrelated
    // device, attach the same file, mount it again.
    mount.unmount_now();
    wait_disks(
        &api,
        "vol1's LocalDisk to go Missing while unmounted",
        |disks| {
            let d = named(disks, &disk.name)?;
            if phase_of(d) == LocalDiskPhase::Missing {
                Ok(())
            } else {
                Err("not Missing yet".into())
            }
        },
    )
    .await;
    let old_device = first.device.clone();
    drop(first);
    let mut fillers = Vec::new();
    while run("losetup", &["--find"]).trim() == old_device && fillers.len() < 4 {
        let filler = images.join(format!("filler-{}.img", fillers.len()));
        fillers.push(LoopDevice::new(&filler, 1, None, cp.reaper()));
    }
    let again = LoopDevice::attach(&backing, cp.reaper());
    assert_ne!(
        again.device, old_device,
        "the loop file came back under another number"
    );
    let mount = Mount::device(&again.device, &vol1, cp.reaper());
    assert_eq!(
        blkid(&again.device).get("UUID").map(String::as_str),
        Some(disk.uuid())
    );
    let renamed = wait_disks(
        &api,
        "vol1's LocalDisk to be Available on the new device",
        |disks| {
            let d = named(disks, &disk.name)?;
            let back = phase_of(d) == LocalDiskPhase::Available
                && d.spec.device.as_deref() == Some(again.device.as_str());
            if !back {
                return Err("not back yet".into());
            }
            match at_path(disks, &vol1).len() {
                1 => Ok(d.clone()),
                n => Err(format!(
                    "{n} LocalDisks at vol1: the unmounted directory's object is not gone"
                )),
            }
        },
    )
    .await;
    assert_eq!(
        renamed.metadata.uid, original.metadata.uid,
        "same object, not a new one"
    );
    assert_eq!(
        renamed.metadata.creation_timestamp,
        original.metadata.creation_timestamp
    );
    assert_eq!(
        renamed
            .status
            .as_ref()
            .and_then(|s| s.missing_since.clone()),
        None
    );

    // Reformat the same device: a new filesystem UUID is a new disk; the old object goes Missing.
    mount.unmount_now();
    mkfs("ext4", &again.device, Some("inv-new"));
    let mount = Mount::device(&again.device, &vol1, cp.reaper());
    let reformatted = fs_disk(&vol1, &again.device);
    assert_ne!(reformatted.uuid(), disk.uuid(), "mkfs gives a new UUID");
    let (new, old) = wait_disks(
        &api,
        "a new LocalDisk for the reformatted disk, the old one Missing",
        |disks| {
            let new = named(disks, &reformatted.name)?;
            let old = named(disks, &disk.name)?;
            let done = phase_of(new) == LocalDiskPhase::Available
                && phase_of(old) == LocalDiskPhase::Missing;
            if done {
                Ok((new.clone(), old.clone()))
            } else {
                Err("not yet".into())
            }
        },
    )
    .await;
    assert_ne!(new.metadata.uid, original.metadata.uid);
    assert_fs_identity(&new, &reformatted, "local-storage");
    assert_eq!(old.metadata.uid, original.metadata.uid);
    let status = old.status.clone().unwrap_or_default();
    assert_eq!(status.reason.as_deref(), Some("DiskNotFound"));
    assert!(status.missing_since.is_some(), "{status:?}");
    assert_eq!(
        old.spec.path,
        vol1.display().to_string(),
        "the old object still says where the disk was"
    );

    agent.process.take();
    drop(mount);
    drop(again);
    drop(fillers);
}
