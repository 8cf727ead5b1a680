//! The measurements: idle memory, latency with the extenders taking turns request by request (so a slow spell
//! of the shared machine hits all alike), requests per second under concurrent load on each alone, and what
//! each answers to a truncated and to an oversized body. Bodies are built once per cell and sent unchanged to
//! every extender of that form.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::client::{Answer, Conn};
use crate::common::figures::{millis, percentile, sorted};
use crate::common::objects::{TOPOLVM_CAPACITY, node_json};
use crate::common::process::cpu_seconds;
use crate::env_f64;
use crate::procs::{Extender, Kind};
use crate::support::cluster::ControlPlane;

/// How kube-scheduler sends the candidate nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `nodeCacheCapable: true`: names only.
    Names,
    /// `nodeCacheCapable: false`: whole Node objects.
    Nodes,
}

impl Form {
    pub fn key(self) -> &'static str {
        match self {
            Form::Names => "nodenames",
            Form::Nodes => "nodes",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Form::Names => "NodeNames",
            Form::Nodes => "Nodes",
        }
    }

    /// The extenders that take this form: localpv both, each peer the one its chart configures.
    pub fn takes(self, kind: Kind) -> bool {
        match kind {
            Kind::Localpv | Kind::LocalpvQuiet => true,
            Kind::Topolvm => self == Form::Nodes,
            Kind::OpenLocal => self == Form::Names,
        }
    }
}

/// The pod of a request (see `cluster`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pod {
    /// 8Gi: every node fits (what kube-scheduler sends in practice: VolumeBinding has already removed nodes
    /// without a matching PV).
    Fits,
    /// 75Gi: even nodes are rejected, each with a reason.
    Half,
}

impl Pod {
    pub const ALL: [Pod; 2] = [Pod::Fits, Pod::Half];

    pub fn key(self) -> &'static str {
        match self {
            Pod::Fits => "fits",
            Pod::Half => "halfrejected",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pod::Fits => "8Gi, all fit",
            Pod::Half => "75Gi, half rejected",
        }
    }

    fn json(self, extra_annotation: Option<&str>) -> Value {
        let (local, open_local, gib) = match self {
            Pod::Fits => ("fits", "ol-fits", 8u64),
            Pod::Half => ("data", "ol-data", 75),
        };
        let mut annotations = json!({ TOPOLVM_CAPACITY: (gib << 30).to_string() });
        if let Some(blob) = extra_annotation {
            annotations["example.com/blob"] = json!(blob);
        }
        json!({
            "metadata": {"name": "web-0", "namespace": "apps", "uid": "pod-uid", "annotations": annotations},
            "spec": {
                "containers": [{"name": "web", "image": "nginx"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": local}},
                    {"name": "ol-data", "persistentVolumeClaim": {"claimName": open_local}},
                ],
            },
        })
    }
}

