//! The table of open connections: a cap on how many, and which one gives way when a new one arrives at the cap.
//!
//! ```text
//!  accept ──> Table::admit ──(below cap)──────────────> entry
//!                 └─(at cap)─> oldest_idle (pure) ──> the first of them with no request bytes waiting unread
//!                                  │                    is closed; entry for the new one
//!                                  └─ none idle, or all waiting ──> refuse: the new connection is closed at once
//! ```
//!
//! A flood of idle connections thus never locks out a client that sends a request: each newcomer displaces the
//! connection that has done nothing for longest, and a connection with a request in flight is never displaced.
//! Nor is one whose request already sits in its socket unread: under a flood the loop admits a connection every
//! few tens of microseconds, so a client's connection becomes the oldest idle one within milliseconds, and its
//! task may not have been polled yet on a busy machine (closing it then resets a client that did everything
//! right). The table keeps a duplicate of each connection's descriptor only to peek for such bytes.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// One open connection as the table sees it.
pub struct Conn {
    id: u64,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last request start or end (or the accept).
    last_active: AtomicU64,
    in_flight: AtomicU32,
    /// Notified when the table closes this connection to admit another.
    pub evicted: Notify,
    /// A duplicate of the connection's descriptor, only ever peeked (`None` when it could not be duplicated).
    socket: Option<TcpStream>,
}

impl Conn {
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

    /// Whether bytes the client sent wait unread in the socket (a request its task has not read yet).
    fn unread(&self) -> bool {
        // NB: the descriptor is non-blocking (shared with tokio's), so an empty socket answers WouldBlock at once;
        // MSG_PEEK consumes nothing and leaves epoll's edge for the connection's task untouched.
        self.socket
            .as_ref()
            .is_some_and(|s| matches!(s.peek(&mut [0u8; 1]), Ok(n) if n > 0))
    }
}

/// What `pick_victim` needs to know of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnView {
    pub id: u64,
    pub last_active: u64,
    pub in_flight: u32,
}

/// How many of the oldest idle connections a newcomer may look at for one to close.
pub const CANDIDATES: usize = 8;

/// The connections that may be closed for a newcomer, oldest idle first, at most `CANDIDATES`; never one with a
/// request in flight.
pub fn oldest_idle(conns: impl IntoIterator<Item = ConnView>) -> Vec<u64> {
    let mut idle: Vec<(u64, u64)> = conns
        .into_iter()
        .filter(|c| c.in_flight == 0)
        .map(|c| (c.last_active, c.id))
        .collect();
    if idle.len() > CANDIDATES {
        idle.select_nth_unstable(CANDIDATES - 1);
        idle.truncate(CANDIDATES);
    }
    idle.sort_unstable();
    idle.into_iter().map(|(_, id)| id).collect()
}

/// What `admit` did.
pub enum Admission {
    Admitted(Arc<Conn>),
    /// At the cap with every connection busy.
    Refused,
}

