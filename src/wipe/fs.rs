//! In-process filesystem wipe: removes everything beneath a volume root and nothing else.
//!
//! The root is opened once (`O_DIRECTORY|O_NOFOLLOW`) and checked against what the caller expects (device number,
//! optional closure). Then a walk by file descriptor: every directory is opened relative to its parent's fd with
//! `openat2(RESOLVE_BENEATH|RESOLVE_NO_XDEV|RESOLVE_NO_SYMLINKS)`, every other entry is `unlinkat`-ed (symlinks,
//! fifos, sockets and device nodes lose their name, nothing behind them is touched; a hard link to a file elsewhere
//! only loses this name), and a directory is removed with `unlinkat(AT_REMOVEDIR)` once emptied. `EXDEV` from
//! `openat2` means a mount point inside the volume: it is left in place and reported. The root itself stays.
//! Once a pass finds nothing changed, the root must stay empty for [`FsOptions::settle_ms`]; whatever appeared
//! meanwhile is reported in [`WipeReport::left`] (another pass runs first while passes remain), so a writer that
//! outlives its claim makes the wipe incomplete instead of reaching the next tenant.
//!
//! The walk itself (explicit stack, bounded open fds, why renames cannot lead it outside) is in `walk.rs`; here is
//! the API, the root check, and the passes: the root's subdirectories are shared by `concurrency` worker threads,
//! and the walk repeats (at most [`MAX_PASSES`] times) when the tree changed under it.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, fstat};

use super::Control;
use super::command::{self, CommandOutput};
pub use super::fs_types::{FsOptions, FsWipeError, SkipOp, Skipped};
use super::walk::{Ctx, Walk, WorkerTally, open_dir, used_bytes};
use crate::contract::DevId;

/// Environment variable naming the volume root for an operator's filesystem wipe command.
pub const FSPATH_ENV: &str = "LOCAL_PV_FSPATH";
/// Passes over the tree when a tenant keeps changing it under us.
pub const MAX_PASSES: u32 = 3;

/// A closure that inspects the opened root (e.g. compares the filesystem UUID) before anything is removed.
pub type RootCheck = dyn Fn(BorrowedFd<'_>) -> Result<(), String> + Sync;

/// What the root must still be before the wipe starts.
#[derive(Clone, Copy, Default)]
pub struct Expected<'a> {
    /// Device number of the filesystem (`st_dev` of the root): the mount the PV was created for.
    /// NB: bind mounts of one filesystem share it; pass a `check` (mount id, UUID) to tell them apart.
    pub dev: Option<DevId>,
    pub check: Option<&'a RootCheck>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WipeReport {
    pub removed_entries: u64,
    /// How far the filesystem's used bytes fell during the wipe (best effort: includes freed metadata, and
    /// anything else writing to the same filesystem meanwhile skews it).
    pub removed_bytes: u64,
    /// What is still there, sorted by path (at most [`MAX_SKIPPED`] items).
    pub skipped: Vec<Skipped>,
    /// Skipped entries beyond those listed.
    pub skipped_more: u64,
    /// Mount points found inside the volume, left in place with their contents, sorted.
    pub nested_mounts: Vec<PathBuf>,
    /// Entries of the root still there once the walk ended and the root had [`FsOptions::settle_ms`] to stay
    /// empty (`lost+found` aside), sorted: written while or after the wipe ran.
    pub left: Vec<PathBuf>,
    /// Walks over the tree; more than one when entries appeared or moved during the wipe.
    pub passes: u32,
    pub command: Option<CommandOutput>,
}

impl WipeReport {
    /// True when the volume is empty: nothing skipped, no mount left inside, nothing written meanwhile.
    pub fn is_complete(&self) -> bool {
        self.skipped.is_empty()
            && self.skipped_more == 0
            && self.nested_mounts.is_empty()
            && self.left.is_empty()
    }
}

/// Remove everything beneath `root` (never `root` itself), after checking it is still what `expect` says.
pub fn wipe_filesystem(
    root: &Path,
    expect: &Expected<'_>,
    opts: &FsOptions,
    ctl: &Control,
) -> Result<WipeReport, FsWipeError> {
    let root_fd = open_root(root, expect)?;
    let ctx = Ctx {
        root,
        root_fd: root_fd.as_fd(),
        used_at_start: used_bytes(root_fd.as_fd()),
        opts,
        ctl,
    };
    let mut report = WipeReport::default();
    for pass in 1..=MAX_PASSES {
        let tally = run_pass(ctx)?;
        report.removed_entries += tally.entries;
        report.skipped = tally.skipped;
        report.skipped.sort_by(|a, b| a.path.cmp(&b.path));
        report.skipped_more = tally.skipped_more;
        report.nested_mounts = tally.nested;
        report.nested_mounts.sort();
        report.passes = pass;
        report.left = Vec::new();
        if tally.raced && pass < MAX_PASSES {
            continue;
        }
        report.left = leftovers(ctx, &report);
        if report.left.is_empty() || !report.skipped.is_empty() || !report.nested_mounts.is_empty()
        {
            break;
        }
    }
    if let (Some(start), Some(now)) = (ctx.used_at_start, used_bytes(root_fd.as_fd())) {
        report.removed_bytes = start.saturating_sub(now);
    }
    if let Some(argv) = &opts.command {
        report.command = Some(command::run(argv, FSPATH_ENV, root.as_os_str(), ctl)?);
    }
    Ok(report)
}

