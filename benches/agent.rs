//! Node agent benchmarks on the real control plane (not timed tests). Prints markdown tables; `bench/agent.sh`
//! runs it. Two kinds of plane, each started fresh:
//!
//! - busy node, once per repeat: N disks mounted before the agent starts (time until all are PVs / Available),
//!   then a burst of mounts at once; the first repeat also mounts disks one by one (latency per mount).
//! - quiet node, once: a few own disks, then other nodes' PVs added until the cluster holds 1/10 and all of
//!   LOCALPV_BENCH_OTHER_PVS (resident memory at each), then a Filesystem volume holding many files is released
//!   and recycled repeatedly (Released to new PV Available), then requests at steady state by verb from the
//!   audit log.
//!
//! Sizes come from the environment so a quick run is possible: LOCALPV_BENCH_REPEATS (3), LOCALPV_BENCH_MOUNTS
//! (100), LOCALPV_BENCH_DISKS (1000), LOCALPV_BENCH_OTHER_PVS (10000: PVs in the cluster for the second memory
//! figure), LOCALPV_BENCH_OWN_DISKS (100: own disks of the quiet node), LOCALPV_BENCH_WIPE_FILES (100000),
//! LOCALPV_BENCH_STEADY_SECS (300: a whole cycle of the agent's watches, which kube-rs asks the API server to end
//! after 290 s). With LOCALPV_BENCH_FIGURES set, headline figures are appended there as JSON lines (bench/run.sh
//! turns them into docs/benchmarks.md).

mod common;
#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::task::JoinHandle;

use common::figures::{Spread, figure, millis, percentile, sorted, spread};
use support::agent::{Agent, install_crd};
use support::cluster::{ControlPlane, Options};
use support::disks::Mount;
use support::nodes::create_node;

const NODE: &str = "bench-node";
const CLASS: &str = "local-storage";
const VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

fn env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Sizes {
    repeats: usize,
    mounts: usize,
    disks: usize,
    cluster_pvs: usize,
    own: usize,
    wipe_files: usize,
    steady: u64,
}

impl Sizes {
    fn from_env() -> Sizes {
        Sizes {
            repeats: env("LOCALPV_BENCH_REPEATS", 3).max(1),
            mounts: env("LOCALPV_BENCH_MOUNTS", 100),
            disks: env("LOCALPV_BENCH_DISKS", 1000),
            cluster_pvs: env("LOCALPV_BENCH_OTHER_PVS", 10000),
            own: env("LOCALPV_BENCH_OWN_DISKS", 100),
            wipe_files: env("LOCALPV_BENCH_WIPE_FILES", 100000),
            steady: env("LOCALPV_BENCH_STEADY_SECS", 300) as u64,
        }
    }

    fn describe(&self) -> String {
        format!(
            "LOCALPV_BENCH_REPEATS={} LOCALPV_BENCH_MOUNTS={} LOCALPV_BENCH_DISKS={} LOCALPV_BENCH_OTHER_PVS={} \
             LOCALPV_BENCH_OWN_DISKS={} LOCALPV_BENCH_WIPE_FILES={} LOCALPV_BENCH_STEADY_SECS={}",
            self.repeats,
            self.mounts,
            self.disks,
            self.cluster_pvs,
            self.own,
            self.wipe_files,
            self.steady
        )
    }
}

/// What the benchmark's own watch on the node's PVs saw, stamped when it saw it.
#[derive(Default)]
struct Seen {
    synced: bool,
    /// First time each local path had a PV, and an Available PV.
    created: BTreeMap<String, Instant>,
    available: BTreeMap<String, Instant>,
    /// Every change, in order.
    changes: Vec<Change>,
}

struct Change {
    at: Instant,
    name: String,
    uid: String,
    path: String,
    phase: String,
}

/// A watch on the node's PVs for the life of one plane; aborted on drop, so it never outlives its API server.
struct Watch {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Watch {
    async fn start(client: kube::Client) -> Watch {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(record(client, seen.clone()));
        let w = Watch { seen, task };
        w.until(
            "the benchmark's PV watch to sync",
            Duration::from_secs(30),
            |s| s.synced.then_some(()),
        )
        .await;
        w
    }

