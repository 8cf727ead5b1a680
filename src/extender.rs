//! `localpv extender`: the kube-scheduler extender that places pods where free local PVs can serve their
//! delayed claims, and says why every other node was rejected.
//!
//! ```text
//!  kube-apiserver ──watch──> watch (PVs, PVCs, SCs, Nodes) ──> model (compact facts) ──> snapshot (indexed, immutable)
//!                                                                                              │ Arc per request
//!  kube-scheduler ──POST /filter, /prioritize──> server ──> wire (decode) ──> verbs ──> decide ──> score
//!                  <── ExtenderFilterResult / HostPriorityList ──┘
//! ```
//!
//! `model`, `snapshot`, `decide`, `score`, `wire`, `verbs` and `pending` are pure: the same request and
//! snapshot always give the same answer, and `localpv explain` runs them offline on a dumped cluster. `server`,
//! `watch`, `cache` and `tls` are the shell around them. Replicas share no state: each builds its own snapshot
//! from its watches. The replica holding the Lease also runs `crate::controller` (node clean-up and pending-pod
//! explanations), which reads the node store and, through `pending::SnapshotReasons`, the cache; the controller knows
//! nothing of the extender.

pub mod cache;
pub mod decide;
pub mod feed;
pub mod metrics;
pub mod model;
pub mod pending;
pub mod score;
pub mod server;
pub mod snapshot;
pub mod tls;
pub mod verbs;
pub mod wire;

#[cfg(test)]
mod fixtures;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tracing::info;

use self::cache::Cache;
use self::metrics::Metrics;
use self::model::Strategy;
use self::server::{AppState, ServerConfig};
use self::snapshot::Snapshot;
use self::wire::DecodeLimits;

