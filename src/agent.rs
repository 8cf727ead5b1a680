//! `localpv node`: the node agent. Publishes each disk under the configured discovery directories as a local PV,
//! keeps the PVs true to their disks, and wipes and recycles released volumes.
//!
//! ```text
//!  MountWatcher (mountinfo POLLPRI, inotify) ─┐
//!  watches: PVs (index), own Node, SCs       ─┼─ wake ─> pass: discover (host) ─> plan (pure) ─> execute actions
//!  resync timer, requeue hints, config poll  ─┘                                    │            (API writes, ledger,
//!                                                                                  v             wipes in background)
//!                                                                           /disks, /metrics, Events
//! ```
//!
//! Everything that decides lives in `plan`; this module only gathers inputs and applies what `plan` returns.

// NB: without the `node` feature (the CLI-only build, no libblkid/libudev) only the options and the configuration
// loader are compiled; `run` and what it drives are not.
#![cfg_attr(not(feature = "node"), allow(unused_imports, dead_code))]

#[cfg(feature = "node")]
mod admission;
#[cfg(feature = "node")]
mod exec;
#[cfg(feature = "node")]
mod health;
#[cfg(feature = "node")]
mod http;
#[cfg(feature = "node")]
mod inventory;
#[cfg(feature = "node")]
mod ledger;
#[cfg(feature = "node")]
mod metrics;
#[cfg(feature = "node")]
mod pass;
#[cfg(feature = "node")]
mod pvindex;
#[cfg(feature = "node")]
mod statelock;
#[cfg(all(test, feature = "node"))]
mod tests;
#[cfg(feature = "node")]
mod warmstart;
#[cfg(feature = "node")]
mod wiper;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ListParams;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::config::Config;
use crate::contract::NODE_LABEL;
use crate::inventory::LocalDisk;
use crate::watch;

/// Flags and environment of `localpv node`.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Configuration: a directory holding one file per key (a mounted ConfigMap) or one YAML file.
    #[arg(long, env = "LOCALPV_CONFIG", default_value = "/etc/localpv/config")]
    pub config: PathBuf,
    /// This node's name (the reference provisioner's `MY_NODE_NAME` is read too).
    #[arg(long, env = "LOCALPV_NODE_NAME")]
    pub node_name: Option<String>,
    /// Validate the configuration, print warnings, and exit: 0 when valid.
    #[arg(long)]
    pub check_config: bool,
    /// Address for /livez, /readyz, /metrics and /disks.
    #[arg(long, env = "LOCALPV_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Node-local state (the disk ledger); must survive restarts of the agent (a hostPath in the DaemonSet).
    #[arg(long, env = "LOCALPV_STATE_DIR", default_value = "/var/lib/localpv")]
    pub state_dir: PathBuf,
    /// How often the configuration is re-read for changes.
    #[arg(long, env = "LOCALPV_CONFIG_POLL", default_value = "2s", value_parser = parse_duration)]
    pub config_poll: Duration,
    /// Bounds of the HTTP port (defaults: `serve::Limits::agent`).
    #[command(flatten)]
    pub http: crate::serve::LimitArgs,
    /// Consecutive failed wipes after which a disk's LocalDisk turns `Failing`.
    #[arg(long, env = "LOCALPV_WIPE_FAILING_AFTER", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub wipe_failing_after: u32,
    /// The chart's ValidatingAdmissionPolicy (and binding) of this name: while it is in force, watch only this
    /// node's PVs instead of every PV of the cluster (docs/architecture.md, "Foreign PVs and fleet cost").
    #[arg(long, env = "LOCALPV_ADMISSION_POLICY")]
    pub admission_policy: Option<String>,
}

/// The label selector scoping a watch to this node's objects (LocalDisks carry the node label).
fn own_pvs_like(node: &str) -> watcher::Config {
    watched().labels(&format!("{NODE_LABEL}={node}"))
}

/// Every watch of the agent: a long server-side timeout (kube-rs's default re-opens each watch every 290 s, four
/// watches 50 times an hour); bookmarks (on by default) let each re-open resume without a list.
fn watched() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_SECS)
}

/// How often the StorageClasses are listed while one the configuration names is missing.
const CLASS_POLL_WHILE_MISSING: std::time::Duration = std::time::Duration::from_secs(10);

/// Server-side timeout of each watch request, in seconds.
const WATCH_TIMEOUT_SECS: u32 = 3600;

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::config::values::go_duration(text)
}

/// Loads and validates the configuration, logging each warning once per change of the text (unsupported keys
/// are accepted, not fatal). Unchanged text is not parsed again (`LoadCache`): the agent polls every few seconds.
pub fn load_config(path: &std::path::Path) -> anyhow::Result<Config> {
    static CACHE: std::sync::LazyLock<std::sync::Mutex<crate::config::LoadCache>> =
        std::sync::LazyLock::new(Default::default);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let parses = cache.parses();
    let loaded = cache.load(path).map_err(anyhow::Error::msg)?;
    if cache.parses() != parses {
        for w in &loaded.warnings {
            warn!(key = %w.key, "{}", w.message);
        }
    }
    Ok(loaded.config)
}