/// The `ExtenderArgs` kube-scheduler would send for `nodes` candidates.
pub fn body(nodes: usize, form: Form, pod: Pod, extra_annotation: Option<&str>) -> Vec<u8> {
    let pod = pod.json(extra_annotation);
    let v = match form {
        Form::Names => {
            let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
            json!({"Pod": pod, "Nodes": null, "NodeNames": names})
        }
        Form::Nodes => {
            let items: Vec<Value> = (0..nodes).map(node_json).collect();
            json!({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": null})
        }
    };
    serde_json::to_vec(&v).expect("serialisable")
}

/// Where to send and whom to watch, without borrowing the process (for blocking threads).
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub kind: Kind,
    port: u16,
    pid: u32,
}

impl Target {
    pub fn of(e: &Extender) -> Target {
        Target {
            kind: e.kind,
            port: e.port,
            pid: e.pid(),
        }
    }
}

/// Resident memory sampled while nothing is asked, MiB.
#[derive(Clone, Debug)]
pub struct Idle {
    pub samples: Vec<f64>,
}

impl Idle {
    pub fn median(&self) -> f64 {
        percentile(&sorted(&self.samples), 0.5)
    }

    pub fn max(&self) -> f64 {
        percentile(&sorted(&self.samples), 1.0)
    }
}

/// Samples every extender's resident set every 250 ms for LOCALPV_BENCH_IDLE_SECS.
pub async fn idle(extenders: &[&Extender]) -> Vec<Idle> {
    let secs = env_f64("LOCALPV_BENCH_IDLE_SECS", 20.0);
    let mut samples = vec![Vec::new(); extenders.len()];
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        for (e, s) in extenders.iter().zip(samples.iter_mut()) {
            s.push(e.rss_mib());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    samples
        .into_iter()
        .map(|samples| Idle { samples })
        .collect()
}

/// Waits until `e` holds the clean-up Lease (any Lease in kube-system naming it), so its leader work runs.
pub async fn wait_leader(cp: &ControlPlane, e: &Extender) {
    let leases: Api<Lease> = Api::namespaced(cp.client(), "kube-system");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = leases
            .list(&ListParams::default())
            .await
            .expect("Leases listed");
        let held = list.items.iter().any(|l| {
            l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(e.identity.as_str())
        });
        if held {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} does not hold a Lease in kube-system after 120 s",
            e.identity
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until localpv's caches hold every PV, so no measurement starts on a cold cache.
pub async fn wait_cached(e: &Extender, pvs: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let cached = e.metric(
            "localpv_extender_cached_objects",
            "kind=\"PersistentVolumes\"",
        ) as usize;
        if cached >= pvs {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} caches {cached}/{pvs} PVs after 600 s",
            e.identity
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What one extender did in one cell.
pub struct Cell {
    pub size: usize,
    pub form: Form,
    pub pod: Pod,
    pub kind: Kind,
    pub runs_ms: Vec<f64>,
    pub cpu_ms_per_request: f64,
    /// Its first answer, summarised: how many nodes it passed, or what went wrong.
    pub verdict: String,
    pub body_bytes: usize,
}

/// Requests per second of one extender under concurrent load.
pub struct Load {
    pub size: usize,
    pub form: Form,
    pub kind: Kind,
    pub clients: usize,
    pub rps: f64,
    pub cpu_ms_per_request: f64,
    pub statuses: String,
}

/// What one extender answered to a malformed body.
pub struct Malformed {
    pub what: &'static str,
    pub form: Form,
    pub kind: Kind,
    pub answer: String,
    pub seconds: f64,
    pub peak_growth_mib: f64,
}

pub struct Run {
    pub nodes: usize,
    pub pvs: usize,
    pub idle_empty: Option<Idle>,
    pub idle: Vec<(Kind, Idle)>,
    pub peak: Vec<(Kind, f64)>,
    pub cells: Vec<Cell>,
    pub loads: Vec<Load>,
    pub malformed: Vec<Malformed>,
}

impl Run {
    pub fn new(nodes: usize, pvs: usize) -> Run {
        Run {
            nodes,
            pvs,
            idle_empty: None,
            idle: Vec::new(),
            peak: Vec::new(),
            cells: Vec::new(),
            loads: Vec::new(),
            malformed: Vec::new(),
        }
    }

    /// Latency cells at `size`: each pod, each form, the extenders of that form taking turns.
    pub async fn latency(&mut self, size: usize, all: &[&Extender]) {
        let base = if size <= 100 {
            300.0
        } else if size <= 1000 {
            100.0
        } else {
            40.0
        };
        let runs = ((base * env_f64("LOCALPV_BENCH_SCALE", 1.0)) as usize).max(5);
        let budget = Duration::from_secs_f64(env_f64("LOCALPV_BENCH_CELL_SECS", 30.0));
        for pod in Pod::ALL {
            for form in [Form::Names, Form::Nodes] {
                let targets: Vec<Target> = all
                    .iter()
                    .filter(|e| form.takes(e.kind))
                    .map(|e| Target::of(e))
                    .collect();
                let body = body(size, form, pod, None);
                let cells = tokio::task::spawn_blocking(move || {
                    turns(size, form, pod, &targets, &body, runs, budget)
                })
                .await
                .expect("the latency cell ran");
                for c in &cells {
                    eprintln!(
                        "{size} {} {} {}: p50 {:.2} ms over {} runs; {}",
                        form.name(),
                        pod.key(),
                        c.kind.name(),
                        percentile(&sorted(&c.runs_ms), 0.5),
                        c.runs_ms.len(),
                        c.verdict
                    );
                }
                self.cells.extend(cells);
            }
        }
    }

    /// Requests per second at `size` (75Gi pod) on each extender alone, LOCALPV_BENCH_LOAD_SECS each.
    pub async fn load(&mut self, size: usize, all: &[&Extender]) {
        let secs = env_f64("LOCALPV_BENCH_LOAD_SECS", 5.0);
        const CLIENTS: usize = 4;
        for form in [Form::Names, Form::Nodes] {
            let body = std::sync::Arc::new(body(size, form, Pod::Half, None));
            for e in all.iter().filter(|e| form.takes(e.kind)) {
                let t = Target::of(e);
                let body = body.clone();
                let load =
                    tokio::task::spawn_blocking(move || load(size, form, t, &body, CLIENTS, secs))
                        .await
                        .expect("the load ran");
                eprintln!(
                    "{size} {} {}: {:.1} requests/s, {}",
                    form.name(),
                    t.kind.name(),
                    load.rps,
                    load.statuses
                );
                self.loads.push(load);
            }
        }
    }

    /// A truncated body (the 1,000-node request cut in half) and an oversized one (the 100-node request with an
    /// 80 MiB pod annotation, above localpv's 64 MiB limit) to each extender in the form it takes.
    pub async fn bodies(&mut self, all: &[&Extender]) {
        let blob = "x".repeat(80 << 20);
        for form in [Form::Names, Form::Nodes] {
            let full = body(1000.min(self.nodes), form, Pod::Fits, None);
            let truncated = full[..full.len() / 2].to_vec();
            let oversized = body(100.min(self.nodes), form, Pod::Fits, Some(&blob));
            for e in all
                .iter()
                .filter(|e| form.takes(e.kind) && e.kind != Kind::LocalpvQuiet)
            {
                for (what, b) in [("truncated", &truncated), ("oversized", &oversized)] {
                    let before = e.peak_mib();
                    let (t, b) = (Target::of(e), b.clone());
                    let (answer, seconds) = tokio::task::spawn_blocking(move || {
                        let started = Instant::now();
                        let a = Conn::new(t.port).post(t.kind.filter_path(), &b);
                        (a.summary(), started.elapsed().as_secs_f64())
                    })
                    .await
                    .expect("the request ran");
                    eprintln!("{what} {} to {}: {answer}", form.name(), e.kind.name());
                    self.malformed.push(Malformed {
                        what,
                        form,
                        kind: e.kind,
                        answer,
                        seconds,
                        peak_growth_mib: e.peak_mib() - before,
                    });
                }
            }
        }
    }
}

/// `runs` rounds (or until `budget` is spent, at least 5): each target answers the same body once per round.
fn turns(
    size: usize,
    form: Form,
    pod: Pod,
    targets: &[Target],
    body: &[u8],
    runs: usize,
    budget: Duration,
) -> Vec<Cell> {
    let mut conns: Vec<Conn> = targets.iter().map(|t| Conn::new(t.port)).collect();
    let mut verdicts: Vec<String> = targets
        .iter()
        .zip(conns.iter_mut())
        .map(|(t, c)| verdict(&c.post(t.kind.filter_path(), body)))
        .collect();
    let cpu0: Vec<f64> = targets.iter().map(|t| cpu_seconds(t.pid)).collect();
    let mut samples = vec![Vec::with_capacity(runs); targets.len()];
    let started = Instant::now();
    for round in 0..runs {
        if round >= 5 && started.elapsed() > budget {
            break;
        }
        for (i, t) in targets.iter().enumerate() {
            let t0 = Instant::now();
            let a = conns[i].post(t.kind.filter_path(), body);
            samples[i].push(t0.elapsed());
            if a.status != 200 {
                // Keep a later failure visible even when the first answer was fine.
                let v = verdict(&a);
                if !verdicts[i].contains(&v) {
                    verdicts[i] = format!("{}; later {v}", verdicts[i]);
                }
            }
        }
    }
    targets
        .iter()
        .zip(samples)
        .zip(cpu0)
        .zip(verdicts.drain(..))
        .map(|(((t, s), cpu0), verdict)| Cell {
            size,
            form,
            pod,
            kind: t.kind,
            cpu_ms_per_request: (cpu_seconds(t.pid) - cpu0) * 1e3 / s.len() as f64,
            runs_ms: millis(&s),
            verdict,
            body_bytes: body.len(),
        })
        .collect()
}

/// "passes 500 of 1000", or the status and error it answered.
fn verdict(a: &Answer) -> String {
    if a.status != 200 {
        return a.summary();
    }
    let Ok(v) = serde_json::from_slice::<Value>(&a.body) else {
        return format!("200, not JSON: {}", a.summary());
    };
    // NB: Go decodes field names case-insensitively, and the peers spell them differently (`nodes`, `Nodes`).
    let field = |name: &str| {
        v.as_object()
            .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
            .map_or(&Value::Null, |(_, v)| v)
    };
    let error = field("Error").as_str().unwrap_or_default();
    if !error.is_empty() {
        let short: String = error.chars().take(80).collect();
        return format!("error `{}`", short.replace('|', "\\|"));
    }
    let passed = field("NodeNames")
        .as_array()
        .map(Vec::len)
        .or_else(|| {
            let nodes = field("Nodes").as_object()?;
            let items = nodes
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("items"))?;
            items.1.as_array().map(Vec::len)
        })
        .unwrap_or(0);
    let failed = ["FailedNodes", "FailedAndUnresolvableNodes"]
        .iter()
        .map(|f| field(f).as_object().map_or(0, |m| m.len()))
        .sum::<usize>();
    format!("passes {passed}, rejects {failed}")
}

fn load(size: usize, form: Form, t: Target, body: &[u8], clients: usize, secs: f64) -> Load {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let cpu0 = cpu_seconds(t.pid);
    let started = Instant::now();
    let results: Vec<(usize, Vec<u16>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    let mut c = Conn::new(t.port);
                    let (mut done, mut statuses) = (0, Vec::new());
                    while Instant::now() < deadline {
                        let a = c.post(t.kind.filter_path(), body);
                        done += 1;
                        if !statuses.contains(&a.status) {
                            statuses.push(a.status);
                        }
                    }
                    (done, statuses)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("load client"))
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let total: usize = results.iter().map(|r| r.0).sum();
    let mut statuses: Vec<u16> = results.iter().flat_map(|r| r.1.clone()).collect();
    statuses.sort();
    statuses.dedup();
    Load {
        size,
        form,
        kind: t.kind,
        clients,
        rps: total as f64 / elapsed,
        cpu_ms_per_request: (cpu_seconds(t.pid) - cpu0) * 1e3 / total.max(1) as f64,
        statuses: format!("statuses {statuses:?}"),
    }
}
