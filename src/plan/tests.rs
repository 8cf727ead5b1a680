use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume};
use rstest::rstest;

use super::fixtures::*;
use super::pv::{ANN_PROVISIONED_BY, NODE_LABEL};
use super::*;
use crate::config::PvNaming;
use crate::disk::{ClassFailure, Disk, Unusable, UnusableReason};
use crate::pvname;

/// One line per action: `create <path>`, `delete <uid>`, `wipe <path> for <uid>`, `event <uid> <Reason>`, ...
fn summary(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .map(|action| match action {
            Action::CreatePv(pv) => format!("create {}", local_path(pv)),
            Action::DeletePv(pv) => format!("delete {}", pv.uid),
            Action::AdoptPv { patch, .. } => format!("adopt {}", patch.uid),
            Action::RecordIdentity { patch, .. } => format!("record {}", patch.uid),
            Action::SetDiskState { key, state } => format!("ledger {key} {state:?}"),
            Action::Wipe(order) => {
                let uid = order.pv.as_ref().map_or("no pv", |pv| pv.uid.as_str());
                format!("wipe {} for {uid}", order.host_path.display())
            }
            Action::Event(event) => format!("event {} {}", event.pv.uid, event.reason),
        })
        .collect()
}

fn local_path(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.local.as_ref())
        .map(|l| l.path.clone())
        .unwrap_or_default()
}

fn only_created(plan: &Plan) -> PersistentVolume {
    let created: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePv(pv) => Some((**pv).clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        created.len(),
        1,
        "expected one CreatePv in {:#?}",
        summary(plan)
    );
    created.into_iter().next().expect("one PV")
}

fn only_wipe(plan: &Plan) -> WipeOrder {
    let wipes: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Wipe(order) => Some((**order).clone()),
            _ => None,
        })
        .collect();
    assert_eq!(wipes.len(), 1, "expected one Wipe in {:#?}", summary(plan));
    wipes.into_iter().next().expect("one wipe")
}

fn affinity_terms(pv: &PersistentVolume) -> Vec<NodeSelectorTerm> {
    let spec = pv.spec.as_ref().expect("spec");
    spec.node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .expect("required affinity")
        .node_selector_terms
        .clone()
}

fn hostname_term(value: &str) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(vec![NodeSelectorRequirement {
            key: "kubernetes.io/hostname".into(),
            operator: "In".into(),
            values: Some(vec![value.into()]),
        }]),
        match_fields: None,
    }
}

// ---- publishing ----

#[test]
fn a_new_disk_becomes_one_pv_with_the_reference_spec() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.config.node_labels_for_pv = vec![
        "topology.kubernetes.io/zone".into(),
        "absent.example/label".into(),
    ];
    world.config.labels_for_pv = [("team".to_string(), "storage".to_string())].into();
    world.classes[0]
        .storage_class
        .as_mut()
        .expect("sc")
        .mount_options = vec!["noatime".into()];
    let plan = world.plan();
    assert_eq!(summary(&plan), ["create /mnt/disks/vol1"]);
    let pv = only_created(&plan);
    let meta = &pv.metadata;
    assert_eq!(
        meta.name.as_deref(),
        Some(pvname::localpv_name(NODE, CLASS, "vol1").as_str())
    );
    let labels = meta.labels.clone().expect("labels");
    let expected_labels = [
        (NODE_LABEL, NODE),
        ("team", "storage"),
        ("topology.kubernetes.io/zone", "z1"),
    ];
    assert_eq!(
        labels,
        expected_labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    );
    let annotations = meta.annotations.clone().expect("annotations");
    assert_eq!(annotations[ANN_PROVISIONED_BY], "localpv-n1");
    assert_eq!(annotations["localpv.io/fs-uuid"], "uuid-vol1");
    assert_eq!(annotations["localpv.io/fs-type"], "ext4");
    assert_eq!(annotations["localpv.io/device"], "/dev/mapper/vol1");
    assert_eq!(meta.owner_references, None);
    let spec = pv.spec.clone().expect("spec");
    assert_eq!(local_path(&pv), "/mnt/disks/vol1");
    assert_eq!(spec.capacity.expect("capacity")["storage"].0, "5Gi");
    assert_eq!(
        spec.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_string()][..])
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some(CLASS));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(spec.mount_options, Some(vec!["noatime".to_string()]));
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(affinity_terms(&pv), [hostname_term("n1-host")]);
}

