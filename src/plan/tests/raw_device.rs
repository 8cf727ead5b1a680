//! A raw device in a Filesystem class (issue 38, point 1): published as a Filesystem PV with the class's fsType
//! for the kubelet to format, identified, checked and wiped as the device it is (`localpv.io/medium: device`).

use super::*;
use crate::config::{BlockWipe, WipeMethod};
use crate::contract::{ANN_FS_UUID, ANN_MEDIUM, ANN_NODE_UID, ANN_SERIAL, DevId, MEDIUM_DEVICE};
use crate::disk::DiskIdentity;

/// An NVMe device linked into the Filesystem class's directory, with serial `serial` and no filesystem.
fn raw(entry: &str, serial: &str) -> Disk {
    let mut d = disk(entry);
    d.mode = VolumeMode::Block;
    d.available_bytes = None;
    d.identity = DiskIdentity {
        device: Some(format!("/dev/{entry}")),
        dev_id: Some(DevId::new(259, 1)),
        serial: Some(serial.into()),
        ..DiskIdentity::default()
    };
    d
}

/// The same device after the kubelet formatted it for a tenant.
fn formatted(mut d: Disk) -> Disk {
    d.identity.fs_type = Some("ext4".into());
    d.identity.fs_uuid = Some("made-by-the-kubelet".into());
    d
}

/// The Filesystem PV the agent made for `d` (built from `pv`, whose phase is already set).
fn device_pv(pv: Pv, d: &Disk) -> PersistentVolume {
    let mut pv = pv.for_disk(d).build();
    let annotations = pv.metadata.annotations.get_or_insert_with(Default::default);
    annotations.retain(|k, _| k == super::ANN_PROVISIONED_BY);
    annotations.extend(identity::annotations_as(d, VolumeMode::Filesystem));
    annotations.insert(ANN_NODE_UID.into(), super::NODE_UID.into());
    let spec = pv.spec.as_mut().expect("spec");
    spec.volume_mode = Some("Filesystem".into());
    pv
}

fn world(disks: Vec<Disk>, pvs: Vec<PersistentVolume>) -> World {
    let mut world = World::new(disks, pvs);
    world.classes[0].config.fs_type = Some("xfs".into());
    world
}

fn wipes(plan: &Plan) -> Vec<WipeMethod> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Wipe(order) => Some(order.method.clone()),
            _ => None,
        })
        .collect()
}

fn said(plan: &Plan) -> Vec<String> {
    summary(plan)
        .into_iter()
        .filter(|s| !s.starts_with("ledger"))
        .collect()
}

#[test]
fn a_raw_device_is_published_as_a_filesystem_pv_identified_by_the_device() {
    let plan = world(vec![raw("nvme1", "S1")], vec![]).plan();
    let pv = only_created(&plan);
    let spec = pv.spec.as_ref().expect("spec");
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    let local = spec.local.as_ref().expect("local");
    assert_eq!(
        (local.path.as_str(), local.fs_type.as_deref()),
        ("/mnt/disks/nvme1", Some("xfs"))
    );
    let annotations = pv.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(
        annotations.get(ANN_MEDIUM).map(String::as_str),
        Some(MEDIUM_DEVICE)
    );
    assert_eq!(annotations.get(ANN_SERIAL).map(String::as_str), Some("S1"));
    assert_eq!(annotations.get(ANN_FS_UUID), None);
}

#[test]
fn the_filesystem_a_tenant_left_on_a_new_device_is_not_its_identity() {
    let plan = world(vec![formatted(raw("nvme1", "S1"))], vec![]).plan();
    let pv = only_created(&plan);
    let annotations = pv.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(annotations.get(ANN_FS_UUID), None);
}

#[test]
fn a_held_device_without_a_pv_is_not_published() {
    let mut d = raw("nvme1", "S1");
    d.held = true;
    let plan = world(vec![d], vec![]).plan();
    assert!(plan.writes().next().is_none(), "{:?}", summary(&plan));
    assert_eq!(plan.unpublished[0].reason, HoldReason::DeviceInUse);
}

#[test]
fn an_available_pv_whose_device_is_held_is_withdrawn_and_comes_back_once_free() {
    let mut d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test(), &d);
    d.held = true;
    let mut w = world(vec![d], vec![pv]);
    let plans = w.settle();
    assert_eq!(
        said(&plans[0]),
        ["delete uid-nvme1", "event uid-nvme1 DeviceInUse"]
    );
    assert!(w.existing.is_empty(), "withdrawn");
    Arc::make_mut(&mut w.found.disks[0]).held = false;
    w.settle();
    assert_eq!(w.existing.len(), 1, "published again once free");
}

#[test]
fn a_bound_pv_whose_device_the_kubelet_mounted_is_left_alone() {
    let d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test().bound(), &d);
    let mut now = formatted(d);
    now.held = true;
    let plan = world(vec![now], vec![pv]).plan();
    assert!(said(&plan).is_empty(), "{:?}", summary(&plan));
}

#[test]
fn a_released_pv_whose_device_is_still_held_waits_for_the_unmount() {
    let d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test().released(), &d);
    let mut now = formatted(d);
    now.held = true;
    let plan = world(vec![now], vec![pv]).plan();
    assert!(wipes(&plan).is_empty(), "{:?}", summary(&plan));
    assert!(plan.requeue_after.is_some());
}

#[test]
fn a_released_pv_is_wiped_by_the_block_method_though_the_kubelet_reformatted_it() {
    let d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test().released(), &d);
    let plan = world(vec![formatted(d)], vec![pv]).plan();
    assert_eq!(wipes(&plan), [WipeMethod::Block(BlockWipe::default())]);
}

