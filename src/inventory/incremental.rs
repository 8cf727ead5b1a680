//! The inventory kept between passes: builds again only the found entries a change can concern, and decides
//! objects no entry uses from a set it keeps. Same changes as [`build`](super::build) (and the same names to look
//! up as [`names_to_look_up`](super::names_to_look_up)), in a time that follows what changed.
//!
//! ```text
//!  Discovery, this node's LocalDisks ─> names_to_look_up: diff with the last pass (entries, objects) ─┐
//!  + PVs, ledger, wipes, holds, others ─> build: diff the rest ─> dirty paths, closed over links ─────┴─>
//!      the general builder on those entries (`Scope::Part`) + `vanished` over the objects no entry uses
//! ```
//!
//! An entry's object depends on the entry, the PV at its path, the wipe running or failing there, the planner's
//! hold reason for the path, the ledger state of its disk key, and the objects under its disk key or its names
//! (this node's, and other nodes' by the plain name). Entries with none of these changed, whose last build wrote
//! nothing, need nothing now (timestamps aside, which no comparison reads; a running wipe's path is always built).
//! The node, the settings, the failed classes and other nodes' objects build whole when they change, and so does
//! a list of this node's objects out of name order (the watch store gives them by name).
//!
//! The links are `inventory::relation`'s, which the builder's reads are checked against in debug builds.
//!
//! NB: over 500 lines for the same reason as `plan::incremental`: it keeps the last build's world and diffs the new
//! one against it, proven equal to the whole build by one randomised test that covers it as one unit.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::build::{Builder, Scope, vanished};
use super::crd::LocalDisk;
use super::inputs::{Inputs, Settings, WipeFailures};
use super::naming::{self, DiskKey};
use super::relation::{self, EntryLink, object_links};
use super::{Changes, names_to_look_up};
use crate::disk::{ClassFailure, Discovery, Disk, Unusable};
use crate::fasthash::{FastMap, FastSet};
use crate::plan::incremental::{changed_keys, closure, unusable_at};
use crate::plan::pv::PvView;
use crate::plan::{DiskLedger, NodeFacts, Unpublished};

/// What the last build built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Found entries built.
    pub entries: usize,
    /// Every entry was built.
    pub whole: bool,
}

#[derive(Default)]
pub struct IncrementalInventory {
    last: Option<LastBuild>,
    work: Work,
    /// Entries built by every build so far.
    built: usize,
}

#[derive(Clone, Debug, PartialEq)]
enum FoundEntry {
    Disk(Arc<Disk>),
    Unusable(Unusable),
}

struct SeenEntry {
    entry: FoundEntry,
    links: Vec<EntryLink>,
    /// The object name the last build gave it.
    name: Option<String>,
}

struct SeenObject {
    object: Arc<LocalDisk>,
    key: DiskKey,
}

struct BuildContext {
    node: String,
    settings: Settings,
    failed: Vec<ClassFailure>,
    others: Vec<LocalDisk>,
}

struct LastBuild {
    global: BuildContext,
    entries: FastMap<PathBuf, SeenEntry>,
    /// This node's objects by name, and their names by disk key.
    objects: BTreeMap<String, SeenObject>,
    by_key: FastMap<DiskKey, BTreeSet<String>>,
    pvs: FastMap<String, (Arc<PersistentVolume>, Option<PathBuf>)>,
    pvs_at: FastMap<PathBuf, BTreeSet<String>>,
    running: BTreeSet<PathBuf>,
    failures: BTreeMap<PathBuf, WipeFailures>,
    held: FastMap<PathBuf, Unpublished>,
    ledger: DiskLedger,
    links: FastMap<EntryLink, FastSet<PathBuf>>,
    /// Entries whose last build wrote: built again.
    noisy: BTreeSet<PathBuf>,
    /// Object name -> the path of the entry using it.
    used: FastMap<String, PathBuf>,
    /// This node's objects no entry uses, decided in every build (they write or wait for their grace period).
    unused: BTreeSet<String>,
    /// Filesystem entries whose plain name this node does not hold, by path.
    wanted: BTreeMap<PathBuf, String>,
    /// The found disks and unusable entries the last build took, in its order: a pass whose disks are the same
    /// pointers in the same order, and whose unusable entries are equal, compares no entry.
    disks: Vec<Arc<Disk>>,
    unusable: Vec<Unusable>,
    /// The health reports the last build took: a change builds the paths it concerns again.
    unhealthy: Vec<crate::disk::DiskHealth>,
    cordoned: Vec<PathBuf>,
    /// The PVs the last build took, in its order: a PV at the same place, the same pointer, is the one seen under
    /// its UID (UIDs are unique), and is not looked up.
    pv_order: Vec<Arc<PersistentVolume>>,
}

