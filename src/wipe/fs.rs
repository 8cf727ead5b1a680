//! In-process filesystem wipe: removes everything beneath a volume root and nothing else.
//!
//! The root is opened once (`O_DIRECTORY|O_NOFOLLOW`) and checked against what the caller expects (device number,
//! optional closure). Then a walk by file descriptor: every directory is opened relative to its parent's fd with
//! `openat2(RESOLVE_BENEATH|RESOLVE_NO_XDEV|RESOLVE_NO_SYMLINKS)`, every other entry is `unlinkat`-ed (symlinks,
//! fifos, sockets and device nodes lose their name, nothing behind them is touched; a hard link to a file elsewhere
//! only loses this name), and a directory is removed with `unlinkat(AT_REMOVEDIR)` once emptied. `EXDEV` from
//! `openat2` means a mount point inside the volume: it is left in place and reported. The root itself stays.
//!
//! The walk keeps an explicit stack, so depth is bounded by memory, not by the thread stack; only the deepest
//! [`MAX_OPEN_PER_WORKER`] levels keep an fd open and shallower ones are re-opened by name (same `openat2` rules)
//! when the walk climbs back. The root's subdirectories are shared by `concurrency` worker threads.
//!
//! NB: why a tenant racing renames cannot make us delete outside the root. We never resolve a path with more than one
//! component and never follow a symlink: every `unlinkat`/`openat2` names one entry of a directory we hold open, and
//! that directory was itself reached from the root by real directory entries on the same mount (`RESOLVE_NO_XDEV`,
//! `RESOLVE_NO_SYMLINKS`). A tenant inside the volume can rename a directory we hold only to another place inside the
//! volume (a rename cannot leave its mount), so whatever directory our fd names, it is still beneath the root. Swapping
//! a directory for a symlink makes `openat2` fail with `ELOOP`, and we then unlink the symlink itself.