/// Flags of `localpv extender`; each can also come from the environment.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Address to serve the extender API, probes and metrics on.
    #[arg(long, env = "LOCALPV_EXTENDER_LISTEN", default_value = "0.0.0.0:8888")]
    pub listen: SocketAddr,
    /// Path of the filter verb (urlPrefix + "/" + filterVerb in the scheduler configuration).
    #[arg(long, env = "LOCALPV_EXTENDER_FILTER_PATH", default_value = "/filter")]
    pub filter_path: String,
    /// Path of the prioritize verb.
    #[arg(
        long,
        env = "LOCALPV_EXTENDER_PRIORITIZE_PATH",
        default_value = "/prioritize"
    )]
    pub prioritize_path: String,
    /// Score strategy for classes without a `localpv.io/score-strategy` annotation.
    #[arg(long, env = "LOCALPV_EXTENDER_SCORE_STRATEGY", value_enum, default_value_t = Strategy::Binpack)]
    pub score_strategy: Strategy,
    /// Largest request body accepted, in bytes; larger bodies get 413.
    #[arg(long, env = "LOCALPV_EXTENDER_BODY_LIMIT", default_value_t = 64 << 20)]
    pub body_limit: usize,
    /// Most entries of `NodeNames` or `Nodes.items` one request may list; more get 413. The body limit counts
    /// bytes, but each entry costs an allocation once decoded: this bounds what a request costs in memory.
    #[arg(long, env = "LOCALPV_EXTENDER_MAX_NODES", default_value_t = DecodeLimits::default().max_nodes, value_parser = at_least_one)]
    pub max_nodes: usize,
    /// Most labels one node in `Nodes.items` may carry; more get 413.
    #[arg(long, env = "LOCALPV_EXTENDER_MAX_LABELS_PER_NODE", default_value_t = DecodeLimits::default().max_labels_per_node, value_parser = at_least_one)]
    pub max_labels_per_node: usize,
    /// Most node labels one request may carry, all nodes together; more get 413.
    #[arg(long, env = "LOCALPV_EXTENDER_MAX_LABELS", default_value_t = DecodeLimits::default().max_labels, value_parser = at_least_one)]
    pub max_labels: usize,
    /// Most entries of the pod's `spec.volumes`; more get 413.
    #[arg(long, env = "LOCALPV_EXTENDER_MAX_VOLUMES", default_value_t = DecodeLimits::default().max_volumes, value_parser = at_least_one)]
    pub max_volumes: usize,
    /// Milliseconds after which a request is answered with an Error; keep it below the scheduler's httpTimeout.
    #[arg(long, env = "LOCALPV_EXTENDER_DEADLINE_MS", default_value_t = 4000)]
    pub deadline_ms: u64,
    /// PEM certificate chain; with --tls-key, serve HTTPS. Reloaded when the file changes.
    #[arg(long, env = "LOCALPV_EXTENDER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "LOCALPV_EXTENDER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle; when set, clients must present a certificate it signed (mTLS).
    #[arg(long, env = "LOCALPV_EXTENDER_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Clean up after deleted nodes (on the replica holding the `localpv-cleanup` Lease).
    #[arg(long, env = "LOCALPV_NODE_CLEANUP", default_value_t = true, action = clap::ArgAction::Set)]
    pub node_cleanup: bool,
    /// How long a Node must stay deleted before its Available PVs and LocalDisks are removed.
    #[arg(long, env = "LOCALPV_NODE_CLEANUP_GRACE", default_value = "10m", value_parser = parse_duration)]
    pub node_cleanup_grace: Duration,
    /// Also delete claims bound to a deleted node's PVs this long after the grace period (off when unset).
    #[arg(long, env = "LOCALPV_DELETE_CLAIMS_AFTER", value_parser = parse_duration)]
    pub delete_claims_after: Option<Duration>,
    /// Add a `NoLocalVolume` Event with our per-node reasons to pods whose local claims fit no node (on the
    /// replica holding the `localpv-cleanup` Lease): kube-scheduler's own FailedScheduling message cannot carry them.
    #[arg(long, env = "LOCALPV_EXPLAIN_PENDING", default_value_t = true, action = clap::ArgAction::Set)]
    pub explain_pending: bool,
    /// Recover StatefulSet replicas whose local volume is lost (a Failed disk, a drained disk, and the node
    /// signals below), for claims, StatefulSets or StorageClasses annotated `localpv.io/recovery=on` (or
    /// `dry-run`): the claim and pod are deleted so the StatefulSet makes a new claim on a free disk. Off: nothing
    /// is read or deleted for it.
    #[arg(long, env = "LOCALPV_RECOVERY", default_value_t = false, action = clap::ArgAction::Set)]
    pub recovery: bool,
    /// Least time between two recoveries in the whole cluster.
    #[arg(long, env = "LOCALPV_RECOVERY_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub recovery_interval: Duration,
    /// With --recovery: a Node deleted for longer than --node-cleanup-grace counts as lost.
    #[arg(long, env = "LOCALPV_RECOVER_DELETED_NODES", default_value_t = false, action = clap::ArgAction::Set)]
    pub recover_deleted_nodes: bool,
    /// With --recovery: a Node tainted node.kubernetes.io/out-of-service (non-graceful shutdown) counts as lost.
    #[arg(long, env = "LOCALPV_RECOVER_OUT_OF_SERVICE", default_value_t = false, action = clap::ArgAction::Set)]
    pub recover_out_of_service: bool,
    /// With --recovery: a Node NotReady for this long counts as lost (off when unset).
    #[arg(long, env = "LOCALPV_RECOVER_NOT_READY_AFTER", value_parser = parse_duration)]
    pub recover_not_ready_after: Option<Duration>,
    /// With --recovery: a Node re-created under the same name (a new UID) whose agent has not found a PV's disk
    /// this long after the Node was created counts as lost for that PV (off when unset).
    #[arg(long, env = "LOCALPV_RECOVER_REPLACED_NODES_AFTER", value_parser = parse_duration)]
    pub recover_replaced_nodes_after: Option<Duration>,
    /// Namespace of the clean-up Lease (the chart passes its own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (the chart passes the pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Bounds of the HTTP(S) port (defaults: `serve::Limits::extender`, body limit from --body-limit).
    #[command(flatten)]
    pub http: crate::serve::LimitArgs,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::config::values::go_duration(text)
}

/// Recovery's settings from the flags; class policies are read from the extender's own StorageClass store.
fn recovery_settings(
    opts: &Options,
    classes: Arc<crate::watch::Store<crate::extender::model::Class>>,
) -> crate::controller::recover::Settings {
    let classes = move || {
        classes.read(|items| {
            let asks = items.values().map(|c| (c.name.clone(), c.recovery.clone()));
            asks.collect()
        })
    };
    crate::controller::recover::Settings {
        signals: crate::recovery::NodeSignals {
            gone_after: opts
                .recover_deleted_nodes
                .then_some(opts.node_cleanup_grace),
            out_of_service: opts.recover_out_of_service,
            not_ready_after: opts.recover_not_ready_after,
            replaced_after: opts.recover_replaced_nodes_after,
        },
        interval: opts.recovery_interval,
        classes: Arc::new(classes),
    }
}

