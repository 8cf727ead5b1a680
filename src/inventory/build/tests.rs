//! Inventory decisions over a small simulated world: findings and PVs in, changes out, applied to the existing
//! LocalDisks by a tiny executor so the next pass sees them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolume;
use rstest::rstest;

use localpv_test_support::objects::Pv;

use super::*;
use crate::contract::{ANN_FS_UUID, ANN_WIPE_LIFETIME, ANN_WIPE_PHASE, CLASS_LABEL, NODE_LABEL};
use crate::disk::{ClassFailure, Disk, DiskIdentity, Unusable, UnusableReason, VolumeMode};
use crate::inventory::crd::{CONDITION_DUPLICATE_UUID, CONDITION_WIPE_FAILED, LocalDiskStatus};
use crate::inventory::inputs::{Settings, WipeFailures, WipeSample};
use crate::plan::{DiskLedger, DiskState, HoldReason, Unpublished};

const NODE: &str = "n1";
const CLASS: &str = "local-storage";
const UUID: &str = "6f1c5a7e-2b4d-4c3a-9e8f-0a1b2c3d4e5f";
const GIB: u64 = 1 << 30;

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn fs_disk(entry: &str, uuid: &str) -> Disk {
    Disk {
        class: CLASS.into(),
        entry: entry.into(),
        host_path: PathBuf::from(format!("/mnt/disks/{entry}")),
        mode: VolumeMode::Filesystem,
        capacity_bytes: 10 * GIB,
        available_bytes: Some(8 * GIB),
        mount_root: None,
        held: false,
        identity: DiskIdentity {
            device: Some("/dev/loop3".into()),
            dev_id: "7:3".parse().ok(),
            fs_type: Some("ext4".into()),
            fs_uuid: Some(uuid.into()),
            ..DiskIdentity::default()
        },
    }
}

fn unusable(entry: &str) -> Unusable {
    Unusable {
        class: CLASS.into(),
        entry: entry.into(),
        host_path: PathBuf::from(format!("/mnt/disks/{entry}")),
        reason: UnusableReason::NotAMountPoint,
        message: format!("path \"/mnt/disks/{entry}\" is not a valid mount point"),
    }
}

/// A PV of ours at `/mnt/disks/<entry>` recording filesystem UUID `uuid`.
fn pv(entry: &str, uuid: &str, phase: &str) -> PersistentVolume {
    let pv = Pv::local(&format!("pv-{entry}"), NODE)
        .uid(&format!("uid-{entry}"))
        .label(NODE_LABEL, NODE)
        .annotation(ANN_FS_UUID, uuid)
        .path(&format!("/mnt/disks/{entry}"))
        .class(CLASS);
    match phase {
        "Available" => pv.phase(phase),
        _ => pv.claim("ns", "data").claim_uid("claim-1").phase(phase),
    }
    .build()
}

fn with(mut pv: PersistentVolume, edit: impl FnOnce(&mut PersistentVolume)) -> PersistentVolume {
    edit(&mut pv);
    pv
}

#[derive(Default)]
struct World {
    found: Discovery,
    unpublished: Vec<Unpublished>,
    pvs: Vec<PersistentVolume>,
    ledger: DiskLedger,
    wipes: BTreeMap<PathBuf, WipeSample>,
    failures: BTreeMap<PathBuf, WipeFailures>,
    existing: Vec<LocalDisk>,
    others: Vec<LocalDisk>,
    settings: Settings,
}

impl World {
    fn with_disks(disks: Vec<Disk>) -> World {
        World {
            found: Discovery {
                disks: disks.into_iter().map(Arc::new).collect(),
                ..Discovery::default()
            },
            ..World::default()
        }
    }

    fn pass(&self, now: SystemTime) -> Changes {
        self.with_inputs(now, build)
    }

