//! Fleet simulation (issue 18 point 2): one API server serving many node agents, as a cluster of that size would,
//! measured from the API server's side. Not a timed test; `bench/fleet.sh` runs it. Per fleet, a fresh plane:
//!
//! ```text
//!  etcd + kube-apiserver + kube-controller-manager <── N agents, one per stand-in Node fleet-001.., each with D tmpfs disks,
//!        │  /metrics, /proc/<pid>          its own config and state dirs, HTTP port; all one client identity
//!        └── sampler: CPU, RSS, apiserver_request_total by verb, every LOCALPV_FLEET_SAMPLE_SECS
//! ```
//!
//! Phases: the API server alone with the N Nodes (baseline), the fleet started in batches until every disk is an
//! Available PV, steady state, then a rolling restart of every agent one by one, each waited for the way a
//! DaemonSet rollout waits (localpv: `/readyz` 200, its readiness probe; the reference provisioner has no probe,
//! so its container counts as ready once it runs: its HTTP port answers). The same for the reference provisioner
//! (sig-storage-local-static-provisioner, default `--discovery-period` 10 s): its configuration directory is the
//! constant `/etc/provisioner/config`, so each instance runs in a mount namespace of its own (`unshare -m`) where a
//! copy of `/etc` with that instance's directory is bound over `/etc`; the host's `/etc` is never touched.
//!
//! Requests are the API server's own count (`apiserver_request_total`, resource requests only, so the sampler's
//! `/metrics` reads are left out; a watch counts when it ends). Figures per 1,000 nodes are what the fleet adds
//! over the baseline, scaled linearly. Sizes: LOCALPV_FLEET_NODES (200), LOCALPV_FLEET_DISKS (3),
//! LOCALPV_FLEET_STEADY_SECS (300: a whole cycle of kube-rs watches, which end after 290 s; client-go's last 5-10
//! min), LOCALPV_FLEET_BASELINE_SECS (60), LOCALPV_FLEET_SAMPLE_SECS (10), LOCALPV_FLEET_BATCH (10 agents started
//! at once), LOCALPV_FLEET_KINDS (`localpv,reference`), LOCALPV_FLEET_LSP (the reference binary; bench/fleet.sh
//! builds it). With LOCALPV_BENCH_FIGURES set, figures are appended there as JSON lines.

mod common;
use localpv_test_support as support;
use support::objects::Pv;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use common::figures::{Spread, spread};
use common::process::{cpu_seconds, process_with_arg, rss_mib};
use support::agent::{http_get, install_crd, localpv_bin};
use support::cluster::{ControlPlane, Options, free_port};
use support::disks::Mount;
use support::nodes::create_node;
use support::proc::Component;

const CLASS: &str = "local-storage";
/// The chart's admission policy (release `localpv`) the narrow fleet runs under.
const POLICY: &str = "localpv-discovery-dirs";
/// The namespace the chart's node RBAC is rendered into for the narrow fleet.
const NAMESPACE: &str = "localpv-system";
/// How the reference provisioner finds its configuration, whatever its flags say.
const LSP_CONFIG: &str = "/etc/provisioner/config";

fn env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Sizes {
    nodes: usize,
    disks: usize,
    steady: u64,
    baseline: u64,
    every: u64,
    batch: usize,
    /// PVs of nodes that run no agent, made before the fleet starts.
    foreign: usize,
    /// Foreign PVs created (and as many deleted) per second during the churn phase, and for how long.
    churn_rate: usize,
    churn: u64,
    kinds: Vec<Kind>,
}

