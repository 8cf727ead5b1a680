//! Scheduler extender benchmarks (not timed tests): filter and prioritize latency through the pure decision and
//! through the HTTP handler (`app(state).oneshot`, no socket) at 100, 1,000 and 5,000 nodes with 10 PVs each, in
//! both `nodeCacheCapable` modes; requests per second under concurrent load; decoding a 5,000-Node
//! `ExtenderArgs`; resident memory of a snapshot with 100k PVs and 50k PVCs. Prints markdown tables;
//! `bench/extender.sh` runs it in release.
//!
//! The cluster: node `n<i>` has 10 PVs of class `local`, 10Gi to 100Gi; three are bound to other claims (the three
//! largest on even nodes, the three smallest on odd ones). Pods ask for 8Gi (every node fits), 75Gi (even nodes
//! are rejected after a full scan, with a reason) or 8Gi + 15Gi (every node fits; the general multi-claim path).
//! Nodes in requests look like a kubelet's: labels, conditions, addresses, capacity and 30 images with digests
//! (kube-scheduler strips managedFields), about 8 KiB of JSON each.
//!
//! Knobs (env): LOCALPV_BENCH_SCALE (1.0) multiplies iteration counts; LOCALPV_BENCH_LOAD_SECS (3);
//! LOCALPV_BENCH_ONLY (comma-separated parts: memory, rebuild, decoding, latency, throughput; all when unset);
//! LOCALPV_BENCH_FIGURES (a file to append the headline figures to, one JSON object per line: decoding p50 and
//! p99, filter and prioritize p50 and p99 per case, requests per second, memory).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::Request;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use localpv::extender::model::{Claim, Class, Strategy, Volume, node_labels};
use localpv::extender::server::{AppState, Cache, ServerConfig, app};
use localpv::extender::snapshot::Snapshot;
use localpv::extender::verbs;
use localpv::extender::wire::ExtenderArgs;
use localpv::selector::Labels;
use serde_json::{Value, json};
use tower::ServiceExt;

use common::figures::{self, figure};
use common::objects::{node_json, pv_json, pvc_json};

const PVS_PER_NODE: usize = 10;

fn env_f64(key: &str, default: f64) -> f64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn iterations(base: usize) -> usize {
    ((base as f64 * env_f64("LOCALPV_BENCH_SCALE", 1.0)) as usize).max(5)
}

// ---- the cluster ----

fn volume(v: Value) -> Volume {
    let pv: PersistentVolume = serde_json::from_value(v).expect("valid PV");
    Volume::from_pv(&pv).expect("named PV")
}

fn claim(v: Value) -> Claim {
    let pvc: PersistentVolumeClaim = serde_json::from_value(v).expect("valid PVC");
    Claim::from_pvc(&pvc).expect("named PVC")
}

fn class() -> Class {
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"}))
    .expect("valid class");
    Class::from_storage_class(&sc).expect("named class")
}

/// `nodes` nodes with 10 PVs each (see the module doc) and the pods' claims: `fits` (8Gi, every node has a
/// free PV for it), `logs` (15Gi, likewise) and `data` (75Gi, only odd nodes have a free PV that large).
fn cluster(nodes: usize) -> Snapshot {
    let (volumes, claims, nodes) = cluster_models(nodes);
    Snapshot::new(volumes, claims, [class()], nodes)
}

/// The models `cluster` builds its snapshot from, as the watch stores hold them.
fn cluster_models(nodes: usize) -> (Vec<Volume>, Vec<Claim>, Vec<(String, Labels)>) {
    let mut volumes = Vec::with_capacity(nodes * PVS_PER_NODE);
    let mut claims = vec![
        claim(pvc_json("fits", 8, None)),
        claim(pvc_json("logs", 15, None)),
        claim(pvc_json("data", 75, None)),
    ];
    for i in 0..nodes {
        let node = format!("n{i}");
        let bound: [usize; 3] = if i % 2 == 0 { [7, 8, 9] } else { [0, 1, 2] };
        for j in 0..PVS_PER_NODE {
            let name = format!("pv-{node}-{j}");
            let other = bound.contains(&j).then(|| format!("other-{node}-{j}"));
            if let Some(c) = &other {
                claims.push(claim(pvc_json(c, 5, Some(&name))));
            }
            volumes.push(volume(pv_json(
                &name,
                &node,
                (j as u64 + 1) * 10,
                other.as_deref(),
            )));
        }
    }
    let nodes = (0..nodes).map(|i| {
        let n: Node = serde_json::from_value(node_json(i)).expect("valid node");
        node_labels(&n).expect("named node")
    });
    (volumes, claims, nodes.collect())
}

