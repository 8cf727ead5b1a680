//! The agent's loop: wake on any change, run one discovery + planning pass, apply the plan, repeat.
//!
//! Wipes run in the background (one per disk at a time); their completion is fed back into the loop, which updates
//! the ledger and the PV and plans again. Failed wipes back off exponentially (capped) per disk.
//!
//! This file sequences a pass (discover, gather, plan, fill, execute, publish, come back) and holds the state
//! between passes. What each step decides is a pure function in `plan` (`cadence`: how a plan gets every PV, runs,
//! halts, backs off, and when the next pass comes; `polled`: the Node's disks mark and the snapshot at a clean stop;
//! `existing`: the PVs picked from the index; `taint`, `narrow`, `lost`, the planner). The parts with state or
//! effects of their own are modules beside it: `start` (seeded stores, caches awaited, the snapshot left), `config`
//! (reloads, the mount watcher), `node` (the Node's facts, mark, taint and Events), `cluster` (every PV and fresh
//! StorageClasses before a plan acts), `execute` (a plan's steps), `publish` (LocalDisks, metrics, `/disks`),
//! `record` (ledger and owners), `wipes`, `scope` (the PV watch's scope).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use tokio::sync::{Notify, mpsc, watch as tokio_watch};
use tracing::{debug, info, warn};

mod cluster;
mod config;
mod execute;
mod node;
mod publish;
mod record;
mod scope;
mod start;
#[cfg(test)]
mod tests;
mod wipes;

use self::publish::Published;
use self::record::Book;
use self::wipes::{Backoff, Running};
use super::Options;
use super::exec::PvWriter;
use super::http::HttpState;
use super::inventory::InventoryWriter;
use super::metrics::Metrics;
use super::pvindex::{PvIndex, PvSnapshot};
use super::wiper::{Done, WipeFailed};
use crate::config::Config;
use crate::discover::{Probed, discover_changed};
use crate::disk::Discovery;
use crate::effects::Writer;
use crate::host::wake::MountWatcher;
use crate::host::{Host, HostChanges};
use crate::inventory::{self, LocalDisk};
use crate::plan::cadence::{self, FIRST_BACKOFF, Run, RunSoFar};
use crate::plan::existing::Picked;
use crate::plan::incremental::IncrementalPlanner;
use crate::plan::polled::DisksMark;
use crate::plan::{self, ClassFacts, Inputs, Memory, NodeFacts, StorageClassFacts, WipeOrder};
use crate::watch::Store;

/// Coalesces the burst of API watch events our own writes cause into one pass. Not waited after a mount event or
/// a timer: that pass probes only what changed, and every millisecond before it is on the way to the new PV.
const SETTLE: Duration = Duration::from_millis(10);

pub struct Setup {
    pub node: String,
    /// The API server every read and write goes to (a scripted one in tests).
    pub client: Client,
    /// The machine the disks are on (`LinuxHost`, or a fake in tests).
    pub host: Arc<dyn Host>,
    pub config: Config,
    pub opts: Options,
    pub pvs: Arc<PvIndex>,
    pub nodes: Arc<Store<Node>>,
    pub classes: Arc<Store<StorageClass>>,
    pub disks: Arc<Store<LocalDisk>>,
    /// How `classes` is polled: told whether a StorageClass the configuration names is missing (polled faster while
    /// one is), and whether a pass lists them again before it creates or wipes.
    pub classes_polled: Arc<crate::watch::Polled>,
    /// The LocalDisks' poller: poked when `localpv disks` marks the Node (`localpv.io/disks-changed`).
    pub disks_polled: Arc<crate::watch::Polled>,
    pub changed: Arc<Notify>,
    pub metrics: Metrics,
    pub http: HttpState,
}

/// While a wipe runs, plan again this often so its progress reaches the inventory.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

type WipeResult = (WipeOrder, Result<Done, WipeFailed>);

