//! Ownership: the agent acts only on PVs whose UID it recorded; foreign PVs are reported once and block wipes and
//! publishing of the disks they reach; a published disk is remembered until its PV is deleted as unclaimed.

use super::*;

const FORGED: &str = "uid-forged";

fn events(plan: &Plan) -> Vec<String> {
    summary(plan)
        .into_iter()
        .filter(|s| s.starts_with("event"))
        .collect()
}

fn writes(plan: &Plan) -> Vec<String> {
    summary(plan)
        .into_iter()
        .filter(|s| !s.starts_with("event"))
        .collect()
}

/// A copy of our PV for vol1 (labels, annotations, spec) made by someone else, under another name.
fn forged() -> Pv {
    Pv::test().name("hand-made").uid(FORGED)
}

// ---- forged PVs ----

#[rstest]
#[case::same_path("/mnt/disks/vol1")]
#[case::dot("/mnt/disks/./vol1")]
#[case::double_slash("/mnt/disks//vol1")]
#[case::trailing_slash("/mnt/disks/vol1/")]
#[case::dot_dot("/mnt/disks/x/../vol1")]
fn a_released_copy_of_our_bound_pv_is_reported_and_never_touched(#[case] path: &str) {
    let ours = Pv::test().bound().build();
    let copy = forged().at_path(path).released().build();
    let mut world = World::new(vec![disk("vol1")], vec![ours]);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Dirty);
    world.existing.push(copy);
    let plan = world.plan();
    assert_eq!(
        writes(&plan),
        Vec::<String>::new(),
        "no patch, wipe or delete"
    );
    assert_eq!(
        events(&plan),
        [format!("event {FORGED} ForeignPersistentVolume")]
    );
    world.apply(&plan);
    assert_eq!(summary(&world.plan()), Vec::<String>::new(), "one Event");
}

#[rstest]
#[case::unlabelled_same_path(forged().unlabelled())]
#[case::unlabelled_dot_path(forged().unlabelled().at_path("/mnt/disks/./vol1"))]
#[case::the_discovery_dir(forged().unlabelled().at_path("/mnt/disks"))]
#[case::a_directory_inside(forged().unlabelled().at_path("/mnt/disks/vol1/app"))]
#[case::host_path_volume(forged().unlabelled().host_path("/mnt/disks/vol1"))]
#[case::our_identity_elsewhere(forged().unlabelled().at_path("/srv/other"))]
#[case::labelled_copy(forged())]
#[case::reference_copy(forged().reference("local-volume-provisioner-n1"))]
fn our_released_pv_is_not_wiped_while_a_foreign_pv_reaches_its_disk(#[case] other: Pv) {
    let ours = Pv::test().released().build();
    let mut world = World::new(vec![disk("vol1")], vec![ours]);
    world.others.push(other.bound().build());
    let plan = world.plan();
    assert_eq!(
        writes(&plan),
        ["ledger fs-uuid:uuid-vol1 Dirty"],
        "no wipe, no delete"
    );
    assert_eq!(
        events(&plan),
        [
            "event uid-vol1 WipeRefused".to_string(),
            format!("event {FORGED} ForeignPersistentVolume")
        ]
    );
    world.apply(&plan);
    assert_eq!(summary(&world.plan()), Vec::<String>::new());
    world.others.clear();
    let wipe = only_wipe(&world.plan());
    assert_eq!(
        wipe.pv.map(|p| p.uid).as_deref(),
        Some("uid-vol1"),
        "wiped once the foreign PV is gone"
    );
}

#[rstest]
#[case::affine_to_another_node(forged().unlabelled().affine_to("n2-host").without_identity())]
#[case::elsewhere(forged().unlabelled().at_path("/srv/other").without_identity())]
#[case::a_sibling_path(forged().unlabelled().at_path("/mnt/disks/vol10").without_identity())]
fn a_pv_that_cannot_reach_the_disk_here_does_not_block_its_wipe(#[case] other: Pv) {
    let ours = Pv::test().released().build();
    let mut world = World::new(vec![disk("vol1")], vec![ours]);
    world.others.push(other.bound().build());
    let plan = world.plan();
    assert_eq!(only_wipe(&plan).host_path, PathBuf::from("/mnt/disks/vol1"));
    assert_eq!(events(&plan), Vec::<String>::new());
}

#[test]
fn a_pv_labelled_for_us_but_affine_to_another_node_is_still_not_ours() {
    let ours = Pv::test().bound().build();
    let copy = forged().affine_to("n2-host").released().build();
    let mut world = World::new(vec![disk("vol1")], vec![ours]);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Dirty);
    world.existing.push(copy);
    let plan = world.plan();
    assert_eq!(writes(&plan), Vec::<String>::new());
    assert_eq!(
        events(&plan),
        [format!("event {FORGED} ForeignPersistentVolume")]
    );
}

#[test]
fn a_free_disk_reached_by_a_foreign_pv_is_not_published() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world
        .others
        .push(forged().unlabelled().at_path("/mnt/disks/vol1/").build());
    let plan = world.plan();
    assert_eq!(writes(&plan), Vec::<String>::new());
    assert_eq!(plan.unpublished[0].reason, HoldReason::HeldByAnotherPv);
    assert!(plan.unpublished[0].message.contains("hand-made"));
}

