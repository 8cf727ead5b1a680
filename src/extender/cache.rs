//! The snapshot the answers read, and whether the extender is ready to answer: written by the watch side (one
//! `store` per rebuild), read once per request by the HTTP side and once per look by the controller's
//! explanations. A reader takes the current `Arc<Snapshot>` and lets go of the lock at once, so no reader ever
//! waits for a build, and a build never waits for a reader.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::Notify;

use super::snapshot::Snapshot;
use super::verbs;
use super::wire::ExtenderArgs;

/// The latest snapshot plus the readiness flags, shared by the watch side (writer) and handlers (readers).
#[derive(Default)]
pub struct Cache {
    snapshot: RwLock<Arc<Snapshot>>,
    synced: AtomicBool,
    stopping: AtomicBool,
    /// Woken on every `store`, for requests waiting out watch lag.
    changed: Notify,
}

impl Cache {
    pub fn new(snapshot: Snapshot, synced: bool) -> Cache {
        Cache {
            snapshot: RwLock::new(Arc::new(snapshot)),
            synced: AtomicBool::new(synced),
            ..Cache::default()
        }
    }

    pub fn load(&self) -> Arc<Snapshot> {
        // NB: a poisoned lock only means a writer panicked between two whole snapshots; the value is intact.
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn store(&self, snapshot: Snapshot) {
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
        self.changed.notify_waiters();
    }

    /// The first snapshot, taken now or stored before `until`, that knows every object `args` refers to; the
    /// latest one when none does by then. kube-scheduler has already seen the pod's claims, so a miss is our
    /// watch running a few milliseconds behind, not a missing object.
    pub async fn load_knowing(
        &self,
        args: &ExtenderArgs,
        until: tokio::time::Instant,
    ) -> Arc<Snapshot> {
        loop {
            // NB: created before the check, so a store between the check and the wait still wakes us.
            let changed = self.changed.notified();
            let snapshot = self.load();
            if !verbs::cache_miss(args, &snapshot) {
                return snapshot;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return self.load();
            }
        }
    }

    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::SeqCst) && !self.stopping.load(Ordering::SeqCst)
    }
}
