//! The node agent's pure inventory decision: from one pass's findings and the LocalDisks that exist, the writes
//! that make the inventory true, and nothing when it already is.
//!
//! ```text
//!  Discovery (disks, unusable, failed classes) ─┐
//!  Plan.unpublished, this node's PVs, ledger    ─┤
//!  running wipes, consecutive wipe failures     ─┼─> build() ─> Changes { Create | Apply | MarkMissing | Delete,
//!  this node's LocalDisks, others' (by name)    ─┤                        requeue_after }
//!  Settings (grace, failing threshold), now     ─┘
//! ```
//!
//! Executing the changes (agent): `Create` is a create (an `AlreadyExists` means another node took a `fs-<uuid>`
//! name meanwhile: fetch it and pass it in `others` next pass); `Apply` and `MarkMissing` are server-side applies
//! of the whole object with the agent's field manager; `Delete` treats `NotFound` as success. Before building,
//! the agent fetches the objects named by [`names_to_look_up`] (skipping `NotFound`) and passes them as `others`.
//!
//! A steady state writes nothing: timestamps (`lastSeen`, condition transition times), the wipe rate, small
//! changes of the free space and wipe progress within the same 5% step are ignored when comparing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::crd::{DuplicateUuid, LocalDisk, LocalDiskPhase};
use super::inputs::{Inputs, time};
use super::naming::{self, DiskKey};
use super::relation::{self, EntryLink};
use super::status;
use crate::disk::{Discovery, Disk, Unusable};
use crate::fasthash::FastMap;
use crate::plan::pv::PvView;
use crate::plan::{NodeFacts, Unpublished};

#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A new object. `AlreadyExists`: the name was taken meanwhile; build again with it known.
    Create(Box<LocalDisk>),
    /// Server-side apply of an object whose spec, labels or status changed.
    Apply(Box<LocalDisk>),
    /// Server-side apply turning a vanished disk's object `Missing`.
    MarkMissing(Box<LocalDisk>),
    /// Delete by name; `NotFound` is success.
    Delete(String),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    pub changes: Vec<Change>,
    /// Build again after this long even without an event: a `Missing` object's grace period runs out.
    pub requeue_after: Option<Duration>,
}

/// The `fs-<uuid>` names this node wants but does not hold: the agent fetches these (other nodes' objects are not
/// in its label-scoped watch) and passes the ones that exist as `Inputs::others`.
pub fn names_to_look_up(node: &str, found: &Discovery, existing: &[Arc<LocalDisk>]) -> Vec<String> {
    let held: BTreeMap<DiskKey, &str> = existing
        .iter()
        .filter(|d| d.spec.node == node)
        .filter_map(|d| Some((DiskKey::of_spec(&d.spec), d.metadata.name.as_deref()?)))
        .collect();
    let names: BTreeSet<String> = found
        .disks
        .iter()
        .map(|d| DiskKey::of_disk(d))
        .filter(|key| matches!(key, DiskKey::Filesystem { .. }))
        .map(|key| (naming::name(node, &key), key))
        .filter(|(plain, key)| held.get(key) != Some(&plain.as_str()))
        .map(|(plain, _)| plain)
        .collect();
    names.into_iter().collect()
}

/// Decides one pass. Pure: same inputs, same changes.
pub fn build(inputs: &Inputs<'_>) -> Changes {
    Builder::new(inputs).run(Scope::Whole).0
}

/// How much of the inventory a run builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scope {
    /// Every found entry, then every object of this node that no entry uses.
    Whole,
    /// Only the found entries given (`incremental`): objects no entry uses are decided by the caller.
    Part,
}

/// What a run decided per found entry: the object name it uses, and the entries that wrote.
#[derive(Default)]
pub(super) struct Trace {
    pub(super) names: Vec<(PathBuf, String)>,
    pub(super) noisy: BTreeSet<PathBuf>,
}

/// One found entry: a usable disk or a rejected one.
#[derive(Clone, Copy)]
enum Found<'a> {
    Disk(&'a Disk),
    Unusable(&'a Unusable),
}

impl Found<'_> {
    fn key(&self) -> DiskKey {
        match self {
            Found::Disk(disk) => DiskKey::of_disk(disk),
            Found::Unusable(u) => DiskKey::Path(u.host_path.clone()),
        }
    }

    fn host_path(&self) -> &Path {
        match self {
            Found::Disk(disk) => &disk.host_path,
            Found::Unusable(u) => &u.host_path,
        }
    }
}

pub(super) struct Builder<'a> {
    inputs: &'a Inputs<'a>,
    pvs: BTreeMap<PathBuf, (PvView, &'a PersistentVolume)>,
    /// The first hold reason of each path.
    held: FastMap<&'a Path, &'a Unpublished>,
    mine: Vec<&'a LocalDisk>,
    /// `mine` by name (the first of a name) and by disk key (in `mine` order).
    mine_by_name: FastMap<&'a str, &'a LocalDisk>,
    mine_by_key: FastMap<DiskKey, Vec<&'a LocalDisk>>,
    used: BTreeSet<String>,
    changes: Vec<Change>,
    now: Time,
    /// The links of the entry being built: a read of an object or a name checks them (debug builds, see
    /// `relation`).
    #[cfg(debug_assertions)]
    deciding: Option<Vec<EntryLink>>,
}