    /// Polls what was seen every 2 ms until `check` answers, panicking after `timeout`.
    async fn until<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Seen) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check(&self.seen.lock().expect("seen lock")) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// When the last of `paths` first had a PV (`available`: an Available PV).
    async fn all(&self, paths: &[String], available: bool, timeout: Duration) -> Instant {
        let what = format!("{} PVs (available: {available})", paths.len());
        self.until(&what, timeout, |s| {
            let map = if available { &s.available } else { &s.created };
            paths
                .iter()
                .map(|p| map.get(p).copied())
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .max()
        })
        .await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(client: kube::Client, seen: Arc<Mutex<Seen>>) {
    let api: Api<PersistentVolume> = Api::all(client);
    let cfg = watcher::Config::default().labels(&format!("localpv.io/node={NODE}"));
    let mut stream = watcher(api, cfg).default_backoff().boxed();
    while let Ok(Some(event)) = stream.try_next().await {
        let now = Instant::now();
        let pv = match event {
            watcher::Event::Apply(pv) | watcher::Event::InitApply(pv) => pv,
            watcher::Event::InitDone => {
                seen.lock().expect("seen lock").synced = true;
                continue;
            }
            _ => continue,
        };
        let Some(path) = pv
            .spec
            .as_ref()
            .and_then(|s| s.local.as_ref())
            .map(|l| l.path.clone())
        else {
            continue;
        };
        let phase = pv.status.and_then(|s| s.phase).unwrap_or_default();
        let mut s = seen.lock().expect("seen lock");
        s.created.entry(path.clone()).or_insert(now);
        if phase == "Available" {
            s.available.entry(path.clone()).or_insert(now);
        }
        s.changes.push(Change {
            at: now,
            name: pv.metadata.name.unwrap_or_default(),
            uid: pv.metadata.uid.unwrap_or_default(),
            path,
            phase,
        });
    }
}

/// A control plane with kube-controller-manager, the LocalDisk CRD, the class (reclaim Delete) and the node.
async fn plane() -> ControlPlane {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Default::default()
    })
    .await;
    install_crd(&cp).await;
    let sc: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(json!({
        "metadata": {"name": CLASS}, "provisioner": "kubernetes.io/no-provisioner",
        "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"}))
    .expect("class literal");
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(cp.client())
        .create(&PostParams::default(), &sc)
        .await
        .expect("class created");
    create_node(&cp.client(), NODE, &[]).await;
    cp
}

fn mount_all(paths: &[String], cp: &ControlPlane, mounts: &mut Vec<Mount>) {
    for p in paths {
        mounts.push(Mount::tmpfs(Path::new(p), "16M", cp.reaper()));
    }
}

fn disk_paths(agent: &Agent, prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| agent.disk(&format!("{prefix}{i:05}")).display().to_string())
        .collect()
}

/// One busy-node round, on a fresh plane with fresh mounts.
struct Round {
    published: Duration,
    all_available: Duration,
    burst_created: Duration,
    burst_available: Duration,
    /// Per mount: (to PV created, to PV Available); measured in the first round only.
    one_by_one: Vec<(Duration, Duration)>,
}

