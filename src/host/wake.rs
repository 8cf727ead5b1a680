//! Wake the agent when what discovery would find may have changed.
//!
//! ```text
//!  /proc/self/mountinfo ── POLLPRI|POLLERR on any mount/unmount in our namespace ──┐  HostChanges {
//!  inotify(discovery dirs) ── create/delete/move/attrib of a first-level entry ────┴─> mounts, entries (dir, name),
//!                                                                                        list_all } = changed().await
//! ```
//!
//! No debounce: the agent's pass only re-probes entries whose mount or kind changed, so a burst costs a few cheap
//! passes, while a quiet time before each wake-up would be paid by every single mount. Events that arrive while
//! a pass runs collapse into one permit (see [`MountWatcher`]), which is all the coalescing a burst needs.
//!
//! NB: inotify does not fire when something is mounted on a directory, which is why mountinfo is watched too; and
//! both sources can drop events (inotify queue overflow, a directory created after the watch), so the agent must
//! also resync periodically. A wake-up says what to look at again: the mount table, the entries inotify named, or
//! (queue overflow, a watched directory itself moved or deleted, more than [`MAX_NAMED`] entries) every directory.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::sync::Notify;
use tracing::warn;

use super::HostChanges;

/// Named entries kept between two passes; past this, a pass lists every directory instead (a flood costs one
/// listing, not unbounded memory).
pub const MAX_NAMED: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("failed to open {path} for mount events")]
    OpenMountinfo {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to create an inotify instance")]
    Inotify(#[source] io::Error),
    #[error("failed to create the watcher's stop pipe")]
    Pipe(#[source] io::Error),
    #[error("failed to start the watcher thread")]
    Spawn(#[source] io::Error),
}

/// Wakes [`MountWatcher::changed`]. A blocking thread polls the mount table and inotify (plain `poll(2)`: no
/// unsafe fd registration with the async reactor) and turns each event into a [`Notify`] permit; permits do not
/// accumulate, which already coalesces events that arrive while nobody waits.
pub struct MountWatcher {
    events: Arc<Notify>,
    /// What changed since the last [`MountWatcher::changed`] took it.
    changes: Arc<Mutex<HostChanges>>,
    /// Every discovery directory is watched: no change to one goes unseen (short of a dropped event).
    every_dir: bool,
    /// Dropping this closes the pipe, which the thread sees as POLLHUP and exits on.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl MountWatcher {
    /// Watch the mount table and each of `dirs`. A directory that cannot be watched (missing, not a directory) is
    /// logged and left to the periodic resync; the mount table is required.
    pub fn new(dirs: &[PathBuf]) -> Result<Self, WatchError> {
        Self::with_mountinfo(Path::new("/proc/self/mountinfo"), dirs)
    }

    pub fn with_mountinfo(mountinfo: &Path, dirs: &[PathBuf]) -> Result<Self, WatchError> {
        let mountinfo = File::open(mountinfo).map_err(|source| WatchError::OpenMountinfo {
            path: mountinfo.into(),
            source,
        })?;
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|errno| WatchError::Inotify(errno.into()))?;
        let mask = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR;
        let mut every_dir = true;
        let mut watched = Vec::new();
        for dir in dirs {
            match inotify.add_watch(dir.as_path(), mask) {
                Ok(wd) => watched.push((wd, dir.clone())),
                Err(errno) => {
                    warn!(dir = %dir.display(), error = %errno, "cannot watch discovery directory; relying on resync");
                    every_dir = false;
                }
            }
        }
        let (stopped, stop) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|errno| WatchError::Pipe(errno.into()))?;
        let events = Arc::new(Notify::new());
        let changes = Arc::new(Mutex::new(HostChanges::default()));
        let sink = Sink {
            notify: Arc::clone(&events),
            changes: Arc::clone(&changes),
            watched,
        };
        let thread = std::thread::Builder::new()
            .name("mount-watch".into())
            .spawn(move || watch_loop(&mountinfo, &inotify, &stopped, &sink))
            .map_err(WatchError::Spawn)?;
        Ok(MountWatcher {
            events,
            changes,
            every_dir,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Whether every discovery directory given is watched.
    pub fn watches_every_dir(&self) -> bool {
        self.every_dir
    }

    /// Wait until the mount table or a watched directory changed, and say what. Cancel-safe: [`Notify::notified`]
    /// takes the permit only when it completes, and the changes are taken after that, so a cancelled call loses
    /// nothing. (A permit left over from changes an earlier call already took answers with no change.)
    pub async fn changed(&mut self) -> HostChanges {
        self.events.notified().await;
        std::mem::take(&mut *self.changes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for MountWatcher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            warn!("mount watcher thread panicked");
        }
    }
}

/// Where the watcher thread reports: what changed, then a wake-up.
struct Sink {
    notify: Arc<Notify>,
    changes: Arc<Mutex<HostChanges>>,
    /// Each inotify watch and the directory it is on, as configured.
    watched: Vec<(WatchDescriptor, PathBuf)>,
}

impl Sink {
    fn report(&self, update: impl FnOnce(&mut HostChanges)) {
        {
            let mut changes = self.changes.lock().unwrap_or_else(|e| e.into_inner());
            update(&mut changes);
            changes.list_all |= changes.entries.len() > MAX_NAMED;
            if changes.list_all {
                // Listing everything covers every entry named.
                changes.entries = Vec::new();
            }
        }
        self.notify.notify_one();
    }
}

fn watch_loop(mountinfo: &File, inotify: &Inotify, stopped: &OwnedFd, sink: &Sink) {
    loop {
        // NB: the kernel reports a changed mount table as POLLPRI|POLLERR, never as readable (it always is), and
        // polling the file is itself what re-arms it: no need to read it.
        let mut fds = [
            PollFd::new(mountinfo.as_fd(), PollFlags::POLLPRI),
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(stopped.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(errno) => {
                warn!(error = %errno, "failed to poll for mount events; relying on resync");
                return;
            }
        }
        let fired = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
        if fired(&fds[2]) {
            return;
        }
        let mounts = fired(&fds[0]);
        let mut named = HostChanges {
            mounts,
            ..HostChanges::default()
        };
        if fired(&fds[1]) {
            drain(inotify, &sink.watched, &mut named);
        }
        if named.mounts || named.list_all || !named.entries.is_empty() {
            sink.report(|changes| changes.merge(named));
        }
    }
}

/// Read every queued inotify event into `changes`: the entry it names, or, for one that names none (the queue
/// overflowed, a watched directory itself went away), every directory.
fn drain(inotify: &Inotify, watched: &[(WatchDescriptor, PathBuf)], changes: &mut HostChanges) {
    loop {
        match inotify.read_events() {
            Ok(events) if !events.is_empty() => {
                for event in events {
                    let dir = watched.iter().find(|(wd, _)| *wd == event.wd);
                    match (dir, event.name) {
                        (Some((_, dir)), Some(name)) if changes.entries.len() < MAX_NAMED => {
                            changes.entries.push((dir.clone(), name));
                        }
                        _ => changes.list_all = true,
                    }
                }
            }
            Ok(_) | Err(Errno::EAGAIN) => return,
            Err(errno) => {
                warn!(error = %errno, "failed to read inotify events");
                changes.list_all = true;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink() -> Sink {
        Sink {
            notify: Arc::new(Notify::new()),
            changes: Arc::default(),
            watched: Vec::new(),
        }
    }

    fn name(dir: &str, entry: &str) -> (PathBuf, std::ffi::OsString) {
        (dir.into(), entry.into())
    }

    #[test]
    fn named_entries_accumulate_until_taken_and_a_flood_turns_into_listing_everything() {
        let sink = sink();
        sink.report(|c| c.entries.push(name("/d", "a")));
        sink.report(|c| c.mounts = true);
        let kept = sink.changes.lock().unwrap().clone();
        assert_eq!(
            (kept.mounts, kept.list_all, kept.entries),
            (true, false, vec![name("/d", "a")])
        );
        for i in 0..MAX_NAMED {
            sink.report(|c| c.entries.push(name("/d", &format!("e{i}"))));
        }
        let flooded = sink.changes.lock().unwrap().clone();
        assert!(
            flooded.list_all,
            "more than MAX_NAMED names: list everything"
        );
        assert!(
            flooded.entries.is_empty(),
            "and keep no names: memory stays bounded"
        );
        sink.report(|c| c.entries.push(name("/d", "late")));
        assert!(sink.changes.lock().unwrap().entries.is_empty());
    }
}
