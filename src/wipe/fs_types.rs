//! What a filesystem wipe takes and what its walk reports: the types `fs.rs` (the API and the passes) and
//! `walk.rs` (the descent) share, in a leaf file so that the walk does not import the API it serves.

use std::fmt;
use std::path::PathBuf;

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use super::command::CommandError;
use crate::contract::DevId;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FsOptions {
    /// Worker threads sharing the root's subdirectories.
    pub concurrency: usize,
    /// Put the worker threads in the idle I/O class.
    pub idle_io_priority: bool,
    /// Operator argv run after the in-process wipe, with `LOCAL_PV_FSPATH` set to the root.
    pub command: Option<Vec<String>>,
    /// How long the root must stay empty after the last pass before the wipe counts as complete: a writer still
    /// at work (a tenant's process outliving its claim) shows up as `WipeReport::left` instead of reaching the
    /// next tenant.
    pub settle_ms: u64,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            concurrency: 2,
            idle_io_priority: true,
            command: None,
            settle_ms: 200,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipOp {
    Unlink,
    RemoveDir,
    OpenDir,
    ReadDir,
}

impl SkipOp {
    fn verb(self) -> &'static str {
        match self {
            SkipOp::Unlink => "unlink",
            SkipOp::RemoveDir => "remove directory",
            SkipOp::OpenDir => "open directory",
            SkipOp::ReadDir => "read directory",
        }
    }
}

/// An entry the wipe could not remove, with the kernel's reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub op: SkipOp,
    pub errno: Errno,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: failed to {}: {}",
            self.path.display(),
            self.op.verb(),
            self.errno
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FsWipeError {
    #[error("failed to open volume root {path}")]
    OpenRoot {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("failed to stat volume root {path}")]
    StatRoot {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("failed to verify volume root {path}: on device {found}, expected {expected}")]
    WrongFilesystem {
        path: PathBuf,
        expected: DevId,
        found: DevId,
    },
    #[error("failed to verify volume root {path}: {reason}")]
    RootCheck { path: PathBuf, reason: String },
    #[error("failed to use openat2 under {path} (kernel 5.6 or later is required)")]
    NoOpenat2 {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("failed to start a wipe worker thread")]
    SpawnWorker(#[source] std::io::Error),
    #[error("failed to finish wiping {path}: cancelled")]
    Cancelled { path: PathBuf },
    #[error(transparent)]
    Command(#[from] CommandError),
}
