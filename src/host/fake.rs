//! A [`Host`] that answers from canned data and records every call, for tests of what discovery does when the
//! host misbehaves (unreadable directories, failing probes, a broken mount table).
//!
//! Anything not set up answers `ENOENT`, like a path that does not exist.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{
    DevId, DirEntry, FsProbe, FsSize, HardwareIds, Host, HostError, MountTable, VolumeTag,
};

/// A host call, as recorded by [`FakeHost`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostCall {
    MountTable,
    Canonicalize(PathBuf),
    ReadDir(PathBuf),
    DirEntry(PathBuf),
    Statvfs(PathBuf),
    BlockDeviceSize(PathBuf),
    ProbeFilesystem(PathBuf),
    DeviceClaimed(PathBuf),
    HardwareIds(DevId),
    DeviceNode(DevId),
    VolumeId(PathBuf),
    TagVolume(PathBuf),
}

/// A canned answer: the value, or the errno the call fails with.
type Canned<T> = Result<T, i32>;

#[derive(Debug, Default)]
pub struct FakeHost {
    pub mountinfo: Option<Canned<String>>,
    pub canonical: HashMap<PathBuf, Canned<PathBuf>>,
    pub dirs: HashMap<PathBuf, Canned<Vec<DirEntry>>>,
    pub statvfs: HashMap<PathBuf, Canned<FsSize>>,
    pub block_sizes: HashMap<PathBuf, Canned<u64>>,
    pub probes: HashMap<PathBuf, Canned<FsProbe>>,
    /// Whether each block device is held (`device_claimed`).
    pub claimed: HashMap<PathBuf, Canned<bool>>,
    pub hardware: HashMap<DevId, Canned<HardwareIds>>,
    pub nodes: HashMap<DevId, PathBuf>,
    /// Volume ids on directories; a directory not listed has none ([`VolumeTag::Absent`]). `tag_volume` stores
    /// `fake-id:<path>` here unless the entry is an error or [`VolumeTag::Unsupported`].
    pub volume_ids: Mutex<HashMap<PathBuf, Canned<VolumeTag>>>,
    /// Health signs by volume path (as this process sees it); a path not listed shows none.
    pub health: Mutex<HashMap<PathBuf, crate::health::Signals>>,
    /// Whether the table carries the kernel's unique mount ids, as the live host's (the mount API) does: each
    /// mount's is its mountinfo id in this generation ([`FakeHost::with_mounts_made_again`] starts another).
    /// `None`: the table is mountinfo's, whose ids the kernel hands out again.
    pub unique_ids: Option<u64>,
    calls: Mutex<Vec<HostCall>>,
    /// The last mount table answered: a mount whose line did not change is handed over as the same allocation,
    /// as the live host does.
    last_table: Mutex<Vec<std::sync::Arc<super::MountEntry>>>,
}

impl FakeHost {
    pub fn new() -> Self {
        FakeHost::default()
    }

    pub fn with_mountinfo(mut self, text: &str) -> Self {
        self.mountinfo = Some(Ok(text.to_owned()));
        self
    }

    /// The table as the mount API reads it, with unique mount ids ([`FakeHost::unique_ids`]).
    pub fn with_unique_ids(mut self) -> Self {
        self.unique_ids = Some(1);
        self
    }

    /// Every mount in the table made after those of a host in the previous generation, under the same mountinfo
    /// ids: as the mount API sees an unmount and a mount that took the freed id.
    pub fn with_mounts_made_again(mut self) -> Self {
        self.unique_ids = Some(self.unique_ids.unwrap_or(1) + 1);
        self
    }

    pub fn with_dir(mut self, dir: impl Into<PathBuf>, entries: Vec<DirEntry>) -> Self {
        self.dirs.insert(dir.into(), Ok(entries));
        self
    }

    pub fn with_statvfs(
        mut self,
        path: impl Into<PathBuf>,
        total_bytes: u64,
        available_bytes: u64,
    ) -> Self {
        self.statvfs.insert(
            path.into(),
            Ok(FsSize {
                total_bytes,
                available_bytes,
            }),
        );
        self
    }

    pub fn with_block_size(mut self, path: impl Into<PathBuf>, bytes: u64) -> Self {
        self.block_sizes.insert(path.into(), Ok(bytes));
        self
    }

    pub fn with_probe(mut self, device: impl Into<PathBuf>, probe: FsProbe) -> Self {
        self.probes.insert(device.into(), Ok(probe));
        self
    }

    pub fn with_claimed(mut self, device: impl Into<PathBuf>, claimed: bool) -> Self {
        self.claimed.insert(device.into(), Ok(claimed));
        self
    }

    pub fn with_device_node(mut self, dev: DevId, node: impl Into<PathBuf>) -> Self {
        self.nodes.insert(dev, node.into());
        self
    }

    pub fn with_volume_id(self, path: impl Into<PathBuf>, tag: VolumeTag) -> Self {
        self.lock_ids().insert(path.into(), Ok(tag));
        self
    }

