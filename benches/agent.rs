//! Node agent benchmarks on the real control plane (not timed tests), side by side with the reference provisioner
//! (sig-storage-local-static-provisioner, "LSP") at its default discovery period and at `--discovery-period=1s`,
//! interleaved on the same planes over the same kind of disks (tmpfs mounts). Prints markdown tables;
//! `bench/agent.sh` builds LSP and runs it. Three kinds of plane, each started fresh:
//!
//! - busy node (`agent::busy`), once per round: N disks mounted before the provisioner starts (time until all are PVs /
//!   Available), a burst of mounts at once, and in the first round mounts one by one (latency per mount).
//! - event cost (`agent::busy::event_cost`), localpv only: one mount at a time with 10, 1,000 and 5,000 disks on the node.
//! - quiet node (`agent::quiet`), once: resident memory as other nodes' PVs are added, restart to ready, Released to
//!   Available with many files, requests at steady state by verb from the audit log, a bind mount inside a
//!   released volume.
//!
//! Sizes come from the environment so a quick run is possible: LOCALPV_BENCH_REPEATS (3), LOCALPV_BENCH_LSP_REPEATS
//! (1: busy rounds with LSP, whose 1,000 creates at client-go's default 5 requests/s take minutes each; 0: localpv
//! alone, for a quick look at its own rows while working on them),
//! LOCALPV_BENCH_QUIET_REPEATS (as REPEATS: restarts and recycles per provisioner), LOCALPV_BENCH_SERIAL (0: the
//! busy and quiet planes run at the same time),
//! LOCALPV_BENCH_MOUNTS (100), LOCALPV_BENCH_LSP_MOUNTS (20: one-by-one mounts for LSP, each waiting up to its
//! period), LOCALPV_BENCH_DISKS (1000), LOCALPV_BENCH_OTHER_PVS (10000: PVs in the cluster for the
//! second memory figure and the restart), LOCALPV_BENCH_OWN_DISKS (100), LOCALPV_BENCH_WIPE_FILES
//! ("10000,100000,1000000"), LOCALPV_BENCH_COST_SIZES ("10,1000,5000"), LOCALPV_BENCH_COST_MOUNTS (20),
//! LOCALPV_BENCH_PLANES ("busy,quiet": the planes that run; "cost" runs the busy plane's event cost rows
//! alone), LOCALPV_BENCH_STEADY_SECS (300: a whole cycle of localpv's watches, which kube-rs asks the API server
//! to end after 290 s). With LOCALPV_BENCH_FIGURES set, headline figures are appended there as JSON lines
//! (bench/run.sh turns them into docs/benchmarks.md); LSP needs LOCALPV_BENCH_LSP (its binary).

mod common;
use localpv_test_support as support;

/// The benchmark's parts, in benches/agent/ (a directory without main.rs, so cargo builds no target of it).
mod agent {
    pub mod busy;
    pub mod quiet;
    pub mod subject;
    pub mod watch;
}

use std::collections::BTreeMap;
use std::time::Instant;

use kube::api::{Api, PostParams};
use serde_json::json;

use agent::subject::{KINDS, Kind};
use agent::{busy, quiet};
use common::figures::{Spread, append, figure, percentile, sorted, spread};
use support::agent::install_crd;
use support::cluster::{ControlPlane, Options};

pub const CLASS: &str = "local-storage";

fn env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_list(key: &str, default: &str) -> Vec<usize> {
    let text = std::env::var(key).unwrap_or_else(|_| default.to_string());
    text.split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{key}: '{v}' is not a number"))
        })
        .collect()
}

pub struct Sizes {
    pub repeats: usize,
    pub lsp_repeats: usize,
    pub quiet_repeats: usize,
    pub mounts: usize,
    pub lsp_mounts: usize,
    pub disks: usize,
    pub cluster_pvs: usize,
    pub own: usize,
    pub wipe_files: Vec<usize>,
    pub cost_sizes: Vec<usize>,
    pub cost_mounts: usize,
    pub steady: u64,
}

