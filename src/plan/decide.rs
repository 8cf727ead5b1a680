//! The planning pass: every owned PV is judged against the disk at its path, then every found disk without a PV
//! is published, wiped first, or held back.
//!
//! NB: over 500 lines because every rule reads and writes the one `Planner` (its remembered conditions, its writes,
//! the disks already placed); the rules themselves are split by subject under `decide/` (own, place, duplicate,
//! in use, overlap, unhealthy), and this file keeps the order they run in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::identity::{self, IdentityCheck};
use super::owners::OtherPv;
use super::pv::{MetaPatch, Origin, PvRef, PvView, ReclaimPolicy, lifetime};
use super::relation::{self, PvsByLink};
use super::state::{Condition, DiskState, Memory};
use super::{
    Action, ClassFacts, EventType, HoldReason, Inputs, Plan, PvEvent, Reason, Unpublished,
    WipeOrder,
};
use crate::contract::{
    ANN_NODE_UID, ANN_WIPE_LIFETIME, ANN_WIPE_PHASE, NODE_LABEL, Phase, WipePhase,
};
use crate::disk::{Disk, UnusableReason, VolumeMode};

/// How soon to look again when something is waiting on our own writes.
const SOON: Duration = Duration::from_secs(1);

mod duplicate;
mod in_use;
mod overlap;
mod own;
mod place;
mod unhealthy;

#[cfg(all(test, debug_assertions))]
mod tests;

pub(super) struct Planner<'a> {
    inputs: &'a Inputs<'a>,
    /// Shared, so judging one PV can read the others (overlaps, twins).
    pvs: std::sync::Arc<[PvView]>,
    /// Where to find `pvs` by path, name and recorded identity (indices, in `pvs` order).
    index: PvsByLink,
    /// PVs that are not ours (see `own`).
    others: Vec<OtherPv>,
    /// The storage each PV and disk exposes, by device (see `overlap`).
    footprints: overlap::Footprints<'a>,
    /// The found disks by strong id (see `duplicate`).
    twins: duplicate::Twins<'a>,
    /// Found disks that are not healthy, by path (see `unhealthy`).
    unhealthy: BTreeMap<&'a Path, &'a crate::disk::DiskHealth>,
    needs_cluster: bool,
    disks: BTreeMap<&'a Path, &'a Disk>,
    unknown_paths: BTreeSet<&'a Path>,
    failed_classes: BTreeSet<&'a str>,
    writes: Vec<Action>,
    events: Vec<Action>,
    memory: Memory,
    unpublished: Vec<Unpublished>,
    requeue_after: Option<Duration>,
    ledger_set: BTreeSet<String>,
    deleted: BTreeSet<String>,
    /// Calls that ask for another pass (a requeue, a wish for the cluster list): with `writes` and `events`, what
    /// tells an item that needs planning again from one that is settled.
    asks: usize,
    /// Paths of the PVs and disks whose decision wrote, reported, or asked for another pass.
    noisy: BTreeSet<PathBuf>,
    /// The path whose PVs or disk are being decided, and every path's links: a read of another path checks the
    /// relation (debug builds, see `relation`).
    #[cfg(debug_assertions)]
    deciding: Option<PathBuf>,
    #[cfg(debug_assertions)]
    reach: relation::Reach,
}

/// How much of the world a run plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scope {
    /// Every PV and disk: the general planner.
    Whole,
    /// Only the PVs and disks given, every other one settled (`incremental`): what concerns the ownership records
    /// as a whole (owners gone from the cluster) is not decided.
    Part,
}

impl<'a> Planner<'a> {
    pub(super) fn new(inputs: &'a Inputs<'a>, scope: Scope) -> Self {
        let split = own::split(inputs, scope);
        let found = inputs.found;
        let disks: BTreeMap<&Path, &Disk> = found
            .disks
            .iter()
            .map(|d| (d.host_path.as_path(), &**d))
            .collect();
        Planner {
            inputs,
            #[cfg(debug_assertions)]
            deciding: None,
            #[cfg(debug_assertions)]
            reach: relation::Reach::new(inputs, &split.pvs, disks.values().copied()),
            index: PvsByLink::new(&split.pvs),
            footprints: overlap::Footprints::new(&split.pvs, &disks),
            twins: duplicate::Twins::new(disks.values()),
            unhealthy: found
                .unhealthy
                .iter()
                .map(|h| (h.host_path.as_path(), h))
                .collect(),
            pvs: split.pvs.into(),
            others: split.others,
            needs_cluster: false,
            disks,
            unknown_paths: found
                .unusable
                .iter()
                .filter(|u| u.reason == UnusableReason::ProbeFailed)
                .map(|u| u.host_path.as_path())
                .collect(),
            failed_classes: found
                .failed_classes
                .iter()
                .map(|f| f.class.as_str())
                .collect(),
            writes: split.writes,
            events: Vec::new(),
            memory: Memory::default(),
            unpublished: Vec::new(),
            requeue_after: None,
            ledger_set: BTreeSet::new(),
            deleted: BTreeSet::new(),
            asks: 0,
            noisy: BTreeSet::new(),
        }
    }

