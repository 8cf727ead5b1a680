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
    /// Kept beside the store; NB: taken before the store's lock wherever both are held.
    book: Mutex<Book>,
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
struct Book {
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
            book: Mutex::new(Book::default()),
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

    fn book(&self) -> MutexGuard<'_, Book> {
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
    ) -> Reader<impl Fn(Text<PersistentVolume>) -> Kept, impl Fn(Seen)> {
        let filter = node.clone();
        Reader {
            convert: move |text| keep(&filter, &text),
            observe: move |seen| self.saw(&node, narrow, seen),
        }
    }
}

/// What the index keeps of one PV (see [`keep`]).
type Kept = Result<Option<PersistentVolume>, serde_json::Error>;

/// The PV in full when it can reach `node`; `None` when it cannot. Most PVs of a large cluster are other nodes':
/// a glance at what [`reaches`] reads says so without decoding the rest (a tenth of the time at 10,000 PVs).
fn keep(node: &NodeFacts, text: &Text<PersistentVolume>) -> Kept {
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
mod tests {
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};

    use super::*;
    use crate::plan::pv::HOSTNAME_LABEL;
    use crate::watch::checks::text;

    fn node() -> NodeFacts {
        NodeFacts {
            name: "n1".into(),
            hostname_label: Some("n1".into()),
            uid: "u".into(),
            labels: [("zone".to_string(), "a".to_string())].into(),
        }
    }

    fn pv_json(name: &str, labels: Value, spec: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
            "spec": spec,
        })
    }

    fn pv(name: &str, labels: Value) -> Text<PersistentVolume> {
        text(pv_json(name, labels, json!({})))
    }

    fn affinity(key: &str, value: &str) -> Value {
        json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": key, "operator": "In", "values": [value]}]}]}})
    }

    fn kept(name: &str, labels: Value, spec: Value) -> bool {
        let pv = serde_json::from_value(pv_json(name, labels, spec)).expect("a valid PV");
        reaches(&node(), &pv)
    }

    /// An index whose watch has listed (nothing) for `node()`.
    fn synced() -> Arc<PvIndex> {
        let index = PvIndex::new();
        index.set_node(&node());
        index.set_narrow(false);
        index.apply(&node(), Event::Init);
        index.apply(&node(), Event::InitDone);
        index
    }

    #[test]
    fn pvs_that_can_reach_this_node_are_kept() {
        let local = json!({"local": {"path": "/mnt/d/1"}});
        assert!(kept("labelled", json!({NODE_LABEL: "n1"}), json!({})));
        assert!(kept("no-affinity", json!({}), local.clone()));
        let mut here = local.clone();
        here["nodeAffinity"] = affinity(HOSTNAME_LABEL, "n1");
        assert!(kept("hostname", json!({}), here));
        let mut zone = json!({"hostPath": {"path": "/mnt/d"}});
        zone["nodeAffinity"] = affinity("zone", "a");
        assert!(kept("zone", json!({}), zone));
    }

    #[test]
    fn a_glance_keeps_exactly_the_pvs_a_full_decode_keeps() {
        let local = json!({"local": {"path": "/mnt/d/1"}});
        let with = |mut spec: Value, key: &str, value: &str| {
            spec["nodeAffinity"] = affinity(key, value);
            spec
        };
        let by_fields = json!({"local": {"path": "/mnt/d/1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]}}});
        let not_in = json!({"local": {"path": "/mnt/d/1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]}}});
        let reference = |node: &str| json!({ANN_PROVISIONED_BY: format!("local-volume-provisioner-{node}-abc")});
        let cases = [
            pv_json("labelled", json!({NODE_LABEL: "n1"}), json!({})),
            pv_json(
                "labelled-elsewhere",
                json!({NODE_LABEL: "n2"}),
                with(local.clone(), HOSTNAME_LABEL, "n2"),
            ),
            pv_json("local-no-affinity", json!({}), local.clone()),
            pv_json(
                "local-here",
                json!({}),
                with(local.clone(), HOSTNAME_LABEL, "n1"),
            ),
            pv_json(
                "local-elsewhere",
                json!({}),
                with(local.clone(), HOSTNAME_LABEL, "n2"),
            ),
            pv_json(
                "hostpath-zone",
                json!({}),
                with(json!({"hostPath": {"path": "/d"}}), "zone", "a"),
            ),
            pv_json(
                "hostpath-other-zone",
                json!({}),
                with(json!({"hostPath": {"path": "/d"}}), "zone", "b"),
            ),
            pv_json("by-fields", json!({}), by_fields),
            pv_json("not-in", json!({}), not_in),
            pv_json(
                "nfs",
                json!({}),
                json!({"nfs": {"server": "s", "path": "/x"}}),
            ),
            pv_json("null-labels", Value::Null, local.clone()),
            json!({"metadata": {"name": "no-spec", "labels": {NODE_LABEL: "n1"}}}),
            json!({"metadata": {"name": "null-spec"}, "spec": null}),
            json!({"metadata": {"name": "ref-here", "annotations": reference("n1")},
                   "spec": with(local.clone(), HOSTNAME_LABEL, "n7")}),
            json!({"metadata": {"name": "ref-elsewhere", "annotations": reference("n2")},
                   "spec": with(local.clone(), HOSTNAME_LABEL, "n2")}),
            // Malformed where the glance reads, and where it does not: kept or dropped as the full decode says.
            pv_json("bad-label", json!({NODE_LABEL: 5}), local.clone()),
            pv_json(
                "bad-affinity",
                json!({}),
                json!({"local": {"path": "/d"}, "nodeAffinity": "n1"}),
            ),
            pv_json(
                "bad-here",
                json!({NODE_LABEL: "n1"}),
                json!({"capacity": "not a map"}),
            ),
            pv_json(
                "bad-elsewhere",
                json!({NODE_LABEL: "n2"}),
                json!({"capacity": "not a map"}),
            ),
        ];
        for case in cases {
            let full = serde_json::from_value::<PersistentVolume>(case.clone())
                .ok()
                .filter(|pv| reaches(&node(), pv));
            let kept = keep(&node(), &text(case.clone())).ok().flatten();
            assert_eq!(kept, full, "{case}");
        }
    }

    #[test]
    fn pvs_that_cannot_reach_this_node_are_dropped() {
        let mut elsewhere = json!({"local": {"path": "/mnt/d/1"}});
        elsewhere["nodeAffinity"] = affinity(HOSTNAME_LABEL, "n2");
        assert!(!kept("other-node", json!({NODE_LABEL: "n2"}), elsewhere));
        let nfs = json!({"nfs": {"server": "s", "path": "/x"}});
        assert!(!kept("nfs", json!({}), nfs));
    }

    #[test]
    fn the_index_is_complete_only_once_synced_with_every_own_create_shown() {
        let index = PvIndex::new();
        index.set_node(&node());
        index.set_narrow(false);
        assert!(!index.view().complete);
        index.apply(&node(), Event::Init);
        index.apply(&node(), Event::InitDone);
        assert!(index.view().complete);
        index.created("mine", "uid-mine");
        assert!(!index.view().complete, "an own create not yet shown");
        let mine = pv("mine", json!({NODE_LABEL: "n1"}));
        assert!(index.apply(&node(), Event::Apply(mine)));
        assert!(index.view().complete);
        let mut relabelled = node();
        relabelled.labels.insert("zone".into(), "b".into());
        index.set_node(&relabelled);
        assert!(!index.view().complete, "filtered with stale labels");
    }

    #[test]
    fn a_kept_pv_is_kept_without_its_managed_fields() {
        let index = synced();
        let mut mine = pv_json("mine", json!({NODE_LABEL: "n1"}), json!({}));
        mine["metadata"]["managedFields"] = json!([{"manager": "kube-controller-manager", "operation": "Update",
            "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]);
        assert!(index.apply(&node(), Event::Apply(text(mine))));
        let view = index.view();
        let kept: Vec<_> = view.pvs.pvs.iter().map(|pv| &pv.metadata).collect();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].name.as_deref(), Some("mine"));
        assert_eq!(kept[0].managed_fields, None);
    }

    #[test]
    fn a_pv_that_stops_reaching_this_node_leaves_the_index() {
        let index = PvIndex::new();
        index.set_node(&node());
        index.set_narrow(false);
        let labelled = pv("p", json!({NODE_LABEL: "n1"}));
        assert!(index.apply(&node(), Event::Apply(labelled)));
        let moved = pv("p", json!({NODE_LABEL: "n2"}));
        assert!(index.apply(&node(), Event::Apply(moved)));
        assert!(index.view().pvs.pvs.is_empty());
    }

    #[test]
    fn an_own_create_shown_then_deleted_before_the_response_is_not_awaited() {
        let index = synced();
        let mine = pv("mine", json!({NODE_LABEL: "n1"}));
        index.apply(&node(), Event::Apply(mine));
        index.created("mine", "uid-mine");
        assert!(index.view().complete, "shown before the create response");
        index.created("gone", "uid-gone");
        let gone = pv("gone", json!({NODE_LABEL: "n1"}));
        index.apply(&node(), Event::Delete(gone));
        assert!(index.view().complete, "a delete shows the PV too");
    }

    #[test]
    fn a_relist_shows_own_creates_only_when_it_completes() {
        let index = synced();
        index.created("mine", "uid-mine");
        index.apply(&node(), Event::Init);
        let mine = pv("mine", json!({NODE_LABEL: "n1"}));
        index.apply(&node(), Event::InitApply(mine));
        assert!(!index.view().complete, "listed but not yet in the store");
        index.apply(&node(), Event::InitDone);
        let view = index.view();
        assert!(view.complete && view.pvs.pvs.len() == 1);
    }

    #[test]
    fn a_view_with_no_pv_changed_shares_the_last_one_and_a_change_makes_a_new_one() {
        let index = synced();
        index.apply(&node(), Event::Apply(pv("a", json!({NODE_LABEL: "n1"}))));
        let first = index.view().pvs;
        let second = index.view().pvs;
        assert!(
            Arc::ptr_eq(&first.pvs, &second.pvs),
            "nothing changed: the same list"
        );
        index.apply(&node(), Event::Apply(pv("b", json!({NODE_LABEL: "n1"}))));
        let third = index.view().pvs;
        assert!(third.generation > first.generation);
        assert_eq!(third.pvs.len(), 2);
        index.apply(&node(), Event::Delete(pv("a", json!({NODE_LABEL: "n1"}))));
        assert_eq!(index.view().pvs.pvs.len(), 1, "a delete shows too");
    }

    #[test]
    fn an_own_create_is_not_taken_as_shown_by_an_older_pv_of_that_name() {
        let index = synced();
        // The store still holds an earlier PV of the name (UID uid-mine); the new one is another object.
        index.apply(&node(), Event::Apply(pv("mine", json!({NODE_LABEL: "n1"}))));
        index.created("mine", "uid-recreated");
        assert!(!index.view().complete, "the new UID is not shown yet");
    }
}
