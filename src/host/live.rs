//! The mount table kept current one changed mount at a time, instead of reading all of `/proc/self/mountinfo`
//! after every mount event (whose cost grows with the number of mounts: ~10 ms at 5,000).
//!
//! ```text
//!  first read:  fanotify group on our mount namespace (attach/detach/move) ──┐  then listmount + statmount each,
//!                                                                            │  checked against mountinfo once
//!  each read:   drain the group: the ids it names ──> statmount each ────────┴─> the table, in unique-id order
//!               (ENOENT: the mount is gone)           (FAN_Q_OVERFLOW or a bad buffer: read every mount again)
//! ```
//!
//! The group is set up before the first full read, so no change falls between the two. The kernel queues a mount's
//! event before the mount call returns, so a table read after a mount (a bind mount placed inside a volume about to
//! be wiped, say) holds it, as a fresh mountinfo read would. A remount (options only) raises no event: every mount
//! is read again each [`FULL_EVERY`], and only a cached measurement's key holds options.
//!
//! Kernels without the API (before 6.14), an agent without CAP_SYS_ADMIN, or a first read that does not match
//! mountinfo: the caller reads mountinfo every time, as before.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use tracing::{debug, info, warn};

use super::mountapi::{self, MountEvents};
use super::{MountEntry, MountTable};

/// Every mount is read again this often: what raises no event (a remount) is seen by then.
pub const FULL_EVERY: Duration = Duration::from_secs(60);

/// First reads that disagree with mountinfo (mounts changing meanwhile) before giving up on the API.
const CHECKS: usize = 3;

#[derive(Debug, Default)]
pub struct LiveMounts {
    state: Mutex<LiveState>,
}

#[derive(Debug, Default)]
enum LiveState {
    #[default]
    Unknown,
    /// The API cannot be used here, for this reason (logged once).
    Off(String),
    On(Tracked),
}

#[derive(Debug)]
struct Tracked {
    events: OwnedFd,
    by_id: BTreeMap<u64, Arc<MountEntry>>,
    table: MountTable,
    full_at: Instant,
    /// Reused answer buffers.
    stat_buf: Vec<u8>,
    event_buf: Vec<u8>,
}

/// What a read did, for tests and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Every mount read (first read, overflow, [`FULL_EVERY`]).
    Full,
    /// Only the mounts events named: how many.
    Changed(usize),
}

impl LiveMounts {
    /// The mount table now, or `None` when the mount API cannot be used here (read mountinfo instead). `mountinfo`
    /// is only read to check the first table built.
    pub fn table(&self, mountinfo: &Path) -> Option<(MountTable, Read)> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *state {
            LiveState::Off(_) => None,
            LiveState::Unknown => match start(mountinfo) {
                Ok(tracked) => {
                    let table = tracked.table.clone();
                    *state = LiveState::On(tracked);
                    Some((table, Read::Full))
                }
                Err(reason) => {
                    info!(%reason, "reading the whole mount table after every mount event");
                    *state = LiveState::Off(reason);
                    None
                }
            },
            LiveState::On(tracked) => match tracked.update() {
                Ok(read) => Some((tracked.table.clone(), read)),
                Err(errno) => {
                    warn!(error = %errno, "the mount API failed; reading the whole mount table from now on");
                    *state = LiveState::Off(format!("the mount API failed: {errno}"));
                    None
                }
            },
        }
    }

    /// Why the mount API is not used, once a read found out.
    pub fn off_reason(&self) -> Option<String> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            LiveState::Off(reason) => Some(reason.clone()),
            _ => None,
        }
    }
}

