//! The busy node: disks present when the provisioner starts, a burst of mounts at once, then mounts one by one,
//! for each provisioner in turn on one fresh plane per round (the order rotates each round, so none always runs
//! first on a cold plane). Each provisioner is stopped and its disks unmounted before the next starts, so every
//! one sees the same mount table. Also the discovery path's cost per event at several disk counts (localpv).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::cluster::ControlPlane;
use crate::support::disks::Mount;
use crate::support::nodes::create_node;

use crate::agent::subject::{KINDS, Kind, Subject};
use crate::agent::watch::Watch;
use crate::{Results, Sizes, plane};

pub fn mount_all(paths: &[String], cp: &ControlPlane, mounts: &mut Vec<Mount>) {
    for p in paths {
        mounts.push(Mount::tmpfs(Path::new(p), "16M", cp.reaper()));
    }
}

pub fn disk_paths(subject: &Subject, prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            subject
                .disk(&format!("{prefix}{i:05}"))
                .display()
                .to_string()
        })
        .collect()
}

/// A node name per provisioner and round, so PV names and paths never repeat on one plane.
pub fn node_name(kind: Kind, tag: &str) -> String {
    format!("bench-{}-{tag}", kind.key().replace('_', "-"))
}

/// A pause of a pseudo-random length before each timed mount, so a mount lands anywhere in a polling provisioner's
/// period (right after a pass it would always wait the whole period): up to the period (10 s, 1 s) for the
/// reference provisioner, up to 200 ms for localpv, which reacts to the mount notification and has no period.
struct Phase(u64);

