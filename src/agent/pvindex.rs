//! One cluster-wide PV watch, kept as a small index of the PVs that can reach this node.
//!
//! ```text
//!  crate::watch (every PV, guarded) ──> reaches this node? ──yes──> Store<PersistentVolume>
//!        │                                  └──no──> passed over (one kept before is dropped)
//!        └──observe: UIDs shown, list done ──> own creates still awaited, the node facts filtered for
//!  agent pass ──> view(): the index, and whether it may stand in for a fresh list of every PV
//! ```
//!
//! The planner must see every PV that could expose one of our disks before it wipes or publishes (issue 14), and
//! a PV without our label can do that. A list of every PV before each such write costs a round trip and a decode
//! of the whole cluster per new disk; this watch sees every PV once, as it changes, and keeps only those that
//! carry this node's label or expose a local or hostPath path through a node affinity that admits this node (or
//! none): the only PVs the planner reads. Memory follows the PVs of this node, not the size of the cluster.
//!
//! The watch is the program's one guarded watch (`crate::watch`), taking PVs as their text: a glance at the few
//! fields that say whether a PV can reach this node passes over the others without decoding them (most of a
//! large cluster's), and a PV that can reach it but cannot be read is logged and skipped. The filter depends on
//! the Node's labels, so the watch starts over (lists again) when they change.
//!
//! The index stands in for the fresh list (`view().complete`) only when the watch has synced, was filtered with
//! the Node's current labels (a label change can make other PVs mountable here: the watch lists again), and shows
//! every PV the agent itself created (its own create must not look like a PV that vanished). A PV created by
//! someone else reaches the index a watch event later, as it reached the old list only if created before it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, LocalVolumeSource, PersistentVolume, PersistentVolumeSpec,
    VolumeNodeAffinity,
};
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde::Deserialize;
use tokio::sync::watch;
use tracing::info;

use crate::contract::NODE_LABEL;
use crate::plan::NodeFacts;
use crate::plan::owners::{mountable_here, raw_path};
use crate::plan::pv::ANN_PROVISIONED_BY;
use crate::watch::{Reader, Seen, Store, Text, Watcher};

/// How long a PV the agent created may be missing from the watch before the agent lists every PV instead.
pub const AWAIT_LIMIT: Duration = Duration::from_secs(30);

pub struct PvIndex {
    pvs: Arc<Store<PersistentVolume>>,
    /// KeptPv beside the store; NB: taken before the store's lock wherever both are held.
    book: Mutex<PvBook>,
    node: watch::Sender<Option<NodeFacts>>,
    /// The watch's scope, set by the agent before the first list: only this node's labelled PVs (`true`, while the
    /// chart's admission policy is in force: `plan::narrow`) or every PV.
    narrow: watch::Sender<Option<bool>>,
    /// The last [`View::pvs`] with the store's generation it shows: a pass with no PV changed since shares it
    /// instead of copying thousands of pointers. NB: taken after the book's lock, before the store's.
    last: Mutex<Option<PvSnapshot>>,
}

/// Every PV in the index at one generation of the store.
#[derive(Clone)]
pub struct PvSnapshot {
    pub generation: u64,
    pub pvs: Arc<Vec<Arc<PersistentVolume>>>,
}

#[derive(Default)]
struct PvBook {
    /// The node facts the stored PVs were filtered with, and whether they were listed narrow.
    filtered_for: Option<(NodeFacts, bool)>,
    /// UIDs of PVs the agent created that the watch has not shown yet, with when they were created.
    awaited: HashMap<String, Instant>,
    /// PVs looked at since start (kept or not), for the log.
    seen: u64,
}

/// What one pass reads from the index.
pub struct View {
    /// Shared with the store: a pass copies pointers, not PVs (and none when nothing changed since the last view).
    pub pvs: PvSnapshot,
    /// The index shows every PV its watch selects, filtered for the current node facts (see the module doc); it
    /// stands in for a fresh list of every PV when it is not `narrow`.
    pub complete: bool,
    /// The watch selects only this node's labelled PVs: it stands in for the list of every PV only while the
    /// admission policy it narrowed on is in force, which the agent checks first (`plan::narrow`).
    pub narrow: bool,
    /// A PV the agent created has been missing for longer than [`AWAIT_LIMIT`]: list every PV instead.
    pub overdue: bool,
}

impl PvIndex {
    pub fn new() -> Arc<Self> {
        Arc::new(PvIndex {
            pvs: Store::new(),
            book: Mutex::new(PvBook::default()),
            node: watch::Sender::new(None),
            narrow: watch::Sender::new(None),
            last: Mutex::new(None),
        })
    }