fn pod_json(claims: &[&str]) -> Value {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    json!({"metadata": {"name": "web-0", "namespace": "apps", "uid": "pod-uid"},
           "spec": {"containers": [{"name": "web", "image": "nginx"}], "volumes": volumes}})
}

/// The request body kube-scheduler sends, in `NodeNames` or `Nodes` form.
fn request_body(nodes: usize, names_mode: bool, claims: &[&str]) -> Vec<u8> {
    let body = if names_mode {
        let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
        json!({"Pod": pod_json(claims), "Nodes": null, "NodeNames": names})
    } else {
        let items: Vec<Value> = (0..nodes).map(node_json).collect();
        json!({"Pod": pod_json(claims), "Nodes": {"metadata": {}, "items": items}, "NodeNames": null})
    };
    serde_json::to_vec(&body).expect("serialisable")
}

// ---- measuring ----

struct Stats {
    p50: Duration,
    p99: Duration,
    max: Duration,
    n: usize,
    /// Every run in milliseconds, ascending, for the figures file.
    runs_ms: Vec<f64>,
}

fn stats(samples: Vec<Duration>) -> Stats {
    let runs_ms = figures::sorted(&figures::millis(&samples));
    let at = |q: f64| Duration::from_secs_f64(figures::percentile(&runs_ms, q) / 1e3);
    Stats {
        p50: at(0.5),
        p99: at(0.99),
        max: at(1.0),
        n: runs_ms.len(),
        runs_ms,
    }
}

