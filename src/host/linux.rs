//! [`Host`] on a real Linux machine: procfs, sysfs, `stat`/`statvfs`, libblkid and (when udevd runs) the udev
//! database.
//!
//! NB: udevd is often absent (containers, minimal nodes). libudev then still enumerates devices but knows none of
//! the `ID_*` properties, so udev is only consulted when its database directory exists, and sysfs fills whatever
//! it leaves out. Nothing here fails because udev is missing.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blkid::prober::{ProbeState, Prober};
use tracing::debug;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::live::LiveMounts;
use super::{
    DirEntry, EntryKind, FsProbe, FsSize, HardwareIds, Host, HostError, MountTable, VolumeTag,
};
use crate::contract::DevId;
use crate::sys::{create_volume_id, read_volume_id};

/// Where the real host keeps what we read. The defaults are the usual paths; tests and unusual layouts (a host
/// `/sys` mounted elsewhere) can point them somewhere else.
#[derive(Clone, Debug)]
pub struct LinuxHost {
    pub mountinfo: PathBuf,
    pub sys: PathBuf,
    pub dev: PathBuf,
    pub udev_data: PathBuf,
    /// This process's mount table kept current from mount events, used while `mountinfo` is this process's own.
    live: Arc<LiveMounts>,
    /// The last health log reading of each drive (NVMe, ATA, SCSI; read at most every `smart::SMART_LOG_PERIOD`).
    hardware: Arc<super::smart::HardwareBook>,
}

const OWN_MOUNTINFO: &str = "/proc/self/mountinfo";

impl Default for LinuxHost {
    fn default() -> Self {
        LinuxHost {
            mountinfo: OWN_MOUNTINFO.into(),
            sys: "/sys".into(),
            dev: "/dev".into(),
            udev_data: "/run/udev/data".into(),
            live: Arc::default(),
            hardware: Arc::default(),
        }
    }
}

impl LinuxHost {
    fn sys_block(&self, dev: DevId) -> PathBuf {
        self.sys.join("dev/block").join(dev.to_string())
    }

    /// A loop device has no hardware ids, but it is exactly its backing file: the file's device and inode and the
    /// window of it the device shows stay the same when the file is attached again on another loop number, and
    /// differ for any other file. Read with `LOOP_GET_STATUS64` on the device node; `None` when it cannot be opened.
    fn loop_serial(&self, dev: DevId) -> Option<String> {
        let node = self.device_node(dev).ok()??;
        let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let backing = open(&node, flags, Mode::empty())
            .and_then(crate::sys::loop_backing)
            .map_err(|error| debug!(path = %node.display(), %error, "no loop backing file"))
            .ok()?;
        Some(format!(
            "loop-backing:{}:{}:{}:{}",
            backing.file_dev, backing.file_inode, backing.offset, backing.size_limit
        ))
    }
}

impl Host for LinuxHost {
    fn mount_table(&self) -> Result<MountTable, HostError> {
        let path = &self.mountinfo;
        if path.as_os_str() == OWN_MOUNTINFO
            && let Some((table, read)) = self.live.table(path)
        {
            debug!(?read, mounts = table.entries.len(), "mount table");
            return Ok(table);
        }
        let text = fs::read(path).map_err(|source| HostError::ReadMountTable {
            path: path.clone(),
            source,
        })?;
        MountTable::parse(&text).map_err(|source| HostError::ParseMountTable {
            path: path.clone(),
            source,
        })
    }

    fn canonicalize(&self, path: &Path) -> Result<PathBuf, HostError> {
        fs::canonicalize(path).map_err(|source| HostError::Canonicalize {
            path: path.into(),
            source,
        })
    }