pub struct Agent {
    s: Setup,
    host: Arc<dyn Host>,
    writer: PvWriter,
    inventory: InventoryWriter,
    /// The disk ledger and recorded owners (changed only through it).
    book: Book,
    memory: Memory,
    /// The planner between passes: plans again only what changed.
    planner: IncrementalPlanner,
    /// The inventory between passes: builds again only what changed.
    inventory_builder: inventory::incremental::IncrementalInventory,
    /// Measurements of the last discovery, reused for entries whose mount did not change.
    probed: Probed,
    /// The last pass found a raw device (in any class): every pass lists the host again.
    raw_devices: bool,
    /// What may have changed on the host since the last discovery looked (mount and directory events; everything
    /// without a watcher, or on a directory the watcher could not watch): what the next pass looks at again.
    changes: HostChanges,
    /// This pass stored a volume id: plan again at once (the disk is published next pass).
    tagged: bool,
    /// The last pass stored a volume id (`tagged`), so the disk can be published: the next pass starts at once,
    /// before the loop waits on anything.
    publish_now: bool,
    /// The last pass stored a volume id: if this one stores one again, the id did not read back.
    tagged_last: bool,
    running: HashMap<String, Running>,
    backoff: HashMap<String, Backoff>,
    /// Every disk's health, looked at every `diskHealthCheckPeriod`.
    health: super::health::HealthBook,
    /// The Node's `localpv.io/disks-changed` as the last pass saw it.
    disks_mark: DisksMark,
    done_tx: mpsc::Sender<WipeResult>,
    done_rx: mpsc::Receiver<WipeResult>,
    last_config_error: Option<String>,
    /// Unusable entries already logged (one warning per entry and reason).
    notices: inventory::notices::Notices,
    /// What the last pass published to the metrics and `/disks`, to do it again only on a change.
    published: Published,
    /// The last pass's `existing` PVs, and what they were picked from.
    existing: Option<Picked>,
    /// The next planning call names no changes: its planner compares ledger and owners whole.
    compare_whole: bool,
    /// A pass found every disk published or held for a lasting reason, with nothing left to retry
    /// (`plan::taint::all_published`): the startup taint may go.
    published_all: bool,
    /// The Node's resourceVersion the startup taint was removed from: no second patch until the watch shows the
    /// Node as it is now.
    untainted_from: Option<String>,
    /// The admission policy that lets the PV watch narrow to this node's PVs (`--admission-policy`).
    admission: Option<super::admission::Guard>,
}

impl Agent {
    pub fn new(s: Setup) -> anyhow::Result<Agent> {
        let book = Book::open(&s.opts.state_dir)?;
        let (health, memory) = super::health::HealthBook::open(&s.opts.state_dir);
        let disks_mark = DisksMark::at_start(start::warm_start(&s));
        let writer = Writer::new(
            s.client.clone(),
            crate::contract::NODE_MANAGER,
            &s.node,
            Arc::new(s.metrics.clone()),
        );
        let (done_tx, done_rx) = mpsc::channel(16);
        let inventory = InventoryWriter::new(
            s.client.clone(),
            &writer,
            &s.node,
            (s.disks.clone(), s.changed.clone()),
        );
        Ok(Agent {
            host: s.host.clone(),
            s,
            writer: PvWriter { writer },
            inventory,
            book,
            memory,
            planner: IncrementalPlanner::default(),
            inventory_builder: Default::default(),
            probed: Probed::default(),
            raw_devices: false,
            changes: HostChanges::all(),
            tagged: false,
            publish_now: false,
            tagged_last: false,
            running: HashMap::new(),
            backoff: HashMap::new(),
            health,
            disks_mark,
            notices: Default::default(),
            published: Published::default(),
            existing: None,
            compare_whole: false,
            published_all: false,
            untainted_from: None,
            admission: None,
            done_tx,
            done_rx,
            last_config_error: None,
        })
    }

    pub async fn run(mut self, mut shutdown: tokio_watch::Receiver<bool>) {
        self.start_scope();
        if !self.start(&mut shutdown).await {
            return self.book.close();
        }
        let mut watcher = self.mount_watcher();
        let mut watched = watcher
            .as_ref()
            .is_some_and(MountWatcher::watches_every_dir);
        let mut config_tick = tokio::time::interval(self.s.opts.config_poll);
        let mut resync_at = Instant::now() + self.s.config.min_resync_period;
        // NB: when the last pass asked to plan again, as a point in time: a config poll or any other wake-up that
        // runs no pass must not push it later (a held-out wipe on an idle node was never tried again).
        let mut requeue_at = self.pass().await.map(|r| Instant::now() + r);
        self.s.http.set_ready(true);
        info!("node agent ready");
        loop {
            // NB: a disk whose volume id the last pass stored is published by a pass that starts now, ahead of any
            // event queued meanwhile: it measures that entry again and nothing else (the pass after it handles the
            // event, listing the host if it changed).
            if std::mem::take(&mut self.publish_now) {
                self.changes.list_all |= !watched;
                requeue_at = self.pass().await.map(|r| Instant::now() + r);
                continue;
            }
            let wake_at = requeue_at.map_or(resync_at, |at| at.min(resync_at));
            let mut settle = false;
            tokio::select! {
                changes = async { match watcher.as_mut() { Some(w) => w.changed().await, None => std::future::pending().await } } => {
                    if changes.mounts {
                        self.mounts_changed();
                    }
                    self.changes.merge(changes);
                }
                _ = self.s.changed.notified() => settle = true,
                Some(done) = self.done_rx.recv() => self.finish_wipe(done).await,
                _ = tokio::time::sleep_until(wake_at.into()) => {}
                _ = config_tick.tick() => {
                    if !self.reload_config().await { continue; }
                    watcher = self.mount_watcher();
                    watched = watcher.as_ref().is_some_and(MountWatcher::watches_every_dir);
                    self.changes.list_all = true;
                }
                _ = shutdown.changed() => break,
            }
            // NB: without a watcher on every directory nothing says when the host changed: list it every pass.
            self.changes.list_all |= !watched;
            if settle {
                tokio::time::sleep(SETTLE).await;
            }
            if Instant::now() >= resync_at {
                resync_at = Instant::now() + self.s.config.min_resync_period;
                // NB: what no mount event shows (free space, an id changed by hand) is measured again here.
                self.probed.clear();
                self.compare_whole = true;
                self.changes.list_all = true;
            }
            requeue_at = self.pass().await.map(|r| Instant::now() + r);
        }
        self.stop_wipes().await;
        self.book.close();
        self.leave_snapshot();
    }

