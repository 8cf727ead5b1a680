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

use std::path::{Path, PathBuf};

use tracing::debug;

use crate::contract::DevId;
use crate::disk::{
    ClassFailure, Discovery, DiscoveryClass, Disk, DiskIdentity, Unusable, UnusableReason,
    VolumeMode,
};
use crate::host::{Host, HostError, MountEntry, MountTable, VolumeTag, error_chain};

pub mod classify;
pub mod pattern;

use classify::{Candidate, CandidateKind, Listing};

/// Look at every class's discovery directory and report each matching entry as a disk or as unusable.
pub fn discover(host: &dyn Host, classes: &[DiscoveryClass]) -> Discovery {
    let mut failed_classes = Vec::new();
    let table = host.mount_table();
    let mut listings = Vec::new();
    for class in classes {
        let needs_table = class.mode == VolumeMode::Filesystem;
        let listing = match (&table, needs_table) {
            (Err(error), true) => Err(error_chain(error)),
            _ => list_class(host, class),
        };
        match listing {
            Ok(listing) => listings.push(listing),
            Err(message) => failed_classes.push(ClassFailure {
                class: class.name.clone(),
                mount_dir: class.mount_dir.clone(),
                message,
            }),
        }
    }
    let empty = MountTable::default();
    let classified = classify::classify(&listings, table.as_ref().unwrap_or(&empty));
    let mut discovery = Discovery {
        disks: Vec::new(),
        unusable: classified.unusable,
        failed_classes,
    };
    for candidate in &classified.candidates {
        match measure(host, candidate) {
            Ok(disk) => discovery.disks.push(disk),
            Err(error) => discovery.unusable.push(probe_failed(candidate, &error)),
        }
    }
    discovery
}

/// Validate the class's patterns and read its directory. The error is a message for the operator.
fn list_class<'a>(host: &dyn Host, class: &'a DiscoveryClass) -> Result<Listing<'a>, String> {
    for name_pattern in &class.name_patterns {
        pattern::validate(name_pattern).map_err(|e| e.to_string())?;
    }
    let resolved_dir = host
        .canonicalize(&class.mount_dir)
        .map_err(|e| error_chain(&e))?;
    let entries = host
        .read_dir(&class.mount_dir)
        .map_err(|e| error_chain(&e))?;
    Ok(Listing {
        class,
        resolved_dir,
        entries,
    })
}

fn measure(host: &dyn Host, candidate: &Candidate<'_>) -> Result<Disk, HostError> {
    let (capacity_bytes, available_bytes, mount_root, identity) = match &candidate.kind {
        CandidateKind::Filesystem { mount } => {
            let size = host.statvfs(&candidate.probe_path)?;
            let mut identity = filesystem_identity(host, mount)?;
            match host.volume_id(&candidate.probe_path)? {
                VolumeTag::Present(id) => identity.volume_id = Some(id),
                VolumeTag::Absent => {}
                VolumeTag::Unsupported => identity.volume_id_unsupported = true,
            }
            let root = (mount.root != Path::new("/")).then(|| mount.root.display().to_string());
            (size.total_bytes, Some(size.available_bytes), root, identity)
        }
        CandidateKind::Block { rdev } => {
            let size = host.block_device_size(&candidate.probe_path)?;
            (
                size,
                None,
                None,
                block_identity(host, &candidate.probe_path, *rdev)?,
            )
        }
    };
    Ok(Disk {
        class: candidate.class.name.clone(),
        entry: candidate.entry.clone(),
        host_path: candidate.host_path.clone(),
        mode: candidate.class.mode,
        capacity_bytes,
        available_bytes,
        mount_root,
        identity,
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
        dev_id: Some(mount.dev.to_string()),
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
        dev_id: Some(rdev.to_string()),
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

fn probe_failed(candidate: &Candidate<'_>, error: &HostError) -> Unusable {
    Unusable {
        class: candidate.class.name.clone(),
        entry: candidate.entry.clone(),
        host_path: candidate.host_path.clone(),
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
mod tests;
