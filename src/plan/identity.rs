//! A disk's identity as recorded on its PV (annotations), compared with what discovery finds now, and the key
//! under which the disk ledger remembers it.
//!
//! Rules (issue 14): only a strong id authorises a wipe. Strong ids are the filesystem UUID, the agent's own
//! volume id (an xattr on the volume root, for filesystems without UUID and for bind-mounted directories), the
//! WWN and the serial. The device number and the device path are hints: when they differ and nothing strong was
//! compared the disk is another one, but when they agree that proves nothing (a remounted tmpfs gets the number the
//! previous one freed), and when a strong id matches they may differ (a loop device re-attached as another number).

use std::collections::BTreeMap;
use std::path::Path;

use crate::contract::{
    ANN_DEV_ID, ANN_DEVICE, ANN_FS_LABEL, ANN_FS_TYPE, ANN_FS_UUID, ANN_MEDIUM, ANN_MODEL,
    ANN_MOUNT_ROOT, ANN_ROTATIONAL, ANN_SERIAL, ANN_VENDOR, ANN_VOLUME_ID, ANN_WWN, DevId,
    MEDIUM_DEVICE,
};
use crate::disk::{Disk, DiskIdentity, VolumeMode};

/// What a PV remembers about the disk it was created for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    pub identity: DiskIdentity,
    pub mount_root: Option<String>,
    /// The device-number annotation when it is not `major:minor` (edited by hand): it still refutes, as a device
    /// number that differs would, instead of reading as no record at all.
    pub unreadable_dev_id: Option<String>,
}

/// The outcome of comparing a PV's recorded identity with the disk now at its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityCheck {
    /// Every id known on both sides agrees, and at least one was compared.
    Same,
    /// A different disk: the message says which id differs.
    Changed(String),
    /// The PV records ids but the disk now shows none of them: neither confirmed nor refuted.
    Unverifiable,
    /// The PV records nothing (adopted from the reference provisioner before we saw its disk).
    NotRecorded,
}

/// Annotations recording `disk`'s identity on its PV.
pub fn annotations(disk: &Disk) -> BTreeMap<String, String> {
    let id = &disk.identity;
    let fields = [
        (ANN_FS_UUID, id.fs_uuid.clone()),
        (ANN_FS_TYPE, id.fs_type.clone()),
        (ANN_FS_LABEL, id.fs_label.clone()),
        (ANN_DEVICE, id.device.clone()),
        (ANN_DEV_ID, id.dev_id.map(|d| d.to_string())),
        (ANN_WWN, id.wwn.clone()),
        (ANN_SERIAL, id.serial.clone()),
        (ANN_MODEL, id.model.clone()),
        (ANN_VENDOR, id.vendor.clone()),
        (ANN_ROTATIONAL, id.rotational.map(|r| r.to_string())),
        (ANN_MOUNT_ROOT, disk.mount_root.clone()),
        (ANN_VOLUME_ID, id.volume_id.clone()),
    ];
    fields
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_string(), value?)))
        .collect()
}

/// [`annotations`] for a PV of `published_as` over `disk`. A raw device published as a Filesystem PV records the
/// device's ids only, and says it is a device (`localpv.io/medium`): the kubelet formats it on first use and again
/// in every lifetime, so its filesystem is the tenant's, never part of its identity.
pub fn annotations_as(disk: &Disk, published_as: VolumeMode) -> BTreeMap<String, String> {
    let mut annotations = annotations(disk);
    if disk.mode == VolumeMode::Block && published_as == VolumeMode::Filesystem {
        for key in [ANN_FS_UUID, ANN_FS_TYPE, ANN_FS_LABEL] {
            annotations.remove(key);
        }
        annotations.insert(ANN_MEDIUM.to_string(), MEDIUM_DEVICE.to_string());
    }
    annotations
}

