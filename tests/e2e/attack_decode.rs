//! Requests that are small on the wire and large once decoded, against a real `localpv extender` in a memory
//! cgroup at the chart's limit (512 MiB), over HTTP and over HTTPS: the shapes that multiply most when decoded
//! (one-letter node names, empty or `null` Nodes, tiny Nodes with tiny labels, long label keys, a pod of empty
//! volumes, deep nesting), each near the 64 MiB body limit, all at once and retried while the memory budget refuses
//! it (503 naming the budget). Each is then refused with a 413 naming the limit to raise (deep nesting, which costs
//! no more than its bytes, is answered), the process is never OOM-killed, and well-formed requests in both extender modes (`NodeNames` and `Nodes`) are
//! answered correctly throughout.
//!
//! Before the decoder counted entries, four concurrent 60 MiB bodies of one-letter names were OOM-killed within
//! 2 s (issue 39).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::support::cgroup::MemCgroup;
use crate::support::cluster::{ControlPlane, Options};
use crate::support::extender::ExtenderProcess;
use crate::support::nodes::create_node;

/// The chart's memory limit for the extender (`charts/localpv/values.yaml`).
const CHART_LIMIT: u64 = 512 << 20;
/// Each hostile body's size: near the 64 MiB body limit, under it.
const HOSTILE: usize = 60 << 20;

/// How the test reaches the extender.
#[derive(Clone)]
enum Transport {
    Plain,
    Tls(Arc<rustls::ClientConfig>),
}

/// A status and the start of the body.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

impl Transport {
    /// A client trusting the control plane's CA, which signed the extender's serving certificate.
    fn tls(cp: &ControlPlane) -> Transport {
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_file(&cp.certs.ca_cert).expect("the plane's CA");
        roots.add(ca).expect("CA added");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Transport::Tls(Arc::new(config))
    }

    /// One request on a fresh connection; `timeout` bounds each read and write. The server may refuse a body before
    /// reading it all and close: the write then fails, and the answer already sent is still read.
    fn call(
        &self,
        port: u16,
        method: &str,
        path: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Answer, String> {
        let mut tcp = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)
            .map_err(|e| format!("connect: {e}"))?;
        tcp.set_read_timeout(Some(timeout))
            .and_then(|()| tcp.set_write_timeout(Some(timeout)))
            .map_err(|e| format!("set timeout: {e}"))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let got = match self {
            Transport::Plain => {
                tcp.write_all(head.as_bytes())
                    .map_err(|e| format!("write: {e}"))?;
                let _ = tcp.write_all(body);
                read_plain(&mut tcp)
            }
            Transport::Tls(config) => {
                let name = ServerName::try_from("localhost").expect("valid name");
                let mut conn = rustls::ClientConnection::new(config.clone(), name)
                    .map_err(|e| format!("tls: {e}"))?;
                let mut stream = rustls::Stream::new(&mut conn, &mut tcp);
                stream
                    .write_all(head.as_bytes())
                    .map_err(|e| format!("write: {e}"))?;
                let _ = stream.write_all(body).and_then(|()| stream.flush());
                // NB: not through `Stream::read`, which first sends what is left of a body the server refused.
                read_tls(&mut conn, &mut tcp)
            }
        };
        let text = String::from_utf8_lossy(&got);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status in {} bytes: {text:?}", got.len()))?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Ok(Answer {
            status,
            body: body.chars().take(2_000).collect(),
        })
    }
}

/// What the server sent until it closed (or failed, or went quiet past the read timeout).
fn read_plain(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 << 10];
    while let Ok(n @ 1..) = tcp.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// `read_plain` through TLS, reading records only.
fn read_tls(conn: &mut rustls::ClientConnection, tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        match conn.reader().read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return got,
        }
        match conn.read_tls(tcp) {
            Ok(1..) if conn.process_new_packets().is_ok() => {}
            _ => return got,
        }
    }
}

/// `head` + `item` repeated up to about `HOSTILE` bytes, comma-separated, + `tail`.
fn repeated(head: &str, item: &str, tail: &str) -> Vec<u8> {
    let n = (HOSTILE - head.len() - tail.len()) / (item.len() + 1);
    let mut body = String::with_capacity(HOSTILE);
    body.push_str(head);
    body.push_str(item);
    body.push_str(&format!(",{item}").repeat(n - 1));
    body.push_str(tail);
    body.into_bytes()
}

