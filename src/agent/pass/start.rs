//! How the agent starts and stops: its StorageClass and LocalDisk stores seeded from what a clean stop left
//! (`warmstart`), or listed; the wait for every cache before the first pass; and what a clean stop leaves.

use std::time::Duration;

use tokio::sync::watch as tokio_watch;
use tracing::info;

use super::{Agent, Setup};
use crate::plan::polled;

impl Agent {
    /// Leaves the LocalDisks, the StorageClasses and the Node's mark for the next start (`warmstart`), when
    /// `polled::leaves_snapshot` says so.
    pub(super) fn leave_snapshot(&self) {
        let s = &self.s;
        if !polled::leaves_snapshot(s.classes.synced(), s.disks.synced(), s.disks.is_empty()) {
            return;
        }
        let snapshot = crate::agent::warmstart::ApiCache {
            disks_mark: self.disks_mark.last(),
            local_disks: s.disks.all(),
            storage_classes: s.classes.all(),
        };
        crate::agent::warmstart::leave(&s.opts.state_dir, &snapshot);
    }

    /// Waits for the caches (the PV index needs the Node first: it keeps the PVs that can reach it). False when
    /// shutdown came first.
    pub(super) async fn start(&mut self, shutdown: &mut tokio_watch::Receiver<bool>) -> bool {
        let mut delay = Duration::from_millis(5);
        let mut waited = Duration::ZERO;
        loop {
            if let Some(node) = self.node_facts() {
                self.s.pvs.set_node(&node);
            }
            let synced = self.s.pvs.synced()
                && self.s.nodes.synced()
                && self.s.classes.synced()
                && self.s.disks.synced();
            if synced && self.s.nodes.get(&self.s.node).is_some() {
                return true;
            }
            if waited >= Duration::from_secs(3) {
                info!(
                    pvs = self.s.pvs.synced(),
                    node = self.s.nodes.get(&self.s.node).is_some(),
                    storage_classes = self.s.classes.synced(),
                    local_disks = self.s.disks.synced(),
                    "waiting for caches"
                );
            }
            // NB: woken by every cache change, so readiness follows the last sync by microseconds, not a poll.
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.s.changed.notified() => {}
                _ = shutdown.changed() => return false,
            }
            waited += delay;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }
}

/// Seeds the StorageClass and LocalDisk stores from what a clean stop left (`warmstart`) and lets their pollers
/// begin (the first lists a period later), or lets them list at once. The Node's mark as that agent saw it, when
/// seeded: a different one on the Node lists the LocalDisks at once (`polled::DisksMark`).
pub(super) fn warm_start(s: &Setup) -> Option<Option<String>> {
    let Some(snapshot) = crate::agent::warmstart::take(&s.opts.state_dir) else {
        s.classes_polled.begin(false);
        s.disks_polled.begin(false);
        return None;
    };
    info!(
        local_disks = snapshot.local_disks.len(),
        storage_classes = snapshot.storage_classes.len(),
        "starting from the API cache a clean stop left"
    );
    crate::agent::warmstart::seed(&s.classes, "StorageClass", snapshot.storage_classes);
    crate::agent::warmstart::seed(&s.disks, "LocalDisk", snapshot.local_disks);
    s.classes_polled.begin(true);
    s.disks_polled.begin(true);
    Some(snapshot.disks_mark)
}
