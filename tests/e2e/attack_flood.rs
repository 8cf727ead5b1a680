//! Floods against both servers run as real processes, each in a memory cgroup at the chart's limit (extender
//! 512 MiB, agent 256 MiB) with the machine's 20,000-descriptor limit: tens of thousands of idle connections,
//! slowloris clients and concurrent 60 MiB bodies. A well-formed request is answered throughout, the processes
//! are never OOM-killed, and the agent still publishes a tmpfs mounted during the flood.
//!
//! Floods only target 127.0.0.1 ports these tests opened, are bounded in count and time, and stop by themselves.
//! More than 20,000 connections cannot come from one process here (the same limit), so idle floods run in helper
//! processes: the `flood_client` example (`examples/flood_client.rs`). Up to 21,000 connections are tried; how many a
//! loaded machine manages in the time is printed, and at least 5,000 (many times either cap) are required.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::node_agent::{local_storage_class, wait_pvs};
use crate::support::agent::{Agent, http_get, install_crd, localpv_bin};
use crate::support::cgroup::MemCgroup;
use crate::support::cluster::{ControlPlane, Options, free_port};
use crate::support::disks::Mount;
use crate::support::nodes::create_node;
use crate::support::proc::Component;

/// A helper process holding `count` connections to `port` for `secs` seconds (`mode`: idle or slowloris).
fn flood(port: u16, count: usize, secs: u64, mode: &str) -> Child {
    Command::new(flood_client())
        .env("LOCALPV_FLOOD_PORT", port.to_string())
        .env("LOCALPV_FLOOD_COUNT", count.to_string())
        .env("LOCALPV_FLOOD_SECS", secs.to_string())
        .env("LOCALPV_FLOOD_MODE", mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("flood helper starts")
}

/// The `flood_client` example, which `cargo test` builds beside the test binaries (`target/debug/examples/`).
fn flood_client() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let examples = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("examples/flood_client"))
        .expect("test binary under target/<profile>/deps");
    assert!(
        examples.is_file(),
        "missing prerequisite: {} (built by `cargo test`, or `cargo build --example flood_client`)",
        examples.display()
    );
    examples
}

/// What a helper reported: (connected, closed by the server before the end).
fn flood_report(child: Child) -> (usize, usize) {
    let out = child.wait_with_output().expect("flood helper ends");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.split_once("FLOOD ").map(|(_, report)| report))
        .unwrap_or_else(|| panic!("no report: {text}"));
    let mut parts = line
        .split_whitespace()
        .map(|n| n.parse::<usize>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// POST `body` on a fresh connection; the status, or which step failed (nothing answered within `timeout`).
fn post(port: u16, path: &str, body: &[u8], timeout: Duration) -> Result<u16, String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout * 4)))
        .map_err(|e| format!("set timeout: {e}"))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let _ = s.write_all(body);
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| format!("no status in {n} bytes: {text:?}"))
}

fn filter_body() -> Vec<u8> {
    json!({"Pod": {"metadata": {"name": "web", "namespace": "default", "uid": "u"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
           "Nodes": null, "NodeNames": ["node-1"]})
    .to_string()
    .into_bytes()
}

/// About `mib` MiB of ExtenderArgs: a NodeList of label-heavy nodes (what a huge cluster could send).
fn big_body(mib: usize) -> Vec<u8> {
    let labels: serde_json::Map<String, serde_json::Value> = (0..60)
        .map(|i| {
            (
                format!("example.com/label-{i}"),
                json!(format!("value-{i:040}")),
            )
        })
        .collect();
    let one = json!({"metadata": {"name": "node-x", "labels": labels}}).to_string();
    let mut body = String::from(
        r#"{"Pod":{"metadata":{"name":"web","namespace":"default"}},"Nodes":{"items":["#,
    );
    let mut i = 0;
    while body.len() < mib << 20 {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&one.replace("node-x", &format!("node-{i}")));
        i += 1;
    }
    body.push_str("]},\"NodeNames\":null}");
    body.into_bytes()
}

/// GET `path` on a fresh connection (HTTP/1.0, as a kubelet probe does); the status, or which step failed.
fn get_status(port: u16, path: &str) -> Result<u16, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| format!("set timeout: {e}"))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| format!("no status in {} bytes: {text:?}", answer.len()))
}