    pub(super) fn run(self) -> Plan {
        self.run_traced().0
    }

    /// The plan, and the paths of the PVs and disks whose decision wrote, reported an Event or asked for another
    /// pass: all the others decided nothing but their standing conditions and hold reasons.
    pub(super) fn run_traced(mut self) -> (Plan, BTreeSet<PathBuf>) {
        let pvs = self.pvs.clone();
        for pv in pvs.iter() {
            let before = self.marks();
            self.deciding(Some(&pv.path));
            self.judge_pv(pv);
            self.trace(before, &pv.path);
        }
        let disks: Vec<&Disk> = self.disks.values().copied().collect();
        for disk in disks {
            let before = self.marks();
            self.deciding(Some(&disk.host_path));
            self.place_disk(disk);
            self.trace(before, &disk.host_path);
        }
        // NB: foreign PVs make the world unclean: the incremental planner plans whole while any exists.
        self.deciding(None);
        self.report_foreign();
        let mut actions = self.writes;
        actions.append(&mut self.events);
        let plan = Plan {
            actions,
            memory: self.memory,
            unpublished: self.unpublished,
            requeue_after: self.requeue_after,
            needs_cluster_list: self.needs_cluster,
        };
        (plan, self.noisy)
    }

    fn marks(&self) -> (usize, usize, usize) {
        (self.writes.len(), self.events.len(), self.asks)
    }

    fn trace(&mut self, before: (usize, usize, usize), path: &Path) {
        if self.marks() != before {
            self.noisy.insert(path.to_path_buf());
        }
    }

    // ---- PVs ----

    fn judge_pv(&mut self, pv: &PvView) {
        // PVs outside every configured discovery directory are not ours to manage (any more).
        let Some(class) = self.class_for_path(&pv.path) else {
            return;
        };
        if self.failed_classes.contains(class.config.name.as_str())
            || self.unknown_paths.contains(pv.path.as_path())
        {
            self.carry_memory(&pv.pv_ref.uid);
            return;
        }
        let disk = self.disk_at(&pv.path);
        if pv.origin == Origin::Reference {
            self.adopt(pv, disk, class);
            return;
        }
        let check = disk.map(|d| identity::check(pv.mode, pv.recorded.as_ref(), d));
        self.track_dirty(pv, disk, check.as_ref());
        if pv.deleting {
            return;
        }
        if pv.phase == Phase::Released
            && pv.policy == ReclaimPolicy::Delete
            && pv.wipe == WipePhase::Wiped
        {
            self.delete(pv);
            return;
        }
        self.reclaim_policy_conditions(pv);
        if pv.is_unclaimed() && disk.is_some() && self.pv_overlaps(pv, disk) {
            return;
        }
        // NB: health needs only a weak match (same device, no id refuting it): a raw device that is gone has lost
        // the ids it could confirm itself with (a detached loop device's backing file, a pulled drive's serial),
        // and telling the tenant or withdrawing an unclaimed PV is safe on a weak match. Cordons and held devices
        // keep the strong one.
        let maybe_same =
            disk.is_some_and(|d| identity::may_be_same(pv.mode, pv.recorded.as_ref(), d));
        if let Some(disk) = disk
            && maybe_same
            && (self.pv_on_unhealthy_disk(pv, disk)
                || check == Some(IdentityCheck::Same)
                    && (self.pv_on_cordoned_disk(pv, disk) || self.pv_on_held_device(pv, disk)))
        {
            return;
        }
        match (disk, check) {
            (Some(_), Some(IdentityCheck::Changed(what))) => self.identity_changed(pv, &what),
            (Some(disk), Some(check)) => self.disk_present(pv, disk, check, class),
            _ => self.disk_missing(pv),
        }
    }

