//! Watches that keep the extender's picture of the cluster current.
//!
//! ```text
//!  watcher(PVs) ─┐                         ┌─> Store<Volume>   ─┐
//!  watcher(PVCs) ├─ guarded ──────convert─┼─> Store<Claim>     ├─ dirty ─> rebuild (debounced) ─> Cache::store
//!  watcher(SCs)  │  (bad objects skipped)  ├─> Store<Class>     │           first complete build ─> Cache::set_synced
//!  watcher(Nodes)┘                         └─> Store<Labels>   ─┘
//! ```
//!
//! Objects arrive through the program's one guarded watch (`crate::watch`): a single object our types cannot read
//! is logged and skipped, each store swaps in a relist atomically at `InitDone`, and an update that leaves the
//! model as it was costs no rebuild. A snapshot is built only once every store has completed its first list.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::runtime::watcher;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use super::cache::Cache;
use super::metrics::{KindLabels, Metrics, WatchedKind};
use super::model::{Claim, Class, ModelError, Volume, node_labels};
use super::snapshot::Snapshot;
use crate::selector::Labels;
use crate::watch::{Store, Watcher, models};

/// Quiet time collected before rebuilding, so a burst of changes costs one snapshot.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The extender's four stores of compact models, shared (`Arc`) with the snapshots built from them.
#[derive(Clone)]
pub struct Stores {
    pub volumes: Arc<Store<Volume>>,
    pub claims: Arc<Store<Claim>>,
    pub classes: Arc<Store<Class>>,
    pub nodes: Arc<Store<Labels>>,
    dirty: Arc<Notify>,
}

impl Default for Stores {
    fn default() -> Self {
        Stores {
            volumes: Store::new(),
            claims: Store::new(),
            classes: Store::new(),
            nodes: Store::new(),
            dirty: Arc::new(Notify::new()),
        }
    }
}

fn build(stores: &Stores, metrics: &Metrics) -> Option<Snapshot> {
    let Stores {
        volumes,
        claims,
        classes,
        nodes,
        ..
    } = stores;
    for (kind, n) in [
        (WatchedKind::PersistentVolumes, volumes.len()),
        (WatchedKind::PersistentVolumeClaims, claims.len()),
        (WatchedKind::StorageClasses, classes.len()),
        (WatchedKind::Nodes, nodes.len()),
    ] {
        metrics
            .cached
            .get_or_create(&KindLabels { kind })
            .set(n as i64);
    }
    if !(volumes.synced() && claims.synced() && classes.synced() && nodes.synced()) {
        return None;
    }
    // NB: pointers are copied out under each store's lock and the indexes built after, so the watches never wait
    // for a build.
    let nodes = nodes.read(|items| {
        items
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    });
    Some(Snapshot::new(
        volumes.shared(),
        claims.shared(),
        classes.shared().iter().map(|c| Class::clone(c)),
        nodes,
    ))
}

async fn rebuild(
    stores: Stores,
    cache: Arc<Cache>,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stores.dirty.notified() => {}
            _ = shutdown.changed() => return,
        }
        tokio::time::sleep(DEBOUNCE).await;
        let (stores2, metrics2) = (stores.clone(), metrics.clone());
        let built = tokio::task::spawn_blocking(move || build(&stores2, &metrics2)).await;
        match built {
            Ok(Some(snapshot)) => {
                cache.store(snapshot);
                metrics.snapshot_builds.inc();
                if !cache.is_ready() {
                    info!("extender caches synced");
                }
                cache.set_synced();
            }
            Ok(None) => {}
            Err(error) => warn!(%error, "snapshot build failed"),
        }
    }
}

fn convert_pv(pv: PersistentVolume) -> Result<Volume, ModelError> {
    Volume::from_pv(&pv)
}

fn convert_pvc(pvc: PersistentVolumeClaim) -> Result<Claim, ModelError> {
    Claim::from_pvc(&pvc)
}

fn convert_class(sc: StorageClass) -> Result<Class, ModelError> {
    Class::from_storage_class(&sc)
}

fn convert_node(node: Node) -> Result<Labels, ModelError> {
    node_labels(&node).map(|(_, labels)| labels)
}

/// Runs the four watches and the snapshot builder until `shutdown` changes; joins them all before returning.
pub async fn run(
    client: Client,
    stores: Stores,
    cache: Arc<Cache>,
    metrics: Metrics,
    shutdown: watch::Receiver<bool>,
) {
    let w = Watcher::new(client, stores.dirty.clone(), shutdown.clone());
    let all = watcher::Config::default;
    tokio::join!(
        w.run(all(), stores.volumes.clone(), models(convert_pv)),
        w.run(all(), stores.claims.clone(), models(convert_pvc)),
        w.run(all(), stores.classes.clone(), models(convert_class)),
        w.run(all(), stores.nodes.clone(), models(convert_node)),
        rebuild(stores.clone(), cache, metrics, shutdown.clone()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::apply;
    use crate::watch::checks::{PvModel, object};
    use kube::runtime::watcher::Event;
    use serde_json::json;

    #[test]
    fn malformed_objects_are_skipped_and_a_relist_replaces_the_store() {
        PvModel(convert_pv).malformed_pvs_are_skipped_and_a_relist_replaces_the_store();
    }

    #[test]
    fn an_update_that_leaves_the_model_as_it_was_costs_no_rebuild() {
        PvModel(convert_pv).an_update_that_leaves_the_model_as_it_was_changes_nothing();
    }

    #[test]
    fn no_snapshot_is_built_until_every_store_has_listed_once() {
        let stores = Stores::default();
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let node = object::<Node>(
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}}),
        );
        let nodes = models(convert_node);
        apply(&stores.nodes, "Node", Event::Init, &nodes);
        apply(&stores.nodes, "Node", Event::InitApply(node), &nodes);
        apply(&stores.nodes, "Node", Event::InitDone, &nodes);
        apply(&stores.volumes, "PV", Event::InitDone, &models(convert_pv));
        apply(&stores.claims, "PVC", Event::InitDone, &models(convert_pvc));
        assert!(
            build(&stores, &metrics).is_none(),
            "storage classes have not listed yet"
        );
        apply(
            &stores.classes,
            "SC",
            Event::InitDone,
            &models(convert_class),
        );
        let snap = build(&stores, &metrics).expect("every store listed");
        assert!(snap.node_labels("n1").is_some());
    }
}