/// A p99 is one number derived from many runs: a single measurement for the figures file.
fn figure_p99(key: &str, label: &str, stats: &Stats) {
    figure(key, label, "ms", &[stats.p99.as_secs_f64() * 1e3]);
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn row(cells: &[String]) {
    println!("| {} |", cells.join(" | "));
}

/// Times `run` on fresh input from `prepare` (untimed) `n` times, after a short warm-up.
fn time<I, O>(n: usize, mut prepare: impl FnMut() -> I, mut run: impl FnMut(I) -> O) -> Stats {
    for _ in 0..(n / 10).max(2) {
        std::hint::black_box(run(prepare()));
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let input = prepare();
        let t = Instant::now();
        std::hint::black_box(run(input));
        samples.push(t.elapsed());
    }
    stats(samples)
}

/// `time` for several closures taking turns, run by run; their stats in the same order.
fn time_turns<const K: usize>(n: usize, runs: [&dyn Fn(); K]) -> [Stats; K] {
    for _ in 0..(n / 10).max(2) {
        runs.iter().for_each(|run| run());
    }
    let mut samples: [Vec<Duration>; K] = std::array::from_fn(|_| Vec::with_capacity(n));
    for _ in 0..n {
        for (run, out) in runs.iter().zip(samples.iter_mut()) {
            let t = Instant::now();
            run();
            out.push(t.elapsed());
        }
    }
    samples.map(stats)
}

async fn time_http(n: usize, router: &axum::Router, path: &str, body: &Bytes) -> Stats {
    let send = || async {
        let req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .expect("request builds");
        let resp = router.clone().oneshot(req).await.expect("router answers");
        assert!(resp.status().is_success(), "status {}", resp.status());
        resp.into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .len()
    };
    for _ in 0..(n / 10).max(2) {
        send().await;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        std::hint::black_box(send().await);
        samples.push(t.elapsed());
    }
    stats(samples)
}

fn decode(body: &Bytes) -> ExtenderArgs {
    ExtenderArgs::decode(body.clone()).expect("valid ExtenderArgs")
}

// ---- the benchmarks ----

/// The pods measured: a label, the key part of their figures and their claims (see `cluster`).
const PODS: [(&str, &str, &[&str]); 3] = [
    ("1 claim, all fit", "1claim", &["fits"]),
    ("1 claim, half rejected", "1claim_halfrejected", &["data"]),
    ("2 claims, all fit", "2claims", &["fits", "logs"]),
];

fn latency(rt: &tokio::runtime::Runtime) {
    println!("### Filter and prioritize latency (ms)\n");
    println!(
        "pure: `verbs::filter` / `verbs::prioritize` on a decoded request. HTTP: `app(state).oneshot`, body in, \
         body out (decoding, hops to blocking threads, encoding). \"all fit\" is what kube-scheduler sends in \
         practice (VolumeBinding has already removed nodes without a matching PV); \"half rejected\" scans every \
         PV of the rejected nodes and writes a reason for each.\n"
    );
    let header = [
        "nodes",
        "mode",
        "pod",
        "path",
        "filter p50",
        "filter p99",
        "prioritize p50",
        "prioritize p99",
        "runs",
    ];
    row(&header.map(String::from));
    row(&["---"; 9].map(String::from));
    for (nodes, base) in [(100, 2000), (1000, 1000), (5000, 300)] {
        let cache = Arc::new(Cache::new(cluster(nodes), true));
        let router = app(AppState::new(cache.clone(), ServerConfig::default()));
        let snap = cache.load();
        for names_mode in [true, false] {
            let mode = if names_mode { "NodeNames" } else { "Nodes" };
            let n = iterations(if names_mode { base } else { base / 5 });
            for (pod, case, claims) in PODS {
                let body = Bytes::from(request_body(nodes, names_mode, claims));
                let filter = time(n, || decode(&body), |args| verbs::filter(args, &snap));
                let args = decode(&body);
                let prioritize = time(
                    n,
                    || (),
                    |()| verbs::prioritize(&args, &snap, Strategy::Binpack),
                );
                let (hf, hp) = rt.block_on(async {
                    (
                        time_http(n, &router, "/filter", &body).await,
                        time_http(n, &router, "/prioritize", &body).await,
                    )
                });
                for (path, f, p) in [("pure", filter, prioritize), ("HTTP", hf, hp)] {
                    for (verb, s) in [("filter", &f), ("prioritize", &p)] {
                        let (m, at) = (mode.to_lowercase(), path.to_lowercase());
                        let key = |q: &str| format!("extender.{verb}_{q}_{nodes}_{m}_{case}_{at}");
                        let label =
                            |q: &str| format!("{verb} {q}, {nodes} nodes, {mode}, {pod}, {path}");
                        figure(&key("p50"), &label("p50"), "ms", &s.runs_ms);
                        figure_p99(&key("p99"), &label(&format!("p99 of {} runs", s.n)), s);
                    }
                    row(&[
                        nodes.to_string(),
                        mode.into(),
                        pod.into(),
                        path.into(),
                        ms(f.p50),
                        ms(f.p99),
                        ms(p.p50),
                        ms(p.p99),
                        f.n.to_string(),
                    ]);
                }
            }
        }
    }
    println!();
}

fn throughput(rt: &tokio::runtime::Runtime) {
    let secs = env_f64("LOCALPV_BENCH_LOAD_SECS", 3.0);
    let workers = rt.metrics().num_workers();
    println!("### Filter requests per second under concurrent load (HTTP handler, NodeNames)\n");
    println!(
        "{workers} runtime worker threads; each client sends its next request when the last is answered.\n"
    );
    row(&["nodes", "clients", "requests/s", "requests"].map(String::from));
    row(&["---"; 4].map(String::from));
    for nodes in [1000, 5000] {
        let cache = Arc::new(Cache::new(cluster(nodes), true));
        let router = app(AppState::new(cache, ServerConfig::default()));
        let body = Bytes::from(request_body(nodes, true, &["data"]));
        for clients in [1, 8, 32] {
            let deadline = Instant::now() + Duration::from_secs_f64(secs);
            let started = Instant::now();
            let total: usize = rt.block_on(async {
                let tasks: Vec<_> = (0..clients)
                    .map(|_| {
                        let (router, body) = (router.clone(), body.clone());
                        tokio::spawn(async move {
                            let mut done = 0;
                            while Instant::now() < deadline {
                                let req = Request::post("/filter")
                                    .body(Body::from(body.clone()))
                                    .expect("request builds");
                                let resp = router.clone().oneshot(req).await.expect("answer");
                                resp.into_body().collect().await.expect("body");
                                done += 1;
                            }
                            done
                        })
                    })
                    .collect();
                let mut total = 0;
                for t in tasks {
                    total += t.await.expect("client task");
                }
                total
            });
            let rps = total as f64 / started.elapsed().as_secs_f64();
            // NB: the contract has no req/s unit; each filter request decides one pod, so pods/s is the same number.
            figure(
                &format!("extender.filter_rps_{nodes}_nodenames_{clients}clients"),
                &format!(
                    "filter requests per second, {nodes} nodes, NodeNames, concurrent clients: {clients}"
                ),
                "pods/s",
                &[rps],
            );
            row(&[
                nodes.to_string(),
                clients.to_string(),
                format!("{rps:.0}"),
                total.to_string(),
            ]);
        }
    }
    println!();
}

fn decoding() {
    println!("### Decoding a 5,000-Node `ExtenderArgs` (Nodes mode, ms)\n");
    let body = Bytes::from(request_body(5000, false, &["data"]));
    let mib = body.len() as f64 / (1 << 20) as f64;
    println!(
        "Body: {mib:.1} MiB, {:.1} KiB per Node.\n",
        body.len() as f64 / 5000.0 / 1024.0
    );
    row(&["decoder", "p50", "p99", "max", "runs"].map(String::from));
    row(&["---"; 5].map(String::from));
    let n = iterations(30);
    // NB: the two decoders take turns, run by run, so a slow spell of this shared machine hits both alike.
    let [lean, one] = time_turns(
        n,
        [&|| drop(std::hint::black_box(decode(&body))), &|| {
            let args = ExtenderArgs::decode_on(body.clone(), 1).expect("valid ExtenderArgs");
            drop(std::hint::black_box(args));
        }],
    );
    figure(
        "extender.decode_5000_nodes",
        &format!("decoding a 5,000-Node ExtenderArgs (Nodes mode, {mib:.1} MiB)"),
        "ms",
        &lean.runs_ms,
    );
    figure_p99(
        "extender.decode_5000_nodes_p99",
        &format!("decoding a 5,000-Node ExtenderArgs, p99 of {} runs", lean.n),
        &lean,
    );
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    row(&[
        format!(
            "`wire::ExtenderArgs::decode` (what the server runs: node list checked on {threads} threads, \
             nodes kept raw, labels built on demand)"
        ),
        ms(lean.p50),
        ms(lean.p99),
        ms(lean.max),
        lean.n.to_string(),
    ]);
    row(&[
        "the same on one thread (runs taking turns with the row above)".into(),
        ms(one.p50),
        ms(one.p99),
        ms(one.max),
        one.n.to_string(),
    ]);
    let full = time(
        n,
        || (),
        |()| {
            let v: Value = serde_json::from_slice(&body).expect("valid JSON");
            let list: k8s_openapi::List<Node> =
                serde_json::from_value(v["Nodes"].clone()).expect("valid NodeList");
            list.items.len()
        },
    );
    row(&[
        "full `v1.NodeList` via k8s-openapi (for comparison)".into(),
        ms(full.p50),
        ms(full.p99),
        ms(full.max),
        full.n.to_string(),
    ]);
    println!();
}

/// Resident set size in bytes, from `/proc/self/statm` (resident pages) and the page size the kernel reports.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm is readable");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm has a resident field");
    pages * page_size()
}