    fn adopt(&mut self, pv: &PvView, disk: Option<&Disk>, class: &ClassFacts) {
        let mut annotations = match disk {
            // NB: a disk that can carry the agent's volume id and has none (a tmpfs) is tagged now and its identity
            // recorded in the next pass (NotRecorded): recorded now, a device number alone would refuse every wipe.
            // A reference PV publishing a raw device as a Filesystem PV: recorded as the device it is.
            Some(disk)
                if disk.mode == VolumeMode::Block && pv.published_as == VolumeMode::Filesystem =>
            {
                identity::annotations_as(disk, pv.published_as)
            }
            Some(disk) if disk.mode == pv.mode && identity::wants_volume_id(disk) => {
                self.writes.push(Action::TagVolume {
                    host_path: disk.host_path.clone(),
                    path: process_path(class, &disk.host_path),
                });
                BTreeMap::new()
            }
            Some(disk) if disk.mode == pv.mode => identity::annotations(disk),
            _ => BTreeMap::new(),
        };
        // NB: the identity recorded now is the disk found here: the PV's disk is under this Node.
        if !annotations.is_empty() && !self.inputs.node.uid.is_empty() {
            annotations.insert(ANN_NODE_UID.to_string(), self.inputs.node.uid.clone());
        }
        let patch = MetaPatch {
            uid: pv.pv_ref.uid.clone(),
            resource_version: Some(pv.pv_ref.resource_version.clone()),
            labels: BTreeMap::from([(NODE_LABEL.to_string(), self.inputs.node.name.clone())]),
            annotations,
        };
        // NB: the owner is recorded before the label is added: a crash in between adopts again on the next start,
        // whereas a labelled PV without a recorded owner would be foreign for good.
        self.writes.push(own::record_owner(pv));
        self.writes.push(Action::AdoptPv {
            name: pv.pv_ref.name.clone(),
            patch,
        });
        let message =
            "adopted from the reference provisioner: the PV and its disk are left as they are"
                .to_string();
        self.event(&pv.pv_ref, EventType::Normal, Reason::Adopted, message);
        self.requeue(SOON);
    }

    /// A PV holding a tenant's data marks its disk in the ledger, so a hand-deleted PV cannot leak it; an unclaimed
    /// one marks it `Published` (PVs from before that state existed), so a PV deleted behind the agent's back
    /// cannot either.
    fn track_dirty(&mut self, pv: &PvView, disk: Option<&Disk>, check: Option<&IdentityCheck>) {
        if pv.is_unclaimed() {
            let key = self.pv_key(pv, disk, check);
            if matches!(self.ledger(&key), None | Some(DiskState::Clean)) {
                self.set_disk_state(key, DiskState::Published);
            }
            return;
        }
        if !pv.holds_data() {
            return;
        }
        let state = if pv.policy == ReclaimPolicy::Retain {
            DiskState::Retained
        } else {
            DiskState::Dirty
        };
        let key = self.pv_key(pv, disk, check);
        self.set_disk_state(key, state);
    }

    /// The ledger key of the disk a PV was created for.
    fn pv_key(&self, pv: &PvView, disk: Option<&Disk>, check: Option<&IdentityCheck>) -> String {
        match (&pv.recorded, disk, check) {
            (Some(rec), _, _) => {
                identity::ledger_key(pv.mode, &rec.identity, rec.mount_root.as_deref(), &pv.path)
            }
            (None, Some(disk), Some(IdentityCheck::NotRecorded)) => identity::disk_key(disk),
            _ => format!("path:{}", pv.path.display()),
        }
    }

    fn reclaim_policy_conditions(&mut self, pv: &PvView) {
        if pv.phase != Phase::Released {
            return;
        }
        let path = pv.path.display();
        match &pv.policy {
            ReclaimPolicy::Delete => {}
            ReclaimPolicy::Retain => {
                let message = format!("reclaim policy Retain: {path} is left untouched");
                self.condition(
                    pv,
                    Condition::Retained,
                    EventType::Normal,
                    Reason::VolumeRetained,
                    message,
                );
            }
            ReclaimPolicy::Other(policy) => {
                let message = format!(
                    "reclaim policy {policy} is not supported for local volumes: {path} is left untouched"
                );
                let (cond, why) = (
                    Condition::UnsupportedPolicy,
                    Reason::ReclaimPolicyUnsupported,
                );
                self.condition(pv, cond, EventType::Warning, why, message);
            }
        }
    }

