//! Plain data the shell keeps between planning passes.
//!
//! - [`DiskLedger`]: which disks have served a claim and must be wiped (or kept) before any new PV exposes them.
//!   Safety depends on it: the shell must persist it outside the PVs (a LocalDisk status, a node-local file) and
//!   apply every `SetDiskState` before acting on later passes.
//! - [`Memory`]: which conditions were already reported as Events, so a resync that changes nothing says nothing.
//!   Best effort: losing it repeats each standing Event once.

use std::collections::{BTreeMap, BTreeSet};
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
}

/// What earlier passes reported, keyed by PV UID (a re-created PV with the same name starts afresh).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub conditions: BTreeMap<String, BTreeSet<Condition>>,
    /// When an Available PV's disk was first seen missing (for `missingDiskGracePeriod`).
    pub missing_since: BTreeMap<String, SystemTime>,
}

impl Memory {
    pub fn had(&self, uid: &str, condition: Condition) -> bool {
        self.conditions
            .get(uid)
            .is_some_and(|set| set.contains(&condition))
    }
}