/// The worst shapes: each entry as small as JSON allows, so each wire byte costs the most once decoded.
fn hostile_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let pod = r#"{"Pod":{"metadata":{"name":"web","namespace":"default"}},"#;
    let tiny_labels: Vec<String> = (0..16).map(|i| format!(r#""{i:x}":"""#)).collect();
    let tiny_node = format!(
        r#"{{"metadata":{{"labels":{{{}}}}}}}"#,
        tiny_labels.join(",")
    );
    let long_keys: Vec<String> = (0..1_500)
        .map(|i| format!(r#""{}{i}":"""#, "k".repeat(4_000)))
        .collect();
    let long_node = format!(r#"{{"metadata":{{"labels":{{{}}}}}}}"#, long_keys.join(","));
    let depth = HOSTILE / 2 - 16;
    let mut deep = String::from(pod);
    deep.push_str(r#""Extra":"#);
    deep.push_str(&"[".repeat(depth));
    deep.push_str(&"]".repeat(depth));
    deep.push_str(r#","NodeNames":["node-1"]}"#);
    vec![
        (
            "one-letter names",
            repeated(&format!(r#"{pod}"NodeNames":["#), r#""a""#, "]}"),
        ),
        (
            "empty Nodes",
            repeated(&format!(r#"{pod}"Nodes":{{"items":["#), "{}", "]}}"),
        ),
        (
            "null Nodes",
            repeated(&format!(r#"{pod}"Nodes":{{"items":["#), "null", "]}}"),
        ),
        (
            "tiny Nodes with tiny labels",
            repeated(&format!(r#"{pod}"Nodes":{{"items":["#), &tiny_node, "]}}"),
        ),
        (
            "long label keys",
            repeated(&format!(r#"{pod}"Nodes":{{"items":["#), &long_node, "]}}"),
        ),
        (
            "a pod of empty volumes",
            repeated(
                r#"{"Pod":{"metadata":{"name":"web"},"spec":{"volumes":["#,
                "{}",
                r#"]}},"NodeNames":["node-1"]}"#,
            ),
        ),
        (DEEP, deep.into_bytes()),
    ]
}

/// Nesting 30 million lists deep where the decoder skips a value: serde_json skips it without recursing, and
/// skipping costs no more than the bytes, so it is answered, not refused (a depth past 128 where a value is
/// decoded is a 400 from serde_json's recursion limit).
const DEEP: &str = "deep nesting";

/// Whether `answer` is a refusal that names what to raise.
fn names_the_limit(answer: &Answer) -> bool {
    let flags = [
        "--max-nodes",
        "--max-labels-per-node",
        "--max-labels",
        "--max-volumes",
    ];
    match answer.status {
        413 => flags.iter().any(|f| answer.body.contains(f)),
        503 => answer.body.contains("--http-body-budget"),
        _ => false,
    }
}

/// A filter request of `node-1` in either mode, and whether the answer lets it pass.
fn well_formed(nodes_mode: bool) -> Vec<u8> {
    let pod = json!({"metadata": {"name": "web", "namespace": "default"}});
    let body = if nodes_mode {
        let node =
            json!({"metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}}});
        json!({"Pod": pod, "Nodes": {"items": [node]}})
    } else {
        json!({"Pod": pod, "NodeNames": ["node-1"]})
    };
    body.to_string().into_bytes()
}

fn passed(answer: &Answer, nodes_mode: bool) -> bool {
    let Ok(json) = serde_json::from_str::<Value>(&answer.body) else {
        return false;
    };
    let passed = if nodes_mode {
        &json["Nodes"]["items"][0]["metadata"]["name"]
    } else {
        &json["NodeNames"][0]
    };
    answer.status == 200 && passed == "node-1"
}

/// What one hostile sender saw: how many times the memory budget refused it (503), then the answer.
type Outcome = (&'static str, usize, Result<Answer, String>);

/// Sends `body` until it is admitted past the memory budget (as kube-scheduler retries a 503), for at most
/// `within`; every 503 on the way must name the budget.
fn send_until_admitted(
    transport: &Transport,
    port: u16,
    what: &'static str,
    body: &[u8],
    within: Duration,
) -> Outcome {
    let deadline = Instant::now() + within;
    let mut busy = 0;
    loop {
        let answer = transport.call(port, "POST", "/filter", body, Duration::from_secs(20));
        match answer {
            Ok(a) if a.status == 503 && names_the_limit(&a) && Instant::now() < deadline => {
                busy += 1;
                std::thread::sleep(Duration::from_millis(50 + 37 * (busy % 5) as u64));
            }
            other => return (what, busy, other),
        }
    }
}

/// Sends every hostile body at once (the one-letter names four times, as in issue 39), each retried while the
/// budget refuses it, while well-formed requests of both modes keep coming until every hostile sender is done.
/// Returns how many well-formed requests were answered.
fn attack(transport: &Transport, port: u16, bodies: &Arc<Vec<(&'static str, Vec<u8>)>>) -> usize {
    let (done_tx, done_rx) = mpsc::channel::<Outcome>();
    let senders: Vec<usize> = (0..bodies.len()).chain([0, 0, 0]).collect();
    for &i in &senders {
        let (transport, bodies, done) = (transport.clone(), bodies.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let (what, body) = &bodies[i];
            let outcome =
                send_until_admitted(&transport, port, what, body, Duration::from_secs(40));
            let _ = done.send(outcome);
        });
    }
    drop(done_tx);
    let mut refused = Vec::new();
    let mut answered = 0;
    let check = |(what, busy, answer): Outcome| match answer {
        Ok(a) if what == DEEP && (passed(&a, false) || a.status == 400) => (what, busy, a.status),
        Ok(a) if a.status != 503 && names_the_limit(&a) => (what, busy, a.status),
        other => panic!("{what}: not refused naming a limit (after {busy} 503s): {other:?}"),
    };
    while refused.len() < senders.len() {
        let nodes_mode = answered % 2 == 1;
        let body = well_formed(nodes_mode);
        let answer = transport.call(port, "POST", "/filter", &body, Duration::from_secs(10));
        match answer {
            Ok(a) if passed(&a, nodes_mode) => answered += 1,
            other => panic!(
                "a well-formed request (Nodes mode: {nodes_mode}) was not answered during the attack, after \
                 {answered}: {other:?}"
            ),
        }
        // Each sender ends within its deadline and timeouts, so this loop does too.
        match done_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(outcome) => refused.push(check(outcome)),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    assert_eq!(
        refused.len(),
        senders.len(),
        "a hostile sender never reported: {refused:?}"
    );
    eprintln!("(shape, 503s first, final status) {refused:?}; {answered} well-formed answers");
    answered
}

/// Polls `/readyz` through `transport` until 200, failing with the log when the process exits or 60 s pass.
fn wait_ready(transport: &Transport, extender: &mut ExtenderProcess) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = transport.call(extender.port, "GET", "/readyz", b"", Duration::from_secs(5));
        if matches!(answer, Ok(Answer { status: 200, .. })) {
            return;
        }
        assert!(
            extender.running() && Instant::now() < deadline,
            "extender not ready ({answer:?}):\n{}",
            extender.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_that_amplify_when_decoded_are_refused_naming_the_limit_and_never_oom_the_extender()
 {
    let cp = ControlPlane::start(Options::default()).await;
    create_node(&cp.client(), "node-1", &[]).await;
    let (cert, key) = cp
        .certs
        .write_pair("extender-decode", &cp.certs.server("localpv-extender"));
    let bodies = Arc::new(hostile_bodies());
    for tls in [false, true] {
        let mut extender = ExtenderProcess::new(&cp)
            .name(if tls {
                "localpv-extender-tls"
            } else {
                "localpv-extender"
            })
            .arg("--node-cleanup=false")
            .arg("--explain-pending=false");
        let transport = if tls {
            extender = extender
                .arg(&format!("--tls-cert={}", cert.display()))
                .arg(&format!("--tls-key={}", key.display()));
            Transport::tls(&cp)
        } else {
            Transport::Plain
        };
        let cgroup = MemCgroup::new(CHART_LIMIT);
        let pid = extender.spawn(&cp).pid().expect("extender pid");
        cgroup.add(pid);
        wait_ready(&transport, &mut extender);
        let answered = attack(&transport, extender.port, &bodies);
        eprintln!(
            "tls {tls}: {answered} well-formed answers; peak {} MiB",
            cgroup.max_usage_mib()
        );
        assert!(extender.running(), "the extender died:\n{}", extender.log());
        assert_eq!(
            cgroup.oom_kills(),
            0,
            "the extender was OOM-killed (tls {tls})"
        );
        assert!(
            answered >= 2,
            "too few well-formed requests were tried: {answered}"
        );
        extender.stop(Duration::from_secs(10));
    }
}
