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
//! - Entries whose storage overlaps (two mounts of one filesystem whose roots nest, two entries for one block
//!   device) are all candidates here: which of them may be published depends on which one a PV already exposes,
//!   so the planner decides it (`plan::decide::overlap`), never the order of names. Disjoint sub-directories of
//!   one filesystem bind-mounted side by side do not overlap: that is how the reference provisioner documents
//!   sharing a disk.
//! - A block device that is mounted anywhere (whole-device mounts only: the mount table names the device number)
//!   is `DeviceInUse`: a pod writing to it raw would corrupt a live filesystem.
//! - A class directory under `/dev` (a node's bootstrap links the disks meant for volumes there) is a directory of
//!   devices or nothing: unless it lies on devtmpfs and every entry, whatever its name, is a block device or a
//!   symlink to one, it is refused as a whole ([`device_dir_problem`]): the caller reports the class as failed
//!   (its PVs left alone) and each of its entries as `DeviceDirRefused`, naming the entry at fault.

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
    let capacity: usize = listings.iter().map(|l| l.entries.len()).sum();
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
                Ok(candidate) => out.candidates.push(candidate),
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
        // NB: every class may hold raw devices (a Filesystem class's are published for the kubelet to format).
        let mut of_dev = HashMap::with_capacity(table.entries.len());
        for entry in &table.entries {
            of_dev.entry(entry.dev).or_insert(&**entry);
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

/// One entry of `class`'s directory: `mount` is the mount visible at its path, `of_dev` the first mount of each
/// device number. A block device (or a link to one) is a `Block` candidate in either class, unless a mount of it
/// is visible; in a Filesystem class only when nothing is mounted at the entry itself.
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
        (VolumeMode::Block, _, _, Some(rdev)) | (VolumeMode::Filesystem, _, None, Some(rdev)) => {
            match of_dev.get(&rdev) {
                Some(used) => {
                    return Err(unusable(
                        UnusableReason::DeviceInUse,
                        in_use(&shown(), rdev, used),
                    ));
                }
                None => CandidateKind::Block { rdev },
            }
        }
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
        "path {shown} leads to block device {rdev}, which is mounted on {}: unmount it before publishing the \
         device, or publish the mount through a Filesystem class",
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

/// Whether a class directory lies strictly inside `/dev`, as the host (`host_dir`) or this process (`mount_dir`,
/// `resolved_dir`) sees it: such a directory may hold nothing but block devices ([`device_dir_problem`]).
pub fn is_device_dir(class: &DiscoveryClass, resolved_dir: &Path) -> bool {
    let dev = Path::new("/dev");
    [
        class.host_dir.as_path(),
        class.mount_dir.as_path(),
        resolved_dir,
    ]
    .into_iter()
    .any(|dir| dir.starts_with(dev) && dir != dev)
}

/// Why a class directory under `/dev` is refused as a whole, or `None` when it is a directory of devices: it must
/// lie on devtmpfs (not on `/dev/shm`'s tmpfs, `/dev/pts`, `/dev/mqueue`, hugetlbfs or anything mounted there), and
/// every entry, whatever its name, must be a block device or a symlink to one. NB: an entry outside the class's
/// name patterns counts too: what the directory holds, not what the class publishes, says what the directory is.
pub fn device_dir_problem(listing: &Listing<'_>, table: &MountTable) -> Option<String> {
    let dir = &listing.resolved_dir;
    let shown = format!("{:?}", listing.class.host_dir.display().to_string());
    let under = table
        .entries
        .iter()
        .filter(|m| dir.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.components().count());
    match under {
        Some(mount) if mount.fs_type == "devtmpfs" => {}
        Some(mount) => {
            return Some(format!(
                "discovery directory {shown} is refused as a whole: it is on {} (mounted on {}), not on devtmpfs; \
                 under /dev only a directory of block devices and symlinks to them may be a discovery directory",
                mount.fs_type,
                mount.mount_point.display()
            ));
        }
        None => {
            return Some(format!(
                "discovery directory {shown} is refused as a whole: no mount holds it in the mount table"
            ));
        }
    }
    let mut entries: Vec<&DirEntry> = listing
        .entries
        .iter()
        .filter(|e| block_rdev(&e.kind).is_none())
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let first = entries.first()?;
    let more = match entries.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Some(format!(
        "discovery directory {shown} is refused as a whole: its entry {:?} is {}{more}; under /dev a discovery \
         directory may hold only block devices and symlinks to them: remove the entry, or name a directory of \
         device links alone",
        first.name,
        first.kind.describe()
    ))
}

/// Every entry of `listing` its class's name patterns match, as unusable for `message` (the directory is refused).
pub fn refused_entries(listing: &Listing<'_>, message: &str) -> Vec<Unusable> {
    let class = listing.class;
    let mut names: Vec<&str> = listing
        .entries
        .iter()
        .map(|e| e.name.as_str())
        .filter(|name| {
            class
                .name_patterns
                .iter()
                .any(|p| pattern::matches(p, name))
        })
        .collect();
    names.sort_unstable();
    names
        .into_iter()
        .map(|name| Unusable {
            class: class.name.clone(),
            entry: name.to_string(),
            host_path: class.host_dir.join(name),
            reason: UnusableReason::DeviceDirRefused,
            message: message.to_string(),
        })
        .collect()
}
