//! What a cleanly stopped agent leaves for the next one (issue 34, part 6): its LocalDisks, the StorageClasses and
//! the Node's `localpv.io/disks-changed` mark as it last knew them, so that a restart (a rolling update of the
//! DaemonSet) starts from them instead of listing both kinds again: two requests per agent restarted, its two
//! streaming watches.
//!
//! ```text
//!  clean stop:  <stateDir>/api-cache.json  {"disksMark", "localDisks", "storageClasses"}
//!  start:       read and removed (a crash later never starts from a stale one) ─> the stores seeded
//!               ─> the pollers' first lists wait a period; a Node mark other than the one kept lists at once
//! ```
//!
//! Why a seeded store is safe to act on: a pass that creates a PV or wipes lists the StorageClasses first, as it
//! always does (`pass`); what an operator changes with `localpv disks` while the agent is down marks the Node, and a
//! mark other than the one kept lists the LocalDisks at once. What is not seen until the next list is what was
//! changed by hand without marking the Node, as while the agent runs.

use std::path::Path;

use k8s_openapi::api::storage::v1::StorageClass;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::inventory::LocalDisk;
use crate::watch::{Guarded, Store};

const FILE: &str = "api-cache.json";

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiCache {
    /// The Node's `localpv.io/disks-changed` as the stopping agent last saw it.
    pub disks_mark: Option<String>,
    pub local_disks: Vec<LocalDisk>,
    pub storage_classes: Vec<StorageClass>,
}

/// Takes what a clean stop left in `state_dir`, removing the file; `None` without one, or when it cannot be read
/// (said in the log: the agent lists, as after a crash).
pub fn take(state_dir: &Path) -> Option<ApiCache> {
    let path = state_dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            warn!(%error, path = %path.display(), "unreadable API cache; listing instead");
            return None;
        }
    };
    if let Err(error) = std::fs::remove_file(&path) {
        // NB: a file that stays could be read after a crash, stale: list this time rather than risk that.
        warn!(%error, path = %path.display(), "failed to remove the API cache; listing instead");
        return None;
    }
    match serde_json::from_slice(&bytes) {
        Ok(snapshot) => Some(snapshot),
        Err(error) => {
            warn!(%error, path = %path.display(), "unreadable API cache; listing instead");
            None
        }
    }
}

/// Leaves `snapshot` in `state_dir` at a clean stop (atomically); a failure only costs the next start its lists.
pub fn leave(state_dir: &Path, snapshot: &ApiCache) {
    let path = state_dir.join(FILE);
    let bytes = serde_json::to_vec(snapshot).expect("a snapshot always serialises");
    let written =
        super::ledger::replace(&path, &bytes).and_then(|()| super::ledger::sync_dir(state_dir));
    match written {
        Ok(()) => info!(
            local_disks = snapshot.local_disks.len(),
            storage_classes = snapshot.storage_classes.len(),
            "left the API cache for the next start"
        ),
        Err(error) => {
            warn!(%error, path = %path.display(), "failed to leave the API cache; the next start lists")
        }
    }
}

/// Fills `store` with `items` as a completed list would.
pub fn seed<K>(store: &Store<K>, kind: &str, items: Vec<K>)
where
    K: kube::Resource + Clone + PartialEq,
{
    let reader = crate::watch::objects::<K>();
    let items = items.into_iter().map(|item| Guarded(Ok(item)));
    crate::watch::replace(store, kind, items, &reader);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_left_at_a_clean_stop_is_taken_once() {
        let dir = tempfile::tempdir().expect("state dir");
        assert!(take(dir.path()).is_none(), "nothing left yet");
        let snapshot = ApiCache {
            disks_mark: Some("t1".into()),
            local_disks: vec![LocalDisk::new("fs-1", Default::default())],
            storage_classes: Vec::new(),
        };
        leave(dir.path(), &snapshot);
        let taken = take(dir.path()).expect("left");
        assert_eq!(taken.disks_mark.as_deref(), Some("t1"));
        assert_eq!(taken.local_disks.len(), 1);
        assert!(
            take(dir.path()).is_none(),
            "taken once: a crash after this start never reads it"
        );
        std::fs::write(dir.path().join(FILE), b"{oops").expect("write");
        assert!(take(dir.path()).is_none(), "unreadable: list instead");
        assert!(!dir.path().join(FILE).exists(), "and removed");
    }
}
