//! kube-scheduler throughput with delayed local claims, on the real control plane (a benchmark, not a timed test):
//! pods scheduled per second over stand-in Nodes with in-tree rules only, with a no-op extender that passes every
//! node (the protocol floor: kube-scheduler's own encoding of the request) and with the localpv extender, each
//! extender in both `nodeCacheCapable` modes. Prints markdown tables; `bench/scheduler.sh` runs it.
//!
//! ```text
//!  round r:  fresh plane (etcd, apiserver, PV binder) ─ [extender] [no-op] ─ one kube-scheduler per mode, each
//!            under its own name ─ Nodes, PVs pinned by hostname, claims ─ PVs Available ─ caches caught up
//!  then, batch after batch, the modes taking turns (the order rotated each cycle):
//!            t0: the batch's pods created (for one mode's scheduler) ─ every claim of the batch chosen (the
//!            scheduler wrote the PV's claimRef: its cycles are done) ─ every pod has spec.nodeName ─ next mode
//! ```
//!
//! Why interleaved: on a 2-core machine shared with other work the speed of the whole machine moves by a quarter
//! from one minute to the next, while an extender's cost is a few percent of a scheduling cycle; modes measured one
//! after the other (a plane each) measured the machine. Taking turns every few seconds, every mode sees the same
//! machine. The modes share one scheduler configuration; only the `extenders:` stanza differs. Sizes come from the
//! environment: LOCALPV_BENCH_PODS (200 per mode and round), LOCALPV_BENCH_NODES (100), LOCALPV_BENCH_REPEATS (3),
//! LOCALPV_BENCH_BATCH (10 pods), LOCALPV_BENCH_MODES (comma-separated: intree, noop_nodenames, noop_nodes,
//! nodenames, nodes; all when unset). With LOCALPV_BENCH_FIGURES set, headline figures are appended to that file
//! as JSON lines.

mod common;
use localpv_test_support as support;

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use common::figures::{Spread, figure, figure_spread, median, spread};
use common::process::{cpu_seconds, process_with_arg};
use support::agent::install_crd;
use support::cluster::{ControlPlane, Extender, Options};
use support::extender::ExtenderProcess;
use support::metric_sum;
use support::nodes::create_node;

const CLASS: &str = "local-bench";
const PVS_PER_NODE: usize = 12;
/// Every claim fits every PV, so placement never depends on which PVs earlier pods took; the sizes only give
/// the binpack score something to choose between.
const PV_SIZES: [&str; 4] = ["10Gi", "20Gi", "50Gi", "100Gi"];
const CLAIM_SIZES: [&str; 3] = ["1Gi", "5Gi", "10Gi"];
/// Pod creates in flight at once: fast enough that the scheduler, not the creator, sets the pace.
const IN_FLIGHT: usize = 8;
/// How long one batch may take to be placed before the run fails.
const PLACE_TIMEOUT: Duration = Duration::from_secs(300);
/// Pause after each batch, so the trailing writes of one mode's batch (the PV binder's) end before the next
/// mode's window opens.
const BETWEEN_BATCHES: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    InTree,
    /// The protocol floor: an extender that passes every node, in either request form.
    NoopNodeNames,
    NoopNodes,
    NodeNames,
    Nodes,
}

impl Mode {
    const ALL: [Mode; 5] = [
        Mode::InTree,
        Mode::NoopNodeNames,
        Mode::NoopNodes,
        Mode::NodeNames,
        Mode::Nodes,
    ];

    fn key(self) -> &'static str {
        match self {
            Mode::InTree => "intree",
            Mode::NoopNodeNames => "noop_nodenames",
            Mode::NoopNodes => "noop_nodes",
            Mode::NodeNames => "nodenames",
            Mode::Nodes => "nodes",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::InTree => "in-tree rules only (no extender)",
            Mode::NoopNodeNames => "no-op extender, nodeCacheCapable: true (NodeNames floor)",
            Mode::NoopNodes => "no-op extender, nodeCacheCapable: false (Nodes floor)",
            Mode::NodeNames => "extender, nodeCacheCapable: true (NodeNames)",
            Mode::Nodes => "extender, nodeCacheCapable: false (Nodes)",
        }
    }

    fn node_cache_capable(self) -> Option<bool> {
        match self {
            Mode::InTree => None,
            Mode::NoopNodeNames | Mode::NodeNames => Some(true),
            Mode::NoopNodes | Mode::Nodes => Some(false),
        }
    }

    fn noop(self) -> bool {
        matches!(self, Mode::NoopNodeNames | Mode::NoopNodes)
    }

    /// The localpv extender answers this mode's scheduler.
    fn localpv(self) -> bool {
        matches!(self, Mode::NodeNames | Mode::Nodes)
    }

    /// The name of this mode's kube-scheduler (its pods' `schedulerName`).
    fn scheduler(self) -> String {
        format!("localpv-bench-{}", self.key().replace('_', "-"))
    }

    /// The modes LOCALPV_BENCH_MODES names (comma-separated keys; all when unset), in `ALL`'s order.
    fn selected() -> Vec<Mode> {
        let only = std::env::var("LOCALPV_BENCH_MODES").unwrap_or_default();
        let wanted: Vec<&str> = only.split(',').filter(|k| !k.is_empty()).collect();
        for k in &wanted {
            assert!(
                Mode::ALL.iter().any(|m| m.key() == *k),
                "LOCALPV_BENCH_MODES: unknown mode {k:?} (modes: intree, noop_nodenames, noop_nodes, nodenames, nodes)"
            );
        }
        Mode::ALL
            .into_iter()
            .filter(|m| wanted.is_empty() || wanted.contains(&m.key()))
            .collect()
    }
}

