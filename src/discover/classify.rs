//! Pure classification of discovery-directory entries: which are volumes, which are not and why.
//!
//! ```text
//!  Listing (class + its entries, lstat/stat kinds) ─┐
//!  MountTable (mountinfo) ──────────────────────────┴─> classify ─> Candidate (to measure) | Unusable (with reason)
//! ```
//!
//! Rules, per class in name order and per entry in name order:
//! - Filesystem classes publish directories that are mount points in the mount table (the mount point field equals
//!   the path: same-device bind mounts count, `st_dev` is never compared). A bind mount of a sub-directory is
//!   accepted; its root is carried along.
//! - Block classes publish block devices and symlinks that lead to one.
//! - One piece of storage is published once. Two mounts of the same filesystem whose roots overlap (equal, or one
//!   inside the other) would let one volume's wipe destroy the other's data, so the later one is a
//!   `DuplicateFilesystem`. Disjoint sub-directories of one filesystem bind-mounted side by side stay separate
//!   volumes: that is how the reference provisioner documents sharing a disk. Two block entries for one device
//!   are duplicates too.
//! - A block device that is mounted anywhere (whole-device mounts only: the mount table names the device number)
//!   is `DeviceInUse`: a pod writing to it raw would corrupt a live filesystem.

use std::borrow::Cow;
use std::collections::HashMap;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::pattern;
use crate::contract::DevId;
use crate::disk::{DiscoveryClass, Unusable, UnusableReason, VolumeMode};
use crate::fasthash::FastMap;
use crate::host::{DirEntry, EntryKind, MountEntry, MountTable};

/// One class's directory listing, as gathered from the host.
#[derive(Clone, Debug)]
pub struct Listing<'a> {
    pub class: &'a DiscoveryClass,
    /// `mount_dir` with symlinks resolved, spelled as mount points are in the mount table.
    pub resolved_dir: PathBuf,
    pub entries: Vec<DirEntry>,
}

/// An entry that looks like a volume; measuring it (size, identity) is the next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub class: &'a DiscoveryClass,
    pub entry: String,
    /// `host_dir/entry`: what the PV will point at.
    pub host_path: PathBuf,
    /// `mount_dir/entry`: where this process can reach it.
    pub probe_path: PathBuf,
    pub kind: CandidateKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CandidateKind {
    Filesystem { mount: Arc<MountEntry> },
    Block { rdev: DevId },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classified<'a> {
    pub candidates: Vec<Candidate<'a>>,
    pub unusable: Vec<Unusable>,
}

/// Sort every matching entry of every class into candidates and unusable entries. Entries that match none of
/// their class's name patterns are not ours and are left out entirely.
pub fn classify<'a>(listings: &[Listing<'a>], table: &MountTable) -> Classified<'a> {
    let mut listings: Vec<&Listing<'a>> = listings.iter().collect();
    listings.sort_by(|a, b| a.class.name.cmp(&b.class.name));
    let mounts = Mounts::index(table, &listings);
    let mut out = Classified::default();
    // Candidates by the device number they expose: only candidates sharing one can overlap (see `overlaps`). The
    // first of each device number, then a chain through the later ones (most devices expose one candidate).
    let mut first_of_dev: FastMap<DevId, usize> = FastMap::default();
    let mut next_of_dev: Vec<Option<usize>> = Vec::new();
    let capacity: usize = listings.iter().map(|l| l.entries.len()).sum();
    first_of_dev.reserve(capacity);
    out.candidates.reserve(capacity);
    for (position, listing) in listings.iter().enumerate() {
        let mut entries: Vec<&DirEntry> = listing
            .entries
            .iter()
            .filter(|entry| {
                listing
                    .class
                    .name_patterns
                    .iter()
                    .any(|p| pattern::matches(p, &entry.name))
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let dir = mounts.dir_of[position];
        for entry in entries {
            let at = mounts.at(dir, &entry.name);
            match classify_entry(listing.class, entry, at, &mounts.of_dev) {
                Ok(candidate) => {
                    let first = first_of_dev.get(&candidate.kind.dev()).copied();
                    let same_dev = std::iter::successors(first, |&i| next_of_dev[i]);
                    let mut last = None;
                    let earlier = same_dev
                        .inspect(|&i| last = Some(i))
                        .map(|i| &out.candidates[i])
                        .find(|earlier| overlaps(earlier, &candidate));
                    match earlier {
                        Some(earlier) => out.unusable.push(duplicate(&candidate, earlier)),
                        None => {
                            let index = out.candidates.len();
                            match last {
                                Some(last) => next_of_dev[last] = Some(index),
                                None => {
                                    first_of_dev.insert(candidate.kind.dev(), index);
                                }
                            }
                            next_of_dev.push(None);
                            out.candidates.push(candidate);
                        }
                    }
                }
                Err(unusable) => out.unusable.push(unusable),
            }
        }
    }
    out
}

/// The mount table, looked up by entry name in each discovery directory and by device number instead of scanned
/// once per entry. Paths are compared as the bytes of their normal form (no repeated or trailing separator, no
/// `.` component), which is what comparing them component by component does; the kernel's mount points are
/// always in that form.
struct Mounts<'t> {
    /// For each listing, in the order given, which of the distinct discovery directories it lists.
    dir_of: Vec<usize>,
    /// The mount visible at each (directory, entry name): of mounts stacked on one path, the one listed last.
    at: FastMap<(usize, Cow<'t, [u8]>), &'t Arc<MountEntry>>,
    /// The first mount of each device number; only indexed when a Block class is listed (it asks nothing else).
    of_dev: HashMap<DevId, &'t MountEntry>,
}

impl<'t> Mounts<'t> {
    fn index(table: &'t MountTable, listings: &[&Listing<'_>]) -> Mounts<'t> {
        let mut dirs: Vec<Vec<u8>> = Vec::new();
        let mut dir_of = Vec::with_capacity(listings.len());
        for listing in listings {
            let dir = normal(&listing.resolved_dir).into_owned();
            let index = match dirs.iter().position(|d| *d == dir) {
                Some(index) => index,
                None => {
                    dirs.push(dir);
                    dirs.len() - 1
                }
            };
            dir_of.push(index);
        }
        let mut at = FastMap::default();
        at.reserve(listings.iter().map(|l| l.entries.len()).sum());
        for entry in &table.entries {
            let point = normal(&entry.mount_point);
            for (i, dir) in dirs.iter().enumerate() {
                if let Some(name) = child_name(&point, dir) {
                    let name = match &point {
                        Cow::Borrowed(whole) => {
                            let whole: &'t [u8] = whole;
                            Cow::Borrowed(&whole[whole.len() - name.len()..])
                        }
                        Cow::Owned(_) => Cow::Owned(name.to_vec()),
                    };
                    at.insert((i, name), entry);
                }
            }
        }
        let mut of_dev = HashMap::new();
        if listings.iter().any(|l| l.class.mode == VolumeMode::Block) {
            of_dev.reserve(table.entries.len());
            for entry in &table.entries {
                of_dev.entry(entry.dev).or_insert(&**entry);
            }
        }
        Mounts { dir_of, at, of_dev }
    }

    /// The mount visible at `name` in the `dir`-th distinct directory.
    fn at(&self, dir: usize, name: &str) -> Option<&'t Arc<MountEntry>> {
        self.at.get(&(dir, Cow::Borrowed(name.as_bytes()))).copied()
    }
}

