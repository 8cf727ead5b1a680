//! kube-scheduler throughput with delayed local claims, on the real control plane (a benchmark, not a timed test):
//! pods placed per second over stand-in Nodes with in-tree rules only, with a no-op extender that passes every
//! node (the protocol floor: kube-scheduler's own encoding of the request) and with the localpv extender, each
//! extender in both `nodeCacheCapable` modes. Prints markdown tables; `bench/scheduler.sh` runs it.
//!
//! ```text
//!  round r:  mode A ─ mode B ─ ... ─ mode E   (order rotated each round, so machine drift hits every mode)
//!  one run:  fresh plane (etcd, apiserver, PV binder) ─ [extender or no-op] ─ kube-scheduler
//!            ─ Nodes, PVs pinned by hostname, claims ─ PVs Available ─ caches caught up
//!            ─ watches on pods and claims ─ t0: first pod created ─ last pod has spec.nodeName ─ last claim Bound
//! ```
//!
//! The modes share one scheduler configuration; only the `extenders:` stanza differs. Sizes come from the
//! environment: LOCALPV_BENCH_PODS (1000), LOCALPV_BENCH_NODES (100), LOCALPV_BENCH_REPEATS (3),
//! LOCALPV_BENCH_MODES (comma-separated: intree, noop_nodenames, noop_nodes, nodenames, nodes; all when unset).
//! With LOCALPV_BENCH_FIGURES set, headline figures are appended to that file as JSON lines.

mod common;
#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

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
use support::nodes::create_node;

const SCHEDULER: &str = "localpv-bench-scheduler";
const CLASS: &str = "local-bench";
const PVS_PER_NODE: usize = 12;
/// Every claim fits every PV, so placement never depends on which PVs earlier pods took; the sizes only give
/// the binpack score something to choose between.
const PV_SIZES: [&str; 4] = ["10Gi", "20Gi", "50Gi", "100Gi"];
const CLAIM_SIZES: [&str; 3] = ["1Gi", "5Gi", "10Gi"];
/// Pod creates in flight at once: fast enough that the scheduler, not the creator, sets the pace.
const IN_FLIGHT: usize = 8;
const PLACE_TIMEOUT: Duration = Duration::from_secs(900);

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
    pods: usize,
    nodes: usize,
    repeats: usize,
    /// kube-controller-manager's client rate limit; 0 runs the harness's (the Kubernetes default, 20).
    cm_qps: usize,
}

