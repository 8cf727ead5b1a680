//! A store kept by listing now and then instead of watching ([`Watcher::poll`]): for a kind a process needs but
//! which hardly changes, one open watch per process costs the API server more (a watcher's memory and goroutine
//! for as long as the process runs) than a list every few minutes from its cache.
//!
//! ```text
//!  every Cadence::slow (Cadence::fast while the reader says something is missing, at once when it starts to)
//!    GET ?resourceVersion=0 (the API server's cache) ──> Init, InitApply.., InitDone into the Store
//!                                                        └─> Notify "changed" only when the content changed
//! ```

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::warn;

use super::{Guarded, Reader, Seen, Store, Watcher, replace};

/// When a [`Watcher::poll`] lists again: every `slow` period, or every `fast` one while its reader says something
/// it needs is missing ([`Polled::set_missing`]).
#[derive(Clone, Copy, Debug)]
pub struct Cadence {
    pub fast: Duration,
    pub slow: Duration,
}

/// What a poller and its reader share: whether the store lacks what the reader needs (a StorageClass the
/// configuration names; while it does, the poller lists at its fast cadence, and the moment it starts to, at once),
/// and whether a reader about to act on the store must list first (always, but for a store a test fills itself).
#[derive(Debug, Default)]
pub struct Polled {
    missing: AtomicBool,
    wake: Notify,
    kept_current: bool,
    /// For a gated poller ([`Polled::gated`]): `None` until its reader says how to begin, then whether the store was
    /// seeded (the first list waits a period) or not (it lists at once).
    begin: Option<tokio::sync::watch::Sender<Option<bool>>>,
}

impl Polled {
    pub fn new() -> Arc<Polled> {
        Arc::new(Polled::default())
    }

    /// A poller that lists nothing until its reader calls [`Polled::begin`]: the reader may seed the store first
    /// (what a cleanly stopped agent left, read under the state directory's lock).
    pub fn gated() -> Arc<Polled> {
        Arc::new(Polled {
            begin: Some(tokio::sync::watch::channel(None).0),
            ..Polled::default()
        })
    }

    /// Lets a gated poller begin: `seeded`, its first list waits a period (the store holds a list already); else it
    /// lists at once.
    pub fn begin(&self, seeded: bool) {
        if let Some(begin) = &self.begin {
            begin.send_replace(Some(seeded));
        }
    }

    /// Waits for [`Polled::begin`] (at once for a poller that is not gated): whether the store was seeded; `None` at
    /// shutdown.
    async fn begun(&self, shutdown: &mut tokio::sync::watch::Receiver<bool>) -> Option<bool> {
        let Some(begin) = &self.begin else {
            return Some(false);
        };
        let mut begun = begin.subscribe();
        tokio::select! {
            seeded = begun.wait_for(Option::is_some) => seeded.ok().and_then(|s| *s),
            _ = shutdown.changed() => None,
        }
    }

    /// For a store that something else keeps current (a test that fills it): never listed before acting.
    pub fn kept_current() -> Arc<Polled> {
        Arc::new(Polled {
            kept_current: true,
            ..Polled::default()
        })
    }

    /// Says whether something is missing now; a change to missing wakes the poller.
    pub fn set_missing(&self, missing: bool) {
        let was = self.missing.swap(missing, Ordering::Relaxed);
        if missing && !was {
            self.wake.notify_one();
        }
    }

    /// Lists now: something says the objects changed (the LocalDisks, when `localpv disks` marks the Node).
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    fn is_missing(&self) -> bool {
        self.missing.load(Ordering::Relaxed)
    }

    /// Whether a reader about to act on the store (create, wipe) must list first: a poll's list may be as old as
    /// its period, and nothing says whether an object changed since.
    pub fn lists_before_acting(&self) -> bool {
        !self.kept_current
    }
}