/// The no-op extender: its filter answers with the request body itself, which reads as an
/// `ExtenderFilterResult` passing every node in both forms (`Nodes` and `NodeNames` are the same fields; Go's
/// decoder ignores `Pod`), and its prioritize scores nothing. It parses nothing, so what a run with it costs
/// over in-tree is kube-scheduler's own encoding and decoding of the extender protocol.
struct NoopExtender {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl NoopExtender {
    async fn start() -> NoopExtender {
        use axum::routing::post;
        let echo = |body: axum::body::Bytes| async move {
            ([(http::header::CONTENT_TYPE, "application/json")], body)
        };
        let none = || async { ([(http::header::CONTENT_TYPE, "application/json")], "[]") };
        let app = axum::Router::new()
            .route("/filter", post(echo))
            .route("/prioritize", post(none))
            // NB: axum's default body limit is 2 MiB; a Nodes request for 100 kubelet-sized Nodes is near it.
            .layer(axum::extract::DefaultBodyLimit::disable());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("loopback bind works");
        let port = listener.local_addr().expect("bound").port();
        // NB: as the real extender's listener: without TCP_NODELAY a small answer written in two segments waits
        // for the client's delayed ACK (~40 ms), and the floor would be slower than the extender it bounds.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the no-op extender serves");
        });
        NoopExtender { port, task }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for NoopExtender {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone, Copy, Debug)]
struct Sizes {
    /// Pods per mode and round.
    pods: usize,
    nodes: usize,
    repeats: usize,
    /// Pods per batch: a mode's turn.
    batch: usize,
    /// kube-controller-manager's client rate limit; 0 runs the harness's (the Kubernetes default, 20).
    cm_qps: usize,
}

impl Sizes {
    fn from_env(modes: usize) -> Sizes {
        let s = Sizes {
            pods: env("LOCALPV_BENCH_PODS", 200),
            nodes: env("LOCALPV_BENCH_NODES", 100),
            repeats: env("LOCALPV_BENCH_REPEATS", 3),
            batch: env("LOCALPV_BENCH_BATCH", 10),
            cm_qps: env("LOCALPV_BENCH_CM_QPS", 500),
        };
        // NB: the modes share the plane's PVs, one per pod.
        assert!(
            s.pods * modes <= s.nodes * PVS_PER_NODE && s.pods > 0 && s.repeats > 0 && s.batch > 0,
            "LOCALPV_BENCH_PODS x modes ({modes}) must be 1..={} for {} nodes ({PVS_PER_NODE} PVs each); repeats and \
             batch at least 1",
            s.nodes * PVS_PER_NODE,
            s.nodes
        );
        s
    }
}

fn env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("bench object literal is valid")
}

/// What one mode measured in one round: the sums over its batches. Seconds are from each batch's first pod create;
/// CPU seconds cover the same windows.
struct Run {
    round: usize,
    mode: Mode,
    pods: usize,
    /// Until every claim of the batch was chosen (the scheduling cycles are done).
    scheduled: f64,
    /// Until every pod of the batch had a node (binding cycles too: PreBind waits for the PV binder).
    placed: f64,
    scheduler_cpu: f64,
    apiserver_cpu: f64,
    scheduler: SchedulerStats,
    /// Lines of the scheduler log saying a pod could not be placed and will be retried.
    retries: usize,
    extender: Option<ExtenderStats>,
}

impl Run {
    /// The headline: pods whose scheduling cycles finished per second.
    fn pods_per_second(&self) -> f64 {
        self.pods as f64 / self.scheduled
    }

    fn placed_per_second(&self) -> f64 {
        self.pods as f64 / self.placed
    }

    /// kube-scheduler's CPU per pod, plus the extender's when it has one (the shared extender's CPU in this
    /// mode's windows).
    fn cpu_ms_per_pod(&self) -> f64 {
        let extender = self.extender.as_ref().map_or(0.0, |e| e.cpu);
        (self.scheduler_cpu + extender) / self.pods as f64 * 1000.0
    }
}

/// The localpv extender's counters (its `/metrics` and CPU); a mode's share is the difference over its windows.
#[derive(Default, Clone, Copy)]
struct ExtenderStats {
    filter_calls: f64,
    filter_count: f64,
    filter_seconds: f64,
    prioritize_calls: f64,
    prioritize_count: f64,
    prioritize_seconds: f64,
    /// Answers that were Ok (the others: deadline, not ready...).
    ok: f64,
    cpu: f64,
}

