//! Plain data the shell keeps between planning passes.
//!
//! - [`DiskLedger`]: which disks have served a claim and must be wiped (or kept) before any new PV exposes them.
//!   Safety depends on it: the shell must persist it outside the PVs (a LocalDisk status, a node-local file) and
//!   apply every `SetDiskState` before acting on later passes.
//! - [`Owners`]: the UIDs of the PVs this agent created or adopted. Labels and annotations can be copied by anyone
//!   with PV rights; a UID recorded here cannot. The agent patches, wipes for or deletes only PVs listed here.
//!   Persisted in the same file as the ledger, with the same rule: applied before anything acts on it.
//! - [`Memory`]: which conditions were already reported as Events, so a resync that changes nothing says nothing.
//!   Best effort: losing it repeats each standing Event once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// What the agent remembers about one disk, independent of any PV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DiskState {
    /// It served a claim under reclaim policy Delete: wipe before publishing it again.
    Dirty,
    /// It served a claim under Retain: never wiped automatically, and not published again once its PV is gone,
    /// until an operator releases it (marks it `Clean` after dealing with the data).
    Retained,
    /// Wiped, or seen empty: may be published.
    Clean,
    /// A PV of ours exposes it and no claim was seen on it (yet). Written before the PV is created, so a crash at
    /// any instant cannot forget it. If its PV disappears without the agent deleting it as unclaimed (the agent was
    /// down, or someone deleted it by hand), nobody can say whether a claim used it meanwhile: under the class's
    /// reclaim policy Delete it is wiped before it is published again, under Retain it is kept out of the pool.
    Published,
}

/// Disk key (see `identity::ledger_key`) -> state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskLedger {
    pub disks: BTreeMap<String, DiskState>,
}

impl DiskLedger {
    pub fn get(&self, key: &str) -> Option<DiskState> {
        self.disks.get(key).copied()
    }

    pub fn set(&mut self, key: &str, state: DiskState) {
        self.disks.insert(key.to_string(), state);
    }
}

/// One PV this agent created (UID from the create response) or adopted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedPv {
    pub name: String,
    pub path: PathBuf,
}

/// The PVs this agent can prove are its own, by UID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owners {
    /// False until ownership was first recorded on this node (no ledger yet, or one written by a release that did
    /// not record owners). The first pass then takes over this node's labelled PVs once, each only if it is the one
    /// PV at its exact path (see `plan::owners`); from then on a label alone proves nothing.
    #[serde(default)]
    pub recorded: bool,
    #[serde(default)]
    pub pvs: BTreeMap<String, OwnedPv>,
    /// PVs the agent is creating, by name: written before the create request, cleared when the UID is recorded.
    /// A PV of that name at that exact path, the one PV there, is ours even if the create response was lost (a
    /// timeout, a crash right after the request).
    #[serde(default)]
    pub creating: BTreeMap<String, OwnedPv>,
}

impl Owners {
    pub fn owns(&self, uid: &str) -> bool {
        self.pvs.contains_key(uid)
    }
}

/// What the shell changed in its ledger and recorded owners between two planning calls, named by key: the
/// incremental planner follows those keys instead of comparing both maps whole (thousands of entries on a node with
/// thousands of disks). NB: the shell must name every key it changed; the agent changes them in one place
/// (`pass::record`), which names each. A planner that did not make the call `since` names compares whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateChanges {
    /// The call these changes are counted from.
    pub since: u64,
    /// This call.
    pub call: u64,
    /// Ledger keys set or removed since then (changed back or not).
    pub ledger: BTreeSet<String>,
    /// UIDs recorded in or removed from `Owners::pvs` since then.
    pub owners: BTreeSet<String>,
}

impl StateChanges {
    /// Counts the next call from the one just made.
    pub fn advance(&mut self) {
        self.since = self.call;
        self.call += 1;
        self.ledger.clear();
        self.owners.clear();
    }
}

/// A standing situation on a PV that was reported once with an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Condition {
    DiskMissing,
    IdentityChanged,
    DiskMoved,
    WipeRefused,
    Retained,
    UnsupportedPolicy,
    NameCollision,
    /// Another PV's storage, or a found disk's, nests with this PV's (see `decide::overlap`).
    StorageOverlap,
    /// Another disk answers to one of this PV's strong ids (see `decide::duplicate`).
    DuplicateIdentity,
    /// The disk under this PV shows signs of failing, or failed (see `health`).
    DiskDegraded,
    DiskFailed,
    /// A PV we do not own that carries our label or reaches one of our disks.
    Foreign,
}

/// What earlier passes reported, keyed by PV UID (a re-created PV with the same name starts afresh).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub conditions: BTreeMap<String, BTreeSet<Condition>>,
    /// When an Available PV's disk was first seen missing (for `missingDiskGracePeriod`).
    pub missing_since: BTreeMap<String, SystemTime>,
}

impl Memory {
    /// The PVs told their disk was `Degraded` or `Failed`, and which: what must outlive a restart for the all-clear
    /// (`DiskHealthy`) to reach whoever read the warning.
    pub fn health_told(&self) -> BTreeMap<String, BTreeSet<Condition>> {
        self.conditions
            .iter()
            .filter_map(|(uid, set)| {
                let told: BTreeSet<Condition> = set
                    .iter()
                    .copied()
                    .filter(|c| matches!(c, Condition::DiskDegraded | Condition::DiskFailed))
                    .collect();
                (!told.is_empty()).then(|| (uid.clone(), told))
            })
            .collect()
    }

    pub fn had(&self, uid: &str, condition: Condition) -> bool {
        self.conditions
            .get(uid)
            .is_some_and(|set| set.contains(&condition))
    }
}
