//! Runs one wipe order on a blocking thread: re-verify the disk at the path, then erase it.
//!
//! The planner already compared identities when it ordered the wipe; this second look happens right before the
//! first byte is touched, because minutes may have passed (a disk swapped meanwhile must never be wiped). The
//! device number the wipe then pins the root to is the one found now, not the recorded one: once a strong id
//! matched, a renumbered device (a loop device re-attached, a disk on another port) is still the same disk.
//! Afterwards the volume must be empty (`lost+found` aside) with no mount inside, or the wipe failed; a wiped device
//! must carry no filesystem signature (libblkid finds none), or the wipe failed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{BlockWipe, FsWipe, WipeMethod as ClassWipe};
use crate::contract::DevId;
use crate::discover::discover;
use crate::disk::{DiscoveryClass, Disk};
use crate::host::{Host, HostError};
use crate::plan::WipeOrder;
use crate::plan::identity::{self, IdentityCheck, Recorded};
use crate::wipe::{self, BlockOptions, Control, Expected, FsOptions, FsWipeError, WipeReport};

/// What a finished wipe did, for logs, events and metrics.
#[derive(Debug)]
pub struct Done {
    pub method: &'static str,
    pub bytes: u64,
    pub entries: u64,
}

/// Why a wipe did not happen or did not finish.
#[derive(Debug)]
pub enum WipeFailed {
    /// The disk at the path is not the one expected: nothing was touched. Never retried blindly.
    Refused(String),
    /// The wipe ran and failed; retried with backoff.
    Error(String),
    /// The wipe ran but the volume is not empty afterwards (a mount inside it, entries written meanwhile): it is
    /// not published; retried with backoff.
    Incomplete(String),
}

/// Verifies and wipes. Blocks for the whole wipe: call from `spawn_blocking`.
/// How hard a wipe may use the machine (from the global configuration).
#[derive(Clone, Copy, Debug)]
pub struct Share {
    pub concurrency: usize,
    pub idle_io_priority: bool,
}

pub fn run(
    host: &Arc<dyn Host>,
    class: &DiscoveryClass,
    order: &WipeOrder,
    share: Share,
    ctl: &Control,
) -> Result<Done, WipeFailed> {
    let found = verify(host.as_ref(), class, order)?;
    let dev = found.identity.dev_id;
    match &order.method {
        ClassWipe::Filesystem(method) => {
            let done = wipe_filesystem(order, method, dev, share, ctl)?;
            no_mounts_below(host.as_ref(), &order.path)?;
            Ok(done)
        }
        ClassWipe::Block(method) => {
            let done = wipe_block(order, method, dev, share, ctl)?;
            no_signature_left(host.as_ref(), &order.path)?;
            Ok(done)
        }
    }
}

/// The disk at the order's path, once its identity matched the order's.
fn verify(host: &dyn Host, class: &DiscoveryClass, order: &WipeOrder) -> Result<Disk, WipeFailed> {
    let found = discover(host, std::slice::from_ref(class));
    let Some(disk) = found.disks.iter().find(|d| d.host_path == order.host_path) else {
        let why = found
            .unusable
            .iter()
            .find(|u| u.host_path == order.host_path)
            .map(|u| u.message.clone())
            .unwrap_or_else(|| "it is not there".to_string());
        return Err(WipeFailed::Refused(format!(
            "{} is no longer a usable disk: {why}",
            order.host_path.display()
        )));
    };
    let recorded = Recorded {
        identity: order.expected.clone(),
        mount_root: order.expected_mount_root.clone(),
        unreadable_dev_id: None,
    };
    match identity::check(order.method.mode(), Some(&recorded), disk) {
        IdentityCheck::Same => Ok(Disk::clone(disk)),
        IdentityCheck::Changed(what) => Err(WipeFailed::Refused(format!(
            "{} holds a different disk: {what}",
            order.host_path.display()
        ))),
        IdentityCheck::Unverifiable | IdentityCheck::NotRecorded => {
            Err(WipeFailed::Refused(format!(
                "the identity of {} cannot be confirmed, so it is not wiped",
                order.host_path.display()
            )))
        }
    }
}

/// The mount table, read after the wipe: any mount point beneath the volume hides files the wipe could not reach.
fn no_mounts_below(host: &dyn Host, path: &Path) -> Result<(), WipeFailed> {
    let error = |e: HostError| WipeFailed::Incomplete(crate::host::error_chain(&e));
    let path = host.canonicalize(path).map_err(error)?;
    let below = host.mount_table().map_err(error)?.mounts_below(&path);
    if below.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = below.iter().map(|m| m.display().to_string()).collect();
    Err(WipeFailed::Incomplete(format!(
        "{} mount(s) inside {} hide data the wipe cannot reach: {}; the volume is not published until they are \
         unmounted",
        below.len(),
        path.display(),
        shown.join(", ")
    )))
}

