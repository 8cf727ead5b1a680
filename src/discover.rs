//! One discovery pass: what volumes does this node hold right now?
//!
//! ```text
//!  DiscoveryClass[] ──> gather (Host: mount table, canonical dirs, listings) ──> classify (pure)
//!                                                                                  │ candidates   │ unusable
//!                        measure each candidate (Host: statvfs | BLKGETSIZE64, <───┘              │
//!                        device node, libblkid, udev/sysfs) ──> Disk | Unusable(ProbeFailed) ─────┴─> Discovery
//! ```
//!
//! Failures are contained where they happen: one entry that cannot be measured becomes `ProbeFailed` and the pass
//! goes on; a class whose directory (or, for Filesystem classes, the mount table) cannot be read is reported in
//! `Discovery::failed_classes`, meaning "unknown", never "empty". All probing goes through `mount_dir`; PVs get
//! `host_dir` paths.
//!
//! The agent passes a [`Probed`] cache: a filesystem candidate whose mount table entry (mount id, device, root,
//! options, source) is the one measured last time is not measured again, so a pass after one new mount probes one
//! entry whatever the number of disks on the node. Block entries are always measured (a device number can be
//! reused by another device, e.g. a loop device re-attached to another file); the agent forgets an entry after it
//! changed it itself (volume id stored, wipe) and empties the cache on each periodic resync, which refreshes
//! free space and catches what no mount event shows (an xattr changed by hand).
//!
//! The cache also keeps what the last pass listed and classified: [`discover_again`] reuses it instead of reading
//! the mount table and the directories, for a pass the agent knows nothing on the host changed since (no mount or
//! directory event, no resync): it measures only entries forgotten since, and block entries. After a mount or
//! directory event, [`discover_changed`] looks again at only the entries the event named, and at the mount table.
//!
//! NB: over 500 lines because the three entry points ([`discover_with`], [`discover_changed`], [`discover_again`])
//! and the probe cache share the kept classification (`Gathered`), whose positions and reusable measurements hold
//! only if every path updates them alike; the rules are in `classify`, the path after an event in `touched`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::debug;

use crate::contract::DevId;
use crate::disk::{
    ClassFailure, Discovery, DiscoveryClass, Disk, DiskIdentity, Unusable, UnusableReason,
    VolumeMode,
};
use crate::fasthash::{FastMap, FastSet};
use crate::host::{
    DirEntry, EntryKind, Host, HostChanges, HostError, MountEntry, MountTable, VolumeTag,
    error_chain,
};

pub mod classify;
pub mod pattern;
mod touched;

use classify::{Candidate, CandidateKind, Listing};

/// Filesystem measurements of earlier passes, by host path with the mount they were taken on, and what the last
/// pass listed and classified.
#[derive(Debug, Default)]
pub struct Probed {
    disks: FastMap<PathBuf, Cached>,
    gathered: Option<Gathered>,
    /// Positions in the kept candidates of the entries forgotten since the last pass: measured again by
    /// [`discover_again`], which finds them without looking every candidate up.
    forgotten: Vec<usize>,
    /// Candidates measured by the last pass (cache misses and block entries).
    pub last_measured: usize,
    /// Entries the last pass classified: every listed entry, only those an event touched, or none.
    pub last_classified: usize,
}

/// One filesystem measurement, with the mount it was taken on and the candidate's position in the kept
/// classification.
#[derive(Debug)]
struct Cached {
    key: ProbeKey,
    disk: Arc<Disk>,
    at: usize,
}

impl Probed {
    /// After a mount event, forgets every filesystem measurement unless the last table carried the kernel's unique
    /// mount ids. NB: mountinfo's ids are handed out again, so a filesystem unmounted, made again and mounted between
    /// two reads has the id, device, path and options of the one it replaced; only measuring again tells them apart.
    fn forget_unless_ids_unique(&mut self) {
        let unique = self
            .gathered
            .as_ref()
            .and_then(|g| g.table.as_ref())
            .is_some_and(MountTable::ids_unique);
        if unique {
            return;
        }
        self.disks.clear();
        if let Some(gathered) = &mut self.gathered {
            gathered.reusable.iter_mut().for_each(|r| *r = None);
        }
    }
}

