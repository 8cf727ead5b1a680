//! The agent's loop: wake on any change, run one discovery + planning pass, apply the plan, repeat.
//!
//! Wipes run in the background (one per disk at a time); their completion is fed back into the loop, which updates
//! the ledger and the PV and plans again. Failed wipes back off exponentially (capped) per disk.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::{EventType as KubeEventType, Recorder, Reporter};
use tokio::sync::{Notify, mpsc, watch as tokio_watch};
use tracing::{info, warn};

mod wipes;

use self::wipes::{Backoff, Running};
use super::exec::Writer;
use super::http::State as HttpState;
use super::inventory::{self as inv, InventoryWriter};
use super::ledger::LedgerFile;
use super::metrics::{Metrics, Outcome, OutcomeLabels};
use super::wiper::{Done, Failed};
use super::{Options, load_config};
use crate::config::Config;
use crate::discover::discover;
use crate::disk::Discovery;
use crate::host::Host;
use crate::host::linux::LinuxHost;
use crate::host::watch::MountWatcher;
use crate::inventory::{self, LocalDisk, WipeFailures};
use crate::plan::pv::adoptable;
use crate::plan::{
    self, Action, ClassFacts, DiskLedger, DiskState, Inputs, Memory, NodeFacts, OwnedPv, Owners,
    StorageClassFacts, WipeOrder,
};
use crate::watch::Store;

const MAX_BACKOFF: Duration = Duration::from_secs(600);
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// Coalesces the burst of watch events our own writes cause into one pass.
const SETTLE: Duration = Duration::from_millis(30);

pub struct Setup {
    pub node: String,
    pub client: Client,
    pub config: Config,
    pub opts: Options,
    pub pvs: Arc<Store<PersistentVolume>>,
    pub nodes: Arc<Store<Node>>,
    pub classes: Arc<Store<StorageClass>>,
    pub disks: Arc<Store<LocalDisk>>,
    pub changed: Arc<Notify>,
    pub metrics: Metrics,
    pub http: HttpState,
}

/// While a wipe runs, plan again this often so its progress reaches the inventory.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

type WipeResult = (WipeOrder, Result<Done, Failed>);

pub struct Agent {
    s: Setup,
    host: Arc<dyn Host>,
    writer: Writer,
    inventory: InventoryWriter,
    ledger: DiskLedger,
    owners: Owners,
    ledger_file: LedgerFile,
    memory: Memory,
    /// Reference-provisioner PVs of this node found by the start-up list, until adopted (then the watch has them).
    adoptable: Vec<PersistentVolume>,
    /// The start-up list of every PV, handed to the first pass as its fresh cluster list.
    listed_at_start: Option<Vec<PersistentVolume>>,
    running: HashMap<String, Running>,
    backoff: HashMap<String, Backoff>,
    done_tx: mpsc::Sender<WipeResult>,
    done_rx: mpsc::Receiver<WipeResult>,
    last_config_error: Option<String>,
    /// Unusable entries already logged (one warning per entry and reason).
    notices: inventory::notices::Notices,
}

impl Agent {
    pub fn new(s: Setup) -> anyhow::Result<Agent> {
        let ledger_file = LedgerFile::new(&s.opts.state_dir);
        let (ledger, owners) = ledger_file.load()?;
        let reporter = Reporter {
            controller: crate::contract::NODE_MANAGER.into(),
            instance: Some(s.node.clone()),
        };
        let writer = Writer {
            pvs: Api::all(s.client.clone()),
            recorder: Recorder::new(s.client.clone(), reporter),
            metrics: s.metrics.clone(),
        };
        let (done_tx, done_rx) = mpsc::channel(16);
        let inventory = InventoryWriter::new(s.client.clone(), s.metrics.clone(), &s.node);
        Ok(Agent {
            s,
            host: Arc::new(LinuxHost::default()),
            writer,
            inventory,
            ledger,
            owners,
            ledger_file,
            memory: Memory::default(),
            adoptable: Vec::new(),
            listed_at_start: None,
            running: HashMap::new(),
            backoff: HashMap::new(),
            notices: Default::default(),
            done_tx,
            done_rx,
            last_config_error: None,
        })
    }