fn start(mountinfo: &Path) -> Result<Tracked, String> {
    let events = crate::sys::mount_events().map_err(|e| format!("no mount events: {e}"))?;
    let mut tracked = Tracked {
        events,
        by_id: BTreeMap::new(),
        table: MountTable::default(),
        full_at: Instant::now(),
        stat_buf: Vec::new(),
        event_buf: vec![0; 64 * 1024],
    };
    for attempt in 1..=CHECKS {
        tracked
            .read_all()
            .map_err(|e| format!("listmount/statmount: {e}"))?;
        let text = std::fs::read(mountinfo).map_err(|e| format!("{}: {e}", mountinfo.display()))?;
        let parsed = MountTable::parse(&text).map_err(|e| e.to_string())?;
        match difference(&tracked.table, &parsed) {
            None => return Ok(tracked),
            Some(diff) if attempt == CHECKS => {
                return Err(format!("statmount's table differs from mountinfo: {diff}"));
            }
            Some(diff) => {
                debug!(%diff, attempt, "mount table changed while it was checked; reading again")
            }
        }
    }
    unreachable!("the last attempt returns")
}

impl Tracked {
    fn update(&mut self) -> Result<Read, Errno> {
        let mut events = MountEvents::default();
        loop {
            match nix::unistd::read(&self.events, &mut self.event_buf) {
                Ok(0) | Err(Errno::EAGAIN) => break,
                Ok(n) => {
                    if mountapi::mount_events(&self.event_buf[..n], &mut events).is_err() {
                        warn!("unreadable mount events; reading every mount again");
                        events.overflow = true;
                    }
                }
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(errno),
            }
        }
        if events.overflow || self.full_at.elapsed() >= FULL_EVERY {
            // NB: the events were drained first, so none of them is left to read again after this.
            self.read_all()?;
            return Ok(Read::Full);
        }
        events.ids.sort_unstable();
        events.ids.dedup();
        for &id in &events.ids {
            self.stat(id)?;
        }
        if !events.ids.is_empty() {
            self.rebuild();
        }
        Ok(Read::Changed(events.ids.len()))
    }

    fn read_all(&mut self) -> Result<(), Errno> {
        let ids = crate::sys::list_mounts()?;
        self.by_id.clear();
        for id in ids {
            self.stat(id)?;
        }
        self.full_at = Instant::now();
        self.rebuild();
        Ok(())
    }

    /// Reads mount `id` into the table, or drops it when it is gone.
    fn stat(&mut self, id: u64) -> Result<(), Errno> {
        match crate::sys::stat_mount(id, mountapi::MASK, &mut self.stat_buf) {
            Ok(()) => match mountapi::parse(&self.stat_buf) {
                Ok(entry) => {
                    let unchanged = self.by_id.get(&id).is_some_and(|e| **e == entry);
                    if !unchanged {
                        self.by_id.insert(id, Arc::new(entry));
                    }
                    Ok(())
                }
                Err(problem) => {
                    warn!(id, problem, "unreadable statmount answer");
                    Err(Errno::EINVAL)
                }
            },
            // NB: a mount detached (or not reachable from our root) is not in the table, as in mountinfo.
            Err(Errno::ENOENT) => {
                self.by_id.remove(&id);
                Ok(())
            }
            Err(errno) => Err(errno),
        }
    }

    fn rebuild(&mut self) {
        self.table = MountTable {
            entries: self.by_id.values().cloned().collect(),
        };
    }
}

/// The first place where `ours` and mountinfo's table differ in what discovery decides by (ids, device, root,
/// mount point, type, source), in order; `None` when they agree.
pub fn difference(ours: &MountTable, mountinfo: &MountTable) -> Option<String> {
    let key = |e: &MountEntry| {
        (
            e.mount_id,
            e.parent_id,
            e.dev,
            e.root.clone(),
            e.mount_point.clone(),
            e.fs_type.clone(),
            // NB: statmount cannot tell an empty source from none; mountinfo spells them "" and "none".
            match e.source.as_str() {
                "" => "none".to_string(),
                source => source.to_string(),
            },
        )
    };
    if ours.entries.len() != mountinfo.entries.len() {
        return Some(format!(
            "{} mounts, mountinfo lists {}",
            ours.entries.len(),
            mountinfo.entries.len()
        ));
    }
    ours.entries
        .iter()
        .zip(&mountinfo.entries)
        .find(|(a, b)| key(a) != key(b))
        .map(|(a, b)| format!("{a:?} where mountinfo has {b:?}"))
}