/// What identifies the mount a measurement was taken on: with the kernel's unique mount id, a filesystem mounted
/// again is another mount.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ProbeKey {
    class: String,
    probe_path: PathBuf,
    mount: Arc<MountEntry>,
}

/// The last pass's listings and classification, kept for a pass that need not look at the host again
/// ([`discover_again`]) or only at what changed ([`discover_changed`]).
#[derive(Debug)]
struct Gathered {
    classes: Vec<DiscoveryClass>,
    /// Each class's listing (or why it failed), in class order.
    listed: Vec<Result<Listed, String>>,
    candidates: Vec<KeptCandidate>,
    /// Per candidate, the measurement a pass with no change on the host reuses: a filesystem entry's cached one;
    /// `None` for what every pass measures again (block entries, entries that failed to measure).
    reusable: Vec<Option<Arc<Disk>>>,
    /// Rejected entries and failed classes (probe failures are decided again with each measurement).
    unusable: Vec<Unusable>,
    failed_classes: Vec<ClassFailure>,
    /// The mount table classified against (`None` when it could not be read): the next pass after a mount event
    /// looks again at only the entries under mounts that changed since ([`touched`]).
    table: Option<MountTable>,
}

/// A class's directory as listed, without the borrow of its class.
#[derive(Debug, Default)]
struct Listed {
    resolved_dir: PathBuf,
    entries: Vec<DirEntry>,
}

impl Gathered {
    /// Whether the listings still stand for the directories when no directory event came since: every class
    /// listed, and no entry whose kind can change without one.
    fn reusable(&self) -> bool {
        self.listed.iter().all(|listed| {
            listed.as_ref().is_ok_and(|l| {
                l.entries.iter().all(|e| {
                    !matches!(
                        e.kind,
                        EntryKind::Symlink { .. } | EntryKind::Unreadable { .. }
                    )
                })
            })
        })
    }
}

/// A [`Candidate`] without the borrow of its class.
#[derive(Debug)]
struct KeptCandidate {
    /// Its class's position in `Gathered::classes`.
    class: usize,
    entry: String,
    host_path: PathBuf,
    probe_path: PathBuf,
    kind: CandidateKind,
}

impl Probed {
    /// Measure the entry at `host_path` again in the next pass (the agent changed it).
    pub fn forget(&mut self, host_path: &Path) {
        if let Some(cached) = self.disks.remove(host_path) {
            self.forgotten.push(cached.at);
        }
    }

    /// Measure everything again in the next pass, after listing it again.
    pub fn clear(&mut self) {
        self.disks.clear();
        self.gathered = None;
        self.forgotten.clear();
    }

    pub fn len(&self) -> usize {
        self.disks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.disks.is_empty()
    }
}

/// Look at every class's discovery directory and report each matching entry as a disk or as unusable.
pub fn discover(host: &dyn Host, classes: &[DiscoveryClass]) -> Discovery {
    discover_with(host, classes, &mut Probed::default())
}

/// [`discover_with`] on what the last pass listed and classified, when the classes are the same: measures only
/// entries forgotten since (and block entries, always), never reads the mount table or a directory. For a pass
/// nothing on the host can have changed before, except what the agent changed itself and forgot.
pub fn discover_again(
    host: &dyn Host,
    classes: &[DiscoveryClass],
    probed: &mut Probed,
) -> Discovery {
    let Some(mut gathered) = probed.gathered.take().filter(|g| g.classes == classes) else {
        return discover_with(host, classes, probed);
    };
    let again = measured_again(&gathered, probed, Vec::new());
    let discovery = measure_kept(host, &mut gathered, &again, probed);
    probed.last_classified = 0;
    probed.gathered = Some(gathered);
    discovery
}