    pub fn synced(&self) -> bool {
        self.pvs.synced()
    }

    /// The filter follows `node`; a change of its labels or UID makes the watch list again.
    pub fn set_node(&self, node: &NodeFacts) {
        self.node.send_if_modified(|old| {
            let same = old.as_ref() == Some(node);
            if !same {
                *old = Some(node.clone());
            }
            !same
        });
    }

    /// Sets the watch's scope (see [`PvIndex::narrow`]); a change lists again.
    pub fn set_narrow(&self, narrow: bool) {
        self.narrow.send_if_modified(|old| {
            let same = *old == Some(narrow);
            *old = Some(narrow);
            !same
        });
    }

    pub fn view(&self) -> View {
        let b = self.book();
        let node = self.node.borrow();
        let narrow = *self.narrow.borrow();
        let listed_for = node.clone().zip(narrow);
        // NB: `saw` removes an awaited UID as soon as the watch shows it, so what is left is still missing.
        View {
            complete: self.pvs.synced() && b.filtered_for == listed_for && b.awaited.is_empty(),
            narrow: narrow == Some(true),
            pvs: self.snapshot(),
            overdue: b.awaited.values().any(|at| at.elapsed() > AWAIT_LIMIT),
        }
    }

    fn snapshot(&self) -> PvSnapshot {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let generation = self.pvs.generation();
        match &*last {
            // NB: equal generations, equal contents (`Store::generation`).
            Some(s) if s.generation == generation => s.clone(),
            _ => {
                let (generation, pvs) = self.pvs.shared_at();
                let s = PvSnapshot {
                    generation,
                    pvs: Arc::new(pvs),
                };
                *last = Some(s.clone());
                s
            }
        }
    }

    /// The agent created a PV with this name and UID: the index is not complete until the watch shows it.
    pub fn created(&self, name: &str, uid: &str) {
        let mut b = self.book();
        // NB: the watch event can arrive before the create response is handled. Looked up by name (the store's
        // key), not by a walk of every PV.
        let shown = self
            .pvs
            .get_shared(name)
            .is_some_and(|pv| pv.metadata.uid.as_deref() == Some(uid));
        if !shown {
            b.awaited.insert(uid.to_string(), Instant::now());
        }
    }

    /// A fresh list of every PV was taken: nothing the agent created is awaited any more.
    pub fn listed(&self) {
        self.book().awaited.clear();
    }

    fn book(&self) -> MutexGuard<'_, PvBook> {
        // NB: each update is one insert, remove or assignment: a panic cannot leave the book half-updated.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watch, filtered for `node` (narrow or not), showed something (the store has applied it already).
    fn saw(&self, node: &NodeFacts, narrow: bool, seen: Seen) {
        let mut b = self.book();
        match seen {
            Seen::Relisted { .. } => b.seen += 1,
            Seen::Changed { uid } => {
                b.seen += 1;
                if let Some(uid) = uid {
                    b.awaited.remove(&uid);
                }
            }
            Seen::Listed => {
                b.filtered_for = Some((node.clone(), narrow));
                let shown: Vec<String> = self
                    .pvs
                    .read(|items| items.values().filter_map(|pv| pv.uid()).collect());
                b.awaited.retain(|uid, _| !shown.contains(uid));
                info!(
                    seen = b.seen,
                    kept = self.pvs.len(),
                    narrow,
                    "PV index synced"
                );
            }
        }
    }

    /// How the watch reads PVs for `node`: it keeps those that can reach it and tells the index what it saw.
    fn reader(
        &self,
        node: NodeFacts,
        narrow: bool,
    ) -> Reader<impl Fn(Text<PersistentVolume>) -> KeptPv, impl Fn(Seen)> {
        let filter = node.clone();
        Reader {
            convert: move |text| keep(&filter, &text),
            observe: move |seen| self.saw(&node, narrow, seen),
        }
    }
}

/// What the index keeps of one PV (see [`keep`]).
type KeptPv = Result<Option<PersistentVolume>, serde_json::Error>;

/// The PV in full when it can reach `node`; `None` when it cannot. Most PVs of a large cluster are other nodes':
/// a glance at what [`reaches`] reads says so without decoding the rest (a tenth of the time at 10,000 PVs).
fn keep(node: &NodeFacts, text: &Text<PersistentVolume>) -> KeptPv {
    // NB: a glance that fails to read falls back to the full decode, so no readable PV is ever passed over on it.
    if let Ok(glance) = text.glance::<Glance>()
        && !reaches(node, &glance.outline())
    {
        return Ok(None);
    }
    let pv = text.decode()?;
    Ok(reaches(node, &pv).then_some(crate::watch::without_managed_fields(pv)))
}

