//! The planner kept between passes: plans again only the PVs and disks a change can concern, and carries what it
//! decided about every other one. Same plans as [`plan`](super::plan), in a time that follows what changed, not the
//! number of disks on the node.
//!
//! ```text
//!  Inputs ─> diff with the last pass: PVs (UID, resourceVersion), disks, ProbeFailed paths, ledger, owners
//!         ─> dirty paths (+ the paths whose decision wrote, reported or asked for another pass last time)
//!         ─> closed over links: a shared path, a disk id a PV records, a PV name, a ledger key
//!         ─> the general planner on those PVs and disks (`Scope::Part`)
//!         ─> its actions, requeue and list request as they are; hold reasons and memory merged with the rest's
//! ```
//!
//! Why the rest may be carried: the general planner decides each PV (by its path) and each disk (by its path) from
//! the item itself, the global context (node, configuration, classes, failed classes, whether the cluster list is
//! given) and other items it finds only through the links above; memory is per PV UID. An item whose inputs and
//! linked items did not change, and which last time neither wrote, nor reported an Event, nor asked for another
//! pass (a requeue, the cluster list), decides the same hold reasons and conditions and nothing else.
//!
//! It only runs on a clean world, and plans whole otherwise: every PV is ours by its recorded UID (no PV of another
//! owner, no reference PV to adopt, no take-over, no owner left without its PV, no create in flight), no Foreign
//! condition is remembered, and the global context is the one of the last pass. Owners, the ledger and the memory
//! are compared with the last pass's; a change of the global context, or a memory that is not the one the last pass
//! returned, plans whole.
//!
//! Which items link is `plan::relation`, the description the whole planner's lookups derive from too: a decision
//! that reads an item at another path, or a ledger key, its own path does not link fails a debug assertion, so a
//! new rule cannot read what this planner would not plan again.
//!
//! NB: over 500 lines: it keeps the last pass's world (items, links, addresses, memory) and diffs the new one
//! against it, which the randomised test that proves the two planners equal covers as one unit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::decide::{self, Scope};
use super::pv::{Origin, PvView};
use super::relation::{Link, disk_links, pv_links};
use super::state::{Condition, DiskLedger, Memory, OwnedPv};
use super::{ClassFacts, Inputs, NodeFacts, Plan, Unpublished};
use crate::config::Config;
use crate::disk::{ClassFailure, Discovery, Disk, Unusable, UnusableReason};
use crate::fasthash::{FastMap, FastSet};

/// What the last call planned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// PVs judged.
    pub pvs: usize,
    /// Disks placed.
    pub disks: usize,
    /// Every PV and disk was planned (the first pass, a change of the global context, a world that is not clean).
    pub whole: bool,
}

/// The planner between passes. [`IncrementalPlanner::plan`] returns what [`plan`](super::plan) returns for the same
/// inputs.
#[derive(Default)]
pub struct IncrementalPlanner {
    last: Option<LastPass>,
    work: Work,
}

impl IncrementalPlanner {
    pub fn plan(&mut self, inputs: &Inputs<'_>) -> Plan {
        if let Some(mut last) = self.last.take()
            && let Some((plan, work)) = last.plan_part(inputs)
        {
            self.last = Some(last);
            self.work = work;
            return plan;
        }
        let (plan, noisy) = decide::Planner::new(inputs, Scope::Whole).run_traced();
        self.work = Work {
            pvs: inputs.existing.len(),
            disks: inputs.found.disks.len(),
            whole: true,
        };
        self.last = LastPass::whole(inputs, &plan, noisy);
        plan
    }

    pub fn work(&self) -> Work {
        self.work
    }
}

/// What plans whole when it changes.
struct PassContext {
    node: NodeFacts,
    config: Config,
    classes: Vec<ClassFacts>,
    failed: Vec<ClassFailure>,
    listed: bool,
}

impl PassContext {
    fn of(inputs: &Inputs<'_>) -> PassContext {
        PassContext {
            node: inputs.node.clone(),
            config: inputs.config.clone(),
            classes: inputs.classes.to_vec(),
            failed: inputs.found.failed_classes.clone(),
            listed: inputs.cluster.is_some(),
        }
    }