/// What the root holds after the passes and a quiet spell, besides `lost+found` and what the report already lists
/// as skipped or mounted. NB: a writer racing the last pass, or one that keeps writing, is caught here.
fn leftovers(ctx: Ctx<'_>, report: &WipeReport) -> Vec<PathBuf> {
    thread::sleep(Duration::from_millis(ctx.opts.settle_ms));
    let known = |path: &Path| {
        report.skipped.iter().any(|s| s.path == path)
            || report.nested_mounts.iter().any(|m| m == path)
    };
    let mut left: Vec<PathBuf> = match root_names(ctx.root_fd) {
        Ok(names) => names
            .into_iter()
            .filter(|name| name != OsStr::new("lost+found"))
            .map(|name| ctx.root.join(name))
            .filter(|path| !known(path))
            .collect(),
        Err(errno) => vec![ctx.root.join(format!("(unreadable: {errno})"))],
    };
    left.sort();
    left
}

fn root_names(root: BorrowedFd<'_>) -> nix::Result<Vec<std::ffi::OsString>> {
    let fd = root
        .try_clone_to_owned()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))?;
    let mut dir = nix::dir::Dir::from_fd(fd)?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(&name).to_os_string());
        }
    }
    Ok(names)
}

/// A [`RootCheck`] that the root carries the agent's volume id `expected` (xattr `trusted.localpv.id`, or
/// `user.localpv.id` for an agent without CAP_SYS_ADMIN): with it, a
/// different filesystem mounted at the path since the caller looked (a tmpfs on a reused device number, another
/// directory of the same filesystem) is refused.
pub fn volume_id_check(expected: String) -> impl Fn(BorrowedFd<'_>) -> Result<(), String> + Sync {
    move |root| match crate::sys::read_volume_id(root) {
        Ok(Some(found)) if found == expected.as_bytes() => Ok(()),
        Ok(Some(found)) => Err(format!(
            "volume id {} found, expected {expected}",
            String::from_utf8_lossy(&found)
        )),
        Ok(None) => Err(format!("volume id {expected} is gone")),
        Err(errno) => Err(format!("failed to read the volume id: {errno}")),
    }
}

fn open_root(root: &Path, expect: &Expected<'_>) -> Result<OwnedFd, FsWipeError> {
    let path = || root.to_path_buf();
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = open(root, flags, Mode::empty()).map_err(|source| FsWipeError::OpenRoot {
        path: path(),
        source,
    })?;
    if let Err(source) = open_dir(fd.as_fd(), c".") {
        return Err(FsWipeError::NoOpenat2 {
            path: path(),
            source,
        });
    }
    if let Some(expected) = expect.dev {
        let st = fstat(&fd).map_err(|source| FsWipeError::StatRoot {
            path: path(),
            source,
        })?;
        let found = DevId::from_dev(st.st_dev);
        if found != expected {
            return Err(FsWipeError::WrongFilesystem {
                path: path(),
                expected,
                found,
            });
        }
    }
    if let Some(check) = expect.check {
        check(fd.as_fd()).map_err(|reason| FsWipeError::RootCheck {
            path: path(),
            reason,
        })?;
    }
    Ok(fd)
}

/// One walk over the whole tree: scan the root, then hand its subdirectories to the workers. Every step runs on
/// threads of our own so the idle I/O priority never sticks to the caller's thread.
fn run_pass(ctx: Ctx<'_>) -> Result<WorkerTally, FsWipeError> {
    thread::scope(|s| {
        let lead = thread::Builder::new()
            .name("wipe-0".into())
            .spawn_scoped(s, || lead_pass(ctx))
            .map_err(FsWipeError::SpawnWorker)?;
        join(lead)
    })
}

fn lead_pass(ctx: Ctx<'_>) -> Result<WorkerTally, FsWipeError> {
    let mut walk = Walk::new(ctx);
    let mut subdirs = Vec::new();
    walk.scan_root(&mut subdirs)?;
    let helpers = ctx.opts.concurrency.clamp(1, subdirs.len().max(1)) - 1;
    let queue = Mutex::new(subdirs);
    thread::scope(|s| {
        let handles = (0..helpers)
            .map(|i| {
                thread::Builder::new()
                    .name(format!("wipe-{}", i + 1))
                    .spawn_scoped(s, || {
                        let mut walk = Walk::new(ctx);
                        walk.drain(&queue).map(|()| walk.finish())
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(FsWipeError::SpawnWorker)?;
        let mine = walk.drain(&queue);
        let mut tally = walk.finish();
        for handle in handles {
            tally.merge(join(handle)?);
        }
        mine.map(|()| tally)
    })
}

fn join<T>(handle: thread::ScopedJoinHandle<'_, T>) -> T {
    match handle.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
