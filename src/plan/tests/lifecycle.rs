//! Disks that vanish, change or move, and PVs adopted from the reference provisioner.

use super::*;

// ---- disks that disappear ----

#[rstest]
#[case::available(Pv::test().available())]
#[case::just_created(Pv::test().pending())]
fn an_unclaimed_pv_whose_disk_vanished_is_deleted_with_preconditions(#[case] pv: Pv) {
    let world = World::new(vec![], vec![pv.build()]);
    let plan = world.plan();
    let expected = PvRef {
        name: pvname::localpv_name(NODE, CLASS, "vol1"),
        uid: "uid-vol1".into(),
        resource_version: "1".into(),
    };
    let disk = "fs-uuid:uuid-vol1".to_string();
    let event = Action::Event(PvEvent {
        pv: expected.clone(),
        type_: EventType::Warning,
        reason: Reason::DiskMissing,
        message: "the disk at /mnt/disks/vol1 is gone; this unclaimed PV is deleted so no claim is bound to it"
            .into(),
        claim: None,
    });
    assert_eq!(
        plan.actions,
        [Action::DeleteUnclaimedPv { pv: expected, disk }, event]
    );
}

#[rstest]
#[case::bound(Pv::test().bound(), "Bound")]
#[case::released(Pv::test().released(), "Released")]
fn a_claimed_pv_whose_disk_vanished_is_kept_with_one_event_until_the_disk_returns(
    #[case] pv: Pv,
    #[case] phase: &str,
) {
    let mut world = World::new(vec![], vec![pv.build()]);
    let plan = world.plan();
    assert_eq!(
        summary(&plan),
        [
            "ledger fs-uuid:uuid-vol1 Dirty",
            "event uid-vol1 DiskMissing"
        ]
    );
    let Action::Event(event) = &plan.actions[1] else {
        panic!("an event")
    };
    assert_eq!(
        event.message,
        format!("the disk at /mnt/disks/vol1 is gone; the PV is kept because it is {phase}")
    );
    assert_eq!(event.type_, EventType::Warning);
    world.apply(&plan);
    assert_eq!(
        summary(&world.plan()),
        Vec::<String>::new(),
        "no repeated event"
    );
    world.found.disks.push(disk("vol1").into());
    let back = world.plan();
    let returned: Vec<_> = summary(&back)
        .into_iter()
        .filter(|s| s.starts_with("event"))
        .collect();
    assert_eq!(returned, ["event uid-vol1 DiskReturned"]);
}

#[test]
fn the_grace_period_delays_deleting_an_available_pv() {
    let mut world = World::new(vec![], vec![Pv::test().build()]);
    world.config.missing_disk_grace_period = Duration::from_secs(60);
    let first = world.plan();
    assert_eq!(summary(&first), Vec::<String>::new());
    assert_eq!(first.requeue_after, Some(Duration::from_secs(60)));
    world.apply(&first);
    world.now += Duration::from_secs(45);
    assert_eq!(world.plan().requeue_after, Some(Duration::from_secs(15)));
    world.now += Duration::from_secs(15);
    assert_eq!(
        summary(&world.plan()),
        ["delete uid-vol1", "event uid-vol1 DiskMissing"],
        "the deletion is said as an Event, not only logged"
    );
}

#[test]
fn a_disk_back_within_the_grace_period_keeps_its_pv() {
    let mut world = World::new(vec![], vec![Pv::test().build()]);
    world.config.missing_disk_grace_period = Duration::from_secs(60);
    let first = world.plan();
    world.apply(&first);
    world.found.disks.push(disk("vol1").into());
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(
        plan.memory,
        Memory::default(),
        "the missing clock is forgotten"
    );
}

