//! Runs one wipe order on a blocking thread: re-verify the disk at the path, then erase it.
//!
//! The planner already compared identities when it ordered the wipe; this second look happens right before the
//! first byte is touched, because minutes may have passed (a disk swapped meanwhile must never be wiped).

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::WipeMethod as ClassWipe;
use crate::discover::discover;
use crate::disk::{DiscoveryClass, VolumeMode};
use crate::host::Host;
use crate::plan::WipeOrder;
use crate::plan::identity::{self, IdentityCheck, Recorded};
use crate::wipe::{self, BlockOptions, Control, DevId, Expected, FsOptions};

/// What a finished wipe did, for logs, events and metrics.
#[derive(Debug)]
pub struct Done {
    pub method: &'static str,
    pub bytes: u64,
    pub entries: u64,
    /// Mount points found inside the volume and left alone.
    pub nested_mounts: Vec<PathBuf>,
}

/// Why a wipe did not happen or did not finish.
#[derive(Debug)]
pub enum Failed {
    /// The disk at the path is not the one expected: nothing was touched. Never retried blindly.
    Refused(String),
    /// The wipe ran and failed, or left data behind; retried with backoff.
    Error(String),
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
) -> Result<Done, Failed> {
    verify(host.as_ref(), class, order)?;
    match order.mode {
        VolumeMode::Filesystem => wipe_filesystem(order, share, ctl),
        VolumeMode::Block => wipe_block(order, share, ctl),
    }
}

fn verify(host: &dyn Host, class: &DiscoveryClass, order: &WipeOrder) -> Result<(), Failed> {
    let found = discover(host, std::slice::from_ref(class));
    let Some(disk) = found.disks.iter().find(|d| d.host_path == order.host_path) else {
        let why = found
            .unusable
            .iter()
            .find(|u| u.host_path == order.host_path)
            .map(|u| u.message.clone())
            .unwrap_or_else(|| "it is not there".to_string());
        return Err(Failed::Refused(format!(
            "{} is no longer a usable disk: {why}",
            order.host_path.display()
        )));
    };
    let recorded = Recorded {
        identity: order.expected.clone(),
        mount_root: order.expected_mount_root.clone(),
    };
    match identity::check(order.mode, Some(&recorded), disk) {
        IdentityCheck::Same => Ok(()),
        IdentityCheck::Changed(what) => Err(Failed::Refused(format!(
            "{} holds a different disk: {what}",
            order.host_path.display()
        ))),
        IdentityCheck::Unverifiable | IdentityCheck::NotRecorded => Err(Failed::Refused(format!(
            "the identity of {} cannot be confirmed, so it is not wiped",
            order.host_path.display()
        ))),
    }
}

fn wipe_filesystem(order: &WipeOrder, share: Share, ctl: &Control) -> Result<Done, Failed> {
    let dev = order.expected.dev_id.as_deref().and_then(DevId::parse);
    let opts = FsOptions {
        command: match &order.method {
            ClassWipe::Command(argv) => Some(argv.clone()),
            _ => None,
        },
        concurrency: share.concurrency,
        idle_io_priority: share.idle_io_priority,
    };
    let report = wipe::wipe_filesystem(&order.path, &Expected { dev, check: None }, &opts, ctl)
        .map_err(|e| Failed::Error(crate::host::error_chain(&e)))?;
    if !report.skipped.is_empty() {
        let first: Vec<String> = report
            .skipped
            .iter()
            .take(3)
            .map(|s| format!("{} ({:?}: {})", s.path.display(), s.op, s.errno))
            .collect();
        return Err(Failed::Error(format!(
            "{} entries could not be removed, e.g. {}",
            report.skipped.len() as u64 + report.skipped_more,
            first.join(", ")
        )));
    }
    Ok(Done {
        method: "remove",
        bytes: report.removed_bytes,
        entries: report.removed_entries,
        nested_mounts: report.nested_mounts,
    })
}

fn wipe_block(order: &WipeOrder, share: Share, ctl: &Control) -> Result<Done, Failed> {
    let (method, command) = match &order.method {
        ClassWipe::ZeroOut | ClassWipe::RemoveContents => (wipe::WipeMethod::ZeroOut, None),
        ClassWipe::Discard => (wipe::WipeMethod::Discard, None),
        ClassWipe::SecureDiscard => (wipe::WipeMethod::SecureDiscard, None),
        ClassWipe::Signatures => (wipe::WipeMethod::Signatures, None),
        ClassWipe::Overwrite => (wipe::WipeMethod::Overwrite, None),
        ClassWipe::Command(argv) => (wipe::WipeMethod::Command, Some(argv.clone())),
    };
    let opts = BlockOptions {
        method,
        command,
        idle_io_priority: share.idle_io_priority,
        ..BlockOptions::default()
    };
    let dev = order.expected.dev_id.as_deref().and_then(DevId::parse);
    let report = wipe::wipe_block(&order.path, dev, &opts, ctl)
        .map_err(|e| Failed::Error(crate::host::error_chain(&e)))?;
    Ok(Done {
        method: report.method.as_str(),
        bytes: report.bytes,
        entries: 0,
        nested_mounts: Vec::new(),
    })
}
