//! The Lease holder's work among `localpv extender` replicas: clean-up after deleted nodes and explanations for
//! pending pods, in one leader-gated controller.
//!
//! ```text
//!  watches (crate::watch) ──> compact stores: node names (the extender's node store), our PVs as cleanup::Volume,
//!                             LocalDisk -> node, pending pods as PendingPod
//!  every TICK: renew the Lease ──> leader? ──> cleanup::plan (pure, on a blocking thread, only when the stores
//!                                         │     changed or a gone node's grace period is running) ──┐
//!                                         └─> pending::plan_pending_events (pure, blocking thread) ───┴─> write,
//!                                             each one only while the Lease is still held (else dropped, counted)
//! ```
//!
//! Followers keep their stores warm, so a new leader acts at once. The stores hold compact models, never whole
//! objects, and a pass copies pointers out of them: the extender's answers never wait for this work, and its memory
//! stays a small fraction of the snapshot's. Every write goes through the program's one effects writer
//! (`crate::effects`), where 404 and 409 mean already done.
//!
//! NB: a little over 500 lines: the leader's pass and the stores it reads are one loop; the lease is in
//! `controller::lease`, the decisions in `recovery`, `controller::recover` and `controller::pending`.

pub mod lease;
pub mod metrics;
pub mod pending;
pub mod recover;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use tokio::sync::{Notify, watch as tokio_watch};
use tracing::{info, warn};

use self::lease::Elector;
use self::metrics::{ControllerWork, Metrics, WorkLabels, WriteKind, WriteLabels, WriteVerdict};
use self::pending::{PendingPod, PendingReasons, plan_pending_events};
use crate::cleanup::{CleanupAction, CleanupPlan, Inputs, Settings, Volume, plan};
use crate::contract::NODE_LABEL;
use crate::effects::{self, Applied, Failed, Reason, Uncounted};
use crate::inventory::LocalDisk;
use crate::logging::error_text;
use crate::recovery::{DiskFacts, NodeState};
use crate::watch::{Store, Watcher, models};

const TICK: Duration = Duration::from_secs(5);
const LEASE: Duration = Duration::from_secs(15);
/// A pod pending at least this long is looked at (the scheduler usually places a pod well within it).
const PENDING_AFTER: Duration = Duration::from_secs(5);

pub struct ControllerConfig {
    /// Clean up after deleted nodes.
    pub node_cleanup: bool,
    pub settings: Settings,
    /// The extender's reasons why pending pods fit no node, for their Events.
    pub explain: Option<Arc<dyn PendingReasons>>,
    pub lease_namespace: String,
    pub identity: String,
    /// Recover StatefulSet replicas whose local volume is lost (issue 37), when set.
    pub recovery: Option<recover::Settings>,
}

struct Stores<N> {
    /// Keyed by node name; the model is whatever the store's owner keeps (only the keys are read here).
    nodes: Arc<Store<N>>,
    pvs: Arc<Store<Volume>>,
    /// LocalDisk name -> its node, PV, health and drain.
    disks: Arc<Store<DiskFacts>>,
    pods: Arc<Store<PendingPod>>,
    /// Node name -> out-of-service taint and NotReady time; watched only when recovery reads those signals.
    node_states: Option<Arc<Store<NodeState>>>,
}

impl<N> Clone for Stores<N> {
    fn clone(&self) -> Self {
        Stores {
            nodes: self.nodes.clone(),
            pvs: self.pvs.clone(),
            disks: self.disks.clone(),
            pods: self.pods.clone(),
            node_states: self.node_states.clone(),
        }
    }
}

