//! The directory walk behind [`wipe_filesystem`](super::fs::wipe_filesystem): one worker empties and removes the
//! subtrees it is handed, by file descriptor, with an explicit stack so depth is bounded by memory, not by the thread
//! stack. Only the deepest [`MAX_OPEN_PER_WORKER`] levels keep an fd open; shallower ones are re-opened by name
//! (same `openat2` rules) when the walk climbs back.
//!
//! NB: why a tenant racing renames cannot make us delete outside the root. We never resolve a path with more than one
//! component and never follow a symlink: every `unlinkat`/`openat2` names one entry of a directory we hold open, and
//! that directory was itself reached from the root by real directory entries on the same mount (`RESOLVE_NO_XDEV`,
//! `RESOLVE_NO_SYMLINKS`). A tenant inside the volume can rename a directory we hold only to another place inside the
//! volume (a rename cannot leave its mount), so whatever directory our fd names, it is still beneath the root. Swapping
//! a directory for a symlink makes `openat2` fail with `ELOOP`, and we then unlink the symlink itself.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{SFlag, fstatat};
use nix::sys::statvfs::fstatvfs;
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::Control;
use super::fs_types::{FsOptions, FsWipeError, SkipOp, Skipped};

/// Directory levels per worker that keep an fd open (the process default limit is 1024 fds).
pub const MAX_OPEN_PER_WORKER: usize = 48;
/// Entries listed in a report; the rest are only counted.
const MAX_SKIPPED: usize = 1000;
/// Progress counters are published every this many entries.
const FLUSH_EVERY: u64 = 256;

/// Bytes in use on the filesystem holding `fd` (best effort: `None` when fstatvfs fails).
pub(super) fn used_bytes(fd: BorrowedFd<'_>) -> Option<u64> {
    let st = fstatvfs(fd).ok()?;
    let used = st.blocks().saturating_sub(st.blocks_free());
    Some(used.saturating_mul(st.fragment_size()))
}

pub(super) fn open_dir(parent: BorrowedFd<'_>, name: &CStr) -> nix::Result<OwnedFd> {
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
enum WalkStep {
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
pub(super) struct WorkerTally {
    pub(super) entries: u64,
    unflushed: u64,
    pub(super) skipped: Vec<Skipped>,
    pub(super) skipped_more: u64,
    pub(super) nested: Vec<PathBuf>,
    /// The tree changed under us (a directory vanished, or gained entries after we emptied it).
    pub(super) raced: bool,
}

impl WorkerTally {
    pub(super) fn merge(&mut self, other: WorkerTally) {
        self.entries += other.entries;
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

pub(super) struct Walk<'a> {
    ctx: Ctx<'a>,
    tally: WorkerTally,
}

/// What every worker of a wipe shares.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub(super) root: &'a Path,
    pub(super) root_fd: BorrowedFd<'a>,
    /// Used bytes of the filesystem when the wipe started; progress reports how far usage fell since.
    pub(super) used_at_start: Option<u64>,
    pub(super) opts: &'a FsOptions,
    pub(super) ctl: &'a Control,
}

impl<'a> Walk<'a> {
    pub(super) fn new(ctx: Ctx<'a>) -> Self {
        if ctx.opts.idle_io_priority {
            // Best effort: schedulers without I/O priorities ignore it, and the wipe is correct either way.
            let _ = crate::sys::set_idle_io_priority();
        }
        Walk {
            ctx,
            tally: WorkerTally::default(),
        }
    }

    pub(super) fn finish(mut self) -> WorkerTally {
        self.flush();
        self.tally
    }

    fn cancelled(&self) -> Result<(), FsWipeError> {
        match self.ctx.ctl.is_cancelled() {
            true => Err(FsWipeError::Cancelled {
                path: self.ctx.root.to_path_buf(),
            }),
            false => Ok(()),
        }
    }

    fn removed(&mut self) {
        self.tally.entries += 1;
        self.tally.unflushed += 1;
        if self.tally.unflushed >= FLUSH_EVERY {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let entries = std::mem::take(&mut self.tally.unflushed);
        self.ctx.ctl.progress.add(entries, 0);
        // NB: freed bytes come from the filesystem's usage, not from a stat per file: one fstatvfs per
        // FLUSH_EVERY entries instead of one fstatat per entry (which cost a quarter of the wipe on tmpfs).
        if let (Some(start), Some(now)) = (self.ctx.used_at_start, used_bytes(self.ctx.root_fd)) {
            self.ctx.ctl.progress.raise_bytes(start.saturating_sub(now));
        }
    }

    fn path_of(&self, stack: &[Frame], name: &CStr) -> PathBuf {
        let mut path = self.ctx.root.to_path_buf();
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

    /// Unlink the root's non-directories and collect its subdirectories for [`Walk::drain`].
    pub(super) fn scan_root(&mut self, subdirs: &mut Vec<CString>) -> Result<(), FsWipeError> {
        self.cancelled()?;
        let kept = self.scan(self.ctx.root_fd, subdirs)?;
        self.keep_all(&[], kept);
        Ok(())
    }

    /// Take root subdirectories from the shared queue until it is empty.
    pub(super) fn drain(&mut self, queue: &Mutex<Vec<CString>>) -> Result<(), FsWipeError> {
        loop {
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let Some(name) = next else { return Ok(()) };
            self.remove_tree(self.ctx.root_fd, name)?;
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
        match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => {
                self.removed();
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
                self.removed();
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
                WalkStep::Next => {}
                WalkStep::Keep(kept) => {
                    if let Some(top) = stack.last_mut() {
                        top.kept |= !kept.is_empty();
                    }
                    self.keep_all(&stack, kept);
                }
                WalkStep::Push(frame) => {
                    stack.push(frame);
                    let len = stack.len();
                    if len > MAX_OPEN_PER_WORKER {
                        stack[len - MAX_OPEN_PER_WORKER - 1].fd = None;
                    }
                }
                // The top directory is empty (or keeps something): hand it to its parent for removal.
                WalkStep::Pop => {
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
    fn step(&mut self, stack: &mut [Frame]) -> Result<WalkStep, FsWipeError> {
        let Some(top) = stack.last_mut() else {
            return Ok(WalkStep::Next);
        };
        let Some(fd) = top.fd.as_ref() else {
            return Ok(WalkStep::Pop);
        };
        let dir = fd.as_fd();
        if let Some(child) = top.remove_child.take() {
            return Ok(match self.remove_dir(dir, &child) {
                Some(keep) => WalkStep::Keep(vec![(child, keep)]),
                None => WalkStep::Next,
            });
        }
        if !top.scanned {
            top.scanned = true;
            return self.scan(dir, &mut top.pending).map(WalkStep::Keep);
        }
        let Some(child) = top.pending.pop() else {
            return Ok(WalkStep::Pop);
        };
        Ok(match self.open_child(dir, &child) {
            Ok(fd) => WalkStep::Push(Frame::new(child, fd)),
            Err(Fate::Kept(keep)) => WalkStep::Keep(vec![(child, keep)]),
            Err(_) => WalkStep::Next,
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
