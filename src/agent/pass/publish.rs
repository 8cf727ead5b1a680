//! What a pass publishes besides the plan's writes: this node's LocalDisks (`inventory`), and the metrics and
//! `/disks`, each again only on a change. `Published` is what the last pass published, to tell.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolume;

use super::Agent;
use crate::agent::http::Disks as HttpDisks;
use crate::agent::inventory as inv;
use crate::agent::metrics::PvTally;
use crate::disk::{Discovery, Unusable};
use crate::inventory::{self, WipeFailures};
use crate::plan::{self, DiskLedger};

/// What the last pass published to the metrics and `/disks`.
#[derive(Default)]
pub(super) struct Published {
    /// This node's PVs as the metrics last counted them.
    tally: PvTally,
    unusable: Vec<Unusable>,
    /// The ledger as of the `stored`-th write.
    ledger: Option<(u64, Arc<DiskLedger>)>,
}

impl Published {
    /// Whether the per-class metrics must be counted again: this node's PVs or the unusable entries changed. NB: PVs
    /// unchanged since the last pass are the same pointers in the index: compared, not read again.
    fn pvs_changed(&self, pvs: &[Arc<PersistentVolume>], unusable: &[Unusable]) -> bool {
        !self.tally.is_of(pvs) || unusable != self.unusable
    }

    /// The ledger as of the `stored`-th write, copied only when one was stored since the last pass.
    fn ledger(&mut self, stored: u64, ledger: &DiskLedger) -> Arc<DiskLedger> {
        match &self.ledger {
            Some((at, kept)) if *at == stored => kept.clone(),
            _ => {
                let ledger = Arc::new(ledger.clone());
                self.ledger = Some((stored, ledger.clone()));
                ledger
            }
        }
    }
}

impl Agent {
    /// Brings this node's LocalDisks in line with the pass; returns when to look again.
    pub(super) async fn sync_inventory(
        &mut self,
        found: &Discovery,
        unpublished: &[plan::Unpublished],
        pvs: &[Arc<PersistentVolume>],
        retry: &mut bool,
    ) -> Option<Duration> {
        let existing = self.s.disks.shared();
        let wanted = self
            .inventory_builder
            .names_to_look_up(&self.s.node, found, &existing);
        let others = self.inventory.fetch(&wanted).await;
        let mut wipes = inv::WipeFacts::default();
        for r in self.running.values() {
            wipes
                .running
                .insert(r.host_path.clone(), inv::sample(r.started, &r.ctl));
        }
        for b in self.backoff.values() {
            let f = WipeFailures {
                consecutive: b.failures,
                last_error: b.last_error.clone(),
            };
            wipes.failures.insert(b.host_path.clone(), f);
        }
        let changes = self.inventory_builder.build(&inventory::Inputs {
            node: &self.s.node,
            found,
            unpublished,
            pvs,
            ledger: self.book.ledger(),
            wipes: &wipes.running,
            wipe_failures: &wipes.failures,
            existing: &existing,
            others: &others,
            settings: &inventory::Settings {
                failing_after: self.s.opts.wipe_failing_after,
                ..inventory::Settings::default()
            },
            now: SystemTime::now(),
        });
        *retry |= !self.inventory.apply(changes.changes).await;
        changes.requeue_after
    }

    /// The pass's disks and PVs to the metrics and `/disks`.
    pub(super) fn publish_state(
        &mut self,
        found: Discovery,
        unpublished: Vec<plan::Unpublished>,
        pvs: &[Arc<PersistentVolume>],
    ) {
        let m = &self.s.metrics;
        m.disks_found.set(found.disks.len() as i64);
        if self.published.pvs_changed(pvs, &found.unusable) {
            let classes = self.s.config.classes.iter().map(|c| c.name.as_str());
            self.published.tally.update(pvs);
            m.publish_pass(classes, &found.unusable, &self.published.tally);
            self.published.unusable = found.unusable.clone();
        }
        let ledger = self
            .published
            .ledger(self.book.stored(), self.book.ledger());
        self.s.http.set_disks(HttpDisks {
            node: self.s.node.clone(),
            found: Arc::new(found),
            unpublished,
            wiping: self.running.keys().cloned().collect(),
            ledger,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::DiskState;

    #[test]
    fn the_ledger_is_copied_for_the_disks_page_only_after_a_write() {
        let mut published = Published::default();
        let mut ledger = DiskLedger::default();
        let first = published.ledger(1, &ledger);
        ledger.disks.insert("a".into(), DiskState::Published);
        let same = published.ledger(1, &ledger);
        assert!(Arc::ptr_eq(&first, &same), "no write since: the copy kept");
        let next = published.ledger(2, &ledger);
        assert_eq!(*next, ledger, "a write since: copied again");
    }

    #[test]
    fn the_metrics_count_again_only_when_the_pvs_or_the_unusable_entries_changed() {
        let mut published = Published::default();
        let pvs = vec![Arc::new(PersistentVolume::default())];
        assert!(
            !published.pvs_changed(&[], &[]),
            "nothing yet, nothing to count"
        );
        assert!(published.pvs_changed(&pvs, &[]));
        published.tally.update(&pvs);
        assert!(!published.pvs_changed(&pvs, &[]), "the same pointers");
        let copy = vec![Arc::new((*pvs[0]).clone())];
        assert!(
            published.pvs_changed(&copy, &[]),
            "an equal copy is another PV"
        );
        let unusable = Unusable {
            class: "local".into(),
            entry: "sdb".into(),
            host_path: "/mnt/disks/sdb".into(),
            reason: crate::disk::UnusableReason::NotAMountPoint,
            message: String::new(),
        };
        assert!(published.pvs_changed(&pvs, &[unusable]));
    }
}