fn page_size() -> u64 {
    // No libc binding here: the first mapping's KernelPageSize in /proc/self/smaps is the base page size.
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    smaps
        .lines()
        .find_map(|l| l.strip_prefix("KernelPageSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(4096)
}

/// The extender rebuilds its snapshot from the watch stores after every burst of changes (100 ms quiet time):
/// while kube-scheduler binds pods, several times a second. The stores share their models with the snapshot
/// (`Arc`), as here.
fn rebuild() {
    println!("### Snapshot rebuild from the watch stores (ms)\n");
    row(&["nodes", "PVs", "claims", "p50", "p99", "runs"].map(String::from));
    row(&["---"; 6].map(String::from));
    for (nodes, base) in [(100, 200), (1000, 40), (5000, 10)] {
        let (volumes, claims, labels) = cluster_models(nodes);
        let volumes: Vec<Arc<Volume>> = volumes.into_iter().map(Arc::new).collect();
        let claims: Vec<Arc<Claim>> = claims.into_iter().map(Arc::new).collect();
        let labels: Vec<(String, Arc<Labels>)> =
            labels.into_iter().map(|(n, l)| (n, Arc::new(l))).collect();
        let stats = time(
            iterations(base),
            || (),
            |()| {
                let v = volumes.iter().cloned();
                Snapshot::new(v, claims.iter().cloned(), [class()], labels.iter().cloned())
            },
        );
        figure(
            &format!("extender.rebuild_{nodes}_nodes"),
            &format!("snapshot rebuild, {nodes} nodes x 10 PVs"),
            "ms",
            &stats.runs_ms,
        );
        row(&[
            nodes.to_string(),
            volumes.len().to_string(),
            claims.len().to_string(),
            ms(stats.p50),
            ms(stats.p99),
            stats.n.to_string(),
        ]);
    }
    println!();
}

fn memory() {
    const PVS: usize = 100_000;
    const PVCS: usize = 50_000;
    const NODES: usize = 5_000;
    println!("### Memory with {PVS} PVs and {PVCS} PVCs cached ({NODES} nodes)\n");
    println!(
        "Resident set growth (`/proc/self/statm`). The running extender holds the watch stores (compact models) \
         and one snapshot built from copies of them.\n"
    );
    let before = rss();
    let per_node = PVS / NODES;
    let mut volumes = Vec::with_capacity(PVS);
    let mut claims = Vec::with_capacity(PVCS);
    for i in 0..NODES {
        let node = format!("n{i}");
        for j in 0..per_node {
            let name = format!("pv-{node}-{j}");
            // Half of the PVs are bound: one claim each.
            let bound = (i * per_node + j).is_multiple_of(2);
            let c = format!("claim-{i}-{j}");
            if bound {
                claims.push(claim(pvc_json(&c, 5, Some(&name))));
            }
            let size = (j as u64 % 10 + 1) * 10;
            volumes.push(volume(pv_json(
                &name,
                &node,
                size,
                bound.then_some(c.as_str()),
            )));
        }
    }
    let nodes: Vec<_> = (0..NODES)
        .map(|i| {
            let n: Node = serde_json::from_value(node_json(i)).expect("valid node");
            node_labels(&n).expect("named node")
        })
        .collect();
    let models = rss();
    let snap = Snapshot::new(volumes.clone(), claims.clone(), [class()], nodes.clone());
    let with_snapshot = rss();
    let mib = |b: u64| format!("{:.1}", b as f64 / (1 << 20) as f64);
    row(&["what", "RSS growth (MiB)", "bytes per PV"].map(String::from));
    row(&["---"; 3].map(String::from));
    let per_pv = |b: u64| format!("{}", b / PVS as u64);
    row(&[
        "models (PVs, PVCs, node labels)".into(),
        mib(models - before),
        per_pv(models - before),
    ]);
    row(&[
        "snapshot (indexes and copies)".into(),
        mib(with_snapshot - models),
        per_pv(with_snapshot - models),
    ]);
    row(&[
        "total".into(),
        mib(with_snapshot - before),
        per_pv(with_snapshot - before),
    ]);
    println!();
    let in_mib = |b: u64| b as f64 / (1 << 20) as f64;
    for (part, what, bytes) in [
        ("models", "PV, PVC and node models", models - before),
        (
            "snapshot",
            "snapshot indexes and copies",
            with_snapshot - models,
        ),
        ("total", "models and snapshot", with_snapshot - before),
    ] {
        figure(
            &format!("extender.memory_{part}_100k_pvs"),
            &format!("memory of {what}, {PVS} PVs and {PVCS} PVCs cached"),
            "MiB",
            &[in_mib(bytes)],
        );
    }
    assert_eq!(snap.counts()[0].1, PVS);
    drop(snap);
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let only = std::env::var("LOCALPV_BENCH_ONLY").unwrap_or_default();
    let run = |part: &str| only.is_empty() || only.split(',').any(|p| p == part);
    println!("## localpv extender benchmarks\n");
    let knobs: String = [
        "LOCALPV_BENCH_SCALE",
        "LOCALPV_BENCH_LOAD_SECS",
        "LOCALPV_BENCH_ONLY",
    ]
    .iter()
    .filter_map(|k| Some(format!("{k}={} ", std::env::var(k).ok()?)))
    .collect();
    println!(
        "command: `{knobs}bench/extender.sh` (benches/extender.rs; unset knobs at their defaults)\n"
    );
    // Memory first, before other allocations leave freed heap behind that would absorb the growth.
    if run("memory") {
        memory();
    }
    if run("rebuild") {
        rebuild();
    }
    if run("decoding") {
        decoding();
    }
    if run("latency") {
        latency(&rt);
    }
    if run("throughput") {
        throughput(&rt);
    }
}