    fn with_inputs<R>(&self, now: SystemTime, f: impl FnOnce(&Inputs<'_>) -> R) -> R {
        let pvs: Vec<Arc<PersistentVolume>> = self.pvs.iter().cloned().map(Arc::new).collect();
        let existing = self.shared();
        f(&Inputs {
            node: NODE,
            found: &self.found,
            unpublished: &self.unpublished,
            pvs: &pvs,
            ledger: &self.ledger,
            wipes: &self.wipes,
            wipe_failures: &self.failures,
            existing: &existing,
            others: &self.others,
            settings: &self.settings,
            now,
        })
    }

    /// One pass, applied to `existing` as the agent would (the API server stamps creation times).
    fn step(&mut self, now: SystemTime) -> Changes {
        let changes = self.pass(now);
        for change in &changes.changes {
            match change {
                Change::Create(d) | Change::Apply(d) | Change::MarkMissing(d) => {
                    let name = d.metadata.name.clone();
                    self.existing.retain(|e| e.metadata.name != name);
                    self.existing.push((**d).clone());
                }
                Change::Delete(name) => self
                    .existing
                    .retain(|e| e.metadata.name.as_deref() != Some(name)),
            }
        }
        changes
    }

    fn shared(&self) -> Vec<Arc<LocalDisk>> {
        self.existing.iter().cloned().map(Arc::new).collect()
    }

    fn object(&self, name: &str) -> &LocalDisk {
        self.existing
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no LocalDisk {name}"))
    }
}

fn status(disk: &LocalDisk) -> LocalDiskStatus {
    disk.status.clone().expect("status is set")
}

fn uuid_name() -> String {
    format!("fs-{UUID}")
}

fn kinds(changes: &Changes) -> Vec<String> {
    changes
        .changes
        .iter()
        .map(|c| match c {
            Change::Create(d) => format!("create {}", d.metadata.name.clone().unwrap_or_default()),
            Change::Apply(d) => format!("apply {}", d.metadata.name.clone().unwrap_or_default()),
            Change::MarkMissing(d) => {
                format!("missing {}", d.metadata.name.clone().unwrap_or_default())
            }
            Change::Delete(n) => format!("delete {n}"),
        })
        .collect()
}

fn released_retain() -> PersistentVolume {
    with(pv("vol1", UUID, "Released"), |p| {
        p.spec
            .as_mut()
            .expect("spec")
            .persistent_volume_reclaim_policy = Some("Retain".into());
    })
}

fn released_wiping() -> PersistentVolume {
    with(pv("vol1", UUID, "Released"), |p| {
        p.metadata.annotations.get_or_insert_default().extend([
            (ANN_WIPE_PHASE.to_string(), "Wiping".to_string()),
            (
                ANN_WIPE_LIFETIME.to_string(),
                "uid-vol1/claim-1".to_string(),
            ),
        ]);
    })
}

fn failures(n: u32) -> BTreeMap<PathBuf, WipeFailures> {
    BTreeMap::from([(
        PathBuf::from("/mnt/disks/vol1"),
        WipeFailures {
            consecutive: n,
            last_error: "failed to remove lost+found: permission denied".into(),
        },
    )])
}

fn held(reason: HoldReason) -> Vec<Unpublished> {
    vec![Unpublished {
        class: CLASS.into(),
        entry: "vol1".into(),
        host_path: "/mnt/disks/vol1".into(),
        reason,
        message: "held".into(),
    }]
}

#[rstest]
#[case::a_disk_without_pv_is_available(World::default(), LocalDiskPhase::Available, None, None)]
#[case::an_available_pv_names_its_disk(
    World { pvs: vec![pv("vol1", UUID, "Available")], ..World::default() },
    LocalDiskPhase::Available, None, Some("pv-vol1")
)]
#[case::a_bound_pv_makes_it_bound(
    World { pvs: vec![pv("vol1", UUID, "Bound")], ..World::default() },
    LocalDiskPhase::Bound, None, Some("pv-vol1")
)]
#[case::a_released_delete_pv_awaits_its_wipe(
    World { pvs: vec![pv("vol1", UUID, "Released")], ..World::default() },
    LocalDiskPhase::Released, Some("AwaitingWipe"), Some("pv-vol1")
)]
#[case::a_released_retain_pv_is_retained(
    World { pvs: vec![released_retain()], ..World::default() },
    LocalDiskPhase::Released, Some("Retained"), Some("pv-vol1")
)]
#[case::a_wipe_recorded_on_the_pv_is_wiping(
    World { pvs: vec![released_wiping()], ..World::default() },
    LocalDiskPhase::Wiping, Some("Reclaiming"), Some("pv-vol1")
)]
#[case::a_pv_recording_another_uuid_is_identity_changed(
    World { pvs: vec![pv("vol1", "another-uuid", "Bound")], ..World::default() },
    LocalDiskPhase::IdentityChanged, Some("DiskIdentityChanged"), Some("pv-vol1")
)]
#[case::wipes_failing_three_times_is_failing(
    World { pvs: vec![pv("vol1", UUID, "Released")], failures: failures(3), ..World::default() },
    LocalDiskPhase::Failing, Some("WipeFailing"), Some("pv-vol1")
)]
#[case::one_failed_wipe_keeps_the_pv_phase(
    World { pvs: vec![pv("vol1", UUID, "Released")], failures: failures(1), ..World::default() },
    LocalDiskPhase::Released, Some("AwaitingWipe"), Some("pv-vol1")
)]
#[case::a_retained_disk_without_pv_is_released(
    World { unpublished: held(HoldReason::Retained), ..World::default() },
    LocalDiskPhase::Released, Some("Retained"), None
)]
#[case::a_dirty_disk_awaiting_its_wipe_is_wiping(
    World { unpublished: held(HoldReason::AwaitingWipe), ..World::default() },
    LocalDiskPhase::Wiping, Some("AwaitingWipe"), None
)]
#[case::a_class_without_storage_class_is_unusable(
    World { unpublished: held(HoldReason::NoStorageClass), ..World::default() },
    LocalDiskPhase::Unusable, Some("NoStorageClass"), None
)]
#[case::a_dirty_disk_in_the_ledger_is_wiping(
    World {
        ledger: DiskLedger { disks: BTreeMap::from([(format!("fs-uuid:{UUID}"), DiskState::Dirty)]) },
        ..World::default()
    },
    LocalDiskPhase::Wiping, Some("AwaitingWipe"), None
)]
fn a_found_disk_gets_the_phase_its_pv_and_the_planner_say(
    #[case] mut world: World,
    #[case] phase: LocalDiskPhase,
    #[case] reason: Option<&str>,
    #[case] pv_name: Option<&str>,
) {
    world.found.disks = vec![fs_disk("vol1", UUID).into()];
    let changes = world.step(t0());
    assert_eq!(kinds(&changes), [format!("create {}", uuid_name())]);
    let status = status(world.object(&uuid_name()));
    assert_eq!(status.phase, phase);
    assert_eq!(status.reason.as_deref(), reason);
    assert_eq!(status.pv.as_deref(), pv_name);
    assert_eq!(
        world.pass(t0() + Duration::from_secs(60)),
        Changes::default()
    );
}