impl Sizes {
    fn from_env() -> Sizes {
        let repeats = env("LOCALPV_BENCH_REPEATS", 3).max(1);
        Sizes {
            repeats,
            lsp_repeats: env("LOCALPV_BENCH_LSP_REPEATS", 1).min(repeats),
            quiet_repeats: env("LOCALPV_BENCH_QUIET_REPEATS", repeats).max(1),
            mounts: env("LOCALPV_BENCH_MOUNTS", 100),
            lsp_mounts: env("LOCALPV_BENCH_LSP_MOUNTS", 20),
            disks: env("LOCALPV_BENCH_DISKS", 1000),
            cluster_pvs: env("LOCALPV_BENCH_OTHER_PVS", 10000),
            own: env("LOCALPV_BENCH_OWN_DISKS", 100),
            wipe_files: env_list("LOCALPV_BENCH_WIPE_FILES", "10000,100000,1000000"),
            cost_sizes: env_list("LOCALPV_BENCH_COST_SIZES", "10,1000,5000"),
            cost_mounts: env("LOCALPV_BENCH_COST_MOUNTS", 20).max(1),
            steady: env("LOCALPV_BENCH_STEADY_SECS", 300) as u64,
        }
    }

    fn describe(&self) -> String {
        let list = |v: &[usize]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        format!(
            "LOCALPV_BENCH_REPEATS={} LOCALPV_BENCH_LSP_REPEATS={} LOCALPV_BENCH_QUIET_REPEATS={} LOCALPV_BENCH_MOUNTS={} LOCALPV_BENCH_LSP_MOUNTS={} \
             LOCALPV_BENCH_DISKS={} LOCALPV_BENCH_OTHER_PVS={} LOCALPV_BENCH_OWN_DISKS={} \
             LOCALPV_BENCH_WIPE_FILES={} LOCALPV_BENCH_COST_SIZES={} LOCALPV_BENCH_COST_MOUNTS={} \
             LOCALPV_BENCH_STEADY_SECS={}",
            self.repeats,
            self.lsp_repeats,
            self.quiet_repeats,
            self.mounts,
            self.lsp_mounts,
            self.disks,
            self.cluster_pvs,
            self.own,
            list(&self.wipe_files),
            list(&self.cost_sizes),
            self.cost_mounts,
            self.steady
        )
    }
}