    fn same(&self, inputs: &Inputs<'_>) -> bool {
        self.node == *inputs.node
            && self.config == *inputs.config
            && self.classes == inputs.classes
            && self.failed == inputs.found.failed_classes
            && self.listed == inputs.cluster.is_some()
    }
}

struct SeenPv {
    pv: Arc<PersistentVolume>,
    resource_version: String,
    path: PathBuf,
    links: Vec<Link>,
}

struct SeenDisk {
    /// The pass's own disk, shared: an unchanged disk is the same allocation, compared by address first.
    disk: Arc<Disk>,
    links: Vec<Link>,
}

/// The address of a shared item, to find it again without reading it. NB: valid only while the item is held (the
/// `LastPass` that records an address keeps its `Arc`), so an address is never reused for another item meanwhile.
fn address<T>(item: &Arc<T>) -> usize {
    Arc::as_ptr(item) as usize
}

/// The world as the last pass saw it, and what it decided about each path.
struct LastPass {
    global: PassContext,
    pvs: FastMap<String, SeenPv>,
    pvs_at: FastMap<PathBuf, BTreeSet<String>>,
    disks: FastMap<PathBuf, SeenDisk>,
    unknown: FastSet<PathBuf>,
    /// The health reports of the last pass (a change plans the paths it concerns again).
    unhealthy: Vec<crate::disk::DiskHealth>,
    /// The cordoned paths of the last pass.
    cordoned: Vec<PathBuf>,
    ledger: DiskLedger,
    owned: BTreeMap<String, OwnedPv>,
    links: FastMap<Link, FastSet<PathBuf>>,
    /// Addresses of the PVs and disks in `pvs` and `disks`: an item the pass hands over again, unchanged, is
    /// recognised by its address alone, without hashing its UID or path (a pass after one event finds thousands).
    pv_addresses: FastSet<usize>,
    disk_addresses: FastSet<usize>,
    /// Paths whose decision wrote, reported or asked for another pass: planned again in the next pass.
    noisy: BTreeSet<PathBuf>,
    unpublished: BTreeMap<PathBuf, Vec<Unpublished>>,
    memory: Memory,
    /// The shell's count of the call that left this state (`StateChanges::call`), if it counts.
    call: Option<u64>,
}

/// Every PV the inputs know (`existing`, then what only the cluster list shows), each once.
fn known_pvs<'i>(inputs: &Inputs<'i>) -> Vec<&'i Arc<PersistentVolume>> {
    let mut all: Vec<&Arc<PersistentVolume>> = inputs.existing.iter().collect();
    if let Some(cluster) = inputs.cluster {
        // NB: the cluster's list usually shares its objects with `existing` (both come from the agent's index):
        // the same object is the same UID, found without reading either. The UIDs are read only for the others.
        let shared: FastSet<*const PersistentVolume> =
            all.iter().map(|pv| Arc::as_ptr(pv)).collect();
        let mut uids: Option<FastSet<&str>> = None;
        for pv in cluster {
            if shared.contains(&Arc::as_ptr(pv)) {
                continue;
            }
            let uids = uids.get_or_insert_with(|| {
                inputs
                    .existing
                    .iter()
                    .filter_map(|pv| pv.metadata.uid.as_deref())
                    .collect()
            });
            if pv.metadata.uid.as_deref().is_none_or(|u| !uids.contains(u)) {
                all.push(pv);
            }
        }
    }
    all
}

/// The PV's facts when it is ours by its recorded UID; `None` otherwise (the world is not clean).
fn owned_view(inputs: &Inputs<'_>, pv: &PersistentVolume) -> Option<(String, PvView)> {
    let uid = pv.metadata.uid.clone()?;
    let view = PvView::read(pv, inputs.node)?;
    (view.origin == Origin::Ours && inputs.owners.owns(&uid)).then_some((uid, view))
}

fn unknown_paths(found: &Discovery) -> FastSet<PathBuf> {
    found
        .unusable
        .iter()
        .filter(|u| u.reason == UnusableReason::ProbeFailed)
        .map(|u| u.host_path.clone())
        .collect()
}

