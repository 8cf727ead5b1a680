//! The accept loop both servers share, plain or TLS: a connection table (cap, eviction), a handshake bounded in
//! time, hyper with header and idle timeouts, and a drain on shutdown. The loop never dies on an accept error.
//!
//! ```text
//!  TcpListener ─accept (EMFILE: back off, go on)─> Table::admit (a peek-only duplicate) ─refused─> close at once
//!                                                      └─> task: handshake (≤ header_timeout) ─> hyper (h1/h2;
//!                                                          heads ≤ 64 KiB and 100 headers, h2 lists ≤ 16 KiB)
//!                                                          (runs before the next accept)
//!                                                          closed on: end, eviction, idle_timeout, shutdown
//!  every 10 s: release warm buffers unused for their idle time (`warm`)
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::conns::{Admission, Conn, Table};
use super::guard::{self, RequestBounds};
use super::limits::Limits;
use super::warm::WARM;

/// How long open connections may finish their requests after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause after failing accepts (out of descriptors, memory): the loop retries, it never gives up.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// HTTP/2 streams per connection; the request slots bound the total anyway.
const H2_STREAMS: u32 = 16;
/// Largest HTTP/1 request head (request line and headers) a connection may buffer; hyper's default is 400 KiB,
/// which over the extender's 1024 connections is 400 MiB held by heads alone. kube-scheduler's and kubelet's heads
/// are well under 1 KiB. A larger head gets 431.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Most headers of one HTTP/1 request (431 beyond); each costs a `HeaderMap` entry once parsed.
const MAX_HEADERS: usize = 100;
/// Largest HTTP/2 header list once HPACK-decoded: a one-byte reference to the dynamic table can stand for a 4 KiB
/// header, so this, not the bytes received, bounds what a request's headers cost (hyper's default, made explicit).
const MAX_HEADER_LIST_BYTES: u32 = 16 << 10;
/// How often warm buffers unused for their idle time are released.
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Puts `limits`' per-request bounds (`guard::limit`) in front of every route of `app`.
pub fn guarded(app: Router, limits: &Limits) -> Router {
    let guard = RequestBounds::new(limits.clone());
    app.layer(middleware::from_fn_with_state(guard, guard::limit))
}

/// Serves `app` (already `guarded`) on `listener` until `stopped` resolves. `connect` turns an accepted TCP
/// stream into the stream to speak HTTP on (identity, or a TLS handshake) and the router for that connection;
/// `None` closes it. It is given at most `header_timeout`.
pub async fn serve<C, F, I>(
    listener: TcpListener,
    limits: Limits,
    connect: C,
    stopped: impl Future<Output = ()>,
) where
    C: Fn(TcpStream, SocketAddr) -> F,
    F: Future<Output = Option<(I, Router)>> + Send + 'static,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let table = Arc::new(Table::new(limits.max_connections));
    let limits = Arc::new(limits);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut connections = JoinSet::new();
    let mut backoff = Duration::ZERO;
    tokio::pin!(stopped);
    let mut trim = tokio::time::interval(TRIM_EVERY);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = trim.tick() => {
                WARM.trim();
                continue;
            }
            _ = &mut stopped => break,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => {
                backoff = Duration::ZERO;
                conn
            }
            Err(error) => {
                // NB: EMFILE/ENFILE/ENOMEM leave the connection in the backlog; retrying at once would spin.
                backoff = (backoff * 2).clamp(Duration::from_millis(5), MAX_ACCEPT_BACKOFF);
                warn!(%error, retry_in = ?backoff, "failed to accept a connection");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => continue,
                    _ = &mut stopped => break,
                }
            }
        };
        // NB: a duplicate descriptor, so the table can see a request waiting unread (see `conns`); without one
        // (out of descriptors) the connection is judged by its activity alone.
        let socket = tcp
            .as_fd()
            .try_clone_to_owned()
            .map(std::net::TcpStream::from)
            .ok();
        let entry = match table.admit(socket) {
            Admission::Admitted(entry) => entry,
            Admission::Refused => {
                debug!(%peer, cap = limits.max_connections, "connection refused: every connection is busy");
                drop(tcp);
                continue;
            }
        };
        // NB: without TCP_NODELAY an answer written in two segments waits for the client's delayed ACK (~40 ms);
        // the scheduler-throughput bench's no-op extender paid 60 ms per pod for it.
        if let Err(error) = tcp.set_nodelay(true) {
            debug!(%peer, %error, "failed to set TCP_NODELAY");
        }
        let handshake = connect(tcp, peer);
        let (table, limits, stop) = (table.clone(), limits.clone(), stop_rx.clone());
        connections.spawn(async move {
            one_connection(handshake, peer, &entry, &limits, stop).await;
            table.release(&entry);
        });
        while connections.try_join_next().is_some() {}
        // NB: the new connection's task runs before the next accept. Otherwise a backlog full of flood connections
        // is accepted in one go (up to tokio's budget of 128 per poll, the agent's whole cap) and the connection
        // that already sent its request is displaced as idle before its task ever read it.
        tokio::task::yield_now().await;
    }
    info!(
        open = table.open(),
        "HTTP server stopping; draining connections"
    );
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

