//! Plain data describing what the node agent finds on the host: discovered entries, their identity and size.
//!
//! Everything here is inert data shared by the host layer (which fills it in), the pure planners (which decide
//! from it) and the inventory (which publishes it). No I/O lives here.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::contract::DevId;

/// How a volume is presented to pods, as in `PersistentVolume.spec.volumeMode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VolumeMode {
    #[default]
    Filesystem,
    Block,
}

impl VolumeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeMode::Filesystem => "Filesystem",
            VolumeMode::Block => "Block",
        }
    }
}

/// Who a disk is, independent of the path or device name it appears under today.
///
/// The filesystem UUID is the identity that survives device renames and reboots; hardware ids are recorded when
/// udev or sysfs know them and are compared only when present on both sides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskIdentity {
    /// Backing block device, e.g. `/dev/loop3`; `None` for filesystems without one (tmpfs).
    pub device: Option<String>,
    /// `major:minor` of the backing device (or of the anonymous device for tmpfs), from mountinfo or stat.
    pub dev_id: Option<DevId>,
    pub fs_type: Option<String>,
    pub fs_uuid: Option<String>,
    pub fs_label: Option<String>,
    pub wwn: Option<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub vendor: Option<String>,
    pub rotational: Option<bool>,
    /// The random id the agent stored on a filesystem volume's root directory (xattr `trusted.localpv.id`): the
    /// identity of filesystems without a UUID (tmpfs, NFS...) and of each directory bind-mounted from one
    /// filesystem. Never set for block volumes: the agent never writes to a raw device to give it an identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_id: Option<String>,
    /// The volume root's filesystem does not support extended attributes, so it cannot carry a `volume_id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub volume_id_unsupported: bool,
}

/// A usable disk found under a discovery directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// Storage class whose discovery directory holds the entry.
    pub class: String,
    /// First-level entry name inside the discovery directory (`vol1`).
    pub entry: String,
    /// Path on the host (`hostDir/entry`): what goes into `spec.local.path`.
    pub host_path: PathBuf,
    /// What the disk is (its medium): `Block` for a raw device, whichever class it is in; a Filesystem class's raw
    /// device is still published as a Filesystem PV (`plan::pv`, annotation `localpv.io/medium`).
    pub mode: VolumeMode,
    /// Total bytes (statvfs `f_blocks * f_frsize`, or the block device size).
    pub capacity_bytes: u64,
    /// Free bytes for filesystems (statvfs `f_bavail * f_frsize`); `None` for block volumes.
    pub available_bytes: Option<u64>,
    /// For a bind mount of a sub-directory: the root inside the source filesystem (mountinfo field 4).
    pub mount_root: Option<String>,
    pub identity: DiskIdentity,
    /// A raw device of a Filesystem class that the kernel says is held (`Host::device_claimed`): mounted in some
    /// mount namespace (the kubelet's, for a Bound PV) or claimed by dm/md. Never measured for other disks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

/// Why an entry under a discovery directory is not published.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnusableReason {
    /// A directory that is not a mount point.
    NotAMountPoint,
    /// A regular file, fifo, socket, or a symlink to something that is not a block device.
    NotADiskEntry,
    /// The entry's kind does not fit the class's volume mode (a block device in a Filesystem class, ...).
    WrongVolumeMode,
    /// The host refused to tell us about it (permission, I/O error).
    ProbeFailed,
    /// A block device that is mounted somewhere on the host: handing it to a pod raw would corrupt that filesystem.
    DeviceInUse,
    /// An entry of a discovery directory under `/dev` that is refused as a whole: another of its entries is not a
    /// block device or a symlink to one, or the directory is not on devtmpfs.
    DeviceDirRefused,
}

impl UnusableReason {
    /// Stable CamelCase reason, used in Events, inventory status and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            UnusableReason::NotAMountPoint => "NotAMountPoint",
            UnusableReason::NotADiskEntry => "NotADiskEntry",
            UnusableReason::WrongVolumeMode => "WrongVolumeMode",
            UnusableReason::ProbeFailed => "ProbeFailed",
            UnusableReason::DeviceInUse => "DeviceInUse",
            UnusableReason::DeviceDirRefused => "DeviceDirRefused",
        }
    }
}

/// An entry that was looked at and rejected, with a message an operator can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unusable {
    pub class: String,
    pub entry: String,
    pub host_path: PathBuf,
    pub reason: UnusableReason,
    pub message: String,
}

/// One discovery pass over every class of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Shared with the measurements the next pass reuses: a pass over 1,000 unchanged disks copies no disk.
    #[serde(with = "shared")]
    pub disks: Vec<Arc<Disk>>,
    pub unusable: Vec<Unusable>,
    /// Classes whose discovery directory (or the mount table it needs) could not be read in this pass. Their
    /// entries are unknown, not gone: a planner must leave their PVs alone until a later pass succeeds.
    #[serde(default)]
    pub failed_classes: Vec<ClassFailure>,
    /// Found disks that are not `Healthy` (`health::judge`), by path; a disk not listed is healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy: Vec<DiskHealth>,
    /// Found disks an operator cordoned (`localpv disks cordon`, the LocalDisk's `localpv.io/cordoned`), by path:
    /// not published, their Available PVs withdrawn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cordoned: Vec<PathBuf>,
}

/// A found disk that shows signs of failing (issue 37).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskHealth {
    pub host_path: PathBuf,
    pub state: crate::health::State,
    pub cause: crate::health::Cause,
    pub message: String,
}

/// `Vec<Arc<Disk>>` (de)serialised as the list of disks it holds.
mod shared {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::Disk;

    pub fn serialize<S: Serializer>(disks: &[Arc<Disk>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(disks.iter().map(|d| &**d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Arc<Disk>>, D::Error> {
        Ok(Vec::<Disk>::deserialize(d)?
            .into_iter()
            .map(Arc::new)
            .collect())
    }
}

/// A class that discovery could not look into at all (missing directory, permission, unreadable mountinfo).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassFailure {
    pub class: String,
    /// The directory as this process sees it (`mountDir`).
    pub mount_dir: PathBuf,
    pub message: String,
}

/// What discovery needs to know about one storage class: where to look and what to accept.
/// Built from the node agent's configuration (`config`), consumed by `discover`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryClass {
    /// StorageClass name.
    pub name: String,
    /// Discovery directory as the host sees it; published in `spec.local.path`.
    pub host_dir: PathBuf,
    /// The same directory as this process sees it (inside a container it is usually mounted elsewhere).
    pub mount_dir: PathBuf,
    pub mode: VolumeMode,
    /// Shell-style globs (`*`, `?`, `[..]`) an entry name must match one of; `["*"]` by default.
    pub name_patterns: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/disks` showed the device number as text when it was a string; it still does.
    #[test]
    fn an_identity_reads_and_writes_its_device_number_as_text() {
        let text = r#"{"device":"/dev/loop3","devId":"7:3","fsType":"ext4","fsUuid":null,"fsLabel":null,"wwn":null,"serial":null,"model":null,"vendor":null,"rotational":null}"#;
        let identity: DiskIdentity =
            serde_json::from_str(text).expect("an identity as written before");
        assert_eq!(identity.dev_id, Some(DevId::new(7, 3)));
        assert_eq!(serde_json::to_string(&identity).unwrap(), text);
    }
}