    fn class_facts(&self) -> Vec<ClassFacts> {
        let facts: Vec<ClassFacts> = self
            .s
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
            .collect();
        self.s
            .classes_polled
            .set_missing(facts.iter().any(|f| f.storage_class.is_none()));
        facts
    }

    /// Looks at the host (what changed, or every entry) and, when due, at every disk's health; the operator's
    /// clears and cordons from the LocalDisks. `None` when the discovery task failed: the next pass lists every
    /// entry.
    async fn discover(&mut self) -> Option<Discovery> {
        let classes = self.s.config.discovery_classes();
        let host = self.host.clone();
        let mut probed = std::mem::take(&mut self.probed);
        let mut changes = std::mem::take(&mut self.changes);
        changes.list_all |= cadence::lists_host(&classes, self.raw_devices);
        let mut health = std::mem::take(&mut self.health);
        let now = Instant::now();
        let judged = (self.s.config.health, self.s.config.health_check_period);
        let marks = super::health::operator_marks(&self.s.disks.shared());
        let clears = marks.clears;
        let discovered = tokio::task::spawn_blocking(move || {
            let mut found = discover_changed(host.as_ref(), &classes, &mut probed, &changes);
            if health.must_look(now, &found) {
                health.observe(host.as_ref(), &classes, &found, judged, &clears);
            }
            health.annotate(&mut found);
            (found, probed, health)
        })
        .await;
        match discovered {
            Ok((mut found, probed, health)) => {
                self.probed = probed;
                self.health = health;
                self.raw_devices = cadence::found_raw(&found);
                found.cordoned = marks.cordoned;
                Some(found)
            }
            Err(error) => {
                warn!(%error, "discovery task failed");
                self.changes.list_all = true;
                None
            }
        }
    }