#[rstest]
#[case::from_the_storage_class(Some("Retain"), "Retain")]
#[case::delete_when_unset(None, "Delete")]
fn reclaim_policy_comes_from_the_storage_class(
    #[case] policy: Option<&str>,
    #[case] expected: &str,
) {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.classes[0].storage_class = Some(StorageClassFacts {
        reclaim_policy: policy.map(Into::into),
        ..Default::default()
    });
    let pv = only_created(&world.plan());
    assert_eq!(
        pv.spec
            .expect("spec")
            .persistent_volume_reclaim_policy
            .as_deref(),
        Some(expected)
    );
}

#[rstest]
#[case::hostname_label(Some("n1-host"), false, "n1-host")]
#[case::node_name_only(Some("n1-host"), true, "n1")]
#[case::no_hostname_label(None, false, "n1")]
fn node_affinity_names_the_hostname_label_or_the_node_name(
    #[case] label: Option<&str>,
    #[case] node_name_only: bool,
    #[case] expected: &str,
) {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.node.hostname_label = label.map(Into::into);
    world.config.use_node_name_only = node_name_only;
    assert_eq!(
        affinity_terms(&only_created(&world.plan())),
        [hostname_term(expected)]
    );
}

#[test]
fn class_selector_terms_are_ored_after_the_node_term() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    let rack = NodeSelectorTerm {
        match_expressions: Some(vec![NodeSelectorRequirement {
            key: "rack".into(),
            operator: "In".into(),
            values: Some(vec!["r1".into()]),
        }]),
        match_fields: None,
    };
    world.classes[0].config.selector = vec![rack.clone()];
    assert_eq!(
        affinity_terms(&only_created(&world.plan())),
        [hostname_term("n1-host"), rack]
    );
}

#[rstest]
#[case::filesystem_class(VolumeMode::Filesystem, Some("xfs"))]
#[case::block_class(VolumeMode::Block, None)]
fn fs_type_is_set_only_where_it_applies(#[case] mode: VolumeMode, #[case] expected: Option<&str>) {
    let mut d = disk("vol1");
    d.mode = mode;
    let mut world = World::new(vec![d], vec![]);
    world.classes[0].config.volume_mode = mode;
    world.classes[0].config.fs_type = Some("xfs".into());
    let pv = only_created(&world.plan());
    let spec = pv.spec.expect("spec");
    assert_eq!(spec.local.expect("local").fs_type.as_deref(), expected);
    assert_eq!(spec.volume_mode.as_deref(), Some(mode.as_str()));
}

#[test]
fn the_node_owns_its_pvs_when_asked() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.config.set_pv_owner_ref = true;
    let owners = only_created(&world.plan())
        .metadata
        .owner_references
        .expect("owner references");
    let summary: Vec<_> = owners
        .iter()
        .map(|o| (o.kind.as_str(), o.name.as_str(), o.uid.as_str()))
        .collect();
    assert_eq!(summary, [("Node", NODE, NODE_UID)]);
}

#[rstest]
#[case::ours(PvNaming::Localpv, pvname::localpv_name(NODE, CLASS, "vol1"))]
#[case::reference(PvNaming::Reference, pvname::reference_name("vol1", NODE, CLASS))]
fn pv_names_follow_the_naming_option(#[case] naming: PvNaming, #[case] expected: String) {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.config.pv_naming = naming;
    assert_eq!(only_created(&world.plan()).metadata.name, Some(expected));
}

