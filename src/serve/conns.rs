//! The table of open connections: a cap on how many, and which one gives way when a new one arrives at the cap.
//!
//! ```text
//!  accept ──> Table::admit ──(below cap)──────────────> entry
//!                 └─(at cap)─> pick_victim (pure) ──> close the longest-idle connection, entry for the new one
//!                                  └─ none idle ──> refuse: the new connection is closed at once
//! ```
//!
//! A flood of idle connections thus never locks out a client that sends a request: each newcomer displaces the
//! connection that has done nothing for longest, and a connection with a request in flight is never displaced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// One open connection as the table sees it.
pub struct Entry {
    id: u64,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last request start or end (or the accept).
    last_active: AtomicU64,
    in_flight: AtomicU32,
    /// Notified when the table closes this connection to admit another.
    pub evicted: Notify,
}

impl Entry {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.last_active.store(self.now(), Ordering::SeqCst);
    }

    pub fn request_finished(&self) {
        self.last_active.store(self.now(), Ordering::SeqCst);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// How long the connection has had no request in flight; `None` while one is.
    pub fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = self.last_active.load(Ordering::SeqCst);
        Some(Duration::from_millis(self.now().saturating_sub(last)))
    }
}

/// What `pick_victim` needs to know of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub id: u64,
    pub last_active: u64,
    pub in_flight: u32,
}

/// The connection to close for a newcomer: the one idle longest, never one with a request in flight.
pub fn pick_victim(conns: impl IntoIterator<Item = Seen>) -> Option<u64> {
    conns
        .into_iter()
        .filter(|c| c.in_flight == 0)
        .min_by_key(|c| (c.last_active, c.id))
        .map(|c| c.id)
}

/// What `admit` did.
pub enum Admission {
    Admitted(Arc<Entry>),
    /// At the cap with every connection busy.
    Refused,
}

pub struct Table {
    cap: usize,
    epoch: Instant,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Entry>>>,
    evictions: AtomicU64,
}

impl Table {
    pub fn new(cap: usize) -> Table {
        Table {
            cap: cap.max(1),
            epoch: Instant::now(),
            next: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            evictions: AtomicU64::new(0),
        }
    }

    /// Makes room for one more connection if it can; the entry must be `release`d when the connection ends.
    pub fn admit(&self) -> Admission {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= self.cap {
            let seen = open.values().map(|e| Seen {
                id: e.id,
                last_active: e.last_active.load(Ordering::SeqCst),
                in_flight: e.in_flight.load(Ordering::SeqCst),
            });
            let Some(victim) = pick_victim(seen) else {
                return Admission::Refused;
            };
            if let Some(entry) = open.remove(&victim) {
                entry.evicted.notify_one();
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            id,
            epoch: self.epoch,
            last_active: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            in_flight: AtomicU32::new(0),
            evicted: Notify::new(),
        });
        open.insert(id, entry.clone());
        Admission::Admitted(entry)
    }

    pub fn release(&self, entry: &Entry) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&entry.id);
    }

    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: u64, last_active: u64, in_flight: u32) -> Seen {
        Seen {
            id,
            last_active,
            in_flight,
        }
    }

    #[test]
    fn the_longest_idle_connection_gives_way() {
        let conns = [seen(1, 50, 0), seen(2, 10, 0), seen(3, 30, 0)];
        assert_eq!(pick_victim(conns), Some(2));
    }

    #[test]
    fn a_connection_with_a_request_in_flight_never_gives_way() {
        let conns = [seen(1, 0, 1), seen(2, 5, 2), seen(3, 90, 0)];
        assert_eq!(pick_victim(conns), Some(3));
        assert_eq!(pick_victim([seen(1, 0, 1), seen(2, 5, 2)]), None);
    }

    #[test]
    fn a_full_table_displaces_its_idle_connections_one_for_one_and_refuses_when_all_are_busy() {
        let table = Table::new(2);
        let Admission::Admitted(a) = table.admit() else {
            panic!("refused")
        };
        let Admission::Admitted(b) = table.admit() else {
            panic!("refused")
        };
        b.request_started();
        let Admission::Admitted(c) = table.admit() else {
            panic!("refused")
        };
        assert_eq!((table.open(), table.evictions()), (2, 1));
        // `a` was told to close; `b` is busy and stays.
        assert!(futures::FutureExt::now_or_never(a.evicted.notified()).is_some());
        c.request_started();
        assert!(matches!(table.admit(), Admission::Refused));
        c.request_finished();
        assert!(matches!(table.admit(), Admission::Admitted(_)));
        table.release(&b);
        assert_eq!(table.open(), 1);
    }
}