impl Sizes {
    fn from_env() -> Sizes {
        let s = Sizes {
            pods: env("LOCALPV_BENCH_PODS", 1000),
            nodes: env("LOCALPV_BENCH_NODES", 100),
            repeats: env("LOCALPV_BENCH_REPEATS", 3),
            cm_qps: env("LOCALPV_BENCH_CM_QPS", 500),
        };
        assert!(
            s.pods <= s.nodes * PVS_PER_NODE && s.pods > 0 && s.repeats > 0,
            "LOCALPV_BENCH_PODS must be 1..={} for {} nodes ({PVS_PER_NODE} PVs each), repeats at least 1",
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

/// What one run measured. Times are seconds from the first pod create; CPU seconds cover the same window.
struct Run {
    round: usize,
    mode: Mode,
    pods_per_second: f64,
    placed: f64,
    bound: f64,
    scheduler_cpu: f64,
    apiserver_cpu: f64,
    scheduler: SchedulerStats,
    /// Lines of the scheduler log saying a pod could not be placed and will be retried.
    retries: usize,
    extender: Option<ExtenderStats>,
}

#[derive(Default)]
struct ExtenderStats {
    filter_calls: f64,
    filter_mean_ms: f64,
    prioritize_calls: f64,
    prioritize_mean_ms: f64,
    /// Answers other than Ok (deadline, not ready...).
    errors: f64,
    cpu: f64,
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

fn extender_stats(extender: &ExtenderProcess) -> ExtenderStats {
    let verb = |v: &str| {
        let label = format!("verb=\"{v}\"");
        let sum = extender.metric("localpv_extender_request_duration_seconds_sum", &[&label]);
        let count = extender.metric("localpv_extender_request_duration_seconds_count", &[&label]);
        let calls = extender.metric("localpv_extender_requests_total", &[&label]);
        (
            calls,
            if count > 0.0 {
                sum / count * 1000.0
            } else {
                0.0
            },
        )
    };
    let (filter_calls, filter_mean_ms) = verb("Filter");
    let (prioritize_calls, prioritize_mean_ms) = verb("Prioritize");
    let ok = extender.metric("localpv_extender_requests_total", &["outcome=\"Ok\""]);
    ExtenderStats {
        filter_calls,
        filter_mean_ms,
        prioritize_calls,
        prioritize_mean_ms,
        errors: filter_calls + prioritize_calls - ok,
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
    let sum = |name: &str, having: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(having))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let mean = |base: &str, having: &str| {
        let count = sum(&format!("{base}_count"), having);
        if count > 0.0 {
            sum(&format!("{base}_sum"), having) / count
        } else {
            0.0
        }
    };
    SchedulerStats {
        algorithm_ms: mean("scheduler_scheduling_algorithm_duration_seconds", "") * 1000.0,
        prebind_s: mean(
            "scheduler_framework_extension_point_duration_seconds",
            "extension_point=\"PreBind\"",
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
async fn populate(client: &kube::Client, ns: &str, sizes: Sizes) {
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
    each(sizes.nodes, 8, |i| async move {
        create_node(client, &format!("node-{i:03}"), &[]).await;
    })
    .await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    each(sizes.nodes * PVS_PER_NODE, 16, |i| {
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
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    each(sizes.pods, 16, |i| {
        let claims = claims.clone();
        async move {
            let pvc: PersistentVolumeClaim = obj(json!({
                "metadata": {"name": format!("data-{i:04}")},
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

/// Watches `api` until `want` objects satisfy `done`; signals `synced` once the initial list is in. Returns when
/// the last of them was seen, or how far it got by the deadline.
async fn watch_until<K>(
    api: Api<K>,
    want: usize,
    done: fn(&K) -> bool,
    synced: tokio::sync::oneshot::Sender<()>,
) -> Result<Instant, String>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use kube::runtime::WatchStreamExt;
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut synced = Some(synced);
    let mut seen = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + PLACE_TIMEOUT;
    loop {
        let event = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err(format!("{}/{want} after {PLACE_TIMEOUT:?}", seen.len())),
            Ok(None) => return Err(format!("watch ended at {}/{want}", seen.len())),
            // The backoff retries the watch; the next event carries on.
            Ok(Some(Err(_))) => continue,
            Ok(Some(Ok(e))) => e,
        };
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) if done(&o) => {
                seen.insert(o.meta().name.clone().unwrap_or_default());
                if seen.len() >= want {
                    return Ok(Instant::now());
                }
            }
            watcher::Event::InitDone => {
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
            }
            _ => {}
        }
    }
}

fn is_placed(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.node_name.is_some())
}

fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Creates one pod per claim, `IN_FLIGHT` at a time, with both watches already synced. Returns seconds from the
/// first create until every pod had a node, and until every claim was Bound.
async fn measure(client: &kube::Client, ns: &str, count: usize) -> (f64, f64) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let (pods_synced, pods_ready) = tokio::sync::oneshot::channel();
    let (claims_synced, claims_ready) = tokio::sync::oneshot::channel();
    let placed = watch_until(pods.clone(), count, is_placed, pods_synced);
    let bound = watch_until(claims, count, is_bound, claims_synced);
    let create = async {
        let _ = pods_ready.await;
        let _ = claims_ready.await;
        let t0 = Instant::now();
        each(count, IN_FLIGHT, |i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = obj(json!({
                    "metadata": {"name": format!("app-{i:04}")},
                    "spec": {
                        "schedulerName": SCHEDULER,
                        "containers": [{"name": "app", "image": "busybox",
                                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                        "volumes": [{"name": "data",
                                     "persistentVolumeClaim": {"claimName": format!("data-{i:04}")}}],
                    },
                }));
                pods.create(&PostParams::default(), &pod)
                    .await
                    .expect("pod created");
            }
        })
        .await;
        t0
    };
    let (placed, bound, t0) = tokio::join!(placed, bound, create);
    let placed = placed.unwrap_or_else(|e| panic!("pods placed: {e}"));
    let bound = bound.unwrap_or_else(|e| panic!("claims Bound: {e}"));
    ((placed - t0).as_secs_f64(), (bound - t0).as_secs_f64())
}

/// One run on a fresh control plane: nothing of an earlier run (informer caches, assumed PVs, backoff queues)
/// carries over.
async fn run_once(round: usize, mode: Mode, sizes: Sizes) -> Run {
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
    // In every mode, so the modes differ in the extender alone: its node clean-up watches LocalDisks.
    install_crd(&cp).await;
    let extender = match mode.node_cache_capable() {
        Some(_) if !mode.noop() => Some(localpv_extender(&cp).await),
        _ => None,
    };
    let noop = match mode.noop() {
        true => Some(NoopExtender::start().await),
        false => None,
    };
    let url = extender.as_ref().map(|e| e.url());
    // As config/scheduler/default-scheduler.yaml, but plain HTTP on loopback; the no-op in the same stanza.
    let entries: Vec<Extender> = url
        .or_else(|| noop.as_ref().map(|n| n.url()))
        .iter()
        .map(|url| {
            let mut entry = Extender::new(url);
            entry.weight = 2;
            entry.node_cache_capable = mode.node_cache_capable() == Some(true);
            entry.ignorable = false;
            entry
        })
        .collect();
    cp.start_scheduler(SCHEDULER, &entries).await;
    populate(&client, &ns, sizes).await;
    let pvs = sizes.nodes * PVS_PER_NODE;
    wait_available(&client, pvs).await;
    if let Some(e) = &extender {
        wait_cached(e, pvs, sizes.pods).await;
    }
    // Same pause in every mode: the PV controller's last status writes reach the scheduler's informers.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let scheduler_log = cp.log_dir().join(format!("kube-scheduler-{SCHEDULER}.log"));
    let scheduler_cfg = cp.dir.join(format!("scheduler-{SCHEDULER}.yaml"));
    let scheduler = process_with_arg(&format!("--config={}", scheduler_cfg.display()));
    let apiserver = process_with_arg(&format!(
        "--cert-dir={}",
        cp.dir.join("apiserver-certs").display()
    ));
    let cpu = |p: &Option<(u32, Vec<String>)>| {
        p.as_ref().map(|(pid, _)| cpu_seconds(*pid)).unwrap_or(0.0)
    };
    let (scheduler0, apiserver0) = (cpu(&scheduler), cpu(&apiserver));
    let extender0 = extender
        .as_ref()
        .map(|e| extender_stats(e).cpu)
        .unwrap_or(0.0);

    let (placed, bound) = measure(&client, &ns, sizes.pods).await;

    let (scheduler_cpu, apiserver_cpu) =
        (cpu(&scheduler) - scheduler0, cpu(&apiserver) - apiserver0);
    let extender = extender.map(|e| {
        let mut s = extender_stats(&e);
        s.cpu -= extender0;
        s
    });
    let args = scheduler.map(|(_, args)| args).unwrap_or_default();
    Run {
        round,
        mode,
        pods_per_second: sizes.pods as f64 / placed,
        placed,
        bound,
        scheduler_cpu,
        apiserver_cpu,
        scheduler: scheduler_stats(&cp, &args).await,
        retries: log_lines_containing(
            &scheduler_log,
            &["Unable to schedule pod", "Error scheduling pod"],
        ),
        extender,
    }
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
/// (modes alternate within a round, so each round pairs runs that saw the same machine).
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
        |r| r.pods_per_second,
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

fn report(runs: &[Run], sizes: Sizes) {
    println!("### kube-scheduler throughput with delayed local claims\n");
    println!(
        "command: `LOCALPV_BENCH_PODS={} LOCALPV_BENCH_NODES={} LOCALPV_BENCH_REPEATS={} LOCALPV_BENCH_CM_QPS={} \
         bench/scheduler.sh`\n",
        sizes.pods, sizes.nodes, sizes.repeats, sizes.cm_qps
    );
    println!(
        "{} pods, each with one claim of a `kubernetes.io/no-provisioner` WaitForFirstConsumer class, over {} \
         stand-in Nodes with {PVS_PER_NODE} PVs each ({}) pinned by `kubernetes.io/hostname`; claims of {}. \
         Pods created {IN_FLIGHT} at a time; pods/s = pods / (first create .. last `spec.nodeName` seen). A fresh \
         control plane per run, rounds: {} (the mode order rotated each round). Extender: `localpv extender` as \
         deployed (node clean-up and pending-pod explanations on, holding the Lease), plain HTTP on loopback, \
         filter + prioritize, weight 2, `ignorable: false`, `httpTimeout: 5s`, `RUST_LOG=info`; the no-op \
         extender has the same stanza, answers filter with the request body itself (every node passes, nothing \
         parsed) and prioritize with `[]`: what it costs is kube-scheduler's own encoding and decoding of the \
         protocol, the floor any extender in that mode pays. Otherwise the same scheduler configuration (client \
         QPS at its default, 50) in every mode. The PV binder (kube-controller-manager) runs with {}. Medians, \
         min-max over rounds; overhead = (base - mode) / base from the medians, in brackets the range of the \
         per-round pairs; the base is in-tree, and for Nodes also the Nodes floor (points over the floor = \
         overhead of Nodes minus overhead of the floor, both against in-tree).\n",
        sizes.pods,
        sizes.nodes,
        PV_SIZES.join(", "),
        CLAIM_SIZES.join(", "),
        sizes.repeats,
        match sizes.cm_qps {
            0 => "its default client rate limit, 20 requests/s".to_string(),
            qps => format!(
                "`--kube-api-qps={qps}`: at the default 20 it binds about 3 claims/s and every mode measures it"
            ),
        }
    );
    println!(
        "| mode | pods/s | pods/s min-max | all claims Bound | overhead vs in-tree | points over its floor | scheduling algorithm per pod | cycle-only pods/s | cycle overhead vs in-tree |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for mode in Mode::ALL.into_iter().filter(|m| measured(runs, *m)) {
        let Spread {
            median: tput,
            min,
            max,
            ..
        } = spread(&of(runs, mode, |r| r.pods_per_second));
        let bound = median(&of(runs, mode, |r| r.bound));
        let algorithm = median(&of(runs, mode, |r| r.scheduler.algorithm_ms));
        let ceiling = median(&of(runs, mode, cycle_ceiling));
        println!(
            "| {} | {tput:.1} | {min:.1}-{max:.1} | {bound:.1} s | {} | {} | {algorithm:.2} ms | {ceiling:.0} | {} |",
            mode.label(),
            overhead_cell(runs, Mode::InTree, mode, |r| r.pods_per_second),
            floor_cell(runs, mode),
            overhead_cell(runs, Mode::InTree, mode, cycle_ceiling),
        );
    }
    println!(
        "\nPer run (CPU seconds over the measured window; extender calls and mean answer time from its own \
         metrics; PreBind = mean time VolumeBinding waited for the PV controller to bind a pod's claim):\n"
    );
    println!(
        "| round | mode | pods/s | placed | Bound | algorithm | PreBind | scheduler CPU | apiserver CPU | extender CPU | filter calls, mean | prioritize calls, mean | extender errors | scheduler retry lines |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in runs {
        let e = r.extender.as_ref();
        let ext = |f: fn(&ExtenderStats) -> String| e.map(f).unwrap_or_else(|| "-".into());
        println!(
            "| {} | {} | {:.1} | {:.1} s | {:.1} s | {:.2} ms | {:.1} s | {:.1} s | {:.1} s | {} | {} | {} | {} | {} |",
            r.round + 1,
            r.mode.key(),
            r.pods_per_second,
            r.placed,
            r.bound,
            r.scheduler.algorithm_ms,
            r.scheduler.prebind_s,
            r.scheduler_cpu,
            r.apiserver_cpu,
            ext(|e| format!("{:.1} s", e.cpu)),
            ext(|e| format!("{:.0}, {:.2} ms", e.filter_calls, e.filter_mean_ms)),
            ext(|e| format!("{:.0}, {:.2} ms", e.prioritize_calls, e.prioritize_mean_ms)),
            ext(|e| format!("{:.0}", e.errors)),
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
                "kube-scheduler throughput, {words} ({pods} pods with delayed local claims, {nodes} nodes)"
            ),
            "pods/s",
            &of(runs, mode, |r| r.pods_per_second),
        );
        figure(
            &format!("scheduler.claims_bound_seconds.{key}"),
            &format!("first pod created to all {pods} claims Bound, {words}"),
            "s",
            &of(runs, mode, |r| r.bound),
        );
        figure(
            &format!("scheduler.algorithm_ms.{key}"),
            &format!(
                "kube-scheduler algorithm time per pod (filters, scores, extender calls), {words}"
            ),
            "ms",
            &of(runs, mode, |r| r.scheduler.algorithm_ms),
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
            overhead_spread(runs, Mode::InTree, mode, |r| r.pods_per_second),
        );
        figure_spread(
            &format!("scheduler.cycle_overhead_percent.{key}"),
            &format!("overhead on the scheduling cycle alone (algorithm time), {words}"),
            "%",
            overhead_spread(runs, Mode::InTree, mode, cycle_ceiling),
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
    let sizes = Sizes::from_env();
    let modes = Mode::selected();
    let mut runs = Vec::new();
    for round in 0..sizes.repeats {
        for k in 0..modes.len() {
            let mode = modes[(round + k) % modes.len()];
            let run = run_once(round, mode, sizes).await;
            // A whole row as soon as it is known: a long run cut short still leaves its figures behind.
            eprintln!(
                "round {}/{} {}: {:.2} pods/s, placed {:.1} s, Bound {:.1} s, algorithm {:.2} ms/pod, PreBind {:.1} s, \
                 CPU scheduler {:.1} s apiserver {:.1} s{}",
                round + 1,
                sizes.repeats,
                mode.key(),
                run.pods_per_second,
                run.placed,
                run.bound,
                run.scheduler.algorithm_ms,
                run.scheduler.prebind_s,
                run.scheduler_cpu,
                run.apiserver_cpu,
                run.extender
                    .as_ref()
                    .map(|e| format!(
                        ", extender CPU {:.1} s, filter {:.0} x {:.2} ms, prioritize {:.0} x {:.2} ms, errors {:.0}",
                        e.cpu, e.filter_calls, e.filter_mean_ms, e.prioritize_calls, e.prioritize_mean_ms, e.errors
                    ))
                    .unwrap_or_default()
            );
            runs.push(run);
        }
    }
    report(&runs, sizes);
}