/// A count limit: 0 would refuse every request.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

impl Options {
    /// The server's bounds: `--body-limit` plus the `--http-*` flags over the extender's defaults.
    pub fn limits(&self) -> crate::serve::Limits {
        let defaults = crate::serve::Limits {
            body_limit: self.body_limit,
            ..crate::serve::Limits::extender()
        };
        self.http.apply(defaults)
    }

    /// Recovery's flags make sense together: a node signal without --recovery, or deleted nodes without the
    /// clean-up that times their absence, would silently do nothing.
    pub fn check_recovery(&self) -> Result<(), String> {
        let signals = [
            ("--recover-deleted-nodes", self.recover_deleted_nodes),
            ("--recover-out-of-service", self.recover_out_of_service),
            (
                "--recover-not-ready-after",
                self.recover_not_ready_after.is_some(),
            ),
            (
                "--recover-replaced-nodes-after",
                self.recover_replaced_nodes_after.is_some(),
            ),
        ];
        if let Some((flag, _)) = signals.iter().find(|(_, on)| *on && !self.recovery) {
            return Err(format!("{flag} needs --recovery=true"));
        }
        if self.recover_deleted_nodes && !self.node_cleanup {
            return Err(
                "--recover-deleted-nodes needs --node-cleanup=true (it times how long a node is gone)".into(),
            );
        }
        if self
            .recover_replaced_nodes_after
            .is_some_and(|d| d.is_zero())
        {
            return Err(
                "--recover-replaced-nodes-after must be more than 0 (the agent needs time to find the disks)"
                    .into(),
            );
        }
        if self.recovery_interval.is_zero() {
            return Err("--recovery-interval must be more than 0".into());
        }
        Ok(())
    }

    /// The counts a request may hold once decoded.
    pub fn decode_limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_nodes: self.max_nodes,
            max_labels_per_node: self.max_labels_per_node,
            max_labels: self.max_labels,
            max_volumes: self.max_volumes,
        }
    }

    fn server_config(&self) -> ServerConfig {
        ServerConfig {
            filter_path: self.filter_path.clone(),
            prioritize_path: self.prioritize_path.clone(),
            body_limit: self.body_limit,
            decode: self.decode_limits(),
            deadline: Duration::from_millis(self.deadline_ms),
            strategy: self.score_strategy,
        }
    }
}

/// Serves until SIGTERM/SIGINT: watches feed the cache, the app answers the scheduler.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    opts.check_recovery().map_err(anyhow::Error::msg)?;
    let client = crate::apiclient::infer()
        .await
        .context("failed to build a Kubernetes client")?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let controller_metrics = crate::controller::metrics::Metrics::register(&mut registry);
    crate::telemetry::register(&mut registry, "extender");
    let cache = Arc::new(Cache::new(Snapshot::default(), false));
    let state = AppState {
        cache: cache.clone(),
        config: Arc::new(opts.server_config()),
        metrics: metrics.clone(),
        registry: Arc::new(registry),
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stores = feed::Stores::default();
    let controller = (opts.node_cleanup || opts.explain_pending || opts.recovery).then(|| {
        let explain = opts.explain_pending.then(|| {
            let explainer = pending::SnapshotReasons::new(cache.clone());
            Arc::new(explainer) as Arc<dyn crate::controller::pending::PendingReasons>
        });
        let cfg = crate::controller::ControllerConfig {
            node_cleanup: opts.node_cleanup,
            explain,
            settings: crate::cleanup::Settings {
                grace: opts.node_cleanup_grace,
                delete_claims_after: opts.delete_claims_after,
            },
            recovery: opts
                .recovery
                .then(|| recovery_settings(&opts, stores.classes.clone())),
            lease_namespace: opts.lease_namespace.clone(),
            identity: opts
                .identity
                .clone()
                .unwrap_or_else(|| format!("localpv-extender-{}", std::process::id())),
        };
        tokio::spawn(crate::controller::run(
            client.clone(),
            cfg,
            stores.nodes.clone(),
            controller_metrics,
            stop_rx.clone(),
        ))
    });
    let watches = tokio::spawn(feed::run(
        client,
        stores,
        cache.clone(),
        metrics,
        stop_rx.clone(),
    ));
    let app = server::app(state);
    let mut serve_stop = stop_rx.clone();
    let stopped = async move {
        let _ = serve_stop.changed().await;
    };
    let serving = async {
        match (&opts.tls_cert, &opts.tls_key) {
            (Some(cert), Some(key)) => {
                let files = tls::TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: opts.tls_client_ca.clone(),
                };
                tls::serve(opts.listen, files, app, opts.limits(), stopped).await
            }
            _ => {
                let listener = tokio::net::TcpListener::bind(opts.listen)
                    .await
                    .with_context(|| format!("failed to listen on {}", opts.listen))?;
                info!(listen = %opts.listen, "serving the extender over HTTP");
                let limits = opts.limits();
                crate::serve::listen::serve_plain(listener, limits, app, stopped).await;
                Ok(())
            }
        }
    };
    tokio::pin!(serving);
    // NB: the server returns on its own only when it fails (bind error...); then stop the watches and report it.
    let result = tokio::select! {
        served = &mut serving => served,
        signalled = crate::serve::shutdown_signal() => {
            info!("shutting down");
            cache.set_stopping();
            let _ = stop_tx.send(true);
            let served = serving.await;
            signalled.and(served)
        }
    };
    cache.set_stopping();
    let _ = stop_tx.send(true);
    watches.await.context("failed to join the watch tasks")?;
    if let Some(c) = controller {
        c.await.context("failed to join the controller task")?;
    }
    result
}