/// [`serve`] over plain HTTP: `app` behind `limits`' per-request bounds, spoken on the accepted stream as is.
pub async fn serve_plain(
    listener: TcpListener,
    limits: Limits,
    app: Router,
    stopped: impl Future<Output = ()>,
) {
    let app = guarded(app, &limits);
    let connect = move |tcp, _| {
        let app = app.clone();
        async move { Some((tcp, app)) }
    };
    serve(listener, limits, connect, stopped).await;
}

/// Marks the connection busy while a request is handled, so eviction and the idle timeout pass it by.
fn tracked(app: Router, entry: &Arc<Conn>) -> Router {
    let entry = entry.clone();
    app.layer(middleware::from_fn(move |req: Request, next: Next| {
        let entry = entry.clone();
        async move {
            entry.request_started();
            let response: Response = next.run(req).await;
            entry.request_finished();
            response
        }
    }))
}

async fn one_connection<F, I>(
    handshake: F,
    peer: SocketAddr,
    entry: &Arc<Conn>,
    limits: &Limits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    F: Future<Output = Option<(I, Router)>>,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connected = tokio::select! {
        done = tokio::time::timeout(limits.header_timeout, handshake) => done,
        _ = entry.evicted.notified() => return,
    };
    let Ok(Some((io, app))) = connected else {
        return debug!(%peer, "connection closed before it spoke HTTP");
    };
    let service = TowerToHyperService::new(tracked(app, entry));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .max_concurrent_streams(H2_STREAMS)
        .keep_alive_interval(limits.idle_timeout / 2)
        .keep_alive_timeout(limits.header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval((limits.idle_timeout / 4).max(Duration::from_millis(50)));
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    debug!(%peer, %error, "connection ended with an error");
                }
                return;
            }
            _ = entry.evicted.notified() => return debug!(%peer, "idle connection closed for a new one"),
            _ = tick.tick() => {
                if entry.idle_for().is_some_and(|idle| idle >= limits.idle_timeout) {
                    return debug!(%peer, "idle connection closed");
                }
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream as StdStream;

    use axum::routing::get;

    use super::*;

    /// A flood of idle connections already waiting in the backlog behind a client that sent its request: the
    /// client is answered, however many connections the loop could accept before the client's task first ran.
    /// One thread serves, as on an agent whose other worker is busy.
    #[test]
    fn a_request_already_sent_is_answered_before_a_flood_behind_it_can_displace_it() {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = std_listener.local_addr().expect("address");
        let mut client = StdStream::connect(addr).expect("client connects");
        client
            .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("request written");
        // NB: 40 connections queued behind it (the backlog takes them before anything is accepted); the cap is 4.
        let flood: Vec<StdStream> = (0..40)
            .map(|_| StdStream::connect(addr).expect("flood connects"))
            .collect();
        let limits = Limits {
            max_connections: 4,
            ..Limits::agent()
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let server = std::thread::spawn(move || {
            runtime.block_on(async {
                let listener = TcpListener::from_std(std_listener).expect("tokio listener");
                let app = Router::new().route("/ping", get(|| async { "pong" }));
                let stopped = tokio::time::sleep(Duration::from_secs(2));
                serve_plain(listener, limits, app, stopped).await;
            })
        });
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut answer = String::new();
        let _ = client.read_to_string(&mut answer);
        drop(flood);
        server.join().expect("server thread");
        assert!(answer.starts_with("HTTP/1.1 200"), "answer: {answer:?}");
        assert!(answer.ends_with("pong"), "answer: {answer:?}");
    }
}