/// `positions` and the kept candidates every pass measures again: those forgotten since (the agent changed them)
/// and those with nothing to reuse (block entries, failed measurements). NB: only these are looked at; the others'
/// cached measurements stand as they are, found by position, not by path.
fn measured_again(
    gathered: &Gathered,
    probed: &mut Probed,
    mut positions: Vec<usize>,
) -> Vec<usize> {
    positions.append(&mut probed.forgotten);
    positions.extend(
        gathered
            .reusable
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_none())
            .map(|(i, _)| i),
    );
    positions.sort_unstable();
    positions.dedup();
    positions
}

/// Measures the kept candidates at `positions` (one found in the cache on the same mount is not measured again)
/// and hands over the others' kept measurements, found by position.
fn measure_kept(
    host: &dyn Host,
    gathered: &mut Gathered,
    positions: &[usize],
    probed: &mut Probed,
) -> Discovery {
    let mut disks: Vec<Option<Arc<Disk>>> = gathered.reusable.clone();
    let mut unusable = gathered.unusable.clone();
    let mut measured = 0;
    for &i in positions {
        let (Some(c), Some(slot)) = (gathered.candidates.get(i), disks.get_mut(i)) else {
            continue;
        };
        let candidate = Probe {
            class: &gathered.classes[c.class],
            entry: &c.entry,
            host_path: &c.host_path,
            probe_path: &c.probe_path,
            kind: &c.kind,
        };
        if let Some(disk) = cache_hit(probed, &candidate, i) {
            gathered.reusable[i] = Some(disk.clone());
            *slot = Some(disk);
            continue;
        }
        measured += 1;
        match measure_into(host, &candidate, i, probed) {
            Ok((disk, cached)) => {
                gathered.reusable[i] = cached.then(|| disk.clone());
                *slot = Some(disk);
            }
            Err(failed) => {
                gathered.reusable[i] = None;
                *slot = None;
                unusable.push(failed);
            }
        }
    }
    probed.last_measured = measured;
    Discovery {
        disks: disks.into_iter().flatten().collect(),
        unusable,
        failed_classes: gathered.failed_classes.clone(),
        unhealthy: Vec::new(),
        cordoned: Vec::new(),
    }
}

/// Measures one candidate (the `at`-th of the kept classification) and caches a filesystem entry's measurement;
/// true beside the disk when it was cached. NB: a measurement that failed or is a block entry's leaves nothing
/// cached at the path.
fn measure_into(
    host: &dyn Host,
    candidate: &Probe<'_>,
    at: usize,
    probed: &mut Probed,
) -> Result<(Arc<Disk>, bool), Unusable> {
    probed.disks.remove(candidate.host_path);
    let disk = Arc::new(measure(host, candidate).map_err(|e| probe_failed(candidate, &e))?);
    let CandidateKind::Filesystem { mount } = candidate.kind else {
        return Ok((disk, false));
    };
    let cached = Cached {
        key: ProbeKey {
            class: candidate.class.name.clone(),
            probe_path: candidate.probe_path.to_path_buf(),
            mount: mount.clone(),
        },
        disk: disk.clone(),
        at,
    };
    probed
        .disks
        .insert(candidate.host_path.to_path_buf(), cached);
    Ok((disk, true))
}

/// [`discover`], reusing the measurements in `probed` for filesystem entries whose mount did not change. Keeps
/// only this pass's measurements in `probed`, so it never grows beyond the disks present.
pub fn discover_with(
    host: &dyn Host,
    classes: &[DiscoveryClass],
    probed: &mut Probed,
) -> Discovery {
    let listed = classes
        .iter()
        .map(|class| list_class(host, class))
        .collect();
    discover_listed(host, classes, listed, host.mount_table(), probed)
}