fn entry_key(entry: &FoundEntry) -> DiskKey {
    match entry {
        FoundEntry::Disk(disk) => DiskKey::of_disk(disk),
        FoundEntry::Unusable(u) => DiskKey::Path(u.host_path.clone()),
    }
}

fn entry_links(node: &str, entry: &FoundEntry) -> Vec<EntryLink> {
    let disk = match entry {
        FoundEntry::Disk(disk) => Some(&**disk),
        FoundEntry::Unusable(_) => None,
    };
    relation::entry_links(node, entry_key(entry), disk, host_path(entry))
}

/// The path of the PV as the builder reads it (`None`: not one it reads).
fn pv_path(node: &str, pv: &PersistentVolume) -> Option<PathBuf> {
    let node = NodeFacts {
        name: node.to_string(),
        ..NodeFacts::default()
    };
    PvView::read(pv, &node).map(|v| v.path)
}

fn same_object(a: &Arc<LocalDisk>, b: &Arc<LocalDisk>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// This node's objects, in the order given; `None` when they are not in name order.
fn mine<'e>(
    node: &str,
    existing: &'e [Arc<LocalDisk>],
) -> Option<Vec<(&'e str, &'e Arc<LocalDisk>)>> {
    let mut mine: Vec<(&str, &Arc<LocalDisk>)> = Vec::with_capacity(existing.len());
    mine.extend(
        existing
            .iter()
            .filter(|d| d.spec.node == node)
            .filter_map(|d| Some((d.metadata.name.as_deref()?, d))),
    );
    mine.windows(2).all(|w| w[0].0 < w[1].0).then_some(mine)
}

/// An object of this node that is new or changed since the last build, with what was seen under its name.
struct ObjectChange<'e, 'l> {
    name: &'e str,
    object: &'e Arc<LocalDisk>,
    seen: Option<&'l SeenObject>,
}

/// This node's objects (`mine`, in name order) walked beside the last build's (`objects`, in name order): the new
/// or changed ones, and the ones seen then and gone now. One pointer comparison per object kept: the same pointer
/// is the same object, under the same name.
#[allow(clippy::type_complexity)]
fn diff_objects<'e, 'l>(
    objects: &'l BTreeMap<String, SeenObject>,
    mine: &[(&'e str, &'e Arc<LocalDisk>)],
) -> (Vec<ObjectChange<'e, 'l>>, Vec<(&'l str, &'l SeenObject)>) {
    let mut changed = Vec::new();
    let mut gone = Vec::new();
    let mut seen = objects.iter().peekable();
    for &(name, object) in mine {
        if seen
            .next_if(|(_, s)| Arc::ptr_eq(&s.object, object))
            .is_some()
        {
            continue;
        }
        while let Some((n, s)) = seen.next_if(|(n, _)| n.as_str() < name) {
            gone.push((n.as_str(), s));
        }
        match seen.next_if(|(n, _)| n.as_str() == name) {
            Some((_, s)) if same_object(&s.object, object) => {}
            s => changed.push(ObjectChange {
                name,
                object,
                seen: s.map(|(_, s)| s),
            }),
        }
    }
    gone.extend(seen.map(|(n, s)| (n.as_str(), s)));
    (changed, gone)
}