/// Runs the controller's watches and the leader loop until `shutdown` changes; joins them before returning.
/// `nodes` is a store of every Node keyed by name, kept by the caller's own watch.
pub async fn run<N: Send + Sync + 'static>(
    client: Client,
    cfg: ControllerConfig,
    nodes: Arc<Store<N>>,
    metrics: Metrics,
    shutdown: tokio_watch::Receiver<bool>,
) {
    let signals = cfg.recovery.as_ref().map(|r| r.signals.clone());
    let node_signals = signals.is_some_and(|s| s.reads_node_state());
    let st = Stores {
        nodes,
        pvs: Store::new(),
        disks: Store::new(),
        pods: Store::new(),
        node_states: node_signals.then(Store::new),
    };
    // NB: the loop runs on its timer; the watches' change signal is not needed here.
    let watcher = Watcher::new(client.clone(), Arc::new(Notify::new()), shutdown.clone());
    let ours = watcher::Config::default().labels(NODE_LABEL);
    let unscheduled = watcher::Config::default().fields("spec.nodeName=");
    let volume = |pv: PersistentVolume| Ok::<_, Infallible>(Volume::from_pv(&pv));
    let disk = |d: LocalDisk| Ok::<_, Infallible>(DiskFacts::from_local_disk(&d));
    let node_state = |n: Node| Ok::<_, Infallible>(NodeState::from_node(&n));
    let explain = cfg.explain.clone();
    tokio::join!(
        watcher.run(ours.clone(), st.pvs.clone(), models(volume)),
        watcher.run(ours, st.disks.clone(), models(disk)),
        async {
            if let Some(explain) = explain {
                let pod =
                    move |p: Pod| Ok::<_, Infallible>(PendingPod::new(&p, explain.claims(&p)));
                let pods = st.pods.clone();
                watcher.run(unscheduled, pods, models(pod)).await;
            }
        },
        async {
            if let Some(states) = st.node_states.clone() {
                let every = watcher::Config::default();
                watcher.run(every, states, models(node_state)).await;
            }
        },
        lead(client, cfg, st.clone(), metrics, shutdown.clone()),
    );
}

/// Whether this replica holds the Lease now, as the lease task publishes it: renewed at some instant, held until
/// one tick before it could expire.
struct Leadership {
    held_until: tokio_watch::Receiver<Option<Instant>>,
}

impl Leadership {
    fn holds(&self) -> bool {
        self.held_until.borrow().is_some_and(|t| Instant::now() < t)
    }
}

/// What the leader carries from one pass to the next.
#[derive(Default)]
struct Memory {
    /// Pod UID -> the explanation already published for it.
    explained: BTreeMap<String, String>,
    gone_since: BTreeMap<String, SystemTime>,
    warned: BTreeSet<String>,
    /// The store generations the last clean-up plan saw.
    planned_at: Option<[u64; 3]>,
    recovery: recover::Memory,
}

async fn lead<N: Send + Sync + 'static>(
    client: Client,
    cfg: ControllerConfig,
    st: Stores<N>,
    metrics: Metrics,
    shutdown: tokio_watch::Receiver<bool>,
) {
    let elector = Elector::new(
        client.clone(),
        &cfg.lease_namespace,
        "localpv-cleanup",
        &cfg.identity,
        LEASE,
    );
    let (held, held_until) = tokio_watch::channel(None);
    let writer = LeaderWriter {
        effects: effects::Writer::new(
            client.clone(),
            "localpv-cleanup",
            &cfg.identity,
            Arc::new(Uncounted),
        ),
        metrics: metrics.clone(),
        lease: Leadership { held_until },
    };
    // NB: the Lease is renewed by its own task, so a slow pass (a slow API server, a large clean-up) never delays
    // a renewal; the work reads who leads before each write.
    tokio::join!(
        hold_lease(elector, &cfg.identity, held, metrics, shutdown.clone()),
        work(&writer, &client, &cfg, &st, shutdown),
    );
}