impl Sizes {
    fn from_env() -> Sizes {
        let kinds = std::env::var("LOCALPV_FLEET_KINDS")
            .unwrap_or_else(|_| "localpv,localpv-narrow,reference".into());
        Sizes {
            nodes: env("LOCALPV_FLEET_NODES", 200).max(1),
            disks: env("LOCALPV_FLEET_DISKS", 3).max(1),
            steady: env("LOCALPV_FLEET_STEADY_SECS", 300) as u64,
            baseline: env("LOCALPV_FLEET_BASELINE_SECS", 60) as u64,
            every: env("LOCALPV_FLEET_SAMPLE_SECS", 10).max(1) as u64,
            batch: env("LOCALPV_FLEET_BATCH", 10).max(1),
            foreign: env("LOCALPV_FLEET_FOREIGN_PVS", 20_000),
            churn_rate: env("LOCALPV_FLEET_CHURN_RATE", 20),
            churn: env("LOCALPV_FLEET_CHURN_SECS", 60) as u64,
            kinds: kinds
                .split(',')
                .map(|k| match k.trim() {
                    "localpv" => Kind::Localpv,
                    "localpv-narrow" => Kind::Narrow,
                    "reference" => Kind::Reference,
                    other => panic!("LOCALPV_FLEET_KINDS: unknown kind {other:?}"),
                })
                .collect(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "LOCALPV_FLEET_NODES={} LOCALPV_FLEET_DISKS={} LOCALPV_FLEET_STEADY_SECS={} LOCALPV_FLEET_BASELINE_SECS={} \
             LOCALPV_FLEET_SAMPLE_SECS={} LOCALPV_FLEET_BATCH={} LOCALPV_FLEET_FOREIGN_PVS={} \
             LOCALPV_FLEET_CHURN_RATE={} LOCALPV_FLEET_CHURN_SECS={}",
            self.nodes,
            self.disks,
            self.steady,
            self.baseline,
            self.every,
            self.batch,
            self.foreign,
            self.churn_rate,
            self.churn
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Localpv,
    /// localpv with the chart's admission policy in force: each agent watches only its own node's PVs.
    Narrow,
    Reference,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Localpv => "localpv",
            Kind::Narrow => "localpv-narrow",
            Kind::Reference => "reference",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Kind::Localpv => "localpv (watch of every PV)",
            Kind::Narrow => "localpv (admission policy, own PVs)",
            Kind::Reference => "reference (10 s discovery)",
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Figures

/// `common::figures::figure`, for samples a phase may not have (one shorter than a sample interval).
fn figure(key: &str, label: &str, unit: &str, samples: &[f64]) {
    if !samples.is_empty() {
        common::figures::figure(key, label, unit, samples);
    }
}

fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        0.0
    } else {
        common::figures::median(samples)
    }
}

/// Bytes per second as "median (min-max)" KiB/s.
fn kib(samples: &[f64]) -> String {
    let k: Vec<f64> = samples.iter().map(|b| b / 1024.0).collect();
    cell(&k, 0)
}

/// "median (min-max)" with `digits` decimals.
fn cell(samples: &[f64], digits: usize) -> String {
    if samples.is_empty() {
        return "-".into();
    }
    let Spread {
        median, min, max, ..
    } = spread(samples);
    format!("{median:.digits$} ({min:.digits$}-{max:.digits$})")
}

// ---------------------------------------------------------------------------------------------------------------
// What the API server did: samples and the intervals between them

struct Probe {
    client: kube::Client,
    apiserver: u32,
    etcd: u32,
}

#[derive(Clone)]
struct Sample {
    at: Instant,
    api_cpu: f64,
    etcd_cpu: f64,
    api_rss: f64,
    /// Resource requests so far, by verb (apiserver_request_total).
    requests: BTreeMap<String, f64>,
    /// Watches open now (apiserver_longrunning_requests, verb WATCH).
    watches: f64,
    /// Bytes sent so far: responses (apiserver_response_sizes) and watch events (apiserver_watch_events_sizes).
    bytes: f64,
}

/// The value of label `name` in a Prometheus sample line's label set.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// (requests by verb, open watches, bytes sent) from the API server's metrics text.
fn parse_metrics(text: &str) -> (BTreeMap<String, f64>, f64, f64) {
    let mut requests = BTreeMap::new();
    let mut watches = 0.0;
    let mut bytes = 0.0;
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let resource = label(labels, "resource").unwrap_or_default();
        let verb = label(labels, "verb").unwrap_or_default();
        if name == "apiserver_request_total" && !resource.is_empty() {
            *requests.entry(verb.to_lowercase()).or_insert(0.0) += value;
        } else if name == "apiserver_longrunning_requests" && verb == "WATCH" {
            watches += value;
        } else if name == "apiserver_response_sizes_sum"
            || name == "apiserver_watch_events_sizes_sum"
        {
            bytes += value;
        }
    }
    (requests, watches, bytes)
}

impl Probe {
    fn find(cp: &ControlPlane) -> Probe {
        let cert_dir = format!("--cert-dir={}", cp.dir.join("apiserver-certs").display());
        let data_dir = format!("--data-dir={}", cp.dir.join("etcd").display());
        Probe {
            client: cp.client(),
            apiserver: process_with_arg(&cert_dir)
                .map(|(pid, _)| pid)
                .expect("the plane's kube-apiserver process"),
            etcd: process_with_arg(&data_dir)
                .map(|(pid, _)| pid)
                .expect("the plane's etcd process"),
        }
    }

    /// The API server's `/metrics` now, as text.
    async fn metrics(&self) -> String {
        let req = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("request builds");
        self.client
            .request_text(req)
            .await
            .expect("kube-apiserver serves /metrics to the admin")
    }

    async fn sample(&self) -> Sample {
        let text = self.metrics().await;
        let (requests, watches, bytes) = parse_metrics(&text);
        Sample {
            at: Instant::now(),
            api_cpu: cpu_seconds(self.apiserver),
            etcd_cpu: cpu_seconds(self.etcd),
            api_rss: rss_mib(self.apiserver),
            requests,
            watches,
            bytes,
        }
    }