    fn lock_ids(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Canned<VolumeTag>>> {
        self.volume_ids
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<HostCall> {
        self.lock_calls().clone()
    }

    fn record(&self, call: HostCall) {
        self.lock_calls().push(call);
    }

    fn lock_calls(&self) -> std::sync::MutexGuard<'_, Vec<HostCall>> {
        // A panic while holding the lock can only come from a failing test; the log is still readable.
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn answer<T: Clone>(map: &HashMap<PathBuf, Canned<T>>, path: &Path) -> Result<T, io::Error> {
    match map.get(path) {
        Some(Ok(value)) => Ok(value.clone()),
        Some(Err(code)) => Err(errno(*code)),
        None => Err(errno(nix::libc::ENOENT)),
    }
}

impl Host for FakeHost {
    fn mount_table(&self) -> Result<MountTable, HostError> {
        self.record(HostCall::MountTable);
        let path = PathBuf::from("/proc/self/mountinfo");
        let text = match &self.mountinfo {
            Some(Ok(text)) => text.clone(),
            Some(Err(code)) => {
                return Err(HostError::ReadMountTable {
                    path,
                    source: errno(*code),
                });
            }
            None => String::new(),
        };
        let mut table = MountTable::parse(text.as_bytes())
            .map_err(|source| HostError::ParseMountTable { path, source })?;
        if let Some(generation) = self.unique_ids {
            for entry in &mut table.entries {
                let id = generation << 32 | u64::from(entry.mount_id);
                std::sync::Arc::make_mut(entry).unique_id = Some(id);
            }
        }
        let mut last = self
            .last_table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for entry in &mut table.entries {
            if let Some(same) = last.iter().find(|old| **old == *entry) {
                *entry = same.clone();
            }
        }
        last.clone_from(&table.entries);
        Ok(table)
    }

    fn canonicalize(&self, path: &Path) -> Result<PathBuf, HostError> {
        self.record(HostCall::Canonicalize(path.into()));
        match self.canonical.get(path) {
            Some(Ok(resolved)) => Ok(resolved.clone()),
            Some(Err(code)) => Err(HostError::Canonicalize {
                path: path.into(),
                source: errno(*code),
            }),
            // Paths without symlinks resolve to themselves, as long as they exist.
            None if self.dirs.contains_key(path) => Ok(path.into()),
            None => Err(HostError::Canonicalize {
                path: path.into(),
                source: errno(nix::libc::ENOENT),
            }),
        }
    }

    fn read_dir(&self, dir: &Path) -> Result<Vec<DirEntry>, HostError> {
        self.record(HostCall::ReadDir(dir.into()));
        answer(&self.dirs, dir).map_err(|source| HostError::ReadDir {
            path: dir.into(),
            source,
        })
    }

    fn dir_entry(&self, dir: &Path, name: &std::ffi::OsStr) -> Result<Option<DirEntry>, HostError> {
        self.record(HostCall::DirEntry(dir.join(name)));
        let entries = answer(&self.dirs, dir).map_err(|source| HostError::ReadDir {
            path: dir.into(),
            source,
        })?;
        Ok(entries
            .into_iter()
            .find(|entry| std::ffi::OsStr::new(&entry.name) == name))
    }

    fn statvfs(&self, path: &Path) -> Result<FsSize, HostError> {
        self.record(HostCall::Statvfs(path.into()));
        answer(&self.statvfs, path).map_err(|source| HostError::Statvfs {
            path: path.into(),
            source,
        })
    }

    fn block_device_size(&self, path: &Path) -> Result<u64, HostError> {
        self.record(HostCall::BlockDeviceSize(path.into()));
        answer(&self.block_sizes, path).map_err(|source| HostError::OpenDevice {
            path: path.into(),
            source,
        })
    }

    fn probe_filesystem(&self, device: &Path) -> Result<FsProbe, HostError> {
        self.record(HostCall::ProbeFilesystem(device.into()));
        answer(&self.probes, device).map_err(|source| HostError::Probe {
            device: device.into(),
            source: source.into(),
        })
    }

    fn device_claimed(&self, device: &Path) -> Result<bool, HostError> {
        self.record(HostCall::DeviceClaimed(device.into()));
        answer(&self.claimed, device).map_err(|source| HostError::DeviceClaimed {
            path: device.into(),
            source,
        })
    }

    fn hardware_ids(&self, dev: DevId) -> Result<HardwareIds, HostError> {
        self.record(HostCall::HardwareIds(dev));
        match self.hardware.get(&dev) {
            Some(Ok(ids)) => Ok(ids.clone()),
            Some(Err(code)) => Err(HostError::ReadSysfs {
                path: format!("/sys/dev/block/{dev}").into(),
                source: errno(*code),
            }),
            None => Ok(HardwareIds::default()),
        }
    }

    fn device_node(&self, dev: DevId) -> Result<Option<PathBuf>, HostError> {
        self.record(HostCall::DeviceNode(dev));
        Ok(self.nodes.get(&dev).cloned())
    }

    fn volume_id(&self, path: &Path) -> Result<VolumeTag, HostError> {
        self.record(HostCall::VolumeId(path.into()));
        match self.lock_ids().get(path) {
            Some(Ok(tag)) => Ok(tag.clone()),
            Some(Err(code)) => Err(HostError::ReadVolumeId {
                path: path.into(),
                source: errno(*code),
            }),
            None => Ok(VolumeTag::Absent),
        }
    }

    fn tag_volume(&self, path: &Path) -> Result<String, HostError> {
        self.record(HostCall::TagVolume(path.into()));
        let failed = |code| HostError::TagVolume {
            path: path.into(),
            source: errno(code),
        };
        let mut ids = self.lock_ids();
        match ids.get(path) {
            Some(Ok(VolumeTag::Present(id))) => Ok(id.clone()),
            Some(Ok(VolumeTag::Unsupported)) => Err(failed(nix::libc::EOPNOTSUPP)),
            Some(Err(code)) => Err(failed(*code)),
            Some(Ok(VolumeTag::Absent)) | None => {
                let id = format!("fake-id:{}", path.display());
                ids.insert(path.into(), Ok(VolumeTag::Present(id.clone())));
                Ok(id)
            }
        }
    }

    #[cfg(feature = "node")]
    fn health(&self, probe: &super::health::HealthProbe) -> crate::health::Signals {
        let canned = self.health.lock().unwrap_or_else(|e| e.into_inner());
        canned.get(&probe.path).cloned().unwrap_or_default()
    }
}
