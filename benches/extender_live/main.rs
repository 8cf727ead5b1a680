//! Scheduler extenders as running processes on the real control plane (a benchmark, not a timed test): localpv's
//! as deployed (node clean-up and pending-pod explanations on, holding the Lease) against TopoLVM's
//! `topolvm-scheduler` (Nodes form, full Node objects) and open-local's extender (NodeNames form), on identical
//! request bodies at 100, 1,000 and 5,000 nodes; and localpv's memory and answer tails with the Lease holder's
//! work running, at 5,000 nodes and 50,000 PVs. Prints markdown tables; `bench/extender.sh` runs it after
//! `bench/peer-bins.sh` has built the peers.
//!
//! ```text
//!  plane ─ classes, claims, CRDs ─ 5,000 Nodes + NodeLocalStorages ─ localpv (as deployed): idle memory, 0 PVs
//!        ─ 50,000 PVs ─ localpv (as deployed, fresh), localpv (Lease work off), TopoLVM, open-local
//!        ─ idle memory ─ per size and pod: requests taking turns between the extenders (latency, CPU)
//!        ─ per size: concurrent load on each alone (requests/s) ─ truncated and oversized bodies ─ peak memory
//! ```
//!
//! What each reads is in `cluster`. Knobs (env): LOCALPV_BENCH_EXT_NODES (5000: the cluster's nodes, and the
//! largest request), LOCALPV_BENCH_SCALE (1.0: runs per cell), LOCALPV_BENCH_CELL_SECS (30: most time per latency
//! cell), LOCALPV_BENCH_LOAD_SECS (5), LOCALPV_BENCH_IDLE_SECS (20: 4 rounds of the Lease holder's 5 s work);
//! LOCALPV_BENCH_TOPOLVM_BIN and LOCALPV_BENCH_OPEN_LOCAL_BIN (bench/peer-bins.sh prints them); figures go to
//! LOCALPV_BENCH_FIGURES as JSON lines.

mod client;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod measure;
mod procs;
mod report;
use localpv_test_support as support;

use std::time::Duration;

use procs::{Extender, Kind, PeerBins};
use support::cluster::{ControlPlane, Options};

pub fn env_f64(key: &str, default: f64) -> f64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The request sizes measured: 100, 1,000 and 5,000 nodes, capped by the cluster's size.
fn sizes(nodes: usize) -> Vec<usize> {
    let mut s: Vec<usize> = [100, 1000, 5000]
        .into_iter()
        .filter(|n| *n < nodes)
        .collect();
    s.push(nodes);
    s
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let nodes = env_f64("LOCALPV_BENCH_EXT_NODES", 5000.0) as usize;
    assert!(nodes >= 2, "LOCALPV_BENCH_EXT_NODES must be at least 2");
    let bins = PeerBins::from_env();
    let crds = bins
        .open_local
        .parent()
        .expect("the binary is in a directory")
        .join("crds");
    let cp = ControlPlane::start(Options::default()).await;
    let started = std::time::Instant::now();
    cluster::base(&cp, &crds).await;
    cluster::nodes(&cp, 0..nodes).await;
    eprintln!("{nodes} nodes in {:.0?}", started.elapsed());

    // Memory before any PV: the base the per-PV figure is taken from.
    let empty = Extender::start(&cp, Kind::Localpv, "nopvs", &bins).await;
    measure::wait_leader(&cp, &empty).await;
    let idle_empty = measure::idle(&[&empty]).await.remove(0);
    empty.stop();

    let t = std::time::Instant::now();
    cluster::volumes(&cp, 0..nodes).await;
    let pvs = nodes * cluster::PVS_PER_NODE;
    eprintln!("{pvs} PVs in {:.0?}", t.elapsed());

    let deployed = Extender::start(&cp, Kind::Localpv, "deployed", &bins).await;
    measure::wait_cached(&deployed, pvs).await;
    measure::wait_leader(&cp, &deployed).await;
    let quiet = Extender::start(&cp, Kind::LocalpvQuiet, "quiet", &bins).await;
    measure::wait_cached(&quiet, pvs).await;
    let topolvm = Extender::start(&cp, Kind::Topolvm, "peer", &bins).await;
    let open_local = Extender::start(&cp, Kind::OpenLocal, "peer", &bins).await;
    let all = [&deployed, &quiet, &topolvm, &open_local];
    let idle = measure::idle(&all).await;

    let mut run = measure::Run::new(nodes, pvs);
    run.idle_empty = Some(idle_empty);
    for (e, i) in all.iter().zip(idle) {
        run.idle.push((e.kind, i));
    }
    for &size in &sizes(nodes) {
        run.latency(size, &all).await;
    }
    for &size in &sizes(nodes) {
        run.load(size, &all).await;
    }
    run.bodies(&all).await;
    for e in all {
        run.peak.push((e.kind, e.peak_mib()));
    }
    run.report();
    for e in [deployed, quiet, topolvm, open_local] {
        e.stop();
    }
    drop(cp);
    tokio::time::sleep(Duration::from_millis(100)).await;
}