impl Phase {
    fn pause(&mut self, kind: Kind) -> Duration {
        // xorshift64: reproducible from the seed, no dependency.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let period = match kind {
            Kind::Localpv => 200,
            Kind::LspDefault => 10_000,
            Kind::LspFast => 1_000,
        };
        Duration::from_millis(self.0 % period)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Round `round`: every provisioner that still has rounds to run (LSP runs `lsp_repeats` of them).
pub async fn round(s: &Sizes, round: usize, r: &mut Results) {
    let cp = plane().await;
    let watch = Watch::start(cp.client(), &cp.dir.display().to_string()).await;
    for i in 0..KINDS.len() {
        let kind = KINDS[(i + round) % KINDS.len()];
        if kind != Kind::Localpv && round >= s.lsp_repeats {
            continue;
        }
        eprintln!("busy round {round}: {}", kind.label());
        one(s, &cp, &watch, kind, round, r).await;
    }
}

async fn one(
    s: &Sizes,
    cp: &ControlPlane,
    watch: &Watch,
    kind: Kind,
    round: usize,
    r: &mut Results,
) {
    let node = node_name(kind, &format!("r{round}"));
    create_node(&cp.client(), &node, &[]).await;
    // NB: the provisioner is stopped at the end by hand; then the mounts go, then the subject (LSP's shared mount).
    let mut subject = Subject::new(cp, kind, &node);
    let mut mounts: Vec<Mount> = Vec::new();
    let long = Duration::from_secs(1800);
    let mut phase = Phase(0x9E37_79B9_7F4A_7C15 ^ (round as u64 + 1));

    let present = disk_paths(&subject, "pre", s.disks);
    mount_all(&present, cp, &mut mounts);
    let t0 = Instant::now();
    subject.start(cp);
    let created = watch.all(&present, false, long).await - t0;
    let available = watch.all(&present, true, long).await - t0;
    r.add(kind, "start_created", created.as_secs_f64());
    r.add(kind, "start_available", available.as_secs_f64());
    subject.wait_ready().await;

    let burst = disk_paths(&subject, "burst", s.mounts);
    tokio::time::sleep(phase.pause(kind)).await;
    let t0 = Instant::now();
    mount_all(&burst, cp, &mut mounts);
    let created = watch.all(&burst, false, long).await - t0;
    let available = watch.all(&burst, true, long).await - t0;
    r.add(kind, "burst_created", created.as_secs_f64());
    r.add(kind, "burst_available", available.as_secs_f64());

    let n = match (round, kind) {
        (0, Kind::Localpv) => s.mounts,
        (0, _) => s.lsp_mounts,
        _ => 0,
    };
    for p in disk_paths(&subject, "one", n) {
        tokio::time::sleep(phase.pause(kind)).await;
        let t0 = Instant::now();
        mount_all(std::slice::from_ref(&p), cp, &mut mounts);
        let path = [p];
        let created = watch.all(&path, false, Duration::from_secs(120)).await - t0;
        let available = watch.all(&path, true, Duration::from_secs(120)).await - t0;
        r.add(kind, "one_created", ms(created));
        r.add(kind, "one_available", ms(available));
    }
    subject.stop();
    if kind == Kind::Localpv {
        let floor = api_floor(cp, watch, &node, &present).await;
        r.add(kind, "start_floor", floor.as_secs_f64());
    }
}

/// The API server's floor under "disks present at start": copies of the PVs the agent created for `present`, made
/// by a bare client with the agent's concurrency (16 creates at once) on the same plane once the agent stopped,
/// from the first create until the benchmark's watch saw the last. What the agent adds to it (its start, the
/// discovery, the ledger writes) is the difference. The copies go again before the next provisioner starts.
async fn api_floor(cp: &ControlPlane, watch: &Watch, node: &str, present: &[String]) -> Duration {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
    use localpv::contract::NODE_LABEL;

    const CONCURRENCY: usize = 16;
    let api: Api<PersistentVolume> = Api::all(cp.client());
    let ours = api
        .list(&ListParams::default().labels(&format!("{NODE_LABEL}={node}")))
        .await
        .expect("the agent's PVs listed");
    let wanted: std::collections::BTreeSet<&str> = present.iter().map(String::as_str).collect();
    let floor_label = format!("localpv-bench-floor={node}");
    let copies: Vec<PersistentVolume> = ours
        .items
        .into_iter()
        .filter_map(|pv| {
            let mut spec = pv.spec?;
            let local = spec.local.as_mut()?;
            if !wanted.contains(local.path.as_str()) {
                return None;
            }
            local.path = floor_path(&local.path);
            let mut labels = pv.metadata.labels.unwrap_or_default();
            labels.remove(NODE_LABEL);
            labels.insert("localpv-bench-floor".into(), node.into());
            Some(PersistentVolume {
                metadata: ObjectMeta {
                    name: pv.metadata.name.map(|n| format!("floor-{n}")),
                    labels: Some(labels),
                    annotations: pv.metadata.annotations,
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
                status: None,
            })
        })
        .collect();
    assert_eq!(
        copies.len(),
        present.len(),
        "a PV for every disk present at start"
    );
    let paths: Vec<String> = present.iter().map(|p| floor_path(p)).collect();
    let t0 = Instant::now();
    futures::stream::iter(copies.iter())
        .map(|pv| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), pv)
                    .await
                    .expect("floor PV created")
            }
        })
        .buffer_unordered(CONCURRENCY)
        .for_each(|_| async {})
        .await;
    let floor = watch.all(&paths, false, Duration::from_secs(600)).await - t0;
    let selector = ListParams::default().labels(&floor_label);
    api.delete_collection(&DeleteParams::default(), &selector)
        .await
        .expect("floor PVs deleted");
    crate::support::eventually("the floor's PVs gone", Duration::from_secs(300), || async {
        let left = api
            .list(&selector)
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .await;
    floor
}

/// Where a floor copy of the PV for `path` points (a path under the plane, so the benchmark's watch sees it).
fn floor_path(path: &str) -> String {
    format!("{path}-floor")
}

/// localpv's cost per mount event with `n` disks already on the node, for each `n` of `sizes`: mount to PV
/// created, and the agent's own discovery time per event (`localpv_node_discovery_duration_seconds`, sum over
/// count between the first and last of the mounts).
pub async fn event_cost(s: &Sizes, r: &mut Results) {
    let cp = plane().await;
    let watch = Watch::start(cp.client(), &cp.dir.display().to_string()).await;
    for &n in &s.cost_sizes {
        eprintln!("event cost: {n} disks");
        let node = node_name(Kind::Localpv, &format!("cost{n}"));
        create_node(&cp.client(), &node, &[]).await;
        let mut subject = Subject::new(&cp, Kind::Localpv, &node);
        let mut mounts: Vec<Mount> = Vec::new();
        let present = disk_paths(&subject, "pre", n);
        mount_all(&present, &cp, &mut mounts);
        subject.start(&cp);
        watch.all(&present, true, Duration::from_secs(1800)).await;
        subject.wait_ready().await;
        // Let the start-up passes finish before the counters are read.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let read = |subject: &Subject| {
            let sum = subject.metric("localpv_node_discovery_duration_seconds_sum");
            let count = subject.metric("localpv_node_discovery_duration_seconds_count");
            match (sum, count) {
                (Some(s), Some(c)) => (s, c),
                _ => panic!(
                    "the agent exposes no localpv_node_discovery_duration_seconds histogram on /metrics:\n{}",
                    subject.log()
                ),
            }
        };
        let (sum0, count0) = read(&subject);
        let mut latencies = Vec::new();
        for p in disk_paths(&subject, "one", s.cost_mounts) {
            let t0 = Instant::now();
            mount_all(std::slice::from_ref(&p), &cp, &mut mounts);
            let created = watch.all(&[p], false, Duration::from_secs(120)).await - t0;
            latencies.push(ms(created));
            // The next mount after the agent has settled: one event at a time.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (sum1, count1) = read(&subject);
        let passes = count1 - count0;
        r.add_all(
            Kind::Localpv,
            &format!("event_created_{n}_disks"),
            &latencies,
        );
        r.add(
            Kind::Localpv,
            &format!("event_passes_per_mount_{n}_disks"),
            passes / s.cost_mounts as f64,
        );
        // NB: an agent that handles a mount event without a counted pass leaves no time per pass to report.
        if passes > 0.0 {
            r.add(
                Kind::Localpv,
                &format!("event_pass_ms_{n}_disks"),
                (sum1 - sum0) / passes * 1000.0,
            );
        }
        subject.stop();
    }
}