#[rstest]
#[case::exact_by_default(false, "10752Mi")]
#[case::rounded_when_asked(true, "10Gi")]
fn capacity_is_rounded_only_when_asked(#[case] rounding: bool, #[case] expected: &str) {
    let mut d = disk("vol1");
    d.capacity_bytes = (10 << 30) + (512 << 20);
    let mut world = World::new(vec![d], vec![]);
    world.config.capacity_rounding = rounding;
    assert_eq!(
        only_created(&world.plan())
            .spec
            .expect("spec")
            .capacity
            .expect("capacity")["storage"]
            .0,
        expected
    );
}

#[test]
fn a_class_without_its_storage_class_publishes_nothing() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.classes[0].storage_class = None;
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(plan.unpublished[0].reason, HoldReason::NoStorageClass);
}

#[test]
fn a_name_taken_by_a_pv_for_another_path_is_not_reused() {
    let other = Pv::test()
        .for_disk(&disk("old"))
        .name(&pvname::localpv_name(NODE, CLASS, "vol1"))
        .bound()
        .build();
    let mut world = World::new(vec![disk("vol1"), disk("old")], vec![other]);
    let plan = world.plan();
    assert_eq!(
        summary(&plan),
        [
            "ledger fs-uuid:uuid-old Dirty",
            "event uid-old NameCollision"
        ]
    );
    assert_eq!(plan.unpublished[0].reason, HoldReason::NameTaken);
    world.apply(&plan);
    assert_eq!(
        summary(&world.plan()),
        Vec::<String>::new(),
        "the collision is reported once"
    );
}

// ---- steady state ----

#[rstest]
#[case::fresh_disks(vec![disk("vol1"), disk("vol2")], vec![])]
#[case::bound_pv(vec![disk("vol1")], vec![Pv::test().bound().build()])]
#[case::bound_pv_with_its_disk_gone(vec![], vec![Pv::test().bound().build()])]
#[case::retained_released_pv(vec![disk("vol1")], vec![Pv::test().released().policy("Retain").build()])]
#[case::recycle_released_pv(vec![disk("vol1")], vec![Pv::test().released().policy("Recycle").build()])]
#[case::released_pv_to_reclaim(vec![disk("vol1")], vec![Pv::test().released().build()])]
#[case::reference_pv(vec![disk("vol1")], vec![Pv::test().reference("local-volume-provisioner-n1").build()])]
#[case::swapped_disk_under_bound_pv(vec![with_uuid(disk("vol1"), "other")], vec![Pv::test().bound().build()])]
#[case::moved_bound_disk(vec![at_entry(disk("vol1"), "vol9")], vec![Pv::test().bound().build()])]
fn a_resync_of_an_unchanged_world_writes_nothing_and_says_nothing(
    #[case] disks: Vec<Disk>,
    #[case] pvs: Vec<PersistentVolume>,
) {
    let mut world = World::new(disks, pvs);
    world.settle();
    let plan = world.plan();
    assert_eq!(summary(&plan), Vec::<String>::new());
    assert_eq!(plan.memory, world.memory, "memory is stable too");
}

#[test]
fn an_agent_restart_creates_no_duplicates() {
    let mut world = World::new(vec![disk("vol1"), disk("vol2")], vec![]);
    world.settle();
    world.memory = Memory::default();
    assert_eq!(summary(&world.plan()), Vec::<String>::new());
    assert_eq!(world.existing.len(), 2);
}

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
    assert_eq!(plan.actions, [Action::DeletePv(expected)]);
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
    world.found.disks.push(disk("vol1"));
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
    assert_eq!(summary(&world.plan()), ["delete uid-vol1"]);
}