/// The identity recorded in a PV's annotations; `None` when it records none of the comparable ids.
pub fn recorded(annotations: &BTreeMap<String, String>) -> Option<Recorded> {
    let get = |key: &str| annotations.get(key).cloned();
    let dev_id = get(ANN_DEV_ID);
    let identity = DiskIdentity {
        device: get(ANN_DEVICE),
        dev_id: dev_id.as_deref().and_then(DevId::parse),
        fs_type: get(ANN_FS_TYPE),
        fs_uuid: get(ANN_FS_UUID),
        fs_label: get(ANN_FS_LABEL),
        wwn: get(ANN_WWN),
        serial: get(ANN_SERIAL),
        model: get(ANN_MODEL),
        vendor: get(ANN_VENDOR),
        rotational: get(ANN_ROTATIONAL).and_then(|r| r.parse().ok()),
        volume_id: get(ANN_VOLUME_ID),
        volume_id_unsupported: false,
    };
    let any = [
        &identity.volume_id,
        &identity.fs_uuid,
        &dev_id,
        &identity.device,
        &identity.wwn,
        &identity.serial,
    ]
    .iter()
    .any(|id| id.is_some());
    let unreadable_dev_id = dev_id.filter(|_| identity.dev_id.is_none());
    any.then(|| Recorded {
        identity,
        mount_root: get(ANN_MOUNT_ROOT),
        unreadable_dev_id,
    })
}

/// Compares what a PV recorded with the disk discovered at its path.
///
/// Filesystem volumes are known by the agent's volume id, the filesystem UUID and hardware ids (each compared when
/// both sides have it), plus the bind mount root. Block volumes are known by WWN or serial only. NB: a block
/// volume's filesystem UUID is never compared: its tenant may have reformatted it. See the module doc for why a
/// device number or device path can only refute, never confirm.
pub fn check(mode: VolumeMode, recorded: Option<&Recorded>, disk: &Disk) -> IdentityCheck {
    let Some(recorded) = recorded else {
        return IdentityCheck::NotRecorded;
    };
    let (was, now) = (&recorded.identity, &disk.identity);
    let mut pairs = vec![
        ("WWN", &was.wwn, &now.wwn),
        ("serial", &was.serial, &now.serial),
    ];
    if mode == VolumeMode::Filesystem {
        pairs.insert(0, ("filesystem UUID", &was.fs_uuid, &now.fs_uuid));
        pairs.insert(0, ("volume id", &was.volume_id, &now.volume_id));
    }
    let mut compared = false;
    for (what, was, now) in pairs {
        match (was, now) {
            (Some(was), Some(now)) if was != now => return changed(what, was, now),
            (Some(_), Some(_)) => compared = true,
            _ => {}
        }
    }
    if mode == VolumeMode::Filesystem {
        if let Some(gone) = filesystem_id_gone(was, now) {
            return IdentityCheck::Changed(gone);
        }
        let root = |r: &Option<String>| r.clone().unwrap_or_else(|| "/".to_string());
        if compared && root(&recorded.mount_root) != root(&disk.mount_root) {
            return changed(
                "mount root",
                &root(&recorded.mount_root),
                &root(&disk.mount_root),
            );
        }
    }
    if compared {
        return IdentityCheck::Same;
    }
    let hint = match mode {
        VolumeMode::Filesystem => {
            let was = was.dev_id.map(|d| d.to_string());
            let now = now.dev_id.map(|d| d.to_string());
            (
                "device number",
                was.or_else(|| recorded.unreadable_dev_id.clone()),
                now,
            )
        }
        VolumeMode::Block => ("device", was.device.clone(), now.device.clone()),
    };
    match hint {
        (what, Some(was), Some(now)) if was != now => changed(what, &was, &now),
        _ => IdentityCheck::Unverifiable,
    }
}

/// The ids an identity shows that [`may_be_same`] compares, by field: two identities sharing none of these values
/// can never be taken for the same disk.
pub fn match_keys(identity: &DiskIdentity) -> impl Iterator<Item = (&'static str, String)> {
    let strings = [
        ("volume-id", &identity.volume_id),
        ("fs-uuid", &identity.fs_uuid),
        ("wwn", &identity.wwn),
        ("serial", &identity.serial),
        ("device", &identity.device),
    ];
    let dev_id = identity.dev_id.map(|dev| ("dev-id", dev.to_string()));
    strings
        .into_iter()
        .filter_map(|(field, value)| Some((field, value.clone()?)))
        .chain(dev_id)
}

