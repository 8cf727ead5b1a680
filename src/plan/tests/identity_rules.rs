//! Issue 14 points 2 and 3, as the planner sees them: which identity authorises a wipe, and which disks are tagged
//! with the agent's volume id before they are published.

use super::*;
use crate::contract::ANN_NODE_UID;
use crate::disk::DiskIdentity;

/// A tmpfs: no UUID, no device, an anonymous device number.
fn tmpfs(entry: &str, dev: &str) -> Disk {
    let mut d = disk(entry);
    d.identity = DiskIdentity {
        dev_id: dev.parse().ok(),
        fs_type: Some("tmpfs".into()),
        ..DiskIdentity::default()
    };
    d
}

fn tagged(mut d: Disk, volume_id: &str) -> Disk {
    d.identity.volume_id = Some(volume_id.into());
    d
}

/// The summary without ledger lines (the published-disk ledger records every publication).
fn acts(plan: &Plan) -> Vec<String> {
    summary(plan)
        .into_iter()
        .filter(|l| !l.starts_with("ledger"))
        .collect()
}

fn held(plan: &Plan) -> Vec<(String, HoldReason)> {
    plan.unpublished
        .iter()
        .map(|u| (u.entry.clone(), u.reason))
        .collect()
}

#[test]
fn a_tmpfs_is_tagged_before_it_is_published_and_its_pv_records_the_volume_id() {
    let mut world = World::new(vec![tmpfs("vol1", "0:55")], vec![]);
    let plans = world.settle();
    assert_eq!(summary(&plans[0]), ["tag /mnt/disks/vol1"]);
    assert_eq!(
        held(&plans[0]),
        [("vol1".to_string(), HoldReason::AwaitingVolumeId)]
    );
    assert!(plans[0].requeue_after.is_some());
    let pv = only_created(&plans[1]);
    let annotations = pv.metadata.annotations.expect("annotations");
    assert_eq!(annotations[ANN_VOLUME_ID], "vid-vol1");
}

#[test]
fn a_directory_bind_mounted_from_a_shared_filesystem_gets_its_own_volume_id() {
    let mut bound = disk("vol1");
    bound.mount_root = Some("/shared/a".into());
    let world = World::new(vec![bound, disk("vol2")], vec![]);
    let first = world.plan();
    assert_eq!(
        acts(&first),
        ["tag /mnt/disks/vol1", "create /mnt/disks/vol2"],
        "a whole filesystem with a UUID needs no tag"
    );
}

#[test]
fn a_filesystem_without_uuid_or_extended_attributes_is_never_published() {
    let mut nfs = tmpfs("vol1", "0:60");
    nfs.identity.volume_id_unsupported = true;
    let world = World::new(vec![nfs], vec![]);
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(
        held(&plan),
        [("vol1".to_string(), HoldReason::NoStableIdentity)]
    );
}

#[test]
fn a_filesystem_with_a_uuid_but_no_extended_attributes_is_published_on_its_uuid() {
    let mut bound = disk("vol1");
    bound.mount_root = Some("/shared/a".into());
    bound.identity.volume_id_unsupported = true;
    let world = World::new(vec![bound], vec![]);
    assert_eq!(acts(&world.plan()), ["create /mnt/disks/vol1"]);
}

#[test]
fn a_tmpfs_swapped_under_a_bound_pv_on_the_same_device_number_is_not_wiped_on_release() {
    let was = tagged(tmpfs("vol1", "0:55"), "vid-1");
    let now = tmpfs("vol1", "0:55");
    let world = World::new(
        vec![now],
        vec![Pv::test().for_disk(&was).released().build()],
    );
    let lines = summary(&world.plan());
    assert!(!lines.iter().any(|l| l.starts_with("wipe")), "{lines:?}");
    assert!(!lines.iter().any(|l| l.starts_with("tag")), "{lines:?}");
    assert!(
        lines.contains(&"event uid-vol1 DiskIdentityChanged".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"event uid-vol1 WipeRefused".to_string()),
        "{lines:?}"
    );
}

#[test]
fn a_released_pv_that_recorded_only_a_device_number_is_not_wiped() {
    let legacy = tmpfs("vol1", "0:55");
    let world = World::new(
        vec![legacy.clone()],
        vec![Pv::test().for_disk(&legacy).released().build()],
    );
    let lines = summary(&world.plan());
    assert!(!lines.iter().any(|l| l.starts_with("wipe")), "{lines:?}");
    assert!(
        lines.contains(&"event uid-vol1 WipeRefused".to_string()),
        "{lines:?}"
    );
}

#[rstest]
#[case::tmpfs_by_volume_id(
    tagged(tmpfs("vol1", "0:55"), "vid-1"),
    tagged(tmpfs("vol1", "0:61"), "vid-1")
)]
#[case::loop_device_by_uuid(
    { let mut d = disk("vol1"); d.identity.dev_id = "7:3".parse().ok(); d },
    { let mut d = disk("vol1"); d.identity.dev_id = "7:6".parse().ok(); d }
)]
fn a_released_disk_renumbered_with_the_same_strong_id_is_wiped(
    #[case] was: Disk,
    #[case] now: Disk,
) {
    let world = World::new(
        vec![now],
        vec![Pv::test().for_disk(&was).released().build()],
    );
    let plan = world.plan();
    let order = only_wipe(&plan);
    assert_eq!(order.pv.map(|p| p.uid), Some("uid-vol1".to_string()));
}

#[test]
fn an_unidentifiable_disk_where_a_dirty_unidentifiable_disk_was_is_held_not_tagged() {
    let mut world = World::new(vec![tmpfs("vol1", "0:55")], vec![]);
    world.ledger.set("path:/mnt/disks/vol1", DiskState::Dirty);
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(
        held(&plan),
        [("vol1".to_string(), HoldReason::NoStableIdentity)]
    );
}