use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::thread;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, open, openat2};
use nix::sys::stat::{Mode, SFlag, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use serde::{Deserialize, Serialize};

use super::command::{self, CommandError, CommandOutput};
use super::{Control, DevId};

/// Environment variable naming the volume root for an operator's filesystem wipe command.
pub const FSPATH_ENV: &str = "LOCAL_PV_FSPATH";
/// Directory levels per worker that keep an fd open (the process default limit is 1024 fds).
pub const MAX_OPEN_PER_WORKER: usize = 48;
/// Entries listed in [`WipeReport::skipped`]; the rest are only counted.
const MAX_SKIPPED: usize = 1000;
/// Passes over the tree when a tenant keeps changing it under us.
const MAX_PASSES: u32 = 3;
/// Progress counters are published every this many entries.
const FLUSH_EVERY: u64 = 256;

/// A closure that inspects the opened root (e.g. compares the filesystem UUID) before anything is removed.
pub type RootCheck = dyn Fn(BorrowedFd<'_>) -> Result<(), String> + Sync;

/// What the root must still be before the wipe starts.
#[derive(Clone, Copy, Default)]
pub struct Expected<'a> {
    /// Device number of the filesystem (`st_dev` of the root): the mount the PV was created for.
    pub dev: Option<DevId>,
    pub check: Option<&'a RootCheck>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FsOptions {
    /// Worker threads sharing the root's subdirectories.
    pub concurrency: usize,
    /// Put the worker threads in the idle I/O class.
    pub idle_io_priority: bool,
    /// Stat each file before unlinking it to count freed bytes (one extra syscall per file).
    pub count_bytes: bool,
    /// Operator argv run after the in-process wipe, with `LOCAL_PV_FSPATH` set to the root.
    pub command: Option<Vec<String>>,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            concurrency: 2,
            idle_io_priority: true,
            count_bytes: true,
            command: None,
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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WipeReport {
    pub removed_entries: u64,
    /// Sizes of removed regular files that had no other hard link (0 unless `count_bytes`).
    pub removed_bytes: u64,
    /// What is still there, sorted by path (at most [`MAX_SKIPPED`] items).
    pub skipped: Vec<Skipped>,
    /// Skipped entries beyond those listed.
    pub skipped_more: u64,
    /// Mount points found inside the volume, left in place with their contents, sorted.
    pub nested_mounts: Vec<PathBuf>,
    /// Walks over the tree; more than one when entries appeared or moved during the wipe.
    pub passes: u32,
    pub command: Option<CommandOutput>,
}

impl WipeReport {
    /// True when the volume is empty: nothing skipped and no mount left inside.
    pub fn is_complete(&self) -> bool {
        self.skipped.is_empty() && self.skipped_more == 0 && self.nested_mounts.is_empty()
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

/// Remove everything beneath `root` (never `root` itself), after checking it is still what `expect` says.
pub fn wipe_filesystem(
    root: &Path,
    expect: &Expected<'_>,
    opts: &FsOptions,
    ctl: &Control,
) -> Result<WipeReport, FsWipeError> {
    let root_fd = open_root(root, expect)?;
    let mut report = WipeReport::default();
    for pass in 1..=MAX_PASSES {
        let tally = run_pass(root, root_fd.as_fd(), opts, ctl)?;
        report.removed_entries += tally.entries;
        report.removed_bytes += tally.bytes;
        report.skipped = tally.skipped;
        report.skipped.sort_by(|a, b| a.path.cmp(&b.path));
        report.skipped_more = tally.skipped_more;
        report.nested_mounts = tally.nested;
        report.nested_mounts.sort();
        report.passes = pass;
        if !tally.raced {
            break;
        }
    }
    if let Some(argv) = &opts.command {
        report.command = Some(command::run(argv, FSPATH_ENV, root.as_os_str(), ctl)?);
    }
    Ok(report)
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
fn run_pass(
    root: &Path,
    root_fd: BorrowedFd<'_>,
    opts: &FsOptions,
    ctl: &Control,
) -> Result<Tally, FsWipeError> {
    thread::scope(|s| {
        let lead = thread::Builder::new()
            .name("wipe-0".into())
            .spawn_scoped(s, || lead_pass(root, root_fd, opts, ctl))
            .map_err(FsWipeError::SpawnWorker)?;
        join(lead)
    })
}

fn lead_pass(
    root: &Path,
    root_fd: BorrowedFd<'_>,
    opts: &FsOptions,
    ctl: &Control,
) -> Result<Tally, FsWipeError> {
    let mut walk = Walk::new(root, opts, ctl);
    walk.cancelled()?;
    let mut subdirs = Vec::new();
    let kept = walk.scan(root_fd, &mut subdirs)?;
    walk.keep_all(&[], kept);
    let helpers = opts.concurrency.clamp(1, subdirs.len().max(1)) - 1;
    let queue = Mutex::new(subdirs);
    thread::scope(|s| {
        let handles = (0..helpers)
            .map(|i| {
                thread::Builder::new()
                    .name(format!("wipe-{}", i + 1))
                    .spawn_scoped(s, || {
                        let mut walk = Walk::new(root, opts, ctl);
                        walk.drain(&queue, root_fd).map(|()| walk.finish())
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(FsWipeError::SpawnWorker)?;
        let mine = walk.drain(&queue, root_fd);
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

fn open_dir(parent: BorrowedFd<'_>, name: &CStr) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_XDEV
                | ResolveFlag::RESOLVE_NO_SYMLINKS,
        );
    // NB: openat2 may answer EAGAIN when a concurrent rename races its resolution; retry a few times.
    let mut tries = 0;
    loop {
        match openat2(parent, name, how) {
            Err(Errno::EAGAIN) if tries < 8 => tries += 1,
            other => return other,
        }
    }
}

/// A file that cannot be unlinked with EBUSY may be a bind-mount target: `openat2` refuses to cross onto it.
fn is_mount_point(parent: BorrowedFd<'_>, name: &CStr) -> bool {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_XDEV
                | ResolveFlag::RESOLVE_NO_SYMLINKS,
        );
    matches!(openat2(parent, name, how), Err(Errno::EXDEV))
}

/// Why an entry stays.
#[derive(Clone, Copy, Debug)]
enum Keep {
    Mount,
    Skip(SkipOp, Errno),
}

/// What happened to one non-directory entry.
enum Fate {
    Gone,
    /// It turned out to be a directory: walk into it.
    Descend,
    Kept(Keep),
}

/// What the walk does next, decided while the top frame is borrowed and applied after.
enum Step {
    Next,
    /// Entries of the top directory that stay.
    Keep(Vec<(CString, Keep)>),
    Push(Frame),
    Pop,
}

/// One directory on the walk's stack.
struct Frame {
    name: CString,
    fd: Option<OwnedFd>,
    /// Subdirectories still to visit.
    pending: Vec<CString>,
    scanned: bool,
    /// Something beneath stays, so this directory cannot be removed.
    kept: bool,
    /// A finished child directory to remove once this frame's fd is open again.
    remove_child: Option<CString>,
}

impl Frame {
    fn new(name: CString, fd: OwnedFd) -> Self {
        Frame {
            name,
            fd: Some(fd),
            pending: Vec::new(),
            scanned: false,
            kept: false,
            remove_child: None,
        }
    }
}

/// What one worker did during one pass.
#[derive(Debug, Default)]
struct Tally {
    entries: u64,
    bytes: u64,
    unflushed: (u64, u64),
    skipped: Vec<Skipped>,
    skipped_more: u64,
    nested: Vec<PathBuf>,
    /// The tree changed under us (a directory vanished, or gained entries after we emptied it).
    raced: bool,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.entries += other.entries;
        self.bytes += other.bytes;
        for s in other.skipped {
            self.push_skipped(s);
        }
        self.skipped_more += other.skipped_more;
        self.nested.extend(other.nested);
        self.raced |= other.raced;
    }

    fn push_skipped(&mut self, s: Skipped) {
        if self.skipped.len() < MAX_SKIPPED {
            self.skipped.push(s);
        } else {
            self.skipped_more += 1;
        }
    }
}

struct Walk<'a> {
    root: &'a Path,
    opts: &'a FsOptions,
    ctl: &'a Control,
    tally: Tally,
}

impl<'a> Walk<'a> {
    fn new(root: &'a Path, opts: &'a FsOptions, ctl: &'a Control) -> Self {
        if opts.idle_io_priority {
            // Best effort: schedulers without I/O priorities ignore it, and the wipe is correct either way.
            let _ = crate::sys::set_idle_io_priority();
        }
        Walk {
            root,
            opts,
            ctl,
            tally: Tally::default(),
        }
    }

    fn finish(mut self) -> Tally {
        self.flush();
        self.tally
    }

    fn cancelled(&self) -> Result<(), FsWipeError> {
        match self.ctl.is_cancelled() {
            true => Err(FsWipeError::Cancelled {
                path: self.root.to_path_buf(),
            }),
            false => Ok(()),
        }
    }

    fn removed(&mut self, bytes: u64) {
        self.tally.entries += 1;
        self.tally.bytes += bytes;
        self.tally.unflushed.0 += 1;
        self.tally.unflushed.1 += bytes;
        if self.tally.unflushed.0 >= FLUSH_EVERY {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let (entries, bytes) = std::mem::take(&mut self.tally.unflushed);
        self.ctl.progress.add(entries, bytes);
    }

    fn path_of(&self, stack: &[Frame], name: &CStr) -> PathBuf {
        let mut path = self.root.to_path_buf();
        path.extend(stack.iter().map(|f| OsStr::from_bytes(f.name.to_bytes())));
        path.push(OsStr::from_bytes(name.to_bytes()));
        path
    }

    fn keep(&mut self, stack: &[Frame], name: &CStr, keep: Keep) {
        let path = self.path_of(stack, name);
        match keep {
            Keep::Mount => self.tally.nested.push(path),
            Keep::Skip(op, errno) => self.tally.push_skipped(Skipped { path, op, errno }),
        }
    }

    fn keep_all(&mut self, stack: &[Frame], kept: Vec<(CString, Keep)>) {
        for (name, keep) in kept {
            self.keep(stack, &name, keep);
        }
    }

    /// Take root subdirectories from the shared queue until it is empty.
    fn drain(
        &mut self,
        queue: &Mutex<Vec<CString>>,
        root: BorrowedFd<'_>,
    ) -> Result<(), FsWipeError> {
        loop {
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let Some(name) = next else { return Ok(()) };
            self.remove_tree(root, name)?;
        }
    }

    /// Unlink every non-directory in `dir` and collect its subdirectories into `subdirs`; returns what stays.
    fn scan(
        &mut self,
        dir: BorrowedFd<'_>,
        subdirs: &mut Vec<CString>,
    ) -> Result<Vec<(CString, Keep)>, FsWipeError> {
        let mut kept = Vec::new();
        // NB: the stream reads through a duplicate so `dir` stays free for unlinkat while it is iterated.
        let mut stream = match dir
            .try_clone_to_owned()
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))
            .and_then(Dir::from_fd)
        {
            Ok(stream) => stream,
            Err(e) => return Ok(vec![(c".".to_owned(), Keep::Skip(SkipOp::ReadDir, e))]),
        };
        for (i, entry) in stream.iter().enumerate() {
            if i % 1024 == 1023 {
                self.cancelled()?;
            }
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    kept.push((c".".to_owned(), Keep::Skip(SkipOp::ReadDir, e)));
                    break;
                }
            };
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                Some(kind) => kind == Type::Directory,
                None => fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
                    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
                }),
            };
            if is_dir {
                subdirs.push(name.to_owned());
                continue;
            }
            match self.unlink(dir, name) {
                Fate::Gone => {}
                Fate::Descend => subdirs.push(name.to_owned()),
                Fate::Kept(keep) => kept.push((name.to_owned(), keep)),
            }
        }
        Ok(kept)
    }

    fn unlink(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Fate {
        let bytes = match self.opts.count_bytes {
            true => fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .ok()
                .filter(|st| {
                    st.st_nlink == 1
                        && SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
                })
                .map_or(0, |st| st.st_size.max(0) as u64),
            false => 0,
        };
        match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => {
                self.removed(bytes);
                Fate::Gone
            }
            Err(Errno::ENOENT) => Fate::Gone,
            Err(Errno::EISDIR) => Fate::Descend,
            Err(Errno::EBUSY) if is_mount_point(dir, name) => Fate::Kept(Keep::Mount),
            Err(e) => Fate::Kept(Keep::Skip(SkipOp::Unlink, e)),
        }
    }

    /// Open subdirectory `name` of `dir`, or deal with whatever it turned out to be.
    fn open_child(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Fate> {
        match open_dir(dir, name) {
            Ok(fd) => Ok(fd),
            Err(Errno::EXDEV) => Err(Fate::Kept(Keep::Mount)),
            Err(Errno::ENOENT) => Err(Fate::Gone),
            // Swapped for a symlink or a file since the scan: unlink that instead, never follow it.
            Err(Errno::ELOOP | Errno::ENOTDIR) => match self.unlink(dir, name) {
                Fate::Descend => {
                    self.tally.raced = true;
                    Err(Fate::Kept(Keep::Skip(SkipOp::OpenDir, Errno::EAGAIN)))
                }
                fate => Err(fate),
            },
            Err(e) => Err(Fate::Kept(Keep::Skip(SkipOp::OpenDir, e))),
        }
    }

    fn remove_dir(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Option<Keep> {
        match unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
            Ok(()) => {
                self.removed(0);
                None
            }
            Err(Errno::ENOENT) => None,
            Err(e) => {
                if matches!(e, Errno::ENOTEMPTY | Errno::EEXIST) {
                    self.tally.raced = true;
                }
                Some(Keep::Skip(SkipOp::RemoveDir, e))
            }
        }
    }

    /// Remove directory `name` of `base` and everything beneath it.
    fn remove_tree(&mut self, base: BorrowedFd<'_>, name: CString) -> Result<(), FsWipeError> {
        let fd = match self.open_child(base, &name) {
            Ok(fd) => fd,
            Err(Fate::Kept(keep)) => {
                self.keep(&[], &name, keep);
                return Ok(());
            }
            Err(_) => return Ok(()),
        };
        let mut stack = vec![Frame::new(name, fd)];
        loop {
            self.cancelled()?;
            if !self.reopen_top(base, &mut stack) {
                if stack.is_empty() {
                    return Ok(());
                }
                continue;
            }
            match self.step(&mut stack)? {
                Step::Next => {}
                Step::Keep(kept) => {
                    if let Some(top) = stack.last_mut() {
                        top.kept |= !kept.is_empty();
                    }
                    self.keep_all(&stack, kept);
                }
                Step::Push(frame) => {
                    stack.push(frame);
                    let len = stack.len();
                    if len > MAX_OPEN_PER_WORKER {
                        stack[len - MAX_OPEN_PER_WORKER - 1].fd = None;
                    }
                }
                // The top directory is empty (or keeps something): hand it to its parent for removal.
                Step::Pop => {
                    let Some(done) = stack.pop() else {
                        return Ok(());
                    };
                    match stack.last_mut() {
                        Some(parent) if done.kept => parent.kept = true,
                        Some(parent) => parent.remove_child = Some(done.name),
                        None if done.kept => return Ok(()),
                        None => {
                            if let Some(keep) = self.remove_dir(base, &done.name) {
                                self.keep(&[], &done.name, keep);
                            }
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// One unit of work on the top frame, whose fd is open.
    fn step(&mut self, stack: &mut [Frame]) -> Result<Step, FsWipeError> {
        let Some(top) = stack.last_mut() else {
            return Ok(Step::Next);
        };
        let Some(fd) = top.fd.as_ref() else {
            return Ok(Step::Pop);
        };
        let dir = fd.as_fd();
        if let Some(child) = top.remove_child.take() {
            return Ok(match self.remove_dir(dir, &child) {
                Some(keep) => Step::Keep(vec![(child, keep)]),
                None => Step::Next,
            });
        }
        if !top.scanned {
            top.scanned = true;
            return self.scan(dir, &mut top.pending).map(Step::Keep);
        }
        let Some(child) = top.pending.pop() else {
            return Ok(Step::Pop);
        };
        Ok(match self.open_child(dir, &child) {
            Ok(fd) => Step::Push(Frame::new(child, fd)),
            Err(Fate::Kept(keep)) => Step::Keep(vec![(child, keep)]),
            Err(_) => Step::Next,
        })
    }

    /// Make sure the top frame has an fd, re-opening it by name from the nearest open ancestor (or `base`).
    /// Returns false when a directory on the way vanished or changed kind: the stack is cut there and the pass
    /// is marked raced so another pass picks up whatever moved.
    fn reopen_top(&mut self, base: BorrowedFd<'_>, stack: &mut Vec<Frame>) -> bool {
        let Some(top) = stack.len().checked_sub(1) else {
            return false;
        };
        if stack[top].fd.is_some() {
            return true;
        }
        let from = stack[..top]
            .iter()
            .rposition(|f| f.fd.is_some())
            .map_or(0, |i| i + 1);
        let keep_from = (top + 1).saturating_sub(MAX_OPEN_PER_WORKER);
        let mut carried: Option<OwnedFd> = None;
        for k in from..=top {
            let opened = {
                let parent = match k {
                    0 => Some(base),
                    _ => stack[k - 1]
                        .fd
                        .as_ref()
                        .or(carried.as_ref())
                        .map(|fd| fd.as_fd()),
                };
                parent.map_or(Err(Errno::EBADF), |parent| open_dir(parent, &stack[k].name))
            };
            match opened {
                Ok(fd) if k >= keep_from => {
                    stack[k].fd = Some(fd);
                    carried = None;
                }
                Ok(fd) => carried = Some(fd),
                Err(_) => {
                    self.tally.raced = true;
                    stack.truncate(k);
                    if let Some(parent) = stack.last_mut() {
                        parent.kept = true;
                    }
                    return false;
                }
            }
        }
        true
    }
}
