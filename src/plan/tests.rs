use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume};
use rstest::rstest;

use super::fixtures::*;
use super::pv::ANN_PROVISIONED_BY;
use super::*;
use crate::config::PvNaming;
use crate::contract::{
    ANN_DEVICE, ANN_FS_TYPE, ANN_FS_UUID, ANN_VOLUME_ID, ANN_WIPE_LIFETIME, ANN_WIPE_PHASE,
    NODE_LABEL,
};
use crate::disk::{ClassFailure, Disk, Unusable, UnusableReason, VolumeMode};
use crate::pvname;
use std::path::PathBuf;

/// One line per action: `create <path>`, `delete <uid>`, `wipe <path> for <uid>`, `event <uid> <Reason>`, ...
fn summary(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .map(|action| match action {
            Action::CreatePv(pv) => format!("create {}", local_path(pv)),
            Action::DeletePv(pv) => format!("delete {}", pv.uid),
            Action::DeleteUnclaimedPv { pv, .. } => format!("delete {}", pv.uid),
            Action::RecordOwner { uid, .. } => format!("own {uid}"),
            Action::ForgetOwner { uid } => format!("forget {uid}"),
            Action::OwnersRecorded => "owners recorded".into(),
            Action::AdoptPv { patch, .. } => format!("adopt {}", patch.uid),
            Action::RecordIdentity { patch, .. } => format!("record {}", patch.uid),
            Action::SetDiskState { key, state } => format!("ledger {key} {state:?}"),
            Action::Wipe(order) => {
                let uid = order.pv.as_ref().map_or("no pv", |pv| pv.uid.as_str());
                format!("wipe {} for {uid}", order.host_path.display())
            }
            Action::TagVolume { host_path, .. } => format!("tag {}", host_path.display()),
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
    assert_eq!(
        summary(&plan),
        [
            "ledger fs-uuid:uuid-vol1 Published",
            "create /mnt/disks/vol1"
        ]
    );
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
    assert_eq!(annotations[ANN_FS_UUID], "uuid-vol1");
    assert_eq!(annotations[ANN_FS_TYPE], "ext4");
    assert_eq!(annotations[ANN_DEVICE], "/dev/mapper/vol1");
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

/// The shell lists the StorageClasses again before a plan that reads their policy (they are polled): one that
/// creates a PV does, one that only re-plans a settled node does not.
#[test]
fn a_plan_that_creates_reads_the_class_policy_and_a_settled_one_does_not() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    assert!(world.plan().reads_class_policy(), "a new PV");
    world.settle();
    let settled = world.plan();
    assert!(
        !settled.reads_class_policy(),
        "nothing to create or wipe: {:?}",
        summary(&settled)
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

mod identity_rules;
mod lifecycle;
mod overlap;
mod ownership;
mod raw_device;
mod reclaim;
mod relation;
mod unhealthy;
