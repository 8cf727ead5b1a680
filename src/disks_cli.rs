//! `localpv disks` (also `kubectl localpv disks`): list LocalDisks through the kubeconfig and print them.
//!
//! The shell only: load the kubeconfig, list (label selectors narrow the list by node and class when they can),
//! then hand the objects to the pure `format` module.

use std::path::PathBuf;
use std::time::SystemTime;

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

use crate::config::values::label_value_problem;
use crate::contract::{
    ANN_CORDONED, ANN_DISKS_CHANGED, ANN_DRAIN, ANN_HEALTH_CLEARED, CLASS_LABEL, DRAIN_FORCE,
    NODE_LABEL,
};
use crate::inventory::crd::{LocalDisk, LocalDiskPhase};
use crate::inventory::format::{self, Filter, FormatError, Output};

/// List the disks the node agents found, on every node.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Only disks of this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only disks of this storage class.
    #[arg(long)]
    pub class: Option<String>,
    /// Only disks in this phase (Available, Bound, Released, Wiping, Unusable, Missing, IdentityChanged, Failing).
    #[arg(long, value_parser = parse_phase)]
    pub phase: Option<LocalDiskPhase>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Kubeconfig file; default: $KUBECONFIG, then ~/.kube/config, then the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long)]
    pub context: Option<String>,
    #[command(subcommand)]
    pub action: Option<DiskCommand>,
}

/// What to do to one disk instead of listing.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum DiskCommand {
    /// Stop publishing a disk: its Available PV is withdrawn and no new PV is made for it until `uncordon`. Bound
    /// and Released PVs go on as usual. DISK is a LocalDisk name, or NODE/ENTRY (`node-1/vol1`).
    Cordon { disk: String },
    /// Cordon a disk and move the claim on it away: the claim and pod of a StatefulSet replica are deleted so the
    /// StatefulSet makes a new claim on another disk, the guarded way of recovery (docs/failure.md): only with the
    /// extender's --recovery, when the claim, its StatefulSet or its class opted in (`localpv.io/recovery`), or with
    /// --force; never while another replica is not Ready.
    Drain {
        disk: String,
        /// Drain without the opt-in (the guards still hold).
        #[arg(long)]
        force: bool,
    },
    /// Publish a cordoned (or drained) disk again.
    Uncordon { disk: String },
    /// Say a Degraded or Failed disk is healthy again (a cable reseated, a false alarm): the agent judges it
    /// Healthy at its next look, publishes it again and may wipe a Released PV on it. A disk that still fails is
    /// judged again by what it shows next.
    ClearHealth { disk: String },
}

fn parse_phase(text: &str) -> Result<LocalDiskPhase, String> {
    LocalDiskPhase::parse(text).ok_or_else(|| {
        let known: Vec<&str> = LocalDiskPhase::ALL.iter().map(|p| p.as_str()).collect();
        format!("unknown phase {text:?}; one of: {}", known.join(", "))
    })
}

