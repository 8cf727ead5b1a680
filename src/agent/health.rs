//! The agent's side of disk health (issue 37): every `diskHealthCheckPeriod` it looks at every found disk (`Host::health`:
//! sysfs, `statvfs`, one direct read), judges each (`health::judge`, pure) against what it remembered, and hands the
//! disks that are not healthy to the planner and the inventory as `Discovery::unhealthy`, and to the metrics as one
//! [`DiskSample`] per disk.
//!
//! What it judged outlives the agent: every record, and which PVs were told their disk was failing, is kept in
//! `disk-health.json` in the state directory (written atomically when it changes). A restarted agent goes on from
//! there: a `Failed` disk stays `Failed` (its PV not published again, its Released PV not wiped), a `Degraded` one
//! waits out the rest of its quiet period, a counter that rose while the agent was down is news, and a PV told of a
//! failing disk gets `DiskHealthy` when the disk heals, not a second warning.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::disk::{Discovery, DiscoveryClass, DiskHealth, VolumeMode};
use crate::health::{self, Hardware, Policy, Record, State};
use crate::host::Host;
use crate::host::health::HealthProbe;
use crate::plan::state::{Condition, Memory};

/// The file in the state directory that keeps the book across restarts.
const FILE: &str = "disk-health.json";

/// What `disk-health.json` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Stored {
    /// Every disk found at the last look, by host path: the ledger key it had then, and its record.
    disks: BTreeMap<PathBuf, Kept>,
    /// The PVs (by UID) told their disk was `Degraded` or `Failed`, as the last pass left them.
    #[serde(default)]
    told: BTreeMap<String, BTreeSet<Condition>>,
    /// The last `localpv.io/health-cleared` value honoured for each disk, by host path: a new value is a new clear.
    #[serde(default)]
    cleared: BTreeMap<PathBuf, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Kept {
    key: String,
    record: Record,
}

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
    /// The ledger key of each disk in `records`, as last looked at.
    keys: HashMap<PathBuf, String>,
    samples: BTreeMap<PathBuf, DiskSample>,
    next: Option<Instant>,
    round: u64,
    /// Where the book is kept (`None`: not kept, in tests).
    file: Option<PathBuf>,
    /// What the file holds now.
    stored: Stored,
    /// The records read at start, until the first look matches them to the disks found.
    restored: Option<BTreeMap<PathBuf, Kept>>,
}