fn remembers_foreign(memory: &Memory) -> bool {
    memory
        .conditions
        .values()
        .any(|set| set.contains(&Condition::Foreign))
}

impl LastPass {
    /// The state after a whole plan, when the world is clean.
    fn whole(inputs: &Inputs<'_>, plan: &Plan, noisy: BTreeSet<PathBuf>) -> Option<LastPass> {
        let owners = inputs.owners;
        if !owners.recorded || !owners.creating.is_empty() || remembers_foreign(&plan.memory) {
            return None;
        }
        let mut last = LastPass {
            global: PassContext::of(inputs),
            pvs: FastMap::default(),
            pvs_at: FastMap::default(),
            disks: FastMap::default(),
            unknown: unknown_paths(inputs.found),
            unhealthy: inputs.found.unhealthy.clone(),
            cordoned: inputs.found.cordoned.clone(),
            ledger: inputs.ledger.clone(),
            owned: owners.pvs.clone(),
            links: FastMap::default(),
            pv_addresses: FastSet::default(),
            disk_addresses: FastSet::default(),
            noisy,
            unpublished: BTreeMap::new(),
            memory: plan.memory.clone(),
            call: inputs.changes.map(|c| c.call),
        };
        for pv in known_pvs(inputs) {
            let (uid, view) = owned_view(inputs, pv)?;
            last.add_pv(uid, pv, view);
        }
        if owners.pvs.len() != last.pvs.len() {
            return None;
        }
        for disk in &inputs.found.disks {
            if last.disks.contains_key(&disk.host_path) {
                return None;
            }
            last.add_disk(inputs, disk);
        }
        for u in &plan.unpublished {
            last.unpublished
                .entry(u.host_path.clone())
                .or_default()
                .push(u.clone());
        }
        Some(last)
    }

    fn add_pv(&mut self, uid: String, pv: &Arc<PersistentVolume>, view: PvView) {
        let links = pv_links(&view);
        self.link(&view.path, &links);
        self.pvs_at
            .entry(view.path.clone())
            .or_default()
            .insert(uid.clone());
        self.pv_addresses.insert(address(pv));
        let seen = SeenPv {
            pv: pv.clone(),
            resource_version: view.pv_ref.resource_version,
            path: view.path,
            links,
        };
        self.pvs.insert(uid, seen);
    }

    fn remove_pv(&mut self, uid: &str) {
        if let Some(seen) = self.pvs.remove(uid) {
            self.pv_addresses.remove(&address(&seen.pv));
            self.unlink(&seen.path, &seen.links);
            if let Some(at) = self.pvs_at.get_mut(&seen.path) {
                at.remove(uid);
                if at.is_empty() {
                    self.pvs_at.remove(&seen.path);
                }
            }
        }
    }

    fn add_disk(&mut self, inputs: &Inputs<'_>, disk: &Arc<Disk>) {
        let links = disk_links(inputs, disk);
        self.link(&disk.host_path, &links);
        self.disk_addresses.insert(address(disk));
        let seen = SeenDisk {
            disk: disk.clone(),
            links,
        };
        self.disks.insert(disk.host_path.clone(), seen);
    }

    fn remove_disk(&mut self, path: &Path) {
        if let Some(seen) = self.disks.remove(path) {
            self.disk_addresses.remove(&address(&seen.disk));
            self.unlink(path, &seen.links);
        }
    }

    fn link(&mut self, path: &Path, links: &[Link]) {
        for link in links {
            self.links
                .entry(link.clone())
                .or_default()
                .insert(path.to_path_buf());
        }
    }

    /// NB: a path stays linked while another item at it carries the same link; `relink` re-adds those.
    fn unlink(&mut self, path: &Path, links: &[Link]) {
        for link in links {
            if let Some(paths) = self.links.get_mut(link) {
                paths.remove(path);
                if paths.is_empty() {
                    self.links.remove(link);
                }
            }
        }
    }

