//! The extender processes measured: localpv's (as deployed, or with the Lease holder's work off), TopoLVM's
//! `topolvm-scheduler` and open-local's `open-local scheduler`, each on its own loopback port, logging as its
//! chart deploys it, with its resident memory and CPU read from `/proc`.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::process::{rss_mib, status_mib};
use crate::support::agent::wait_answering;
use crate::support::cluster::{ControlPlane, free_port};
use crate::support::extender::ExtenderProcess;
use crate::support::proc::Component;

/// Which extender, and so which request form it takes and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `localpv extender`, clean-up and pending-pod explanations on (the chart's defaults).
    Localpv,
    /// `localpv extender --node-cleanup=false --explain-pending=false`: no Lease holder's work.
    LocalpvQuiet,
    Topolvm,
    OpenLocal,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Localpv => "localpv",
            Kind::LocalpvQuiet => "localpv, Lease holder's work off",
            Kind::Topolvm => "TopoLVM",
            Kind::OpenLocal => "open-local",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Kind::Localpv => "localpv",
            Kind::LocalpvQuiet => "localpv_quiet",
            Kind::Topolvm => "topolvm",
            Kind::OpenLocal => "openlocal",
        }
    }

    pub fn filter_path(self) -> &'static str {
        match self {
            Kind::Localpv | Kind::LocalpvQuiet => "/filter",
            Kind::Topolvm => "/predicate",
            Kind::OpenLocal => "/scheduler/predicates",
        }
    }
}

pub struct Extender {
    pub kind: Kind,
    pub port: u16,
    /// This replica's identity in the clean-up Lease (localpv).
    pub identity: String,
    process: Process,
}

/// localpv's extender is the harness's; the peers are plain components.
enum Process {
    Localpv(ExtenderProcess),
    Peer(Component),
}

/// At 5,000 nodes and 50,000 PVs the caches take minutes to fill on a busy machine.
const READY: Duration = Duration::from_secs(600);

impl Extender {
    /// Starts `kind` against the plane and waits until it answers; localpv until it is ready (caches synced).
    pub async fn start(cp: &ControlPlane, kind: Kind, tag: &str, bins: &PeerBins) -> Extender {
        let identity = format!("bench-{}-{tag}", kind.key());
        let name = format!("ext-{}-{tag}", kind.key());
        let (port, process) = match kind {
            Kind::Localpv | Kind::LocalpvQuiet => {
                let mut e = ExtenderProcess::new(cp)
                    .name(&name)
                    .env("POD_NAME", &identity)
                    .env("POD_NAMESPACE", "kube-system");
                if kind == Kind::LocalpvQuiet {
                    e = e.arg("--node-cleanup=false").arg("--explain-pending=false");
                }
                e.start(cp, READY).await;
                (e.port, Process::Localpv(e))
            }
            Kind::Topolvm | Kind::OpenLocal => {
                let port = free_port();
                (
                    port,
                    Process::Peer(peer(cp, kind, &name, port, tag, bins).await),
                )
            }
        };
        Extender {
            kind,
            port,
            identity,
            process,
        }
    }

    pub fn pid(&self) -> u32 {
        let pid = match &self.process {
            Process::Localpv(e) => e.pid(),
            Process::Peer(c) => c.pid(),
        };
        pid.expect("the extender runs")
    }

    /// Resident set size now, MiB.
    pub fn rss_mib(&self) -> f64 {
        rss_mib(self.pid())
    }

    /// Highest resident set size since start, MiB.
    pub fn peak_mib(&self) -> f64 {
        status_mib(self.pid(), "VmHWM").unwrap_or(0.0)
    }

    pub fn stop(mut self) {
        match &mut self.process {
            Process::Localpv(e) => e.stop(Duration::from_secs(10)),
            Process::Peer(c) => {
                c.stop(Duration::from_secs(10));
            }
        }
    }

    /// Sum of the samples of `name` on localpv's `/metrics` whose labels contain `having`.
    pub fn metric(&self, name: &str, having: &str) -> f64 {
        match &self.process {
            Process::Localpv(e) => e.metric(name, &[having]),
            Process::Peer(_) => panic!("{} serves no localpv metrics", self.kind.name()),
        }
    }
}

/// Starts a peer's extender on `port`, logging as its chart deploys it, and waits until it answers.
async fn peer(
    cp: &ControlPlane,
    kind: Kind,
    name: &str,
    port: u16,
    tag: &str,
    bins: &PeerBins,
) -> Component {
    let (program, args, probe) = match kind {
        Kind::Topolvm => {
            // Its chart's configuration file holds the listen address; no cluster access at all.
            let cfg = cp.dir.join(format!("topolvm-scheduler-{tag}.yaml"));
            std::fs::write(&cfg, format!("listen: \"127.0.0.1:{port}\"\n"))
                .expect("the TopoLVM configuration is written");
            let args = vec![format!("--config={}", cfg.display())];
            (&bins.topolvm, args, "/status")
        }
        Kind::OpenLocal => {
            // NB: it listens on every address (no flag for one); the port is free on loopback, which is
            // what we connect to. The chart runs it with `--port` and `--scheduler-strategy=binpack`.
            let args = vec![
                "scheduler".into(),
                format!("--kubeconfig={}", cp.admin_kubeconfig.display()),
                format!("--port={port}"),
                "--scheduler-strategy=binpack".into(),
            ];
            (&bins.open_local, args, "/version")
        }
        Kind::Localpv | Kind::LocalpvQuiet => unreachable!("localpv runs as an ExtenderProcess"),
    };
    let mut process = Component::spawn(name, program, &args, &cp.log_dir(), cp.reaper());
    // NB: open-local serves its routes before its informers sync and has no readiness endpoint; it logs this
    // line once they have.
    let log = process.log.clone();
    let synced = || {
        kind != Kind::OpenLocal
            || std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("started open-local scheduler extender")
    };
    wait_answering(&mut process, port, probe, READY, synced).await;
    process
}

/// Where the peers' binaries are (bench/peer-bins.sh builds them; the bench fails naming what is missing).
pub struct PeerBins {
    pub topolvm: PathBuf,
    pub open_local: PathBuf,
}

impl PeerBins {
    pub fn from_env() -> PeerBins {
        let get = |key: &str| {
            let path = PathBuf::from(std::env::var_os(key).unwrap_or_else(|| {
                panic!("{key} is not set: run bench/extender.sh, which builds the peers with bench/peer-bins.sh")
            }));
            assert!(
                path.is_file(),
                "{key}={} is not a file: run bench/peer-bins.sh",
                path.display()
            );
            path
        };
        PeerBins {
            topolvm: get("LOCALPV_BENCH_TOPOLVM_BIN"),
            open_local: get("LOCALPV_BENCH_OPEN_LOCAL_BIN"),
        }
    }
}