pub struct Table {
    cap: usize,
    epoch: Instant,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
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
    /// `socket` is a duplicate of the new connection's descriptor (see [`Conn`]).
    pub fn admit(&self, socket: Option<TcpStream>) -> Admission {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= self.cap {
            let seen = open.values().map(|e| ConnView {
                id: e.id,
                last_active: e.last_active.load(Ordering::SeqCst),
                in_flight: e.in_flight.load(Ordering::SeqCst),
            });
            let victim = oldest_idle(seen)
                .into_iter()
                .find(|id| open.get(id).is_some_and(|e| !e.unread()));
            let Some(victim) = victim else {
                return Admission::Refused;
            };
            if let Some(entry) = open.remove(&victim) {
                entry.evicted.notify_one();
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Conn {
            id,
            epoch: self.epoch,
            last_active: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            in_flight: AtomicU32::new(0),
            evicted: Notify::new(),
            socket,
        });
        open.insert(id, entry.clone());
        Admission::Admitted(entry)
    }

    pub fn release(&self, entry: &Conn) {
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

    fn seen(id: u64, last_active: u64, in_flight: u32) -> ConnView {
        ConnView {
            id,
            last_active,
            in_flight,
        }
    }

    #[test]
    fn the_longest_idle_connections_are_offered_first_and_never_one_with_a_request_in_flight() {
        let conns = [
            seen(1, 50, 0),
            seen(2, 10, 0),
            seen(3, 30, 0),
            seen(4, 0, 1),
        ];
        assert_eq!(oldest_idle(conns), vec![2, 3, 1]);
        assert_eq!(
            oldest_idle([seen(1, 0, 1), seen(2, 5, 2)]),
            Vec::<u64>::new()
        );
        // Equal times: the older id first. Many idle: only the CANDIDATES oldest, in order.
        assert_eq!(oldest_idle([seen(7, 5, 0), seen(3, 5, 0)]), vec![3, 7]);
        let many = (0..100u64).rev().map(|i| seen(i, i * 2, 0));
        assert_eq!(
            oldest_idle(many),
            (0..CANDIDATES as u64).collect::<Vec<_>>()
        );
    }

    fn admitted(table: &Table, socket: Option<TcpStream>) -> Arc<Conn> {
        match table.admit(socket) {
            Admission::Admitted(entry) => entry,
            Admission::Refused => panic!("refused"),
        }
    }

    fn evicted(entry: &Conn) -> bool {
        futures::FutureExt::now_or_never(entry.evicted.notified()).is_some()
    }

    #[test]
    fn a_full_table_displaces_its_idle_connections_one_for_one_and_refuses_when_all_are_busy() {
        let table = Table::new(2);
        let a = admitted(&table, None);
        let b = admitted(&table, None);
        b.request_started();
        let c = admitted(&table, None);
        assert_eq!((table.open(), table.evictions()), (2, 1));
        // `a` was told to close; `b` is busy and stays.
        assert!(evicted(&a));
        c.request_started();
        assert!(matches!(table.admit(None), Admission::Refused));
        c.request_finished();
        assert!(matches!(table.admit(None), Admission::Admitted(_)));
        table.release(&b);
        assert_eq!(table.open(), 1);
    }

    /// Real loopback connections: (the client's end, the server's end as the table keeps it, non-blocking).
    fn pair(listener: &std::net::TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        (client, server)
    }

    fn wait_unread(socket: &TcpStream) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !matches!(socket.peek(&mut [0u8; 1]), Ok(n) if n > 0) {
            assert!(Instant::now() < deadline, "the request never arrived");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The flood race: a client's request arrived, its task has not read it yet, and newcomers keep coming. The
    /// client's connection is passed over however old it is; once its request is read it is idle like any other.
    #[test]
    fn a_connection_whose_request_waits_unread_is_never_displaced_by_a_flood() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let table = Table::new(2);
        let (mut client, server) = pair(&listener);
        let mut server_read = server.try_clone().expect("clone");
        let waiting = admitted(&table, Some(server));
        client
            .write_all(b"GET /readyz HTTP/1.0\r\n\r\n")
            .expect("request sent");
        // The bytes must have reached the server's socket before the flood looks at it.
        wait_unread(&server_read);
        let mut flood = Vec::new();
        for _ in 0..20 {
            let (c, s) = pair(&listener);
            flood.push((c, admitted(&table, Some(s))));
        }
        assert!(!evicted(&waiting), "the waiting request was displaced");
        assert_eq!(
            table.evictions(),
            19,
            "each newcomer displaced an idle flood connection"
        );
        // Its task reads the request (and, say, answers); idle now, the next newcomer may displace it.
        let mut buf = [0u8; 64];
        assert!(server_read.read(&mut buf).expect("request read") > 0);
        assert!(!waiting.unread());
        let _newcomer = admitted(&table, None);
        assert_eq!(flood.len(), 20);
        assert!(
            evicted(&waiting),
            "an idle connection whose request was read is displaced in turn"
        );
    }

    #[test]
    fn a_newcomer_is_refused_when_every_candidate_has_a_request_waiting() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let table = Table::new(2);
        let mut clients = Vec::new();
        let entries: Vec<Arc<Conn>> = (0..2)
            .map(|_| {
                let (mut c, s) = pair(&listener);
                c.write_all(b"GET / HTTP/1.0\r\n\r\n")
                    .expect("request sent");
                clients.push(c);
                wait_unread(&s);
                admitted(&table, Some(s))
            })
            .collect();
        assert!(matches!(table.admit(None), Admission::Refused));
        assert!(entries.iter().all(|e| !evicted(e)));
    }
}