/// [`discover_with`] looking at only what `changes` names: the named entries of the last pass's listings looked
/// at again (the rest of each listing stands) and the mount table read again; nothing on the host when nothing
/// changed ([`discover_again`]). Lists every directory again when `changes` says so or the last listing cannot
/// stand for a directory: another set of classes, a class that failed, or an entry that is a symlink (its target
/// can change with no event in the directory) or could not be looked at.
pub fn discover_changed(
    host: &dyn Host,
    classes: &[DiscoveryClass],
    probed: &mut Probed,
    changes: &HostChanges,
) -> Discovery {
    // NB: a directory under /dev is judged whole, so one entry changed there (or a mount, which can be a file bound
    // over a device node) means looking at all of it again.
    let device_dir = |class: &DiscoveryClass| {
        classify::is_device_dir(class, &class.mount_dir)
            && (changes.mounts
                || changes
                    .entries
                    .iter()
                    .any(|(dir, _)| *dir == class.mount_dir))
    };
    if changes.mounts {
        probed.forget_unless_ids_unique();
    }
    if changes.list_all || classes.iter().any(device_dir) {
        return discover_with(host, classes, probed);
    }
    if !changes.mounts && changes.entries.is_empty() {
        return discover_again(host, classes, probed);
    }
    let Some(mut gathered) = probed
        .gathered
        .take()
        .filter(|g| g.classes == classes && g.reusable())
    else {
        return discover_with(host, classes, probed);
    };
    for (dir, name) in &changes.entries {
        let listings = classes.iter().zip(gathered.listed.iter_mut());
        for (_, listed) in listings.filter(|(class, _)| class.mount_dir == *dir) {
            let Ok(listed) = listed else { continue };
            // NB: a failure to look is reported by a full listing, which says which class failed.
            let Ok(found) = host.dir_entry(dir, name) else {
                return discover_with(host, classes, probed);
            };
            let spelled = name.to_string_lossy();
            listed.entries.retain(|e| e.name != spelled);
            listed.entries.extend(found);
        }
    }
    let table = host.mount_table();
    if let Ok(table) = &table
        && let Some(discovery) = touched::discover_touched(
            host,
            classes,
            &mut gathered,
            table,
            &changes.entries,
            probed,
        )
    {
        probed.gathered = Some(gathered);
        return discovery;
    }
    discover_listed(host, classes, gathered.listed, table, probed)
}

/// The common part: read the mount table, classify the listings against it, measure what changed, keep it all.
fn discover_listed(
    host: &dyn Host,
    classes: &[DiscoveryClass],
    listed: Vec<Result<Listed, String>>,
    table: Result<MountTable, HostError>,
    probed: &mut Probed,
) -> Discovery {
    let mut failed_classes = Vec::new();
    let mut listings = Vec::new();
    let mut kept: Vec<Result<Listed, String>> = Vec::with_capacity(listed.len());
    let mut refused = Vec::new();
    for (class, listed) in classes.iter().zip(listed) {
        let device_dir = listed
            .as_ref()
            .is_ok_and(|l| classify::is_device_dir(class, &l.resolved_dir));
        let needs_table = class.mode == VolumeMode::Filesystem || device_dir;
        let listing = match (&table, needs_table, listed) {
            (Err(error), true, _) => Err(error_chain(error)),
            (_, _, listed) => listed,
        };
        let listing = match (listing, &table) {
            (Ok(listed), Ok(table)) if device_dir => {
                device_dir_checked(class, listed, table, &mut refused)
            }
            (listing, _) => listing,
        };
        match listing {
            Ok(listed) => {
                listings.push(Listing {
                    class,
                    resolved_dir: listed.resolved_dir,
                    entries: listed.entries,
                });
                kept.push(Ok(Listed::default()));
            }
            Err(message) => {
                failed_classes.push(ClassFailure {
                    class: class.name.clone(),
                    mount_dir: class.mount_dir.clone(),
                    message: message.clone(),
                });
                kept.push(Err(message));
            }
        }
    }
    let empty = MountTable::default();
    let classified = classify::classify(&listings, table.as_ref().unwrap_or(&empty));
    probed.last_classified = listings.iter().map(|l| l.entries.len()).sum();
    let mut classified = classified;
    classified.unusable.extend(refused);
    let discovery = Discovery {
        disks: Vec::new(),
        unusable: classified.unusable.clone(),
        failed_classes: failed_classes.clone(),
        unhealthy: Vec::new(),
        cordoned: Vec::new(),
    };
    let candidates = classified.candidates.iter().map(Probe::of);
    let (discovery, reusable) = measure_all(host, candidates, discovery, probed);
    let candidates = classified
        .candidates
        .into_iter()
        .map(|c| KeptCandidate {
            class: classes
                .iter()
                .position(|k| std::ptr::eq(k, c.class))
                .expect("a candidate's class is one of the classes listed"),
            entry: c.entry,
            host_path: c.host_path,
            probe_path: c.probe_path,
            kind: c.kind,
        })
        .collect();
    // The listings go back where they came from, in class order, for the next pass to reuse.
    let mut listings = listings.into_iter();
    for slot in kept.iter_mut().filter(|k| k.is_ok()) {
        let listing = listings.next().expect("one listing per class that listed");
        *slot = Ok(Listed {
            resolved_dir: listing.resolved_dir,
            entries: listing.entries,
        });
    }
    probed.gathered = Some(Gathered {
        classes: classes.to_vec(),
        listed: kept,
        candidates,
        reusable,
        unusable: classified.unusable,
        failed_classes,
        table: table.ok(),
    });
    discovery
}