impl HealthBook {
    /// The book kept in `state_dir`, as the last agent left it, and the planner's memory of the PVs it told. A file
    /// that cannot be read starts an empty book (said in the log): every disk is judged afresh, as before the file.
    pub fn open(state_dir: &Path) -> (HealthBook, Memory) {
        let file = state_dir.join(FILE);
        let read = match std::fs::read(&file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Stored::default()),
            read => read
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string())),
        };
        let stored = read.unwrap_or_else(|error| {
            warn!(%error, path = %file.display(), "unreadable disk health record; every disk is judged afresh");
            Stored::default()
        });
        let memory = Memory {
            conditions: stored.told.clone(),
            ..Memory::default()
        };
        let restored = (!stored.disks.is_empty()).then(|| stored.disks.clone());
        let book = HealthBook {
            file: Some(file),
            stored,
            restored,
            ..HealthBook::default()
        };
        (book, memory)
    }

    /// Keeps which PVs the planner told their disk was failing (from its `memory` after a pass).
    pub fn told(&mut self, memory: &Memory) {
        let told = memory.health_told();
        if told != self.stored.told {
            let stored = Stored {
                told,
                ..self.stored.clone()
            };
            self.save(stored);
        }
    }

    /// Writes `stored` when it differs from what the file holds. A failed write is logged and tried again at the
    /// next change: what is lost then is only what a restart would have forgotten without the file.
    fn save(&mut self, stored: Stored) {
        if stored == self.stored {
            return;
        }
        if let Some(file) = &self.file {
            let bytes = serde_json::to_vec(&stored).expect("a health record always serialises");
            let dir = file.parent().unwrap_or(Path::new("."));
            let written =
                super::ledger::replace(file, &bytes).and_then(|()| super::ledger::sync_dir(dir));
            if let Err(error) = written {
                warn!(%error, path = %file.display(), "failed to keep the disks' health; kept in memory");
                return;
            }
        }
        self.stored = stored;
    }

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
        clears: &BTreeMap<PathBuf, String>,
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
        let mut keys = HashMap::with_capacity(found.disks.len());
        let mut cleared = self.stored.cleared.clone();
        let mut samples = BTreeMap::new();
        let mut changed = false;
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
            let key = crate::plan::identity::disk_key(disk);
            let restored = self
                .restored
                .as_mut()
                .and_then(|r| r.remove(&disk.host_path));
            let restored = restored
                .filter(|kept| crate::plan::identity::keys_may_match(&kept.key, &key))
                .map(|kept| kept.record);
            let mut before = self
                .records
                .get(&disk.host_path)
                .or(restored.as_ref())
                .cloned();
            if let Some(value) = clears.get(&disk.host_path)
                && self.stored.cleared.get(&disk.host_path) != Some(value)
            {
                if let Some(record) = before.as_mut().filter(|r| r.state != State::Healthy) {
                    info!(path = %disk.host_path.display(), was = record.state.as_str(), "health cleared by an operator");
                    *record = health::cleared(record, now);
                }
                cleared.insert(disk.host_path.clone(), value.clone());
            }
            let before = before.as_ref();
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
            // NB: compared as the look goes, so that the records are copied for the file only when it changes.
            changed |= self
                .stored
                .disks
                .get(&disk.host_path)
                .is_none_or(|kept| kept.key != key || kept.record != after);
            seen.insert(disk.host_path.clone(), after);
            keys.insert(disk.host_path.clone(), key);
        }
        // NB: a disk no longer found is forgotten; its PV's side (a vanished disk) is the planner's DiskMissing. So is
        // a restored record whose disk the first look did not find.
        self.restored = None;
        self.records = seen;
        self.keys = keys;
        self.samples = samples;
        self.next = Some(Instant::now() + period);
        // NB: a value honoured for a disk no longer found is forgotten with its record.
        cleared.retain(|path, _| self.records.contains_key(path));
        // Every disk seen is kept as stored: the file changes only if one went, or a clear was honoured or forgotten.
        changed |= self.records.len() != self.stored.disks.len() || cleared != self.stored.cleared;
        if !changed {
            return;
        }
        let disks = self
            .records
            .iter()
            .filter_map(|(path, record)| {
                let key = self.keys.get(path)?.clone();
                let record = record.clone();
                Some((path.clone(), Kept { key, record }))
            })
            .collect();
        let stored = Stored {
            disks,
            told: self.stored.told.clone(),
            cleared,
        };
        self.save(stored);
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

/// What an operator set on this node's LocalDisks with `localpv disks`, by path, read in one scan of them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OperatorMarks {
    /// The `localpv.io/health-cleared` value of each disk that has one.
    pub clears: BTreeMap<PathBuf, String>,
    /// The disks cordoned (`localpv.io/cordoned`, any value but `false`), sorted.
    pub cordoned: Vec<PathBuf>,
}