    fn read_dir(&self, dir: &Path) -> Result<Vec<DirEntry>, HostError> {
        let read_dir_error = |source| HostError::ReadDir {
            path: dir.into(),
            source,
        };
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir).map_err(read_dir_error)? {
            let entry = entry.map_err(read_dir_error)?;
            let raw_name = entry.file_name();
            let (name, kind) = match raw_name.to_str() {
                Some(name) => (name.to_owned(), listed_kind(&entry)),
                None => (
                    raw_name.to_string_lossy().into_owned(),
                    EntryKind::Unreadable {
                        error: "the name is not valid UTF-8; rename the entry".into(),
                    },
                ),
            };
            entries.push(DirEntry { name, kind });
        }
        Ok(entries)
    }

    fn dir_entry(&self, dir: &Path, name: &std::ffi::OsStr) -> Result<Option<DirEntry>, HostError> {
        let path = dir.join(name);
        match fs::symlink_metadata(&path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            // Anything else is the entry's own trouble, reported in its kind as a listing does.
            _ => {}
        }
        let kind = match name.to_str() {
            Some(_) => entry_kind(&path),
            None => EntryKind::Unreadable {
                error: "the name is not valid UTF-8; rename the entry".into(),
            },
        };
        Ok(Some(DirEntry {
            name: name.to_string_lossy().into_owned(),
            kind,
        }))
    }

    // NB: the conversions are no-ops on 64-bit targets only; `c_ulong` and `fsblkcnt_t` are narrower elsewhere.
    #[allow(clippy::useless_conversion)]
    fn statvfs(&self, path: &Path) -> Result<FsSize, HostError> {
        let stat = nix::sys::statvfs::statvfs(path).map_err(|errno| HostError::Statvfs {
            path: path.into(),
            source: errno.into(),
        })?;
        let fragment = u64::from(stat.fragment_size());
        Ok(FsSize {
            total_bytes: u64::from(stat.blocks()).saturating_mul(fragment),
            available_bytes: u64::from(stat.blocks_available()).saturating_mul(fragment),
        })
    }

    fn block_device_size(&self, path: &Path) -> Result<u64, HostError> {
        let file = fs::File::open(path).map_err(|source| HostError::OpenDevice {
            path: path.into(),
            source,
        })?;
        crate::sys::block_device_size(&file).map_err(|errno| HostError::BlockDeviceSize {
            path: path.into(),
            source: errno.into(),
        })
    }

    fn device_claimed(&self, device: &Path) -> Result<bool, HostError> {
        let failed = |source: io::Error| HostError::DeviceClaimed {
            path: device.into(),
            source,
        };
        // NB: without O_CREAT, O_EXCL means "exclusive" only for block devices; on anything else it is ignored and
        // the open would say "free".
        let meta = fs::metadata(device).map_err(failed)?;
        if !meta.file_type().is_block_device() {
            return Err(failed(io::Error::other("not a block device")));
        }
        // NB: for the instant the descriptor is open a mount of the device fails with EBUSY; the kubelet retries.
        let flags = OFlag::O_RDONLY | OFlag::O_EXCL | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        match open(device, flags, Mode::empty()) {
            Ok(_fd) => Ok(false),
            Err(Errno::EBUSY) => Ok(true),
            Err(errno) => Err(failed(errno.into())),
        }
    }

    fn probe_filesystem(&self, device: &Path) -> Result<FsProbe, HostError> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| HostError::Probe {
            device: device.into(),
            source,
        };
        let prober = Prober::new_from_filename(device).map_err(|e| failed(e.into()))?;
        match prober.do_safe_probe().map_err(|e| failed(e.into()))? {
            ProbeState::Success => {}
            ProbeState::NothingDetected => return Ok(FsProbe::default()),
            // NB: two signatures (say a stale one under a new filesystem) mean we cannot tell who the disk is.
            ProbeState::Ambivalent | ProbeState::Done => {
                return Err(failed(
                    "more than one signature found: the identity of the disk is ambiguous".into(),
                ));
            }
        }
        let value = |name: &str| -> Result<Option<String>, HostError> {
            if !prober.has_value(name).map_err(|e| failed(e.into()))? {
                return Ok(None);
            }
            let value = prober.lookup_value(name).map_err(|e| failed(e.into()))?;
            Ok(Some(value).filter(|v| !v.is_empty()))
        };
        Ok(FsProbe {
            fs_type: value("TYPE")?,
            uuid: value("UUID")?,
            label: value("LABEL")?,
        })
    }

    fn hardware_ids(&self, dev: DevId) -> Result<HardwareIds, HostError> {
        let sys = self.sys_block(dev);
        if !sys.exists() {
            return Ok(HardwareIds::default());
        }
        let from_udev = if self.udev_data.is_dir() {
            udev_ids(&sys)
        } else {
            HardwareIds::default()
        };
        let mut ids = fill_missing(from_udev, sysfs_ids(&sys));
        if ids.wwn.is_none() && ids.serial.is_none() && sys.join("loop").is_dir() {
            ids.serial = self.loop_serial(dev);
        }
        Ok(ids)
    }

    fn device_node(&self, dev: DevId) -> Result<Option<PathBuf>, HostError> {
        let path = self.sys_block(dev).join("uevent");
        let uevent = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(source) if source.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(HostError::ReadSysfs { path, source }),
        };
        Ok(uevent
            .lines()
            .find_map(|line| line.strip_prefix("DEVNAME="))
            .map(|name| self.dev.join(name)))
    }

    fn volume_id(&self, path: &Path) -> Result<VolumeTag, HostError> {
        let failed = |source| HostError::ReadVolumeId {
            path: path.into(),
            source,
        };
        let fd = open_volume_root(path).map_err(failed)?;
        read_tag(&fd).map_err(failed)
    }

    fn health(&self, probe: &super::health::HealthProbe) -> crate::health::Signals {
        let mut signals = super::health::signals(&self.sys, probe);
        if !signals.gone
            && let Some(dev) = probe.dev.filter(|d| !d.is_anonymous())
        {
            signals.hardware = super::smart::hardware(&self.sys, &self.dev, &self.hardware, dev);
        }
        signals
    }

    fn tag_volume(&self, path: &Path) -> Result<String, HostError> {
        let failed = |source| HostError::TagVolume {
            path: path.into(),
            source,
        };
        let fd = open_volume_root(path).map_err(failed)?;
        let id = random_id().map_err(failed)?;
        match create_volume_id(&fd, id.as_bytes()) {
            Ok(()) => Ok(id),
            // Someone (an earlier pass, another agent) tagged it first: theirs stands.
            Err(Errno::EEXIST) => match read_tag(&fd).map_err(failed)? {
                VolumeTag::Present(existing) => Ok(existing),
                _ => Err(failed(io::Error::from(Errno::EEXIST))),
            },
            Err(errno) => Err(failed(errno.into())),
        }
    }
}