/// Renews (or takes) the Lease every tick and publishes until when this replica holds it.
async fn hold_lease(
    elector: Elector,
    identity: &str,
    held: tokio_watch::Sender<Option<Instant>>,
    metrics: Metrics,
    mut shutdown: tokio_watch::Receiver<bool>,
) {
    loop {
        let asked = Instant::now();
        let leader = match elector.try_acquire_or_renew().await {
            Ok(leader) => leader,
            Err(error) => {
                warn!(error = %error_text(&error), "failed to renew the clean-up lease; acting as follower");
                false
            }
        };
        let was = held.borrow().is_some_and(|t| Instant::now() < t);
        if leader != was {
            info!(identity, leader, "clean-up leadership changed");
        }
        held.send_replace(leader.then(|| asked + LEASE - TICK));
        metrics.leader.set(i64::from(leader));
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The leader's passes, every tick while this replica holds the Lease.
async fn work<N: Send + Sync + 'static>(
    writer: &LeaderWriter,
    client: &Client,
    cfg: &ControllerConfig,
    st: &Stores<N>,
    mut shutdown: tokio_watch::Receiver<bool>,
) {
    let mut memory = Memory::default();
    let mut leading = false;
    loop {
        let holds = writer.lease.holds();
        if holds && !leading {
            // NB: the last leader's recoveries are not known here; count the cluster's interval from now.
            memory.recovery.began_leading(SystemTime::now());
        }
        leading = holds;
        if holds {
            if let Some(explain) = &cfg.explain {
                explain_pending(writer, explain, &st.pods, &mut memory).await;
            }
            if cfg.node_cleanup {
                clean_up(writer, &cfg.settings, st, &mut memory).await;
            }
            if let Some(settings) = &cfg.recovery {
                recover_lost(writer, client, settings, st, &mut memory).await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One Warning Event per pending pod and distinct explanation; a failed publish is tried again on the next look.
async fn explain_pending(
    writer: &LeaderWriter,
    explain: &Arc<dyn PendingReasons>,
    pods: &Store<PendingPod>,
    memory: &mut Memory,
) {
    if !pods.synced() {
        return;
    }
    let pods = pods.shared();
    let published = std::mem::take(&mut memory.explained);
    let explain = explain.clone();
    let work = writer.timed(ControllerWork::Explain);
    let planned = tokio::task::spawn_blocking(move || {
        let _timer = work;
        let now = k8s_openapi::jiff::Timestamp::now();
        plan_pending_events(&pods, now, PENDING_AFTER, &published, |p| {
            explain.explain(p)
        })
    })
    .await;
    let plan = match planned {
        Ok(done) => done,
        Err(error) => {
            warn!(%error, "explaining pending pods failed");
            return;
        }
    };
    let mut seen = BTreeMap::new();
    for e in plan {
        if e.publish && !writer.explain(&e.pod, &e.uid, &e.message).await {
            continue;
        }
        seen.insert(e.uid, e.message);
    }
    memory.explained = seen;
}

/// Plans clean-up on a blocking thread when the stores changed since the last plan or a gone node's grace period
/// is running, and applies the plan.
async fn clean_up<N: Send + Sync + 'static>(
    writer: &LeaderWriter,
    settings: &Settings,
    st: &Stores<N>,
    memory: &mut Memory,
) {
    if !(st.nodes.synced() && st.pvs.synced() && st.disks.synced()) {
        return;
    }
    let seen = [
        st.nodes.generation(),
        st.pvs.generation(),
        st.disks.generation(),
    ];
    if memory.planned_at == Some(seen) && memory.gone_since.is_empty() {
        return;
    }
    let names: BTreeSet<String> = st.nodes.read(|items| items.keys().cloned().collect());
    let disks: Vec<(String, String)> = st.disks.read(|items| {
        let pairs = items
            .iter()
            .map(|(name, disk)| (name.clone(), disk.node.clone()));
        pairs.collect()
    });
    let pvs = st.pvs.shared();
    let gone_since = std::mem::take(&mut memory.gone_since);
    let warned = std::mem::take(&mut memory.warned);
    let settings = settings.clone();
    let work = writer.timed(ControllerWork::Cleanup);
    let planned = tokio::task::spawn_blocking(move || {
        let _timer = work;
        plan(&Inputs {
            nodes: &names,
            pvs: &pvs,
            disks: &disks,
            gone_since: &gone_since,
            warned: &warned,
            settings: &settings,
            now: SystemTime::now(),
        })
    })
    .await;
    let CleanupPlan {
        actions,
        gone_since,
        warned,
    } = match planned {
        Ok(p) => p,
        Err(error) => {
            warn!(%error, "clean-up planning failed");
            return;
        }
    };
    for action in actions {
        writer.apply(action).await;
    }
    memory.planned_at = Some(seen);
    memory.gone_since = gone_since;
    memory.warned = warned;
}

/// The recovery pass (`recover`), once every store it reads has synced.
async fn recover_lost<N: Send + Sync + 'static>(
    writer: &LeaderWriter,
    client: &Client,
    settings: &recover::Settings,
    st: &Stores<N>,
    memory: &mut Memory,
) {
    let states_synced = st.node_states.as_ref().is_none_or(|s| s.synced());
    if !(st.nodes.synced() && st.pvs.synced() && st.disks.synced() && states_synced) {
        return;
    }
    // NB: copied every tick, so only what the pass reads: no node when no node signal is on, and only the disks
    // that are unhealthy or drained, or publish a PV whose pods were told of a failing disk (a healthy cluster
    // copies none).
    let signals = &settings.signals;
    let any_signal = signals.any();
    let nodes: BTreeMap<String, NodeState> = match &st.node_states {
        _ if !any_signal => BTreeMap::new(),
        Some(states) => states.read(|items| {
            let states = items.iter().map(|(n, s)| (n.clone(), NodeState::clone(s)));
            states.collect()
        }),
        None => st.nodes.read(|items| {
            let names = items.keys().map(|n| (n.clone(), NodeState::default()));
            names.collect()
        }),
    };
    let pvs = st.pvs.shared();
    let told = memory.recovery.told_pvs();
    let disks: Vec<DiskFacts> = st.disks.read(|items| {
        let telling = items.values().filter(|d| {
            d.health.is_some()
                || d.drain.is_some()
                || d.pv.as_ref().is_some_and(|pv| told.contains(pv))
        });
        telling.map(|d| DiskFacts::clone(d)).collect()
    });
    let _timer = writer.timed(ControllerWork::Recovery);
    let inputs = recover::Inputs {
        pvs: &pvs,
        disks: &disks,
        nodes: &nodes,
        gone_since: &memory.gone_since,
    };
    recover::pass(writer, client, settings, &inputs, &mut memory.recovery).await;
}

/// Sends the leader's writes through the program's one effects writer, each only while the Lease is held, and
/// counts each by kind and outcome.
struct LeaderWriter {
    effects: effects::Writer,
    metrics: Metrics,
    lease: Leadership,
}

/// Observes a pass's duration when dropped (on the blocking thread, when the pass ends).
struct PassTimer {
    started: Instant,
    metrics: Metrics,
    work: ControllerWork,
}

impl Drop for PassTimer {
    fn drop(&mut self) {
        let seconds = self.started.elapsed().as_secs_f64();
        let labels = WorkLabels { work: self.work };
        self.metrics.pass.get_or_create(&labels).observe(seconds);
    }
}

impl LeaderWriter {
    fn timed(&self, work: ControllerWork) -> PassTimer {
        PassTimer {
            started: Instant::now(),
            metrics: self.metrics.clone(),
            work,
        }
    }

    fn count(&self, write: WriteKind, outcome: WriteVerdict) {
        let labels = WriteLabels { write, outcome };
        self.metrics.writes.get_or_create(&labels).inc();
    }

    /// Publishes one explanation; true when it was published.
    async fn explain(&self, pod: &PendingPod, uid: &str, message: &str) -> bool {
        if !self.lease.holds() {
            self.count(WriteKind::ExplainPod, WriteVerdict::NotLeader);
            return false;
        }
        let namespace = Some(pod.namespace.as_str()).filter(|ns| !ns.is_empty());
        let regarding = effects::reference::<Pod>(namespace, &pod.name, Some(uid));
        let reason = Reason::NoLocalVolume;
        self.event_counted(
            &regarding,
            reason,
            reason.action(),
            message,
            WriteKind::ExplainPod,
        )
        .await
    }

    async fn apply(&self, action: CleanupAction) {
        let write = match &action {
            CleanupAction::DeletePv(_) => WriteKind::DeletePv,
            CleanupAction::DeleteLocalDisk(_) => WriteKind::DeleteLocalDisk,
            CleanupAction::WarnClaim { .. } => WriteKind::WarnClaim,
            CleanupAction::DeleteClaim { .. } => WriteKind::DeleteClaim,
        };
        // NB: checked before each write, not once per pass: a pass can outlive the Lease (a slow API server),
        // and then another replica may already be acting.
        if !self.lease.holds() {
            self.count(write, WriteVerdict::NotLeader);
            return;
        }
        // NB: the effects writer logs failures and sorts 404/409 into "moot" (already done, or the precondition
        // no longer holds); the next pass plans again from what the watches then show.
        let outcome = match self.send(&action).await {
            Ok(Applied::Done(())) => {
                info!(%action, "clean-up applied");
                WriteVerdict::Applied
            }
            Ok(Applied::Moot) => WriteVerdict::AlreadyDone,
            Err(Failed) => WriteVerdict::Failed,
        };
        self.count(write, outcome);
    }

    async fn send(&self, action: &CleanupAction) -> Result<Applied<()>, Failed> {
        let w = &self.effects;
        match action {
            CleanupAction::DeletePv(r) => {
                let exact = effects::exactly(&r.uid, Some(&r.resource_version));
                w.delete::<PersistentVolume>(None, &r.name, Some(exact))
                    .await
            }
            CleanupAction::DeleteLocalDisk(name) => w.delete::<LocalDisk>(None, name, None).await,
            CleanupAction::DeleteClaim {
                namespace,
                name,
                uid,
            } => {
                let exact = uid.as_deref().map(|uid| effects::exactly(uid, None));
                w.delete::<PersistentVolumeClaim>(Some(namespace), name, exact)
                    .await
            }
            CleanupAction::WarnClaim {
                namespace,
                name,
                uid,
                pv,
                node,
            } => {
                let regarding = effects::reference::<PersistentVolumeClaim>(
                    Some(namespace),
                    name,
                    uid.as_deref(),
                );
                let note = format!(
                    "node {node} holding local volume {pv} was deleted; the data is on that machine only"
                );
                w.event(&regarding, EventType::Warning, Reason::NodeDeleted, &note)
                    .await
                    .map(|()| Applied::Done(()))
            }
        }
    }
}