#[rstest]
#[case::probe_failed(true, true)]
#[case::class_not_scanned(false, false)]
fn a_disk_that_could_not_be_looked_at_is_not_taken_for_missing(
    #[case] scanned: bool,
    #[case] probe_failed: bool,
) {
    let mut world = World::new(
        vec![],
        vec![
            Pv::test().build(),
            Pv::test().for_disk(&disk("vol2")).bound().build(),
        ],
    );
    if !scanned {
        world.found.failed_classes.push(ClassFailure {
            class: CLASS.into(),
            mount_dir: format!("/host{DIR}").into(),
            message: "permission denied".into(),
        });
    }
    if probe_failed {
        for entry in ["vol1", "vol2"] {
            world.found.unusable.push(Unusable {
                class: CLASS.into(),
                entry: entry.into(),
                host_path: format!("{DIR}/{entry}").into(),
                reason: UnusableReason::ProbeFailed,
                message: "permission denied".into(),
            });
        }
    }
    assert_eq!(summary(&world.plan()), Vec::<String>::new());
}

#[test]
fn a_pv_labelled_for_another_node_is_not_ours() {
    let theirs = Pv::test()
        .on_node("n2")
        .affine_to("n2-host")
        .bound()
        .build();
    let world = World::new(vec![disk("vol1")], vec![theirs]);
    assert_eq!(
        summary(&world.plan()),
        [
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol1"
        ]
    );
}

#[test]
fn a_pv_outside_every_discovery_directory_is_left_alone() {
    let mut elsewhere = disk("vol1");
    elsewhere.host_path = "/srv/other/vol1".into();
    let world = World::new(vec![], vec![Pv::test().for_disk(&elsewhere).build()]);
    assert_eq!(summary(&world.plan()), Vec::<String>::new());
}

// ---- disks that change ----

#[test]
fn an_available_pv_on_a_swapped_disk_is_replaced() {
    let mut world = World::new(
        vec![with_uuid(disk("vol1"), "new")],
        vec![Pv::test().build()],
    );
    let first = world.plan();
    assert_eq!(summary(&first), ["delete uid-vol1"]);
    assert_eq!(
        first.requeue_after,
        Some(Duration::from_secs(1)),
        "the new PV follows promptly"
    );
    world.apply(&first);
    let pv = only_created(&world.plan());
    assert_eq!(
        pv.metadata.annotations.expect("annotations")[ANN_FS_UUID],
        "new"
    );
}

#[rstest]
#[case::bound(Pv::test().bound(), vec!["event uid-vol1 DiskIdentityChanged"])]
#[case::released(Pv::test().released(), vec!["event uid-vol1 DiskIdentityChanged", "event uid-vol1 WipeRefused"])]
#[case::released_retained(Pv::test().released().policy("Retain"), vec!["event uid-vol1 VolumeRetained", "event uid-vol1 DiskIdentityChanged"])]
fn a_claimed_pv_on_a_swapped_disk_is_never_touched(#[case] pv: Pv, #[case] expected: Vec<&str>) {
    let mut world = World::new(vec![with_uuid(disk("vol1"), "intruder")], vec![pv.build()]);
    world.settle();
    world.memory = Memory::default();
    assert_eq!(summary(&world.plan()), expected);
}

#[test]
fn a_bound_disk_reappearing_under_another_path_gets_no_second_pv() {
    let moved = at_entry(disk("vol1"), "vol9");
    let mut world = World::new(vec![moved], vec![Pv::test().bound().build()]);
    let plan = world.plan();
    let events: Vec<_> = summary(&plan)
        .into_iter()
        .filter(|s| !s.starts_with("ledger"))
        .collect();
    assert_eq!(
        events,
        ["event uid-vol1 DiskMissing", "event uid-vol1 DiskMoved"]
    );
    assert_eq!(plan.unpublished[0].reason, HoldReason::HeldByAnotherPv);
    world.apply(&plan);
    assert_eq!(summary(&world.plan()), Vec::<String>::new());
}

#[test]
fn an_available_disk_moved_to_another_path_is_republished_there() {
    let mut world = World::new(
        vec![at_entry(disk("vol1"), "vol9")],
        vec![Pv::test().build()],
    );
    let plans = world.settle();
    assert_eq!(
        summary(&plans[0]),
        ["delete uid-vol1", "event uid-vol1 DiskMissing"]
    );
    assert_eq!(
        summary(&plans[1]),
        [
            "forget uid-vol1",
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol9"
        ],
        "not wiped: the agent itself deleted its PV while unclaimed"
    );
}