    pub async fn run(mut self, mut shutdown: tokio_watch::Receiver<bool>) {
        if !self.start(&mut shutdown).await {
            return;
        }
        let mut watcher = self.mount_watcher();
        let mut config_tick = tokio::time::interval(self.s.opts.config_poll);
        let mut resync_at = Instant::now() + self.s.config.min_resync_period;
        let mut requeue = self.pass().await;
        self.s.http.set_ready(true);
        info!("node agent ready");
        loop {
            let wake_at = requeue.map_or(resync_at, |r| (Instant::now() + r).min(resync_at));
            tokio::select! {
                _ = async { match watcher.as_mut() { Some(w) => w.changed().await, None => std::future::pending().await } } => {}
                _ = self.s.changed.notified() => {}
                Some(done) = self.done_rx.recv() => self.finish_wipe(done).await,
                _ = tokio::time::sleep_until(wake_at.into()) => {}
                _ = config_tick.tick() => {
                    if !self.reload_config().await { continue; }
                    watcher = self.mount_watcher();
                }
                _ = shutdown.changed() => break,
            }
            tokio::time::sleep(SETTLE).await;
            if Instant::now() >= resync_at {
                resync_at = Instant::now() + self.s.config.min_resync_period;
            }
            requeue = self.pass().await;
        }
        self.stop_wipes().await;
    }

    /// Waits for the caches and lists adoptable PVs once. False when shutdown came first.
    async fn start(&mut self, shutdown: &mut tokio_watch::Receiver<bool>) -> bool {
        let mut delay = Duration::from_millis(200);
        loop {
            let synced = self.s.pvs.synced()
                && self.s.nodes.synced()
                && self.s.classes.synced()
                && self.s.disks.synced();
            if synced && self.s.nodes.get(&self.s.node).is_some() {
                match self.list_all_pvs().await {
                    Ok(all) => {
                        self.adoptable = all
                            .iter()
                            .filter(|pv| adoptable(pv, &self.s.node))
                            .cloned()
                            .collect();
                        info!(
                            count = self.adoptable.len(),
                            "reference-provisioner PVs to adopt"
                        );
                        self.listed_at_start = Some(all);
                        return true;
                    }
                    Err(error) => {
                        warn!(error = %format!("{error:#}"), "failed to list PVs for adoption; retrying")
                    }
                }
            }
            if delay >= Duration::from_secs(3) {
                info!(
                    pvs = self.s.pvs.synced(),
                    node = self.s.nodes.get(&self.s.node).is_some(),
                    storage_classes = self.s.classes.synced(),
                    local_disks = self.s.disks.synced(),
                    "waiting for caches"
                );
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.changed() => return false,
            }
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }

    /// One paginated list of every PV in the cluster. At start it finds the reference provisioner's PVs of this
    /// node (they carry no label of ours); before a wipe or a new PV it finds PVs without our label that reach our
    /// disks (the watch is label-scoped and cannot see them).
    async fn list_all_pvs(&self) -> anyhow::Result<Vec<PersistentVolume>> {
        let api: Api<PersistentVolume> = Api::all(self.s.client.clone());
        let mut found = Vec::new();
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = api
                .list(&lp)
                .await
                .context("failed to list PersistentVolumes")?;
            found.extend(page.items);
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }
        Ok(found)
    }

    fn mount_watcher(&self) -> Option<MountWatcher> {
        let dirs: Vec<PathBuf> = self
            .s
            .config
            .classes
            .iter()
            .map(|c| c.mount_dir.clone())
            .collect();
        match MountWatcher::new(&dirs) {
            Ok(w) => Some(w),
            Err(error) => {
                warn!(error = %crate::host::error_chain(&error), "cannot watch mounts; relying on the periodic resync");
                None
            }
        }
    }