#[cfg(test)]
mod options_tests {
    use clap::Parser;

    use super::{DecodeLimits, Options};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: Options,
    }

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Cli::try_parse_from(std::iter::once("extender").chain(args.iter().copied())).map(|c| c.opts)
    }

    #[test]
    fn the_count_limits_default_to_the_decoders_and_each_flag_sets_its_own() {
        let defaults = parse(&[]).expect("no flags");
        assert_eq!(defaults.decode_limits(), DecodeLimits::default());
        let set = parse(&[
            "--max-nodes=7",
            "--max-labels-per-node=8",
            "--max-labels=9",
            "--max-volumes=10",
        ])
        .expect("valid flags");
        let expected = DecodeLimits {
            max_nodes: 7,
            max_labels_per_node: 8,
            max_labels: 9,
            max_volumes: 10,
        };
        assert_eq!(set.decode_limits(), expected);
        assert_eq!(set.server_config().decode, expected);
    }

    #[test]
    fn a_count_limit_of_zero_is_refused_naming_the_flag() {
        for flag in [
            "--max-nodes",
            "--max-labels-per-node",
            "--max-labels",
            "--max-volumes",
        ] {
            let err = parse(&[&format!("{flag}=0")]).err().map(|e| e.to_string());
            let err = err.unwrap_or_else(|| panic!("{flag}=0 accepted"));
            assert!(err.contains(flag) && err.contains("at least 1"), "{err}");
        }
    }

    #[test]
    fn recovery_is_off_by_default_and_a_flag_that_would_do_nothing_is_refused_naming_it() {
        let defaults = parse(&[]).expect("no flags");
        assert!(!defaults.recovery);
        assert_eq!(defaults.check_recovery(), Ok(()));
        for (args, flag) in [
            (
                vec!["--recover-out-of-service=true"],
                "--recover-out-of-service",
            ),
            (
                vec!["--recover-not-ready-after=5m"],
                "--recover-not-ready-after",
            ),
            (
                vec!["--recover-deleted-nodes=true"],
                "--recover-deleted-nodes",
            ),
            (
                vec![
                    "--recovery=true",
                    "--recover-deleted-nodes=true",
                    "--node-cleanup=false",
                ],
                "--node-cleanup",
            ),
            (
                vec!["--recover-replaced-nodes-after=10m"],
                "--recover-replaced-nodes-after",
            ),
            (
                vec!["--recovery=true", "--recover-replaced-nodes-after=0s"],
                "--recover-replaced-nodes-after",
            ),
            (
                vec!["--recovery=true", "--recovery-interval=0s"],
                "--recovery-interval",
            ),
        ] {
            let err = parse(&args)
                .expect("parses")
                .check_recovery()
                .expect_err("refused");
            assert!(err.contains(flag), "{args:?}: {err}");
        }
        let all = parse(&[
            "--recovery=true",
            "--recover-deleted-nodes=true",
            "--recover-out-of-service=true",
            "--recover-not-ready-after=10m",
            "--recover-replaced-nodes-after=10m",
        ])
        .expect("parses");
        assert_eq!(all.check_recovery(), Ok(()));
    }
}
