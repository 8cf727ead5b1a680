//! The agent's side of disk health (issue 37): every `diskHealthCheckPeriod` it looks at every found disk (`Host::health`:
//! sysfs, `statvfs`, one direct read), judges each (`health::judge`, pure) against what it remembered, and hands the
//! disks that are not healthy to the planner and the inventory as `Discovery::unhealthy`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use crate::disk::{Discovery, DiscoveryClass, DiskHealth};
use crate::health::{self, Policy, Record, State};
use crate::host::Host;
use crate::host::health::HealthProbe;

#[derive(Default)]
pub struct HealthBook {
    records: HashMap<PathBuf, Record>,
    next: Option<Instant>,
    round: u64,
}

impl HealthBook {
    /// Whether a look is due now.
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|at| now >= at)
    }

    /// How long until the next look.
    pub fn wait(&self, now: Instant) -> Duration {
        self.next
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now))
    }

    /// Looks at every disk of `found` (blocking: sysfs, `statvfs`, a direct read per disk) and judges each.
    pub fn observe(
        &mut self,
        host: &dyn Host,
        classes: &[DiscoveryClass],
        found: &Discovery,
        (policy, period): (Policy, Duration),
    ) {
        let now = SystemTime::now();
        self.round = self.round.wrapping_add(1);
        // NB: one read of the mount table per look, for every disk's superblock options.
        let supers: HashMap<PathBuf, String> = host
            .mount_table()
            .map(|t| {
                t.entries
                    .iter()
                    .map(|m| (m.mount_point.clone(), m.super_options.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut seen = HashMap::with_capacity(found.disks.len());
        for disk in &found.disks {
            let Some(class) = classes.iter().find(|c| c.name == disk.class) else {
                continue;
            };
            let path = class.mount_dir.join(&disk.entry);
            let probe = HealthProbe {
                super_options: supers.get(&path).cloned(),
                path,
                mode: disk.mode,
                dev: disk.identity.dev_id,
                device: disk.identity.device.as_ref().map(PathBuf::from),
                fs_type: disk.identity.fs_type.clone(),
                round: self.round,
            };
            let signals = host.health(&probe);
            let before = self.records.get(&disk.host_path);
            let after = health::judge(before, &signals, &policy, now);
            let was = before.map_or(State::Healthy, |r| r.state);
            if after.state != was {
                let path = disk.host_path.display();
                match after.state {
                    State::Healthy => info!(%path, "disk healthy again"),
                    state => {
                        warn!(%path, state = state.as_str(), cause = after.cause.as_str(), note = %after.message, "disk health changed")
                    }
                }
            }
            seen.insert(disk.host_path.clone(), after);
        }
        // NB: a disk no longer found is forgotten; its PV's side (a vanished disk) is the planner's DiskMissing.
        self.records = seen;
        self.next = Some(Instant::now() + period);
    }

    /// Lists in `found` the disks that are not healthy, as last judged.
    pub fn annotate(&self, found: &mut Discovery) {
        let mut unhealthy: Vec<DiskHealth> = found
            .disks
            .iter()
            .filter_map(|disk| {
                let record = self.records.get(&disk.host_path)?;
                (record.state != State::Healthy).then(|| DiskHealth {
                    host_path: disk.host_path.clone(),
                    state: record.state,
                    cause: record.cause,
                    message: record.message.clone(),
                })
            })
            .collect();
        unhealthy.sort_by(|a, b| a.host_path.cmp(&b.host_path));
        found.unhealthy = unhealthy;
    }

    /// How many disks are in each state, for the metrics.
    pub fn counts(&self) -> [(State, i64); 3] {
        let count = |s: State| self.records.values().filter(|r| r.state == s).count() as i64;
        [State::Healthy, State::Degraded, State::Failed].map(|s| (s, count(s)))
    }
}

/// The paths of this node's LocalDisks an operator cordoned (`localpv.io/cordoned`, any value but `false`), sorted.
pub fn cordoned(disks: &[std::sync::Arc<crate::inventory::LocalDisk>]) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = disks
        .iter()
        .filter(|d| {
            d.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::contract::ANN_CORDONED))
                .is_some_and(|v| v != "false")
        })
        .map(|d| PathBuf::from(&d.spec.path))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}