/// Samples per (provisioner, measure), and outcomes in words.
#[derive(Default)]
pub struct Results {
    samples: BTreeMap<(&'static str, String), Vec<f64>>,
    texts: BTreeMap<(&'static str, String), String>,
}

impl Results {
    pub fn add(&mut self, kind: Kind, measure: &str, v: f64) {
        self.samples
            .entry((kind.key(), measure.to_string()))
            .or_default()
            .push(v);
    }

    pub fn add_all(&mut self, kind: Kind, measure: &str, v: &[f64]) {
        self.samples
            .entry((kind.key(), measure.to_string()))
            .or_default()
            .extend_from_slice(v);
    }

    pub fn text(&mut self, kind: Kind, measure: &str, text: String) {
        self.texts.insert((kind.key(), measure.to_string()), text);
    }

    fn get(&self, kind: Kind, measure: &str) -> Option<&Vec<f64>> {
        self.samples.get(&(kind.key(), measure.to_string()))
    }
}

/// A control plane with kube-controller-manager, the LocalDisk CRD and the class (reclaim Delete).
pub async fn plane() -> ControlPlane {
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
    cp
}

/// Appends an outcome in words (unit "text") to the figures file.
fn outcome(key: &str, label: &str, text: &str) {
    append(json!({"key": key, "label": label, "unit": "text", "text": text}));
}

/// "X (min-max, n=N)" in the figure's unit.
fn cell(unit: &str, samples: &[f64]) -> String {
    let Spread {
        median, min, max, ..
    } = spread(samples);
    let d = if unit == "s" { 2 } else { 1 };
    if samples.len() > 1 && min != max {
        format!(
            "{median:.d$} {unit} ({min:.d$}-{max:.d$}, n={})",
            samples.len()
        )
    } else {
        format!("{median:.d$} {unit}")
    }
}

struct Row {
    measure: String,
    label: String,
    unit: &'static str,
}

fn rows(s: &Sizes) -> Vec<Row> {
    let row = |measure: &str, label: String, unit: &'static str| Row {
        measure: measure.to_string(),
        label,
        unit,
    };
    let small = (s.cluster_pvs / 10).max(3 * (s.own + 1));
    let on_node = s.disks + s.mounts;
    let mut v = vec![
        row(
            "one_created",
            format!("mount to PV created, one by one, {on_node} disks already on the node"),
            "ms",
        ),
        row("one_created_p99", "the same, p99".into(), "ms"),
        row(
            "one_available",
            "mount to PV Available, one by one (PV controller included)".into(),
            "ms",
        ),
        row(
            "burst_created",
            format!(
                "burst of {} mounts ({} disks on the node): all PVs created",
                s.mounts, s.disks
            ),
            "s",
        ),
        row(
            "burst_available",
            format!("burst of {} mounts: all PVs Available", s.mounts),
            "s",
        ),
        row(
            "start_created",
            format!("{} disks present at start: all PVs created", s.disks),
            "s",
        ),
        row(
            "start_floor",
            format!(
                "the same {} PVs created by a bare client, 16 at a time (the API server's floor)",
                s.disks
            ),
            "s",
        ),
        row(
            "start_available",
            format!("{} disks present at start: all PVs Available", s.disks),
            "s",
        ),
        row(
            "restart_ready",
            format!(
                "restart with {} PVs in the cluster: to ready",
                s.cluster_pvs.max(small)
            ),
            "s",
        ),
        row(
            "rss_small",
            format!(
                "resident memory, {small} PVs in the cluster ({} own)",
                s.own + 1
            ),
            "MiB",
        ),
        row(
            "rss_large",
            format!(
                "resident memory, {} PVs in the cluster ({} own)",
                s.cluster_pvs.max(small),
                s.own + 1
            ),
            "MiB",
        ),
        row(
            "steady_total",
            format!(
                "requests per node-hour at steady state ({} s window)",
                s.steady
            ),
            "req/h",
        ),
        row(
            "steady_writes",
            "write requests per node-hour at steady state".into(),
            "req/h",
        ),
    ];
    for verb in quiet::VERBS {
        v.push(row(
            &format!("steady_{verb}"),
            format!("{verb} requests per node-hour at steady state"),
            "req/h",
        ));
    }
    v.push(row(
        "steady_open_watches",
        "watches held open at the end of the window".into(),
        "watches",
    ));
    for n in &s.wipe_files {
        v.push(row(
            &format!("recycle_{n}_files"),
            format!("Released to new PV Available, volume with {n} files"),
            "s",
        ));
    }
    v
}

fn main_table(s: &Sizes, r: &Results) {
    let header: Vec<&str> = KINDS.iter().map(|k| k.label()).collect();
    println!(
        "| measurement | {} | reference (default) / localpv |",
        header.join(" | ")
    );
    println!("| --- |{} --- |", " --- |".repeat(KINDS.len()));
    for row in rows(s) {
        let mut cells = Vec::new();
        let mut medians = Vec::new();
        for kind in KINDS {
            let samples = if row.measure == "one_created_p99" {
                r.get(kind, "one_created")
                    .map(|v| vec![percentile(&sorted(v), 0.99)])
            } else {
                r.get(kind, &row.measure).cloned()
            };
            match samples {
                Some(v) => {
                    let key = format!("agent.{}.{}", kind.key(), row.measure);
                    figure(
                        &key,
                        &format!("{}: {}", kind.label(), row.label),
                        row.unit,
                        &v,
                    );
                    medians.push(Some(spread(&v).median));
                    cells.push(cell(row.unit, &v));
                }
                None => {
                    medians.push(None);
                    cells.push("-".into());
                }
            }
        }
        let ratio = match (medians[0], medians[1]) {
            (Some(ours), Some(theirs)) if ours > 0.0 => format!("{:.1}x", theirs / ours),
            _ => "-".into(),
        };
        println!("| {} | {} | {ratio} |", row.label, cells.join(" | "));
    }
    let outcomes: Vec<String> = KINDS
        .iter()
        .map(|k| {
            let key = (k.key(), "bind_mount".to_string());
            let text = r.texts.get(&key).cloned().unwrap_or_else(|| "-".into());
            let label = format!("{}: a bind mount inside a released volume", k.label());
            outcome(&format!("agent.{}.bind_mount", k.key()), &label, &text);
            text
        })
        .collect();
    println!(
        "| a bind mount (of a directory outside the volume) inside a released volume | {} | - |",
        outcomes.join(" | ")
    );
}

fn cost_table(s: &Sizes, r: &Results) {
    println!(
        "| disks on the node | mount to PV created (localpv) | discovery time per event | discovery passes per mount |"
    );
    println!("| --- | --- | --- | --- |");
    for n in &s.cost_sizes {
        let mut cells = Vec::new();
        for (measure, unit, label) in [
            ("event_created", "ms", "mount to PV created, one at a time"),
            ("event_pass_ms", "ms", "discovery time per event"),
            (
                "event_passes_per_mount",
                "passes",
                "discovery passes per mount",
            ),
        ] {
            let measure = format!("{measure}_{n}_disks");
            match r.get(Kind::Localpv, &measure) {
                Some(v) => {
                    let label = format!("localpv, {n} disks on the node: {label}");
                    figure(&format!("agent.localpv.{measure}"), &label, unit, v);
                    cells.push(cell(unit, v));
                }
                None => cells.push("-".into()),
            }
        }
        println!("| {n} | {} |", cells.join(" | "));
    }
}

impl Results {
    fn merge(&mut self, other: Results) {
        for (k, v) in other.samples {
            self.samples.entry(k).or_default().extend(v);
        }
        self.texts.extend(other.texts);
    }
}

// NB: four workers: a `mount` child or a file tree being filled on one plane must not hold up the other plane's
// 2 ms polling of its watch.
#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let s = Sizes::from_env();
    let started = Instant::now();
    // The busy planes and the quiet plane run at the same time (LOCALPV_BENCH_SERIAL=1: one after the other): the
    // quiet plane's work is mostly waiting (a steady-state window, discovery periods), and together they fit a
    // run into half the time on a shared machine.
    // LOCALPV_BENCH_PLANES ("busy,quiet"): which planes run, to re-measure one part on its own; "cost": the busy
    // plane's event cost rows alone.
    let planes = std::env::var("LOCALPV_BENCH_PLANES").unwrap_or_else(|_| "busy,quiet".into());
    let wanted = |plane: &str| planes.split(',').any(|p| p.trim() == plane);
    let (with_busy, with_cost, with_quiet) = (wanted("busy"), wanted("cost"), wanted("quiet"));
    assert!(
        with_busy || with_cost || with_quiet,
        "LOCALPV_BENCH_PLANES: '{planes}' names none of 'busy', 'cost' and 'quiet'"
    );
    let busy = async {
        let mut r = Results::default();
        if with_busy {
            for round in 0..s.repeats {
                busy::round(&s, round, &mut r).await;
            }
        }
        if with_busy || with_cost {
            busy::event_cost(&s, &mut r).await;
        }
        r
    };
    let quiet = async {
        let mut r = Results::default();
        if with_quiet {
            quiet::quiet(&s, &mut r).await;
        }
        r
    };
    let (mut r, q) = if std::env::var("LOCALPV_BENCH_SERIAL").is_ok_and(|v| v == "1") {
        let r = busy.await;
        (r, quiet.await)
    } else {
        tokio::join!(busy, quiet)
    };
    r.merge(q);
    println!("Sizes: {}", s.describe());
    println!();
    main_table(&s, &r);
    println!();
    println!(
        "Busy rows: {} rounds, each on a fresh control plane with fresh mounts, the provisioners one after another in \
         an order that rotates each round (the reference provisioner in the first {} of them); mounts one by one in \
         the first round ({} for localpv, {} for the reference), each burst and each \
         one-by-one mount after a pseudo-random pause (up to the reference's period, 200 ms for localpv) so that \
         mounts land anywhere in a polling period. Quiet rows (on a plane running at the same time as the busy ones unless LOCALPV_BENCH_SERIAL=1): one more \
         plane where all three run at once, each its own node with {} disks and a tenant volume, with other nodes' \
         PVs added; the Released rows fill the tenant volume with empty files. The reference provisioner runs from \
         its own mount namespace; it cleans a Filesystem volume in-process (no Job, no script: Go's `os.RemoveAll` \
         on every entry).",
        s.repeats, s.lsp_repeats, s.mounts, s.lsp_mounts, s.own
    );
    println!();
    println!(
        "The discovery path's cost per event (localpv), one mount at a time with a settled agent:"
    );
    println!();
    cost_table(&s, &r);
    println!();
    println!("Run time {:.0} s.", started.elapsed().as_secs_f64());
}