impl IncrementalInventory {
    /// [`names_to_look_up`], from what changed since the last build: entries whose disk, or whose key's objects,
    /// changed are asked again; the others ask what they asked.
    pub fn names_to_look_up(
        &mut self,
        node: &str,
        found: &Discovery,
        existing: &[Arc<LocalDisk>],
    ) -> Vec<String> {
        let last = self.last.as_ref().filter(|l| l.global.node == node);
        let (Some(last), Some(mine)) = (last, mine(node, existing)) else {
            return names_to_look_up(node, found, existing);
        };
        // Objects changed or new (with their key now), and the keys whose objects changed.
        let (diff, gone) = diff_objects(&last.objects, &mine);
        let mut changed: FastMap<&str, DiskKey> = FastMap::default();
        let mut keys: FastSet<DiskKey> = FastSet::default();
        for c in &diff {
            let key = DiskKey::of_spec(&c.object.spec);
            keys.extend(c.seen.map(|s| s.key.clone()));
            keys.insert(key.clone());
            changed.insert(c.name, key);
        }
        // Objects gone since the last build.
        keys.extend(gone.iter().map(|(_, seen)| seen.key.clone()));
        let is_mine = |name: &str| mine.binary_search_by(|(n, _)| (*n).cmp(name)).is_ok();
        // NB: `names_to_look_up` keeps, of several objects with one key, the last in order: the greatest name.
        let held = |key: &DiskKey| -> Option<&str> {
            let stale = last
                .by_key
                .get(key)
                .into_iter()
                .flatten()
                .map(String::as_str);
            let new = changed.iter().filter(|(_, k)| *k == key).map(|(n, _)| *n);
            stale
                .chain(new)
                .filter(|n| is_mine(n))
                .filter(|n| changed.get(n).unwrap_or_else(|| &last.objects[*n].key) == key)
                .max()
        };
        let mut names = BTreeSet::new();
        // A disk asked again asks for its plain name when this node's objects under its key do not hold it.
        let plain_wanted = |key: &DiskKey| -> Option<String> {
            let DiskKey::Filesystem { .. } = key else {
                return None;
            };
            let plain = naming::name(node, key);
            (held(key) != Some(plain.as_str())).then_some(plain)
        };
        if last.same_disks(found) {
            // Every disk is the one the last build saw, under the key it recorded: only the disks under a changed
            // key are asked again, and the others ask what they asked (`wanted` holds only found disks' paths).
            let affected: BTreeSet<&Path> = keys
                .iter()
                .filter_map(|k| last.links.get(&EntryLink::Key(k.clone())))
                .flatten()
                .map(PathBuf::as_path)
                .collect();
            for path in &affected {
                if let Some(SeenEntry {
                    entry: FoundEntry::Disk(disk),
                    ..
                }) = last.entries.get(*path)
                {
                    names.extend(plain_wanted(&DiskKey::of_disk(disk)));
                }
            }
            let asked = last
                .wanted
                .iter()
                .filter(|(p, _)| !affected.contains(p.as_path()));
            names.extend(asked.map(|(_, name)| name.clone()));
            return names.into_iter().collect();
        }
        for disk in &found.disks {
            let key = DiskKey::of_disk(disk);
            let same = matches!(last.entries.get(&disk.host_path),
                Some(SeenEntry { entry: FoundEntry::Disk(d), .. }) if d == disk);
            if same && !keys.contains(&key) {
                names.extend(last.wanted.get(&disk.host_path).cloned());
                continue;
            }
            names.extend(plain_wanted(&key));
        }
        names.into_iter().collect()
    }

    pub fn build(&mut self, inputs: &Inputs<'_>) -> Changes {
        if let Some(mut last) = self.last.take()
            && let Some((changes, work)) = last.build_part(inputs)
        {
            self.last = Some(last);
            self.work = work;
            self.built += work.entries;
            return changes;
        }
        let (changes, trace) = Builder::new(inputs).run(Scope::Whole);
        let entries = inputs.found.disks.len() + inputs.found.unusable.len();
        self.work = Work {
            entries,
            whole: true,
        };
        self.built += entries;
        self.last = LastBuild::whole(inputs, trace.names, trace.noisy);
        changes
    }