/// A listing of a class directory under `/dev`, or the message that refuses it as a whole; then every entry the
/// class would have looked at goes into `refused`, naming the entry at fault, and the class counts as failed (its
/// PVs are left alone, nothing of it is published or wiped) until the directory holds only devices again.
fn device_dir_checked(
    class: &DiscoveryClass,
    listed: Listed,
    table: &MountTable,
    refused: &mut Vec<Unusable>,
) -> Result<Listed, String> {
    let listing = Listing {
        class,
        resolved_dir: listed.resolved_dir,
        entries: listed.entries,
    };
    match classify::device_dir_problem(&listing, table) {
        None => Ok(Listed {
            resolved_dir: listing.resolved_dir,
            entries: listing.entries,
        }),
        Some(message) => {
            refused.extend(classify::refused_entries(&listing, &message));
            Err(message)
        }
    }
}

/// Measures each candidate into `discovery`, reusing what `probed` measured on the same mount; keeps only this
/// pass's measurements. The cache is updated in place: an unchanged entry costs a lookup and a copy. Returns, per
/// candidate, the measurement a later pass with no change may reuse (see `Gathered::reusable`).
fn measure_all<'c>(
    host: &dyn Host,
    candidates: impl Iterator<Item = Probe<'c>>,
    mut discovery: Discovery,
    probed: &mut Probed,
) -> (Discovery, Vec<Option<Arc<Disk>>>) {
    // NB: a fresh classification: what was forgotten is out of the cache, and positions start over.
    probed.forgotten.clear();
    let mut measured = 0;
    let mut cached_now = 0;
    let mut present: Vec<&Path> = Vec::new();
    for (at, candidate) in candidates.enumerate() {
        present.push(candidate.host_path);
        if let Some(disk) = cache_hit(probed, &candidate, at) {
            cached_now += 1;
            discovery.disks.push(disk);
            continue;
        }
        measured += 1;
        match measure_into(host, &candidate, at, probed) {
            Ok((disk, cached)) => {
                cached_now += usize::from(cached);
                discovery.disks.push(disk);
            }
            Err(failed) => discovery.unusable.push(failed),
        }
    }
    let count = present.len();
    if probed.disks.len() > cached_now {
        // Entries gone since the last pass.
        let present: FastSet<&Path> = present.into_iter().collect();
        probed
            .disks
            .retain(|path, _| present.contains(path.as_path()));
    }
    // NB: from the cache, not from each hit: a path two candidates share (classes the configuration refuses)
    // keeps one measurement, and the other candidate is measured every pass, as before.
    let mut reusable = vec![None; count];
    for cached in probed.disks.values() {
        if let Some(slot) = reusable.get_mut(cached.at) {
            *slot = Some(cached.disk.clone());
        }
    }
    probed.last_measured = measured;
    (discovery, reusable)
}