#[test]
fn a_bound_disk_records_its_claim_identity_size_and_labels() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.pvs = vec![pv("vol1", UUID, "Bound")];
    world.step(t0());
    let disk = world.object(&uuid_name());
    assert_eq!(status(disk).claim.as_deref(), Some("ns/data"));
    assert_eq!(status(disk).available_bytes, Some(8 * GIB));
    assert_eq!(disk.spec.fs_uuid.as_deref(), Some(UUID));
    assert_eq!(disk.spec.device.as_deref(), Some("/dev/loop3"));
    assert_eq!(disk.spec.capacity_human.as_deref(), Some("10.0GiB"));
    let labels = disk.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(NODE_LABEL).map(String::as_str), Some(NODE));
    assert_eq!(labels.get(CLASS_LABEL).map(String::as_str), Some(CLASS));
    assert_eq!(status(disk).last_seen, Some(time(t0())));
}

#[test]
fn an_unusable_entry_is_named_by_path_and_says_why() {
    let mut world = World {
        found: Discovery {
            unusable: vec![unusable("stray")],
            ..Discovery::default()
        },
        ..World::default()
    };
    let changes = world.step(t0());
    let [Change::Create(disk)] = changes.changes.as_slice() else {
        panic!("expected one create, got {:?}", kinds(&changes));
    };
    assert!(
        disk.metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .starts_with("n1-stray-")
    );
    let status = status(disk);
    assert_eq!(status.phase, LocalDiskPhase::Unusable);
    assert_eq!(status.reason.as_deref(), Some("NotAMountPoint"));
    assert_eq!(world.pass(t0()), Changes::default());
}