    fn disk_missing(&mut self, pv: &PvView) {
        let uid = &pv.pv_ref.uid;
        if pv.is_unclaimed() {
            let grace = self.inputs.config.missing_disk_grace_period;
            let since = self
                .inputs
                .memory
                .missing_since
                .get(uid)
                .copied()
                .unwrap_or(self.inputs.now);
            let elapsed = self.inputs.now.duration_since(since).unwrap_or_default();
            if elapsed >= grace {
                // NB: said as an Event, not only logged: the PV object is gone afterwards, and an operator looking
                // for a vanished disk looks at `kubectl get events`.
                let message = format!(
                    "the disk at {} is gone; this unclaimed PV is deleted so no claim is bound to it",
                    pv.path.display()
                );
                self.event(&pv.pv_ref, EventType::Warning, Reason::DiskMissing, message);
                self.delete(pv);
            } else {
                self.memory.missing_since.insert(uid.clone(), since);
                self.requeue(grace - elapsed);
            }
            return;
        }
        let message = format!(
            "the disk at {} is gone; the PV is kept because it is {:?}",
            pv.path.display(),
            pv.phase
        );
        self.condition(
            pv,
            Condition::DiskMissing,
            EventType::Warning,
            Reason::DiskMissing,
            message,
        );
    }

    fn identity_changed(&mut self, pv: &PvView, what: &str) {
        let path = pv.path.display();
        if pv.is_unclaimed() {
            // Nobody uses it: replace it with a PV describing the disk that is there now.
            self.delete(pv);
            return;
        }
        let message = format!(
            "{path} now holds a different disk ({what}); this {:?} PV is left untouched",
            pv.phase
        );
        let why = Reason::DiskIdentityChanged;
        self.condition(
            pv,
            Condition::IdentityChanged,
            EventType::Warning,
            why,
            message,
        );
        if pv.phase == Phase::Released && pv.policy == ReclaimPolicy::Delete {
            let message = format!("not wiping {path}: {what}; the PV stays Released");
            self.condition(
                pv,
                Condition::WipeRefused,
                EventType::Warning,
                Reason::WipeRefused,
                message,
            );
        }
    }

    fn disk_present(&mut self, pv: &PvView, disk: &Disk, check: IdentityCheck, class: &ClassFacts) {
        let mut annotations = match check {
            IdentityCheck::NotRecorded => identity::annotations(disk),
            _ => BTreeMap::new(),
        };
        // NB: only the PV's own disk (same identity) moves the PV to this Node's UID: that is what tells recovery a
        // re-created Node still holds the data (`crate::recovery`). A disk neither confirmed nor refuted moves
        // nothing; a PV recording no identity gets its UID with its identity, in the same patch.
        let node_uid = &self.inputs.node.uid;
        if matches!(check, IdentityCheck::Same | IdentityCheck::NotRecorded)
            && !node_uid.is_empty()
            && pv.node_uid.as_ref() != Some(node_uid)
        {
            annotations.insert(ANN_NODE_UID.to_string(), node_uid.clone());
        }
        if !annotations.is_empty() {
            let patch = MetaPatch {
                uid: pv.pv_ref.uid.clone(),
                resource_version: None,
                annotations,
                ..MetaPatch::default()
            };
            self.writes.push(Action::RecordIdentity {
                name: pv.pv_ref.name.clone(),
                patch,
            });
        }
        if self
            .inputs
            .memory
            .had(&pv.pv_ref.uid, Condition::DiskMissing)
        {
            let message = format!("the disk at {} is back", pv.path.display());
            self.event(&pv.pv_ref, EventType::Normal, Reason::DiskReturned, message);
        }
        match pv.phase {
            Phase::Pending | Phase::Unknown | Phase::Available
                if pv.class != class.config.name
                    || pv.mode != disk.mode
                    || pv.published_as != class.config.volume_mode =>
            {
                // The class configuration for this directory changed; nobody uses the PV, so re-publish.
                self.delete(pv);
            }
            Phase::Released if pv.policy == ReclaimPolicy::Delete => {
                self.reclaim(pv, disk, check, class)
            }
            _ => {}
        }
    }

