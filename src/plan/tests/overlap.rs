//! Overlapping storage (issue 39, point 0): a bind mount of a volume's sub-directory, of its parent or of its root
//! at a new entry is never published and never wiped, whatever the names; which entry is held depends on the PVs.

use super::*;

/// A tmpfs-like filesystem disk `entry` on device `dev` with mount root `root` and the agent's volume id `id`.
fn mounted(entry: &str, dev: &str, root: &str, id: &str) -> Disk {
    let mut disk = disk(entry);
    disk.identity = crate::disk::DiskIdentity {
        dev_id: dev.parse().ok(),
        fs_type: Some("tmpfs".into()),
        volume_id: Some(id.into()),
        ..Default::default()
    };
    disk.mount_root = (root != "/").then(|| root.to_string());
    disk
}

fn holds(plan: &Plan) -> Vec<(String, HoldReason)> {
    plan.unpublished
        .iter()
        .map(|u| (u.entry.clone(), u.reason))
        .collect()
}

fn creates_or_wipes(plan: &Plan) -> Vec<String> {
    summary(plan)
        .into_iter()
        .filter(|s| s.starts_with("create") || s.starts_with("wipe") || s.starts_with("tag"))
        .collect()
}

/// The attack as found: vol-b Bound, a bind of `vol-b/shared` at an entry sorting before or after it.
#[rstest]
#[case::bind_named_before("vol-a", "/shared")]
#[case::bind_named_after("vol-z", "/shared")]
#[case::bind_of_the_same_root_before("vol-a", "/")]
#[case::bind_of_a_deeper_directory_after("vol-z", "/shared/deeper")]
fn a_bind_of_a_bound_volumes_directory_is_never_published(#[case] entry: &str, #[case] root: &str) {
    let bound = mounted("vol-b", "0:60", "/", "id-b");
    let bind = mounted(entry, "0:60", root, "id-bind");
    let world = World::new(
        vec![bound.clone(), bind],
        vec![Pv::test().for_disk(&bound).bound().build()],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert_eq!(
        holds(&plan),
        [(entry.to_string(), HoldReason::OverlappingStorage)]
    );
    assert!(
        summary(&plan).contains(&"event uid-vol-b OverlappingStorage".to_string()),
        "{:?}",
        summary(&plan)
    );
}

/// The Bound volume's own entry unmounted (or refused), only the bind of its sub-directory left: the PV's recorded
/// device still names the storage.
#[test]
fn a_bind_of_a_bound_volumes_directory_is_held_while_its_own_entry_is_gone() {
    let bound = mounted("vol-b", "0:60", "/", "id-b");
    let world = World::new(
        vec![mounted("vol-a", "0:60", "/shared", "id-a")],
        vec![Pv::test().for_disk(&bound).bound().build()],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert_eq!(
        holds(&plan),
        [("vol-a".to_string(), HoldReason::OverlappingStorage)]
    );
}

/// A bind of the parent: the new entry contains the Bound volume's root.
#[test]
fn a_bind_of_a_bound_volumes_parent_is_never_published() {
    let bound = mounted("vol-b", "0:60", "/data", "id-b");
    let world = World::new(
        vec![bound.clone(), mounted("vol-a", "0:60", "/", "id-a")],
        vec![Pv::test().for_disk(&bound).bound().build()],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert_eq!(
        holds(&plan),
        [("vol-a".to_string(), HoldReason::OverlappingStorage)]
    );
}

/// No volume id yet on the bind: it is held before the agent would write its id into the tenant's directory.
#[test]
fn an_untagged_bind_of_a_bound_volume_is_not_tagged() {
    let bound = mounted("vol-b", "0:60", "/", "id-b");
    let mut bind = mounted("vol-a", "0:60", "/shared", "unused");
    bind.identity.volume_id = None;
    let world = World::new(
        vec![bound.clone(), bind],
        vec![Pv::test().for_disk(&bound).bound().build()],
    );
    assert_eq!(creates_or_wipes(&world.plan()), Vec::<String>::new());
}

/// Both PVs exist (published before this rule): the Released one is never wiped while the other exists, and the
/// unclaimed one is withdrawn.
#[test]
fn a_released_pv_overlapping_a_bound_one_is_not_wiped() {
    let bound = mounted("vol-b", "0:60", "/", "id-b");
    let bind = mounted("vol-a", "0:60", "/shared", "id-a");
    let world = World::new(
        vec![bound.clone(), bind.clone()],
        vec![
            Pv::test().for_disk(&bound).bound().build(),
            Pv::test().for_disk(&bind).released().build(),
        ],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert!(summary(&plan).contains(&"event uid-vol-a OverlappingStorage".to_string()));
}

#[test]
fn a_bound_pv_whose_storage_contains_a_released_one_is_not_wiped_when_released() {
    let outer = mounted("vol-b", "0:60", "/", "id-b");
    let inner = mounted("vol-a", "0:60", "/shared", "id-a");
    let world = World::new(
        vec![outer.clone(), inner.clone()],
        vec![
            Pv::test().for_disk(&outer).released().build(),
            Pv::test().for_disk(&inner).bound().build(),
        ],
    );
    assert_eq!(creates_or_wipes(&world.plan()), Vec::<String>::new());
}

#[test]
fn an_available_pv_overlapping_a_bound_one_is_withdrawn() {
    let bound = mounted("vol-b", "0:60", "/", "id-b");
    let bind = mounted("vol-a", "0:60", "/shared", "id-a");
    let world = World::new(
        vec![bound.clone(), bind.clone()],
        vec![
            Pv::test().for_disk(&bound).bound().build(),
            Pv::test().for_disk(&bind).available().build(),
        ],
    );
    let plan = world.plan();
    let summary = summary(&plan);
    assert!(
        summary.contains(&"delete uid-vol-a".to_string()),
        "{summary:?}"
    );
    assert!(
        !summary.contains(&"delete uid-vol-b".to_string()),
        "{summary:?}"
    );
}

/// The published entry keeps its PV; the new overlapping one is held, whichever name sorts first.
#[rstest]
#[case::new_entry_first("vol-a")]
#[case::new_entry_last("vol-z")]
fn an_available_pv_keeps_its_place_and_the_overlap_is_held(#[case] entry: &str) {
    let published = mounted("vol-m", "0:60", "/", "id-m");
    let mut world = World::new(
        vec![published.clone(), mounted(entry, "0:60", "/", "id-new")],
        vec![Pv::test().for_disk(&published).available().build()],
    );
    let plans = world.settle();
    for plan in &plans {
        assert_eq!(creates_or_wipes(plan), Vec::<String>::new());
        assert!(!summary(plan).iter().any(|s| s.starts_with("delete")));
    }
    assert_eq!(
        holds(plans.last().expect("a plan")),
        [(entry.to_string(), HoldReason::OverlappingStorage)]
    );
}

/// Two new entries over one storage and no PV: nothing says which is the disk, so neither is published.
#[rstest]
#[case::same_root("/", "/")]
#[case::nested("/", "/data")]
#[case::nested_first_deeper("/data/x", "/data")]
fn two_new_overlapping_entries_are_both_held(#[case] a: &str, #[case] b: &str) {
    let world = World::new(
        vec![
            mounted("a", "7:0", a, "id-a"),
            mounted("b", "7:0", b, "id-b"),
        ],
        vec![],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert_eq!(
        holds(&plan),
        [
            ("a".to_string(), HoldReason::OverlappingStorage),
            ("b".to_string(), HoldReason::OverlappingStorage)
        ]
    );
}

/// Sharing a disk the documented way stays possible: disjoint sub-directories, a prefix that is not a parent,
/// other devices.
#[rstest]
#[case::disjoint_sub_directories(("7:0", "/one"), ("7:0", "/two"))]
#[case::prefix_is_not_a_parent(("7:0", "/data"), ("7:0", "/data2"))]
#[case::different_devices(("7:0", "/"), ("7:1", "/"))]
fn storage_that_does_not_overlap_is_published(#[case] a: (&str, &str), #[case] b: (&str, &str)) {
    let world = World::new(
        vec![
            mounted("a", a.0, a.1, "id-a"),
            mounted("b", b.0, b.1, "id-b"),
        ],
        vec![],
    );
    assert_eq!(
        creates_or_wipes(&world.plan()),
        ["create /mnt/disks/a", "create /mnt/disks/b"]
    );
}

/// Two block entries for one device, one of them published: the other is held, whichever name sorts first.
#[rstest]
#[case::new_link_first("blk-a")]
#[case::new_link_last("blk-z")]
fn a_second_entry_for_a_published_block_device_is_held(#[case] entry: &str) {
    let block = |entry: &str| {
        let mut disk = at_entry(disk("blk-m"), entry);
        disk.mode = VolumeMode::Block;
        disk.available_bytes = None;
        disk.identity = crate::disk::DiskIdentity {
            device: Some("/dev/loop3".into()),
            dev_id: "7:3".parse().ok(),
            serial: Some("serial-3".into()),
            ..Default::default()
        };
        disk
    };
    let mut world = World::new(
        vec![block("blk-m"), block(entry)],
        vec![Pv::test().for_disk(&block("blk-m")).bound().build()],
    );
    world.classes[0].config.volume_mode = VolumeMode::Block;
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert!(
        plan.unpublished.iter().all(|u| u.entry == entry),
        "{:?}",
        plan.unpublished
    );
}

/// A bind of a Released volume's sub-directory that no PV exposes does not stop the wipe: the files there are the
/// Released tenant's, and the bind itself stays held.
#[test]
fn a_held_bind_does_not_stop_the_wipe_of_the_volume_it_lies_in() {
    let outer = mounted("vol-b", "0:60", "/", "id-b");
    let inner = mounted("vol-a", "0:60", "/shared", "id-a");
    let world = World::new(
        vec![outer.clone(), inner],
        vec![Pv::test().for_disk(&outer).released().build()],
    );
    let plan = world.plan();
    assert_eq!(
        creates_or_wipes(&plan),
        ["wipe /mnt/disks/vol-b for uid-vol-b"]
    );
    assert_eq!(
        holds(&plan),
        [("vol-a".to_string(), HoldReason::OverlappingStorage)]
    );
}

/// The overlapping PV goes away: the Released volume it overlapped is wiped.
#[test]
fn the_overlapping_pv_gone_the_released_volume_is_wiped() {
    let outer = mounted("vol-b", "0:60", "/", "id-b");
    let inner = mounted("vol-a", "0:60", "/shared", "id-a");
    let mut world = World::new(
        vec![outer.clone(), inner.clone()],
        vec![
            Pv::test().for_disk(&outer).released().build(),
            Pv::test().for_disk(&inner).bound().build(),
        ],
    );
    assert_eq!(creates_or_wipes(&world.plan()), Vec::<String>::new());
    world.found.disks.retain(|d| d.entry == "vol-b");
    world
        .existing
        .retain(|pv| pv.metadata.uid.as_deref() == Some("uid-vol-b"));
    assert_eq!(
        creates_or_wipes(&world.plan()),
        ["wipe /mnt/disks/vol-b for uid-vol-b"]
    );
}

// ---- two disks with one identity (issue 39, point 2) ----

/// An ext4 disk on its own device with UUID `uuid` (and the agent's volume id `id`, if any).
fn ext4(entry: &str, dev: &str, uuid: &str, id: Option<&str>) -> Disk {
    let mut disk = disk(entry);
    disk.identity = crate::disk::DiskIdentity {
        device: Some(format!("/dev/{entry}")),
        dev_id: dev.parse().ok(),
        fs_type: Some("ext4".into()),
        fs_uuid: Some(uuid.into()),
        volume_id: id.map(Into::into),
        ..Default::default()
    };
    disk
}

#[rstest]
#[case::copy_named_before("vol-a")]
#[case::copy_named_after("vol-z")]
fn a_block_copy_of_a_bound_disk_is_never_published(#[case] entry: &str) {
    let bound = ext4("vol-m", "7:1", "uuid-1", None);
    let world = World::new(
        vec![bound.clone(), ext4(entry, "7:2", "uuid-1", None)],
        vec![Pv::test().for_disk(&bound).bound().build()],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert_eq!(
        holds(&plan),
        [(entry.to_string(), HoldReason::DuplicateIdentity)]
    );
    assert!(summary(&plan).contains(&"event uid-vol-m DuplicateIdentity".to_string()));
}

/// The copy is there while the original's PV is Released: neither is wiped (the id proves neither).
#[test]
fn a_released_disk_with_a_twin_is_not_wiped_until_the_twin_is_gone() {
    let released = ext4("vol-m", "7:1", "uuid-1", None);
    let mut world = World::new(
        vec![released.clone(), ext4("vol-c", "7:2", "uuid-1", None)],
        vec![Pv::test().for_disk(&released).released().build()],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert!(summary(&plan).contains(&"event uid-vol-m DuplicateIdentity".to_string()));
    world.found.disks.retain(|d| d.entry == "vol-m");
    assert_eq!(
        creates_or_wipes(&world.plan()),
        ["wipe /mnt/disks/vol-m for uid-vol-m"]
    );
}

/// The agent's volume id copied with the data onto another filesystem (`cp -a`, `rsync -X`), WWN and serial.
#[rstest]
#[case::copied_volume_id(
    |d: &mut Disk| { d.identity.fs_uuid = Some("uuid-other".into()); d.identity.volume_id = Some("id-1".into()) }
)]
#[case::same_wwn(|d: &mut Disk| { d.identity.fs_uuid = Some("uuid-other".into()); d.identity.wwn = Some("wwn-1".into()) })]
#[case::same_serial(|d: &mut Disk| { d.identity.fs_uuid = Some("uuid-other".into()); d.identity.serial = Some("sn-1".into()) })]
fn a_disk_answering_to_a_bound_pvs_strong_id_is_never_published(#[case] copy: fn(&mut Disk)) {
    let mut bound = ext4("vol-m", "7:1", "uuid-1", Some("id-1"));
    bound.identity.wwn = Some("wwn-1".into());
    bound.identity.serial = Some("sn-1".into());
    let mut twin = ext4("vol-a", "7:2", "uuid-2", None);
    copy(&mut twin);
    let world = World::new(
        vec![bound.clone(), twin],
        vec![Pv::test().for_disk(&bound).bound().build()],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert_eq!(
        holds(&plan),
        [("vol-a".to_string(), HoldReason::DuplicateIdentity)]
    );
}

/// Two new disks with one UUID and no PV: neither is published.
#[test]
fn two_new_disks_with_one_uuid_are_both_held() {
    let world = World::new(
        vec![
            ext4("a", "7:1", "uuid-1", None),
            ext4("b", "7:2", "uuid-1", None),
        ],
        vec![],
    );
    let plan = world.plan();
    assert_eq!(creates_or_wipes(&plan), Vec::<String>::new());
    assert_eq!(
        holds(&plan),
        [
            ("a".to_string(), HoldReason::DuplicateIdentity),
            ("b".to_string(), HoldReason::DuplicateIdentity)
        ]
    );
}

/// Disjoint directories of one filesystem share its UUID by design: they are told apart by their volume ids.
#[test]
fn disjoint_binds_of_one_filesystem_are_not_twins() {
    let mut one = ext4("a", "7:1", "uuid-1", Some("id-a"));
    one.mount_root = Some("/one".into());
    let mut two = ext4("b", "7:1", "uuid-1", Some("id-b"));
    two.mount_root = Some("/two".into());
    let world = World::new(vec![one, two], vec![]);
    assert_eq!(
        creates_or_wipes(&world.plan()),
        ["create /mnt/disks/a", "create /mnt/disks/b"]
    );
}