    /// Re-reads the configuration. True when a new valid configuration was taken.
    async fn reload_config(&mut self) -> bool {
        match load_config(&self.s.opts.config) {
            Ok(config) if config == self.s.config => {
                self.last_config_error = None;
                false
            }
            Ok(config) => {
                info!(classes = config.classes.len(), "configuration reloaded");
                self.s
                    .metrics
                    .config_reloads
                    .get_or_create(&OutcomeLabels {
                        outcome: Outcome::Ok,
                    })
                    .inc();
                self.s.config = config;
                self.last_config_error = None;
                true
            }
            Err(error) => {
                let text = format!("{error:#}");
                if self.last_config_error.as_deref() != Some(&text) {
                    warn!(error = %text, "new configuration rejected; keeping the last good one");
                    self.s
                        .metrics
                        .config_reloads
                        .get_or_create(&OutcomeLabels {
                            outcome: Outcome::Error,
                        })
                        .inc();
                    let node = ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Node".into()),
                        name: Some(self.s.node.clone()),
                        uid: self.s.nodes.get(&self.s.node).and_then(|n| n.metadata.uid),
                        ..Default::default()
                    };
                    let message = format!(
                        "configuration rejected, still running on the last good one: {text}"
                    );
                    self.writer
                        .publish(KubeEventType::Warning, "ConfigRejected", &message, &node)
                        .await;
                    self.last_config_error = Some(text);
                }
                false
            }
        }
    }

    fn node_facts(&self) -> Option<NodeFacts> {
        let node = self.s.nodes.get(&self.s.node)?;
        let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
        Some(NodeFacts {
            name: self.s.node.clone(),
            hostname_label: labels.get("kubernetes.io/hostname").cloned(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            labels,
        })
    }

    fn class_facts(&self) -> Vec<ClassFacts> {
        self.s
            .config
            .classes
            .iter()
            .map(|c| ClassFacts {
                config: c.clone(),
                storage_class: self.s.classes.get(&c.name).map(|sc| StorageClassFacts {
                    reclaim_policy: sc.reclaim_policy.clone(),
                    mount_options: sc.mount_options.clone().unwrap_or_default(),
                }),
            })
            .collect()
    }

    /// One discovery + planning pass. Returns when to plan again without an event, if the plan asks.
    async fn pass(&mut self) -> Option<Duration> {
        let started = Instant::now();
        let classes = self.s.config.discovery_classes();
        let host = self.host.clone();
        let found =
            match tokio::task::spawn_blocking(move || discover(host.as_ref(), &classes)).await {
                Ok(found) => found,
                Err(error) => {
                    warn!(%error, "discovery task failed");
                    return Some(FIRST_BACKOFF);
                }
            };
        let Some(node) = self.node_facts() else {
            warn!(node = %self.s.node, "Node object not found; waiting");
            return Some(FIRST_BACKOFF);
        };
        let classes = self.class_facts();
        let mut existing = self.s.pvs.all();
        self.adoptable
            .retain(|a| !existing.iter().any(|e| e.metadata.name == a.metadata.name));
        existing.extend(self.adoptable.iter().cloned());
        let mut cluster = self.listed_at_start.take();
        let plan_with = |cluster: Option<&[PersistentVolume]>| {
            plan::plan(&Inputs {
                node: &node,
                config: &self.s.config,
                classes: &classes,
                found: &found,
                existing: &existing,
                ledger: &self.ledger,
                owners: &self.owners,
                cluster,
                memory: &self.memory,
                now: SystemTime::now(),
            })
        };
        let mut plan = plan_with(cluster.as_deref());
        let mut retry = false;
        if plan.needs_cluster_list && cluster.is_none() {
            // NB: planned again on a list taken just now; the actions of the plan without it are dropped.
            match self.list_all_pvs().await {
                Ok(all) => {
                    cluster = Some(all);
                    plan = plan_with(cluster.as_deref());
                }
                Err(error) => {
                    warn!(error = %format!("{error:#}"), "failed to list PersistentVolumes; no wipe and no new PV this pass");
                    retry = true;
                }
            }
        }
        drop(cluster);
        let mut halted = false;
        for action in plan.actions {
            if halted && !matches!(action, Action::Event(_)) {
                continue;
            }
            match self.execute(action).await {
                Step::Done => {}
                Step::Retry => retry = true,
                Step::Halt => {
                    // NB: an unpersisted ledger change must not be acted on: skip the rest of the plan's writes.
                    retry = true;
                    halted = true;
                }
            }
        }
        self.memory = plan.memory;
        let inventory_after = self
            .sync_inventory(&found, &plan.unpublished, &existing, &mut retry)
            .await;
        for u in self.notices.changed(&found.unusable) {
            let (path, reason) = (u.host_path.display(), u.reason.as_str());
            warn!(class = %u.class, %path, reason, note = %u.message, "entry not usable");
        }
        self.publish_state(&found, &plan.unpublished, &existing);
        self.s.metrics.discovery_passes.inc();
        self.s
            .metrics
            .discovery_seconds
            .observe(started.elapsed().as_secs_f64());
        let backoff = self
            .backoff
            .values()
            .map(|b| b.not_before.saturating_duration_since(Instant::now()))
            .min();
        let progress = (!self.running.is_empty()).then_some(PROGRESS_EVERY);
        [
            plan.requeue_after,
            inventory_after,
            backoff,
            progress,
            retry.then_some(FIRST_BACKOFF),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Brings this node's LocalDisks in line with the pass; returns when to look again.
    async fn sync_inventory(
        &self,
        found: &Discovery,
        unpublished: &[plan::Unpublished],
        pvs: &[PersistentVolume],
        retry: &mut bool,
    ) -> Option<Duration> {
        let existing = self.s.disks.all();
        let wanted = inventory::names_to_look_up(&self.s.node, found, &existing);
        let others = self.inventory.fetch(&wanted).await;
        let mut wipes = inv::WipeFacts::default();
        for r in self.running.values() {
            wipes
                .running
                .insert(r.host_path.clone(), inv::sample(r.started, &r.ctl));
        }
        for b in self.backoff.values() {
            let f = WipeFailures {
                consecutive: b.failures,
                last_error: b.last_error.clone(),
            };
            wipes.failures.insert(b.host_path.clone(), f);
        }
        let changes = inventory::build(&inventory::Inputs {
            node: &self.s.node,
            found,
            unpublished,
            pvs,
            ledger: &self.ledger,
            wipes: &wipes.running,
            wipe_failures: &wipes.failures,
            existing: &existing,
            others: &others,
            settings: &inventory::Settings {
                failing_after: self.s.opts.wipe_failing_after,
                ..inventory::Settings::default()
            },
            now: SystemTime::now(),
        });
        *retry |= !self.inventory.apply(changes.changes).await;
        changes.requeue_after
    }

    fn publish_state(
        &self,
        found: &Discovery,
        unpublished: &[plan::Unpublished],
        pvs: &[PersistentVolume],
    ) {
        let m = &self.s.metrics;
        m.disks_found.set(found.disks.len() as i64);
        let classes = self.s.config.classes.iter().map(|c| c.name.as_str());
        m.publish_pass(classes, &found.unusable, pvs);
        let wiping: Vec<&String> = self.running.keys().collect();
        self.s.http.set_disks(serde_json::json!({
            "node": self.s.node,
            "disks": found.disks,
            "unusable": found.unusable,
            "failedClasses": found.failed_classes,
            "unpublished": unpublished,
            "wiping": wiping,
            "ledger": self.ledger,
        }));
    }

    /// Applies one action.
    async fn execute(&mut self, action: Action) -> Step {
        let retry = |ok: bool| if ok { Step::Done } else { Step::Retry };
        let halt = |ok: bool| if ok { Step::Done } else { Step::Halt };
        match action {
            Action::CreatePv(pv) => self.create(&pv).await,
            Action::DeletePv(r) => retry(self.writer.delete(&r).await.is_ok()),
            Action::DeleteUnclaimedPv { pv, disk } => match self.writer.delete(&pv).await {
                Ok(true) => halt(self.set_disk_state(&disk, DiskState::Clean)),
                Ok(false) => Step::Done,
                Err(()) => Step::Retry,
            },
            Action::AdoptPv { name, patch } | Action::RecordIdentity { name, patch } => {
                retry(self.writer.patch(&name, &patch).await.is_ok())
            }
            Action::SetDiskState { key, state } => halt(self.set_disk_state(&key, state)),
            Action::RecordOwner { uid, pv } => halt(self.update_owners(|o| {
                o.creating.remove(&pv.name);
                o.pvs.insert(uid, pv);
            })),
            Action::ForgetOwner { uid } => halt(self.update_owners(|o| {
                o.pvs.remove(&uid);
            })),
            Action::OwnersRecorded => halt(self.update_owners(|o| o.recorded = true)),
            Action::Wipe(order) => retry(self.start_wipe(*order).await),
            Action::TagVolume { host_path, path } => match self.host.tag_volume(&path) {
                Ok(id) => {
                    info!(path = %host_path.display(), volume_id = %id, "stored the volume id");
                    Step::Done
                }
                Err(error) => {
                    warn!(path = %host_path.display(), error = %crate::host::error_chain(&error), "failed to store the volume id");
                    Step::Retry
                }
            },
            Action::Event(e) => {
                self.writer.event(&e).await;
                Step::Done
            }
        }
    }

    /// Creates a PV and records its UID as ours. The name is recorded as being created first, so a lost response
    /// (timeout, crash) still lets the next pass recognise the PV (`Owners::creating`).
    async fn create(&mut self, pv: &PersistentVolume) -> Step {
        let owned = OwnedPv {
            name: pv.metadata.name.clone().unwrap_or_default(),
            path: pv
                .spec
                .as_ref()
                .and_then(|s| s.local.as_ref())
                .map(|l| PathBuf::from(&l.path))
                .unwrap_or_default(),
        };
        let name = owned.name.clone();
        let pending = owned.clone();
        if !self.update_owners(|o| {
            o.creating.insert(name, pending);
        }) {
            return Step::Halt;
        }
        match self.writer.create(pv).await {
            Ok(Some(uid)) => {
                let ok = self.update_owners(|o| {
                    o.creating.remove(&owned.name);
                    o.pvs.insert(uid, owned);
                });
                if ok { Step::Done } else { Step::Halt }
            }
            Ok(None) => Step::Done,
            Err(()) => Step::Retry,
        }
    }

    fn set_disk_state(&mut self, key: &str, state: DiskState) -> bool {
        if self.ledger.get(key) == Some(state) {
            return true;
        }
        let before = self.ledger.clone();
        self.ledger.set(key, state);
        if !self.persist() {
            self.ledger = before;
            return false;
        }
        true
    }

    /// Changes the recorded owners and persists them; false (and nothing changed) when they could not be stored.
    fn update_owners(&mut self, change: impl FnOnce(&mut Owners)) -> bool {
        let before = self.owners.clone();
        change(&mut self.owners);
        if self.owners == before {
            return true;
        }
        if !self.persist() {
            self.owners = before;
            return false;
        }
        true
    }

    fn persist(&self) -> bool {
        match self.ledger_file.store(&self.ledger, &self.owners) {
            Ok(()) => true,
            Err(error) => {
                // NB: an unpersisted ledger change must not be acted on (a dirty disk could be forgotten on restart).
                warn!(error = %crate::host::error_chain(&error), "failed to persist the disk ledger");
                false
            }
        }
    }
}

/// How executing one action went.
enum Step {
    Done,
    /// Failed in a way the next pass should retry soon.
    Retry,
    /// The ledger could not be written: nothing after it in this plan may run.
    Halt,
}
