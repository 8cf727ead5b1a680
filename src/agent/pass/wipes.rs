//! The agent's background wipes: start one per disk (after marking its PV), feed completion back into the loop,
//! back off per disk on failure, cancel and join on shutdown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kube::runtime::events::EventType as KubeEventType;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::super::metrics::{StepOutcome, WipeLabels};
use super::super::wiper::{self, WipeFailed};
use super::{Agent, WipeResult};
use crate::effects::Reason;
use crate::plan::cadence;
use crate::plan::{DiskState, WipeOrder};
use crate::wipe::Control;

pub(super) struct Running {
    pub(super) ctl: Arc<Control>,
    pub(super) task: JoinHandle<()>,
    pub(super) host_path: PathBuf,
    pub(super) started: SystemTime,
}

pub(super) struct Backoff {
    pub(super) failures: u32,
    pub(super) not_before: Instant,
    pub(super) host_path: PathBuf,
    pub(super) last_error: String,
    /// The last attempt found the volume not empty (a mount inside, a late writer): a change of the mount table
    /// may have removed the cause, so it is tried again at once (`due_after_mount_change`).
    pub(super) incomplete: bool,
}

/// After the mount table changed: the held-out wipes to try again at once, those whose last attempt left the volume
/// not empty (an unmount inside it is the usual fix). Their failure count stays, so a mount that keeps coming
/// back still backs off.
pub(super) fn due_after_mount_change<'a>(
    backoffs: impl Iterator<Item = (&'a String, &'a Backoff)>,
    now: Instant,
) -> Vec<String> {
    backoffs
        .filter(|(_, b)| b.incomplete && b.not_before > now)
        .map(|(key, _)| key.clone())
        .collect()
}

impl Agent {
    pub(super) async fn start_wipe(&mut self, order: WipeOrder) -> bool {
        let running = self.running.contains_key(&order.key);
        let not_before = self.backoff.get(&order.key).map(|b| b.not_before);
        if !cadence::wipe_due(running, not_before, Instant::now()) {
            return true;
        }
        if let (Some(pv), Some(patch)) = (&order.pv, &order.on_start) {
            match self.writer.patch(&pv.name, patch).await {
                Ok(true) => {}
                Ok(false) => return true, // the PV changed meanwhile: the next pass decides again
                Err(_) => return false,
            }
        }
        let Some(class) = self
            .s
            .config
            .class(&order.class)
            .map(|c| c.discovery_class())
        else {
            return true;
        };
        info!(disk = %order.key, path = %order.host_path.display(), method = order.method.as_str(), "wipe started");
        self.s.metrics.wipes_running.inc();
        let ctl = Arc::new(Control::default());
        let (host, tx, key) = (self.host.clone(), self.done_tx.clone(), order.key.clone());
        let host_path = order.host_path.clone();
        let ctl2 = ctl.clone();
        let share = wiper::Share {
            concurrency: self.s.config.wipe_concurrency,
            idle_io_priority: self.s.config.wipe_idle_io_priority,
        };
        let task = tokio::spawn(async move {
            let order2 = order.clone();
            let result = tokio::task::spawn_blocking(move || {
                wiper::run(&host, &class, &order2, share, &ctl2)
            })
            .await
            .unwrap_or_else(|e| Err(WipeFailed::Error(format!("wipe task failed: {e}"))));
            let _ = tx.send((order, result)).await;
        });
        self.running.insert(
            key,
            Running {
                ctl,
                task,
                host_path,
                started: SystemTime::now(),
            },
        );
        true
    }

