//! The wipe engine: erases a Released volume so the next tenant never sees the previous one's data.
//!
//! ```text
//!  node agent ──> wipe_filesystem(root, Expected, FsOptions, &Control) ──> WipeReport   (fs.rs)
//!            └──> wipe_block(device, expected dev, BlockOptions, &Control) ──> BlockReport (block.rs)
//!                        │                               │
//!                        └── optional operator argv ─────┴──> command.rs (env LOCAL_PV_FSPATH / LOCAL_PV_BLKDEVICE)
//!  Control: progress counters (entries, bytes, total) the agent samples for metrics and status; a cancel flag.
//! ```
//!
//! Filesystem volumes are emptied in-process by a file-descriptor walk that never follows a symlink, never crosses
//! into a mount placed inside the volume and stays beneath the root even while a tenant renames things; what could
//! not be removed (immutable files, nested mounts) is reported, never hidden. Block volumes are erased by one
//! [`BlockMethod`] while the device is held with `O_EXCL`.
//!
//! Operator commands (the reference provisioner's `blockCleanerCommand`) receive the target in the environment:
//! - `LOCAL_PV_BLKDEVICE`: the block device path, for block volumes (same name as the reference provisioner);
//! - `LOCAL_PV_FSPATH`: the volume root directory, for filesystem volumes. The command runs after the in-process
//!   wipe, so a script that only trims or checks cannot weaken the guarantee above.
//!
//! Both entry points block the calling thread for the whole wipe (they spawn their own worker threads); call them
//! from `tokio::task::spawn_blocking`.

pub mod block;
pub mod command;
pub mod fs;
mod fs_types;
mod walk;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use block::{BlockOptions, BlockReport, BlockWipeError, wipe_block};
pub use command::{CommandError, CommandOutput};
pub use fs::{
    Expected, FsOptions, FsWipeError, SkipOp, Skipped, WipeReport, volume_id_check, wipe_filesystem,
};

// NB: the method is plain data the config also parses, so it lives in the contract (built without `node`).
pub use crate::contract::BlockMethod;

/// Progress of one wipe, shared with whoever publishes it. Counters only grow.
#[derive(Debug, Default)]
pub struct Progress {
    entries: AtomicU64,
    bytes: AtomicU64,
    total_bytes: AtomicU64,
}

impl Progress {
    /// Directory entries removed so far (filesystem wipes).
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Bytes erased (block) or freed on the filesystem (best effort: sampled from its usage) so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Bytes a block wipe will cover in total; 0 while unknown and for filesystem wipes.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes.load(Ordering::Relaxed)
    }

    fn add(&self, entries: u64, bytes: u64) {
        if entries > 0 {
            self.entries.fetch_add(entries, Ordering::Relaxed);
        }
        if bytes > 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Raise the byte count to `bytes` if it is higher (for counts sampled from the filesystem's usage).
    fn raise_bytes(&self, bytes: u64) {
        self.bytes.fetch_max(bytes, Ordering::Relaxed);
    }

    fn set_total(&self, total: u64) {
        self.total_bytes.store(total, Ordering::Relaxed);
    }
}

/// What the caller keeps (in an `Arc`) to watch and stop a running wipe.
#[derive(Debug, Default)]
pub struct Control {
    pub progress: Progress,
    cancel: AtomicBool,
}

impl Control {
    /// Ask the wipe to stop at the next entry or chunk; it returns a `Cancelled` error. A cancelled wipe is
    /// incomplete: the volume must be wiped again before reuse.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::contract::DevId;

    #[rstest]
    #[case("\"zeroout\"", BlockMethod::ZeroOut)]
    #[case("\"zero-out\"", BlockMethod::ZeroOut)]
    #[case("\"discard\"", BlockMethod::Discard)]
    #[case("\"secure-discard\"", BlockMethod::SecureDiscard)]
    #[case("\"signatures\"", BlockMethod::Signatures)]
    #[case("\"overwrite\"", BlockMethod::Overwrite)]
    #[case("\"command\"", BlockMethod::Command)]
    fn wipe_methods_are_named_in_kebab_case(#[case] json: &str, #[case] method: BlockMethod) {
        assert_eq!(serde_json::from_str::<BlockMethod>(json).unwrap(), method);
        let back = serde_json::to_string(&method).unwrap();
        assert_eq!(back, format!("\"{}\"", method.as_str()));
    }

    /// `ALL` is the list of Block `wipeMethod` spellings: a new method must be added to it (the match stops
    /// compiling until it is).
    #[test]
    fn all_holds_every_method_once_in_order() {
        let position = |method: BlockMethod| match method {
            BlockMethod::ZeroOut => 0,
            BlockMethod::Discard => 1,
            BlockMethod::SecureDiscard => 2,
            BlockMethod::Signatures => 3,
            BlockMethod::Overwrite => 4,
            BlockMethod::Command => 5,
        };
        let positions: Vec<usize> = BlockMethod::ALL.into_iter().map(position).collect();
        assert_eq!(positions, (0..BlockMethod::ALL.len()).collect::<Vec<_>>());
    }

    #[test]
    fn an_unknown_wipe_method_is_rejected() {
        assert!(serde_json::from_str::<BlockMethod>("\"shred\"").is_err());
    }

    #[test]
    fn device_numbers_round_trip_through_dev_t() {
        let dev = nix::sys::stat::makedev(259, 7);
        assert_eq!(DevId::from_dev(dev).to_string(), "259:7");
        // The contract splits `dev_t` by hand; libc's split is the reference.
        for (major, minor) in [(0, 55), (8, 16), (4096, 256), (0xffff_ffff, 0xffff_ffff)] {
            let dev = nix::sys::stat::makedev(major, minor);
            let split = DevId::from_dev(dev);
            assert_eq!(
                (u64::from(split.major), u64::from(split.minor)),
                (nix::sys::stat::major(dev), nix::sys::stat::minor(dev))
            );
        }
    }
}