    /// One discovery + planning pass. Returns when to plan again without an event, if the plan asks.
    async fn pass(&mut self) -> Option<Duration> {
        let started = Instant::now();
        let Some(found) = self.discover().await else {
            return Some(FIRST_BACKOFF);
        };
        let discovered_in = started.elapsed();
        let Some(node) = self.node_facts() else {
            warn!(node = %self.s.node, "Node object not found; waiting");
            return Some(FIRST_BACKOFF);
        };
        self.s.pvs.set_node(&node);
        self.look_for_disk_marks();
        let classes = self.class_facts();
        let view = self.s.pvs.view();
        let existing = self.existing(&view.pvs);
        // The whole index (every PV that can reach this node) stands in for the list of every PV once it is complete;
        // a narrow one only once the admission policy is checked, which only a plan that would write asks for.
        let index = view.pvs.pvs;
        let cluster = cadence::stands_in(view.complete, view.narrow).then(|| index.clone());
        if self.book.missing() && !self.settle_missing_ledger(&node, &found, &existing).await {
            return Some(FIRST_BACKOFF);
        }
        let facts = Facts {
            node: &node,
            classes: &classes,
            found: &found,
            existing: &existing,
        };
        let plan = self.plan(&facts, cluster.as_deref().map(Vec::as_slice));
        let mut progress = RunSoFar::default();
        let fill = cadence::fill(
            plan.needs_cluster_list,
            cluster.is_some(),
            view.complete,
            view.narrow,
            view.overdue,
        );
        let (plan, cluster) = self
            .fill(&facts, (plan, cluster), &index, fill, &mut progress)
            .await;
        // Otherwise an incomplete index completes with a watch event, which wakes the loop.
        let complete = cluster.is_some();
        drop(cluster);
        let planned_in = started.elapsed();
        for run in cadence::runs(plan.actions) {
            if !progress.runs(&run) {
                continue;
            }
            let step = match run {
                Run::Batch(batch) => self.publish_batch(batch).await,
                Run::One(action) => self.execute(action).await,
            };
            progress.record(step);
        }
        let work = self.planner.work();
        debug!(
            disks = found.disks.len(),
            probed = self.probed.last_measured,
            classified = self.probed.last_classified,
            planned_pvs = work.pvs,
            planned_disks = work.disks,
            planned_whole = work.whole,
            pvs = existing.len(),
            complete,
            discover_ms = discovered_in.as_secs_f64() * 1e3,
            plan_ms = (planned_in - discovered_in).as_secs_f64() * 1e3,
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            "pass"
        );
        self.s
            .metrics
            .discovery_probed
            .observe(self.probed.last_measured as f64);
        self.memory = plan.memory;
        self.health.told(&self.memory);
        // NB: a volume id stored this pass publishes its disk in the next one, at once; the inventory waits for it.
        let tagged = std::mem::take(&mut self.tagged);
        let tagged_before = std::mem::replace(&mut self.tagged_last, tagged);
        let tagging = cadence::tagging(tagged, tagged_before);
        if tagging.unconfirmed {
            warn!(
                "a volume id stored by the last pass did not read back; the disk is not published, trying again"
            );
        }
        let again = tagging.again;
        self.publish_now = again;
        let mut ended = cadence::Ended {
            retry: progress.retry,
            tagging: Some(tagging),
            held_back: plan.needs_cluster_list && !complete,
        };
        self.published_all |= cadence::untaint_allowed(ended)
            && plan::taint::all_published(&found, &existing, &plan.unpublished);
        let untaint_again = self.published_all && self.remove_startup_taint().await;
        if view.complete && !view.narrow {
            self.maybe_narrow(&index).await;
        }
        drop(index);
        let inventory_after = if again {
            None
        } else {
            self.sync_inventory(&found, &plan.unpublished, &existing, &mut ended.retry)
                .await
        };
        for u in self.notices.changed(&found.unusable) {
            let (path, reason) = (u.host_path.display(), u.reason.as_str());
            warn!(class = %u.class, %path, reason, note = %u.message, "entry not usable");
        }
        self.publish_state(found, plan.unpublished, &existing);
        self.s.metrics.discovery_passes.inc();
        self.s
            .metrics
            .discovery_seconds
            .observe(started.elapsed().as_secs_f64());
        let now = Instant::now();
        let backoff = cadence::nearest_backoff(self.backoff.values().map(|b| b.not_before), now);
        self.s.metrics.set_health(&self.health.counts());
        self.s.metrics.disk.publish(self.health.samples());
        let wakes = cadence::Wakes {
            plan: plan.requeue_after,
            health: Some(self.health.wait(now)),
            inventory: inventory_after,
            backoff,
            progress: (!self.running.is_empty()).then_some(PROGRESS_EVERY),
            scope: self.admission.as_ref().and_then(|g| g.wait(now)),
            untaint_again,
        };
        cadence::next_pass(ended, wakes)
    }

    /// The planner's `existing`: this node's labelled PVs and the reference provisioner's, from the index at one
    /// generation (`plan::existing`).
    fn existing(&mut self, index: &PvSnapshot) -> Arc<Vec<Arc<PersistentVolume>>> {
        let (generation, pvs) = (index.generation, &index.pvs);
        plan::existing::existing(&mut self.existing, generation, pvs, &self.s.node)
    }

    fn plan(&mut self, facts: &Facts<'_>, cluster: Option<&[Arc<PersistentVolume>]>) -> plan::Plan {
        // NB: the periodic resync plans without naming changes, so the planner compares its copies whole once per
        // period whatever happened before.
        let told = !std::mem::take(&mut self.compare_whole);
        let plan = self.planner.plan(&Inputs {
            node: facts.node,
            config: &self.s.config,
            classes: facts.classes,
            found: facts.found,
            existing: facts.existing,
            ledger: self.book.ledger(),
            owners: self.book.owners(),
            cluster,
            memory: &self.memory,
            now: SystemTime::now(),
            changes: told.then_some(self.book.changes()),
        });
        self.book.planned();
        plan
    }
}

/// What one pass gathered for the planner, besides the shell's own state.
struct Facts<'a> {
    node: &'a NodeFacts,
    classes: &'a [ClassFacts],
    found: &'a Discovery,
    existing: &'a [Arc<PersistentVolume>],
}
