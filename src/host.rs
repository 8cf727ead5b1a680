//! The node agent's view of the machine, behind one narrow trait.
//!
//! ```text
//!   discover (decides) ──> &dyn Host ──> LinuxHost: the mount table (live::LiveMounts: fanotify mount events +
//!                                  │                statmount, else /proc/self/mountinfo), readdir+stat, statvfs,
//!                                  │                BLKGETSIZE64 (sys), libblkid, udev db, /sys
//!                                  └──> FakeHost: canned answers, records every call (tests of failure paths)
//!   agent loop ──> watch::MountWatcher: wakes on mountinfo POLLPRI and inotify on the discovery directories
//! ```
//!
//! Everything the host answers is plain data ([`DirEntry`], [`FsSize`], [`FsProbe`], [`HardwareIds`]) so the
//! decisions made from it stay pure. Implementations are injected explicitly, never chosen by `cfg(test)`.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::contract::DevId;

pub mod fake;
#[cfg(feature = "node")]
pub mod health;
#[cfg(feature = "node")]
pub mod linux;
#[cfg(feature = "node")]
pub mod live;
pub mod mountapi;
pub mod mountinfo;
#[cfg(feature = "node")]
pub mod smart;
#[cfg(feature = "node")]
pub mod wake;

pub use mountinfo::{MountEntry, MountInfoError, MountTable};

/// What the agent asks the host. Each method is one observation, except [`Host::tag_volume`]: the one change the
/// agent makes outside a wipe, an extended attribute on a volume's root directory (inode metadata, never data).
pub trait Host: Send + Sync {
    /// The mount table of this process's mount namespace.
    fn mount_table(&self) -> Result<MountTable, HostError>;

    /// `path` with every symlink resolved, as the mount table spells mount points.
    fn canonicalize(&self, path: &Path) -> Result<PathBuf, HostError>;

    /// First-level entries of `dir` (not `.`/`..`), each with its kind. A failure to look at one entry is reported
    /// in that entry's kind, not as an error of the whole listing.
    fn read_dir(&self, dir: &Path) -> Result<Vec<DirEntry>, HostError>;

    /// The entry `name` of `dir` as [`Host::read_dir`] would list it, looked at alone; `None` when there is no such
    /// entry. For a directory event that named the entry: the rest of the listing stands.
    fn dir_entry(&self, dir: &Path, name: &std::ffi::OsStr) -> Result<Option<DirEntry>, HostError> {
        Ok(self
            .read_dir(dir)?
            .into_iter()
            .find(|entry| std::ffi::OsStr::new(&entry.name) == name))
    }

    /// Size and free space of the filesystem holding `path`.
    fn statvfs(&self, path: &Path) -> Result<FsSize, HostError>;

    /// Size in bytes of the block device at `path` (a device node or a symlink to one).
    fn block_device_size(&self, path: &Path) -> Result<u64, HostError>;

    /// Read the superblock signatures on `device` (libblkid). A device with no recognisable filesystem gives an
    /// empty [`FsProbe`], not an error.
    fn probe_filesystem(&self, device: &Path) -> Result<FsProbe, HostError>;

    /// Whether block device `device` (a device node or a symlink to one) is held: mounted in any mount namespace
    /// (the kubelet's included, which the agent cannot see in its mount table), a member of a RAID or device-mapper
    /// target, or opened `O_EXCL` by another process. The kernel answers an exclusive open with EBUSY then. Opens
    /// read-only and closes at once, never reading a byte; anything but a block device is an error.
    fn device_claimed(&self, device: &Path) -> Result<bool, HostError>;

    /// Hardware identity of block device `dev`, from the udev database when udevd populated it and from sysfs
    /// otherwise. Unknown fields are `None`; a host without udev is not an error.
    fn hardware_ids(&self, dev: DevId) -> Result<HardwareIds, HostError>;

    /// Device node of block device `dev` (`/dev/<DEVNAME>` from `/sys/dev/block/M:m/uevent`); `None` when the
    /// kernel has no block device with that number.
    fn device_node(&self, dev: DevId) -> Result<Option<PathBuf>, HostError>;

    /// The agent's volume id stored on directory `path` (xattr `trusted.localpv.id`, or `user.localpv.id` where
    /// the agent may not write `trusted.*`), never following a symlink.
    fn volume_id(&self, path: &Path) -> Result<VolumeTag, HostError>;