    fn reclaim(&mut self, pv: &PvView, disk: &Disk, check: IdentityCheck, class: &ClassFacts) {
        match check {
            IdentityCheck::Same => {
                if let Some(other) = self.foreign_on(disk) {
                    let message = format!(
                        "not wiping {}: PV {}, which localpv did not create or adopt, reaches this disk; the PV \
                         stays Released while it exists",
                        pv.path.display(),
                        other.pv_ref.name
                    );
                    let why = Reason::WipeRefused;
                    self.condition(pv, Condition::WipeRefused, EventType::Warning, why, message);
                    return;
                }
                if self.pv_overlaps(pv, Some(disk)) || self.wipe_refused_for_twin(pv, disk) {
                    return;
                }
                if !self.listed() {
                    return;
                }
                let order = self.wipe_order(pv, disk, class);
                self.writes.push(Action::Wipe(Box::new(order)));
            }
            IdentityCheck::Unverifiable => {
                let message = format!(
                    "not wiping {}: no id this PV recorded can confirm the disk there is its disk (a device number \
                     alone never can); the PV stays Released: wipe it by hand and delete the PV",
                    pv.path.display()
                );
                self.condition(
                    pv,
                    Condition::WipeRefused,
                    EventType::Warning,
                    Reason::WipeRefused,
                    message,
                );
            }
            // Identity is recorded in this pass; the wipe follows in the next.
            IdentityCheck::NotRecorded => self.requeue(SOON),
            IdentityCheck::Changed(_) => {}
        }
    }

    fn wipe_order(&self, pv: &PvView, disk: &Disk, class: &ClassFacts) -> WipeOrder {
        let uid = &pv.pv_ref.uid;
        let lifetime = lifetime(uid, pv.claim_uid.as_deref());
        let phase_patch = |phase: WipePhase, rv: Option<String>| MetaPatch {
            uid: uid.clone(),
            resource_version: rv,
            annotations: BTreeMap::from([
                (
                    ANN_WIPE_PHASE.to_string(),
                    phase.as_str().unwrap_or_default().to_string(),
                ),
                (ANN_WIPE_LIFETIME.to_string(), lifetime.clone()),
            ]),
            ..MetaPatch::default()
        };
        let (expected, expected_mount_root) = match &pv.recorded {
            Some(rec) => (rec.identity.clone(), rec.mount_root.clone()),
            None => (disk.identity.clone(), disk.mount_root.clone()),
        };
        WipeOrder {
            key: self.pv_key(pv, Some(disk), None),
            pv: Some(pv.pv_ref.clone()),
            class: class.config.name.clone(),
            host_path: pv.path.clone(),
            path: process_path(class, &pv.path),
            method: class.config.wipe_for(pv.mode),
            expected,
            expected_mount_root,
            on_start: Some(phase_patch(
                WipePhase::Wiping,
                Some(pv.pv_ref.resource_version.clone()),
            )),
            on_success: Some(phase_patch(WipePhase::Wiped, None)),
        }
    }

    // ---- reads of the pass's world (see `relation`) ----

    fn deciding(&mut self, _path: Option<&Path>) {
        #[cfg(debug_assertions)]
        {
            self.deciding = _path.map(Path::to_path_buf);
        }
    }

    /// Checks, in debug builds, that the decision at hand may read what is at `path`.
    fn reads(&self, _path: &Path) {
        #[cfg(debug_assertions)]
        if let Some(from) = &self.deciding {
            assert!(
                self.reach.reaches(from, _path),
                "the decision at {} read {}, which shares no link with it (plan::relation): the incremental \
                 planner would not plan it again when that changes",
                from.display(),
                _path.display()
            );
        }
    }

    /// The PV at `i` in the pass's order.
    fn pv(&self, i: usize) -> &PvView {
        let pv = &self.pvs[i];
        self.reads(&pv.path);
        pv
    }

