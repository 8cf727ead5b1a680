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
use super::labels::Labels;
use super::metrics::{Kind, KindLabels, Metrics};
use super::model::{Claim, Class, ModelError, Volume, node_labels};
use super::snapshot::Snapshot;
use crate::watch::{Store, run_as};

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
        (Kind::PersistentVolumes, volumes.len()),
        (Kind::PersistentVolumeClaims, claims.len()),
        (Kind::StorageClasses, classes.len()),
        (Kind::Nodes, nodes.len()),
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
    let all = || watcher::Config::default();
    let (c, s, dirty) = (&client, &shutdown, &stores.dirty);
    tokio::join!(
        run_as(
            c.clone(),
            all(),
            stores.volumes.clone(),
            |pv: PersistentVolume| Volume::from_pv(&pv),
            dirty.clone(),
            s.clone()
        ),
        run_as(
            c.clone(),
            all(),
            stores.claims.clone(),
            |pvc: PersistentVolumeClaim| Claim::from_pvc(&pvc),
            dirty.clone(),
            s.clone()
        ),
        run_as(
            c.clone(),
            all(),
            stores.classes.clone(),
            |sc: StorageClass| Class::from_storage_class(&sc),
            dirty.clone(),
            s.clone()
        ),
        run_as(
            c.clone(),
            all(),
            stores.nodes.clone(),
            convert_node,
            dirty.clone(),
            s.clone()
        ),
        rebuild(stores.clone(), cache, metrics, shutdown.clone()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::apply;
    use kube::core::DeserializeGuard;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn object<K: kube::Resource + serde::de::DeserializeOwned>(
        value: serde_json::Value,
    ) -> DeserializeGuard<K> {
        serde_json::from_value(value).expect("a guarded object")
    }

    fn volume(pv: PersistentVolume) -> Result<Volume, ModelError> {
        Volume::from_pv(&pv)
    }

    #[test]
    fn malformed_objects_are_skipped_and_a_relist_replaces_the_store() {
        let store = Store::<Volume>::new();
        let ok = || {
            object::<PersistentVolume>(
                json!({"metadata": {"name": "good"}, "spec": {"capacity": {"storage": "1Gi"}}}),
            )
        };
        let bad = object(json!({"metadata": {"name": "bad"}, "spec": {"capacity": "not a map"}}));
        apply(&store, "PV", Event::Init, &volume);
        apply(&store, "PV", Event::InitApply(ok()), &volume);
        apply(&store, "PV", Event::InitApply(bad), &volume);
        assert!(!store.synced());
        assert!(apply(&store, "PV", Event::InitDone, &volume));
        let names: Vec<String> = store.read(|items| items.keys().cloned().collect());
        assert_eq!(names, ["good"]);
        assert!(apply(&store, "PV", Event::Delete(ok()), &volume));
        assert!(store.is_empty());
    }

    #[test]
    fn an_update_that_leaves_the_model_as_it_was_costs_no_rebuild() {
        let store = Store::<Volume>::new();
        let pv = |annotation: &str, size: &str| {
            let meta = json!({"name": "pv1", "resourceVersion": annotation,
                              "annotations": {"example.com/seen": annotation}});
            Event::Apply(object::<PersistentVolume>(
                json!({"metadata": meta, "spec": {"capacity": {"storage": size}}}),
            ))
        };
        let apply_pv = |event| apply(&store, "PV", event, &volume);
        assert!(apply_pv(pv("1", "1Gi")), "a new PV is a change");
        assert!(
            !apply_pv(pv("2", "1Gi")),
            "only metadata the decision ignores changed"
        );
        assert!(apply_pv(pv("3", "2Gi")), "the capacity changed");
        let unreadable = || {
            Event::Apply(object::<PersistentVolume>(
                json!({"metadata": {"name": "pv1"}, "spec": {"capacity": "x"}}),
            ))
        };
        assert!(apply_pv(unreadable()), "an unreadable update drops the PV");
        assert!(!apply_pv(unreadable()), "nothing left to drop");
    }

    #[test]
    fn no_snapshot_is_built_until_every_store_has_listed_once() {
        let stores = Stores::default();
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let node = object::<Node>(
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}}),
        );
        apply(&stores.nodes, "Node", Event::Init, &convert_node);
        apply(&stores.nodes, "Node", Event::InitApply(node), &convert_node);
        apply(&stores.nodes, "Node", Event::InitDone, &convert_node);
        apply(&stores.volumes, "PV", Event::InitDone, &volume);
        let claim = |pvc: PersistentVolumeClaim| Claim::from_pvc(&pvc);
        apply(&stores.claims, "PVC", Event::InitDone, &claim);
        assert!(
            build(&stores, &metrics).is_none(),
            "storage classes have not listed yet"
        );
        let class = |sc: StorageClass| Class::from_storage_class(&sc);
        apply(&stores.classes, "SC", Event::InitDone, &class);
        let snap = build(&stores, &metrics).expect("every store listed");
        assert!(snap.node_labels("n1").is_some());
    }
}