    /// Links every item still at `path` again (after one of them was removed).
    fn relink(&mut self, path: &Path) {
        let mut links: Vec<Link> = Vec::new();
        if let Some(d) = self.disks.get(path) {
            links.extend(d.links.iter().cloned());
        }
        for uid in self.pvs_at.get(path).into_iter().flatten() {
            links.extend(self.pvs[uid].links.iter().cloned());
        }
        self.link(path, &links);
    }

    /// Plans the part of the world a change can concern; `None` when the pass must plan whole.
    fn plan_part(&mut self, inputs: &Inputs<'_>) -> Option<(Plan, Work)> {
        let owners = inputs.owners;
        if !self.global.same(inputs)
            || *inputs.memory != self.memory
            || !owners.recorded
            || !owners.creating.is_empty()
        {
            return None;
        }
        let changes = self.diff(inputs)?;
        let dirty = self.close(changes.dirty, &changes.links);
        // The world from here on is the new one: the part is read from it.
        self.apply(
            inputs,
            changes.pvs,
            changes.gone_pvs,
            changes.disks,
            changes.gone_disks,
        );
        self.unknown = changes.unknown;
        self.unhealthy = inputs.found.unhealthy.clone();
        self.cordoned = inputs.found.cordoned.clone();
        // The copies follow the inputs key by key: a pass that changed one disk's state copies one entry.
        for key in changes.ledger {
            match inputs.ledger.get(&key) {
                Some(state) => self.ledger.set(&key, state),
                None => {
                    self.ledger.disks.remove(&key);
                }
            }
        }
        for uid in changes.owned {
            match owners.pvs.get(&uid) {
                Some(pv) => self.owned.insert(uid, pv.clone()),
                None => self.owned.remove(&uid),
            };
        }
        let part_pvs: Vec<Arc<PersistentVolume>> = dirty
            .iter()
            .filter_map(|p| self.pvs_at.get(p))
            .flatten()
            .map(|uid| self.pvs[uid].pv.clone())
            .collect();
        let found = Discovery {
            disks: dirty
                .iter()
                .filter_map(|p| self.disks.get(p))
                .map(|d| d.disk.clone())
                .collect(),
            unusable: unusable_at(inputs.found, &dirty),
            failed_classes: inputs.found.failed_classes.clone(),
            unhealthy: unhealthy_at(inputs.found, &dirty),
            cordoned: inputs.found.cordoned.clone(),
        };
        let part = Inputs {
            found: &found,
            existing: &part_pvs,
            cluster: inputs.cluster.map(|_| part_pvs.as_slice()),
            ..*inputs
        };
        let (plan, noisy) = decide::Planner::new(&part, Scope::Part).run_traced();
        let work = Work {
            pvs: part_pvs.len(),
            disks: found.disks.len(),
            whole: false,
        };
        self.call = inputs.changes.map(|c| c.call);
        Some((self.merge(plan, noisy, &dirty, &changes.gone_uids), work))
    }