/// The volume root, opened without following a symlink (a tenant cannot redirect the tag elsewhere).
fn open_volume_root(path: &Path) -> Result<std::os::fd::OwnedFd, io::Error> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    open(path, flags, Mode::empty()).map_err(io::Error::from)
}

fn read_tag(fd: &std::os::fd::OwnedFd) -> Result<VolumeTag, io::Error> {
    match read_volume_id(fd) {
        Ok(Some(value)) => Ok(VolumeTag::Present(
            String::from_utf8_lossy(&value).trim().to_string(),
        )),
        Ok(None) => Ok(VolumeTag::Absent),
        Err(Errno::EOPNOTSUPP) => Ok(VolumeTag::Unsupported),
        Err(errno) => Err(errno.into()),
    }
}

/// 128 random bits from the kernel, as 32 hex digits.
fn random_id() -> Result<String, io::Error> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The kind of a listed entry. The listing's own record of the type (`d_type`) answers for directories and regular
/// files, the common case, without a stat of each entry (a third of a pass with 1,000 disks); a mount point is a
/// directory either way. Anything else, and a filesystem that records no type, is looked at with [`entry_kind`].
fn listed_kind(entry: &fs::DirEntry) -> EntryKind {
    match entry.file_type() {
        Ok(t) if t.is_dir() => EntryKind::Directory,
        Ok(t) if t.is_file() => EntryKind::File,
        _ => entry_kind(&entry.path()),
    }
}