/// `path` as bytes in its normal form: borrowed when it already is (always, for the kernel's paths).
pub(super) fn normal(path: &Path) -> Cow<'_, [u8]> {
    let bytes = path.as_os_str().as_bytes();
    let odd = bytes.windows(2).any(|w| w == b"//")
        || bytes.windows(3).any(|w| w == b"/./")
        || bytes.ends_with(b"/.")
        || (bytes.len() > 1 && bytes.ends_with(b"/"));
    match odd {
        false => Cow::Borrowed(bytes),
        true => Cow::Owned(
            path.components()
                .collect::<PathBuf>()
                .into_os_string()
                .into_vec(),
        ),
    }
}

/// The last component of `path` when `path` lies directly in `dir` (both in normal form).
pub(super) fn child_name<'p>(path: &'p [u8], dir: &[u8]) -> Option<&'p [u8]> {
    let rest = path.strip_prefix(dir)?;
    let rest = match dir.ends_with(b"/") {
        true => rest,
        false => rest.strip_prefix(b"/")?,
    };
    (!rest.is_empty() && !rest.contains(&b'/')).then_some(rest)
}

impl CandidateKind {
    /// The device number this candidate exposes.
    fn dev(&self) -> DevId {
        match self {
            CandidateKind::Filesystem { mount } => mount.dev,
            CandidateKind::Block { rdev } => *rdev,
        }
    }
}

/// One entry of `class`'s directory: `mount` is the mount visible at its path, `of_dev` the first mount of each
/// device number (asked by Block classes only).
pub(super) fn classify_entry<'a>(
    class: &'a DiscoveryClass,
    entry: &DirEntry,
    mount: Option<&Arc<MountEntry>>,
    of_dev: &HashMap<DevId, &MountEntry>,
) -> Result<Candidate<'a>, Unusable> {
    let host_path = class.host_dir.join(&entry.name);
    let unusable = |reason, message: String| Unusable {
        class: class.name.clone(),
        entry: entry.name.clone(),
        host_path: host_path.clone(),
        reason,
        message,
    };
    // NB: only a rejection's message shows the path; most entries are volumes.
    let shown = || format!("{:?}", host_path.display().to_string());
    let kind = match (class.mode, &entry.kind, mount, block_rdev(&entry.kind)) {
        (_, EntryKind::Unreadable { error }, _, _) => {
            return Err(unusable(
                UnusableReason::ProbeFailed,
                format!("failed to inspect path {}: {error}", shown()),
            ));
        }
        (VolumeMode::Filesystem, EntryKind::Directory, Some(mount), _) => {
            CandidateKind::Filesystem {
                mount: mount.clone(),
            }
        }
        (VolumeMode::Block, _, _, Some(rdev)) => match of_dev.get(&rdev) {
            Some(used) => {
                return Err(unusable(
                    UnusableReason::DeviceInUse,
                    in_use(&shown(), rdev, used),
                ));
            }
            None => CandidateKind::Block { rdev },
        },
        (mode, kind, mount, _) => {
            let (reason, message) = rejection(
                &class.name,
                mode,
                &entry.name,
                &shown(),
                kind,
                mount.is_some(),
            );
            return Err(unusable(reason, message));
        }
    };
    Ok(Candidate {
        class,
        entry: entry.name.clone(),
        probe_path: class.mount_dir.join(&entry.name),
        host_path,
        kind,
    })
}