#[test]
fn an_available_pv_of_a_reconfigured_class_is_replaced() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().build()]);
    world.classes[0].config.name = "fast".into();
    Arc::make_mut(&mut world.found.disks[0]).class = "fast".into();
    let plans = world.settle();
    assert_eq!(summary(&plans[0]), ["delete uid-vol1"]);
    assert_eq!(
        only_created(&plans[1])
            .spec
            .expect("spec")
            .storage_class_name
            .as_deref(),
        Some("fast")
    );
}

#[test]
fn a_pv_being_deleted_holds_its_path_until_it_is_gone() {
    let world = World::new(vec![disk("vol1")], vec![Pv::test().deleting().build()]);
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(plan.unpublished[0].reason, HoldReason::AwaitingDeletion);
    assert!(plan.requeue_after.is_some());
}

// ---- adoption ----

#[rstest]
#[case::name_only("local-volume-provisioner-n1")]
#[case::name_and_uid("local-volume-provisioner-n1-0a1b2c3d-0000-4000-8000-00000000000a")]
#[case::recreated_node("local-volume-provisioner-n1-99999999-0000-4000-8000-000000000000")]
fn reference_pvs_of_this_node_are_adopted_in_place(#[case] provisioned_by: &str) {
    let reference = Pv::test()
        .reference(provisioned_by)
        .name("local-pv-e3f48c6a")
        .bound()
        .build();
    let mut world = World::new(vec![disk("vol1")], vec![reference]);
    let plan = world.plan();
    assert_eq!(
        summary(&plan),
        ["own uid-vol1", "adopt uid-vol1", "event uid-vol1 Adopted"]
    );
    let Action::AdoptPv { name, patch } = &plan.actions[1] else {
        panic!("adopt")
    };
    assert_eq!(name, "local-pv-e3f48c6a");
    assert_eq!(patch.labels[NODE_LABEL], NODE);
    assert_eq!(patch.annotations[ANN_FS_UUID], "uuid-vol1");
    assert_eq!(patch.resource_version.as_deref(), Some("1"));
    assert!(
        !patch.annotations.contains_key(ANN_PROVISIONED_BY),
        "the reference text is kept"
    );
    let rest: Vec<_> = world.settle().iter().flat_map(summary).collect();
    assert_eq!(
        rest,
        [
            "own uid-vol1",
            "adopt uid-vol1",
            "event uid-vol1 Adopted",
            "ledger fs-uuid:uuid-vol1 Dirty"
        ]
    );
    assert_eq!(world.existing.len(), 1, "never re-created");
}

#[rstest]
#[case::other_node("local-volume-provisioner-n2")]
#[case::node_with_our_name_as_prefix("local-volume-provisioner-n1-2")]
#[case::prefix_node_with_uid("local-volume-provisioner-n1-2-0a1b2c3d-0000-4000-8000-00000000000a")]
fn pvs_of_other_nodes_are_not_adopted(#[case] provisioned_by: &str) {
    let foreign = Pv::test()
        .reference(provisioned_by)
        .name("foreign")
        .affine_to("n2-host")
        .bound()
        .build();
    let world = World::new(vec![disk("vol1")], vec![foreign]);
    assert_eq!(
        summary(&world.plan()),
        [
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol1"
        ]
    );
}

#[test]
fn a_pv_of_another_provisioner_on_our_disk_is_not_adopted_and_holds_the_disk() {
    let foreign = Pv::test()
        .reference("rancher.io/local-path")
        .name("foreign")
        .bound()
        .build();
    let world = World::new(vec![disk("vol1")], vec![foreign]);
    let plan = world.plan();
    assert_eq!(summary(&plan), ["event uid-vol1 ForeignPersistentVolume"]);
    assert_eq!(plan.unpublished[0].reason, HoldReason::HeldByAnotherPv);
}

#[test]
fn an_adopted_pv_whose_disk_was_absent_records_the_identity_once_it_is_seen() {
    let adopted = Pv::test().without_identity().bound().build();
    let mut world = World::new(vec![], vec![adopted]);
    world.apply(&world.plan());
    world.found.disks.push(disk("vol1").into());
    let plan = world.plan();
    assert_eq!(
        summary(&plan)[..2],
        ["ledger fs-uuid:uuid-vol1 Dirty", "record uid-vol1"]
    );
}
