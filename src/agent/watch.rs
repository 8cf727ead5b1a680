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

/// Objects of one kind by name, and whether the initial list has completed.
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

fn decode<K: DeserializeOwned>(kind: &str, obj: &DynamicObject) -> Option<(String, K)> {
    let name = obj.metadata.name.clone()?;
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
            None => obj
                .metadata
                .name
                .as_ref()
                .is_some_and(|n| s.items.remove(n).is_some()),
        },
        Event::Delete(obj) => obj
            .metadata
            .name
            .as_ref()
            .is_some_and(|n| s.items.remove(n).is_some()),
    }
}
