//! Guarded, scoped watches feeding in-memory stores for the node agent.
//!
//! Each watch lists and watches one kind with a label or field selector (the agent never watches every PV in the
//! cluster), decodes each object on its own so one malformed object is logged and skipped rather than fatal, and
//! signals `changed` on every real change so the main loop plans again.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tracing::warn;

/// Objects of one kind by key (see [`key`]), and whether the initial list has completed.
pub struct Store<K> {
    inner: Mutex<Inner<K>>,
}

struct Inner<K> {
    items: BTreeMap<String, K>,
    relist: Option<BTreeMap<String, K>>,
    synced: bool,
}

impl<K: Clone> Store<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(Store {
            inner: Mutex::new(Inner {
                items: BTreeMap::new(),
                relist: None,
                synced: false,
            }),
        })
    }

    pub fn synced(&self) -> bool {
        self.lock().synced
    }

    /// Counts the store as synced with what it holds: for a kind the cluster does not serve (yet).
    pub fn set_synced(&self) {
        self.lock().synced = true;
    }

    /// A cluster-scoped object by name (namespaced objects are keyed `namespace/name`).
    pub fn get(&self, name: &str) -> Option<K> {
        self.lock().items.get(name).cloned()
    }

    pub fn all(&self) -> Vec<K> {
        self.lock().items.values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        // NB: a panic while holding the lock cannot leave the map half-updated (each update is one insert/remove).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Watches `K` with `config` (selectors) into `store` until `shutdown` flips, notifying `changed` on changes.
pub async fn run<K>(
    client: Client,
    config: watcher::Config,
    store: Arc<Store<K>>,
    changed: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + 'static,
{
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<K>(&()));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let kind = K::kind(&());
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            _ = shutdown.changed() => return,
        };
        match next {
            Some(Ok(event)) => {
                if apply(&store, &kind, event) {
                    changed.notify_one();
                }
            }
            Some(Err(error)) => {
                warn!(kind = %kind, error = %crate::logging::error_text(&error), "watch failed; retrying with backoff")
            }
            None => return,
        }
    }
}

/// The store key: the name of a cluster-scoped object, `namespace/name` of a namespaced one.
// NB: keyed by name alone, pods `a/web-0` and `b/web-0` overwrote each other and deleting one removed both.
fn key(obj: &DynamicObject) -> Option<String> {
    let name = obj.metadata.name.as_ref()?;
    Some(match &obj.metadata.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.clone(),
    })
}

fn decode<K: DeserializeOwned>(kind: &str, obj: &DynamicObject) -> Option<(String, K)> {
    let name = key(obj)?;
    let value = match serde_json::to_value(obj) {
        Ok(v) => v,
        Err(error) => {
            warn!(%kind, %name, %error, "skipping object that cannot be re-encoded");
            return None;
        }
    };
    match serde_json::from_value(value) {
        Ok(k) => Some((name, k)),
        Err(error) => {
            warn!(%kind, %name, %error, "skipping malformed object");
            None
        }
    }
}

/// Applies one watch event; true when the store's visible content changed.
fn apply<K: DeserializeOwned + Clone>(
    store: &Store<K>,
    kind: &str,
    event: Event<DynamicObject>,
) -> bool {
    let mut s = store.lock();
    match event {
        Event::Init => {
            s.relist = Some(BTreeMap::new());
            false
        }
        Event::InitApply(obj) => {
            if let Some((name, k)) = decode(kind, &obj) {
                s.relist.get_or_insert_with(BTreeMap::new).insert(name, k);
            }
            false
        }
        Event::InitDone => {
            s.items = s.relist.take().unwrap_or_default();
            s.synced = true;
            true
        }
        Event::Apply(obj) => match decode(kind, &obj) {
            Some((name, k)) => {
                s.items.insert(name, k);
                true
            }
            None => key(&obj).is_some_and(|k| s.items.remove(&k).is_some()),
        },
        Event::Delete(obj) => key(&obj).is_some_and(|k| s.items.remove(&k).is_some()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};

    use super::*;

    fn object(kind: &str, namespace: Option<&str>, name: &str) -> DynamicObject {
        let mut meta = serde_json::json!({ "name": name });
        if let Some(ns) = namespace {
            meta["namespace"] = ns.into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": kind, "metadata": meta,
        }))
        .expect("a valid object")
    }

    #[test]
    fn same_named_pods_in_two_namespaces_are_kept_apart() {
        let store = Store::<Pod>::new();
        for ns in ["a", "b"] {
            assert!(apply(
                &store,
                "Pod",
                Event::Apply(object("Pod", Some(ns), "web-0"))
            ));
        }
        assert_eq!(store.all().len(), 2);
        assert!(apply(
            &store,
            "Pod",
            Event::Delete(object("Pod", Some("a"), "web-0"))
        ));
        let left: Vec<_> = store
            .all()
            .into_iter()
            .map(|p| p.metadata.namespace)
            .collect();
        assert_eq!(left, [Some("b".to_string())]);
    }

    #[test]
    fn cluster_scoped_objects_are_found_by_name() {
        let store = Store::<Node>::new();
        apply(&store, "Node", Event::Apply(object("Node", None, "node-1")));
        assert!(store.get("node-1").is_some());
        assert!(apply(
            &store,
            "Node",
            Event::Delete(object("Node", None, "node-1"))
        ));
        assert!(store.get("node-1").is_none());
    }
}