#[test]
fn a_running_wipe_reports_progress_and_small_steps_are_not_written() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.pvs = vec![pv("vol1", UUID, "Released")];
    let sample = |bytes| WipeSample {
        started: t0(),
        bytes_done: bytes,
        entries_done: 100,
        bytes_total: None,
    };
    world.wipes.insert("/mnt/disks/vol1".into(), sample(GIB));
    world.step(t0() + Duration::from_secs(10));
    let wipe = status(world.object(&uuid_name()))
        .wipe
        .expect("wipe progress");
    assert_eq!(
        status(world.object(&uuid_name())).phase,
        LocalDiskPhase::Wiping
    );
    assert_eq!(wipe.bytes_per_second, Some(GIB / 10));
    // 100 MiB more of a 10 GiB disk is under 5%: nothing to write; 1 GiB more is a step.
    world
        .wipes
        .insert("/mnt/disks/vol1".into(), sample(GIB + 100 * (1 << 20)));
    assert_eq!(
        world.pass(t0() + Duration::from_secs(11)),
        Changes::default()
    );
    world
        .wipes
        .insert("/mnt/disks/vol1".into(), sample(2 * GIB));
    assert_eq!(world.step(t0() + Duration::from_secs(20)).changes.len(), 1);
}

#[rstest]
#[case::a_few_megabytes_are_not_a_change(8 * GIB - (50 << 20), false)]
#[case::a_gigabyte_is_a_change(7 * GIB, true)]
fn free_space_is_rewritten_only_when_it_moves_by_a_percent(
    #[case] available: u64,
    #[case] written: bool,
) {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    Arc::make_mut(&mut world.found.disks[0]).available_bytes = Some(available);
    assert_eq!(!world.pass(t0()).changes.is_empty(), written);
}

#[test]
fn last_seen_moves_only_when_something_changed() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    let later = t0() + Duration::from_secs(3600);
    assert_eq!(world.step(later), Changes::default());
    assert_eq!(
        status(world.object(&uuid_name())).last_seen,
        Some(time(t0()))
    );
    world.pvs = vec![pv("vol1", UUID, "Bound")];
    assert_eq!(
        kinds(&world.step(later)),
        [format!("apply {}", uuid_name())]
    );
    assert_eq!(
        status(world.object(&uuid_name())).last_seen,
        Some(time(later))
    );
}

#[test]
fn a_renamed_device_keeps_its_object() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    Arc::make_mut(&mut world.found.disks[0]).identity.device = Some("/dev/loop7".into());
    Arc::make_mut(&mut world.found.disks[0]).identity.dev_id = "7:7".parse().ok();
    assert_eq!(kinds(&world.step(t0())), [format!("apply {}", uuid_name())]);
    assert_eq!(world.existing.len(), 1);
    assert_eq!(
        world.object(&uuid_name()).spec.device.as_deref(),
        Some("/dev/loop7")
    );
}

#[test]
fn a_reformatted_disk_gets_a_new_object_and_the_old_one_goes_missing() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    world.found.disks = vec![fs_disk("vol1", "0000-new").into()];
    let changes = world.step(t0());
    assert_eq!(
        kinds(&changes),
        [
            "create fs-0000-new".to_string(),
            format!("missing {}", uuid_name())
        ]
    );
    let old = status(world.object(&uuid_name()));
    assert_eq!(old.phase, LocalDiskPhase::Missing);
    assert_eq!(old.missing_since, Some(time(t0())));
}