    pub fn work(&self) -> Work {
        self.work
    }

    /// Entries built by every build so far.
    pub fn built(&self) -> usize {
        self.built
    }
}

impl LastBuild {
    fn whole(
        inputs: &Inputs<'_>,
        names: Vec<(PathBuf, String)>,
        noisy: BTreeSet<PathBuf>,
    ) -> Option<LastBuild> {
        let mine = mine(inputs.node, inputs.existing)?;
        let mut last = LastBuild {
            global: BuildContext {
                node: inputs.node.to_string(),
                settings: inputs.settings.clone(),
                failed: inputs.found.failed_classes.clone(),
                others: inputs.others.to_vec(),
            },
            entries: FastMap::default(),
            objects: BTreeMap::new(),
            by_key: FastMap::default(),
            pvs: FastMap::default(),
            pvs_at: FastMap::default(),
            running: inputs.wipes.keys().cloned().collect(),
            failures: inputs.wipe_failures.clone(),
            held: FastMap::default(),
            ledger: inputs.ledger.clone(),
            links: FastMap::default(),
            noisy,
            used: FastMap::default(),
            unused: BTreeSet::new(),
            wanted: BTreeMap::new(),
            disks: inputs.found.disks.clone(),
            unusable: inputs.found.unusable.clone(),
            unhealthy: inputs.found.unhealthy.clone(),
            cordoned: inputs.found.cordoned.clone(),
            pv_order: inputs.pvs.to_vec(),
        };
        for u in inputs.unpublished {
            last.held
                .entry(u.host_path.clone())
                .or_insert_with(|| u.clone());
        }
        for pv in inputs.pvs {
            let uid = pv.metadata.uid.clone()?;
            last.add_pv(inputs.node, uid, pv);
        }
        for (name, object) in mine {
            last.add_object(name, object);
        }
        for entry in entries(inputs.found) {
            if last.entries.contains_key(host_path(&entry)) {
                return None;
            }
            last.add_entry(inputs.node, entry);
        }
        for (path, name) in names {
            last.use_name(&path, name);
        }
        let unused: Vec<String> = last
            .objects
            .keys()
            .filter(|n| !last.used.contains_key(*n))
            .cloned()
            .collect();
        last.unused.extend(unused);
        let paths: Vec<PathBuf> = inputs
            .found
            .disks
            .iter()
            .map(|d| d.host_path.clone())
            .collect();
        last.want(inputs.node, &paths);
        Some(last)
    }

    fn add_pv(&mut self, node: &str, uid: String, pv: &Arc<PersistentVolume>) {
        let path = pv_path(node, pv);
        if let Some(path) = &path {
            self.pvs_at
                .entry(path.clone())
                .or_default()
                .insert(uid.clone());
        }
        self.pvs.insert(uid, (pv.clone(), path));
    }

    fn remove_pv(&mut self, uid: &str) -> Option<PathBuf> {
        let (_, path) = self.pvs.remove(uid)?;
        let path = path?;
        if let Some(at) = self.pvs_at.get_mut(&path) {
            at.remove(uid);
            if at.is_empty() {
                self.pvs_at.remove(&path);
            }
        }
        Some(path)
    }

    fn add_object(&mut self, name: &str, object: &Arc<LocalDisk>) {
        let key = DiskKey::of_spec(&object.spec);
        self.by_key
            .entry(key.clone())
            .or_default()
            .insert(name.to_string());
        let seen = SeenObject {
            object: object.clone(),
            key,
        };
        self.objects.insert(name.to_string(), seen);
    }

    fn remove_object(&mut self, name: &str) {
        if let Some(seen) = self.objects.remove(name)
            && let Some(names) = self.by_key.get_mut(&seen.key)
        {
            names.remove(name);
            if names.is_empty() {
                self.by_key.remove(&seen.key);
            }
        }
    }

    fn add_entry(&mut self, node: &str, entry: FoundEntry) {
        let links = entry_links(node, &entry);
        let path = host_path(&entry).to_path_buf();
        for link in &links {
            self.links
                .entry(link.clone())
                .or_default()
                .insert(path.clone());
        }
        let seen = SeenEntry {
            entry,
            links,
            name: None,
        };
        self.entries.insert(path, seen);
    }