impl ExtenderStats {
    fn add_since(&mut self, now: &ExtenderStats, before: &ExtenderStats) {
        self.filter_calls += now.filter_calls - before.filter_calls;
        self.filter_count += now.filter_count - before.filter_count;
        self.filter_seconds += now.filter_seconds - before.filter_seconds;
        self.prioritize_calls += now.prioritize_calls - before.prioritize_calls;
        self.prioritize_count += now.prioritize_count - before.prioritize_count;
        self.prioritize_seconds += now.prioritize_seconds - before.prioritize_seconds;
        self.ok += now.ok - before.ok;
        self.cpu += now.cpu - before.cpu;
    }

    fn errors(&self) -> f64 {
        self.filter_calls + self.prioritize_calls - self.ok
    }

    fn filter_mean_ms(&self) -> f64 {
        mean(self.filter_seconds, self.filter_count) * 1000.0
    }

    fn prioritize_mean_ms(&self) -> f64 {
        mean(self.prioritize_seconds, self.prioritize_count) * 1000.0
    }
}

/// `total / count`, 0 when nothing was counted.
fn mean(total: f64, count: f64) -> f64 {
    if count > 0.0 { total / count } else { 0.0 }
}

/// A `localpv extender` process on loopback, logging as deployed, ready.
async fn localpv_extender(cp: &ControlPlane) -> ExtenderProcess {
    let mut extender = ExtenderProcess::new(cp);
    extender.start(cp, Duration::from_secs(60)).await;
    extender
}

