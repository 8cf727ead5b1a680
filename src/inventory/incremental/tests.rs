//! The incremental inventory against the general build: the same names to look up and the same changes at every
//! pass of random worlds, and work that follows the change, not the number of disks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolume;

use super::*;
use crate::disk::{DiskIdentity, UnusableReason, VolumeMode};
use crate::inventory::inputs::WipeSample;
use crate::inventory::{Change, build};
use crate::plan::fixtures::{Rng, unusable};
use crate::plan::{DiskState, HoldReason};

const NODE: &str = "n1";

fn disk(entry: &str, uuid: Option<&str>) -> Disk {
    Disk {
        class: "local-storage".into(),
        entry: entry.into(),
        host_path: PathBuf::from(format!("/mnt/disks/{entry}")),
        mode: VolumeMode::Filesystem,
        capacity_bytes: 10 << 30,
        available_bytes: Some(8 << 30),
        mount_root: None,
        held: false,
        identity: DiskIdentity {
            fs_uuid: uuid.map(str::to_string),
            fs_type: Some("ext4".into()),
            ..DiskIdentity::default()
        },
    }
}

fn pv(d: &Disk, uid: &str, phase: &str, rv: u32) -> PersistentVolume {
    localpv_test_support::objects::Pv::local(&format!("pv-{uid}"), NODE)
        .uid(uid)
        .resource_version(&rv.to_string())
        .label(crate::contract::NODE_LABEL, NODE)
        .path(&d.host_path.display().to_string())
        .class(&d.class)
        .phase(phase)
        .build()
}

/// The inputs of an inventory pass, and the objects as the API server holds them.
struct World {
    found: Discovery,
    unpublished: Vec<Unpublished>,
    pvs: Vec<Arc<PersistentVolume>>,
    ledger: DiskLedger,
    wipes: BTreeMap<PathBuf, WipeSample>,
    failures: BTreeMap<PathBuf, WipeFailures>,
    /// This node's and other nodes' objects, by name.
    objects: BTreeMap<String, Arc<LocalDisk>>,
    settings: Settings,
    now: SystemTime,
}

impl World {
    fn empty() -> World {
        World {
            found: Discovery::default(),
            unpublished: Vec::new(),
            pvs: Vec::new(),
            ledger: DiskLedger::default(),
            wipes: BTreeMap::new(),
            failures: BTreeMap::new(),
            objects: BTreeMap::new(),
            settings: Settings::default(),
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        }
    }

    fn existing(&self) -> Vec<Arc<LocalDisk>> {
        self.objects.values().cloned().collect()
    }

    /// Other nodes' objects under the names asked for, as the agent fetches them.
    fn others(&self, names: &[String]) -> Vec<LocalDisk> {
        names
            .iter()
            .filter_map(|n| self.objects.get(n))
            .filter(|d| d.spec.node != NODE)
            .map(|d| (**d).clone())
            .collect()
    }

    fn inputs<'a>(&'a self, existing: &'a [Arc<LocalDisk>], others: &'a [LocalDisk]) -> Inputs<'a> {
        Inputs {
            node: NODE,
            found: &self.found,
            unpublished: &self.unpublished,
            pvs: &self.pvs,
            ledger: &self.ledger,
            wipes: &self.wipes,
            wipe_failures: &self.failures,
            existing,
            others,
            settings: &self.settings,
            now: self.now,
        }
    }

    /// Applies the changes, each with a chance to fail (the next pass must try it again).
    fn apply(&mut self, changes: &Changes, mut rng: Option<&mut Rng>) {
        for change in &changes.changes {
            if rng.as_mut().is_some_and(|rng| rng.chance(10)) {
                continue;
            }
            match change {
                Change::Create(d) | Change::Apply(d) | Change::MarkMissing(d) => {
                    let name = d.metadata.name.clone().unwrap_or_default();
                    self.objects.insert(name, Arc::new((**d).clone()));
                }
                Change::Delete(name) => {
                    self.objects.remove(name);
                }
            }
        }
    }
}