#[test]
fn a_missing_disk_is_deleted_after_the_grace_period() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    world.found.disks.clear();
    let changes = world.step(t0());
    assert_eq!(kinds(&changes), [format!("missing {}", uuid_name())]);
    assert_eq!(changes.requeue_after, Some(Duration::from_secs(24 * 3600)));
    let hour_later = world.step(t0() + Duration::from_secs(3600));
    assert_eq!(hour_later.changes, []);
    assert_eq!(
        hour_later.requeue_after,
        Some(Duration::from_secs(23 * 3600))
    );
    let day_later = world.step(t0() + Duration::from_secs(24 * 3600));
    assert_eq!(kinds(&day_later), [format!("delete {}", uuid_name())]);
    assert!(world.existing.is_empty());
}

#[test]
fn a_disk_that_returns_is_no_longer_missing() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    let disks = std::mem::take(&mut world.found.disks);
    world.step(t0());
    world.found.disks = disks;
    assert_eq!(kinds(&world.step(t0())), [format!("apply {}", uuid_name())]);
    let back = status(world.object(&uuid_name()));
    assert_eq!(
        (back.phase, back.missing_since),
        (LocalDiskPhase::Available, None)
    );
}

#[test]
fn disks_of_a_class_that_could_not_be_read_are_unknown_not_missing() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    world.found.disks.clear();
    world.found.failed_classes = vec![ClassFailure {
        class: CLASS.into(),
        mount_dir: "/mnt/disks".into(),
        message: "permission denied".into(),
    }];
    assert_eq!(world.pass(t0()), Changes::default());
}

#[test]
fn a_path_named_object_is_replaced_when_its_entry_gets_a_filesystem() {
    let mut world = World {
        found: Discovery {
            unusable: vec![unusable("vol1")],
            ..Discovery::default()
        },
        ..World::default()
    };
    world.step(t0());
    let path_name = world.existing[0].metadata.name.clone().unwrap_or_default();
    world.found.unusable.clear();
    world.found.disks = vec![fs_disk("vol1", UUID).into()];
    let changes = world.step(t0());
    assert_eq!(
        kinds(&changes),
        [
            format!("create {}", uuid_name()),
            format!("delete {path_name}")
        ]
    );
}

fn on_node(node: &str, name: &str) -> LocalDisk {
    let mut disk = LocalDisk::new(name, status::spec_of_disk(node, &fs_disk("vol1", UUID)));
    disk.status = Some(LocalDiskStatus::default());
    disk
}

#[test]
fn a_uuid_another_node_holds_gets_a_node_qualified_name_and_a_flag() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    assert_eq!(
        names_to_look_up(NODE, &world.found, &world.shared()),
        [uuid_name()]
    );
    world.others = vec![on_node("n0", &uuid_name())];
    let changes = world.step(t0());
    let name = world.existing[0].metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with(&format!("fs-{UUID}-n1-")), "{name}");
    assert_eq!(kinds(&changes), [format!("create {name}")]);
    let status = status(world.object(&name));
    let duplicate = status.duplicate_uuid.clone().expect("flagged");
    assert_eq!(
        (duplicate.node.as_str(), duplicate.local_disk),
        ("n0", uuid_name())
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_DUPLICATE_UUID)
    );
    // Steady: the qualified name stays, the flag stays, nothing is written.
    assert_eq!(
        names_to_look_up(NODE, &world.found, &world.shared()),
        [uuid_name()]
    );
    assert_eq!(world.pass(t0()), Changes::default());
    // The other node's copy is gone: the flag clears, the name does not change.
    world.others.clear();
    assert_eq!(kinds(&world.step(t0())), [format!("apply {name}")]);
    assert_eq!(status_of(&world, &name).duplicate_uuid, None);
}

fn status_of(world: &World, name: &str) -> LocalDiskStatus {
    status(world.object(name))
}

#[test]
fn a_uuid_this_node_already_holds_is_not_looked_up() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.step(t0());
    assert!(names_to_look_up(NODE, &world.found, &world.shared()).is_empty());
}