#[test]
fn a_device_swapped_under_a_released_pv_is_never_wiped() {
    let pv = device_pv(Pv::test().released(), &raw("nvme1", "S1"));
    let plan = world(vec![formatted(raw("nvme1", "OTHER"))], vec![pv]).plan();
    assert!(wipes(&plan).is_empty(), "{:?}", summary(&plan));
    assert!(said(&plan).contains(&"event uid-nvme1 DiskIdentityChanged".to_string()));
}

#[test]
fn a_device_without_a_serial_is_published_but_never_wiped() {
    let mut d = raw("nvme1", "S1");
    d.identity.serial = None;
    let pv = device_pv(Pv::test().released(), &d);
    let plan = world(vec![formatted(d)], vec![pv]).plan();
    assert!(wipes(&plan).is_empty(), "{:?}", summary(&plan));
}

#[test]
fn a_class_switched_to_block_republishes_an_available_device_pv() {
    let d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test(), &d);
    let mut w = world(vec![d], vec![pv]);
    w.classes[0].config.volume_mode = VolumeMode::Block;
    w.classes[0].config.wipe = WipeMethod::Block(BlockWipe::default());
    assert_eq!(said(&w.plan()), ["delete uid-nvme1"]);
}

#[test]
fn a_reference_pv_over_a_raw_device_is_adopted_as_the_device_and_wiped_as_one_once_released() {
    let d = raw("nvme1", "S1");
    let mut reference = Pv::test()
        .for_disk(&d)
        .reference("local-volume-provisioner-n1")
        .name("local-pv-e3f48c6a")
        .released()
        .build();
    reference.spec.as_mut().expect("spec").volume_mode = Some("Filesystem".into());
    let mut w = world(vec![formatted(d)], vec![reference]);
    let plan = w.plan();
    let Some(Action::AdoptPv { patch, .. }) = plan
        .actions
        .iter()
        .find(|a| matches!(a, Action::AdoptPv { .. }))
    else {
        panic!("adopt: {:?}", summary(&plan))
    };
    assert_eq!(
        patch.annotations.get(ANN_MEDIUM).map(String::as_str),
        Some(MEDIUM_DEVICE)
    );
    assert_eq!(
        patch.annotations.get(ANN_SERIAL).map(String::as_str),
        Some("S1")
    );
    assert_eq!(
        patch.annotations.get(ANN_FS_UUID),
        None,
        "the tenant's filesystem is not its identity"
    );
    let wiped: Vec<WipeMethod> = w.settle().iter().flat_map(wipes).collect();
    assert_eq!(wiped, [WipeMethod::Block(BlockWipe::default())]);
}

/// A device gone under its Bound PV (issue 37): gone, it shows no serial to confirm itself with (a detached loop
/// device has no backing file, a pulled drive no serial), yet the PV and its claim are told; back with its serial
/// within the grace, they are told it is healthy again, and nothing else is planned for the PV.
#[test]
fn a_bound_pv_whose_device_is_gone_and_back_is_told_both() {
    let d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test().bound(), &d);
    let mut gone = d.clone();
    gone.identity.serial = None;
    gone.capacity_bytes = 0;
    let mut w = world(vec![gone], vec![pv]);
    w.found.unhealthy.push(device_gone(&d));
    let plans = w.settle();
    assert_eq!(said(&plans[0]), ["event uid-nvme1 DiskDegraded"]);
    w.found.disks = vec![Arc::new(d)];
    w.found.unhealthy.clear();
    let plans = w.settle();
    assert_eq!(said(&plans[0]), ["event uid-nvme1 DiskHealthy"]);
    assert_eq!(w.existing.len(), 1, "the PV stays");
}

/// What the health judgement says of `d` while its device is gone (within the grace).
fn device_gone(d: &Disk) -> crate::disk::DiskHealth {
    crate::disk::DiskHealth {
        host_path: d.host_path.clone(),
        state: crate::health::State::Degraded,
        cause: crate::health::Cause::DeviceGone,
        message: "the device is gone".into(),
    }
}

/// An unclaimed PV on a device that is gone is withdrawn though the device cannot confirm its identity any more.
#[test]
fn an_available_pv_whose_device_is_gone_is_withdrawn() {
    let d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test(), &d);
    let mut gone = d.clone();
    gone.identity.serial = None;
    let mut w = world(vec![gone], vec![pv]);
    w.found.unhealthy.push(device_gone(&d));
    let plan = w.plan();
    assert_eq!(
        said(&plan),
        ["delete uid-nvme1", "event uid-nvme1 DiskDegraded"]
    );
}

/// The weak match health uses never speaks for another device: a failing device whose serial contradicts the one
/// a Bound PV recorded (a drive swapped into the slot) tells that PV nothing about its health, withdraws nothing
/// and wipes nothing; the tenant's disk is elsewhere.
#[test]
fn a_failing_device_swapped_under_a_bound_pv_tells_that_pv_nothing_about_health() {
    let d = raw("nvme1", "S1");
    let pv = device_pv(Pv::test().bound(), &d);
    let other = raw("nvme1", "S2");
    let mut w = world(vec![other.clone()], vec![pv]);
    let mut failing = device_gone(&other);
    failing.state = crate::health::State::Failed;
    failing.cause = crate::health::Cause::ProbeIoError;
    w.found.unhealthy.push(failing);
    let plan = w.plan();
    let said = said(&plan);
    assert!(
        !said.iter().any(|s| s.contains("DiskDegraded")
            || s.contains("DiskFailed")
            || s.starts_with("delete")),
        "{said:?}"
    );
    assert!(wipes(&plan).is_empty(), "{said:?}");
}