fn change(rng: &mut Rng, w: &mut World, n: &mut u32) {
    let disks = w.found.disks.len();
    *n += 1;
    match rng.below(14) {
        0..=2 => {
            let uuid = match rng.below(4) {
                0 => None,
                1 if disks > 0 => w.found.disks[rng.below(disks)].identity.fs_uuid.clone(),
                _ => Some(format!("uuid-{n}")),
            };
            w.found
                .disks
                .push(disk(&format!("d{n}"), uuid.as_deref()).into());
        }
        3 if disks > 0 => {
            w.found.disks.remove(rng.below(disks));
        }
        4 if disks > 0 => {
            let d = Arc::make_mut(&mut w.found.disks[rng.below(disks)]);
            d.available_bytes = Some((rng.below(10) as u64) << 30);
        }
        5 if disks > 0 => {
            let d = w.found.disks[rng.below(disks)].clone();
            let phase = ["Available", "Bound", "Released"][rng.below(3)];
            let uid = format!("uid-{}", d.entry);
            w.pvs.retain(|p| p.metadata.uid.as_deref() != Some(&uid));
            w.pvs.push(Arc::new(pv(&d, &uid, phase, *n)));
        }
        6 if !w.pvs.is_empty() => {
            w.pvs.remove(rng.below(w.pvs.len()));
        }
        7 if disks > 0 => {
            let d = &w.found.disks[rng.below(disks)];
            w.unpublished = vec![Unpublished {
                class: d.class.clone(),
                entry: d.entry.clone(),
                host_path: d.host_path.clone(),
                reason: HoldReason::AwaitingWipe,
                message: "wiped first".into(),
            }];
        }
        8 => w.unpublished.clear(),
        9 if disks > 0 => {
            let d = &w.found.disks[rng.below(disks)];
            let sample = WipeSample {
                started: w.now,
                bytes_done: rng.below(100) as u64,
                entries_done: 1,
                bytes_total: None,
            };
            w.wipes = BTreeMap::from([(d.host_path.clone(), sample)]);
        }
        10 => {
            w.wipes.clear();
            if disks > 0 && rng.chance(50) {
                let d = &w.found.disks[rng.below(disks)];
                let failed = WipeFailures {
                    consecutive: 1 + rng.below(4) as u32,
                    last_error: "EIO".into(),
                };
                w.failures = BTreeMap::from([(d.host_path.clone(), failed)]);
            } else {
                w.failures.clear();
            }
        }
        11 if disks > 0 => {
            let d = &w.found.disks[rng.below(disks)];
            let key = crate::plan::identity::disk_key(d);
            w.ledger.set(
                &key,
                [DiskState::Dirty, DiskState::Retained, DiskState::Clean][rng.below(3)],
            );
        }
        12 if disks > 0 => {
            let d = w.found.disks.remove(rng.below(disks));
            let stray = unusable(
                Disk::clone(&d),
                UnusableReason::NotAMountPoint,
                "not a mount point",
            );
            w.found.unusable.push(stray);
        }
        13 => {
            // Another node takes a name this node wants, or lets it go.
            if let Some(d) = w.found.disks.iter().find(|d| d.identity.fs_uuid.is_some()) {
                let name = naming::name(NODE, &DiskKey::of_disk(d));
                match w.objects.get(&name).is_some_and(|o| o.spec.node == NODE) {
                    true => {}
                    false if w.objects.remove(&name).is_none() => {
                        let mut other = LocalDisk::new(&name, status_spec(d));
                        other.spec.node = "n2".into();
                        w.objects.insert(name, Arc::new(other));
                    }
                    false => {}
                }
            }
        }
        _ => {}
    }
    // A disk turns unhealthy, worse, or well again (issue 37): its LocalDisk is built again.
    let disks = w.found.disks.len();
    if rng.chance(10) && disks > 0 {
        let at = w.found.disks[rng.below(disks)].host_path.clone();
        let had = w.found.unhealthy.iter().position(|h| h.host_path == at);
        w.found.unhealthy.retain(|h| h.host_path != at);
        if had.is_none() || rng.chance(50) {
            w.found.unhealthy.push(crate::disk::DiskHealth {
                host_path: at,
                state: match rng.chance(50) {
                    true => crate::health::State::Failed,
                    false => crate::health::State::Degraded,
                },
                cause: crate::health::Cause::ProbeIoError,
                message: "the read probe failed".into(),
            });
        }
    }
    w.now += Duration::from_secs(rng.below(4 * 3600) as u64);
}

fn status_spec(d: &Disk) -> crate::inventory::LocalDiskSpec {
    crate::inventory::status::spec_of_disk(NODE, d)
}

#[test]
fn the_incremental_inventory_builds_what_the_general_one_builds_at_every_pass() {
    let mut parts = 0;
    for seed in 1..=300u64 {
        let mut rng = Rng::seeded(seed);
        let mut n = 0;
        let mut w = World::empty();
        w.settings.missing_grace = Duration::from_secs(6 * 3600);
        for _ in 0..(2 + rng.below(10)) {
            n += 1;
            w.found
                .disks
                .push(disk(&format!("d{n}"), Some(&format!("uuid-{n}"))).into());
        }
        let mut incremental = IncrementalInventory::default();
        for step in 0..40 {
            if step > 0 {
                change(&mut rng, &mut w, &mut n);
            }
            let existing = w.existing();
            let names = names_to_look_up(NODE, &w.found, &existing);
            let asked = incremental.names_to_look_up(NODE, &w.found, &existing);
            assert_eq!(asked, names, "names, seed {seed}, step {step}");
            let others = w.others(&names);
            let whole = build(&w.inputs(&existing, &others));
            let part = incremental.build(&w.inputs(&existing, &others));
            assert_eq!(part, whole, "seed {seed}, step {step}");
            parts += usize::from(!incremental.work().whole);
            w.apply(&whole, Some(&mut rng));
        }
    }
    assert!(parts > 3000, "only {parts} passes built a part");
}

#[test]
fn one_new_disk_is_built_alone_whatever_the_disks_already_known() {
    let mut works = Vec::new();
    for count in [10, 2000] {
        let mut w = World::empty();
        for i in 0..count {
            w.found
                .disks
                .push(disk(&format!("d{i:05}"), Some(&format!("uuid-{i}"))).into());
        }
        let mut incremental = IncrementalInventory::default();
        let existing = w.existing();
        let changes = incremental.build(&w.inputs(&existing, &[]));
        w.apply(&changes, None);
        let existing = w.existing();
        incremental.build(&w.inputs(&existing, &[]));
        w.found.disks.push(disk("new", Some("uuid-new")).into());
        let existing = w.existing();
        assert_eq!(
            incremental.names_to_look_up(NODE, &w.found, &existing),
            ["fs-uuid-new"]
        );
        let changes = incremental.build(&w.inputs(&existing, &[]));
        assert_eq!(changes.changes.len(), 1, "{changes:?}");
        works.push(incremental.work());
    }
    assert_eq!(works[0], works[1]);
    assert_eq!(
        works[0],
        Work {
            entries: 1,
            whole: false
        }
    );
}