#[test]
fn a_failed_wipe_condition_keeps_its_transition_time_while_it_stands() {
    let mut world = World::with_disks(vec![fs_disk("vol1", UUID)]);
    world.pvs = vec![pv("vol1", UUID, "Released")];
    world.failures = failures(1);
    world.step(t0());
    world.failures = failures(2);
    let later = t0() + Duration::from_secs(600);
    assert_eq!(world.step(later).changes.len(), 1);
    let condition = status_of(&world, &uuid_name())
        .conditions
        .into_iter()
        .find(|c| c.type_ == CONDITION_WIPE_FAILED)
        .expect("condition");
    assert_eq!(condition.last_transition_time, time(t0()));
    assert!(
        condition.message.starts_with("2 consecutive"),
        "{}",
        condition.message
    );
}

#[test]
fn objects_of_other_nodes_in_the_existing_list_are_left_alone() {
    let world = World {
        existing: vec![on_node("n0", "fs-someone-else")],
        ..World::default()
    };
    assert_eq!(world.pass(t0()), Changes::default());
}

/// The disk of a Bound PV was unmounted: discovery sees an empty directory. Its advice ("mount a filesystem on it,
/// or remove it") would have an operator format a new disk over the path, or delete the claim's PV.
#[rstest]
#[case::bound("Bound", "DiskNotMounted", true)]
#[case::released("Released", "DiskNotMounted", true)]
#[case::available_pv("Available", "NotAMountPoint", false)]
fn an_unmounted_disk_under_a_pv_with_data_says_to_mount_it_back(
    #[case] phase: &str,
    #[case] reason: &str,
    #[case] holds_data: bool,
) {
    let world = World {
        found: Discovery {
            unusable: vec![unusable("vol1")],
            ..Discovery::default()
        },
        pvs: vec![pv("vol1", "u-1", phase)],
        ..World::default()
    };
    let changes = world.pass(t0());
    let [Change::Create(disk)] = changes.changes.as_slice() else {
        panic!("expected one create, got {:?}", kinds(&changes));
    };
    let status = status(disk);
    assert_eq!(status.phase, LocalDiskPhase::Unusable);
    assert_eq!(status.reason.as_deref(), Some(reason));
    assert_eq!(status.pv.as_deref(), Some("pv-vol1"));
    let message = status.message.unwrap_or_default();
    assert_eq!(
        message.contains("mount that disk here again"),
        holds_data,
        "{message}"
    );
    assert_eq!(message.contains("do not format"), holds_data, "{message}");
    if holds_data {
        assert!(message.contains("claim ns/data"), "{message}");
    }
}

// ---- the relation check (`inventory::relation`) ----

/// Two disks with their objects made, and a builder deciding the first.
#[cfg(debug_assertions)]
fn deciding_the_first(read: impl FnOnce(&Builder<'_>, &str)) {
    let (a, b) = (fs_disk("vol1", "uuid-1"), fs_disk("vol2", "uuid-2"));
    let mut world = World::with_disks(vec![a.clone(), b.clone()]);
    world.step(SystemTime::UNIX_EPOCH);
    let other = naming::name(NODE, &DiskKey::of_disk(&b));
    world.with_inputs(SystemTime::UNIX_EPOCH, |inputs| {
        let mut builder = Builder::new(inputs);
        builder.deciding(Found::Disk(&a));
        read(&builder, &other);
    });
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "which it does not link")]
fn an_entry_reading_another_entrys_object_fails_at_the_read() {
    deciding_the_first(|builder, other| {
        let _ = builder.object(other);
    });
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "which it does not link")]
fn an_entry_asking_whether_another_entrys_name_is_taken_fails_at_the_read() {
    deciding_the_first(|builder, other| {
        let _ = builder.used(other);
    });
}

#[cfg(debug_assertions)]
#[test]
fn an_entry_reads_its_own_names_and_the_objects_under_its_key() {
    let a = fs_disk("vol1", "uuid-1");
    let mut world = World::with_disks(vec![a.clone()]);
    world.step(SystemTime::UNIX_EPOCH);
    let key = DiskKey::of_disk(&a);
    world.with_inputs(SystemTime::UNIX_EPOCH, |inputs| {
        let mut builder = Builder::new(inputs);
        builder.deciding(Found::Disk(&a));
        assert!(builder.object(&naming::name(NODE, &key)).is_some());
        assert!(!builder.used(&naming::node_qualified_name(NODE, &key)));
    });
}