#[derive(Debug, thiserror::Error)]
pub enum DisksError {
    #[error("failed to read kubeconfig {path}")]
    ReadKubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error("failed to load kubeconfig")]
    LoadKubeconfig(#[source] KubeconfigError),
    #[error(
        "failed to find a kubeconfig: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config (in a pod, the \
         service account is used)"
    )]
    NoKubeconfig(#[source] InferConfigError),
    #[error("failed to build a Kubernetes client")]
    Client(#[source] kube::Error),
    #[error(
        "failed to list LocalDisks: the LocalDisk CRD is not installed in this cluster (install it with \
         `localpv crd | kubectl apply -f -`)"
    )]
    CrdMissing(#[source] kube::Error),
    #[error("failed to list LocalDisks")]
    List(#[source] kube::Error),
    #[error(
        "no LocalDisk is named {0:?}: give a LocalDisk name or NODE/ENTRY (`localpv disks` lists them)"
    )]
    NoSuchDisk(String),
    #[error("{0:?} names {1} LocalDisks: give the LocalDisk name")]
    AmbiguousDisk(String, usize),
    #[error("failed to change the LocalDisk")]
    Patch(#[source] kube::Error),
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// Lists, filters and renders (or cordons or uncordons one disk); returns what to print.
pub async fn run(opts: &Options) -> Result<String, DisksError> {
    let client = client(opts).await?;
    let api: Api<LocalDisk> = Api::all(client);
    if let Some(action) = &opts.action {
        return cordon(&api, action).await;
    }
    let disks = api
        .list(&list_params(opts))
        .await
        .map_err(|error| match &error {
            kube::Error::Api(status) if status.code == 404 => DisksError::CrdMissing(error),
            _ => DisksError::List(error),
        })?
        .items;
    let filter = Filter {
        node: opts.node.clone(),
        class: opts.class.clone(),
        phase: opts.phase,
    };
    let disks = format::select(disks, &filter);
    Ok(format::render(&disks, opts.output, SystemTime::now())?)
}

/// Sets or removes the cordon (and drain) annotations on the one LocalDisk `action` names.
async fn cordon(api: &Api<LocalDisk>, action: &DiskCommand) -> Result<String, DisksError> {
    if let DiskCommand::ClearHealth { disk } = action {
        return clear_health(api, disk).await;
    }
    let (target, on, drain) = match action {
        DiskCommand::Cordon { disk } => (disk, true, None),
        DiskCommand::Drain { disk, force } => {
            (disk, true, Some(if *force { DRAIN_FORCE } else { "true" }))
        }
        DiskCommand::Uncordon { disk } => (disk, false, None),
        DiskCommand::ClearHealth { .. } => unreachable!("handled above"),
    };
    let disk = one_disk(api, target).await?;
    let disk = &disk;
    let name = disk.metadata.name.clone().unwrap_or_default();
    let value = on.then_some("true");
    // NB: a plain cordon leaves a drain in place (it only adds); uncordon ends both.
    let mut annotations = serde_json::json!({ANN_CORDONED: value});
    if drain.is_some() || !on {
        annotations[ANN_DRAIN] = serde_json::json!(drain);
    }
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(DisksError::Patch)?;
    let (node, path) = (&disk.spec.node, &disk.spec.path);
    let note = mark_node(api, node).await;
    let said = match (on, drain) {
        (true, None) => format!(
            "cordoned {name} ({node}:{path}): no new claim gets it; its Available PV, if any, is withdrawn\n"
        ),
        (true, Some(how)) => format!(
            "draining {name} ({node}:{path}){}: cordoned; the claim on it is moved once the extender's recovery \
             allows (Events on the claim say what holds it)\n",
            if how == DRAIN_FORCE {
                " with --force"
            } else {
                ""
            }
        ),
        (false, _) => format!("uncordoned {name} ({node}:{path}): it is published again\n"),
    };
    Ok(format!("{said}{note}"))
}

/// Marks `node` (`localpv.io/disks-changed`, the time) so its agent lists its LocalDisks at once instead of at its
/// next `minResyncPeriod`; what to add to the output when that failed (no right to patch Nodes, no such Node).
async fn mark_node(api: &Api<LocalDisk>, node: &str) -> String {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(api.clone().into_client());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {ANN_DISKS_CHANGED: now}}});
    match nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => String::new(),
        Err(error) => format!(
            "note: could not mark Node {node} ({}): its agent sees the change at its next LocalDisk list \
             (minResyncPeriod, 5m by default)\n",
            crate::logging::error_text(&error)
        ),
    }
}

/// The one LocalDisk `target` names.
async fn one_disk(api: &Api<LocalDisk>, target: &str) -> Result<LocalDisk, DisksError> {
    let disks = api
        .list(&ListParams::default())
        .await
        .map_err(DisksError::List)?
        .items;
    let mut found: Vec<LocalDisk> = disks.into_iter().filter(|d| names(d, target)).collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(DisksError::NoSuchDisk(target.to_string())),
        n => Err(DisksError::AmbiguousDisk(target.to_string(), n)),
    }
}

/// Sets `localpv.io/health-cleared` on the one LocalDisk `target` names: a new value, so a new clear.
async fn clear_health(api: &Api<LocalDisk>, target: &str) -> Result<String, DisksError> {
    let disk = one_disk(api, target).await?;
    let name = disk.metadata.name.clone().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {ANN_HEALTH_CLEARED: now}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(DisksError::Patch)?;
    let (node, path) = (&disk.spec.node, &disk.spec.path);
    let note = mark_node(api, node).await;
    let was = disk
        .status
        .as_ref()
        .and_then(|s| s.health.clone())
        .unwrap_or_else(|| "Healthy".to_string());
    Ok(format!(
        "cleared the health of {name} ({node}:{path}, {was}): the agent judges it Healthy at its next look and \
         publishes it again; a Released PV on it may be wiped\n{note}"
    ))
}

/// Whether `target` names `disk`: its object name, or `NODE/ENTRY`.
fn names(disk: &LocalDisk, target: &str) -> bool {
    if disk.metadata.name.as_deref() == Some(target) {
        return true;
    }
    target
        .split_once('/')
        .is_some_and(|(node, entry)| disk.spec.node == node && disk.spec.entry == entry)
}

async fn client(opts: &Options) -> Result<Client, DisksError> {
    let options = KubeConfigOptions {
        context: opts.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&opts.kubeconfig, &opts.context) {
        (Some(path), _) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| DisksError::ReadKubeconfig {
                    path: path.clone(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(DisksError::LoadKubeconfig)?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options)
            .await
            .map_err(DisksError::LoadKubeconfig)?,
        (None, None) => Config::infer().await.map_err(DisksError::NoKubeconfig)?,
    };
    Client::try_from(config).map_err(DisksError::Client)
}

/// Server-side narrowing by the node and class labels, when the values can be labels at all (the client-side
/// filter in `format::select` decides either way).
fn list_params(opts: &Options) -> ListParams {
    let selector: Vec<String> = [(NODE_LABEL, &opts.node), (CLASS_LABEL, &opts.class)]
        .into_iter()
        .filter_map(|(key, value)| {
            let value = value.as_ref()?;
            (!value.is_empty() && label_value_problem(value).is_none())
                .then(|| format!("{key}={value}"))
        })
        .collect();
    if selector.is_empty() {
        ListParams::default()
    } else {
        ListParams::default().labels(&selector.join(","))
    }
}
