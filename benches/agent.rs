//! Node agent benchmarks on the real control plane (not timed tests): mount-to-PV latency one by one and in a
//! burst, time to publish many disks, resident memory with many PVs of other nodes in the cluster, and write
//! requests at steady state. Prints a markdown table; `bench/agent.sh` runs it.
//!
//! Sizes come from the environment so a quick run is possible: LOCALPV_BENCH_MOUNTS (100),
//! LOCALPV_BENCH_DISKS (1000), LOCALPV_BENCH_OTHER_PVS (10000), LOCALPV_BENCH_STEADY_SECS (60).

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use support::agent::{Agent, audited, install_crd};
use support::cluster::{ControlPlane, Options};
use support::disks::Mount;
use support::nodes::create_node;

fn env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// First time each local path was seen with a PV, and with an Available PV.
#[derive(Default)]
struct Seen {
    created: BTreeMap<String, Instant>,
    available: BTreeMap<String, Instant>,
}

fn watch_pvs(client: kube::Client, seen: Arc<Mutex<Seen>>) {
    tokio::spawn(async move {
        let api: Api<PersistentVolume> = Api::all(client);
        let cfg = watcher::Config::default().labels("localpv.io/node=bench-node");
        let mut stream = watcher(api, cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Ok(Some(pv)) = stream.try_next().await {
            let Some(path) = pv
                .spec
                .as_ref()
                .and_then(|s| s.local.as_ref())
                .map(|l| l.path.clone())
            else {
                continue;
            };
            let now = Instant::now();
            let mut s = seen.lock().expect("lock");
            s.created.entry(path.clone()).or_insert(now);
            if pv.status.and_then(|s| s.phase).as_deref() == Some("Available") {
                s.available.entry(path).or_insert(now);
            }
        }
    });
}

fn quantiles(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), *v.last().expect("samples"))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn wait_all(
    seen: &Arc<Mutex<Seen>>,
    paths: &[String],
    available: bool,
    timeout: Duration,
) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        {
            let s = seen.lock().expect("lock");
            let map = if available { &s.available } else { &s.created };
            if paths.iter().all(|p| map.contains_key(p)) {
                return paths.iter().map(|p| map[p]).max().expect("paths");
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {} PVs",
            paths.len()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn other_pvs(client: &kube::Client, count: usize) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let node = format!("other-{}", i % 100);
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": format!("other-{i}"), "labels": {"localpv.io/node": node}},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": "local-storage", "local": {"path": format!("/mnt/d/{i}")},
                             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
                }))
                .expect("PV literal");
                api.create(&PostParams::default(), &pv).await.expect("PV created");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let (mounts_n, disks_n, others_n, steady) = (
        env("LOCALPV_BENCH_MOUNTS", 100),
        env("LOCALPV_BENCH_DISKS", 1000),
        env("LOCALPV_BENCH_OTHER_PVS", 10000),
        env("LOCALPV_BENCH_STEADY_SECS", 60),
    );
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Default::default()
    })
    .await;
    let client = cp.client();
    install_crd(&cp).await;
    let sc: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "local-storage"}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"}))
    .expect("class literal");
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("class created");
    create_node(&client, "bench-node", &[]).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    watch_pvs(client.clone(), seen.clone());

    // 1. Time to publish N disks mounted before the agent starts.
    let mut agent = Agent::new(&cp, "bench-node", "local-storage");
    let mut mounts: Vec<Mount> = Vec::new();
    let mut paths = Vec::new();
    for i in 0..disks_n {
        let p = agent.disk(&format!("pre{i:05}"));
        mounts.push(Mount::tmpfs(&p, "16M", cp.reaper()));
        paths.push(p.display().to_string());
    }
    let t0 = Instant::now();
    agent.start(&cp);
    let published = wait_all(&seen, &paths, false, Duration::from_secs(600)).await - t0;
    let all_available = wait_all(&seen, &paths, true, Duration::from_secs(600)).await - t0;
    agent.wait_ready().await;

    // 2. Mount-to-PV latency, one mount at a time.
    let (mut to_pv, mut to_available) = (Vec::new(), Vec::new());
    for i in 0..mounts_n {
        let p = agent.disk(&format!("one{i:04}"));
        std::fs::create_dir_all(&p).expect("mount point");
        let start = Instant::now();
        mounts.push(Mount::tmpfs(&p, "16M", cp.reaper()));
        let path = vec![p.display().to_string()];
        to_pv.push(wait_all(&seen, &path, false, Duration::from_secs(60)).await - start);
        to_available.push(wait_all(&seen, &path, true, Duration::from_secs(60)).await - start);
    }

    // 3. A burst of mounts at once.
    let burst: Vec<String> = (0..mounts_n)
        .map(|i| agent.disk(&format!("burst{i:04}")).display().to_string())
        .collect();
    let start = Instant::now();
    for p in &burst {
        mounts.push(Mount::tmpfs(std::path::Path::new(p), "16M", cp.reaper()));
    }
    let burst_pv = wait_all(&seen, &burst, false, Duration::from_secs(120)).await - start;
    let burst_available = wait_all(&seen, &burst, true, Duration::from_secs(120)).await - start;

    // 4. Write requests at steady state, then memory with many PVs of other nodes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let audit = cp.dir.join("logs/audit.log");
    let before = audited(
        &audit,
        &agent.user,
        &[
            "create", "update", "patch", "delete", "get", "list", "watch",
        ],
    )
    .len();
    tokio::time::sleep(Duration::from_secs(steady as u64)).await;
    let during: Vec<_> = audited(
        &audit,
        &agent.user,
        &[
            "create", "update", "patch", "delete", "get", "list", "watch",
        ],
    )
    .split_off(before);
    let writes = during
        .iter()
        .filter(|(v, ..)| {
            !v.starts_with("get") && !v.starts_with("list") && !v.starts_with("watch")
        })
        .count();
    let pid = agent
        .process
        .as_ref()
        .and_then(|p| p.pid())
        .expect("agent pid");
    let rss_own = rss_kib(pid);
    other_pvs(&client, others_n).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_others = rss_kib(pid);

    let (p50, p99, max) = quantiles(to_pv.clone());
    let (a50, a99, amax) = quantiles(to_available);
    let hour = 3600.0 / steady as f64;
    println!("| measurement | result |");
    println!("| --- | --- |");
    println!(
        "| mount to PV created, one by one ({mounts_n} mounts) | p50 {} / p99 {} / max {} |",
        ms(p50),
        ms(p99),
        ms(max)
    );
    println!(
        "| mount to PV Available (PV controller included), one by one | p50 {} / p99 {} / max {} |",
        ms(a50),
        ms(a99),
        ms(amax)
    );
    println!(
        "| burst of {mounts_n} mounts: all PVs created / all Available | {} / {} |",
        ms(burst_pv),
        ms(burst_available)
    );
    println!(
        "| {disks_n} disks present at start: all PVs created / all Available | {} / {} |",
        ms(published),
        ms(all_available)
    );
    println!(
        "| requests at steady state ({steady} s): writes / all, per hour | {:.0} / {:.0} |",
        writes as f64 * hour,
        during.len() as f64 * hour
    );
    println!(
        "| agent RSS with {} own PVs | {} MiB |",
        disks_n + 2 * mounts_n,
        rss_own / 1024
    );
    println!(
        "| agent RSS after {others_n} PVs of 100 other nodes were added | {} MiB |",
        rss_others / 1024
    );
    drop(mounts);
}
