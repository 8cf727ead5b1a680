//! The node agent's pure brain: from what is on the host and what is in the API server, decide what to do.
//!
//! ```text
//!  NodeFacts, ClassFacts (config + StorageClass)  ─┐
//!  Discovery (disks found on the host)            ─┤
//!  existing PVs (ours by label + reference ones)  ─┼─> plan() ─> Plan { actions, memory, unpublished, requeue,
//!  cluster: a fresh list of all PVs (or None)     ─┤                     needs_cluster_list }
//!  DiskLedger (dirty disks), Owners (our PV UIDs) ─┤                │
//!  Memory (reported)                              ─┘                v
//!        shell executes actions in order: RecordOwner / CreatePv / DeletePv (preconditions) / AdoptPv /
//!        RecordIdentity / SetDiskState (ledger) / Wipe (see WipeOrder) / Event; then keeps `memory`.
//!        With `needs_cluster_list` it lists every PV and plans again with `cluster` before executing anything.
//! ```
//!
//! The agent calls it through [`incremental::IncrementalPlanner`], which returns the same plan while planning again
//! only the PVs and disks a change since the last pass can concern.
//!
//! Ownership: a PV is ours only when its UID is in [`Owners`] (recorded from the create response, or on adoption).
//! Any other PV that carries our label or reaches one of our disks (by normalised path, or by the identity it
//! records) is foreign: it gets one `ForeignPersistentVolume` Event and nothing else, and while it exists the disk
//! it reaches is neither wiped nor published. Because a PV without our label can reach our disks, no wipe and no
//! new PV is ordered without every PV that could reach this node (`cluster`).
//!
//! Rules, in short: one PV per disk path; a disk leaves only with its Available PV (Bound and Released PVs are
//! never deleted or re-exposed because of a vanished or changed disk); Released + Delete is wiped after its
//! identity is verified and deleted only once a wipe completed for that PV's lifetime; a disk that served a claim
//! is remembered in the ledger and wiped before any new PV exposes it (from the moment it is published: a PV deleted
//! while the agent was down leaves a `Published` disk, wiped or retained per the class's policy); a pass over an unchanged world returns no
//! write action and repeats no Event.

pub mod cadence;
mod decide;
pub mod existing;
pub mod identity;
pub mod incremental;
pub mod lost;
pub mod narrow;
pub mod owners;
pub mod polled;
pub mod pv;
pub mod relation;
pub mod state;
pub mod taint;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolume;
use serde::Serialize;

use crate::config::{ClassConfig, Config, WipeMethod};
use crate::disk::{Discovery, DiskIdentity};
pub use pv::{MetaPatch, PvRef};
pub use state::{Condition, DiskLedger, DiskState, Memory, OwnedPv, Owners, StateChanges};

/// The node this agent runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    /// The Node's `kubernetes.io/hostname` label; the node name is used when it is missing.
    pub hostname_label: Option<String>,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
}

/// What the class's StorageClass object says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageClassFacts {
    /// `reclaimPolicy`; PVs get Delete when unset.
    pub reclaim_policy: Option<String>,
    pub mount_options: Vec<String>,
}

/// One configured class and what the cluster and this pass know about it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassFacts {
    pub config: ClassConfig,
    /// `None` while the StorageClass does not exist: no new PVs are published for the class.
    pub storage_class: Option<StorageClassFacts>,
}

/// Everything one planning pass looks at.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    pub node: &'a NodeFacts,
    /// Global settings (`pvNaming`, labels, owner reference, grace period...). Its `classes` are not read here.
    pub config: &'a Config,
    pub classes: &'a [ClassFacts],
    /// This pass's discovery. Classes in its `failed_classes` are unknown, not empty: their PVs are left alone.
    pub found: &'a Discovery,
    /// PVs labelled `localpv.io/node=<node>`, plus the reference provisioner's PVs of this node. Others are
    /// ignored.
    pub existing: &'a [Arc<PersistentVolume>],
    pub ledger: &'a DiskLedger,
    pub owners: &'a Owners,
    /// Every PV in the cluster that could reach this node (the shell's complete PV index, or a list taken afresh;
    /// PVs affine to other nodes may be left out); `None` when the shell has neither. Without it no wipe and no new
    /// PV is planned (`Plan::needs_cluster_list` asks for it): a PV without our label can reach our disks too.
    pub cluster: Option<&'a [Arc<PersistentVolume>]>,
    pub memory: &'a Memory,
    pub now: SystemTime,
    /// What the shell changed in `ledger` and `owners` since its last planning call, when it counts that; read only
    /// by the incremental planner.
    pub changes: Option<&'a StateChanges>,
}