impl<'a> Builder<'a> {
    pub(super) fn new(inputs: &'a Inputs<'a>) -> Self {
        let node = NodeFacts {
            name: inputs.node.to_string(),
            ..NodeFacts::default()
        };
        let mut pvs: BTreeMap<PathBuf, (PvView, &PersistentVolume)> = BTreeMap::new();
        for pv in inputs.pvs {
            let Some(view) = PvView::read(pv, &node) else {
                continue;
            };
            // NB: a PV being deleted yields to a live one at the same path (its replacement).
            let replace = pvs.get(&view.path).is_none_or(|(old, _)| old.deleting);
            if replace {
                pvs.insert(view.path.clone(), (view, pv));
            }
        }
        let mut held =
            FastMap::with_capacity_and_hasher(inputs.unpublished.len(), Default::default());
        for u in inputs.unpublished {
            held.entry(u.host_path.as_path()).or_insert(u);
        }
        let mine: Vec<&LocalDisk> = inputs
            .existing
            .iter()
            .map(|d| &**d)
            .filter(|d| d.spec.node == inputs.node && d.metadata.name.is_some())
            .collect();
        let mut mine_by_name = FastMap::with_capacity_and_hasher(mine.len(), Default::default());
        let mut mine_by_key: FastMap<DiskKey, Vec<&LocalDisk>> =
            FastMap::with_capacity_and_hasher(mine.len(), Default::default());
        for d in &mine {
            if let Some(name) = d.metadata.name.as_deref() {
                mine_by_name.entry(name).or_insert(*d);
            }
            mine_by_key
                .entry(DiskKey::of_spec(&d.spec))
                .or_default()
                .push(d);
        }
        Builder {
            inputs,
            pvs,
            held,
            mine,
            mine_by_name,
            mine_by_key,
            used: BTreeSet::new(),
            changes: Vec::new(),
            now: time(inputs.now),
            #[cfg(debug_assertions)]
            deciding: None,
        }
    }

    pub(super) fn run(mut self, scope: Scope) -> (Changes, Trace) {
        let found: Vec<Found<'a>> = self
            .inputs
            .found
            .disks
            .iter()
            .map(|d| Found::Disk(d))
            .chain(self.inputs.found.unusable.iter().map(Found::Unusable))
            .collect();
        let mut trace = Trace::default();
        for item in &found {
            let before = self.changes.len();
            self.deciding(*item);
            let name = self.one(*item);
            if self.changes.len() != before {
                trace.noisy.insert(item.host_path().to_path_buf());
            }
            trace.names.push((item.host_path().to_path_buf(), name));
        }
        let mut requeue_after = None;
        if scope == Scope::Whole {
            let occupied: BTreeSet<&Path> = found.iter().map(Found::host_path).collect();
            // NB: in name order, as the incremental inventory decides them.
            let mut unused: Vec<&LocalDisk> = self
                .mine
                .iter()
                .copied()
                .filter(|d| {
                    d.metadata
                        .name
                        .as_ref()
                        .is_some_and(|n| !self.used.contains(n))
                })
                .collect();
            unused.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            let gone = vanished(self.inputs, &unused, |p| occupied.contains(p));
            self.changes.extend(gone.changes);
            requeue_after = gone.requeue_after;
        }
        let changes = Changes {
            changes: self.changes,
            requeue_after,
        };
        (changes, trace)
    }

    /// The desired object for one found entry, and the write (if any) that gets it there; returns its name.
    fn one(&mut self, item: Found<'_>) -> String {
        let key = item.key();
        let (name, duplicate) = self.name_for(&key, item.host_path());
        self.used.insert(name.clone());
        let pv = self.pvs.get(item.host_path());
        let held = self.held.get(item.host_path()).copied();
        let mut status = match item {
            Found::Disk(disk) => status::of_disk(self.inputs, disk, pv, held),
            Found::Unusable(u) => status::of_unusable(u, pv),
        };
        if let Some(duplicate) = duplicate {
            status::flag_duplicate(&mut status, duplicate, &self.now);
        }
        let spec = match item {
            Found::Disk(disk) => status::spec_of_disk(self.inputs.node, disk),
            Found::Unusable(u) => status::spec_of_unusable(self.inputs.node, u),
        };
        let mut desired = LocalDisk::new(&name, spec);
        desired.metadata.labels = Some(status::labels(&desired.spec));
        desired.status = Some(status);
        let existing = self.object(&name);
        match existing {
            None => {
                stamp(&mut desired, None, &self.now);
                self.changes.push(Change::Create(Box::new(desired)));
            }
            Some(existing) if !status::unchanged(&desired, existing) => {
                stamp(&mut desired, Some(existing), &self.now);
                self.changes.push(Change::Apply(Box::new(desired)));
            }
            Some(_) => {}
        }
        name
    }

