//! One cluster-wide PV watch, kept as a small index of the PVs that can reach this node.
//!
//! ```text
//!  watch every PV ──> decode labels, path, node affinity ──> reaches this node? ──yes──> index (full PV)
//!                                                                          └──no───> dropped at once
//!  agent pass ──> view(): the index, and whether it may stand in for a fresh list of every PV
//! ```
//!
//! The planner must see every PV that could expose one of our disks before it wipes or publishes (issue 14), and
//! a PV without our label can do that. A list of every PV before each such write costs a round trip and a decode
//! of the whole cluster per new disk; this watch sees every PV once, as it changes, and keeps only those that
//! carry this node's label or expose a local or hostPath path through a node affinity that admits this node (or
//! none): the only PVs the planner reads. Memory follows the PVs of this node, not the size of the cluster.
//!
//! The index stands in for the fresh list (`view().complete`) only when the watch has synced, was filtered with
//! the Node's current labels (a label change can make other PVs mountable here: the watch lists again), and shows
//! every PV the agent itself created (its own create must not look like a PV that vanished). A PV created by
//! someone else reaches the index a watch event later, as it reached the old list only if created before it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeSpec, VolumeNodeAffinity};
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use crate::contract::NODE_LABEL;
use crate::plan::NodeFacts;
use crate::plan::owners::mountable_here;
use crate::plan::pv::ANN_PROVISIONED_BY;

/// How long a PV the agent created may be missing from the watch before the agent lists every PV instead.
pub const AWAIT_LIMIT: Duration = Duration::from_secs(30);

pub struct PvIndex {
    inner: Mutex<Inner>,
    node: watch::Sender<Option<NodeFacts>>,
}

#[derive(Default)]
struct Inner {
    items: BTreeMap<String, PersistentVolume>,
    relist: Option<BTreeMap<String, PersistentVolume>>,
    synced: bool,
    /// The node facts the current items were filtered with.
    filtered_for: Option<NodeFacts>,
    /// UIDs of PVs the agent created that the watch has not shown yet, with when they were created.
    awaited: HashMap<String, Instant>,
    /// PVs looked at since start (kept or not), for the log.
    seen: u64,
}

/// What one pass reads from the index.
pub struct View {
    pub pvs: Vec<PersistentVolume>,
    /// The index may stand in for a fresh list of every PV (see the module doc).
    pub complete: bool,
    /// A PV the agent created has been missing for longer than [`AWAIT_LIMIT`]: list every PV instead.
    pub overdue: bool,
}

impl PvIndex {
    pub fn new() -> Arc<Self> {
        Arc::new(PvIndex {
            inner: Mutex::new(Inner::default()),
            node: watch::Sender::new(None),
        })
    }