#[test]
fn a_dirty_block_device_without_hardware_ids_is_held_not_wiped() {
    let mut world = World::new(vec![], vec![]);
    world.classes = vec![class_facts(class_config(CLASS, DIR, VolumeMode::Block))];
    let mut raw = disk("vol1");
    raw.mode = VolumeMode::Block;
    raw.identity = DiskIdentity {
        device: Some("/dev/loop3".into()),
        dev_id: "7:3".parse().ok(),
        ..DiskIdentity::default()
    };
    world.found.disks = vec![raw.into()];
    world.ledger.set("path:/mnt/disks/vol1", DiskState::Dirty);
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(
        held(&plan),
        [("vol1".to_string(), HoldReason::NoStableIdentity)]
    );
}

#[test]
fn a_raw_device_without_hardware_ids_that_moved_is_not_published_a_second_time() {
    let raw = |entry: &str| {
        let mut d = disk(entry);
        d.mode = VolumeMode::Block;
        d.identity = DiskIdentity {
            device: Some("/dev/loop3".into()),
            dev_id: "7:3".parse().ok(),
            ..DiskIdentity::default()
        };
        d
    };
    let pv = Pv::test().for_disk(&raw("vol1")).bound().build();
    let mut world = World::new(vec![raw("vol2")], vec![pv]);
    world.classes = vec![class_facts(class_config(CLASS, DIR, VolumeMode::Block))];
    let plan = world.plan();
    assert!(
        !summary(&plan).iter().any(|l| l.starts_with("create")),
        "{:?}",
        summary(&plan)
    );
    assert_eq!(
        held(&plan),
        [("vol2".to_string(), HoldReason::HeldByAnotherPv)]
    );
}

#[test]
fn an_adopted_tmpfs_is_tagged_and_records_its_volume_id_so_it_is_wiped_once_released() {
    let reference = Pv::test()
        .reference("local-volume-provisioner-n1")
        .bound()
        .build();
    let mut world = World::new(vec![tmpfs("vol1", "0:55")], vec![reference]);
    let plans = world.settle();
    assert_eq!(
        acts(&plans[0]),
        [
            "tag /mnt/disks/vol1",
            "own uid-vol1",
            "adopt uid-vol1",
            "event uid-vol1 Adopted"
        ]
    );
    let annotations = world.existing[0].metadata.annotations.clone();
    assert_eq!(
        annotations.as_ref().map(|a| a[ANN_VOLUME_ID].as_str()),
        Some("vid-vol1"),
        "{annotations:?}"
    );
    world.existing[0].status.get_or_insert_default().phase = Some("Released".into());
    let order = only_wipe(&world.plan());
    assert_eq!(order.expected.volume_id.as_deref(), Some("vid-vol1"));
}

/// A Bound PV of vol1 whose disk was last found under another Node object (the node was re-created).
fn found_under(node_uid: Option<&str>) -> PersistentVolume {
    let mut pv = Pv::test().bound().build();
    let annotations = pv.metadata.annotations.get_or_insert_with(Default::default);
    annotations.remove(ANN_NODE_UID);
    if let Some(uid) = node_uid {
        annotations.insert(ANN_NODE_UID.into(), uid.into());
    }
    pv
}

fn node_uid_patches(plan: &Plan) -> Vec<Option<String>> {
    let patches = plan.actions.iter().filter_map(|a| match a {
        Action::RecordIdentity { patch, .. } | Action::AdoptPv { patch, .. } => Some(patch),
        _ => None,
    });
    patches
        .map(|p| p.annotations.get(ANN_NODE_UID).cloned())
        .collect()
}

#[test]
fn a_new_pv_records_the_uid_of_the_node_it_was_made_on() {
    let plan = World::new(vec![disk("vol1")], vec![]).plan();
    let created: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePv(pv) => pv.metadata.annotations.as_ref()?.get(ANN_NODE_UID).cloned(),
            _ => None,
        })
        .collect();
    assert_eq!(created, [NODE_UID]);
}

#[rstest::rstest]
#[case::another_node_object(Some("old-node-uid"))]
#[case::recorded_before_the_agent_recorded_one(None)]
fn the_pvs_own_disk_found_under_a_re_created_node_moves_the_pv_to_its_uid_once(
    #[case] recorded: Option<&str>,
) {
    let mut world = World::new(vec![disk("vol1")], vec![found_under(recorded)]);
    let plans = world.settle();
    assert_eq!(node_uid_patches(&plans[0]), [Some(NODE_UID.to_string())]);
    let later: Vec<_> = plans[1..].iter().flat_map(node_uid_patches).collect();
    assert_eq!(later, Vec::<Option<String>>::new(), "once");
    let annotations = world.existing[0].metadata.annotations.as_ref();
    assert_eq!(
        annotations
            .and_then(|a| a.get(ANN_NODE_UID))
            .map(String::as_str),
        Some(NODE_UID)
    );
}

#[test]
fn another_disk_or_no_disk_at_the_path_never_moves_the_pv_to_the_new_node() {
    let mut other = disk("vol1");
    other.identity.fs_uuid = Some("uuid-of-a-new-disk".into());
    for (what, disks) in [("another disk", vec![other]), ("no disk", vec![])] {
        let plan = World::new(disks, vec![found_under(Some("old-node-uid"))]).plan();
        let moved = node_uid_patches(&plan).into_iter().flatten().count();
        assert_eq!(moved, 0, "{what}: {:?}", summary(&plan));
    }
    let plan = World::new(vec![disk("vol1")], vec![found_under(Some(NODE_UID))]).plan();
    assert!(node_uid_patches(&plan).is_empty(), "already this node's");
}