/// The cached measurement of a filesystem candidate, when it was taken on the same mount (moved to position `at`
/// of the kept classification); block entries are never cached.
fn cache_hit(probed: &mut Probed, candidate: &Probe<'_>, at: usize) -> Option<Arc<Disk>> {
    let CandidateKind::Filesystem { mount } = candidate.kind else {
        return None;
    };
    let cached = probed.disks.get_mut(candidate.host_path)?;
    let seen = &cached.key;
    // NB: paths compared as bytes: both are spelled by the same join, and a spelling that differed would only
    // cost a measurement.
    let same = seen.class == candidate.class.name
        && seen.probe_path.as_os_str() == candidate.probe_path.as_os_str()
        && seen.mount == *mount;
    cached.at = at;
    same.then(|| cached.disk.clone())
}

/// Validate the class's patterns and read its directory. The error is a message for the operator.
fn list_class(host: &dyn Host, class: &DiscoveryClass) -> Result<Listed, String> {
    for name_pattern in &class.name_patterns {
        pattern::validate(name_pattern).map_err(|e| e.to_string())?;
    }
    let resolved_dir = host
        .canonicalize(&class.mount_dir)
        .map_err(|e| error_chain(&e))?;
    let entries = host
        .read_dir(&class.mount_dir)
        .map_err(|e| error_chain(&e))?;
    Ok(Listed {
        resolved_dir,
        entries,
    })
}

/// What measuring reads of a candidate, borrowed from a fresh classification or from the one kept.
struct Probe<'c> {
    class: &'c DiscoveryClass,
    entry: &'c str,
    host_path: &'c Path,
    probe_path: &'c Path,
    kind: &'c CandidateKind,
}

impl<'c> Probe<'c> {
    fn of(c: &'c Candidate<'_>) -> Probe<'c> {
        Probe {
            class: c.class,
            entry: &c.entry,
            host_path: &c.host_path,
            probe_path: &c.probe_path,
            kind: &c.kind,
        }
    }
}

fn measure(host: &dyn Host, candidate: &Probe<'_>) -> Result<Disk, HostError> {
    let (capacity_bytes, available_bytes, mount_root, identity) = match candidate.kind {
        CandidateKind::Filesystem { mount } => {
            let size = host.statvfs(candidate.probe_path)?;
            let mut identity = filesystem_identity(host, mount)?;
            match host.volume_id(candidate.probe_path)? {
                VolumeTag::Present(id) => identity.volume_id = Some(id),
                VolumeTag::Absent => {}
                VolumeTag::Unsupported => identity.volume_id_unsupported = true,
            }
            let root = (mount.root != Path::new("/")).then(|| mount.root.display().to_string());
            (size.total_bytes, Some(size.available_bytes), root, identity)
        }
        CandidateKind::Block { rdev } => {
            let size = host.block_device_size(candidate.probe_path)?;
            (
                size,
                None,
                None,
                block_identity(host, candidate.probe_path, *rdev)?,
            )
        }
    };
    // NB: a Filesystem class's raw device is mounted by the kubelet in its own mount namespace while a claim uses
    // it, and may be mounted by anyone else the same way: only the kernel can tell (`plan::decide` weighs it).
    let held = match candidate.kind {
        CandidateKind::Block { .. } if candidate.class.mode == VolumeMode::Filesystem => {
            host.device_claimed(candidate.probe_path)?
        }
        _ => false,
    };
    Ok(Disk {
        class: candidate.class.name.clone(),
        entry: candidate.entry.to_string(),
        host_path: candidate.host_path.to_path_buf(),
        mode: match candidate.kind {
            CandidateKind::Filesystem { .. } => VolumeMode::Filesystem,
            CandidateKind::Block { .. } => VolumeMode::Block,
        },
        capacity_bytes,
        available_bytes,
        mount_root,
        identity,
        held,
    })
}

