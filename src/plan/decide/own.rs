//! Ours or not: splitting a pass's PVs into the agent's own (recorded UID, or one of the two narrow doors in
//! `plan::owners`) and the others; one Event per foreign PV; the guard every wipe and every new PV passes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::{Planner, Scope};
use crate::contract::NODE_LABEL;
use crate::disk::Disk;
use crate::plan::owners::{self, OtherPv};
use crate::plan::pv::{Origin, PvView};
use crate::plan::state::{Condition, OwnedPv};
use crate::plan::{Action, EventType, Inputs, Reason};

/// The PVs of one pass, sorted by owner.
#[derive(Default)]
pub(super) struct ByOwner {
    pub(super) pvs: Vec<PvView>,
    pub(super) others: Vec<OtherPv>,
    /// Ownership records to persist before anything else runs.
    pub(super) writes: Vec<Action>,
}

/// Every PV the pass knows: the watched ones, then those only the fresh cluster list shows.
fn known_pvs<'a>(inputs: &Inputs<'a>) -> Vec<&'a PersistentVolume> {
    let mut all: Vec<&PersistentVolume> = inputs.existing.iter().map(|pv| &**pv).collect();
    let seen: BTreeSet<&str> = all
        .iter()
        .filter_map(|pv| pv.metadata.uid.as_deref())
        .collect();
    if let Some(cluster) = inputs.cluster {
        let extra = cluster
            .iter()
            .filter(|pv| pv.metadata.uid.as_deref().is_none_or(|u| !seen.contains(u)));
        all.extend(extra.map(|pv| &**pv));
    }
    all
}

pub(super) fn split(inputs: &Inputs<'_>, scope: Scope) -> ByOwner {
    let all = known_pvs(inputs);
    let node = inputs.node;
    let owners = inputs.owners;
    // Read once: the narrow doors compare each candidate with every other PV.
    let read: Vec<OtherPv> = all.iter().map(|pv| OtherPv::read(pv, node)).collect();
    let mut out = ByOwner::default();
    for (pv, other) in all.iter().zip(&read) {
        let uid = pv.metadata.uid.clone().unwrap_or_default();
        let view = PvView::read(pv, node);
        let (ours, take_over) = match &view {
            Some(v) if v.origin == Origin::Ours && owners.owns(&uid) => (true, false),
            // A create whose response was lost, or the one-time take-over of labelled PVs when owners were never
            // recorded on this node.
            Some(v) if v.origin == Origin::Ours => {
                let creating = owners
                    .creating
                    .get(&v.pv_ref.name)
                    .is_some_and(|c| c.path.as_os_str() == v.path.as_os_str());
                let ok = (creating || !owners.recorded) && sole_at_exact_path(inputs, pv, &read);
                (ok, ok)
            }
            // Adoption records the owner itself (`Planner::adopt`).
            Some(_) => (sole_at_exact_path(inputs, pv, &read), false),
            None => (false, false),
        };
        match view {
            Some(view) if ours => {
                if take_over {
                    out.writes.push(record_owner(&view));
                }
                out.pvs.push(view);
            }
            _ => out.others.push(other.clone()),
        }
    }
    if !owners.recorded {
        out.writes.push(Action::OwnersRecorded);
    }
    if inputs.cluster.is_some() && scope == Scope::Whole {
        // NB: only against a fresh list of every PV: a watch cache being rebuilt could miss a live PV of ours.
        let live: BTreeSet<&str> = all
            .iter()
            .filter_map(|pv| pv.metadata.uid.as_deref())
            .collect();
        let gone = owners.pvs.keys().filter(|uid| !live.contains(uid.as_str()));
        out.writes
            .extend(gone.map(|uid| Action::ForgetOwner { uid: uid.clone() }));
    }
    out.pvs.sort_by(|a, b| a.pv_ref.name.cmp(&b.pv_ref.name));
    out
}

pub(super) fn record_owner(pv: &PvView) -> Action {
    Action::RecordOwner {
        uid: pv.pv_ref.uid.clone(),
        pv: OwnedPv {
            name: pv.pv_ref.name.clone(),
            path: pv.path.clone(),
        },
    }
}

/// The narrow door for a PV we did not create: its path is spelled exactly as we write paths, it is an entry of
/// a configured discovery directory, and no other PV that could be mounted here exposes that path, a directory
/// above it or one inside it (a copy of a PV is never the one at its path).
fn sole_at_exact_path(inputs: &Inputs<'_>, pv: &PersistentVolume, all: &[OtherPv]) -> bool {
    let Some(raw) = owners::raw_path(pv) else {
        return false;
    };
    let path = std::path::Path::new(raw);
    let in_class_dir = path
        .parent()
        .is_some_and(|parent| inputs.classes.iter().any(|c| c.config.host_dir == parent));
    if !owners::is_canonical(raw) || !in_class_dir {
        return false;
    }
    let uid = pv.metadata.uid.as_deref().unwrap_or_default();
    !all.iter()
        .any(|other| other.pv_ref.uid != uid && other.reaches_path(path))
}

impl Planner<'_> {
    /// True when a fresh list of every PV is at hand; otherwise asks the shell for one and says no.
    pub(super) fn listed(&mut self) -> bool {
        if self.inputs.cluster.is_none() {
            self.needs_cluster = true;
            self.asks += 1;
        }
        self.inputs.cluster.is_some()
    }

    /// A PV that is not ours and reaches `disk`.
    pub(super) fn foreign_on(&self, disk: &Disk) -> Option<OtherPv> {
        self.others.iter().find(|o| o.reaches(disk)).cloned()
    }

    /// One Event per foreign PV that carries our label or reaches one of our disks or PVs' paths.
    pub(super) fn report_foreign(&mut self) {
        let others = std::mem::take(&mut self.others);
        for other in &others {
            let mut what = Vec::new();
            if other.labelled {
                what.push(format!(
                    "carries the label {NODE_LABEL}={}",
                    self.inputs.node.name
                ));
            }
            let disk = self.disks.values().find(|d| other.reaches(d));
            let path = disk.map(|d| d.host_path.clone()).or_else(|| {
                let pv = self.pvs.iter().find(|p| other.reaches_path(&p.path));
                pv.map(|p| p.path.clone())
            });
            if let Some(path) = path {
                what.push(format!("reaches the disk at {}", path.display()));
            }
            if what.is_empty() {
                continue;
            }
            let message = format!(
                "localpv on node {} did not create or adopt this PV (its UID is not in the node's ledger), yet it {}: \
                 the agent does not patch it, wipe for it or delete it, and neither wipes nor publishes a disk it \
                 reaches while it exists",
                self.inputs.node.name,
                what.join(" and ")
            );
            self.condition_on(
                &other.pv_ref,
                Condition::Foreign,
                EventType::Warning,
                Reason::ForeignPv,
                message,
            );
        }
        self.others = others;
        if self.inputs.cluster.is_none() {
            // Without the list, unlabelled foreign PVs are not seen: keep what was reported about them.
            for (uid, conditions) in &self.inputs.memory.conditions {
                if conditions.contains(&Condition::Foreign) {
                    let set = self.memory.conditions.entry(uid.clone()).or_default();
                    set.insert(Condition::Foreign);
                }
            }
        }
    }
}