    /// The object name for `key`: the one this node already holds for it, else the plain name unless another node
    /// holds that (then the node-qualified one). Also says which other node's object shares the UUID.
    fn name_for(&self, key: &DiskKey, host_path: &Path) -> (String, Option<DuplicateUuid>) {
        let plain = naming::name(self.inputs.node, key);
        let duplicate = self
            .inputs
            .others
            .iter()
            .filter(|d| d.spec.node != self.inputs.node)
            .find(|d| d.metadata.name.as_deref() == Some(&plain))
            .map(|d| DuplicateUuid {
                node: d.spec.node.clone(),
                local_disk: plain.clone(),
            });
        let held = self
            .mine_by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|d| d.metadata.name.clone())
            .find(|name| !self.used(name));
        let name = held.unwrap_or_else(|| match duplicate {
            Some(_) => naming::node_qualified_name(self.inputs.node, key),
            None => plain,
        });
        if self.used(&name) {
            // Two entries with one identity in one pass (discovery normally rejects the second): the later one is
            // known by its path.
            let by_path = DiskKey::Path(host_path.to_path_buf());
            return (naming::name(self.inputs.node, &by_path), None);
        }
        (name, duplicate)
    }
}

impl<'a> Builder<'a> {
    fn deciding(&mut self, _item: Found<'_>) {
        #[cfg(debug_assertions)]
        {
            let disk = match _item {
                Found::Disk(disk) => Some(disk),
                Found::Unusable(_) => None,
            };
            let links =
                relation::entry_links(self.inputs.node, _item.key(), disk, _item.host_path());
            self.deciding = Some(links);
        }
    }

    /// Checks, in debug builds, that the entry being built may read whatever holds `name` (its object, the entry
    /// that took it first).
    fn reads(&self, _name: &str) {
        #[cfg(debug_assertions)]
        if let Some(links) = &self.deciding {
            let key = self
                .mine_by_name
                .get(_name)
                .map(|d| DiskKey::of_spec(&d.spec));
            assert!(
                relation::reaches(links, _name, key.as_ref()),
                "an entry read {_name}, which it does not link (inventory::relation): the incremental inventory \
                 would not build it again when that changes"
            );
        }
    }

    /// This node's object named `name`.
    fn object(&self, name: &str) -> Option<&'a LocalDisk> {
        self.reads(name);
        self.mine_by_name.get(name).copied()
    }

    /// Whether an entry built earlier in this run took `name`.
    fn used(&self, name: &str) -> bool {
        self.reads(name);
        self.used.contains(name)
    }
}

/// Objects of this node that no found entry uses (`unused`, in this order): missing, then deleted after the grace
/// period; with when to look again.
pub(super) fn vanished(
    inputs: &Inputs<'_>,
    unused: &[&LocalDisk],
    occupied: impl Fn(&Path) -> bool,
) -> Changes {
    let failed: BTreeSet<&str> = inputs
        .found
        .failed_classes
        .iter()
        .map(|f| f.class.as_str())
        .collect();
    let now = time(inputs.now);
    let mut out = Changes::default();
    let requeue = |after: Duration, out: &mut Changes| {
        out.requeue_after = Some(out.requeue_after.map_or(after, |r| r.min(after)));
    };
    for existing in unused {
        let Some(name) = existing.metadata.name.clone() else {
            continue;
        };
        if failed.contains(existing.spec.storage_class.as_str()) {
            continue;
        }
        let key = DiskKey::of_spec(&existing.spec);
        if matches!(key, DiskKey::Path(_)) && occupied(Path::new(&existing.spec.path)) {
            // Another object now describes this path (the entry became a filesystem with a UUID).
            out.changes.push(Change::Delete(name));
            continue;
        }
        let status = existing.status.clone().unwrap_or_default();
        let since = status
            .missing_since
            .as_ref()
            .filter(|_| status.phase == LocalDiskPhase::Missing);
        let Some(since) = since else {
            requeue(inputs.settings.missing_grace, &mut out);
            let missing = status::missing(existing, inputs.node, &now);
            out.changes.push(Change::MarkMissing(Box::new(missing)));
            continue;
        };
        let gone_for = elapsed(since, inputs.now);
        match inputs.settings.missing_grace.checked_sub(gone_for) {
            Some(left) if !left.is_zero() => requeue(left, &mut out),
            _ => out.changes.push(Change::Delete(name)),
        }
    }
    out
}

/// Sets `lastSeen` to now and the condition transition times: kept from `existing` for a condition whose status
/// did not change, now otherwise.
fn stamp(desired: &mut LocalDisk, existing: Option<&LocalDisk>, now: &Time) {
    let before: Vec<_> = existing
        .and_then(|e| e.status.as_ref())
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if let Some(status) = desired.status.as_mut() {
        status.last_seen = Some(now.clone());
        for condition in &mut status.conditions {
            condition.last_transition_time = before
                .iter()
                .find(|b| b.type_ == condition.type_ && b.status == condition.status)
                .map_or_else(|| now.clone(), |b| b.last_transition_time.clone());
        }
    }
}

fn elapsed(since: &Time, now: SystemTime) -> Duration {
    now.duration_since(SystemTime::from(since.0))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