    /// Removes the entry at `path`; returns the object name it used.
    fn remove_entry(&mut self, path: &Path) -> Option<String> {
        let seen = self.entries.remove(path)?;
        for link in &seen.links {
            if let Some(paths) = self.links.get_mut(link) {
                paths.remove(path);
                if paths.is_empty() {
                    self.links.remove(link);
                }
            }
        }
        let name = seen.name?;
        self.used.remove(&name);
        Some(name)
    }

    fn use_name(&mut self, path: &Path, name: String) {
        self.used.insert(name.clone(), path.to_path_buf());
        if let Some(seen) = self.entries.get_mut(path) {
            seen.name = Some(name);
        }
    }

    /// What the entries at `paths` ask other nodes about now: their plain name, when this node's greatest-named
    /// object under their key is not under that name.
    fn want(&mut self, node: &str, paths: &[PathBuf]) {
        for path in paths {
            self.wanted.remove(path);
            let Some(SeenEntry {
                entry: FoundEntry::Disk(disk),
                ..
            }) = self.entries.get(path)
            else {
                continue;
            };
            let key = DiskKey::of_disk(disk);
            if let DiskKey::Filesystem { .. } = key {
                let plain = naming::name(node, &key);
                let held = self.by_key.get(&key).and_then(|names| names.last());
                if held != Some(&plain) {
                    self.wanted.insert(path.clone(), plain);
                }
            }
        }
    }