#[test]
fn a_copy_of_our_pv_made_after_ours_was_deleted_is_left_alone_and_the_disk_held() {
    // Ours was deleted by hand while bound: the disk is dirty. Someone re-creates a PV with our very name.
    let copy = Pv::test().uid(FORGED).released().build();
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Dirty);
    world.existing.push(copy);
    let plan = world.plan();
    assert_eq!(writes(&plan), Vec::<String>::new(), "no wipe, no delete");
    assert_eq!(
        events(&plan),
        [format!("event {FORGED} ForeignPersistentVolume")]
    );
    assert_eq!(plan.unpublished[0].reason, HoldReason::HeldByAnotherPv);
}

// ---- the fresh list of every PV ----

#[rstest]
#[case::a_new_disk(vec![disk("vol1")], vec![])]
#[case::a_released_pv(vec![disk("vol1")], vec![Pv::test().released().build()])]
#[case::a_dirty_disk(vec![at_entry(disk("vol1"), "vol2")], vec![])]
fn no_wipe_and_no_new_pv_is_planned_without_a_fresh_list_of_every_pv(
    #[case] disks: Vec<Disk>,
    #[case] pvs: Vec<PersistentVolume>,
) {
    let mut world = World::new(disks, pvs);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Dirty);
    world.listed = false;
    let plan = world.plan();
    assert!(plan.needs_cluster_list);
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Wipe(_) | Action::CreatePv(_))),
        "{:?}",
        summary(&plan)
    );
}

#[test]
fn a_steady_world_needs_no_list() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().bound().build()]);
    world.settle();
    world.listed = false;
    assert!(!world.plan().needs_cluster_list);
}

// ---- recording owners ----

#[test]
fn owners_are_taken_over_once_only_for_the_sole_pv_at_an_exact_path() {
    let exact = Pv::test().for_disk(&disk("vol1")).bound().build();
    let oddly_spelled = Pv::test()
        .for_disk(&disk("vol2"))
        .at_path("/mnt/disks//vol2")
        .bound()
        .build();
    let twin_a = Pv::test().for_disk(&disk("vol3")).bound().build();
    let twin_b = Pv::test()
        .for_disk(&disk("vol3"))
        .name("twin")
        .uid("uid-twin")
        .bound()
        .build();
    let mut world = World::new(
        vec![disk("vol1"), disk("vol2"), disk("vol3")],
        vec![exact, oddly_spelled, twin_a, twin_b],
    );
    world.owners = Owners::default();
    let plan = world.plan();
    let owning: Vec<_> = writes(&plan)
        .into_iter()
        .filter(|w| w.starts_with("own"))
        .collect();
    assert_eq!(owning, ["own uid-vol1", "owners recorded"]);
    world.apply(&plan);
    assert!(world.owners.recorded);
    // A labelled PV appearing later is never taken over.
    world
        .existing
        .push(Pv::test().for_disk(&disk("vol4")).bound().build());
    let later = world.plan();
    assert!(!writes(&later).iter().any(|w| w.starts_with("own")));
}

#[test]
fn adoption_records_the_owner_before_labelling_the_pv() {
    let reference = Pv::test()
        .reference("local-volume-provisioner-n1")
        .uid("uid-ref")
        .bound()
        .build();
    let world = World::new(vec![disk("vol1")], vec![reference]);
    let plan = world.plan();
    assert_eq!(
        writes(&plan)[..2],
        ["own uid-ref".to_string(), "adopt uid-ref".to_string()]
    );
}

#[rstest]
#[case::beside_our_pv(Some(Pv::test().bound().build()), "/mnt/disks/vol1")]
#[case::odd_spelling(None, "/mnt/disks/./vol1")]
#[case::not_an_entry_of_a_class_dir(None, "/mnt/disks")]
fn a_reference_pv_that_is_not_the_one_pv_at_its_exact_path_is_not_adopted(
    #[case] ours: Option<PersistentVolume>,
    #[case] path: &str,
) {
    let reference = forged()
        .reference("local-volume-provisioner-n1")
        .at_path(path)
        .released()
        .build();
    let mut world = World::new(vec![disk("vol1")], ours.into_iter().collect());
    world.existing.push(reference);
    let plan = world.plan();
    assert!(
        !summary(&plan)
            .iter()
            .any(|s| s.contains(FORGED) && !s.contains("ForeignPersistentVolume")),
        "{:?}",
        summary(&plan)
    );
    assert!(events(&plan).contains(&format!("event {FORGED} ForeignPersistentVolume")));
}

#[test]
fn owners_of_pvs_that_are_gone_are_forgotten() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().bound().build()]);
    world
        .owners
        .pvs
        .insert("uid-gone".into(), OwnedPv::default());
    let plan = world.plan();
    assert_eq!(
        writes(&plan),
        ["forget uid-gone", "ledger fs-uuid:uuid-vol1 Dirty"]
    );
    world.listed = false;
    assert!(
        !writes(&world.plan())
            .iter()
            .any(|w| w.starts_with("forget"))
    );
}