    /// The disk found at `path`.
    fn disk_at(&self, path: &Path) -> Option<&'a Disk> {
        self.reads(path);
        self.disks.get(path).copied()
    }

    /// The PVs at `path`.
    fn pvs_at(&self, path: &Path) -> impl Iterator<Item = &PvView> {
        self.reads(path);
        self.index.at_path(path).iter().map(|&i| &self.pvs[i])
    }

    /// The ledger's state for `key`.
    fn ledger(&self, key: &str) -> Option<DiskState> {
        #[cfg(debug_assertions)]
        if let Some(from) = &self.deciding {
            assert!(
                self.reach.reads_key(from, key),
                "the decision at {} read ledger key {key}, which its path does not link (plan::relation): the \
                 incremental planner would not plan it again when that key changes",
                from.display()
            );
        }
        self.inputs.ledger.get(key)
    }

    // ---- helpers ----

    fn class_by_name(&self, name: &str) -> Option<&'a ClassFacts> {
        self.inputs.classes.iter().find(|c| c.config.name == name)
    }

    fn class_for_path(&self, path: &Path) -> Option<&'a ClassFacts> {
        let parent = path.parent()?;
        self.inputs
            .classes
            .iter()
            .find(|c| c.config.host_dir == parent)
    }

    /// Deletes a PV of ours. An unclaimed one hands its disk back as `Clean` once the API confirms the deletion.
    fn delete(&mut self, pv: &PvView) {
        if !self.deleted.insert(pv.pv_ref.uid.clone()) {
            return;
        }
        let action = if pv.is_unclaimed() {
            let disk = self.disk_at(&pv.path);
            let check = disk.map(|d| identity::check(pv.mode, pv.recorded.as_ref(), d));
            Action::DeleteUnclaimedPv {
                pv: pv.pv_ref.clone(),
                disk: self.pv_key(pv, disk, check.as_ref()),
            }
        } else {
            Action::DeletePv(pv.pv_ref.clone())
        };
        self.writes.push(action);
    }

    fn set_disk_state(&mut self, key: String, state: DiskState) {
        if self.ledger(&key) != Some(state) && self.ledger_set.insert(key.clone()) {
            self.writes.push(Action::SetDiskState { key, state });
        }
    }

    /// Records a standing condition; its Event fires only when it was not standing in the previous pass.
    fn condition(
        &mut self,
        pv: &PvView,
        condition: Condition,
        type_: EventType,
        why: Reason,
        message: String,
    ) {
        self.condition_on(&pv.pv_ref, condition, type_, why, message);
    }

    fn condition_on(
        &mut self,
        pv: &PvRef,
        condition: Condition,
        type_: EventType,
        why: Reason,
        message: String,
    ) {
        let uid = &pv.uid;
        let new_this_pass = self
            .memory
            .conditions
            .entry(uid.clone())
            .or_default()
            .insert(condition);
        if new_this_pass && !self.inputs.memory.had(uid, condition) {
            self.event(pv, type_, why, message);
        }
    }

    fn event(&mut self, pv: &PvRef, type_: EventType, reason: Reason, message: String) {
        self.events.push(Action::Event(PvEvent {
            pv: pv.clone(),
            type_,
            reason,
            message,
            claim: None,
        }));
    }

    /// The Event just planned for `pv`, if any, goes to its bound claim too (the tenant looks at the claim).
    fn tell_claim(&mut self, pv: &PvView) {
        let Some((namespace, name)) = pv.claim.clone() else {
            return;
        };
        if let Some(Action::Event(event)) = self.events.last_mut()
            && event.pv.uid == pv.pv_ref.uid
        {
            event.claim = Some(super::ClaimRef {
                namespace,
                name,
                uid: pv.claim_uid.clone(),
            });
        }
    }

    /// Keeps what was known about a PV whose disk could not be looked at in this pass.
    fn carry_memory(&mut self, uid: &str) {
        let previous = self.inputs.memory;
        if let Some(conditions) = previous.conditions.get(uid) {
            self.memory
                .conditions
                .insert(uid.to_string(), conditions.clone());
        }
        if let Some(since) = previous.missing_since.get(uid) {
            self.memory.missing_since.insert(uid.to_string(), *since);
        }
    }

    fn hold(&mut self, disk: &Disk, reason: HoldReason, message: String) {
        self.unpublished.push(Unpublished {
            class: disk.class.clone(),
            entry: disk.entry.clone(),
            host_path: disk.host_path.clone(),
            reason,
            message,
        });
    }

    fn requeue(&mut self, after: Duration) {
        self.asks += 1;
        self.requeue_after = Some(
            self.requeue_after
                .map_or(after, |current| current.min(after)),
        );
    }
}

/// The entry as this process sees it: the class's `mountDir` joined with the entry name.
fn process_path(class: &ClassFacts, host_path: &Path) -> std::path::PathBuf {
    match host_path.strip_prefix(&class.config.host_dir) {
        Ok(relative) => class.config.mount_dir.join(relative),
        Err(_) => host_path.to_path_buf(),
    }
}