/// The decisions of one pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// To execute in order.
    pub actions: Vec<Action>,
    /// Replaces the shell's memory once the actions are executed.
    pub memory: Memory,
    /// Disks found but deliberately not published, with the reason (for inventory and `localpv disks`).
    pub unpublished: Vec<Unpublished>,
    /// Plan again after this long even without an event: something is waiting (a deletion to finish, a grace
    /// period to run out).
    pub requeue_after: Option<Duration>,
    /// A wipe or a new PV is due but `cluster` was not given: list every PV and plan again.
    pub needs_cluster_list: bool,
}

impl Plan {
    /// The actions that change something (API objects, the ledger, a disk); Events excluded.
    pub fn writes(&self) -> impl Iterator<Item = &Action> {
        self.actions
            .iter()
            .filter(|a| !matches!(a, Action::Event(_)))
    }

    /// Whether an action of the plan rests on a StorageClass's reclaim policy or mount options: a new PV takes
    /// them, and a wipe may have been chosen by them (a disk whose PV went). The shell lists the classes again
    /// before such a plan (they are polled, not watched) and plans again on that list.
    pub fn reads_class_policy(&self) -> bool {
        self.actions
            .iter()
            .any(|a| matches!(a, Action::CreatePv(_) | Action::Wipe(_)))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create this PV. `AlreadyExists` is success (the name is a function of the disk). The shell records the
    /// name in `Owners::creating` before the request and the UID from the response after it.
    CreatePv(Box<PersistentVolume>),
    /// Delete the PV only if it still has this UID and resourceVersion (a PV bound meanwhile survives).
    /// `NotFound` is success.
    DeletePv(PvRef),
    /// Delete an unclaimed PV of ours (as `DeletePv`); only when the API server confirms this very deletion (the
    /// preconditions held, so no claim ever bound it since the agent looked) set the disk `disk` to `Clean`.
    /// If the deletion fails, is moot, or the agent dies first, the disk stays `Published` and is wiped (Delete)
    /// or retained (Retain) before it is exposed again.
    DeleteUnclaimedPv {
        pv: PvRef,
        disk: String,
    },
    /// Remember this PV as ours in the node-local ledger; persisted before any later action of the plan runs.
    RecordOwner {
        uid: String,
        pv: OwnedPv,
    },
    /// Forget a PV of ours that no longer exists.
    ForgetOwner {
        uid: String,
    },
    /// Ownership is recorded on this node from now on (ends the one-time take-over of labelled PVs).
    OwnersRecorded,
    /// Take over a reference-provisioner PV in place: add our label and identity annotations. Never touches the
    /// disk and never re-creates the PV.
    AdoptPv {
        name: String,
        patch: MetaPatch,
    },
    /// Record the identity of the disk now at a PV's path, for a PV that has none recorded.
    RecordIdentity {
        name: String,
        patch: MetaPatch,
    },
    /// Persist this disk's state in the ledger.
    SetDiskState {
        key: String,
        state: DiskState,
    },
    Wipe(Box<WipeOrder>),
    /// Store a random volume id on the root directory of an unpublished filesystem disk (`path` as this process
    /// sees it), so the PV published next can record an identity the agent controls. Never for block volumes.
    TagVolume {
        host_path: PathBuf,
        path: PathBuf,
    },
    Event(PvEvent),
}

/// Wipe one disk. The executor, per order:
/// 1. applies `on_start` to the PV when there is one (a failed precondition skips the wipe until the next pass);
/// 2. checks, just before wiping, that `path` still is the expected mount or device with identity `expected`;
/// 3. wipes with `method`;
/// 4. on success sets the ledger entry `key` to `Clean`, then applies `on_success` to the PV (if any);
///    on failure reports a `WipeFailed` Event and retries with capped backoff.
///
/// Orders repeat on every pass until the wipe is recorded; the executor runs at most one wipe per `key` and
/// ignores repeats of a running one. Any crash point is safe: the PV is only deleted by a later pass that sees
/// `Wiped` for its own lifetime, and a disk left `Dirty` is wiped again before it is published.
#[derive(Clone, Debug, PartialEq)]
pub struct WipeOrder {
    /// Ledger key of the disk.
    pub key: String,
    /// The Released PV this wipe reclaims; `None` for a dirty disk that has no PV.
    pub pv: Option<PvRef>,
    pub class: String,
    pub host_path: PathBuf,
    /// The same entry as this process sees it (`mountDir/entry`).
    pub path: PathBuf,
    /// How to wipe; its variant is the volume mode the disk is checked and wiped as.
    pub method: WipeMethod,
    pub expected: DiskIdentity,
    pub expected_mount_root: Option<String>,
    pub on_start: Option<MetaPatch>,
    pub on_success: Option<MetaPatch>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event on a PV. Reasons are stable CamelCase spellings (see [`Reason`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PvEvent {
    pub pv: PvRef,
    pub type_: EventType,
    pub reason: Reason,
    pub message: String,
    /// The claim bound to the PV, told the same (a failing disk concerns its tenant): `None` for most Events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimRef>,
}

/// A claim an Event is also posted on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

/// Event reasons: one closed enum for every writer.
pub use crate::effects::Reason;

/// Why a found disk has no PV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum HoldReason {
    /// Served a claim under Retain and its PV is gone: waits for an operator.
    Retained,
    /// Dirty, or new with `wipeOnFirstDiscovery`: published once the wipe is recorded.
    AwaitingWipe,
    /// Another PV holds the same disk: one of ours (the disk moved to this path), or one the agent did not create
    /// or adopt that reaches it (a foreign PV: nothing is published or wiped while it exists).
    HeldByAnotherPv,
    /// A PV at this path is being deleted or replaced; published once it is gone.
    AwaitingDeletion,
    /// The class's StorageClass does not exist.
    NoStorageClass,
    /// The computed PV name belongs to a PV for another path.
    NameTaken,
    /// The host path is not valid UTF-8 and cannot be written into a PV.
    PathNotUtf8,
    /// A filesystem disk waiting for the agent's volume id on its root; published in the next pass.
    AwaitingVolumeId,
    /// No identity that could ever authorise a wipe (no filesystem UUID and no extended attributes; or a disk at
    /// this path served a claim and cannot be told apart from another one): never published or wiped
    /// automatically.
    NoStableIdentity,
    /// Its storage nests with what a PV of this node exposes or recorded, or with another unpublished disk's (a
    /// bind mount of a volume's sub-directory, of its parent, or of its root): never published or wiped while so.
    OverlappingStorage,
    /// Another disk, or a PV of this node elsewhere, answers to one of its strong ids (a block copy, a copied
    /// volume id, a cloned image): never published or wiped while so.
    DuplicateIdentity,
    /// The disk shows signs of failing (`health`): never handed to a new claim, never wiped while so.
    DiskDegraded,
    /// The disk failed (`health`): never handed to a new claim, never wiped.
    DiskFailed,
    /// An operator cordoned the disk (`localpv disks cordon`): not published until uncordoned.
    Cordoned,
    /// A raw device of a Filesystem class held by another user (mounted in some mount namespace, dm/md): not
    /// published until it is free (`decide::in_use`).
    DeviceInUse,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unpublished {
    pub class: String,
    pub entry: String,
    pub host_path: PathBuf,
    pub reason: HoldReason,
    pub message: String,
}

/// Decides one pass. Pure: same inputs, same plan.
pub fn plan(inputs: &Inputs<'_>) -> Plan {
    decide::Planner::new(inputs, decide::Scope::Whole).run()
}