    /// What changed since the last pass, as paths, and the new state of what changed.
    fn diff<'i>(&self, inputs: &Inputs<'i>) -> Option<Diff<'i>> {
        let mut c = Diff::default();
        let known = known_pvs(inputs);
        if inputs.owners.pvs.len() != known.len() {
            // An owner without its PV (ForgetOwner is decided whole), or a PV not recorded as ours.
            return None;
        }
        let mut kept = 0;
        for pv in known {
            // NB: the very object seen last pass has the UID and resourceVersion it had then.
            if self.pv_addresses.contains(&address(pv)) {
                kept += 1;
                continue;
            }
            let uid = pv.metadata.uid.as_deref()?;
            let rv = pv.metadata.resource_version.as_deref().unwrap_or_default();
            match self.pvs.get(uid) {
                Some(seen) if seen.resource_version == rv => kept += 1,
                seen => {
                    let (uid, view) = owned_view(inputs, pv)?;
                    kept += usize::from(seen.is_some());
                    if let Some(seen) = seen {
                        c.dirty.insert(seen.path.clone());
                    }
                    c.dirty.insert(view.path.clone());
                    c.links
                        .extend(pv_links(&view).into_iter().map(|l| (l, view.path.clone())));
                    c.pvs.push((uid, pv, view));
                }
            }
        }
        if kept < self.pvs.len() {
            let present: FastSet<&str> = inputs
                .existing
                .iter()
                .chain(inputs.cluster.into_iter().flatten())
                .filter_map(|pv| pv.metadata.uid.as_deref())
                .collect();
            for (uid, seen) in &self.pvs {
                if !present.contains(uid.as_str()) {
                    c.dirty.insert(seen.path.clone());
                    c.gone_pvs.push(uid.clone());
                }
            }
        }
        // The keys the shell says it changed since the call that left this state; otherwise one walk of both maps.
        let told = inputs.changes.filter(|c| self.call == Some(c.since));
        // NB: paths compared as bytes: a path spelled otherwise only counts as a change.
        let same_owned =
            |a: &OwnedPv, b: &OwnedPv| a.name == b.name && a.path.as_os_str() == b.path.as_os_str();
        let owned: Vec<String> = match told {
            Some(told) => told
                .owners
                .iter()
                .filter(|uid| {
                    value_changed(
                        self.owned.get(*uid),
                        inputs.owners.pvs.get(*uid),
                        same_owned,
                    )
                })
                .cloned()
                .collect(),
            None => changed_keys_by(&self.owned, &inputs.owners.pvs, same_owned)
                .into_iter()
                .cloned()
                .collect(),
        };
        // Every PV is ours by UID (checked above for the changed ones; the counts match): a UID that left the
        // owners while its PV stayed makes the world unclean.
        for uid in &owned {
            if !inputs.owners.pvs.contains_key(uid) && self.pvs.contains_key(uid) {
                return None;
            }
        }
        c.owned = owned;
        c.gone_uids = c.gone_pvs.clone();
        c.gone_uids
            .extend(c.pvs.iter().map(|(uid, ..)| uid.clone()));
        self.diff_disks(inputs, &mut c)?;
        c.unknown = unknown_paths(inputs.found);
        c.dirty
            .extend(c.unknown.symmetric_difference(&self.unknown).cloned());
        if inputs.found.cordoned != self.cordoned {
            let now: BTreeSet<&PathBuf> = inputs.found.cordoned.iter().collect();
            let was: BTreeSet<&PathBuf> = self.cordoned.iter().collect();
            c.dirty
                .extend(now.symmetric_difference(&was).map(|p| (*p).clone()));
        }
        if inputs.found.unhealthy != self.unhealthy {
            let paths = |list: &[crate::disk::DiskHealth]| -> BTreeSet<PathBuf> {
                list.iter().map(|h| h.host_path.clone()).collect()
            };
            let (now, was) = (paths(&inputs.found.unhealthy), paths(&self.unhealthy));
            c.dirty.extend(now.union(&was).cloned());
        }
        let ledger: Vec<String> = match told {
            Some(told) => told
                .ledger
                .iter()
                .filter(|key| self.ledger.get(key) != inputs.ledger.get(key))
                .cloned()
                .collect(),
            None => changed_keys(&self.ledger.disks, &inputs.ledger.disks)
                .into_iter()
                .cloned()
                .collect(),
        };
        for key in &ledger {
            let link = Link::Ledger(key.clone());
            c.dirty
                .extend(self.links.get(&link).into_iter().flatten().cloned());
            c.dirty.extend(
                c.links
                    .iter()
                    .filter(|(l, _)| *l == link)
                    .map(|(_, p)| p.clone()),
            );
        }
        c.ledger = ledger;
        c.dirty.extend(self.noisy.iter().cloned());
        Some(c)
    }

    fn diff_disks<'i>(&self, inputs: &Inputs<'i>, c: &mut Diff<'i>) -> Option<()> {
        let found = &inputs.found.disks;
        // NB: a disk the pass hands over again unchanged is the same allocation: found by its address, its path
        // never hashed. Only the others are looked up by path.
        let mut addresses: FastSet<usize> = FastSet::default();
        addresses.reserve(found.len());
        let mut kept = 0;
        let mut others: Vec<&'i Arc<Disk>> = Vec::new();
        for disk in found {
            if !addresses.insert(address(disk)) {
                // One disk twice: the general planner keeps one of them; plan whole.
                return None;
            }
            if self.disk_addresses.contains(&address(disk)) {
                kept += 1;
            } else {
                others.push(disk);
            }
        }
        let mut new_paths: FastSet<&Path> = FastSet::default();
        for disk in others {
            if !new_paths.insert(disk.host_path.as_path()) {
                // Two disks at one path: plan whole.
                return None;
            }
            match self.disks.get(&disk.host_path) {
                // The disk seen at this path is handed over too: two disks at one path.
                Some(seen) if addresses.contains(&address(&seen.disk)) => return None,
                Some(seen) if seen.disk == *disk => kept += 1,
                seen => {
                    kept += usize::from(seen.is_some());
                    c.dirty.insert(disk.host_path.clone());
                    let links = disk_links(inputs, disk);
                    c.links
                        .extend(links.into_iter().map(|l| (l, disk.host_path.clone())));
                    c.disks.push(disk);
                }
            }
        }
        if kept < self.disks.len() {
            let paths: FastSet<&Path> = found.iter().map(|d| d.host_path.as_path()).collect();
            for path in self.disks.keys() {
                if !paths.contains(path.as_path()) {
                    c.dirty.insert(path.clone());
                    c.gone_disks.push(path.clone());
                }
            }
        }
        Some(())
    }

    /// The dirty paths and every path linked to one of them, old links and new.
    fn close(&self, dirty: BTreeSet<PathBuf>, new: &[(Link, PathBuf)]) -> BTreeSet<PathBuf> {
        let mut by_link: FastMap<&Link, Vec<&PathBuf>> = FastMap::default();
        let mut links_at: FastMap<&Path, Vec<&Link>> = FastMap::default();
        for (link, path) in new {
            by_link.entry(link).or_default().push(path);
            links_at.entry(path.as_path()).or_default().push(link);
        }
        closure(dirty, |path| {
            let old = self
                .disks
                .get(path)
                .map(|d| d.links.as_slice())
                .into_iter()
                .flatten()
                .chain(
                    self.pvs_at
                        .get(path)
                        .into_iter()
                        .flatten()
                        .flat_map(|uid| self.pvs[uid].links.iter()),
                );
            let new = links_at.get(path.as_path()).into_iter().flatten().copied();
            old.chain(new)
                .flat_map(|link| {
                    let linked = self.links.get(link).into_iter().flatten();
                    linked.chain(by_link.get(link).into_iter().flatten().copied())
                })
                .cloned()
                .collect()
        })
    }

    fn apply(
        &mut self,
        inputs: &Inputs<'_>,
        pvs: Vec<(String, &Arc<PersistentVolume>, PvView)>,
        gone_pvs: Vec<String>,
        disks: Vec<&Arc<Disk>>,
        gone_disks: Vec<PathBuf>,
    ) {
        let mut touched: BTreeSet<PathBuf> = BTreeSet::new();
        for uid in gone_pvs.iter().chain(pvs.iter().map(|(uid, ..)| uid)) {
            if let Some(seen) = self.pvs.get(uid) {
                touched.insert(seen.path.clone());
            }
            self.remove_pv(uid);
        }
        for path in gone_disks.iter().chain(disks.iter().map(|d| &d.host_path)) {
            touched.insert(path.clone());
            self.remove_disk(path);
        }
        for path in &touched {
            self.relink(path);
        }
        for (uid, pv, view) in pvs {
            self.add_pv(uid, pv, view);
        }
        for disk in disks {
            self.add_disk(inputs, disk);
        }
    }

    /// The part's plan with the holds and memory of everything outside `dirty`.
    fn merge(
        &mut self,
        part: Plan,
        noisy: BTreeSet<PathBuf>,
        dirty: &BTreeSet<PathBuf>,
        gone_uids: &[String],
    ) -> Plan {
        for path in dirty {
            self.unpublished.remove(path);
            self.noisy.remove(path);
        }
        for u in &part.unpublished {
            self.unpublished
                .entry(u.host_path.clone())
                .or_default()
                .push(u.clone());
        }
        self.noisy.extend(noisy);
        let planned: Vec<&String> = dirty
            .iter()
            .filter_map(|p| self.pvs_at.get(p))
            .flatten()
            .chain(gone_uids)
            .collect();
        for uid in planned {
            self.memory.conditions.remove(uid);
            self.memory.missing_since.remove(uid);
        }
        let mut memory = std::mem::take(&mut self.memory);
        memory.conditions.extend(part.memory.conditions);
        memory.missing_since.extend(part.memory.missing_since);
        self.memory = memory.clone();
        Plan {
            actions: part.actions,
            memory,
            unpublished: self.unpublished.values().flatten().cloned().collect(),
            requeue_after: part.requeue_after,
            needs_cluster_list: part.needs_cluster_list,
        }
    }
}