/// Exactly the fields of a PV that [`reaches`] reads; serde passes over the rest of the text without building it.
#[derive(Deserialize)]
struct Glance {
    metadata: Option<GlanceMeta>,
    spec: Option<GlanceSpec>,
}

#[derive(Deserialize)]
struct GlanceMeta {
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GlanceSpec {
    local: Option<LocalVolumeSource>,
    host_path: Option<HostPathVolumeSource>,
    node_affinity: Option<VolumeNodeAffinity>,
}

impl Glance {
    /// A PV holding only the glanced fields: `reaches` answers for it as for the whole PV.
    fn outline(self) -> PersistentVolume {
        let (labels, annotations) = self
            .metadata
            .map_or((None, None), |m| (m.labels, m.annotations));
        PersistentVolume {
            metadata: ObjectMeta {
                labels,
                annotations,
                ..ObjectMeta::default()
            },
            spec: self.spec.map(|s| PersistentVolumeSpec {
                local: s.local,
                host_path: s.host_path,
                node_affinity: s.node_affinity,
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        }
    }
}

#[cfg(test)]
impl PvIndex {
    /// Applies one watch event as the index's watch does for `node`: tests drive the index without a watch.
    pub(crate) fn apply(
        &self,
        node: &NodeFacts,
        event: kube::runtime::watcher::Event<Text<PersistentVolume>>,
    ) -> bool {
        crate::watch::apply_wire(
            &self.pvs,
            "PersistentVolume",
            event,
            &self.reader(node.clone(), false),
        )
    }
}

/// Whether the PV can reach this node: labelled for it, a reference-provisioner PV of this node, or a local or
/// hostPath volume whose node affinity admits it.
fn reaches(node: &NodeFacts, pv: &PersistentVolume) -> bool {
    let labelled = pv.labels().get(NODE_LABEL) == Some(&node.name);
    // A reference-provisioner PV of this node is kept whatever its affinity says: it may be adopted.
    let reference = pv
        .annotations()
        .get(ANN_PROVISIONED_BY)
        .is_some_and(|by| by.contains(node.name.as_str()));
    labelled || reference || (raw_path(pv).is_some() && mountable_here(pv, node))
}

/// PVs per page of the index's list. NB: kube-apiserver 1.37 takes ~35 ms for each page of a 10,000-PV list
/// whatever its size (measured: 500 to 2,000 per page), so the default 500 made a restart wait for 20 of them
/// (~0.4 s); 2,000 holds ~4 MB of a page's text at once and lists 10,000 PVs in ~0.25 s.
const PAGE: u32 = 2000;

/// The watch of every PV (`narrow` false) or of this node's labelled PVs: pages of [`PAGE`].
fn scope(node: &str, narrow: bool) -> kube::runtime::watcher::Config {
    let config = if narrow {
        super::own_pvs_like(node)
    } else {
        super::watched()
    };
    config.page_size(PAGE)
}

/// Watches every PV (or this node's, see [`PvIndex::set_narrow`]) into `index` until shutdown, notifying the
/// watcher's `changed` when the index changes. Waits for the node facts and the scope first, and lists again
/// whenever either changes.
pub async fn run(watcher: &Watcher, index: Arc<PvIndex>) {
    let mut node_rx = index.node.subscribe();
    let mut narrow_rx = index.narrow.subscribe();
    let mut shutdown = watcher.shutdown();
    loop {
        let (node, narrow) = loop {
            let node = node_rx.borrow_and_update().clone();
            let narrow = *narrow_rx.borrow_and_update();
            if let Some(both) = node.zip(narrow) {
                break both;
            }
            tokio::select! {
                r = node_rx.changed() => if r.is_err() { return },
                r = narrow_rx.changed() => if r.is_err() { return },
                _ = shutdown.changed() => return,
            }
        };
        index.pvs.restart();
        tracing::debug!(narrow, "PV index: listing");
        let config = scope(&node.name, narrow);
        // NB: the watch returns only at shutdown; a change of the node or scope drops it and starts anew.
        tokio::select! {
            _ = watcher.run_text(config, index.pvs.clone(), index.reader(node, narrow)) => return,
            r = node_rx.changed() => {
                if r.is_err() { return }
                info!("node labels changed; listing the PVs again");
            }
            r = narrow_rx.changed() => {
                if r.is_err() { return }
                let narrow = *narrow_rx.borrow();
                info!(narrow, "PV watch scope changed; listing the PVs again");
            }
        }
    }
}

#[cfg(test)]
mod tests;