    /// Stores a fresh random volume id on directory `path` unless it already carries one; returns the id it carries
    /// afterwards. Fails on filesystems without extended attributes. Never used on block devices.
    fn tag_volume(&self, path: &Path) -> Result<String, HostError>;

    /// Signs of failing of one disk (`host::health`): its device gone, the filesystem's error counter, a
    /// filesystem turned read-only or shut down after an error, a direct read of one block, the NVMe health log
    /// (`host::smart`, at most once per device per 10 minutes). Never writes. A host
    /// that cannot tell shows no sign.
    #[cfg(feature = "node")]
    fn health(&self, probe: &health::HealthProbe) -> crate::health::Signals {
        let _ = probe;
        crate::health::Signals::default()
    }
}

/// What the host says changed since the last discovery (the mount watcher's report), which decides how much of it
/// a pass looks at again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostChanges {
    /// List every discovery directory again: first pass, resync, a directory event that names no entry, a
    /// directory nobody watches.
    pub list_all: bool,
    /// The mount table changed.
    pub mounts: bool,
    /// Entries created, deleted, moved or changed, as (discovery directory as configured, entry name).
    pub entries: Vec<(PathBuf, OsString)>,
}

impl HostChanges {
    /// Everything, as for a first pass.
    pub fn all() -> HostChanges {
        HostChanges {
            list_all: true,
            ..HostChanges::default()
        }
    }

    pub fn merge(&mut self, other: HostChanges) {
        self.list_all |= other.list_all;
        self.mounts |= other.mounts;
        self.entries.extend(other.entries);
    }
}

/// What a volume root says about the agent's volume id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeTag {
    Present(String),
    Absent,
    /// The filesystem does not support extended attributes (`EOPNOTSUPP`).
    Unsupported,
}

/// One first-level entry of a discovery directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: EntryKind,
}

/// What an entry is, looked at without following it (`lstat`), and for a symlink what it leads to (`stat`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Directory,
    File,
    BlockDevice {
        rdev: DevId,
    },
    CharDevice,
    Fifo,
    Socket,
    Symlink {
        target: PathBuf,
        leads_to: Box<EntryKind>,
    },
    /// The host would not say (permission, I/O error, dangling symlink, a name that is not UTF-8).
    Unreadable {
        error: String,
    },
}

impl EntryKind {
    /// A short noun for messages: "a directory", "a fifo", ...
    pub fn describe(&self) -> String {
        match self {
            EntryKind::Directory => "a directory".into(),
            EntryKind::File => "a regular file".into(),
            EntryKind::BlockDevice { rdev } => format!("block device {rdev}"),
            EntryKind::CharDevice => "a character device".into(),
            EntryKind::Fifo => "a fifo".into(),
            EntryKind::Socket => "a socket".into(),
            EntryKind::Symlink { target, leads_to } => {
                format!(
                    "a symlink to {} ({})",
                    target.display(),
                    leads_to.describe()
                )
            }
            EntryKind::Unreadable { error } => format!("unreadable ({error})"),
        }
    }
}

/// statvfs totals in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsSize {
    /// `f_blocks * f_frsize`
    pub total_bytes: u64,
    /// `f_bavail * f_frsize`: what an unprivileged writer can still use.
    pub available_bytes: u64,
}

/// libblkid's answer for one device; all `None` when no signature was found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsProbe {
    pub fs_type: Option<String>,
    pub uuid: Option<String>,
    pub label: Option<String>,
}

/// Hardware identity of a block device; fields the host does not know stay `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HardwareIds {
    pub wwn: Option<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub vendor: Option<String>,
    pub rotational: Option<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("failed to read the mount table {path}")]
    ReadMountTable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to parse the mount table {path}")]
    ParseMountTable {
        path: PathBuf,
        #[source]
        source: MountInfoError,
    },
    #[error("failed to resolve {path}")]
    Canonicalize {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to list directory {path}")]
    ReadDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to statvfs {path}")]
    Statvfs {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to open block device {path}")]
    OpenDevice {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to check whether block device {path} is held")]
    DeviceClaimed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to read the size of block device {path}")]
    BlockDeviceSize {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to probe {device} for a filesystem")]
    Probe {
        device: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to read the volume id of {path}")]
    ReadVolumeId {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to store a volume id on {path}")]
    TagVolume {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to read {path}")]
    ReadSysfs {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// `error: cause: cause` on one line, for messages an operator reads (Events, inventory status, logs).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}
