//! Released PVs and the disk ledger.

use super::*;

// ---- reclaim ----

#[test]
fn a_released_pv_under_delete_is_wiped_for_its_own_lifetime() {
    let world = World::new(vec![disk("vol1")], vec![Pv::test().released().build()]);
    let plan = world.plan();
    assert_eq!(
        summary(&plan),
        [
            "ledger fs-uuid:uuid-vol1 Dirty",
            "wipe /mnt/disks/vol1 for uid-vol1"
        ]
    );
    let order = only_wipe(&plan);
    assert_eq!(order.key, "fs-uuid:uuid-vol1");
    assert_eq!(
        order.path,
        std::path::Path::new("/host/mnt/disks/vol1"),
        "as this process sees it"
    );
    assert_eq!(
        order.method,
        crate::config::WipeMethod::Filesystem(crate::config::FsWipe::RemoveContents)
    );
    assert_eq!(order.expected.fs_uuid.as_deref(), Some("uuid-vol1"));
    let start = order.on_start.expect("start patch");
    assert_eq!(
        (start.uid.as_str(), start.resource_version.as_deref()),
        ("uid-vol1", Some("1"))
    );
    assert_eq!(start.annotations[ANN_WIPE_PHASE], "Wiping");
    let done = order.on_success.expect("success patch");
    assert_eq!(done.annotations[ANN_WIPE_PHASE], "Wiped");
    assert_eq!(done.annotations[ANN_WIPE_LIFETIME], "uid-vol1/claim-1");
}

#[rstest]
#[case::wiped_for_this_lifetime(Pv::test().released().wipe_phase("Wiped"), vec!["delete uid-vol1"])]
#[case::wipe_interrupted(
    Pv::test().released().wipe_phase("Wiping"),
    vec!["ledger fs-uuid:uuid-vol1 Dirty", "wipe /mnt/disks/vol1 for uid-vol1"]
)]
#[case::wiped_for_an_older_pv_object(
    Pv::test().released().wipe_phase_for("Wiped", "uid-old/claim-1"),
    vec!["ledger fs-uuid:uuid-vol1 Dirty", "wipe /mnt/disks/vol1 for uid-vol1"]
)]
#[case::wiped_for_an_earlier_claim(
    Pv::test().released().wipe_phase_for("Wiped", "uid-vol1/claim-0"),
    vec!["ledger fs-uuid:uuid-vol1 Dirty", "wipe /mnt/disks/vol1 for uid-vol1"]
)]
#[case::wiped_and_disk_gone_since(Pv::test().released().wipe_phase("Wiped"), vec!["delete uid-vol1"])]
fn a_released_pv_is_deleted_only_after_a_wipe_for_its_lifetime(
    #[case] pv: Pv,
    #[case] expected: Vec<&str>,
) {
    let world = World::new(vec![disk("vol1")], vec![pv.build()]);
    assert_eq!(summary(&world.plan()), expected);
}

#[test]
fn a_released_pv_being_deleted_is_not_wiped_again() {
    let world = World::new(
        vec![disk("vol1")],
        vec![Pv::test().released().deleting().build()],
    );
    assert_eq!(summary(&world.plan()), ["ledger fs-uuid:uuid-vol1 Dirty"]);
}

#[rstest]
#[case::retain("Retain", "event uid-vol1 VolumeRetained")]
#[case::recycle("Recycle", "event uid-vol1 ReclaimPolicyUnsupported")]
#[case::unknown("Shred", "event uid-vol1 ReclaimPolicyUnsupported")]
fn only_delete_lets_a_released_pv_be_wiped(#[case] policy: &str, #[case] event: &str) {
    let mut world = World::new(
        vec![disk("vol1")],
        vec![Pv::test().released().policy(policy).build()],
    );
    let plan = world.plan();
    let events: Vec<_> = summary(&plan)
        .into_iter()
        .filter(|s| s.starts_with("event"))
        .collect();
    assert_eq!(events, [event]);
    assert!(
        !summary(&plan)
            .iter()
            .any(|s| s.starts_with("wipe") || s.starts_with("delete"))
    );
    world.apply(&plan);
    assert_eq!(summary(&world.plan()), Vec::<String>::new(), "said once");
}

#[test]
fn a_released_pv_whose_disk_shows_no_recorded_id_is_not_wiped() {
    let mut bare = disk("vol1");
    bare.identity.fs_uuid = None;
    bare.identity.dev_id = "0:55".parse().ok();
    let world = World::new(vec![bare], vec![Pv::test().released().build()]);
    let plan = world.plan();
    assert!(
        summary(&plan).contains(&"event uid-vol1 WipeRefused".to_string()),
        "{:?}",
        summary(&plan)
    );
    assert!(!summary(&plan).iter().any(|s| s.starts_with("wipe")));
}