/// Identity of a mounted filesystem. Filesystems without a block device (tmpfs) keep the type from mountinfo and
/// have no UUID; those on an anonymous device number (btrfs) are probed through the source when it is a device.
fn filesystem_identity(host: &dyn Host, mount: &MountEntry) -> Result<DiskIdentity, HostError> {
    let node = if mount.dev.is_anonymous() {
        None
    } else {
        host.device_node(mount.dev)?
    };
    let device = node.or_else(|| {
        mount
            .source
            .starts_with("/dev/")
            .then(|| PathBuf::from(&mount.source))
    });
    let probe = device
        .as_deref()
        .map(|device| host.probe_filesystem(device))
        .transpose()?
        .unwrap_or_default();
    let mut identity = DiskIdentity {
        device: device.map(|d| d.display().to_string()),
        dev_id: Some(mount.dev),
        fs_type: probe.fs_type.or_else(|| Some(mount.fs_type.clone())),
        fs_uuid: probe.uuid,
        fs_label: probe.label,
        ..DiskIdentity::default()
    };
    if !mount.dev.is_anonymous() {
        add_hardware_ids(host, mount.dev, &mut identity);
    }
    Ok(identity)
}

/// Identity of a block volume: probed through the entry itself, which this process can always open, while the
/// device node path may not exist in its `/dev`.
fn block_identity(
    host: &dyn Host,
    probe_path: &Path,
    rdev: DevId,
) -> Result<DiskIdentity, HostError> {
    let probe = host.probe_filesystem(probe_path)?;
    let mut identity = DiskIdentity {
        device: host.device_node(rdev)?.map(|d| d.display().to_string()),
        dev_id: Some(rdev),
        fs_type: probe.fs_type,
        fs_uuid: probe.uuid,
        fs_label: probe.label,
        ..DiskIdentity::default()
    };
    add_hardware_ids(host, rdev, &mut identity);
    Ok(identity)
}

/// Hardware ids are a bonus: a host that cannot tell them leaves them unset, it does not fail the entry.
fn add_hardware_ids(host: &dyn Host, dev: DevId, identity: &mut DiskIdentity) {
    match host.hardware_ids(dev) {
        Ok(ids) => {
            identity.wwn = ids.wwn;
            identity.serial = ids.serial;
            identity.model = ids.model;
            identity.vendor = ids.vendor;
            identity.rotational = ids.rotational;
        }
        Err(error) => debug!(dev = %dev, error = %error_chain(&error), "no hardware ids"),
    }
}

fn probe_failed(candidate: &Probe<'_>, error: &HostError) -> Unusable {
    Unusable {
        class: candidate.class.name.clone(),
        entry: candidate.entry.to_string(),
        host_path: candidate.host_path.to_path_buf(),
        reason: UnusableReason::ProbeFailed,
        message: format!(
            "failed to inspect path {:?}: {}",
            candidate.host_path.display().to_string(),
            error_chain(error)
        ),
    }
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Capacity as the reference provisioner publishes it: rounded down to whole GiB from 10 GiB up, to whole MiB
/// from 10 MiB up, exact below. Using the same rounding keeps adopted PVs' capacities unchanged.
pub fn round_capacity(bytes: u64) -> u64 {
    if bytes >= 10 * GIB {
        bytes / GIB * GIB
    } else if bytes >= 10 * MIB {
        bytes / MIB * MIB
    } else {
        bytes
    }
}

#[cfg(test)]
mod device_dir_tests;
#[cfg(test)]
mod tests;