    pub(super) async fn finish_wipe(&mut self, (order, result): WipeResult) {
        self.running.remove(&order.key);
        self.s.metrics.wipes_running.dec();
        // The wipe changed the volume (free space, perhaps its id): measure it again.
        self.probed.forget(&order.host_path);
        let method = order.method.as_str().to_string();
        match result {
            Ok(done) => {
                self.s
                    .metrics
                    .wipes
                    .get_or_create(&WipeLabels {
                        method,
                        outcome: StepOutcome::Ok,
                    })
                    .inc();
                self.s.metrics.wipe_bytes.inc_by(done.bytes);
                self.s.metrics.wipe_entries.inc_by(done.entries);
                self.backoff.remove(&order.key);
                info!(disk = %order.key, method = done.method, bytes = done.bytes, entries = done.entries, "wipe completed");
                if !self.book.set_disk_state(&order.key, DiskState::Clean) {
                    return;
                }
                if let (Some(pv), Some(patch)) = (&order.pv, &order.on_success) {
                    let _ = self.writer.patch(&pv.name, patch).await;
                }
                if let Some(pv) = &order.pv {
                    let msg = format!("wiped {} with {}", order.host_path.display(), done.method);
                    let (normal, reason) = (KubeEventType::Normal, Reason::WipeCompleted);
                    self.writer
                        .on_pv(&pv.name, Some(&pv.uid), normal, reason, &msg)
                        .await;
                }
            }
            Err(failure) => {
                let incomplete = matches!(failure, WipeFailed::Incomplete(_));
                let (reason, message, outcome) = match failure {
                    WipeFailed::Refused(m) => (Reason::WipeRefused, m, StepOutcome::Refused),
                    WipeFailed::Error(m) => (Reason::WipeFailed, m, StepOutcome::Error),
                    WipeFailed::Incomplete(m) => (Reason::WipeIncomplete, m, StepOutcome::Error),
                };
                self.s
                    .metrics
                    .wipes
                    .get_or_create(&WipeLabels { method, outcome })
                    .inc();
                let b = self.backoff.entry(order.key.clone()).or_insert(Backoff {
                    failures: 0,
                    not_before: Instant::now(),
                    host_path: order.host_path.clone(),
                    last_error: String::new(),
                    incomplete,
                });
                b.incomplete = incomplete;
                b.failures += 1;
                b.last_error = message.clone();
                let delay = cadence::wipe_backoff(b.failures);
                b.not_before = Instant::now() + delay;
                warn!(disk = %order.key, %reason, note = %message, retry_in = ?delay, "wipe did not complete");
                if let Some(pv) = &order.pv {
                    let warning = KubeEventType::Warning;
                    self.writer
                        .on_pv(&pv.name, Some(&pv.uid), warning, reason, &message)
                        .await;
                }
            }
        }
    }

    /// The mount table changed: wipes held out because their volume was not empty are due now.
    pub(super) fn mounts_changed(&mut self) {
        let now = Instant::now();
        for key in due_after_mount_change(self.backoff.iter(), now) {
            if let Some(b) = self.backoff.get_mut(&key) {
                b.not_before = now;
            }
        }
    }

    /// Cancels running wipes and joins their tasks (a cancelled wipe is incomplete: it runs again after restart).
    pub(super) async fn stop_wipes(&mut self) {
        for r in self.running.values() {
            r.ctl.cancel();
        }
        for (_, r) in self.running.drain() {
            let _ = tokio::time::timeout(Duration::from_secs(3), r.task).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use super::{Backoff, due_after_mount_change};

    fn backoff(incomplete: bool, in_secs: u64, now: Instant) -> Backoff {
        Backoff {
            failures: 1,
            not_before: now + Duration::from_secs(in_secs),
            host_path: "/mnt/disks/vol1".into(),
            last_error: String::new(),
            incomplete,
        }
    }

    #[test]
    fn a_mount_change_makes_only_wipes_left_incomplete_due_now() {
        let now = Instant::now();
        let backoffs = HashMap::from([
            ("mount-inside".to_string(), backoff(true, 10, now)),
            ("failed".to_string(), backoff(false, 10, now)),
            ("already-due".to_string(), backoff(true, 0, now)),
        ]);
        assert_eq!(
            due_after_mount_change(backoffs.iter(), now),
            ["mount-inside".to_string()]
        );
    }
}
