//! Watches that keep the extender's picture of the cluster current.
//!
//! ```text
//!  watcher(PVs) ─┐                         ┌─> Store<Volume>   ─┐
//!  watcher(PVCs) ├─ DynamicObject ─convert─┼─> Store<Claim>     ├─ dirty ─> rebuild (debounced) ─> Cache::store
//!  watcher(SCs)  │  (bad objects skipped)  ├─> Store<Class>     │           first complete build ─> Cache::set_synced
//!  watcher(Nodes)┘                         └─> Store<Labels>   ─┘
//! ```
//!
//! Objects arrive as `DynamicObject` and are converted one by one, so a single object our types cannot read is
//! logged and skipped instead of failing the whole list (and with it, readiness) forever. Each store swaps in a
//! relist atomically at `InitDone`. A snapshot is built only once every store has completed its first list.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use super::labels::Labels;
use super::metrics::{Kind, KindLabels, Metrics};
use super::model::{Claim, Class, ModelError, Volume, node_labels};
use super::server::Cache;
use super::snapshot::Snapshot;

/// Quiet time collected before rebuilding, so a burst of changes costs one snapshot.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Models by object key; shared (`Arc`) with the snapshots built from them.
struct Store<T> {
    items: HashMap<String, Arc<T>>,
    relist: Option<HashMap<String, Arc<T>>>,
    synced: bool,
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Store {
            items: HashMap::new(),
            relist: None,
            synced: false,
        }
    }
}

#[derive(Default)]
struct Stores {
    volumes: Mutex<Store<Volume>>,
    claims: Mutex<Store<Claim>>,
    classes: Mutex<Store<Class>>,
    nodes: Mutex<Store<Labels>>,
    dirty: Notify,
}

fn key(meta: &kube::api::ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or("")),
        None => meta.name.clone().unwrap_or_default(),
    }
}

/// Applies one watch event to a store; returns whether the store's visible content changed. An update that leaves
/// the model as it was (a status or annotation the decision does not read) changes nothing, so it costs no rebuild.
fn apply<K, T: PartialEq>(
    store: &Mutex<Store<T>>,
    kind: Kind,
    event: Event<DynamicObject>,
    convert: fn(&K) -> Result<T, ModelError>,
) -> bool
where
    K: DeserializeOwned,
{
    let decode = |obj: &DynamicObject| -> Option<T> {
        let typed = serde_json::to_value(obj).and_then(serde_json::from_value::<K>);
        match typed
            .map_err(|e| e.to_string())
            .and_then(|k| convert(&k).map_err(|e| e.to_string()))
        {
            Ok(t) => Some(t),
            Err(error) => {
                warn!(?kind, object = %key(&obj.metadata), %error, "skipping an object the extender cannot read");
                None
            }
        }
    };
    let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        Event::Init => {
            store.relist = Some(HashMap::new());
            false
        }
        Event::InitApply(obj) => {
            if let (Some(item), Some(relist)) = (decode(&obj), store.relist.as_mut()) {
                relist.insert(key(&obj.metadata), Arc::new(item));
            }
            false
        }
        Event::InitDone => {
            let relist = store.relist.take().unwrap_or_default();
            store.items = relist;
            store.synced = true;
            true
        }
        Event::Apply(obj) => {
            let k = key(&obj.metadata);
            match decode(&obj) {
                Some(item) if store.items.get(&k).is_some_and(|old| **old == item) => false,
                Some(item) => {
                    store.items.insert(k, Arc::new(item));
                    true
                }
                None => store.items.remove(&k).is_some(),
            }
        }
        Event::Delete(obj) => store.items.remove(&key(&obj.metadata)).is_some(),
    }
}

async fn watch_kind<K, T: PartialEq>(
    client: Client,
    stores: Arc<Stores>,
    pick: fn(&Stores) -> &Mutex<Store<T>>,
    kind: Kind,
    convert: fn(&K) -> Result<T, ModelError>,
    mut shutdown: watch::Receiver<bool>,
) where
    K: Resource<DynamicType = ()> + DeserializeOwned + Debug,
{
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<K>(&()));
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            _ = shutdown.changed() => return,
        };
        match next {
            Some(Ok(event)) => {
                if apply(pick(&stores), kind, event, convert) {
                    stores.dirty.notify_one();
                }
            }
            Some(Err(error)) => {
                warn!(?kind, error = %crate::logging::error_text(&error), "watch failed; retrying with backoff")
            }
            None => return,
        }
    }
}

fn build(stores: &Stores, metrics: &Metrics) -> Option<Snapshot> {
    let volumes = stores.volumes.lock().unwrap_or_else(|e| e.into_inner());
    let claims = stores.claims.lock().unwrap_or_else(|e| e.into_inner());
    let classes = stores.classes.lock().unwrap_or_else(|e| e.into_inner());
    let nodes = stores.nodes.lock().unwrap_or_else(|e| e.into_inner());
    for (kind, n) in [
        (Kind::PersistentVolumes, volumes.items.len()),
        (Kind::PersistentVolumeClaims, claims.items.len()),
        (Kind::StorageClasses, classes.items.len()),
        (Kind::Nodes, nodes.items.len()),
    ] {
        metrics
            .cached
            .get_or_create(&KindLabels { kind })
            .set(n as i64);
    }
    if !(volumes.synced && claims.synced && classes.synced && nodes.synced) {
        return None;
    }
    Some(Snapshot::new(
        volumes.items.values().cloned(),
        claims.items.values().cloned(),
        classes.items.values().map(|c| Class::clone(c)),
        nodes.items.iter().map(|(k, v)| (k.clone(), v.clone())),
    ))
}