    /// The live heap in MiB: the API server collects garbage (`/debug/pprof/heap?gc=1`, served with profiling on,
    /// its default), then `go_memstats_heap_alloc_bytes` is what survived.
    /// With `LOCALPV_FLEET_PROFILES` set to a directory, the heap profile is kept there as `<name>.pb.gz` (for `go
    /// tool pprof -top -diff_base`).
    async fn live_heap_mib(&self, name: &str) -> f64 {
        let gc = http::Request::get("/debug/pprof/heap?gc=1")
            .body(Vec::new())
            .expect("request builds");
        let answered = self.client.request_stream(gc).await;
        let profile = answered.expect("kube-apiserver serves /debug/pprof/heap to the admin");
        if let Ok(dir) = std::env::var("LOCALPV_FLEET_PROFILES") {
            let mut bytes = Vec::new();
            let mut reader = profile;
            futures::AsyncReadExt::read_to_end(&mut reader, &mut bytes)
                .await
                .expect("the heap profile reads");
            std::fs::create_dir_all(&dir).expect("profile directory");
            std::fs::write(PathBuf::from(dir).join(format!("{name}.pb.gz")), bytes)
                .expect("profile written");
        }
        self.metrics()
            .await
            .lines()
            .find_map(|l| l.strip_prefix("go_memstats_heap_alloc_bytes "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("kube-apiserver reports go_memstats_heap_alloc_bytes")
            / (1024.0 * 1024.0)
    }

    /// Samples now and every `every` seconds for `secs`.
    async fn window(&self, secs: u64, every: u64) -> Vec<Sample> {
        let start = Instant::now();
        let mut out = vec![self.sample().await];
        while start.elapsed() < Duration::from_secs(secs) {
            tokio::time::sleep(Duration::from_secs(every)).await;
            out.push(self.sample().await);
        }
        out
    }
}

/// What one phase looked like, per sampling interval.
#[derive(Default)]
struct Phase {
    api_cpu: Vec<f64>,
    etcd_cpu: Vec<f64>,
    api_rss: Vec<f64>,
    rps: Vec<f64>,
    rps_by_verb: BTreeMap<String, Vec<f64>>,
    watches: Vec<f64>,
    /// Bytes sent per second, per interval.
    bytes: Vec<f64>,
    secs: f64,
    /// The API server's live heap right after a garbage collection it was asked for at the end of the phase
    /// (MiB; baseline and steady state only): resident memory moves by tens of MiB with the collector's timing.
    live_heap: Vec<f64>,
}

impl Phase {
    fn of(samples: &[Sample]) -> Phase {
        let mut p = Phase::default();
        let verbs: BTreeSet<&String> = samples.iter().flat_map(|s| s.requests.keys()).collect();
        for w in samples.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let dt = (b.at - a.at).as_secs_f64();
            if dt <= 0.0 {
                continue;
            }
            p.secs += dt;
            p.api_cpu.push((b.api_cpu - a.api_cpu) / dt);
            p.bytes.push((b.bytes - a.bytes).max(0.0) / dt);
            p.etcd_cpu.push((b.etcd_cpu - a.etcd_cpu) / dt);
            let mut total = 0.0;
            for verb in &verbs {
                let get = |s: &Sample| s.requests.get(*verb).copied().unwrap_or(0.0);
                let r = (get(b) - get(a)).max(0.0) / dt;
                total += r;
                p.rps_by_verb.entry((*verb).clone()).or_default().push(r);
            }
            p.rps.push(total);
        }
        p.api_rss = samples.iter().map(|s| s.api_rss).collect();
        p.watches = samples.iter().map(|s| s.watches).collect();
        p
    }

    /// Mean requests per second over the whole phase, by verb (a verb rare enough to miss most intervals still
    /// counts).
    fn mean_rps(&self, verb: &str) -> f64 {
        let v = self.rps_by_verb.get(verb).map(Vec::as_slice).unwrap_or(&[]);
        if v.is_empty() {
            return 0.0;
        }
        v.iter().sum::<f64>() / v.len() as f64
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The fleet

struct Member {
    node: String,
    port: u16,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    process: Option<Component>,
}

struct Fleet {
    kind: Kind,
    members: Vec<Member>,
    taken: Ports,
    _mounts: Vec<Mount>,
}

/// Ports handed out to this fleet, so no two members are given the same one.
#[derive(Default)]
struct Ports(BTreeSet<u16>);

impl Ports {
    fn next(&mut self) -> u16 {
        loop {
            let port = free_port();
            if self.0.insert(port) {
                return port;
            }
        }
    }
}

impl Member {
    /// Points the member's listen flag at `port`.
    fn move_port(&mut self, port: u16) {
        let old = format!("127.0.0.1:{}", self.port);
        for a in self.args.iter_mut() {
            if a.starts_with("--listen") && a.ends_with(&old) {
                *a = a.replace(&old, &format!("127.0.0.1:{port}"));
            }
        }
        self.port = port;
    }
}

fn node_name(i: usize) -> String {
    format!("fleet-{:03}", i + 1)
}

impl Fleet {
    /// Prepares (mounts disks, writes configurations) without starting anything; member `i` runs with
    /// `kubeconfigs[i]`.
    fn prepare(kind: Kind, cp: &ControlPlane, sizes: &Sizes, kubeconfigs: &[PathBuf]) -> Fleet {
        let lsp = (kind == Kind::Reference).then(lsp_binary);
        let etc = (kind == Kind::Reference).then(|| lsp_etc(cp));
        let mut mounts = Vec::new();
        let mut members = Vec::new();
        let mut taken = Ports::default();
        for (i, kubeconfig) in kubeconfigs.iter().enumerate().take(sizes.nodes) {
            let node = node_name(i);
            let root = cp.dir.join("fleet").join(&node);
            let disks = root.join("disks");
            for d in 0..sizes.disks {
                mounts.push(Mount::tmpfs(
                    &disks.join(format!("d{d}")),
                    "16M",
                    cp.reaper(),
                ));
            }
            let class = format!(
                "{CLASS}:\n  hostDir: {d}\n  mountDir: {d}\n",
                d = disks.display()
            );
            let port = taken.next();
            let kubeconfig = kubeconfig.display().to_string();
            let (program, args, env) = match kind {
                Kind::Localpv | Kind::Narrow => {
                    let config = root.join("config.yaml");
                    let text = format!("storageClassMap:\n{}", indent(&class));
                    std::fs::write(&config, text).expect("agent config written");
                    let mut args = vec![
                        "node".to_string(),
                        format!("--config={}", config.display()),
                        format!("--node-name={node}"),
                        format!("--listen=127.0.0.1:{port}"),
                        format!("--state-dir={}", root.join("state").display()),
                    ];
                    if kind == Kind::Narrow {
                        args.push(format!("--admission-policy={POLICY}"));
                    }
                    let env = vec![
                        ("KUBECONFIG".to_string(), kubeconfig),
                        ("RUST_LOG".to_string(), "info".to_string()),
                    ];
                    (localpv_bin(), args, env)
                }
                Kind::Reference => {
                    let config = root.join("config");
                    std::fs::create_dir_all(&config).expect("config dir");
                    std::fs::write(config.join("storageClassMap"), class).expect("config written");
                    let lsp = lsp.clone().expect("reference binary");
                    let etc = etc.clone().expect("etc copy");
                    (
                        PathBuf::from("unshare"),
                        lsp_args(&etc, &config, &lsp, port),
                        vec![
                            ("KUBECONFIG".to_string(), kubeconfig),
                            ("MY_NODE_NAME".to_string(), node.clone()),
                            ("MY_NAMESPACE".to_string(), "default".to_string()),
                        ],
                    )
                }
            };
            members.push(Member {
                node,
                port,
                program,
                args,
                env,
                process: None,
            });
        }
        Fleet {
            kind,
            members,
            taken,
            _mounts: mounts,
        }
    }

    fn spawn(&mut self, i: usize, cp: &ControlPlane) {
        let m = &mut self.members[i];
        let env: Vec<(&str, &str)> = m
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let name = format!("fleet-{}-{}", self.kind.key(), m.node);
        m.process = Some(Component::spawn_with_env(
            &name,
            &m.program,
            &m.args,
            &env,
            &cp.log_dir(),
            cp.reaper(),
        ));
    }

    /// Waits until member `i` counts as ready for a rollout (see the module doc). A member that lost its port to
    /// another process (free ports are only free when asked for) gets a new one and starts again.
    async fn wait_ready(&mut self, i: usize, cp: &ControlPlane) {
        let path = match self.kind {
            Kind::Localpv | Kind::Narrow => "/readyz",
            Kind::Reference => "/metrics",
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let m = &mut self.members[i];
            let p = m.process.as_mut().expect("started");
            if !p.running() {
                let log = p.tail(40);
                assert!(
                    log.to_lowercase().contains("address already in use"),
                    "{} exited:\n{log}",
                    p.name
                );
                m.move_port(self.taken.next());
                self.spawn(i, cp);
                continue;
            }
            // NB: after the process check, so an answer from whoever else holds the port never counts.
            if matches!(http_get(m.port, path), Some((200, _))) && p.running() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after 180 s:\n{}",
                p.name,
                p.tail(40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts every member, `batch` at a time, each batch waited for.
    async fn start(&mut self, cp: &ControlPlane, batch: usize) {
        let n = self.members.len();
        for chunk in (0..n).collect::<Vec<_>>().chunks(batch) {
            for &i in chunk {
                self.spawn(i, cp);
            }
            for &i in chunk {
                self.wait_ready(i, cp).await;
            }
        }
        // A member whose port was taken after it answered once is started again on another one.
        for i in 0..n {
            self.wait_ready(i, cp).await;
        }
    }

    /// Restarts every member one after the other (SIGTERM, wait for the exit, start, wait until ready).
    async fn rolling_restart(&mut self, cp: &ControlPlane) {
        for i in 0..self.members.len() {
            if let Some(mut p) = self.members[i].process.take() {
                p.stop(Duration::from_secs(30));
            }
            self.spawn(i, cp);
            self.wait_ready(i, cp).await;
        }
    }

    fn pids(&self) -> Vec<u32> {
        let ps = self.members.iter().filter_map(|m| m.process.as_ref());
        ps.filter_map(Component::pid).collect()
    }

    fn stop(&mut self) {
        for m in &self.members {
            if let Some(p) = &m.process {
                p.signal(nix::sys::signal::Signal::SIGTERM);
            }
        }
        for m in &mut self.members {
            if let Some(mut p) = m.process.take() {
                p.stop(Duration::from_secs(10));
            }
        }
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn lsp_binary() -> PathBuf {
    let path = std::env::var_os("LOCALPV_FLEET_LSP").map(PathBuf::from);
    match path {
        Some(p) if p.is_file() => p,
        _ => panic!(
            "missing prerequisite: LOCALPV_FLEET_LSP must name the reference provisioner's binary \
             (bench/fleet.sh builds it from ../shared/peers with bench/peers.sh build-lsp)"
        ),
    }
}

/// A copy of the host's `/etc` with an empty `provisioner/config`, bound over `/etc` inside each reference
/// instance's mount namespace (the host's `/etc` is never written).
fn lsp_etc(cp: &ControlPlane) -> PathBuf {
    let etc = cp.dir.join("lsp-etc");
    let out = std::process::Command::new("cp")
        .args(["-a", "/etc"])
        .arg(&etc)
        .output()
        .expect("cp runs");
    assert!(out.status.success(), "cp -a /etc failed: {out:?}");
    std::fs::create_dir_all(etc.join(LSP_CONFIG.trim_start_matches("/etc/")))
        .expect("provisioner config mount point in the copy");
    etc
}

/// `unshare -m` arguments that run the reference provisioner with `config` as its `/etc/provisioner/config`.
fn lsp_args(etc: &Path, config: &Path, lsp: &Path, port: u16) -> Vec<String> {
    // NB: unshare's own default propagation for -m is private: nothing bound here reaches the host.
    let script = format!(
        "mount --bind \"$1\" /etc && mount --bind \"$2\" {LSP_CONFIG} && shift 2 && exec \"$@\""
    );
    vec![
        "-m".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        script,
        "sh".into(),
        etc.display().to_string(),
        config.display().to_string(),
        lsp.display().to_string(),
        format!("--listen-address=127.0.0.1:{port}"),
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// One fleet on one plane

struct Outcome {
    kind: Kind,
    baseline: Phase,
    /// The churn with no agent running (what the churn itself costs).
    churn_alone: Phase,
    steady: Phase,
    churn: Phase,
    restart: Phase,
    publish_secs: f64,
    restart_secs: f64,
    agents_rss: f64,
    pvs_changed: usize,
}

async fn pv_names(client: &kube::Client) -> BTreeMap<String, String> {
    let list = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("PVs list");
    list.items
        .into_iter()
        .map(|p| {
            let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
            (p.metadata.name.unwrap_or_default(), phase)
        })
        .collect()
}

async fn wait_pvs(client: &kube::Client, want: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let pvs = pv_names(client).await;
        let available = pvs.values().filter(|p| *p == "Available").count();
        if available >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {available} of {want} PVs Available after 900 s"
        );
        // NB: a list of every PV (tens of thousands) is work for the API server too: not too often.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// A local PV of a node that runs no agent (made by another provisioner, say): what a large cluster holds
/// besides the fleet's own PVs. `set` names the batch (`ghost`, `churn`).
fn foreign_pv(set: &str, i: usize) -> PersistentVolume {
    let node = format!("{set}-node-{:04}", i % 1000);
    Pv::local(&format!("{set}-pv-{i:06}"), &node)
        .capacity("100Gi")
        .reclaim("Retain")
        .class("other")
        .path(&format!("/mnt/other/vol{i}"))
        .label("app.kubernetes.io/managed-by", "other")
        .provisioned_by("other-provisioner")
        .annotation(
            "example.com/disk",
            &format!("nvme-{i}-serial-0123456789abcdef"),
        )
        .build()
}

async fn create_foreign(client: &kube::Client, set: &str, range: std::ops::Range<usize>) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &foreign_pv(set, i))
                    .await
                    .expect("foreign PV created")
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

async fn delete_foreign(client: &kube::Client, set: &str, range: std::ops::Range<usize>) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("{set}-pv-{i:06}");
                api.delete(&name, &Default::default())
                    .await
                    .expect("churn PV deleted")
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Creates `rate` foreign PVs a second and deletes those of the second before, for `secs`.
async fn churn(client: &kube::Client, set: &str, rate: usize, secs: u64) {
    let start = Instant::now();
    let mut second = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        let tick = Instant::now();
        create_foreign(client, set, second * rate..(second + 1) * rate).await;
        if second > 0 {
            delete_foreign(client, set, (second - 1) * rate..second * rate).await;
        }
        second += 1;
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed())).await;
    }
    // NB: the last second's PVs go too, so counts of Available PVs stay the fleet's own.
    delete_foreign(client, set, second.saturating_sub(1) * rate..second * rate).await;
}

/// The chart's admission policy (covering every fleet node's discovery directory) and node RBAC, applied; and
/// one kubeconfig per node for the node agent's ServiceAccount with a token bound to a pod on that node (the pods
/// are created, never run), as the DaemonSet's pods get them.
async fn install_policy(cp: &ControlPlane, nodes: usize) -> Vec<PathBuf> {
    let bin = PathBuf::from(
        std::env::var("LOCALPV_K8S_BIN_DIR").expect("LOCALPV_K8S_BIN_DIR (bench/fleet.sh sets it)"),
    );
    let classes = json!([{"name": CLASS, "hostDir": cp.dir.join("fleet").display().to_string()}]);
    let out = std::process::Command::new(bin.join("helm"))
        .args([
            "template",
            "localpv",
            "charts/localpv",
            "--namespace",
            NAMESPACE,
        ])
        .arg(format!("--set-json=classes={classes}"))
        .args(["--show-only", "templates/admission-policy.yaml"])
        .args(["--show-only", "templates/node-rbac.yaml"])
        .output()
        .expect("helm runs");
    assert!(out.status.success(), "helm template failed: {out:?}");
    let rendered = cp.dir.join("policy.yaml");
    std::fs::write(&rendered, &out.stdout).expect("written");
    cp.kubectl(&["create", "namespace", NAMESPACE]);
    cp.kubectl(&["apply", "-f", rendered.to_str().expect("utf-8")]);
    pod_bound_kubeconfigs(cp, "localpv-node", nodes).await
}

/// One kubeconfig per node for ServiceAccount `account` in `NAMESPACE`, with a token bound to a pod on that node.
async fn pod_bound_kubeconfigs(cp: &ControlPlane, account: &str, nodes: usize) -> Vec<PathBuf> {
    futures::stream::iter(0..nodes)
        .map(|i| support::sa::node_agent_kubeconfig(cp, NAMESPACE, account, node_name(i)))
        .buffered(16)
        .collect()
        .await
}

/// One kubeconfig per node for a ServiceAccount bound to cluster-admin, with a token bound to a pod on that node.
async fn pod_bound_admins(cp: &ControlPlane, nodes: usize) -> Vec<PathBuf> {
    cp.kubectl(&["create", "namespace", NAMESPACE]);
    cp.kubectl(&["-n", NAMESPACE, "create", "serviceaccount", "fleet-agent"]);
    let subject = format!("--serviceaccount={NAMESPACE}:fleet-agent");
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "fleet-agent",
        "--clusterrole=cluster-admin",
        &subject,
    ]);
    pod_bound_kubeconfigs(cp, "fleet-agent", nodes).await
}

/// Waits until every agent of the fleet watches only its own PVs.
async fn wait_narrow(fleet: &Fleet) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let wide: Vec<&str> = fleet
            .members
            .iter()
            .filter(|m| {
                let text = http_get(m.port, "/metrics")
                    .map(|(_, t)| t)
                    .unwrap_or_default();
                !text.lines().any(|l| l == "localpv_node_pv_watch_narrow 1")
            })
            .map(|m| m.node.as_str())
            .collect();
        if wide.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "agents still wide after 300 s: {wide:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Samples the probe every `every` seconds while `work` runs.
async fn sampled<F: std::future::Future<Output = ()>>(
    probe: &Arc<Probe>,
    every: u64,
    work: F,
) -> Phase {
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (probe, done) = (probe.clone(), done.clone());
        tokio::spawn(async move {
            let mut out = vec![probe.sample().await];
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(every)).await;
                out.push(probe.sample().await);
            }
            out
        })
    };
    work.await;
    done.store(true, Ordering::Relaxed);
    Phase::of(&sampler.await.expect("sampler task"))
}

async fn run_fleet(kind: Kind, sizes: &Sizes) -> Outcome {
    eprintln!("== {}: control plane, {} Nodes", kind.key(), sizes.nodes);
    // kube-controller-manager too, as in any cluster: its PV binder is what makes a new PV Available.
    // NB: the PV binder makes every foreign PV Available (one status update each); at the default client limit
    // of 20 requests/s that alone took 17 minutes for 20,000 PVs.
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        controller_manager_qps: Some(1000),
        ..Options::default()
    })
    .await;
    install_crd(&cp).await;
    let client = cp.client();
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": CLASS}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
    }))
    .expect("storage class literal");
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("storage class created");
    futures::stream::iter(0..sizes.nodes)
        .map(|i| {
            let client = client.clone();
            async move { create_node(&client, &node_name(i), &[]).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    eprintln!(
        "== {}: {} PVs of nodes without an agent",
        kind.key(),
        sizes.foreign
    );
    create_foreign(&client, "ghost", 0..sizes.foreign).await;
    // NB: the PV binder makes each of them Available (a status update each): done before the baseline.
    wait_pvs(&client, sizes.foreign, "foreign PVs").await;
    // One ServiceAccount for the whole fleet and a token bound to a pod on each node, as a DaemonSet's pods get
    // them, for every kind: the API server keeps per-token state (its authentication cache), which a certificate
    // shared by the fleet would leave out. Under the policy, the chart's node role; else cluster-admin.
    let kubeconfigs = if kind == Kind::Narrow {
        install_policy(&cp, sizes.nodes).await
    } else {
        pod_bound_admins(&cp, sizes.nodes).await
    };
    let probe = Arc::new(Probe::find(&cp));
    eprintln!("== {}: baseline {} s", kind.key(), sizes.baseline);
    let mut baseline = Phase::of(&probe.window(sizes.baseline, sizes.every).await);
    baseline.live_heap = vec![
        probe
            .live_heap_mib(&format!("{}-baseline", kind.key()))
            .await,
    ];
    // The same churn with no agent yet: what the churn itself costs, which the fleet's figures leave out.
    let churn_alone = sampled(
        &probe,
        sizes.every,
        churn(&client, "churn-alone", sizes.churn_rate, sizes.churn),
    )
    .await;

    let mut fleet = Fleet::prepare(kind, &cp, sizes, &kubeconfigs);
    let want = sizes.foreign + sizes.nodes * sizes.disks;
    eprintln!("== {}: starting {} agents", kind.key(), sizes.nodes);
    let start = Instant::now();
    fleet.start(&cp, sizes.batch).await;
    wait_pvs(&client, want, "after start").await;
    let publish_secs = start.elapsed().as_secs_f64();
    if kind == Kind::Narrow {
        wait_narrow(&fleet).await;
        eprintln!(
            "== {}: every agent narrow after {:.0} s",
            kind.key(),
            start.elapsed().as_secs_f64()
        );
    }
    // Let start-up work (first full passes, inventory writes) finish before steady state.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let before = pv_names(&client).await;

    eprintln!("== {}: steady state {} s", kind.key(), sizes.steady);
    let mut steady = Phase::of(&probe.window(sizes.steady, sizes.every).await);
    steady.live_heap = vec![probe.live_heap_mib(&format!("{}-steady", kind.key())).await];
    let agents_rss = fleet.pids().into_iter().map(rss_mib).sum::<f64>();

    eprintln!(
        "== {}: churn {} s, {} foreign PVs/s",
        kind.key(),
        sizes.churn,
        sizes.churn_rate
    );
    let churned = sampled(
        &probe,
        sizes.every,
        churn(&client, "churn", sizes.churn_rate, sizes.churn),
    )
    .await;

    eprintln!("== {}: rolling restart", kind.key());
    let start = Instant::now();
    let restart = sampled(&probe, sizes.every, fleet.rolling_restart(&cp)).await;
    let restart_secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2 * sizes.every)).await;
    let after = pv_names(&client).await;
    // NB: the churn's own PVs (the last second's are left) are not the restart's doing.
    let pvs_changed = before
        .iter()
        .filter(|(name, phase)| after.get(*name) != Some(phase))
        .count()
        + after
            .keys()
            .filter(|n| !before.contains_key(*n) && !n.starts_with("churn-"))
            .count();
    fleet.stop();
    drop(fleet);
    drop(cp);
    Outcome {
        kind,
        baseline,
        churn_alone,
        steady,
        churn: churned,
        restart,
        publish_secs,
        restart_secs,
        agents_rss,
        pvs_changed,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Report

/// What the fleet adds over its plane's baseline, per 1,000 nodes (linear).
fn per_1000(fleet: &[f64], baseline: &[f64], nodes: usize) -> f64 {
    (median(fleet) - median(baseline)) * 1000.0 / nodes as f64
}

/// The header of a table with one column per kind measured.
fn print_kinds_header(outcomes: &[Outcome]) {
    let mut header = "| measure |".to_string();
    let mut rule = "| --- |".to_string();
    for o in outcomes {
        header += &format!(" {} |", o.kind.title());
        rule += " --- |";
    }
    println!("{header}\n{rule}");
}

/// What the rolling restart sent beyond the baseline, per agent restarted.
fn restart_bytes_per_agent(o: &Outcome, nodes: usize) -> f64 {
    let extra = (o.restart.bytes.iter().sum::<f64>() / o.restart.bytes.len().max(1) as f64
        - median(&o.baseline.bytes))
    .max(0.0);
    extra * o.restart_secs / nodes as f64
}

/// A written model: the measured figures extrapolated to `NODES` nodes and `PVS` PVs, each by the quantity it
/// grows with (see the printed assumptions).
fn model(outcomes: &[Outcome], sizes: &Sizes) {
    const NODES: f64 = 5000.0;
    const PVS: f64 = 50_000.0;
    let n = sizes.nodes as f64;
    let pvs_run = (sizes.foreign + sizes.nodes * sizes.disks) as f64;
    println!(
        "\n#### Model: {NODES:.0} nodes and {PVS:.0} PVs, from the measured slopes\n\n\
         Assumptions, each from what the code does: memory and steady CPU grow with the number of agents (each holds \
         its watches; nothing is sent at rest). A restarted agent's first list is every PV of the cluster when it \
         watches every PV (localpv wide, the reference provisioner's informer), so the bytes of a rolling restart \
         grow with nodes x PVs; under the admission policy it is the agent's own PVs, so they grow with nodes only. \
         During churn elsewhere the API server sends each PV event to every watch of every PV (nodes x events) and to \
         no narrow agent. Measured here: {n:.0} agents, {pvs_run:.0} PVs, {} foreign PVs created and deleted per \
         second.\n",
        sizes.churn_rate
    );
    print_kinds_header(outcomes);
    let scale = NODES / n;
    type ModelRow<'a> = (&'a str, Box<dyn Fn(&Outcome) -> String + 'a>);
    let rows: Vec<ModelRow> = vec![
        (
            "API server memory added (GiB)",
            Box::new(|o| {
                let mib = (median(&o.steady.api_rss) - median(&o.baseline.api_rss)) * scale;
                format!("{:.1}", mib / 1024.0)
            }),
        ),
        (
            "API server CPU added, steady (cores)",
            Box::new(|o| {
                format!(
                    "{:.3}",
                    (median(&o.steady.api_cpu) - median(&o.baseline.api_cpu)) * scale
                )
            }),
        ),
        (
            "bytes sent by one rolling restart of every agent (GiB)",
            Box::new(|o| {
                let per_agent = restart_bytes_per_agent(o, sizes.nodes);
                let grows = if o.kind == Kind::Narrow {
                    1.0
                } else {
                    PVS / pvs_run
                };
                format!("{:.1}", per_agent * grows * NODES / (1u64 << 30) as f64)
            }),
        ),
        (
            "bytes sent per second during the same churn (MiB/s)",
            Box::new(|o| {
                let extra = (median(&o.churn.bytes) - median(&o.churn_alone.bytes)).max(0.0);
                format!("{:.1}", extra * scale / (1u64 << 20) as f64)
            }),
        ),
    ];
    for (name, f) in &rows {
        let mut line = format!("| {name} |");
        for o in outcomes {
            line += &format!(" {} |", f(o));
        }
        println!("{line}");
    }
}

fn emit(o: &Outcome, nodes: usize) {
    let k = o.kind.key();
    let t = o.kind.title();
    figure(
        &format!("fleet.{k}.baseline.apiserver_cpu"),
        &format!("API server CPU, {nodes} Nodes and no agents ({t} plane)"),
        "cores",
        &o.baseline.api_cpu,
    );
    figure(
        &format!("fleet.{k}.baseline.apiserver_rss"),
        &format!("API server RSS, {nodes} Nodes and no agents ({t} plane)"),
        "MiB",
        &o.baseline.api_rss,
    );
    figure(
        &format!("fleet.{k}.baseline.rps"),
        &format!("API server requests/s, {nodes} Nodes and no agents ({t} plane)"),
        "req/s",
        &o.baseline.rps,
    );
    for (phase, p) in [
        ("steady", &o.steady),
        ("churn", &o.churn),
        ("restart", &o.restart),
    ] {
        // NB: the churn's own cost (measured before the fleet started) is not the fleet's.
        let base = if phase == "churn" {
            &o.churn_alone
        } else {
            &o.baseline
        };
        let what = match phase {
            "steady" => "steady state",
            "churn" => "foreign PV churn",
            _ => "rolling restart",
        };
        figure(
            &format!("fleet.{k}.{phase}.bytes"),
            &format!("API server bytes sent/s, {nodes} {t} agents, {what}"),
            "B/s",
            &p.bytes,
        );
        figure(
            &format!("fleet.{k}.per1000.{phase}.bytes"),
            &format!("API server bytes sent/s added per 1,000 {t} agents, {what}"),
            "B/s",
            &[per_1000(&p.bytes, &base.bytes, nodes)],
        );
        figure(
            &format!("fleet.{k}.{phase}.apiserver_cpu"),
            &format!("API server CPU, {nodes} {t} agents, {what}"),
            "cores",
            &p.api_cpu,
        );
        figure(
            &format!("fleet.{k}.{phase}.etcd_cpu"),
            &format!("etcd CPU, {nodes} {t} agents, {what}"),
            "cores",
            &p.etcd_cpu,
        );
        figure(
            &format!("fleet.{k}.{phase}.apiserver_rss"),
            &format!("API server RSS, {nodes} {t} agents, {what}"),
            "MiB",
            &p.api_rss,
        );
        figure(
            &format!("fleet.{k}.{phase}.rps"),
            &format!("API server requests/s, {nodes} {t} agents, {what}"),
            "req/s",
            &p.rps,
        );
        for (verb, v) in &p.rps_by_verb {
            figure(
                &format!("fleet.{k}.{phase}.rps.{verb}"),
                &format!("API server {verb} requests/s, {nodes} {t} agents, {what}"),
                "req/s",
                v,
            );
        }
        figure(
            &format!("fleet.{k}.per1000.{phase}.apiserver_cpu"),
            &format!("API server CPU added per 1,000 {t} agents, {what}"),
            "cores",
            &[per_1000(&p.api_cpu, &base.api_cpu, nodes)],
        );
        figure(
            &format!("fleet.{k}.per1000.{phase}.rps"),
            &format!("API server requests/s added per 1,000 {t} agents, {what}"),
            "req/s",
            &[per_1000(&p.rps, &base.rps, nodes)],
        );
    }
    figure(
        &format!("fleet.{k}.steady.watches"),
        &format!("watches open at the API server, {nodes} {t} agents"),
        "count",
        &o.steady.watches,
    );
    figure(
        &format!("fleet.{k}.watches_per_agent"),
        &format!("watches each {t} agent holds at steady state"),
        "count",
        // NB: the control plane's own watches at rest are the baseline's most; a sample with one fewer caught one
        // re-opening.
        &[
            (median(&o.steady.watches) - o.baseline.watches.iter().copied().fold(0.0, f64::max))
                / nodes as f64,
        ],
    );
    figure(
        &format!("fleet.{k}.restart_bytes_per_agent"),
        &format!("bytes the API server sent per {t} agent restarted (rolling restart)"),
        "B",
        &[restart_bytes_per_agent(o, nodes)],
    );
    figure(
        &format!("fleet.{k}.per1000.apiserver_rss"),
        &format!("API server memory added per 1,000 {t} agents"),
        "MiB",
        &[per_1000(&o.steady.api_rss, &o.baseline.api_rss, nodes)],
    );
    figure(
        &format!("fleet.{k}.per1000.apiserver_live_heap"),
        &format!("API server live heap (after a forced collection) added per 1,000 {t} agents"),
        "MiB",
        &[per_1000(&o.steady.live_heap, &o.baseline.live_heap, nodes)],
    );
    figure(
        &format!("fleet.{k}.publish_secs"),
        &format!("{nodes} {t} agents started until every disk is an Available PV"),
        "s",
        &[o.publish_secs],
    );
    figure(
        &format!("fleet.{k}.restart_secs"),
        &format!("rolling restart of {nodes} {t} agents, one at a time"),
        "s",
        &[o.restart_secs],
    );
    figure(
        &format!("fleet.{k}.agents_rss"),
        &format!("resident memory of all {nodes} {t} agents together"),
        "MiB",
        &[o.agents_rss],
    );
    figure(
        &format!("fleet.{k}.restart_pvs_changed"),
        &format!("PVs created, deleted or changing phase during the rolling restart ({t})"),
        "count",
        &[o.pvs_changed as f64],
    );
}

fn report(outcomes: &[Outcome], sizes: &Sizes) {
    let n = sizes.nodes;
    println!(
        "### Fleet: {n} node agents against one API server\n\n{n} stand-in Nodes with {} tmpfs disks each; \
         sampled every {} s; medians over the samples (min-max). Steady state: {} s after every disk was an \
         Available PV.\n",
        sizes.disks, sizes.every, sizes.steady
    );
    let mut header = "| measure |".to_string();
    let mut rule = "| --- |".to_string();
    for o in outcomes {
        header += &format!(
            " API server alone ({} plane) | {} |",
            o.kind.key(),
            o.kind.title()
        );
        rule += " --- | --- |";
    }
    println!("{header}\n{rule}");
    type Row<'a> = (&'a str, Box<dyn Fn(&Outcome) -> (String, String)>);
    let rows: Vec<Row> = vec![
        (
            "API server CPU, steady (cores)",
            Box::new(|o| (cell(&o.baseline.api_cpu, 3), cell(&o.steady.api_cpu, 3))),
        ),
        (
            "API server CPU, foreign PV churn (cores)",
            Box::new(|o| (cell(&o.churn_alone.api_cpu, 3), cell(&o.churn.api_cpu, 3))),
        ),
        (
            "API server CPU, rolling restart (cores)",
            Box::new(|o| ("".into(), cell(&o.restart.api_cpu, 3))),
        ),
        (
            "bytes sent/s, steady (KiB/s)",
            Box::new(|o| (kib(&o.baseline.bytes), kib(&o.steady.bytes))),
        ),
        (
            "bytes sent/s, foreign PV churn (KiB/s)",
            Box::new(|o| (kib(&o.churn_alone.bytes), kib(&o.churn.bytes))),
        ),
        (
            "bytes sent/s, rolling restart (KiB/s)",
            Box::new(|o| ("".into(), kib(&o.restart.bytes))),
        ),
        (
            "etcd CPU, steady (cores)",
            Box::new(|o| (cell(&o.baseline.etcd_cpu, 3), cell(&o.steady.etcd_cpu, 3))),
        ),
        (
            "API server RSS, steady (MiB)",
            Box::new(|o| (cell(&o.baseline.api_rss, 0), cell(&o.steady.api_rss, 0))),
        ),
        (
            "API server RSS, rolling restart (MiB)",
            Box::new(|o| ("".into(), cell(&o.restart.api_rss, 0))),
        ),
        (
            "requests/s, steady",
            Box::new(|o| (cell(&o.baseline.rps, 2), cell(&o.steady.rps, 2))),
        ),
        (
            "requests/s, rolling restart",
            Box::new(|o| ("".into(), cell(&o.restart.rps, 2))),
        ),
        (
            "watches open, steady",
            Box::new(|o| (cell(&o.baseline.watches, 0), cell(&o.steady.watches, 0))),
        ),
        (
            "start until every disk is a PV (s)",
            Box::new(|o| ("".into(), format!("{:.0}", o.publish_secs))),
        ),
        (
            "rolling restart, one at a time (s)",
            Box::new(|o| ("".into(), format!("{:.0}", o.restart_secs))),
        ),
        (
            "all agents' resident memory (MiB)",
            Box::new(|o| ("".into(), format!("{:.0}", o.agents_rss))),
        ),
        (
            "PVs changed by the restart",
            Box::new(|o| ("".into(), o.pvs_changed.to_string())),
        ),
    ];
    for (name, f) in &rows {
        let mut line = format!("| {name} |");
        for o in outcomes {
            let (a, b) = f(o);
            line += &format!(" {a} | {b} |");
        }
        println!("{line}");
    }

    println!(
        "\n#### Per 1,000 nodes (what the agents add over the API server alone, scaled linearly)\n"
    );
    print_kinds_header(outcomes);
    type PerRow<'a> = (&'a str, Box<dyn Fn(&Outcome) -> String>);
    let per: Vec<PerRow> = vec![
        (
            "API server CPU, steady (cores)",
            Box::new(move |o| {
                format!("{:.3}", per_1000(&o.steady.api_cpu, &o.baseline.api_cpu, n))
            }),
        ),
        (
            "API server CPU, rolling restart (cores)",
            Box::new(move |o| {
                format!(
                    "{:.3}",
                    per_1000(&o.restart.api_cpu, &o.baseline.api_cpu, n)
                )
            }),
        ),
        (
            "API server memory (MiB)",
            Box::new(move |o| {
                format!("{:.0}", per_1000(&o.steady.api_rss, &o.baseline.api_rss, n))
            }),
        ),
        (
            "API server live heap, after a forced collection (MiB)",
            Box::new(move |o| {
                format!(
                    "{:.0}",
                    per_1000(&o.steady.live_heap, &o.baseline.live_heap, n)
                )
            }),
        ),
        (
            "requests/s, steady",
            Box::new(move |o| format!("{:.2}", per_1000(&o.steady.rps, &o.baseline.rps, n))),
        ),
        (
            "requests/s, rolling restart",
            Box::new(move |o| format!("{:.2}", per_1000(&o.restart.rps, &o.baseline.rps, n))),
        ),
        (
            "bytes sent, foreign PV churn (KiB/s)",
            Box::new(move |o| {
                format!(
                    "{:.0}",
                    per_1000(&o.churn.bytes, &o.churn_alone.bytes, n) / 1024.0
                )
            }),
        ),
        (
            "bytes sent, rolling restart (KiB/s)",
            Box::new(move |o| {
                format!(
                    "{:.0}",
                    per_1000(&o.restart.bytes, &o.baseline.bytes, n) / 1024.0
                )
            }),
        ),
    ];
    for (name, f) in &per {
        let mut line = format!("| {name} |");
        for o in outcomes {
            line += &format!(" {} |", f(o));
        }
        println!("{line}");
    }

    println!("\n#### Requests per second by verb (mean over the phase)\n");
    let verbs: BTreeSet<String> = outcomes
        .iter()
        .flat_map(|o| {
            let s = o.steady.rps_by_verb.keys();
            s.chain(o.restart.rps_by_verb.keys()).cloned()
        })
        .collect();
    let mut header = "| verb |".to_string();
    let mut rule = "| --- |".to_string();
    for o in outcomes {
        header += &format!(
            " {}, steady | {}, rolling restart |",
            o.kind.key(),
            o.kind.key()
        );
        rule += " --- | --- |";
    }
    println!("{header}\n{rule}");
    for verb in verbs {
        let mut line = format!("| {verb} |");
        for o in outcomes {
            line += &format!(
                " {:.3} | {:.3} |",
                o.steady.mean_rps(&verb),
                o.restart.mean_rps(&verb)
            );
        }
        println!("{line}");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = Sizes::from_env();
    eprintln!("sizes: {}", sizes.describe());
    if sizes.kinds.contains(&Kind::Reference) {
        lsp_binary();
    }
    figure(
        "fleet.nodes",
        "stand-in nodes in the fleet",
        "count",
        &[sizes.nodes as f64],
    );
    let mut outcomes = Vec::new();
    for kind in &sizes.kinds {
        let o = run_fleet(*kind, &sizes).await;
        emit(&o, sizes.nodes);
        outcomes.push(o);
    }
    println!("sizes: {}\n", sizes.describe());
    report(&outcomes, &sizes);
    model(&outcomes, &sizes);
}