/// What [`LastPass::diff`] found.
#[derive(Default)]
struct Diff<'i> {
    dirty: BTreeSet<PathBuf>,
    /// Links of the changed items, with their paths.
    links: Vec<(Link, PathBuf)>,
    pvs: Vec<(String, &'i Arc<PersistentVolume>, PvView)>,
    gone_pvs: Vec<String>,
    /// UIDs whose memory is decided again: PVs gone or changed.
    gone_uids: Vec<String>,
    disks: Vec<&'i Arc<Disk>>,
    gone_disks: Vec<PathBuf>,
    unknown: FastSet<PathBuf>,
    /// Ledger keys whose state changed (or appeared, or went).
    ledger: Vec<String>,
    /// Owner UIDs whose record changed (or appeared, or went).
    owned: Vec<String>,
}

/// The unusable entries found at `paths`.
/// The health reports of `found` at `paths`.
pub fn unhealthy_at(found: &Discovery, paths: &BTreeSet<PathBuf>) -> Vec<crate::disk::DiskHealth> {
    found
        .unhealthy
        .iter()
        .filter(|h| paths.contains(&h.host_path))
        .cloned()
        .collect()
}

pub fn unusable_at(found: &Discovery, paths: &BTreeSet<PathBuf>) -> Vec<Unusable> {
    found
        .unusable
        .iter()
        .filter(|u| paths.contains(&u.host_path))
        .cloned()
        .collect()
}