    /// The found disks are the last build's: the same pointers, in the same order.
    fn same_disks(&self, found: &Discovery) -> bool {
        found.disks.len() == self.disks.len()
            && found
                .disks
                .iter()
                .zip(&self.disks)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    fn same_global(&self, inputs: &Inputs<'_>) -> bool {
        let g = &self.global;
        g.node == inputs.node
            && g.settings == *inputs.settings
            && g.failed == inputs.found.failed_classes
            && g.others == inputs.others
    }

    /// Builds the entries a change can concern; `None` when the inventory must be built whole.
    fn build_part(&mut self, inputs: &Inputs<'_>) -> Option<(Changes, Work)> {
        if !self.same_global(inputs) {
            return None;
        }
        let mine = mine(inputs.node, inputs.existing)?;
        let mut dirty: BTreeSet<PathBuf> = BTreeSet::new();
        let mut links: Vec<EntryLink> = Vec::new();
        let mut names: BTreeSet<String> = BTreeSet::new();
        // This node's objects.
        let (diff, gone) = diff_objects(&self.objects, &mine);
        for c in &diff {
            if let Some(seen) = c.seen {
                links.extend(object_links(c.name, &seen.key));
            }
            links.extend(object_links(c.name, &DiskKey::of_spec(&c.object.spec)));
            names.insert(c.name.to_string());
        }
        for (name, seen) in &gone {
            links.extend(object_links(name, &seen.key));
            names.insert(name.to_string());
        }
        let changed_objects: Vec<(&str, &Arc<LocalDisk>)> =
            diff.iter().map(|c| (c.name, c.object)).collect();
        let gone_objects: Vec<String> = gone.iter().map(|(name, _)| name.to_string()).collect();
        // Entries using a changed object's name.
        dirty.extend(names.iter().filter_map(|n| self.used.get(n)).cloned());
        // Entries whose health changed.
        let unhealthy_changed =
            inputs.found.unhealthy != self.unhealthy || inputs.found.cordoned != self.cordoned;
        if unhealthy_changed {
            dirty.extend(inputs.found.cordoned.iter().cloned());
            dirty.extend(self.cordoned.iter().cloned());
            let paths = |list: &[crate::disk::DiskHealth]| -> Vec<PathBuf> {
                list.iter().map(|h| h.host_path.clone()).collect()
            };
            dirty.extend(paths(&inputs.found.unhealthy));
            dirty.extend(paths(&self.unhealthy));
        }
        // Found entries.
        let mut changed_entries: Vec<FoundEntry> = Vec::new();
        let mut gone_entries: Vec<PathBuf> = Vec::new();
        // NB: the same entries as the last build's are the ones `entries` holds: none changed, none gone.
        let same_entries = self.same_disks(inputs.found) && inputs.found.unusable == self.unusable;
        let to_compare = match same_entries {
            true => 0,
            false => inputs.found.disks.len() + inputs.found.unusable.len(),
        };
        let mut paths: FastSet<&Path> = FastSet::default();
        paths.reserve(to_compare);
        let mut kept = 0;
        for entry in borrowed_entries(inputs.found).take(to_compare) {
            let path = entry.host_path();
            if !paths.insert(path) {
                return None;
            }
            match self.entries.get(path) {
                Some(seen) if entry.is(&seen.entry) => kept += 1,
                seen => {
                    kept += usize::from(seen.is_some());
                    dirty.insert(path.to_path_buf());
                    let owned = entry.owned();
                    links.extend(entry_links(inputs.node, &owned));
                    changed_entries.push(owned);
                }
            }
        }
        if !same_entries && kept < self.entries.len() {
            for path in self.entries.keys() {
                if !paths.contains(path.as_path()) {
                    dirty.insert(path.clone());
                    gone_entries.push(path.clone());
                }
            }
        }
        // PVs.
        let mut changed_pvs: Vec<(String, &Arc<PersistentVolume>)> = Vec::new();
        let mut gone_pvs: Vec<String> = Vec::new();
        let mut kept = 0;
        let mut in_place = 0;
        for (i, pv) in inputs.pvs.iter().enumerate() {
            if self.pv_order.get(i).is_some_and(|p| Arc::ptr_eq(p, pv)) {
                kept += 1;
                in_place += 1;
                continue;
            }
            let uid = pv.metadata.uid.as_deref()?;
            match self.pvs.get(uid) {
                Some((seen, _)) if Arc::ptr_eq(seen, pv) || seen == pv => kept += 1,
                seen => {
                    kept += usize::from(seen.is_some());
                    dirty.extend(seen.and_then(|(_, p)| p.clone()));
                    dirty.extend(pv_path(inputs.node, pv));
                    changed_pvs.push((uid.to_string(), pv));
                }
            }
        }
        if kept < self.pvs.len() {
            let present: FastSet<&str> = inputs
                .pvs
                .iter()
                .filter_map(|pv| pv.metadata.uid.as_deref())
                .collect();
            for (uid, (_, path)) in &self.pvs {
                if !present.contains(uid.as_str()) {
                    dirty.extend(path.clone());
                    gone_pvs.push(uid.clone());
                }
            }
        }
        // Wipes, holds, the ledger, and what wrote last time.
        let running: BTreeSet<PathBuf> = inputs.wipes.keys().cloned().collect();
        dirty.extend(running.iter().cloned());
        dirty.extend(self.running.difference(&running).cloned());
        dirty.extend(
            changed_keys(&self.failures, inputs.wipe_failures)
                .into_iter()
                .cloned(),
        );
        let mut held: FastMap<PathBuf, Unpublished> = FastMap::default();
        for u in inputs.unpublished {
            held.entry(u.host_path.clone()).or_insert_with(|| u.clone());
        }
        for (path, u) in &held {
            if self.held.get(path) != Some(u) {
                dirty.insert(path.clone());
            }
        }
        dirty.extend(self.held.keys().filter(|p| !held.contains_key(*p)).cloned());
        let ledger_changed = *inputs.ledger != self.ledger;
        if ledger_changed {
            let keys = changed_keys(&self.ledger.disks, &inputs.ledger.disks);
            links.extend(keys.into_iter().map(|k| EntryLink::Ledger(k.clone())));
        }
        dirty.extend(self.noisy.iter().cloned());
        // The new world from here on.
        for name in &gone_objects {
            self.remove_object(name);
        }
        for (name, object) in &changed_objects {
            self.remove_object(name);
            self.add_object(name, object);
        }
        for uid in gone_pvs
            .iter()
            .chain(changed_pvs.iter().map(|(uid, _)| uid))
        {
            self.remove_pv(uid);
        }
        for (uid, pv) in changed_pvs {
            self.add_pv(inputs.node, uid, pv);
        }
        let mut old_links: Vec<EntryLink> = Vec::new();
        let replaced: Vec<PathBuf> = changed_entries
            .iter()
            .map(|e| host_path(e).to_path_buf())
            .collect();
        for path in gone_entries.iter().chain(&replaced) {
            if let Some(seen) = self.entries.get(path) {
                old_links.extend(seen.links.iter().cloned());
            }
            names.extend(self.remove_entry(path));
        }
        for entry in changed_entries {
            self.add_entry(inputs.node, entry);
        }
        if !same_entries {
            self.disks = inputs.found.disks.clone();
            self.unusable = inputs.found.unusable.clone();
        }
        if unhealthy_changed {
            self.unhealthy = inputs.found.unhealthy.clone();
            self.cordoned = inputs.found.cordoned.clone();
        }
        if in_place < inputs.pvs.len() || in_place < self.pv_order.len() {
            self.pv_order = inputs.pvs.to_vec();
        }
        self.running = running;
        self.failures = inputs.wipe_failures.clone();
        self.held = held;
        if ledger_changed {
            self.ledger = inputs.ledger.clone();
        }
        links.extend(old_links);
        let dirty = self.close(dirty, links);
        self.build_dirty(inputs, &dirty, names)
    }

    /// `dirty` and every path linked to a dirty one or to one of `links`, through the current links.
    fn close(&self, dirty: BTreeSet<PathBuf>, links: Vec<EntryLink>) -> BTreeSet<PathBuf> {
        let mut closed = dirty;
        for link in &links {
            closed.extend(self.links.get(link).into_iter().flatten().cloned());
        }
        closure(closed, |path| {
            let Some(seen) = self.entries.get(path) else {
                return Vec::new();
            };
            let named = seen.name.iter().map(|n| EntryLink::Name(n.clone()));
            let links: Vec<EntryLink> = seen.links.iter().cloned().chain(named).collect();
            links
                .iter()
                .flat_map(|link| self.links.get(link).into_iter().flatten().cloned())
                .collect()
        })
    }

    fn build_dirty(
        &mut self,
        inputs: &Inputs<'_>,
        dirty: &BTreeSet<PathBuf>,
        mut names: BTreeSet<String>,
    ) -> Option<(Changes, Work)> {
        let found = Discovery {
            disks: disks_at(inputs.found, dirty),
            unusable: unusable_at(inputs.found, dirty),
            failed_classes: inputs.found.failed_classes.clone(),
            unhealthy: crate::plan::incremental::unhealthy_at(inputs.found, dirty),
            cordoned: inputs.found.cordoned.clone(),
        };
        // NB: of several PVs at one path the builder keeps one by input order, which the part does not keep.
        if dirty
            .iter()
            .any(|p| self.pvs_at.get(p).is_some_and(|at| at.len() > 1))
        {
            return None;
        }
        let pvs: Vec<Arc<PersistentVolume>> = dirty
            .iter()
            .filter_map(|p| self.pvs_at.get(p))
            .flatten()
            .map(|uid| self.pvs[uid].0.clone())
            .collect();
        // The objects the part's entries can use: under their keys, and under their names (old and new).
        let mut wanted_names: BTreeSet<String> = BTreeSet::new();
        for path in dirty {
            if let Some(seen) = self.entries.get(path) {
                let key = entry_key(&seen.entry);
                wanted_names.extend(self.by_key.get(&key).into_iter().flatten().cloned());
                wanted_names.insert(naming::name(inputs.node, &key));
                wanted_names.insert(naming::node_qualified_name(inputs.node, &key));
                let by_path = DiskKey::Path(path.clone());
                wanted_names.insert(naming::name(inputs.node, &by_path));
                wanted_names.extend(seen.name.clone());
            }
        }
        let existing: Vec<Arc<LocalDisk>> = wanted_names
            .iter()
            .filter_map(|n| self.objects.get(n))
            .map(|o| o.object.clone())
            .collect();
        let part = Inputs {
            found: &found,
            pvs: &pvs,
            existing: &existing,
            ..*inputs
        };
        let (mut changes, trace) = Builder::new(&part).run(Scope::Part);
        // Names the part no longer uses, and the part's: which objects are unused now.
        for path in dirty {
            if let Some(name) = self.entries.get_mut(path).and_then(|s| s.name.take()) {
                self.used.remove(&name);
                names.insert(name);
            }
        }
        for path in dirty {
            self.noisy.remove(path);
        }
        self.noisy.extend(trace.noisy);
        for (path, name) in trace.names {
            names.insert(name.clone());
            self.use_name(&path, name);
        }
        for name in names {
            if self.objects.contains_key(&name) && !self.used.contains_key(&name) {
                self.unused.insert(name);
            } else {
                self.unused.remove(&name);
            }
        }
        let unused: Vec<&LocalDisk> = self
            .unused
            .iter()
            .filter_map(|n| self.objects.get(n))
            .map(|o| &*o.object)
            .collect();
        let gone = vanished(inputs, &unused, |p| self.entries.contains_key(p));
        changes.changes.extend(gone.changes);
        changes.requeue_after = gone.requeue_after;
        let paths: Vec<PathBuf> = dirty.iter().cloned().collect();
        self.want(inputs.node, &paths);
        let work = Work {
            entries: found.disks.len() + found.unusable.len(),
            whole: false,
        };
        Some((changes, work))
    }
}

/// The found disks at `paths`, in their found order (the builder's). NB: equal paths end in the same name: a disk
/// whose last component is none of theirs is passed over on a hash of that name, its path never compared.
fn disks_at(found: &Discovery, paths: &BTreeSet<PathBuf>) -> Vec<Arc<Disk>> {
    if paths.is_empty() {
        return Vec::new();
    }
    let names: FastSet<&OsStr> = paths.iter().filter_map(|p| p.file_name()).collect();
    found
        .disks
        .iter()
        .filter(|d| {
            let name = d.host_path.file_name();
            name.is_none_or(|n| names.contains(n)) && paths.contains(&d.host_path)
        })
        .cloned()
        .collect()
}

/// Found entries, disks first, as the builder takes them.
fn entries(found: &Discovery) -> Vec<FoundEntry> {
    found
        .disks
        .iter()
        .cloned()
        .map(FoundEntry::Disk)
        .chain(found.unusable.iter().cloned().map(FoundEntry::Unusable))
        .collect()
}

fn host_path(entry: &FoundEntry) -> &Path {
    match entry {
        FoundEntry::Disk(d) => &d.host_path,
        FoundEntry::Unusable(u) => &u.host_path,
    }
}

#[derive(Clone, Copy)]
enum EntryRef<'a> {
    Disk(&'a Arc<Disk>),
    Unusable(&'a Unusable),
}

impl<'a> EntryRef<'a> {
    fn host_path(&self) -> &'a Path {
        match self {
            EntryRef::Disk(d) => &d.host_path,
            EntryRef::Unusable(u) => &u.host_path,
        }
    }

    fn is(&self, entry: &FoundEntry) -> bool {
        match (self, entry) {
            (EntryRef::Disk(a), FoundEntry::Disk(b)) => *a == b,
            (EntryRef::Unusable(a), FoundEntry::Unusable(b)) => *a == b,
            _ => false,
        }
    }

    fn owned(&self) -> FoundEntry {
        match self {
            EntryRef::Disk(d) => FoundEntry::Disk(Arc::clone(d)),
            EntryRef::Unusable(u) => FoundEntry::Unusable((*u).clone()),
        }
    }
}

fn borrowed_entries(found: &Discovery) -> impl Iterator<Item = EntryRef<'_>> {
    found
        .disks
        .iter()
        .map(EntryRef::Disk)
        .chain(found.unusable.iter().map(EntryRef::Unusable))
}

#[cfg(test)]
mod tests;