/// Waits until the extender's caches hold every PV and claim, so no mode starts on a cold cache.
async fn wait_cached(extender: &ExtenderProcess, pvs: usize, claims: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let cached = |kind: &str| {
        extender.metric(
            "localpv_extender_cached_objects",
            &[&format!("kind=\"{kind}\"")],
        ) as usize
    };
    while cached("PersistentVolumes") < pvs || cached("PersistentVolumeClaims") < claims {
        assert!(
            Instant::now() < deadline,
            "the extender's caches did not fill in 120s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The extender's counters now, from one read of its `/metrics`.
fn extender_stats(extender: &ExtenderProcess) -> ExtenderStats {
    let text = extender.metrics();
    let verb = |v: &str| {
        let label = format!("verb=\"{v}\"");
        (
            metric_sum(&text, "localpv_extender_requests_total", &[&label]),
            metric_sum(
                &text,
                "localpv_extender_request_duration_seconds_count",
                &[&label],
            ),
            metric_sum(
                &text,
                "localpv_extender_request_duration_seconds_sum",
                &[&label],
            ),
        )
    };
    let (filter_calls, filter_count, filter_seconds) = verb("Filter");
    let (prioritize_calls, prioritize_count, prioritize_seconds) = verb("Prioritize");
    ExtenderStats {
        filter_calls,
        filter_count,
        filter_seconds,
        prioritize_calls,
        prioritize_count,
        prioritize_seconds,
        ok: metric_sum(
            &text,
            "localpv_extender_requests_total",
            &["outcome=\"Ok\""],
        ),
        cpu: extender.pid().map(cpu_seconds).unwrap_or(0.0),
    }
}

async fn secure_client(cp: &ControlPlane, port: &str) -> kube::Client {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kc = Kubeconfig::read_from(&cp.admin_kubeconfig).expect("admin kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("admin kubeconfig loads");
    cfg.cluster_url = format!("https://127.0.0.1:{port}")
        .parse()
        .expect("valid url");
    // NB: components serve a self-signed certificate; the admin client certificate still authenticates.
    cfg.accept_invalid_certs = true;
    kube::Client::try_from(cfg).expect("component client builds")
}

async fn get_text(client: &kube::Client, path: &str) -> Option<String> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .expect("request builds");
    client.request_text(req).await.ok()
}

/// kube-scheduler's own view of one run, from its `/metrics` (read with the admin identity).
#[derive(Default)]
struct SchedulerStats {
    /// Mean SchedulePod time per attempt: in-tree filters and scores plus the extender's filter and prioritize
    /// calls. The scheduling cycle runs one pod at a time, so this bounds the scheduler's own pace.
    algorithm_ms: f64,
    /// Mean PreBind time: VolumeBinding writes the chosen PVs' claimRefs, then waits for the PV controller.
    prebind_s: f64,
}

async fn scheduler_stats(cp: &ControlPlane, args: &[String]) -> SchedulerStats {
    let Some(port) = args.iter().find_map(|a| a.strip_prefix("--secure-port=")) else {
        return SchedulerStats::default();
    };
    let client = secure_client(cp, port).await;
    let text = get_text(&client, "/metrics")
        .await
        .expect("kube-scheduler serves /metrics to the admin");
    let histogram_mean = |base: &str, having: &[&str]| {
        let count = metric_sum(&text, &format!("{base}_count"), having);
        mean(metric_sum(&text, &format!("{base}_sum"), having), count)
    };
    SchedulerStats {
        algorithm_ms: histogram_mean("scheduler_scheduling_algorithm_duration_seconds", &[])
            * 1000.0,
        prebind_s: histogram_mean(
            "scheduler_framework_extension_point_duration_seconds",
            &["extension_point=\"PreBind\""],
        ),
    }
}

fn log_lines_containing(path: &Path, needles: &[&str]) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| needles.iter().any(|n| l.contains(n)))
        .count()
}

/// Runs `make(i)` for `0..count` with `in_flight` requests at a time.
async fn each<F, Fut>(count: usize, in_flight: usize, make: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(0..count)
        .map(make)
        .buffer_unordered(in_flight)
        .collect::<Vec<_>>()
        .await;
}

/// Nodes, PVs pinned to them as the node agent publishes them, and one unbound claim per pod.
async fn populate(client: &kube::Client, ns: &str, nodes: usize, claims: usize) {
    let sc: StorageClass = obj(json!({
        "metadata": {"name": CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }));
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("class created");
    each(nodes, 8, |i| async move {
        create_node(client, &format!("node-{i:03}"), &[]).await;
    })
    .await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    each(nodes * PVS_PER_NODE, 16, |i| {
        let pvs = pvs.clone();
        async move {
            let node = format!("node-{:03}", i / PVS_PER_NODE);
            let name = format!("local-{node}-{:02}", i % PVS_PER_NODE);
            let pv: PersistentVolume = obj(json!({
                "metadata": {"name": name, "labels": {"localpv.io/node": node},
                             "annotations": {"pv.kubernetes.io/provisioned-by": "localpv"}},
                "spec": {
                    "capacity": {"storage": PV_SIZES[i % PV_SIZES.len()]},
                    "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": CLASS,
                    "local": {"path": format!("/mnt/disks/{name}")},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
                },
            }));
            pvs.create(&PostParams::default(), &pv)
                .await
                .expect("PV created");
        }
    })
    .await;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    each(claims, 16, |i| {
        let claims = api.clone();
        async move {
            let pvc: PersistentVolumeClaim = obj(json!({
                "metadata": {"name": claim_name(i)},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                         "resources": {"requests": {"storage": CLAIM_SIZES[i % CLAIM_SIZES.len()]}}},
            }));
            claims
                .create(&PostParams::default(), &pvc)
                .await
                .expect("claim created");
        }
    })
    .await;
}

/// VolumeBinding only takes Available PVs: wait until the PV controller has marked every one.
async fn wait_available(client: &kube::Client, want: usize) {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let list = pvs.list(&ListParams::default()).await.expect("PVs listed");
        let available = list
            .items
            .iter()
            .filter(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"))
            .count();
        if available >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {available}/{want} PVs Available after 300s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// When objects first reached a state, as a watch reports them: `key` names an object in that state.
struct Seen {
    rx: tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
    at: std::collections::HashMap<String, Instant>,
    task: tokio::task::JoinHandle<()>,
}

impl Seen {
    /// Watches `api`; returns once the watch's initial list is in.
    async fn start<K>(api: Api<K>, key: fn(&K) -> Option<String>) -> Seen
    where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        use kube::runtime::WatchStreamExt;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut synced_tx = Some(synced_tx);
            while let Some(event) = stream.next().await {
                match event {
                    // The backoff retries the watch; the next event carries on.
                    Err(_) => {}
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        if let Some(name) = key(&o) {
                            let _ = tx.send((name, Instant::now()));
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(s) = synced_tx.take() {
                            let _ = s.send(());
                        }
                    }
                    Ok(_) => {}
                }
            }
        });
        synced.await.expect("the watch lists before it ends");
        Seen {
            rx,
            at: Default::default(),
            task,
        }
    }

    /// When the last of `names` was first seen in the state.
    async fn last_of(&mut self, names: &[String]) -> Instant {
        let deadline = tokio::time::Instant::now() + PLACE_TIMEOUT;
        loop {
            let times: Option<Vec<Instant>> =
                names.iter().map(|n| self.at.get(n).copied()).collect();
            if let Some(times) = times {
                return times.into_iter().max().expect("a batch is not empty");
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((name, at))) => {
                    self.at.entry(name).or_insert(at);
                }
                Ok(None) => panic!("the watch ended"),
                Err(_) => panic!(
                    "{}/{} of {names:?} after {PLACE_TIMEOUT:?}",
                    names.iter().filter(|n| self.at.contains_key(*n)).count(),
                    names.len()
                ),
            }
        }
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Pod `i` of a round; its claim is [`claim_name`]`(i)`.
fn pod_name(i: usize) -> String {
    format!("app-{i:04}")
}

fn claim_name(i: usize) -> String {
    format!("data-{i:04}")
}

fn placed_pod(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.as_ref()?;
    pod.metadata.name.clone()
}

/// The claim a PV was chosen for: VolumeBinding's PreBind writes the claimRef once the scheduling cycle is done.
fn chosen_claim(pv: &PersistentVolume) -> Option<String> {
    pv.spec.as_ref()?.claim_ref.as_ref()?.name.clone()
}

/// Creates pods `indices` (each with its claim) for `scheduler`, `IN_FLIGHT` at a time.
async fn create_pods(pods: &Api<Pod>, scheduler: &str, indices: &[usize]) {
    each(indices.len(), IN_FLIGHT, |k| {
        let i = indices[k];
        async move {
            let pod: Pod = obj(json!({
                "metadata": {"name": pod_name(i)},
                "spec": {
                    "schedulerName": scheduler,
                    "containers": [{"name": "app", "image": "busybox",
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data",
                                 "persistentVolumeClaim": {"claimName": claim_name(i)}}],
                },
            }));
            pods.create(&PostParams::default(), &pod)
                .await
                .expect("pod created");
        }
    })
    .await;
}

/// One round on a fresh control plane (nothing of an earlier round carries over): every mode's scheduler runs at
/// once, and the modes take turns placing a batch of pods each, until each placed `sizes.pods`.
async fn run_round(round: usize, modes: &[Mode], sizes: Sizes) -> Vec<Run> {
    // NB: the PV binder syncs claims on one worker, several API writes per claim; at the Kubernetes default of 20
    // requests per second it binds about 3 claims per second and VolumeBinding's PreBind waits for it, so every
    // mode would measure the binder. The bench raises the limit (LOCALPV_BENCH_CM_QPS=0 keeps the default).
    let mut cp = ControlPlane::start(Options {
        controller_manager: true,
        controller_manager_qps: (sizes.cm_qps > 0).then_some(sizes.cm_qps as u32),
        ..Options::default()
    })
    .await;
    let client = cp.client();
    let ns = cp.namespace("bench").await;
    // In every round, so the modes differ in the extender alone: its node clean-up watches LocalDisks.
    install_crd(&cp).await;
    let extender = match modes.iter().any(|m| m.localpv()) {
        true => Some(localpv_extender(&cp).await),
        false => None,
    };
    let noop = match modes.iter().any(|m| m.noop()) {
        true => Some(NoopExtender::start().await),
        false => None,
    };
    for &mode in modes {
        let url = match mode {
            Mode::InTree => None,
            m if m.noop() => noop.as_ref().map(|n| n.url()),
            _ => extender.as_ref().map(|e| e.url()),
        };
        // As config/scheduler/default-scheduler.yaml, but plain HTTP on loopback; the no-op in the same stanza.
        let entries: Vec<Extender> = url
            .iter()
            .map(|url| {
                let mut entry = Extender::new(url);
                entry.weight = 2;
                entry.node_cache_capable = mode.node_cache_capable() == Some(true);
                entry.ignorable = false;
                entry
            })
            .collect();
        cp.start_scheduler(&mode.scheduler(), &entries).await;
    }
    let claims = sizes.pods * modes.len();
    populate(&client, &ns, sizes.nodes, claims).await;
    let pvs = sizes.nodes * PVS_PER_NODE;
    wait_available(&client, pvs).await;
    if let Some(e) = &extender {
        wait_cached(e, pvs, claims).await;
    }
    // The PV controller's last status writes reach the schedulers' informers.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let config = |m: Mode| cp.dir.join(format!("scheduler-{}.yaml", m.scheduler()));
    let schedulers: Vec<(u32, Vec<String>)> = modes
        .iter()
        .map(|m| {
            process_with_arg(&format!("--config={}", config(*m).display()))
                .expect("the mode's kube-scheduler runs")
        })
        .collect();
    let apiserver = process_with_arg(&format!(
        "--cert-dir={}",
        cp.dir.join("apiserver-certs").display()
    ))
    .expect("kube-apiserver runs")
    .0;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut placed = Seen::start(pods.clone(), placed_pod).await;
    let mut chosen = Seen::start(Api::<PersistentVolume>::all(client.clone()), chosen_claim).await;

    let mut runs: Vec<Run> = modes
        .iter()
        .map(|m| Run {
            round,
            mode: *m,
            pods: 0,
            scheduled: 0.0,
            placed: 0.0,
            scheduler_cpu: 0.0,
            apiserver_cpu: 0.0,
            scheduler: SchedulerStats::default(),
            retries: 0,
            extender: m.localpv().then(ExtenderStats::default),
        })
        .collect();
    let mut next = 0;
    for cycle in 0..sizes.pods.div_ceil(sizes.batch) {
        let n = sizes.batch.min(sizes.pods - cycle * sizes.batch);
        for k in 0..modes.len() {
            let at = (cycle + round + k) % modes.len();
            let indices: Vec<usize> = (next..next + n).collect();
            next += n;
            let (scheduler, mode) = (schedulers[at].0, modes[at]);
            // NB: the extender's counters are read around every batch, so reading them costs every mode alike.
            let extender0 = extender.as_ref().map(extender_stats);
            let (scheduler0, apiserver0) = (cpu_seconds(scheduler), cpu_seconds(apiserver));
            let t0 = Instant::now();
            create_pods(&pods, &mode.scheduler(), &indices).await;
            let claims: Vec<String> = indices.iter().map(|i| claim_name(*i)).collect();
            let scheduled = chosen.last_of(&claims).await;
            let names: Vec<String> = indices.iter().map(|i| pod_name(*i)).collect();
            let done = placed.last_of(&names).await;
            let run = &mut runs[at];
            run.pods += n;
            run.scheduled += (scheduled - t0).as_secs_f64();
            run.placed += (done - t0).as_secs_f64();
            run.scheduler_cpu += cpu_seconds(scheduler) - scheduler0;
            run.apiserver_cpu += cpu_seconds(apiserver) - apiserver0;
            if let (Some(e), Some(before), Some(sum)) =
                (&extender, extender0, run.extender.as_mut())
            {
                sum.add_since(&extender_stats(e), &before);
            }
            tokio::time::sleep(BETWEEN_BATCHES).await;
        }
    }
    for (run, (_, args)) in runs.iter_mut().zip(&schedulers) {
        let name = run.mode.scheduler();
        run.scheduler = scheduler_stats(&cp, args).await;
        run.retries = log_lines_containing(
            &cp.log_dir().join(format!("kube-scheduler-{name}.log")),
            &["Unable to schedule pod", "Error scheduling pod"],
        );
    }
    runs
}

fn overhead(base: f64, ext: f64) -> f64 {
    (base - ext) / base * 100.0
}

fn of(runs: &[Run], mode: Mode, value: fn(&Run) -> f64) -> Vec<f64> {
    runs.iter().filter(|r| r.mode == mode).map(value).collect()
}

fn measured(runs: &[Run], mode: Mode) -> bool {
    runs.iter().any(|r| r.mode == mode)
}

/// Pods per second the scheduling cycle alone could sustain: its algorithm time, nothing else.
fn cycle_ceiling(r: &Run) -> f64 {
    1000.0 / r.scheduler.algorithm_ms
}

/// `value` of the throughputs `tput` of `modes` (in that order), from their medians; the range from the rounds
/// (the modes take turns within a round, so each round pairs figures that saw the same machine).
fn paired_spread(
    runs: &[Run],
    modes: &[Mode],
    tput: fn(&Run) -> f64,
    value: impl Fn(&[f64]) -> f64,
) -> Spread {
    let medians: Vec<f64> = modes.iter().map(|m| median(&of(runs, *m, tput))).collect();
    let overall = value(&medians);
    let rounds = runs.iter().map(|r| r.round).max().unwrap_or(0) + 1;
    let paired: Vec<f64> = (0..rounds)
        .filter_map(|round| {
            let find = |m: &Mode| runs.iter().find(|r| r.round == round && r.mode == *m);
            let of_round: Option<Vec<f64>> = modes.iter().map(|m| find(m).map(tput)).collect();
            Some(value(&of_round?))
        })
        .collect();
    let per_round = spread(&paired);
    // NB: a ratio of medians may fall outside the per-round ratios; widen so min <= median <= max holds.
    Spread {
        median: overall,
        min: per_round.min.min(overall),
        max: per_round.max.max(overall),
        n: per_round.n,
    }
}

/// Overhead of `mode` against `base` for a throughput `tput`, in percent of `base`.
fn overhead_spread(runs: &[Run], base: Mode, mode: Mode, tput: fn(&Run) -> f64) -> Spread {
    paired_spread(runs, &[base, mode], tput, |t| overhead(t[0], t[1]))
}

/// Percentage points `mode` costs over its floor (both against in-tree): the target for Nodes.
fn points_over_floor(runs: &[Run], floor: Mode, mode: Mode) -> Spread {
    paired_spread(
        runs,
        &[Mode::InTree, floor, mode],
        Run::pods_per_second,
        |t| overhead(t[0], t[2]) - overhead(t[0], t[1]),
    )
}

/// The floor a real extender mode is held to, when the run measured it and in-tree.
fn floor_of(runs: &[Run], mode: Mode) -> Option<Mode> {
    let floor = match mode {
        Mode::NodeNames => Mode::NoopNodeNames,
        Mode::Nodes => Mode::NoopNodes,
        _ => return None,
    };
    (measured(runs, floor) && measured(runs, Mode::InTree) && measured(runs, mode)).then_some(floor)
}

fn floor_cell(runs: &[Run], mode: Mode) -> String {
    let Some(floor) = floor_of(runs, mode) else {
        return "-".into();
    };
    let s = points_over_floor(runs, floor, mode);
    format!("{:+.1} ({:+.1} .. {:+.1})", s.median, s.min, s.max)
}

fn overhead_cell(runs: &[Run], base: Mode, mode: Mode, tput: fn(&Run) -> f64) -> String {
    if mode == base || !measured(runs, base) {
        return "-".into();
    }
    let s = overhead_spread(runs, base, mode, tput);
    format!("{:.1}% ({:.1}% .. {:.1}%)", s.median, s.min, s.max)
}

/// CPU per pod as a throughput (pods per CPU second), so it goes through the same overhead arithmetic.
fn pods_per_cpu_second(r: &Run) -> f64 {
    1000.0 / r.cpu_ms_per_pod()
}

fn report(runs: &[Run], sizes: Sizes, modes: usize) {
    println!("### kube-scheduler throughput with delayed local claims\n");
    println!(
        "command: `LOCALPV_BENCH_PODS={} LOCALPV_BENCH_NODES={} LOCALPV_BENCH_REPEATS={} LOCALPV_BENCH_BATCH={} \
         LOCALPV_BENCH_CM_QPS={} bench/scheduler.sh`\n",
        sizes.pods, sizes.nodes, sizes.repeats, sizes.batch, sizes.cm_qps
    );
    println!(
        "{} pods per mode and round, each with one claim of a `kubernetes.io/no-provisioner` WaitForFirstConsumer \
         class, over {} stand-in Nodes with {PVS_PER_NODE} PVs each ({}) pinned by `kubernetes.io/hostname`; claims \
         of {}. One fresh control plane per round ({} rounds), on it one kube-scheduler per mode ({modes}), each \
         under its own name. The modes take turns: a batch of {} pods for one mode's scheduler (created {IN_FLIGHT} \
         at a time), then the next mode's batch once every pod of the last one has a node (and {} ms more), the \
         order rotated each cycle; so every mode meets the same machine, whose speed here moves by a quarter \
         between minutes. pods/s = pods / the sum over the mode's batches of (first create .. the last of the \
         batch's claims chosen, i.e. VolumeBinding wrote its PV's claimRef: the scheduling cycles are done); placed \
         pods/s the same until the last `spec.nodeName` (binding cycles too, PreBind waiting for the PV binder). \
         Extender: `localpv extender` as deployed (node clean-up and pending-pod explanations on, holding the \
         Lease), one process answering both extender modes' schedulers, plain HTTP on loopback, filter + \
         prioritize, weight 2, `ignorable: false`, `httpTimeout: 5s`, `RUST_LOG=info`; the no-op extender has the \
         same stanza, answers filter with the request body itself (every node passes, nothing parsed) and \
         prioritize with `[]`: what it costs is kube-scheduler's own encoding and decoding of the protocol, the \
         floor any extender in that mode pays. Otherwise the same scheduler configuration (client QPS at its \
         default, 50) in every mode. The PV binder (kube-controller-manager) runs with {}. Medians, min-max over \
         rounds; overhead = (base - mode) / base from the medians, in brackets the range of the per-round pairs; \
         the base is in-tree, and for Nodes also the Nodes floor (points over the floor = overhead of Nodes minus \
         overhead of the floor, both against in-tree). CPU per pod: kube-scheduler's, plus the extender's in the \
         mode's windows.\n",
        sizes.pods,
        sizes.nodes,
        PV_SIZES.join(", "),
        CLAIM_SIZES.join(", "),
        sizes.repeats,
        sizes.batch,
        BETWEEN_BATCHES.as_millis(),
        match sizes.cm_qps {
            0 => "its default client rate limit, 20 requests/s".to_string(),
            qps => format!(
                "`--kube-api-qps={qps}`: at the default 20 it binds about 3 claims/s and every mode measures it"
            ),
        }
    );
    println!(
        "| mode | pods/s | pods/s min-max | overhead vs in-tree | points over its floor | placed pods/s | scheduling algorithm per pod | cycle overhead vs in-tree | CPU per pod | CPU overhead vs in-tree |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for mode in Mode::ALL.into_iter().filter(|m| measured(runs, *m)) {
        let Spread {
            median: tput,
            min,
            max,
            ..
        } = spread(&of(runs, mode, Run::pods_per_second));
        let placed = median(&of(runs, mode, Run::placed_per_second));
        let algorithm = median(&of(runs, mode, |r| r.scheduler.algorithm_ms));
        let cpu = median(&of(runs, mode, Run::cpu_ms_per_pod));
        println!(
            "| {} | {tput:.2} | {min:.2}-{max:.2} | {} | {} | {placed:.2} | {algorithm:.2} ms | {} | {cpu:.1} ms | {} |",
            mode.label(),
            overhead_cell(runs, Mode::InTree, mode, Run::pods_per_second),
            floor_cell(runs, mode),
            overhead_cell(runs, Mode::InTree, mode, cycle_ceiling),
            overhead_cell(runs, Mode::InTree, mode, pods_per_cpu_second),
        );
    }
    println!(
        "\nPer round and mode (sums over the mode's batches; CPU seconds over its windows; extender calls and mean \
         answer time from its own metrics over the same windows; PreBind = mean time VolumeBinding waited for the \
         PV controller to bind a pod's claim):\n"
    );
    println!(
        "| round | mode | pods | pods/s | placed pods/s | algorithm | PreBind | scheduler CPU | apiserver CPU | extender CPU | filter calls, mean | prioritize calls, mean | extender errors | scheduler retry lines |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in runs {
        let e = r.extender.as_ref();
        let ext = |f: fn(&ExtenderStats) -> String| e.map(f).unwrap_or_else(|| "-".into());
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} ms | {:.1} s | {:.1} s | {:.1} s | {} | {} | {} | {} | {} |",
            r.round + 1,
            r.mode.key(),
            r.pods,
            r.pods_per_second(),
            r.placed_per_second(),
            r.scheduler.algorithm_ms,
            r.scheduler.prebind_s,
            r.scheduler_cpu,
            r.apiserver_cpu,
            ext(|e| format!("{:.1} s", e.cpu)),
            ext(|e| format!("{:.0}, {:.2} ms", e.filter_calls, e.filter_mean_ms())),
            ext(|e| format!(
                "{:.0}, {:.2} ms",
                e.prioritize_calls,
                e.prioritize_mean_ms()
            )),
            ext(|e| format!("{:.0}", e.errors())),
            r.retries
        );
    }
    figures(runs, sizes);
}