/// `start` and every path `next` reaches from one in it, transitively.
pub fn closure(
    start: BTreeSet<PathBuf>,
    next: impl Fn(&PathBuf) -> Vec<PathBuf>,
) -> BTreeSet<PathBuf> {
    let mut closed = start.clone();
    let mut queue: Vec<PathBuf> = start.into_iter().collect();
    while let Some(path) = queue.pop() {
        for other in next(&path) {
            if closed.insert(other.clone()) {
                queue.push(other);
            }
        }
    }
    closed
}

/// Keys whose value differs between two maps (present in one only, or with another value), in one walk of both.
pub fn changed_keys<'a, K: Ord, V: PartialEq>(
    old: &'a BTreeMap<K, V>,
    new: &'a BTreeMap<K, V>,
) -> BTreeSet<&'a K> {
    changed_keys_by(old, new, V::eq)
}

/// [`changed_keys`] with values compared by `same`.
pub fn changed_keys_by<'a, K: Ord, V>(
    old: &'a BTreeMap<K, V>,
    new: &'a BTreeMap<K, V>,
    same: impl Fn(&V, &V) -> bool,
) -> BTreeSet<&'a K> {
    let mut changed = BTreeSet::new();
    let (mut a, mut b) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    changed.insert(*ka);
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    changed.insert(*kb);
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if !same(va, vb) {
                        changed.insert(*ka);
                    }
                    a.next();
                    b.next();
                }
            },
            (Some((ka, _)), None) => {
                changed.insert(*ka);
                a.next();
            }
            (None, Some((kb, _))) => {
                changed.insert(*kb);
                b.next();
            }
            (None, None) => return changed,
        }
    }
}

/// Whether one key's value differs between two maps' lookups: it appeared, it went, or `same` says it changed.
fn value_changed<V>(old: Option<&V>, new: Option<&V>, same: impl Fn(&V, &V) -> bool) -> bool {
    match (old, new) {
        (Some(a), Some(b)) => !same(a, b),
        (None, None) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests;