/// Whether `disk` could be the disk a PV recorded: a strong id matches, or none can be compared and the device
/// number (device path for block) agrees. Good enough to hold a disk back (never publish one disk twice), never to
/// wipe it.
pub fn may_be_same(mode: VolumeMode, recorded: Option<&Recorded>, disk: &Disk) -> bool {
    match check(mode, recorded, disk) {
        IdentityCheck::Same => true,
        IdentityCheck::Unverifiable => {
            let (Some(was), now) = (recorded.map(|r| &r.identity), &disk.identity) else {
                return false;
            };
            match mode {
                VolumeMode::Filesystem => was.dev_id.is_some() && was.dev_id == now.dev_id,
                VolumeMode::Block => was.device.is_some() && was.device == now.device,
            }
        }
        IdentityCheck::Changed(_) | IdentityCheck::NotRecorded => false,
    }
}

/// A strong id the PV recorded that the filesystem now at its path does not carry at all.
fn filesystem_id_gone(was: &DiskIdentity, now: &DiskIdentity) -> Option<String> {
    if let (Some(was), None) = (&was.volume_id, &now.volume_id) {
        return Some(format!("volume id {was} is gone"));
    }
    if let (Some(was), None) = (&was.fs_uuid, &now.fs_uuid) {
        return Some(format!("filesystem UUID {was} is gone"));
    }
    None
}

/// Whether `identity` carries an id that can authorise a wipe for a volume of `mode` (see the module doc).
pub fn is_strong(mode: VolumeMode, identity: &DiskIdentity) -> bool {
    let hardware = identity.wwn.is_some() || identity.serial.is_some();
    match mode {
        VolumeMode::Filesystem => {
            hardware || identity.fs_uuid.is_some() || identity.volume_id.is_some()
        }
        VolumeMode::Block => hardware,
    }
}

/// Whether a filesystem disk is identified by the agent's volume id rather than by its UUID: it has no UUID, or it
/// is a directory bind-mounted from a filesystem whose UUID its siblings share.
pub fn needs_volume_id(disk: &Disk) -> bool {
    disk.identity.fs_uuid.is_none() || disk.mount_root.is_some()
}

/// Whether the agent should store its volume id on this disk: a filesystem disk that needs one, has none yet, and
/// whose filesystem takes extended attributes.
pub fn wants_volume_id(disk: &Disk) -> bool {
    disk.mode == VolumeMode::Filesystem
        && disk.identity.volume_id.is_none()
        && !disk.identity.volume_id_unsupported
        && needs_volume_id(disk)
}

fn changed(what: &str, was: &str, now: &str) -> IdentityCheck {
    IdentityCheck::Changed(format!("{what} {was} became {now}"))
}

/// The key under which the disk ledger remembers a disk: its most stable id for the volume mode, falling back to
/// the host path when it has none. NB: never the device number (it is reused by other disks); a `path:` key only
/// remembers, it never authorises a wipe (see [`is_strong`]).
pub fn ledger_key(
    mode: VolumeMode,
    identity: &DiskIdentity,
    mount_root: Option<&str>,
    host_path: &Path,
) -> String {
    let prefixed = |kind: &str, id: &Option<String>| id.as_ref().map(|id| format!("{kind}:{id}"));
    let key = match mode {
        VolumeMode::Filesystem => prefixed("fs-uuid", &identity.fs_uuid)
            .or_else(|| prefixed("wwn", &identity.wwn))
            .or_else(|| prefixed("serial", &identity.serial))
            .map(|key| match mount_root {
                Some(root) if root != "/" => format!("{key}:{root}"),
                _ => key,
            })
            .or_else(|| prefixed("volume-id", &identity.volume_id)),
        VolumeMode::Block => {
            prefixed("wwn", &identity.wwn).or_else(|| prefixed("serial", &identity.serial))
        }
    };
    key.unwrap_or_else(|| format!("path:{}", host_path.display()))
}

/// Whether two ledger keys (see [`ledger_key`]) may name the same disk: only two keys of one kind with different
/// values (two filesystem UUIDs, two WWNs) prove two disks. Keys of different kinds, or a `path:` key, cannot tell,
/// so they may: what the caller keeps for a disk is then applied to whatever is at the path (a health record holds
/// a disk back; it never authorises anything).
pub fn keys_may_match(a: &str, b: &str) -> bool {
    let kind = |k: &str| k.split_once(':').map_or("", |(kind, _)| kind).to_string();
    a == b || kind(a) != kind(b) || kind(a) == "path"
}

/// The ledger key of a discovered disk.
pub fn disk_key(disk: &Disk) -> String {
    ledger_key(
        disk.mode,
        &disk.identity,
        disk.mount_root.as_deref(),
        &disk.host_path,
    )
}

#[cfg(test)]
mod tests;