/// `lstat` the entry and, for a symlink, `stat` what it leads to.
fn entry_kind(path: &Path) -> EntryKind {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) => {
            return EntryKind::Unreadable {
                error: error.to_string(),
            };
        }
    };
    if !metadata.file_type().is_symlink() {
        return kind_of(&metadata);
    }
    let target = match fs::read_link(path) {
        Ok(target) => target,
        Err(error) => {
            return EntryKind::Unreadable {
                error: error.to_string(),
            };
        }
    };
    let leads_to = match fs::metadata(path) {
        Ok(metadata) => kind_of(&metadata),
        Err(error) => EntryKind::Unreadable {
            error: error.to_string(),
        },
    };
    EntryKind::Symlink {
        target,
        leads_to: Box::new(leads_to),
    }
}

fn kind_of(metadata: &fs::Metadata) -> EntryKind {
    let file_type = metadata.file_type();
    if file_type.is_dir() {
        EntryKind::Directory
    } else if file_type.is_file() {
        EntryKind::File
    } else if file_type.is_block_device() {
        let rdev = metadata.rdev();
        let major = u32::try_from(nix::sys::stat::major(rdev)).unwrap_or(u32::MAX);
        let minor = u32::try_from(nix::sys::stat::minor(rdev)).unwrap_or(u32::MAX);
        EntryKind::BlockDevice {
            rdev: DevId::new(major, minor),
        }
    } else if file_type.is_char_device() {
        EntryKind::CharDevice
    } else if file_type.is_fifo() {
        EntryKind::Fifo
    } else if file_type.is_socket() {
        EntryKind::Socket
    } else {
        EntryKind::Unreadable {
            error: "unknown file type".into(),
        }
    }
}

fn udev_ids(sys: &Path) -> HardwareIds {
    let device = match udev::Device::from_syspath(sys) {
        Ok(device) => device,
        Err(error) => {
            debug!(path = %sys.display(), %error, "udev does not know the device; using sysfs only");
            return HardwareIds::default();
        }
    };
    let property = |name: &str| {
        device
            .property_value(name)
            .map(|v| v.to_string_lossy().trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    HardwareIds {
        wwn: property("ID_WWN_WITH_EXTENSION").or_else(|| property("ID_WWN")),
        serial: property("ID_SERIAL_SHORT").or_else(|| property("ID_SERIAL")),
        model: property("ID_MODEL"),
        vendor: property("ID_VENDOR"),
        rotational: None,
    }
}

/// Attributes the kernel publishes itself. For a partition they live on the whole disk, one directory up.
fn sysfs_ids(sys: &Path) -> HardwareIds {
    let disk = if sys.join("partition").exists() {
        sys.join("..")
    } else {
        sys.to_path_buf()
    };
    let read = |relative: &str| {
        fs::read_to_string(disk.join(relative))
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    HardwareIds {
        wwn: read("wwid").or_else(|| read("device/wwid")),
        serial: read("serial").or_else(|| read("device/serial")),
        model: read("device/model"),
        vendor: read("device/vendor"),
        rotational: read("queue/rotational").map(|v| v != "0"),
    }
}

fn fill_missing(first: HardwareIds, then: HardwareIds) -> HardwareIds {
    HardwareIds {
        wwn: first.wwn.or(then.wwn),
        serial: first.serial.or(then.serial),
        model: first.model.or(then.model),
        vendor: first.vendor.or(then.vendor),
        rotational: first.rotational.or(then.rotational),
    }
}
