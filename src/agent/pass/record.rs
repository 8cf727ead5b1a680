//! The agent's disk ledger and recorded owners ([`Book`]): each change persisted before anything acts on it, and
//! undone in memory when it could not be stored.
//!
//! A change touches a few keys of maps that hold every disk and every PV of the node; what it changed is kept
//! to undo (not a copy of the maps), so recording one new PV does not copy thousands. The same list names the
//! keys to the journal (`ledger::Delta`) and to the planner (`plan::StateChanges`): only `Book`'s methods change
//! the maps, so no change can go unnamed.

use std::path::Path;

use crate::agent::ledger::{Delta, LedgerError, LedgerFile};
use crate::plan::{DiskLedger, DiskState, OwnedPv, Owners, StateChanges};
use tracing::warn;

/// One change of the recorded owners.
pub(super) enum OwnerChange {
    /// The PV with this UID is ours (and no longer being created under its name).
    Record { uid: String, pv: OwnedPv },
    /// The PV with this UID is gone.
    Forget { uid: String },
    /// Owners are recorded on this node from now on.
    Recorded,
}

/// What a change replaced, to put back.
enum Undo {
    Disk(String, Option<DiskState>),
    Creating(String, Option<OwnedPv>),
    Owned(String, Option<OwnedPv>),
    Recorded(bool),
}

/// The disk ledger and recorded owners, their file, and the keys changed since the last planning call.
pub(super) struct Book {
    ledger: DiskLedger,
    owners: Owners,
    file: LedgerFile,
    /// Writes of the ledger file so far: the ledger changes only with one.
    stored: u64,
    changes: StateChanges,
    /// No ledger file was there at start and what that means is not settled yet (see `plan::lost`).
    missing: bool,
}

impl Book {
    /// The ledger stored in `state_dir` (empty when there is none yet).
    pub(super) fn open(state_dir: &Path) -> Result<Book, LedgerError> {
        let mut file = LedgerFile::new(state_dir);
        let missing = !file.exists();
        let (ledger, owners) = file.load()?;
        Ok(Book {
            ledger,
            owners,
            file,
            stored: 0,
            changes: StateChanges::default(),
            missing,
        })
    }

    /// True until [`Book::settle_missing`]: no ledger file was there at start.
    pub(super) fn missing(&self) -> bool {
        self.missing
    }

    /// Stores what the lost ledger is presumed to have said (nothing for a fresh node); false (and still missing)
    /// when it could not be stored.
    pub(super) fn settle_missing(&mut self, presumed: &[(String, DiskState)]) -> bool {
        let stored = presumed.is_empty() || self.remember_before_create(presumed, &[]);
        self.missing &= !stored;
        stored
    }

    pub(super) fn ledger(&self) -> &DiskLedger {
        &self.ledger
    }

    pub(super) fn owners(&self) -> &Owners {
        &self.owners
    }

    /// How many writes the ledger has seen: equal counts, equal ledgers.
    pub(super) fn stored(&self) -> u64 {
        self.stored
    }

    /// The keys changed since the last planning call.
    pub(super) fn changes(&self) -> &StateChanges {
        &self.changes
    }

    /// A planning call was made: count changes from it.
    pub(super) fn planned(&mut self) {
        self.changes.advance();
    }

    /// Writes the ledger back whole in one file on shutdown, so that a downgrade reads every change.
    pub(super) fn close(&mut self) {
        if let Err(error) = self.file.close(&self.ledger, &self.owners) {
            warn!(error = %crate::host::error_chain(&error), "failed to write the disk ledger whole on shutdown; an older release will refuse it");
        }
    }