async fn rebuild(
    stores: Arc<Stores>,
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

fn convert_node(node: &Node) -> Result<Labels, ModelError> {
    node_labels(node).map(|(_, labels)| labels)
}

/// Runs the four watches and the snapshot builder until `shutdown` changes; joins them all before returning.
pub async fn run(
    client: Client,
    cache: Arc<Cache>,
    metrics: Metrics,
    shutdown: watch::Receiver<bool>,
) {
    let stores = Arc::new(Stores::default());
    tokio::join!(
        watch_kind::<PersistentVolume, _>(
            client.clone(),
            stores.clone(),
            |s| &s.volumes,
            Kind::PersistentVolumes,
            Volume::from_pv,
            shutdown.clone()
        ),
        watch_kind::<PersistentVolumeClaim, _>(
            client.clone(),
            stores.clone(),
            |s| &s.claims,
            Kind::PersistentVolumeClaims,
            Claim::from_pvc,
            shutdown.clone()
        ),
        watch_kind::<StorageClass, _>(
            client.clone(),
            stores.clone(),
            |s| &s.classes,
            Kind::StorageClasses,
            Class::from_storage_class,
            shutdown.clone()
        ),
        watch_kind::<Node, _>(
            client,
            stores.clone(),
            |s| &s.nodes,
            Kind::Nodes,
            convert_node,
            shutdown.clone()
        ),
        rebuild(stores.clone(), cache, metrics, shutdown),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("a DynamicObject")
    }

    #[test]
    fn malformed_objects_are_skipped_and_a_relist_replaces_the_store() {
        let store: Mutex<Store<Volume>> = Mutex::default();
        let ok =
            object(json!({"metadata": {"name": "good"}, "spec": {"capacity": {"storage": "1Gi"}}}));
        let bad = object(json!({"metadata": {"name": "bad"}, "spec": {"capacity": "not a map"}}));
        apply(
            &store,
            Kind::PersistentVolumes,
            Event::Init,
            Volume::from_pv,
        );
        apply(
            &store,
            Kind::PersistentVolumes,
            Event::InitApply(ok.clone()),
            Volume::from_pv,
        );
        apply(
            &store,
            Kind::PersistentVolumes,
            Event::InitApply(bad),
            Volume::from_pv,
        );
        assert!(!store.lock().expect("not poisoned").synced);
        assert!(apply(
            &store,
            Kind::PersistentVolumes,
            Event::InitDone,
            Volume::from_pv
        ));
        let names: Vec<String> = store
            .lock()
            .expect("not poisoned")
            .items
            .keys()
            .cloned()
            .collect();
        assert_eq!(names, ["good"]);
        assert!(apply(
            &store,
            Kind::PersistentVolumes,
            Event::Delete(ok),
            Volume::from_pv
        ));
        assert!(store.lock().expect("not poisoned").items.is_empty());
    }

    #[test]
    fn an_update_that_leaves_the_model_as_it_was_costs_no_rebuild() {
        let store: Mutex<Store<Volume>> = Mutex::default();
        let pv = |annotation: &str, size: &str| {
            let meta = json!({"name": "pv1", "resourceVersion": annotation,
                              "annotations": {"example.com/seen": annotation}});
            Event::Apply(object(
                json!({"metadata": meta, "spec": {"capacity": {"storage": size}}}),
            ))
        };
        let apply_pv = |event| apply(&store, Kind::PersistentVolumes, event, Volume::from_pv);
        assert!(apply_pv(pv("1", "1Gi")), "a new PV is a change");
        assert!(
            !apply_pv(pv("2", "1Gi")),
            "only metadata the decision ignores changed"
        );
        assert!(apply_pv(pv("3", "2Gi")), "the capacity changed");
        let unreadable = object(json!({"metadata": {"name": "pv1"}, "spec": {"capacity": "x"}}));
        assert!(
            apply_pv(Event::Apply(unreadable.clone())),
            "an unreadable update drops the PV"
        );
        assert!(!apply_pv(Event::Apply(unreadable)), "nothing left to drop");
    }

    #[test]
    fn no_snapshot_is_built_until_every_store_has_listed_once() {
        let stores = Stores::default();
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let node =
            object(json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}}));
        apply(&stores.nodes, Kind::Nodes, Event::Init, convert_node);
        apply(
            &stores.nodes,
            Kind::Nodes,
            Event::InitApply(node),
            convert_node,
        );
        apply(&stores.nodes, Kind::Nodes, Event::InitDone, convert_node);
        apply(
            &stores.volumes,
            Kind::PersistentVolumes,
            Event::InitDone,
            Volume::from_pv,
        );
        apply(
            &stores.claims,
            Kind::PersistentVolumeClaims,
            Event::InitDone,
            Claim::from_pvc,
        );
        assert!(
            build(&stores, &metrics).is_none(),
            "storage classes have not listed yet"
        );
        apply(
            &stores.classes,
            Kind::StorageClasses,
            Event::InitDone,
            Class::from_storage_class,
        );
        let snap = build(&stores, &metrics).expect("every store listed");
        assert!(snap.node_labels("n1").is_some());
    }
}