#[test]
fn a_disk_back_within_the_grace_period_keeps_its_pv() {
    let mut world = World::new(vec![], vec![Pv::test().build()]);
    world.config.missing_disk_grace_period = Duration::from_secs(60);
    let first = world.plan();
    world.apply(&first);
    world.found.disks.push(disk("vol1"));
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
    let theirs = Pv::test().on_node("n2").bound().build();
    let world = World::new(vec![disk("vol1")], vec![theirs]);
    assert_eq!(summary(&world.plan()), ["create /mnt/disks/vol1"]);
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
        pv.metadata.annotations.expect("annotations")["localpv.io/fs-uuid"],
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
    assert_eq!(summary(&plans[0]), ["delete uid-vol1"]);
    assert_eq!(summary(&plans[1]), ["create /mnt/disks/vol9"]);
}

#[test]
fn an_available_pv_of_a_reconfigured_class_is_replaced() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().build()]);
    world.classes[0].config.name = "fast".into();
    world.found.disks[0].class = "fast".into();
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
    assert_eq!(summary(&plan), ["adopt uid-vol1", "event uid-vol1 Adopted"]);
    let Action::AdoptPv { name, patch } = &plan.actions[0] else {
        panic!("adopt")
    };
    assert_eq!(name, "local-pv-e3f48c6a");
    assert_eq!(patch.labels[NODE_LABEL], NODE);
    assert_eq!(patch.annotations["localpv.io/fs-uuid"], "uuid-vol1");
    assert_eq!(patch.resource_version.as_deref(), Some("1"));
    assert!(
        !patch.annotations.contains_key(ANN_PROVISIONED_BY),
        "the reference text is kept"
    );
    let rest: Vec<_> = world.settle().iter().flat_map(summary).collect();
    assert_eq!(
        rest,
        [
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
#[case::another_provisioner("rancher.io/local-path")]
fn pvs_of_other_nodes_or_provisioners_are_ignored(#[case] provisioned_by: &str) {
    let foreign = Pv::test()
        .reference(provisioned_by)
        .name("foreign")
        .bound()
        .build();
    let world = World::new(vec![disk("vol1")], vec![foreign]);
    assert_eq!(summary(&world.plan()), ["create /mnt/disks/vol1"]);
}

#[test]
fn an_adopted_pv_whose_disk_was_absent_records_the_identity_once_it_is_seen() {
    let adopted = Pv::test().without_identity().bound().build();
    let mut world = World::new(vec![], vec![adopted]);
    world.apply(&world.plan());
    world.found.disks.push(disk("vol1"));
    let plan = world.plan();
    assert_eq!(
        summary(&plan)[..2],
        ["ledger fs-uuid:uuid-vol1 Dirty", "record uid-vol1"]
    );
}

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
    assert_eq!(order.method, crate::config::WipeMethod::RemoveContents);
    assert_eq!(order.expected.fs_uuid.as_deref(), Some("uuid-vol1"));
    let start = order.on_start.expect("start patch");
    assert_eq!(
        (start.uid.as_str(), start.resource_version.as_deref()),
        ("uid-vol1", Some("1"))
    );
    assert_eq!(start.annotations["localpv.io/wipe-phase"], "Wiping");
    let done = order.on_success.expect("success patch");
    assert_eq!(done.annotations["localpv.io/wipe-phase"], "Wiped");
    assert_eq!(
        done.annotations["localpv.io/wipe-lifetime"],
        "uid-vol1/claim-1"
    );
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
    bare.identity.dev_id = Some("0:55".into());
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
            "create /mnt/disks/vol1",
        ]
    );
    assert_eq!(
        world.ledger.get("fs-uuid:uuid-vol1"),
        Some(DiskState::Clean)
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
    assert_eq!(summary(&plan), ["wipe /mnt/disks/vol1 for no pv"]);
    assert_eq!(plan.unpublished[0].reason, HoldReason::AwaitingWipe);
    world.apply(&plan);
    assert_eq!(summary(&world.plan()), ["create /mnt/disks/vol1"]);
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
#[case::known_clean_disk(Some(DiskState::Clean), vec!["create /mnt/disks/vol1"])]
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
    assert_eq!(order.method, crate::config::WipeMethod::ZeroOut);
    assert_eq!(order.mode, VolumeMode::Block);
}