fn mode_words(mode: Mode) -> &'static str {
    match mode {
        Mode::InTree => "in-tree rules only",
        Mode::NoopNodeNames => "with a no-op extender, nodeCacheCapable: true",
        Mode::NoopNodes => "with a no-op extender, nodeCacheCapable: false",
        Mode::NodeNames => "with the extender, nodeCacheCapable: true",
        Mode::Nodes => "with the extender, nodeCacheCapable: false",
    }
}

fn figures(runs: &[Run], sizes: Sizes) {
    let (pods, nodes) = (sizes.pods, sizes.nodes);
    let modes: Vec<Mode> = Mode::ALL
        .into_iter()
        .filter(|m| measured(runs, *m))
        .collect();
    for &mode in &modes {
        let (key, words) = (mode.key(), mode_words(mode));
        figure(
            &format!("scheduler.pods_per_second.{key}"),
            &format!(
                "kube-scheduler throughput, {words} ({pods} pods with delayed local claims per mode and round, \
                 {nodes} nodes, the modes taking turns)"
            ),
            "pods/s",
            &of(runs, mode, Run::pods_per_second),
        );
        figure(
            &format!("scheduler.placed_per_second.{key}"),
            &format!("pods placed per second (binding cycles too), {words}"),
            "pods/s",
            &of(runs, mode, Run::placed_per_second),
        );
        figure(
            &format!("scheduler.algorithm_ms.{key}"),
            &format!(
                "kube-scheduler algorithm time per pod (filters, scores, extender calls), {words}"
            ),
            "ms",
            &of(runs, mode, |r| r.scheduler.algorithm_ms),
        );
        figure(
            &format!("scheduler.cpu_ms_per_pod.{key}"),
            &format!("kube-scheduler CPU per pod, plus the extender's, {words}"),
            "ms",
            &of(runs, mode, Run::cpu_ms_per_pod),
        );
    }
    if !measured(runs, Mode::InTree) {
        return;
    }
    for &mode in modes.iter().filter(|m| **m != Mode::InTree) {
        let (key, words) = (mode.key(), mode_words(mode));
        figure_spread(
            &format!("scheduler.overhead_percent.{key}"),
            &format!("overhead on scheduler throughput against in-tree rules only, {words}"),
            "%",
            overhead_spread(runs, Mode::InTree, mode, Run::pods_per_second),
        );
        figure_spread(
            &format!("scheduler.cycle_overhead_percent.{key}"),
            &format!("overhead on the scheduling cycle alone (algorithm time), {words}"),
            "%",
            overhead_spread(runs, Mode::InTree, mode, cycle_ceiling),
        );
        figure_spread(
            &format!("scheduler.cpu_overhead_percent.{key}"),
            &format!("CPU per pod (scheduler and extender) over in-tree rules only, {words}"),
            "%",
            overhead_spread(runs, Mode::InTree, mode, pods_per_cpu_second),
        );
        if let Some(floor) = floor_of(runs, mode) {
            figure_spread(
                &format!("scheduler.points_over_floor.{key}"),
                &format!(
                    "throughput overhead {words}, minus the no-op extender's in the same mode (percentage points)"
                ),
                "points",
                points_over_floor(runs, floor, mode),
            );
        }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let modes = Mode::selected();
    let sizes = Sizes::from_env(modes.len());
    let mut runs = Vec::new();
    for round in 0..sizes.repeats {
        for run in run_round(round, &modes, sizes).await {
            // A whole row as soon as it is known: a long run cut short still leaves its figures behind.
            eprintln!(
                "round {}/{} {}: {:.2} pods/s, placed {:.2} pods/s, algorithm {:.2} ms/pod, PreBind {:.1} s, \
                 CPU scheduler {:.1} s apiserver {:.1} s{}",
                round + 1,
                sizes.repeats,
                run.mode.key(),
                run.pods_per_second(),
                run.placed_per_second(),
                run.scheduler.algorithm_ms,
                run.scheduler.prebind_s,
                run.scheduler_cpu,
                run.apiserver_cpu,
                run.extender
                    .as_ref()
                    .map(|e| format!(
                        ", extender CPU {:.1} s, filter {:.0} x {:.2} ms, prioritize {:.0} x {:.2} ms, errors {:.0}",
                        e.cpu,
                        e.filter_calls,
                        e.filter_mean_ms(),
                        e.prioritize_calls,
                        e.prioritize_mean_ms(),
                        e.errors()
                    ))
                    .unwrap_or_default()
            );
            runs.push(run);
        }
    }
    report(&runs, sizes, modes.len());
}