    pub fn synced(&self) -> bool {
        self.lock().synced
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

    pub fn view(&self) -> View {
        let s = self.lock();
        let node = self.node.borrow();
        // NB: `apply` removes an awaited UID as soon as the watch shows it, so what is left is still missing.
        View {
            pvs: s.items.values().cloned().collect(),
            complete: s.synced && s.filtered_for == *node && s.awaited.is_empty(),
            overdue: s.awaited.values().any(|at| at.elapsed() > AWAIT_LIMIT),
        }
    }

    /// The agent created a PV with this UID: the index is not complete until the watch shows it.
    pub fn created(&self, uid: &str) {
        let mut s = self.lock();
        // NB: the watch event can arrive before the create response is handled.
        if !s.items.values().any(|pv| pv.uid().as_deref() == Some(uid)) {
            s.awaited.insert(uid.to_string(), Instant::now());
        }
    }

    /// A fresh list of every PV was taken: nothing the agent created is awaited any more.
    pub fn listed(&self) {
        self.lock().awaited.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // NB: each update is one insert, remove or swap: a panic cannot leave the map half-updated.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event filtered for `node`; true when what the planner reads changed.
    fn apply(&self, node: &NodeFacts, event: Event<DynamicObject>) -> bool {
        let mut s = self.lock();
        match event {
            Event::Init => {
                s.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(obj) => {
                s.seen += 1;
                if let Some((name, pv)) = keep(node, &obj) {
                    s.relist.get_or_insert_with(BTreeMap::new).insert(name, pv);
                }
                false
            }
            Event::InitDone => {
                s.items = s.relist.take().unwrap_or_default();
                s.synced = true;
                s.filtered_for = Some(node.clone());
                let shown: Vec<String> = s.items.values().filter_map(|pv| pv.uid()).collect();
                s.awaited.retain(|uid, _| !shown.contains(uid));
                info!(seen = s.seen, kept = s.items.len(), "PV index synced");
                true
            }
            Event::Apply(obj) => {
                s.seen += 1;
                if let Some(uid) = obj.metadata.uid.as_deref() {
                    s.awaited.remove(uid);
                }
                match keep(node, &obj) {
                    Some((name, pv)) => {
                        s.items.insert(name, pv);
                        true
                    }
                    None => obj
                        .metadata
                        .name
                        .as_ref()
                        .is_some_and(|n| s.items.remove(n).is_some()),
                }
            }
            Event::Delete(obj) => {
                if let Some(uid) = obj.metadata.uid.as_deref() {
                    s.awaited.remove(uid);
                }
                obj.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| s.items.remove(n).is_some())
            }
        }
    }
}

/// The PV, decoded, when it can reach this node: labelled for it, or a local or hostPath volume whose node
/// affinity admits it. Everything else is only looked at, never decoded whole nor kept.
fn keep(node: &NodeFacts, obj: &DynamicObject) -> Option<(String, PersistentVolume)> {
    let name = obj.metadata.name.clone()?;
    let labelled = obj.labels().get(NODE_LABEL) == Some(&node.name);
    let spec = obj.data.get("spec");
    let has_path = spec.is_some_and(|s| {
        ["local", "hostPath"]
            .iter()
            .any(|k| s.get(k).is_some_and(|v| !v.is_null()))
    });
    // A reference-provisioner PV of this node is kept whatever its affinity says: it may be adopted.
    let reference = obj
        .annotations()
        .get(ANN_PROVISIONED_BY)
        .is_some_and(|by| by.contains(node.name.as_str()));
    let reaches = has_path && admits(node, spec.and_then(|s| s.get("nodeAffinity")));
    if !(labelled || reference || reaches) {
        return None;
    }
    let value = match serde_json::to_value(obj) {
        Ok(v) => v,
        Err(error) => {
            warn!(%name, %error, "skipping PV that cannot be re-encoded");
            return None;
        }
    };
    match serde_json::from_value(value) {
        Ok(pv) => Some((name, pv)),
        Err(error) => {
            // NB: a PV that may reach our disks but cannot be read: the planner cannot see it, so say so loudly.
            warn!(%name, %error, "skipping malformed PV");
            None
        }
    }
}

/// Whether a node affinity (as JSON) admits this node, as the planner decides it (`mountable_here`). An
/// affinity that cannot be read counts as admitting: keeping a PV costs memory, dropping one could hide it.
fn admits(node: &NodeFacts, affinity: Option<&Value>) -> bool {
    let affinity: Option<VolumeNodeAffinity> = match affinity {
        None | Some(Value::Null) => None,
        Some(v) => match serde_json::from_value(v.clone()) {
            Ok(a) => Some(a),
            Err(_) => return true,
        },
    };
    let probe = PersistentVolume {
        spec: Some(PersistentVolumeSpec {
            node_affinity: affinity,
            ..Default::default()
        }),
        ..Default::default()
    };
    mountable_here(&probe, node)
}

/// Watches every PV into `index` until `shutdown` flips, notifying `changed` when the index changes. Waits for
/// the node facts first, and lists again whenever they change.
pub async fn run(
    client: Client,
    index: Arc<PvIndex>,
    changed: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<DynamicObject> = Api::all_with(
        client,
        &kube::api::ApiResource::erase::<PersistentVolume>(&()),
    );
    let mut node_rx = index.node.subscribe();
    loop {
        let node = loop {
            if let Some(node) = node_rx.borrow_and_update().clone() {
                break node;
            }
            tokio::select! {
                r = node_rx.changed() => if r.is_err() { return },
                _ = shutdown.changed() => return,
            }
        };
        {
            let mut s = index.lock();
            s.synced = false;
            s.relist = None;
        }
        let config = super::watched();
        let mut events = watcher::watcher(api.clone(), config)
            .default_backoff()
            .boxed();
        loop {
            let next = tokio::select! {
                next = events.next() => next,
                r = node_rx.changed() => {
                    if r.is_err() { return }
                    info!("node labels changed; listing every PV again");
                    break;
                }
                _ = shutdown.changed() => return,
            };
            match next {
                Some(Ok(event)) => {
                    if index.apply(&node, event) {
                        changed.notify_one();
                    }
                }
                Some(Err(error)) => {
                    warn!(kind = "PersistentVolume", error = %crate::logging::error_text(&error), "watch failed; retrying with backoff")
                }
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::pv::HOSTNAME_LABEL;

    fn node() -> NodeFacts {
        NodeFacts {
            name: "n1".into(),
            hostname_label: Some("n1".into()),
            uid: "u".into(),
            labels: [("zone".to_string(), "a".to_string())].into(),
        }
    }

    fn pv(name: &str, labels: Value, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
            "spec": spec,
        }))
        .expect("a valid object")
    }

    fn affinity(key: &str, value: &str) -> Value {
        json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": key, "operator": "In", "values": [value]}]}]}})
    }

    fn kept(obj: DynamicObject) -> bool {
        keep(&node(), &obj).is_some()
    }

    #[test]
    fn pvs_that_can_reach_this_node_are_kept() {
        let local = json!({"local": {"path": "/mnt/d/1"}});
        assert!(kept(pv("labelled", json!({NODE_LABEL: "n1"}), json!({}))));
        assert!(kept(pv("no-affinity", json!({}), local.clone())));
        let mut here = local.clone();
        here["nodeAffinity"] = affinity(HOSTNAME_LABEL, "n1");
        assert!(kept(pv("hostname", json!({}), here)));
        let mut zone = json!({"hostPath": {"path": "/mnt/d"}});
        zone["nodeAffinity"] = affinity("zone", "a");
        assert!(kept(pv("zone", json!({}), zone)));
    }

    #[test]
    fn pvs_that_cannot_reach_this_node_are_dropped() {
        let mut elsewhere = json!({"local": {"path": "/mnt/d/1"}});
        elsewhere["nodeAffinity"] = affinity(HOSTNAME_LABEL, "n2");
        assert!(!kept(pv(
            "other-node",
            json!({NODE_LABEL: "n2"}),
            elsewhere
        )));
        let nfs = json!({"nfs": {"server": "s", "path": "/x"}});
        assert!(!kept(pv("nfs", json!({}), nfs)));
    }

    #[test]
    fn the_index_is_complete_only_once_synced_with_every_own_create_shown() {
        let index = PvIndex::new();
        index.set_node(&node());
        assert!(!index.view().complete);
        index.apply(&node(), Event::Init);
        index.apply(&node(), Event::InitDone);
        assert!(index.view().complete);
        index.created("uid-mine");
        assert!(!index.view().complete, "an own create not yet shown");
        let mine = pv("mine", json!({NODE_LABEL: "n1"}), json!({}));
        assert!(index.apply(&node(), Event::Apply(mine)));
        assert!(index.view().complete);
        let mut relabelled = node();
        relabelled.labels.insert("zone".into(), "b".into());
        index.set_node(&relabelled);
        assert!(!index.view().complete, "filtered with stale labels");
    }
}