pub fn operator_marks(disks: &[std::sync::Arc<crate::inventory::LocalDisk>]) -> OperatorMarks {
    let mut marks = OperatorMarks::default();
    for disk in disks {
        let Some(annotations) = disk.metadata.annotations.as_ref() else {
            continue;
        };
        let path = || PathBuf::from(&disk.spec.path);
        if let Some(value) = annotations.get(crate::contract::ANN_HEALTH_CLEARED) {
            marks.clears.insert(path(), value.clone());
        }
        if annotations
            .get(crate::contract::ANN_CORDONED)
            .is_some_and(|v| v != "false")
        {
            marks.cordoned.push(path());
        }
    }
    marks.cordoned.sort();
    marks.cordoned.dedup();
    marks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::Disk;

    #[test]
    fn one_scan_reads_the_clears_and_the_cordons() {
        use crate::contract::{ANN_CORDONED, ANN_HEALTH_CLEARED};
        let disk = |path: &str, annotations: &[(&str, &str)]| {
            let mut d = crate::inventory::LocalDisk::new("d", Default::default());
            d.spec.path = path.into();
            let a = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()));
            d.metadata.annotations = (!annotations.is_empty()).then(|| a.collect());
            std::sync::Arc::new(d)
        };
        let disks = [
            disk("/mnt/disks/c", &[(ANN_CORDONED, "true")]),
            disk(
                "/mnt/disks/a",
                &[(ANN_CORDONED, ""), (ANN_HEALTH_CLEARED, "t1")],
            ),
            disk("/mnt/disks/b", &[(ANN_CORDONED, "false")]),
            disk("/mnt/disks/d", &[]),
        ];
        let marks = operator_marks(&disks);
        assert_eq!(
            marks.cordoned,
            [PathBuf::from("/mnt/disks/a"), "/mnt/disks/c".into()]
        );
        assert_eq!(
            marks.clears,
            BTreeMap::from([(PathBuf::from("/mnt/disks/a"), "t1".to_string())])
        );
        assert_eq!(operator_marks(&[]), OperatorMarks::default());
    }

    fn block(path: &str, capacity_bytes: u64) -> Disk {
        Disk {
            host_path: path.into(),
            mode: VolumeMode::Block,
            capacity_bytes,
            ..crate::plan::fixtures::disk("x")
        }
    }

    /// One look at `disks` with the fake host's canned `signals` (by path), as the agent makes it.
    fn look(book: &mut HealthBook, host: &crate::host::fake::FakeHost, disks: &[Disk]) {
        look_cleared(book, host, disks, &BTreeMap::new());
    }

    fn look_cleared(
        book: &mut HealthBook,
        host: &crate::host::fake::FakeHost,
        disks: &[Disk],
        clears: &BTreeMap<PathBuf, String>,
    ) {
        let fixture = crate::plan::fixtures::disk("x");
        let class = DiscoveryClass {
            name: fixture.class.clone(),
            host_dir: fixture.host_path.parent().expect("dir").to_path_buf(),
            mount_dir: fixture.host_path.parent().expect("dir").to_path_buf(),
            mode: VolumeMode::Filesystem,
            name_patterns: vec!["*".into()],
        };
        let found = Discovery {
            disks: disks.iter().cloned().map(std::sync::Arc::new).collect(),
            ..Discovery::default()
        };
        let policy = Policy {
            failed_after_errors: 1,
            ..Policy::default()
        };
        book.observe(
            host,
            &[class],
            &found,
            (policy, Duration::from_secs(60)),
            clears,
        );
    }

    /// The fake host's direct read of `disk` fails from now on.
    fn fail_probes(host: &crate::host::fake::FakeHost, disk: &Disk) {
        let fails = crate::health::Signals {
            probe_error: Some("EIO".into()),
            ..Default::default()
        };
        host.health
            .lock()
            .unwrap()
            .insert(disk.host_path.clone(), fails);
    }

    fn state_of(book: &HealthBook, disk: &Disk) -> State {
        book.records
            .get(&disk.host_path)
            .map_or(State::Healthy, |r| r.state)
    }

    #[test]
    fn the_file_is_written_only_when_a_look_changes_what_it_keeps() {
        use crate::host::fake::FakeHost;
        use crate::plan::fixtures::disk;
        let dir = tempfile::tempdir().expect("state dir");
        let file = dir.path().join(FILE);
        let (a, b) = (disk("a"), disk("b"));
        let host = FakeHost::new();
        let (mut book, _) = HealthBook::open(dir.path());
        look(&mut book, &host, &[a.clone(), b.clone()]);
        assert!(file.exists(), "the first look keeps both");
        std::fs::remove_file(&file).expect("remove");
        look(&mut book, &host, &[a.clone(), b.clone()]);
        assert!(!file.exists(), "nothing changed: not written");
        look(&mut book, &host, std::slice::from_ref(&a));
        assert!(file.exists(), "a disk went: written");
        std::fs::remove_file(&file).expect("remove");
        let clear = BTreeMap::from([(a.host_path.clone(), "t1".to_string())]);
        look_cleared(&mut book, &host, std::slice::from_ref(&a), &clear);
        assert!(file.exists(), "a clear honoured: written");
        std::fs::remove_file(&file).expect("remove");
        fail_probes(&host, &a);
        look_cleared(&mut book, &host, std::slice::from_ref(&a), &clear);
        assert!(file.exists(), "a record changed: written");
        let (reopened, _) = HealthBook::open(dir.path());
        assert_eq!(reopened.stored, book.stored, "as kept in memory");
    }

    #[test]
    fn a_restarted_agent_goes_on_from_the_health_it_kept_unless_the_disk_at_the_path_is_another() {
        use crate::host::fake::FakeHost;
        use crate::plan::fixtures::{disk, with_uuid};
        let dir = tempfile::tempdir().expect("state dir");
        let (sick, bumped, other) = (disk("sick"), disk("bumped"), disk("other"));
        let host = FakeHost::new();
        fail_probes(&host, &sick);
        fail_probes(&host, &other);
        let counted = |n| crate::health::Signals {
            fs_errors: Some(n),
            ..Default::default()
        };
        host.health
            .lock()
            .unwrap()
            .insert(bumped.host_path.clone(), counted(4));
        let (mut book, memory) = HealthBook::open(dir.path());
        assert_eq!(memory, Memory::default(), "nothing kept yet");
        let all = [sick.clone(), bumped.clone(), other.clone()];
        look(&mut book, &host, &all);
        assert_eq!(state_of(&book, &sick), State::Failed);
        let mut told = Memory::default();
        told.conditions.insert(
            "pv-1".into(),
            [Condition::DiskFailed, Condition::Foreign].into(),
        );
        book.told(&told);

        // The agent restarts; the errors stopped, the counter rose while it was down, and at `other`'s path is now
        // a disk with another filesystem UUID.
        let host = FakeHost::new();
        host.health
            .lock()
            .unwrap()
            .insert(bumped.host_path.clone(), counted(5));
        let (mut book, memory) = HealthBook::open(dir.path());
        assert_eq!(
            memory.conditions.get("pv-1"),
            Some(&[Condition::DiskFailed].into()),
            "only the health warnings are kept"
        );
        let replaced = with_uuid(other.clone(), "uuid-new");
        look(
            &mut book,
            &host,
            &[sick.clone(), bumped.clone(), replaced.clone()],
        );
        assert_eq!(state_of(&book, &sick), State::Failed, "Failed stays Failed");
        assert_eq!(
            state_of(&book, &bumped),
            State::Failed,
            "a rise while down is news"
        );
        assert_eq!(
            state_of(&book, &replaced),
            State::Healthy,
            "another disk is judged afresh"
        );

        // An operator clears it: Healthy once per value, kept across a restart; a new sign fails it again, and only
        // a new value clears it again.
        let clear = |value: &str| BTreeMap::from([(sick.host_path.clone(), value.to_string())]);
        look_cleared(&mut book, &host, std::slice::from_ref(&sick), &clear("t1"));
        assert_eq!(state_of(&book, &sick), State::Healthy, "cleared");
        let (mut book, _) = HealthBook::open(dir.path());
        fail_probes(&host, &sick);
        look_cleared(&mut book, &host, std::slice::from_ref(&sick), &clear("t1"));
        assert_eq!(
            state_of(&book, &sick),
            State::Failed,
            "the same value clears nothing twice"
        );
        host.health.lock().unwrap().remove(&sick.host_path);
        look_cleared(&mut book, &host, std::slice::from_ref(&sick), &clear("t2"));
        assert_eq!(
            state_of(&book, &sick),
            State::Healthy,
            "a new value is a new clear"
        );

        // A file that cannot be read starts afresh.
        std::fs::write(dir.path().join(FILE), b"{not json").expect("write");
        let (mut book, memory) = HealthBook::open(dir.path());
        assert_eq!(memory, Memory::default());
        look(&mut book, &host, std::slice::from_ref(&sick));
        assert_eq!(state_of(&book, &sick), State::Healthy);
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