/// Lists `K` with `params` and replaces `store`'s content with the list as `reader` reads it; `Ok(true)` when the
/// content changed or the store was not synced before. The poller's list, and a reader's own before it acts.
pub async fn list_into<K, T, E, C, O>(
    client: &Client,
    params: &ListParams,
    store: &Store<T>,
    reader: &Reader<C, O>,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
    T: PartialEq,
    E: Display,
    C: Fn(K) -> Result<Option<T>, E>,
    O: Fn(Seen),
{
    let api: Api<Guarded<K>> = Api::all(client.clone());
    let list = api.list(params).await?;
    let kind = K::kind(&());
    let before = store.read(BTreeMap::clone);
    let first = !store.synced();
    replace(store, &kind, list.items, reader);
    Ok(first || store.read(|now| *now != before))
}

impl Watcher {
    /// Keeps `store` filled with a list of `K` (with `params`' selectors) taken every [`Cadence`] period, instead
    /// of a watch, until shutdown (`true`), or until a list finds no such resource (`false`: a 404, a custom
    /// resource whose definition is not installed or was removed; so the agent's start needs no request of its own
    /// to find out whether the LocalDisk CRD exists). Lists at `resourceVersion=0`, served from the API server's
    /// cache, but for a list its reader asked for. Notifies `changed` after the first list and then only when the
    /// store's content changed; keeps the last list when one fails otherwise.
    pub async fn poll<K, T, E, C, O>(
        &self,
        params: ListParams,
        store: Arc<Store<T>>,
        reader: Reader<C, O>,
        cadence: Cadence,
        polled: Arc<Polled>,
    ) -> bool
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + 'static,
        T: PartialEq,
        E: Display,
        C: Fn(K) -> Result<Option<T>, E>,
        O: Fn(Seen),
    {
        let kind = K::kind(&());
        // NB: a list woken by the reader (something is missing, or something says the objects changed) is a
        // consistent read: one from the cache at resourceVersion=0 may not show yet the change that woke it, and
        // the next list would be a whole period away.
        let (cached, consistent) = (params.clone().match_any(), params);
        let mut params = &cached;
        let mut shutdown = self.shutdown.clone();
        let mut failures = 0u32;
        let Some(seeded) = polled.begun(&mut shutdown).await else {
            return true;
        };
        if seeded {
            params = tokio::select! {
                () = tokio::time::sleep(cadence.slow) => &cached,
                () = polled.wake.notified() => &consistent,
                _ = shutdown.changed() => return true,
            };
        }
        loop {
            let wait = match list_into(&self.client, params, &store, &reader).await {
                Ok(changed) => {
                    failures = 0;
                    if changed {
                        self.changed.notify_one();
                    }
                    if polled.is_missing() {
                        cadence.fast
                    } else {
                        cadence.slow
                    }
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return false;
                }
                Err(error) => {
                    warn!(kind = %kind, error = %crate::logging::error_text(&error), "list failed; keeping the last one and retrying");
                    failures = failures.saturating_add(1);
                    Duration::from_secs(1 << failures.min(5)).min(cadence.fast)
                }
            };
            params = tokio::select! {
                () = tokio::time::sleep(wait) => &cached,
                () = polled.wake.notified() => &consistent,
                _ = shutdown.changed() => return true,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::json;

    use super::*;
    use crate::effects::scripted::serve;
    use crate::watch::objects;

    /// An API server holding StorageClasses `names`; every list's query is recorded, and each answer can fail.
    struct Classes {
        names: Mutex<Vec<&'static str>>,
        queries: Mutex<Vec<String>>,
        fail: AtomicBool,
    }

    fn queries(api: &Classes) -> Vec<String> {
        api.queries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until the API server has seen more than `n` lists.
    async fn lists_past(api: &Classes, n: usize) {
        for _ in 0..1000 {
            if queries(api).len() > n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no list past {n}: {:?}", queries(api));
    }

    #[tokio::test]
    async fn a_poll_lists_from_the_cache_wakes_only_on_a_change_and_hurries_while_something_is_missing()
     {
        let api = Arc::new(Classes {
            names: Mutex::new(vec!["a"]),
            queries: Mutex::new(Vec::new()),
            fail: AtomicBool::new(false),
        });
        let served = api.clone();
        let client = serve(move |seen| {
            served
                .queries
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(seen.query);
            if served.fail.load(Ordering::Relaxed) {
                return (
                    500,
                    json!({"kind": "Status", "code": 500, "message": "down"}),
                );
            }
            let names = served
                .names
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let items: Vec<_> = names
                .iter()
                .map(|n| json!({"metadata": {"name": n}, "provisioner": "kubernetes.io/no-provisioner"}))
                .collect();
            (
                200,
                json!({"metadata": {"resourceVersion": "7"}, "items": items}),
            )
        });
        let changed = Arc::new(Notify::new());
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let watcher = Watcher::new(client, changed.clone(), shutdown);
        let store = Store::<StorageClass>::new();
        let polled = Polled::new();
        let cadence = Cadence {
            fast: Duration::from_millis(20),
            slow: Duration::from_secs(3600),
        };
        let polling = tokio::spawn({
            let (store, polled) = (store.clone(), polled.clone());
            async move {
                watcher
                    .poll(
                        ListParams::default(),
                        store,
                        objects::<StorageClass>(),
                        cadence,
                        polled,
                    )
                    .await;
            }
        });
        let woken = || tokio::time::timeout(Duration::from_secs(10), changed.notified());
        let quiet = || tokio::time::timeout(Duration::from_millis(1), changed.notified());

        woken().await.expect("the first list wakes the reader");
        assert!(store.synced() && store.get("a").is_some());
        assert!(
            queries(&api)[0].contains("resourceVersion=0"),
            "served from the API server's cache: {:?}",
            queries(&api)
        );
        assert_eq!(queries(&api).len(), 1, "then nothing until the slow period");

        // A class the configuration names is missing: listed at once (an unchanged list wakes no one), then every
        // fast period until it is there.
        polled.set_missing(true);
        lists_past(&api, 1).await;
        assert!(quiet().await.is_err(), "an unchanged list wakes no one");
        api.names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push("b");
        woken().await.expect("the new class wakes the reader");
        assert!(store.get("b").is_some());

        // A failed list keeps the last one.
        api.fail.store(true, Ordering::Relaxed);
        let seen = queries(&api).len();
        lists_past(&api, seen).await;
        assert!(store.get("a").is_some() && store.get("b").is_some());
        assert!(quiet().await.is_err());
        polled.set_missing(false);

        let _ = stop.send(true);
        polling.await.expect("the poll stops at shutdown");
    }
}