// ---- a published disk is remembered ----

#[test]
fn a_disk_is_remembered_as_published_before_its_pv_is_created() {
    let world = World::new(vec![disk("vol1")], vec![]);
    assert_eq!(
        summary(&world.plan()),
        [
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol1"
        ]
    );
}

#[rstest]
#[case::delete(Some("Delete"), vec!["wipe /mnt/disks/vol1 for no pv"], HoldReason::AwaitingWipe)]
#[case::unset(None, vec!["wipe /mnt/disks/vol1 for no pv"], HoldReason::AwaitingWipe)]
#[case::retain(Some("Retain"), vec![], HoldReason::Retained)]
fn a_published_disk_whose_pv_went_behind_the_agents_back_is_wiped_or_retained(
    #[case] policy: Option<&str>,
    #[case] expected: Vec<&str>,
    #[case] hold: HoldReason,
) {
    // The agent was down while the PV was bound, written, released and deleted by hand.
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Published);
    world.classes[0].storage_class = Some(StorageClassFacts {
        reclaim_policy: policy.map(Into::into),
        ..Default::default()
    });
    let plan = world.plan();
    assert_eq!(summary(&plan), expected);
    assert_eq!(plan.unpublished[0].reason, hold);
    if hold == HoldReason::AwaitingWipe {
        world.apply(&plan);
        assert_eq!(
            summary(&world.plan()),
            [
                "ledger fs-uuid:uuid-vol1 Published",
                "create /mnt/disks/vol1"
            ],
            "published again only after the wipe"
        );
    }
}

#[test]
fn an_available_pv_deleted_by_hand_leaves_its_disk_to_be_wiped() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.settle();
    world.existing.clear();
    assert_eq!(
        summary(&world.plan()),
        ["forget created-1", "wipe /mnt/disks/vol1 for no pv"]
    );
}

#[test]
fn an_unclaimed_pv_the_agent_deletes_itself_hands_its_disk_back_clean() {
    let mut world = World::new(vec![], vec![Pv::test().available().build()]);
    let plan = world.plan();
    assert_eq!(
        plan.actions[0],
        Action::DeleteUnclaimedPv {
            pv: PvRef {
                name: pvname::localpv_name(NODE, CLASS, "vol1"),
                uid: "uid-vol1".into(),
                resource_version: "1".into(),
            },
            disk: "fs-uuid:uuid-vol1".into(),
        }
    );
    world.apply(&plan);
    assert_eq!(
        world.ledger.get("fs-uuid:uuid-vol1"),
        Some(DiskState::Clean)
    );
    world.found.disks.push(disk("vol1").into());
    assert_eq!(
        summary(&world.plan()),
        [
            "forget uid-vol1",
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol1"
        ],
        "no wipe: it was never claimed"
    );
}

#[test]
fn a_failed_delete_of_an_unclaimed_pv_leaves_the_disk_published() {
    let mut world = World::new(vec![], vec![Pv::test().available().build()]);
    let mut plan = world.plan();
    // The PV was bound meanwhile: the preconditions fail and nothing is deleted.
    world.existing[0].metadata.resource_version = Some("2".into());
    plan.memory = world.memory.clone();
    world.apply(&plan);
    assert_eq!(
        world.ledger.get("fs-uuid:uuid-vol1"),
        Some(DiskState::Published)
    );
}

#[test]
fn an_available_pv_from_an_older_release_marks_its_disk_published() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().available().build()]);
    world.ledger = DiskLedger::default();
    assert_eq!(
        summary(&world.plan()),
        ["ledger fs-uuid:uuid-vol1 Published"]
    );
}

// ---- a create whose response was lost ----

#[rstest]
#[case::sole_pv_at_the_path(None, "/mnt/disks/vol1", true)]
#[case::another_path(None, "/mnt/disks/vol2", false)]
#[case::beside_another_pv(Some(forged().unlabelled().at_path("/mnt/disks/vol1/x").build()), "/mnt/disks/vol1", false)]
fn a_pv_being_created_is_ours_only_at_its_exact_path_and_alone_there(
    #[case] other: Option<PersistentVolume>,
    #[case] recorded_path: &str,
    #[case] ours: bool,
) {
    // The agent recorded the name, sent the create, and lost the response (timeout, crash).
    let created = Pv::test().uid("uid-created").bound().build();
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.existing.push(created);
    world.others.extend(other);
    let name = pvname::localpv_name(NODE, CLASS, "vol1");
    let path = PathBuf::from(recorded_path);
    world
        .owners
        .creating
        .insert(name.clone(), OwnedPv { name, path });
    let plan = world.plan();
    assert_eq!(
        writes(&plan).contains(&"own uid-created".to_string()),
        ours,
        "{:?}",
        summary(&plan)
    );
    if ours {
        world.apply(&plan);
        assert!(world.owners.creating.is_empty());
        assert!(world.owners.owns("uid-created"));
    }
}