/// Checks `probe` every 250 ms until `until`; panics naming the first miss and the step that failed.
fn answered_throughout(
    what: &str,
    until: Instant,
    mut probe: impl FnMut() -> Result<u16, String>,
) -> usize {
    let mut n = 0;
    while Instant::now() < until {
        let started = Instant::now();
        let status = probe();
        assert_eq!(
            status,
            Ok(200),
            "{what} not answered during the flood (after {n} answers, {:?})",
            started.elapsed()
        );
        n += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn the_extender_answers_filter_through_floods_slowloris_and_big_bodies_under_its_memory_limit()
 {
    let cp = ControlPlane::start(Options::default()).await;
    let client = cp.client();
    create_node(&client, "node-1", &[]).await;
    let port = free_port();
    let args = vec![
        "extender".to_string(),
        format!("--listen=127.0.0.1:{port}"),
        "--node-cleanup=false".to_string(),
        "--explain-pending=false".to_string(),
    ];
    let kubeconfig = cp
        .admin_kubeconfig
        .to_str()
        .expect("utf-8 path")
        .to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str()), ("RUST_LOG", "info")];
    let mut process = Component::spawn_with_env(
        "localpv-extender",
        &localpv_bin(),
        &args,
        &env,
        &cp.log_dir(),
        cp.reaper(),
    );
    let cgroup = MemCgroup::new(512 << 20);
    cgroup.add(process.pid().expect("extender pid"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(http_get(port, "/readyz"), Some((200, _))) {
        assert!(
            process.running() && Instant::now() < deadline,
            "extender not ready:\n{}",
            process.tail(40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let filter = filter_body();
    assert_eq!(
        post(port, "/filter", &filter, Duration::from_secs(5)),
        Ok(200)
    );

    // 1. 21,000 idle connections (more than the process's 20,000 descriptors) from three helpers, for 25 s.
    let floods: Vec<Child> = (0..3).map(|_| flood(port, 7_000, 25, "idle")).collect();
    let slow = flood(port, 300, 25, "slowloris");
    std::thread::sleep(Duration::from_secs(2));
    let answers = answered_throughout("/filter", Instant::now() + Duration::from_secs(20), || {
        post(port, "/filter", &filter, Duration::from_secs(5))
    });
    let reports: Vec<(usize, usize)> = floods.into_iter().map(flood_report).collect();
    let (slow_connected, slow_closed) = flood_report(slow);
    eprintln!(
        "idle floods {reports:?}; slowloris {slow_connected} connected, {slow_closed} closed; {answers} answers"
    );
    assert!(
        reports.iter().map(|r| r.0).sum::<usize>() >= 5_000,
        "{reports:?}"
    );
    assert!(
        slow_closed * 10 >= slow_connected * 9,
        "slowloris connections were not timed out: {slow_closed}/{slow_connected}"
    );

    // 2. Four concurrent 60 MiB bodies while /filter keeps being asked.
    let big = std::sync::Arc::new(big_body(60));
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let big = big.clone();
            std::thread::spawn(move || post(port, "/filter", &big, Duration::from_secs(20)))
        })
        .collect();
    let answers = answered_throughout("/filter", Instant::now() + Duration::from_secs(8), || {
        post(port, "/filter", &filter, Duration::from_secs(5))
    });
    let statuses: Vec<Result<u16, String>> = senders
        .into_iter()
        .map(|t| t.join().expect("sender"))
        .collect();
    eprintln!(
        "big bodies answered {statuses:?}; {answers} small answers; peak {} MiB",
        cgroup.max_usage_mib()
    );
    assert!(
        statuses.contains(&Ok(503)),
        "the body budget refused none of four 60 MiB bodies: {statuses:?}"
    );
    assert!(
        process.running(),
        "the extender died:\n{}",
        process.tail(40)
    );
    assert_eq!(cgroup.oom_kills(), 0, "the extender was OOM-killed");
    assert_eq!(
        post(port, "/filter", &filter, Duration::from_secs(5)),
        Ok(200)
    );
    process.stop(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_publishes_a_new_disk_and_answers_readyz_while_its_port_is_flooded() {
    let cp = ControlPlane::start(Options::default()).await;
    let client = cp.client();
    install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    create_node(&client, "node-1", &[]).await;
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    let _m1 = Mount::tmpfs(&agent.disk("vol1"), "64M", cp.reaper());
    agent.start(&cp);
    let cgroup = MemCgroup::new(256 << 20);
    cgroup.add(
        agent
            .process
            .as_ref()
            .and_then(|p| p.pid())
            .expect("agent pid"),
    );
    agent.wait_ready().await;
    let vol1 = agent.disk("vol1").display().to_string();
    wait_pvs(&client, "node-1", std::slice::from_ref(&vol1), "Pending").await;

    let floods: Vec<Child> = (0..3)
        .map(|_| flood(agent.port, 7_000, 30, "idle"))
        .collect();
    let slow = flood(agent.port, 300, 30, "slowloris");
    std::thread::sleep(Duration::from_secs(8));
    let _m2 = Mount::tmpfs(&agent.disk("vol2"), "64M", cp.reaper());
    let vol2 = agent.disk("vol2").display().to_string();
    let port = agent.port;
    let probing = std::thread::spawn(move || {
        answered_throughout("/readyz", Instant::now() + Duration::from_secs(15), || {
            get_status(port, "/readyz")
        })
    });
    tokio::time::timeout(
        Duration::from_secs(20),
        wait_pvs(&client, "node-1", &[vol1.clone(), vol2.clone()], "Pending"),
    )
    .await
    .unwrap_or_else(|_| panic!("vol2 not published during the flood:\n{}", agent.log()));
    let answers = probing.join().unwrap_or_else(|_| {
        let log = agent.log();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("connection")).collect();
        panic!(
            "/readyz was not answered throughout the flood; the agent's last connection lines:\n{}",
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    });
    let reports: Vec<(usize, usize)> = floods.into_iter().map(flood_report).collect();
    let slow = flood_report(slow);
    eprintln!(
        "agent floods {reports:?}, slowloris {slow:?}, {answers} /readyz answers, peak {} MiB",
        cgroup.max_usage_mib()
    );
    assert!(
        reports.iter().map(|r| r.0).sum::<usize>() >= 5_000,
        "{reports:?}"
    );
    assert!(
        agent.process.as_mut().is_some_and(|p| p.running()),
        "agent died:\n{}",
        agent.log()
    );
    assert_eq!(cgroup.oom_kills(), 0, "the agent was OOM-killed");
}