    /// Sets the ledger states and records every name as being created, with one write; false (and nothing
    /// changed) when it could not be stored.
    pub(super) fn remember_before_create(
        &mut self,
        states: &[(String, DiskState)],
        names: &[OwnedPv],
    ) -> bool {
        let mut undo = Vec::new();
        for (key, state) in states {
            let before = self.ledger.get(key);
            if before != Some(*state) {
                self.ledger.set(key, *state);
                undo.push(Undo::Disk(key.clone(), before));
            }
        }
        for pv in names {
            let before = self.owners.creating.insert(pv.name.clone(), pv.clone());
            if before.as_ref() != Some(pv) {
                undo.push(Undo::Creating(pv.name.clone(), before));
            }
        }
        self.store(undo)
    }

    pub(super) fn set_disk_state(&mut self, key: &str, state: DiskState) -> bool {
        self.remember_before_create(&[(key.to_string(), state)], &[])
    }

    /// Changes the recorded owners and persists them; false (and nothing changed) when they could not be stored.
    pub(super) fn update_owners(&mut self, changes: Vec<OwnerChange>) -> bool {
        let mut undo = Vec::new();
        for change in changes {
            match change {
                OwnerChange::Record { uid, pv } => {
                    if let Some(before) = self.owners.creating.remove(&pv.name) {
                        undo.push(Undo::Creating(pv.name.clone(), Some(before)));
                    }
                    let before = self.owners.pvs.insert(uid.clone(), pv.clone());
                    if before.as_ref() != Some(&pv) {
                        undo.push(Undo::Owned(uid, before));
                    }
                }
                OwnerChange::Forget { uid } => {
                    if let Some(before) = self.owners.pvs.remove(&uid) {
                        undo.push(Undo::Owned(uid, Some(before)));
                    }
                }
                OwnerChange::Recorded if !self.owners.recorded => {
                    self.owners.recorded = true;
                    undo.push(Undo::Recorded(false));
                }
                OwnerChange::Recorded => {}
            }
        }
        self.store(undo)
    }

    /// Persists what `undo` says changed; puts it back when that fails. True when nothing changed.
    fn store(&mut self, undo: Vec<Undo>) -> bool {
        // NB: the one place the ledger and owners change: each key is named to the planner (`StateChanges`),
        // stored or put back alike.
        if undo.is_empty() {
            return true;
        }
        let mut delta = Delta::default();
        for step in &undo {
            match step {
                Undo::Disk(key, _) => {
                    self.changes.ledger.insert(key.clone());
                    delta.disks.insert(key.clone());
                }
                Undo::Owned(uid, _) => {
                    self.changes.owners.insert(uid.clone());
                    delta.pvs.insert(uid.clone());
                }
                Undo::Creating(name, _) => {
                    delta.creating.insert(name.clone());
                }
                Undo::Recorded(_) => delta.recorded = true,
            }
        }
        if self.persist(&delta) {
            return true;
        }
        for step in undo.into_iter().rev() {
            match step {
                Undo::Disk(key, Some(state)) => self.ledger.set(&key, state),
                Undo::Disk(key, None) => {
                    self.ledger.disks.remove(&key);
                }
                Undo::Creating(name, Some(pv)) => {
                    self.owners.creating.insert(name, pv);
                }
                Undo::Creating(name, None) => {
                    self.owners.creating.remove(&name);
                }
                Undo::Owned(uid, Some(pv)) => {
                    self.owners.pvs.insert(uid, pv);
                }
                Undo::Owned(uid, None) => {
                    self.owners.pvs.remove(&uid);
                }
                Undo::Recorded(recorded) => self.owners.recorded = recorded,
            }
        }
        false
    }

    fn persist(&mut self, delta: &Delta) -> bool {
        // NB: counted before the write: a failed one restores the ledger, which is a change too.
        self.stored += 1;
        match self.file.store(&self.ledger, &self.owners, delta) {
            Ok(()) => true,
            Err(error) => {
                // NB: an unpersisted ledger change must not be acted on (a dirty disk could be forgotten on restart).
                warn!(error = %crate::host::error_chain(&error), "failed to persist the disk ledger");
                false
            }
        }
    }
}
