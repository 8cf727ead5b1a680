//! The agent's side of disk health (issue 37): every `diskHealthCheckPeriod` it looks at every found disk (`Host::health`:
//! sysfs, `statvfs`, one direct read), judges each (`health::judge`, pure) against what it remembered, and hands the
//! disks that are not healthy to the planner and the inventory as `Discovery::unhealthy`, and to the metrics as one
//! [`DiskSample`] per disk.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use crate::disk::{Discovery, DiscoveryClass, DiskHealth, VolumeMode};
use crate::health::{self, Hardware, Policy, Record, State};
use crate::host::Host;
use crate::host::health::HealthProbe;

/// What the metrics show of one found disk, by its class and entry (`localpv disks` names it `NODE/ENTRY`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSample {
    pub class: String,
    pub entry: String,
    pub state: State,
    /// I/O errors seen on the disk since the agent first looked at it: rises of the filesystem's error counter and
    /// failed probes (what `health::judge` counts towards `failed_after_errors`), never reset while it is found.
    pub io_errors: u64,
    /// The drive's own health log as last read (NVMe, ATA), when the agent reads one for it.
    pub hardware: Option<Hardware>,
}

#[derive(Default)]
pub struct HealthBook {
    records: HashMap<PathBuf, Record>,
    samples: BTreeMap<PathBuf, DiskSample>,
    next: Option<Instant>,
    round: u64,
}

impl HealthBook {
    /// Whether a look is due now.
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|at| now >= at)
    }

    /// Whether to look now: when due, or when `found` holds a block device measured at size 0 (detached, media
    /// gone) that this book does not already know as unhealthy. NB: otherwise the pass before the next look would
    /// publish a gone device (its PV refused by the API server for a capacity of 0); once known, the usual period
    /// stands, so a device gone for the grace is not looked at every pass.
    pub fn must_look(&self, now: Instant, found: &Discovery) -> bool {
        self.due(now)
            || found.disks.iter().any(|d| {
                d.mode == VolumeMode::Block
                    && d.capacity_bytes == 0
                    && self
                        .records
                        .get(&d.host_path)
                        .is_none_or(|r| r.state == State::Healthy)
            })
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
        let mut samples = BTreeMap::new();
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
            // NB: `new_errors` only grows until the disk is Healthy again, where it restarts at 0 with no error seen.
            let new = after
                .new_errors
                .saturating_sub(before.map_or(0, |r| r.new_errors));
            let io_errors = self.samples.get(&disk.host_path).map_or(0, |s| s.io_errors) + new;
            samples.insert(
                disk.host_path.clone(),
                DiskSample {
                    class: disk.class.clone(),
                    entry: disk.entry.clone(),
                    state: after.state,
                    io_errors,
                    hardware: signals.hardware.clone(),
                },
            );
            seen.insert(disk.host_path.clone(), after);
        }
        // NB: a disk no longer found is forgotten; its PV's side (a vanished disk) is the planner's DiskMissing.
        self.records = seen;
        self.samples = samples;
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

    /// Every found disk as last looked at, for the per-disk metrics.
    pub fn samples(&self) -> impl Iterator<Item = &DiskSample> {
        self.samples.values()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::Disk;

    fn block(path: &str, capacity_bytes: u64) -> Disk {
        Disk {
            host_path: path.into(),
            mode: VolumeMode::Block,
            capacity_bytes,
            ..crate::plan::fixtures::disk("x")
        }
    }

    #[test]
    fn a_block_device_of_size_zero_is_looked_at_at_once_unless_already_known_unhealthy() {
        let mut book = HealthBook::default();
        let later = Instant::now();
        book.next = Some(later + Duration::from_secs(60));
        let found = |disks: Vec<Disk>| Discovery {
            disks: disks.into_iter().map(std::sync::Arc::new).collect(),
            ..Discovery::default()
        };
        assert!(
            !book.must_look(later, &found(vec![block("/d/a", 1 << 30)])),
            "not due"
        );
        assert!(
            book.must_look(later, &found(vec![block("/d/a", 0)])),
            "size 0: now"
        );
        book.records.insert(
            "/d/a".into(),
            Record {
                state: State::Degraded,
                cause: health::Cause::DeviceGone,
                message: "gone".into(),
                since: SystemTime::now(),
                baseline_errors: None,
                baseline_media_errors: None,
                new_errors: 0,
                last_sign: None,
                gone_since: Some(SystemTime::now()),
            },
        );
        assert!(
            !book.must_look(later, &found(vec![block("/d/a", 0)])),
            "already known gone: the usual period"
        );
        let fs = Disk {
            mode: VolumeMode::Filesystem,
            ..block("/d/b", 0)
        };
        assert!(
            !book.must_look(later, &found(vec![fs])),
            "a filesystem's size is its own"
        );
    }
}
