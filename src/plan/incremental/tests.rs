//! The incremental planner against the general one: the same plan at every pass of random worlds, and work that
//! follows the change, not the number of disks.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::config::PvNaming;
use crate::contract::DevId;
use crate::disk::{DiskIdentity, UnusableReason, VolumeMode};
use crate::plan::fixtures::{self, Pv, Rng, World, at_entry, disk, with_uuid};
use crate::plan::{Action, DiskState};

fn bump(pv: &mut PersistentVolume) {
    let rv: u64 = pv
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    pv.metadata.resource_version = Some((rv + 1).to_string());
}

fn set_phase(pv: &mut PersistentVolume, phase: &str, claim: Option<&str>) {
    pv.status = Some(PersistentVolumeStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    if let Some(claim) = claim {
        let spec = pv.spec.get_or_insert_with(Default::default);
        spec.claim_ref = Some(ObjectReference {
            uid: Some(claim.into()),
            ..Default::default()
        });
    }
    bump(pv);
}

fn phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// A raw device without hardware ids: only its device path tells it from another (`/dev/loop0` to `3`).
fn raw(entry: &str, device: usize) -> Disk {
    let mut d = disk(entry);
    d.mode = VolumeMode::Block;
    d.identity = DiskIdentity {
        device: Some(format!("/dev/loop{device}")),
        dev_id: Some(DevId::new(7, device as u32)),
        ..DiskIdentity::default()
    };
    d
}

fn is_block(world: &World) -> bool {
    world.classes[0].config.volume_mode == VolumeMode::Block
}

/// A new disk: with a UUID of its own, one another disk has (a clone), none (tagged by the agent), or the
/// identity of a disk that leaves (a move). Raw devices in a Block world.
fn new_disk(rng: &mut Rng, world: &mut World, n: &mut u32) -> Disk {
    *n += 1;
    let entry = format!("d{n}");
    if is_block(world) {
        return raw(&entry, rng.below(4));
    }
    let fresh = disk(&entry);
    match rng.below(5) {
        0 if !world.found.disks.is_empty() => {
            let i = rng.below(world.found.disks.len());
            let uuid = world.found.disks[i].identity.fs_uuid.clone();
            with_uuid(fresh, uuid.as_deref().unwrap_or("shared"))
        }
        1 => {
            let mut d = fresh;
            d.identity.fs_uuid = None;
            d.identity.device = None;
            d.identity.dev_id = Some(DevId::new(0, *n));
            d
        }
        2 if !world.found.disks.is_empty() => {
            let i = rng.below(world.found.disks.len());
            let moved = world.found.disks.remove(i);
            at_entry(Disk::clone(&moved), &entry)
        }
        _ => fresh,
    }
}

/// One random change of the world between two passes.
fn change(rng: &mut Rng, world: &mut World, n: &mut u32) {
    let pvs = world.existing.len();
    let disks = world.found.disks.len();
    match rng.below(17) {
        0..=2 => {
            let d = new_disk(rng, world, n);
            world.found.disks.push(d.into());
        }
        3 if disks > 0 => {
            world.found.disks.remove(rng.below(disks));
        }
        4 if disks > 0 => {
            let i = rng.below(disks);
            *n += 1;
            let block = is_block(world);
            let id = &mut Arc::make_mut(&mut world.found.disks[i]).identity;
            match block {
                true => id.device = Some(format!("/dev/loop{}", rng.below(4))),
                false => id.fs_uuid = Some(format!("changed-{n}")),
            }
        }
        5 if pvs > 0 => {
            let pv = &mut world.existing[rng.below(pvs)];
            if phase(pv) == "Available" {
                set_phase(pv, "Bound", Some(&format!("claim-{n}")));
            }
        }
        6 if pvs > 0 => {
            let pv = &mut world.existing[rng.below(pvs)];
            if phase(pv) == "Bound" {
                set_phase(pv, "Released", None);
            }
        }
        7 if pvs > 0 => {
            world.existing.remove(rng.below(pvs));
        }
        8 => world.now += Duration::from_secs(rng.below(1200) as u64),
        9 if disks > 0 => {
            let d = world.found.disks.remove(rng.below(disks));
            let failed = fixtures::unusable(
                Disk::clone(&d),
                UnusableReason::ProbeFailed,
                "failed to inspect",
            );
            world.found.unusable.push(failed);
        }
        10 if !world.found.unusable.is_empty() => {
            let u = world
                .found
                .unusable
                .remove(rng.below(world.found.unusable.len()));
            let back = match is_block(world) {
                true => raw(&u.entry, rng.below(4)),
                false => disk(&u.entry),
            };
            world.found.disks.push(back.into());
        }
        11 if rng.chance(30) => world.listed = !world.listed,
        11 if rng.chance(30) => world.list_shares_objects = !world.list_shares_objects,
        12 if rng.chance(30) && disks > 0 => {
            let at = &world.found.disks[rng.below(disks)];
            let foreign = Pv::test()
                .for_disk(at)
                .unlabelled()
                .uid("foreign")
                .name("foreign");
            world.others = vec![foreign.build()];
        }
        13 if !world.others.is_empty() => world.others.clear(),
        14 if rng.chance(20) => {
            world.config.pv_naming = match world.config.pv_naming {
                PvNaming::Localpv => PvNaming::Reference,
                PvNaming::Reference => PvNaming::Localpv,
            };
        }
        16 if pvs > 0 => {
            // A PV renamed to the name the next new disk's PV would get: that disk's name is taken.
            // NB: names are unique in a cluster; the planners may pick different ones of two equal names.
            let next = format!("d{}", *n + 1);
            let name = crate::pvname::localpv_name(fixtures::NODE, fixtures::CLASS, &next);
            let taken = world
                .existing
                .iter()
                .any(|pv| pv.metadata.name.as_ref() == Some(&name));
            if !taken {
                let pv = &mut world.existing[rng.below(pvs)];
                pv.metadata.name = Some(name);
                bump(pv);
            }
        }
        15 if !world.ledger.disks.is_empty() => {
            let keys: Vec<String> = world.ledger.disks.keys().cloned().collect();
            let key = &keys[rng.below(keys.len())];
            world.set_state(key, DiskState::Clean);
        }
        _ => {}
    }
    // A disk turns unhealthy, worse, or well again (issue 37): its PV and its placement are planned again.
    if rng.chance(8) && !world.found.disks.is_empty() {
        let at = world.found.disks[rng.below(world.found.disks.len())]
            .host_path
            .clone();
        let had = world.found.unhealthy.iter().position(|h| h.host_path == at);
        match (had, rng.below(3)) {
            (Some(i), 0) => {
                world.found.unhealthy.remove(i);
            }
            (_, n) => {
                world.found.unhealthy.retain(|h| h.host_path != at);
                world.found.unhealthy.push(crate::disk::DiskHealth {
                    host_path: at,
                    state: match n {
                        1 => crate::health::State::Failed,
                        _ => crate::health::State::Degraded,
                    },
                    cause: crate::health::Cause::ProbeIoError,
                    message: "the read probe failed".into(),
                });
            }
        }
    }
    let pvs = world.existing.len();
    if rng.chance(5) && pvs > 0 {
        let pv = &mut world.existing[rng.below(pvs)];
        pv.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        bump(pv);
    }
}

fn world(rng: &mut Rng, n: &mut u32) -> World {
    let count = 3 + rng.below(12);
    let block = rng.chance(30);
    let mut disks = Vec::new();
    let mut pvs = Vec::new();
    for _ in 0..count {
        *n += 1;
        let d = match block {
            true => raw(&format!("d{n}"), rng.below(4)),
            false => disk(&format!("d{n}")),
        };
        if rng.chance(60) {
            let pv = match rng.below(3) {
                0 => Pv::test().for_disk(&d).uid(&format!("uid-d{n}")).bound(),
                1 => Pv::test().for_disk(&d).uid(&format!("uid-d{n}")).released(),
                _ => Pv::test().for_disk(&d).uid(&format!("uid-d{n}")),
            };
            pvs.push(pv.build());
        }
        disks.push(d);
    }
    let mut world = World::new(disks, pvs);
    if block {
        let config = fixtures::class_config(fixtures::CLASS, fixtures::DIR, VolumeMode::Block);
        world.classes = vec![fixtures::class_facts(config)];
    }
    world
}

#[test]
fn the_incremental_planner_plans_what_the_general_one_plans_at_every_pass() {
    let mut parts = 0;
    for seed in 1..=300u64 {
        let mut rng = Rng::seeded(seed);
        let mut n = 0;
        let mut world = world(&mut rng, &mut n);
        let mut incremental = IncrementalPlanner::default();
        for step in 0..40 {
            if step > 0 {
                change(&mut rng, &mut world, &mut n);
            }
            let whole = world.plan();
            // Half the worlds name the ledger and owner changes as the agent does; the others make the planner
            // compare its copies whole.
            let part = match seed % 2 {
                0 => world.with_changes(|inputs| incremental.plan(inputs)),
                _ => world.with_inputs(|inputs| incremental.plan(inputs)),
            };
            assert_eq!(part, whole, "seed {seed}, step {step}");
            parts += usize::from(!incremental.work().whole);
            world.apply(&whole);
        }
    }
    // NB: a comparison only means something if the incremental path ran.
    assert!(parts > 3000, "only {parts} passes planned a part");
}

#[test]
fn one_new_disk_is_planned_alone_whatever_the_disks_already_published() {
    let mut works = Vec::new();
    for count in [10, 2000] {
        let disks: Vec<Disk> = (0..count).map(|i| disk(&format!("d{i:05}"))).collect();
        let pvs = disks
            .iter()
            .map(|d| Pv::test().for_disk(d).build())
            .collect();
        let mut world = World::new(disks, pvs);
        let mut incremental = IncrementalPlanner::default();
        world.with_inputs(|inputs| incremental.plan(inputs));
        assert!(incremental.work().whole, "the first pass plans whole");
        world.found.disks.push(disk("new").into());
        let plan = world.with_inputs(|inputs| incremental.plan(inputs));
        assert_eq!(plan, world.plan());
        assert!(
            plan.actions
                .iter()
                .any(|a| matches!(a, Action::CreatePv(_)))
        );
        let created = incremental.work();
        world.apply(&plan);
        world.with_inputs(|inputs| incremental.plan(inputs));
        works.push((created, incremental.work()));
    }
    assert_eq!(works[0], works[1], "work at 10 and 2,000 disks");
    let (created, settled) = works[0];
    assert_eq!((created.pvs, created.disks, created.whole), (0, 1, false));
    assert_eq!((settled.pvs, settled.disks, settled.whole), (1, 1, false));
}

#[test]
fn a_world_with_a_pv_of_another_owner_is_planned_whole() {
    let d = disk("vol1");
    let mut world = World::new(vec![d.clone()], vec![]);
    world.others = vec![
        fixtures::Pv::test()
            .for_disk(&d)
            .unlabelled()
            .uid("x")
            .build(),
    ];
    let mut incremental = IncrementalPlanner::default();
    for _ in 0..2 {
        let plan = world.with_inputs(|inputs| incremental.plan(inputs));
        assert_eq!(plan, world.plan());
        assert!(incremental.work().whole);
        world.apply(&plan);
    }
}

/// A world of `n` disks, each with its PV, and a planner that has not planned it yet.
fn published(n: usize) -> (World, IncrementalPlanner) {
    let disks: Vec<Disk> = (0..n).map(|i| disk(&format!("d{i}"))).collect();
    let pvs = disks
        .iter()
        .map(|d| Pv::test().for_disk(d).build())
        .collect();
    (World::new(disks, pvs), IncrementalPlanner::default())
}

/// Unchanged disks are recognised by address; the same disk handed over twice, or a new disk at a path a handed-over
/// one holds, is two disks at one path, which the general planner decides (it keeps one): planned whole, same plan.
#[test]
fn one_disk_twice_or_two_disks_at_one_path_are_planned_whole() {
    let (mut world, mut incremental) = published(3);
    world.with_inputs(|inputs| incremental.plan(inputs));
    let twice = world.found.disks[1].clone();
    world.found.disks.push(twice);
    let plan = world.with_inputs(|inputs| incremental.plan(inputs));
    assert_eq!(plan, world.plan());
    assert!(incremental.work().whole, "the same disk twice plans whole");
    world.found.disks.pop();
    world.with_inputs(|inputs| incremental.plan(inputs));
    let mut other = (*world.found.disks[2]).clone();
    other.identity.fs_uuid = Some("another-filesystem".into());
    world.found.disks.push(Arc::new(other));
    let plan = world.with_inputs(|inputs| incremental.plan(inputs));
    assert_eq!(plan, world.plan());
    assert!(incremental.work().whole, "two disks at one path plan whole");
}

/// A copy of an unchanged disk (a new allocation with the same value) is kept like the disk itself: only its path
/// is looked up, and nothing is planned again.
#[test]
fn a_copy_of_an_unchanged_disk_plans_nothing_again() {
    let (mut world, mut incremental) = published(3);
    let first = world.with_inputs(|inputs| incremental.plan(inputs));
    world.apply(&first);
    world.with_inputs(|inputs| incremental.plan(inputs));
    world.found.disks = world
        .found
        .disks
        .iter()
        .map(|d| Arc::new((**d).clone()))
        .collect();
    let plan = world.with_inputs(|inputs| incremental.plan(inputs));
    assert_eq!(plan, world.plan());
    let work = incremental.work();
    assert_eq!((work.pvs, work.disks, work.whole), (0, 0, false));
}

/// Changes counted from a call the planner did not make are not trusted: it compares ledger and owners whole, and
/// so still sees a change nobody named.
#[test]
fn changes_counted_from_another_call_are_not_trusted() {
    let (mut world, mut incremental) = published(3);
    for _ in 0..3 {
        let plan = world.with_changes(|inputs| incremental.plan(inputs));
        world.apply(&plan);
    }
    let key = world
        .ledger
        .disks
        .keys()
        .next()
        .cloned()
        .expect("a ledger key");
    // Not named: as if another shell had changed it.
    world.ledger.set(&key, DiskState::Dirty);
    world.changes.since += 100;
    let plan = world.with_changes(|inputs| incremental.plan(inputs));
    assert_eq!(plan, world.plan());
    assert!(
        incremental.work().disks + incremental.work().pvs > 0,
        "the changed key was planned again"
    );
}