#[test]
fn a_reclaimed_disk_comes_back_as_a_fresh_available_pv() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().released().build()]);
    let all: Vec<_> = world.settle().iter().flat_map(summary).collect();
    assert_eq!(
        all,
        [
            "ledger fs-uuid:uuid-vol1 Dirty",
            "wipe /mnt/disks/vol1 for uid-vol1",
            "delete uid-vol1",
            "forget uid-vol1",
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol1",
        ]
    );
    assert_eq!(
        world.ledger.get("fs-uuid:uuid-vol1"),
        Some(DiskState::Published),
        "wiped (Clean), then remembered again as it is published"
    );
    let pv = &world.existing[0];
    assert_eq!(
        pv.metadata.uid.as_deref(),
        Some("created-1"),
        "a new PV object"
    );
    assert_eq!(
        pv.metadata.name.as_deref(),
        Some(pvname::localpv_name(NODE, CLASS, "vol1").as_str())
    );
}

// ---- the disk ledger ----

#[rstest]
#[case::delete_policy("Delete", DiskState::Dirty)]
#[case::retain_policy("Retain", DiskState::Retained)]
fn a_bound_pv_marks_its_disk_in_the_ledger(#[case] policy: &str, #[case] expected: DiskState) {
    let world = World::new(
        vec![disk("vol1")],
        vec![Pv::test().bound().policy(policy).build()],
    );
    let expected = Action::SetDiskState {
        key: "fs-uuid:uuid-vol1".into(),
        state: expected,
    };
    assert_eq!(world.plan().actions, [expected]);
}

#[rstest]
#[case::bound(Pv::test().bound())]
#[case::released(Pv::test().released())]
#[case::bound_and_being_deleted(Pv::test().bound().deleting())]
fn a_hand_deleted_pv_does_not_leak_its_disk(#[case] pv: Pv) {
    let mut world = World::new(vec![disk("vol1")], vec![pv.build()]);
    // Only the ledger entry lands before the PV is deleted by hand (a wipe may not have started).
    for action in world.plan().actions {
        if let Action::SetDiskState { key, state } = action {
            world.ledger.set(&key, state);
        }
    }
    world.existing.clear();
    let plan = world.plan();
    assert_eq!(
        summary(&plan),
        ["forget uid-vol1", "wipe /mnt/disks/vol1 for no pv"]
    );
    assert_eq!(plan.unpublished[0].reason, HoldReason::AwaitingWipe);
    world.apply(&plan);
    assert_eq!(
        summary(&world.plan()),
        [
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol1"
        ]
    );
}

#[test]
fn a_dirty_disk_is_recognised_under_a_new_path() {
    let mut world = World::new(vec![at_entry(disk("vol1"), "vol7")], vec![]);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Dirty);
    assert_eq!(summary(&world.plan()), ["wipe /mnt/disks/vol7 for no pv"]);
}

#[test]
fn a_retained_disk_without_its_pv_stays_unpublished_and_untouched() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Retained);
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(plan.unpublished[0].reason, HoldReason::Retained);
}

#[rstest]
#[case::unknown_disk(None, vec!["wipe /mnt/disks/vol1 for no pv"])]
#[case::known_clean_disk(Some(DiskState::Clean), vec!["ledger fs-uuid:uuid-vol1 Published", "create /mnt/disks/vol1"])]
fn wipe_on_first_discovery_wipes_unknown_disks_once(
    #[case] known: Option<DiskState>,
    #[case] expected: Vec<&str>,
) {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.classes[0].config.wipe_on_first_discovery = true;
    if let Some(state) = known {
        world.ledger.set("fs-uuid:uuid-vol1", state);
    }
    assert_eq!(summary(&world.plan()), expected);
    let all: Vec<_> = world.settle().iter().flat_map(summary).collect();
    assert_eq!(
        all.last().map(String::as_str),
        Some("create /mnt/disks/vol1")
    );
}

#[test]
fn block_disks_are_keyed_by_hardware_id_and_wiped_by_the_class_method() {
    let mut d = disk("sdb");
    d.mode = VolumeMode::Block;
    d.identity.wwn = Some("0x5000c500a1b2c3d4".into());
    let mut world = World::new(
        vec![d.clone()],
        vec![Pv::test().for_disk(&d).released().build()],
    );
    world.classes[0].config = class_config(CLASS, DIR, VolumeMode::Block);
    let order = only_wipe(&world.plan());
    assert_eq!(order.key, "wwn:0x5000c500a1b2c3d4");
    assert_eq!(
        order.method,
        crate::config::WipeMethod::Block(crate::config::BlockWipe::default())
    );
    assert_eq!(order.method.mode(), VolumeMode::Block);
}