/// libblkid's look at the device after a block wipe: any filesystem signature left (or signatures it cannot tell
/// apart) fails the wipe. NB: a kubelet formats a device only when it finds no signature, so a cleaner that leaves
/// one (a `discard` that does not zero, a `blockCleanerCommand` that does less than it says) would hand the previous
/// tenant's filesystem, files and all, to the next claim. `zeroout`, `overwrite` and `signatures` always pass.
fn no_signature_left(host: &dyn Host, device: &Path) -> Result<(), WipeFailed> {
    let probe = host.probe_filesystem(device).map_err(|e| {
        WipeFailed::Incomplete(format!(
            "the device could not be checked for signatures after the wipe: {}",
            crate::host::error_chain(&e)
        ))
    })?;
    match probe.fs_type {
        None => Ok(()),
        Some(fs_type) => Err(WipeFailed::Incomplete(format!(
            "a {fs_type} signature survived the wipe of {}: the next tenant could read the previous one's \
             filesystem; the device is not published until a wipe leaves none",
            device.display()
        ))),
    }
}

fn wipe_filesystem(
    order: &WipeOrder,
    method: &FsWipe,
    dev: Option<DevId>,
    share: Share,
    ctl: &Control,
) -> Result<Done, WipeFailed> {
    let opts = FsOptions {
        command: match method {
            FsWipe::Command(argv) => Some(argv.clone()),
            FsWipe::RemoveContents => None,
        },
        concurrency: share.concurrency,
        idle_io_priority: share.idle_io_priority,
        ..FsOptions::default()
    };
    let id_check = order.expected.volume_id.clone().map(wipe::volume_id_check);
    let expected = Expected {
        dev,
        check: id_check.as_ref().map(|c| c as &wipe::fs::RootCheck),
    };
    let report =
        wipe::wipe_filesystem(&order.path, &expected, &opts, ctl).map_err(|e| match e {
            FsWipeError::WrongFilesystem { .. } | FsWipeError::RootCheck { .. } => {
                WipeFailed::Refused(crate::host::error_chain(&e))
            }
            e => WipeFailed::Error(crate::host::error_chain(&e)),
        })?;
    if !report.skipped.is_empty() {
        let first: Vec<String> = report
            .skipped
            .iter()
            .take(3)
            .map(|s| format!("{} ({:?}: {})", s.path.display(), s.op, s.errno))
            .collect();
        return Err(WipeFailed::Error(format!(
            "{} entries could not be removed, e.g. {}",
            report.skipped.len() as u64 + report.skipped_more,
            first.join(", ")
        )));
    }
    incomplete(&report)?;
    Ok(Done {
        method: "remove",
        bytes: report.removed_bytes,
        entries: report.removed_entries,
    })
}

/// A wipe that left mounts inside the volume or found entries written after it is not a completed wipe.
fn incomplete(report: &WipeReport) -> Result<(), WipeFailed> {
    let shown = |paths: &[PathBuf]| -> String {
        let first: Vec<String> = paths
            .iter()
            .take(3)
            .map(|p| p.display().to_string())
            .collect();
        first.join(", ")
    };
    if !report.nested_mounts.is_empty() {
        return Err(WipeFailed::Incomplete(format!(
            "mounts inside the volume were left in place with their contents: {}; the volume is not published \
             until they are unmounted",
            shown(&report.nested_mounts)
        )));
    }
    if !report.left.is_empty() {
        return Err(WipeFailed::Incomplete(format!(
            "{} entries were written while the volume was wiped, e.g. {}: something still writes to it",
            report.left.len(),
            shown(&report.left)
        )));
    }
    Ok(())
}

fn wipe_block(
    order: &WipeOrder,
    method: &BlockWipe,
    dev: Option<DevId>,
    share: Share,
    ctl: &Control,
) -> Result<Done, WipeFailed> {
    let opts = BlockOptions {
        method: method.method(),
        command: method.argv().map(<[String]>::to_vec),
        idle_io_priority: share.idle_io_priority,
        ..BlockOptions::default()
    };
    let report = wipe::wipe_block(&order.path, dev, &opts, ctl)
        .map_err(|e| WipeFailed::Error(crate::host::error_chain(&e)))?;
    Ok(Done {
        method: report.method.as_str(),
        bytes: report.bytes,
        entries: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::FsProbe;
    use crate::host::fake::FakeHost;

    fn ext4() -> FsProbe {
        FsProbe {
            fs_type: Some("ext4".into()),
            uuid: Some("5a1e".into()),
            label: None,
        }
    }

    #[test]
    fn a_device_without_signature_after_the_wipe_passes() {
        let host = FakeHost::default().with_probe("/dev/loop7", FsProbe::default());
        assert!(no_signature_left(&host, Path::new("/dev/loop7")).is_ok());
    }

    #[test]
    fn a_filesystem_surviving_a_block_wipe_leaves_it_incomplete() {
        let host = FakeHost::default().with_probe("/dev/loop7", ext4());
        match no_signature_left(&host, Path::new("/dev/loop7")) {
            Err(WipeFailed::Incomplete(why)) => {
                assert!(why.contains("ext4 signature survived"), "{why}")
            }
            other => panic!("want Incomplete, got {other:?}"),
        }
    }

    #[test]
    fn a_device_that_cannot_be_probed_after_the_wipe_is_not_taken_as_clean() {
        // Nothing canned: the probe fails (ENOENT), as an ambiguous or unreadable device does.
        let host = FakeHost::default();
        assert!(matches!(
            no_signature_left(&host, Path::new("/dev/loop7")),
            Err(WipeFailed::Incomplete(_))
        ));
    }
}