async fn busy_round(s: &Sizes, one_by_one: bool) -> Round {
    // NB: declaration order is teardown order reversed: the agent stops first, then the mounts go, then the
    // plane (which removes its directory, where the mount points live).
    let cp = plane().await;
    let watch = Watch::start(cp.client()).await;
    let mut mounts: Vec<Mount> = Vec::new();
    let mut agent = Agent::new(&cp, NODE, CLASS);

    let present = disk_paths(&agent, "pre", s.disks);
    mount_all(&present, &cp, &mut mounts);
    let t0 = Instant::now();
    agent.start(&cp);
    let published = watch.all(&present, false, Duration::from_secs(600)).await - t0;
    let all_available = watch.all(&present, true, Duration::from_secs(600)).await - t0;
    agent.wait_ready().await;

    let burst = disk_paths(&agent, "burst", s.mounts);
    let t0 = Instant::now();
    mount_all(&burst, &cp, &mut mounts);
    let burst_created = watch.all(&burst, false, Duration::from_secs(120)).await - t0;
    let burst_available = watch.all(&burst, true, Duration::from_secs(120)).await - t0;

    let mut samples = Vec::new();
    for p in disk_paths(&agent, "one", if one_by_one { s.mounts } else { 0 }) {
        let t0 = Instant::now();
        mount_all(std::slice::from_ref(&p), &cp, &mut mounts);
        let path = [p];
        let created = watch.all(&path, false, Duration::from_secs(60)).await - t0;
        let available = watch.all(&path, true, Duration::from_secs(60)).await - t0;
        samples.push((created, available));
    }
    Round {
        published,
        all_available,
        burst_created,
        burst_available,
        one_by_one: samples,
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

/// Creates PVs `other-<from>..other-<to>` spread over 100 other nodes, Available.
async fn other_pvs(client: &kube::Client, from: usize, to: usize) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    futures::stream::iter(from..to)
        .map(|i| {
            let api = api.clone();
            async move {
                let node = format!("other-{}", i % 100);
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": format!("other-{i}"), "labels": {"localpv.io/node": node}},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": CLASS, "local": {"path": format!("/mnt/d/{i}")},
                             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
                }))
                .expect("PV literal");
                let name = format!("other-{i}");
                api.create(&PostParams::default(), &pv).await.expect("PV created");
                // NB: left to kube-controller-manager, whose client is held to 20 requests/s, 10,000 phase updates
                // queue for ~8 minutes and hold back every PV created after them (a recycled one too). Other
                // nodes' PVs in a real cluster have long been Available, so the benchmark sets the phase itself.
                let available = json!({"status": {"phase": "Available"}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&available))
                    .await
                    .expect("PV phase set");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

/// Fills `dir` with `n` small files, 1,000 per sub-directory, as a tenant would have left them.
fn fill(dir: &Path, n: usize) {
    for i in 0..n {
        let sub = dir.join(format!("d{:04}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&sub).expect("tenant directory");
        }
        std::fs::write(
            sub.join(format!("f{:04}", i % 1000)),
            format!("tenant file {i}\n"),
        )
        .expect("tenant file");
    }
}

struct Quiet {
    own_pvs: usize,
    small: usize,
    rss_small_kib: u64,
    rss_large_kib: u64,
    recycle: Vec<Duration>,
    /// Requests per verb during the steady-state window.
    steady: BTreeMap<String, usize>,
    /// Watches the agent held open at the end of that window.
    open_watches: usize,
}

async fn quiet_node(s: &Sizes) -> Quiet {
    let cp = plane().await;
    let client = cp.client();
    let watch = Watch::start(client.clone()).await;
    let mut mounts: Vec<Mount> = Vec::new();
    let mut agent = Agent::new(&cp, NODE, CLASS);
    let mut own = disk_paths(&agent, "own", s.own);
    let vol = agent.disk("tenant");
    own.push(vol.display().to_string());
    mount_all(&own[..s.own], &cp, &mut mounts);
    // A page per small file: 100,000 files take some 400 MiB of tmpfs.
    mounts.push(Mount::tmpfs(
        &vol,
        &format!("{}M", 64 + s.wipe_files / 200),
        cp.reaper(),
    ));
    agent.start(&cp);
    watch.all(&own, true, Duration::from_secs(120)).await;
    agent.wait_ready().await;
    let pid = agent
        .process
        .as_ref()
        .and_then(|p| p.pid())
        .expect("agent pid");

    let small = (s.cluster_pvs / 10).max(own.len());
    other_pvs(&client, 0, small - own.len()).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_small_kib = rss_kib(pid);
    other_pvs(
        &client,
        small - own.len(),
        s.cluster_pvs.max(small) - own.len(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_large_kib = rss_kib(pid);

    let ns = cp.namespace("bench").await;
    let mut recycle = Vec::new();
    for r in 0..s.repeats {
        recycle.push(release_and_recycle(&client, &watch, &ns, &vol, r, s.wipe_files).await);
    }

    tokio::time::sleep(Duration::from_secs(3)).await;
    let audit = cp.dir.join("logs/audit.log");
    let before = requests(&audit, &agent.user, &BTreeSet::new()).ids;
    // NB: an empty count proves nothing if the user filter is wrong: the agent's start-up requests must be there.
    assert!(
        !before.is_empty(),
        "no request by {} in {}",
        agent.user,
        audit.display()
    );
    tokio::time::sleep(Duration::from_secs(s.steady)).await;
    let after = requests(&audit, &agent.user, &before);
    Quiet {
        own_pvs: own.len(),
        small,
        rss_small_kib,
        rss_large_kib,
        recycle,
        steady: after.new_by_verb,
        open_watches: after.open_watches,
    }
}

/// Binds the Available PV at `vol` to a claim, fills the volume with `files` files, deletes the claim and times
/// from the PV seen Released to a new PV for the same path seen Available.
async fn release_and_recycle(
    client: &kube::Client,
    watch: &Watch,
    ns: &str,
    vol: &Path,
    round: usize,
    files: usize,
) -> Duration {
    let path = vol.display().to_string();
    let (name, uid) = watch
        .until(
            &format!("an Available PV for {path}"),
            Duration::from_secs(60),
            |s| {
                let last = s.changes.iter().rev().find(|c| c.path == path)?;
                (last.phase == "Available").then(|| (last.name.clone(), last.uid.clone()))
            },
        )
        .await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claim = format!("tenant-{round}");
    let pvc: PersistentVolumeClaim =
        serde_json::from_value(json!({"metadata": {"name": claim}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS, "volumeName": name,
        "resources": {"requests": {"storage": "10Mi"}}}}))
        .expect("PVC literal");
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("PVC created");
    let in_phase = |phase: &'static str| {
        let uid = uid.clone();
        move |s: &Seen| {
            s.changes
                .iter()
                .find(|c| c.uid == uid && c.phase == phase)
                .map(|c| c.at)
        }
    };
    watch
        .until(
            &format!("{name} Bound"),
            Duration::from_secs(60),
            in_phase("Bound"),
        )
        .await;
    let dir = vol.to_path_buf();
    tokio::task::spawn_blocking(move || fill(&dir, files))
        .await
        .expect("fill task");
    pvcs.delete(&claim, &DeleteParams::default())
        .await
        .expect("PVC deleted");
    let released = watch
        .until(
            &format!("{name} Released"),
            Duration::from_secs(60),
            in_phase("Released"),
        )
        .await;
    let fresh = watch
        .until(
            &format!("a new Available PV for {path}"),
            Duration::from_secs(600),
            |s| {
                s.changes
                    .iter()
                    .find(|c| {
                        c.at > released && c.uid != uid && c.path == path && c.phase == "Available"
                    })
                    .map(|c| c.at)
            },
        )
        .await;
    assert!(
        std::fs::read_dir(vol)
            .expect("volume readable")
            .next()
            .is_none(),
        "the recycled volume is empty"
    );
    fresh - released
}

/// What the audit log holds for one user.
struct Audited {
    /// Every request's audit ID.
    ids: BTreeSet<String>,
    /// Requests per verb, leaving out those in the `known` set given.
    new_by_verb: BTreeMap<String, usize>,
    /// Watches started and not ended (their ResponseComplete is not logged yet).
    open_watches: usize,
}

/// Requests by `user` in the audit log. A watch counts when it starts (ResponseStarted), other requests when
/// answered (RequestReceived is not logged).
fn requests(audit_log: &Path, user: &str, known: &BTreeSet<String>) -> Audited {
    use support::audit::{entries, text};
    let mut a = Audited {
        ids: BTreeSet::new(),
        new_by_verb: BTreeMap::new(),
        open_watches: 0,
    };
    let mut open = BTreeSet::new();
    for e in entries(audit_log) {
        if support::audit::user(&e) != user {
            continue;
        }
        let id = text(&e["auditID"]);
        if e["verb"] == "watch" {
            if e["stage"] == "ResponseComplete" {
                open.remove(&id);
            } else {
                open.insert(id.clone());
            }
        }
        if a.ids.insert(id.clone()) && !known.contains(&id) {
            *a.new_by_verb.entry(text(&e["verb"])).or_insert(0) += 1;
        }
    }
    a.open_watches = open.len();
    a
}

/// "median X (min-max)" in `unit` (ms or s), and the figure behind it.
fn timed(key: &str, label: &str, unit: &str, samples: &[Duration]) -> String {
    let scale = if unit == "ms" { 1000.0 } else { 1.0 };
    let v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * scale).collect();
    figure(key, label, unit, &v);
    let Spread {
        median, min, max, ..
    } = spread(&v);
    let digits = if unit == "ms" { 1 } else { 2 };
    format!(
        "median {median:.digits$} {unit} ({min:.digits$}-{max:.digits$}, n={})",
        v.len()
    )
}

fn p99(samples: &[Duration]) -> Duration {
    Duration::from_secs_f64(percentile(&sorted(&millis(samples)), 0.99) / 1000.0)
}

fn row(what: &str, result: String) {
    println!("| {what} | {result} |");
}

fn busy_table(s: &Sizes, rounds: &[Round]) {
    let pick = |f: fn(&Round) -> Duration| rounds.iter().map(f).collect::<Vec<_>>();
    let one = &rounds[0].one_by_one;
    if !one.is_empty() {
        let created: Vec<_> = one.iter().map(|x| x.0).collect();
        let available: Vec<_> = one.iter().map(|x| x.1).collect();
        let label = format!("mount to PV created, one by one ({} mounts)", one.len());
        let t = timed("agent.mount_to_created_one_by_one", &label, "ms", &created);
        row(
            &format!("{label}, {} disks already on the node", s.disks + s.mounts),
            format!("{t}; p99 {:.1} ms", p99(&created).as_secs_f64() * 1000.0),
        );
        let label = format!("mount to PV Available, one by one ({} mounts)", one.len());
        let t = timed(
            "agent.mount_to_available_one_by_one",
            &label,
            "ms",
            &available,
        );
        row(
            &format!("{label}, PV controller included"),
            format!("{t}; p99 {:.1} ms", p99(&available).as_secs_f64() * 1000.0),
        );
    }
    let label = format!("burst of {} mounts: all PVs created", s.mounts);
    let t = timed(
        "agent.burst_100_created",
        &label,
        "s",
        &pick(|r| r.burst_created),
    );
    row(
        &format!("{label} ({} disks already on the node)", s.disks),
        t,
    );
    let label = format!("burst of {} mounts: all PVs Available", s.mounts);
    row(
        &label,
        timed(
            "agent.burst_100_available",
            &label,
            "s",
            &pick(|r| r.burst_available),
        ),
    );
    let label = format!("{} disks present at agent start: all PVs created", s.disks);
    row(
        &label,
        timed(
            "agent.publish_1000_created",
            &label,
            "s",
            &pick(|r| r.published),
        ),
    );
    let label = format!(
        "{} disks present at agent start: all PVs Available",
        s.disks
    );
    row(
        &label,
        timed(
            "agent.publish_1000_available",
            &label,
            "s",
            &pick(|r| r.all_available),
        ),
    );
}

fn quiet_table(s: &Sizes, q: &Quiet) {
    let label = format!(
        "Released to new PV Available, Filesystem volume (tmpfs) with {} files",
        s.wipe_files
    );
    row(
        &label,
        timed(
            "agent.released_to_available_100k_files",
            &label,
            "s",
            &q.recycle,
        ),
    );
    let own = q.own_pvs;
    for (key, total, kib) in [
        ("agent.rss_1000_pvs", q.small, q.rss_small_kib),
        (
            "agent.rss_10000_pvs",
            s.cluster_pvs.max(q.small),
            q.rss_large_kib,
        ),
    ] {
        let label = format!(
            "agent RSS, {total} PVs in the cluster ({own} own, the rest on 100 other nodes)"
        );
        let mib = kib as f64 / 1024.0;
        figure(key, &label, "MiB", &[mib]);
        row(&label, format!("{mib:.1} MiB"));
    }
    let hour = 3600.0 / s.steady as f64;
    let per_hour = |verb: &str| *q.steady.get(verb).unwrap_or(&0) as f64 * hour;
    let writes: f64 = ["create", "update", "patch", "delete"]
        .iter()
        .map(|v| per_hour(v))
        .sum();
    let label = format!(
        "write requests per hour at steady state ({} s window)",
        s.steady
    );
    figure("agent.steady_writes_per_hour", &label, "req/h", &[writes]);
    row(
        &label,
        format!(
            "{writes:.0} (target 0: {})",
            if writes == 0.0 { "pass" } else { "FAIL" }
        ),
    );
    let mut counts = Vec::new();
    for verb in VERBS {
        let label = format!("{verb} requests per hour at steady state");
        figure(
            &format!("agent.steady_requests_per_hour.{verb}"),
            &label,
            "req/h",
            &[per_hour(verb)],
        );
        counts.push(format!("{:.0}", per_hour(verb)));
    }
    let other: usize = q
        .steady
        .iter()
        .filter(|(v, _)| !VERBS.contains(&v.as_str()))
        .map(|x| x.1)
        .sum();
    row(
        &format!(
            "requests per hour at steady state by verb: {}",
            VERBS.join(" / ")
        ),
        format!(
            "{}{}; {} watches held open",
            counts.join(" / "),
            if other > 0 {
                format!(" (+{other} other)")
            } else {
                String::new()
            },
            q.open_watches
        ),
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let s = Sizes::from_env();
    let started = Instant::now();
    let mut rounds = Vec::new();
    for r in 0..s.repeats {
        rounds.push(busy_round(&s, r == 0).await);
    }
    let quiet = quiet_node(&s).await;
    println!("Sizes: {}", s.describe());
    println!();
    println!("| measurement | result |");
    println!("| --- | --- |");
    busy_table(&s, &rounds);
    quiet_table(&s, &quiet);
    println!();
    println!(
        "Each repeat of the disks-present and burst rows runs on a fresh control plane with fresh mounts; the \
         memory, recycle and steady-state rows on one more plane whose node has {} disks. Run time {:.0} s.",
        quiet.own_pvs,
        started.elapsed().as_secs_f64()
    );
}