/// `--check-config`: every warning, also when there are errors, then the verdict.
fn check_config(path: &std::path::Path, state_dir: &std::path::Path) -> anyhow::Result<()> {
    let result = Config::load(path);
    let warnings = match &result {
        Ok(loaded) => &loaded.warnings[..],
        Err(crate::config::ConfigError::Invalid { warnings, .. }) => &warnings[..],
        Err(_) => &[],
    };
    for w in warnings {
        eprintln!("warning: {w}");
    }
    let loaded = result?;
    loaded.config.check_state_dir(state_dir)?;
    println!(
        "configuration {} is valid ({} classes)",
        path.display(),
        loaded.config.classes.len()
    );
    Ok(())
}

#[cfg(feature = "node")]
pub async fn run(opts: Options) -> anyhow::Result<()> {
    if opts.check_config {
        return check_config(&opts.config, &opts.state_dir);
    }
    let config = load_config(&opts.config)?;
    config.check_state_dir(&opts.state_dir)?;
    let node = opts
        .node_name
        .clone()
        .or_else(|| std::env::var("MY_NODE_NAME").ok())
        .filter(|n| !n.is_empty())
        .context("the node name is required: set --node-name, LOCALPV_NODE_NAME or MY_NODE_NAME")?;
    let client = crate::apiclient::infer()
        .await
        .context("failed to configure the Kubernetes client")?;
    info!(%node, config = %opts.config.display(), classes = config.classes.len(), "starting node agent");

    let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    let inventory_available = inventory::register_available(&mut registry);
    crate::telemetry::register(&mut registry, "node");
    let state = http::HttpState::new(registry);
    let http_state = state.clone();
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("failed to listen on {}", opts.listen))?;

    let changed = Arc::new(Notify::new());
    let pvs = pvindex::PvIndex::new();
    let nodes = watch::Store::<Node>::new();
    let classes = watch::Store::<StorageClass>::new();
    let disks = watch::Store::<LocalDisk>::new();
    let own_node = watched().fields(&format!("metadata.name={node}"));
    let watcher = watch::Watcher::new(client.clone(), changed.clone(), shutdown.clone());

    // NB: polled, not watched (issue 34): a StorageClass's reclaim policy and mount options cannot change, so a
    // watch per node would only hear of classes created and deleted. While the configuration names one that is not
    // there, the list is taken every 10 s; a pass that creates a PV or wipes lists them first (`pass`).
    // NB: both pollers wait for the agent, which seeds their stores from what a clean stop left (`warmstart`)
    // once it holds the state directory's lock, or lets them list at once.
    let classes_polled = watch::Polled::gated();
    // NB: listed, not watched (issue 34): the agent writes them and puts each answer in the store; what an operator
    // changes with `localpv disks` comes with a mark on the Node, which the agent watches and then lists at once.
    let disks_polled = watch::Polled::gated();
    let disk_cadence = watch::Cadence {
        fast: config.min_resync_period,
        slow: config.min_resync_period,
    };
    let class_cadence = watch::Cadence {
        fast: CLASS_POLL_WHILE_MISSING,
        slow: config.min_resync_period,
    };
    let setup = pass::Setup {
        node: node.clone(),
        client: client.clone(),
        host: Arc::new(crate::host::linux::LinuxHost::default()),
        config,
        opts: opts.clone(),
        pvs: pvs.clone(),
        nodes: nodes.clone(),
        classes: classes.clone(),
        disks: disks.clone(),
        classes_polled: classes_polled.clone(),
        disks_polled: disks_polled.clone(),
        changed: changed.clone(),
        metrics,
        http: state.clone(),
    };
    // NB: a failure before the agent runs must stop the other tasks too, or the process would serve on, doing
    // nothing.
    let failed = Notify::new();
    let lock_state = state.clone();
    let agent = async {
        let started = start_agent(setup, &opts.state_dir, &lock_state, shutdown.clone()).await;
        match started {
            Ok(Some((agent, lock))) => {
                agent.run(shutdown.clone()).await;
                drop(lock);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                failed.notify_one();
                Err(e)
            }
        }
    };

    let signals = async {
        let r = tokio::select! {
            r = crate::serve::shutdown_signal() => {
                info!("shutdown requested");
                r
            }
            () = failed.notified() => Ok(()),
        };
        let _ = shutdown_tx.send(true);
        r
    };
    let (signalled, served, .., ran) = tokio::join!(
        signals,
        http::serve(
            listener,
            state,
            opts.http.apply(crate::serve::Limits::agent()),
            shutdown.clone()
        ),
        pvindex::run(&watcher, pvs),
        watcher.run(own_node, nodes, watch::objects()),
        watcher.poll(
            ListParams::default(),
            classes,
            watch::objects::<StorageClass>(),
            class_cadence,
            classes_polled,
        ),
        inventory::poll_when_installed(
            inventory::Gate {
                client: client.clone(),
                node: node.clone(),
                http: http_state,
                available: inventory_available,
            },
            ListParams::default().labels(&format!("{NODE_LABEL}={node}")),
            disks,
            (disk_cadence, disks_polled),
            changed.clone(),
            shutdown.clone()
        ),
        agent,
    );
    info!("node agent stopped");
    ran.and(signalled).and(served)
}

/// Takes the state directory's lock (waiting, with `/readyz` saying why, while another agent holds it), then opens
/// the ledger under it; `None` when shutdown came first.
#[cfg(feature = "node")]
async fn start_agent(
    setup: pass::Setup,
    state_dir: &std::path::Path,
    http: &http::HttpState,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<(pass::Agent, statelock::StateLock)>> {
    let Some(lock) = statelock::acquire(state_dir, http, shutdown).await? else {
        return Ok(None);
    };
    let agent = pass::Agent::new(setup)?;
    Ok(Some((agent, lock)))
}