/// The device number of a block device entry, or of the block device a symlink entry leads to.
fn block_rdev(kind: &EntryKind) -> Option<DevId> {
    match kind {
        EntryKind::BlockDevice { rdev } => Some(*rdev),
        EntryKind::Symlink { leads_to, .. } => match **leads_to {
            EntryKind::BlockDevice { rdev } => Some(rdev),
            _ => None,
        },
        _ => None,
    }
}

fn in_use(shown: &str, rdev: DevId, mount: &MountEntry) -> String {
    format!(
        "path {shown} leads to block device {rdev}, which is mounted on {}: unmount it before publishing it as a \
         raw block volume, or publish the mount through a Filesystem class",
        mount.mount_point.display()
    )
}

/// Why an entry is not a volume of a class of this mode, worded so the operator knows what to change.
fn rejection(
    class: &str,
    mode: VolumeMode,
    name: &str,
    shown: &str,
    kind: &EntryKind,
    mounted: bool,
) -> (UnusableReason, String) {
    match mode {
        VolumeMode::Filesystem if block_rdev(kind).is_some() => (
            UnusableReason::WrongVolumeMode,
            format!(
                "path {shown} is {} but storage class {class:?} publishes Filesystem volumes: link it from the \
                 directory of a volumeMode: Block class instead, or format it and mount it here",
                kind.describe()
            ),
        ),
        VolumeMode::Filesystem if matches!(kind, EntryKind::Directory) && name == "lost+found" => (
            UnusableReason::NotAMountPoint,
            format!(
                "path {shown} is not a valid mount point: lost+found belongs to the filesystem mounted on the \
                 discovery directory itself; mount each disk on its own sub-directory"
            ),
        ),
        VolumeMode::Filesystem if matches!(kind, EntryKind::Directory) => (
            UnusableReason::NotAMountPoint,
            format!(
                "path {shown} is not a valid mount point: mount a filesystem on it, or remove it"
            ),
        ),
        VolumeMode::Filesystem => (
            UnusableReason::NotADiskEntry,
            format!(
                "path {shown} is {}, not a mount point: remove it, or mount a filesystem on a directory",
                kind.describe()
            ),
        ),
        VolumeMode::Block if mounted => (
            UnusableReason::WrongVolumeMode,
            format!(
                "path {shown} is a mounted filesystem but storage class {class:?} publishes Block volumes: mount it \
                 under the directory of a volumeMode: Filesystem class instead"
            ),
        ),
        VolumeMode::Block => (
            UnusableReason::NotADiskEntry,
            format!(
                "path {shown} is {}, not a block device or a symlink to one",
                kind.describe()
            ),
        ),
    }
}

/// Whether publishing `later` would expose storage that `earlier` already exposes.
fn overlaps(earlier: &Candidate<'_>, later: &Candidate<'_>) -> bool {
    match (&earlier.kind, &later.kind) {
        (CandidateKind::Filesystem { mount: a }, CandidateKind::Filesystem { mount: b }) => {
            a.dev == b.dev && (a.root.starts_with(&b.root) || b.root.starts_with(&a.root))
        }
        (CandidateKind::Block { rdev: a }, CandidateKind::Block { rdev: b }) => a == b,
        (CandidateKind::Filesystem { mount }, CandidateKind::Block { rdev })
        | (CandidateKind::Block { rdev }, CandidateKind::Filesystem { mount }) => {
            !mount.dev.is_anonymous() && mount.dev == *rdev
        }
    }
}

fn duplicate(later: &Candidate<'_>, earlier: &Candidate<'_>) -> Unusable {
    let what = match &later.kind {
        CandidateKind::Filesystem { mount } => {
            format!("filesystem {}{}", mount.dev, root_suffix(&mount.root))
        }
        CandidateKind::Block { rdev } => format!("block device {rdev}"),
    };
    Unusable {
        class: later.class.name.clone(),
        entry: later.entry.clone(),
        host_path: later.host_path.clone(),
        reason: UnusableReason::DuplicateFilesystem,
        message: format!(
            "path {:?} exposes {what}, which path {:?} (storage class {:?}) already publishes: remove one of the two",
            later.host_path.display().to_string(),
            earlier.host_path.display().to_string(),
            earlier.class.name,
        ),
    }
}

fn root_suffix(root: &Path) -> String {
    if root == Path::new("/") {
        String::new()
    } else {
        format!(" (directory {})", root.display())
    }
}
