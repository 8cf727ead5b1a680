//! The one guarded watch and the one store every part of the program reads the cluster through.
//!
//! ```text
//!  kube-apiserver ──list+watch (selectors)──> Guarded<K> ──convert──> Store<T>: namespace/name ──> Arc<T>
//!                   one object we cannot read: logged, skipped     (unchanged T: no notify)   └─> Notify "changed"
//!                                                        └──observe (uid, list done)──> the reader's bookkeeping
//! ```
//!
//! Each object is decoded on its own ([`Guarded`]), so one malformed object is logged and skipped
//! instead of failing the whole list, and with it readiness, forever; a reader that passes over most objects takes
//! them as their text instead ([`Text`], [`Watcher::run_text`]) and decodes only those it keeps. A [`Reader`]
//! says what the store keeps: `convert` turns the object into the model its reader keeps (the agent keeps the
//! object itself; the extender and the clean-up controller keep compact models) or passes over one it does not
//! want (the agent's PV index keeps only the PVs that can reach its node), and `observe` hears of everything the
//! watch showed, after the store has applied it. An update whose model equals the stored one changes nothing, so it
//! wakes no one. Objects are keyed `namespace/name` (a cluster-scoped one by its name): pods `a/web-0` and `b/web-0`
//! are two entries. A relist replaces the store at `InitDone`, all at once. Models are kept behind `Arc`, so a
//! reader copies pointers.
//!
//! Each watch starts with a streaming list (one watch request whose first events are the objects that exist,
//! ended by a bookmark: no list request, and no whole list held in the API server's memory for it); where the API
//! server refuses that (WatchList turned off), the watch lists first and then watches, as before.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::{Debug, Display};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use kube::api::{Api, ObjectMeta};
use kube::core::PartialObjectMeta;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tokio::sync::{Notify, watch};
use tracing::warn;

mod poll;
pub use poll::{Cadence, Polled, relist};

/// One object of kind `K` as a watch or list hands it over: decoded on its own, so a malformed object becomes
/// `Err` with the metadata that could be read, and the rest of its list still decodes.
///
/// NB: kube's `DeserializeGuard` does the same through a `serde_value` tree of the object that it then copies
/// whole: 2.5x the time of decoding straight from the text (10,000 PVs: ~180 ms against ~70 ms here), most of
/// a node agent's restart in a large cluster. Here the object's text is kept as it came (one copy of its bytes)
/// and decoded once; only a malformed object is read a second time, for its metadata.
#[derive(Clone, Debug)]
pub struct Guarded<K>(pub Result<K, InvalidObject>);

impl<'de, K: Resource + DeserializeOwned> Deserialize<'de> for Guarded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let object = match serde_json::from_str::<K>(raw.get()) {
            Ok(object) => Ok(object),
            Err(error) => {
                let partial: PartialObjectMeta<K> =
                    serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
                Err(InvalidObject {
                    error: error.to_string(),
                    metadata: partial.metadata,
                })
            }
        };
        Ok(Guarded(object))
    }
}

/// `Resource` for a wrapper of `K` (`$wrapper<K>`): `K`'s kind, group, version and plural, and the metadata
/// `$meta` and `$meta_mut` reach from `self`.
macro_rules! resource_of {
    ($wrapper:ident, |$s:ident| $meta:expr, $meta_mut:expr) => {
        impl<K: Resource> Resource for $wrapper<K> {
            type DynamicType = K::DynamicType;
            type Scope = K::Scope;

            fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::kind(dt)
            }

            fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::group(dt)
            }

            fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::version(dt)
            }

            fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::plural(dt)
            }

            fn meta(&self) -> &ObjectMeta {
                let $s = self;
                $meta
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                let $s = self;
                $meta_mut
            }
        }
    };
}

resource_of!(
    Guarded,
    |g| g.0.as_ref().map_or_else(|i| &i.metadata, K::meta),
    g.0.as_mut().map_or_else(|i| &mut i.metadata, K::meta_mut)
);

/// How objects of one kind come off the wire into a reader's `convert`: decoded at once ([`Guarded`]) or kept as
/// their text until the reader asks ([`Text`]).
pub trait Wire: Resource {
    /// What the reader's `convert` receives.
    type Object;
    /// The object for `convert`, or why it cannot be read.
    fn object(self) -> Result<Self::Object, String>;
}

impl<K: Resource> Wire for Guarded<K> {
    type Object = K;

    fn object(self) -> Result<K, String> {
        self.0.map_err(|invalid| invalid.error)
    }
}

/// One object of kind `K` kept as the text it came in, with only the metadata the watch and the store read
/// (name, namespace, UID, resource version) decoded: for a reader that passes over most objects and can tell which
/// from a glance at the text ([`Text::glance`]), so it decodes in full only those it keeps ([`Text::decode`]).
/// NB: a PV in full is ~1 KB of JSON with its managed fields; the agent's PV index keeps a handful of 10,000.
#[derive(Debug)]
pub struct Text<K> {
    metadata: ObjectMeta,
    text: Box<RawValue>,
    kind: std::marker::PhantomData<fn() -> K>,
}

// NB: by hand, since a derive would ask `K: Clone` for the marker.
impl<K> Clone for Text<K> {
    fn clone(&self) -> Self {
        Text {
            metadata: self.metadata.clone(),
            text: self.text.clone(),
            kind: std::marker::PhantomData,
        }
    }
}

impl<K: DeserializeOwned> Text<K> {
    /// The object in full; an error when it is malformed.
    pub fn decode(&self) -> Result<K, serde_json::Error> {
        serde_json::from_str(self.text.get())
    }

    /// Part of the object: `G` names the fields wanted (serde passes over the rest without building it).
    pub fn glance<G: DeserializeOwned>(&self) -> Result<G, serde_json::Error> {
        serde_json::from_str(self.text.get())
    }
}

impl<'de, K> Deserialize<'de> for Text<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The metadata a watch and a store read; the rest (labels, managed fields) stays in the text.
        #[derive(Deserialize)]
        struct Head {
            metadata: HeadMeta,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct HeadMeta {
            name: Option<String>,
            namespace: Option<String>,
            uid: Option<String>,
            resource_version: Option<String>,
        }
        let text = Box::<RawValue>::deserialize(deserializer)?;
        let head: Head = serde_json::from_str(text.get()).map_err(D::Error::custom)?;
        let m = head.metadata;
        Ok(Text {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                ..ObjectMeta::default()
            },
            text,
            kind: std::marker::PhantomData,
        })
    }
}

resource_of!(Text, |t| &t.metadata, &mut t.metadata);

impl<K: Resource> Wire for Text<K> {
    type Object = Text<K>;

    fn object(self) -> Result<Self, String> {
        Ok(self)
    }
}

/// Models by key (see [`key`]), whether the first list has completed, and a count of visible changes.
pub struct Store<T> {
    inner: Mutex<Inner<T>>,
}

struct Inner<T> {
    items: BTreeMap<String, Arc<T>>,
    relist: Option<BTreeMap<String, Arc<T>>>,
    synced: bool,
    generation: u64,
}

impl<T> Store<T> {
    pub fn new() -> Arc<Self> {
        Arc::new(Store {
            inner: Mutex::new(Inner {
                items: BTreeMap::new(),
                relist: None,
                synced: false,
                generation: 0,
            }),
        })
    }

    pub fn synced(&self) -> bool {
        self.lock().synced
    }

    /// Counts the store as synced with what it holds: for a kind the cluster does not serve (yet).
    pub fn set_synced(&self) {
        let mut s = self.lock();
        s.synced = true;
        s.generation += 1;
    }

    /// The watch starts over with another selection: not synced until it has listed again. What it holds stays
    /// readable until then.
    pub fn restart(&self) {
        let mut s = self.lock();
        s.synced = false;
        s.relist = None;
    }

    /// Goes up on every visible change (and on each completed list): equal generations, equal contents.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The model stored under `key`: a cluster-scoped object's name, or `namespace/name`.
    pub fn get_shared(&self, key: &str) -> Option<Arc<T>> {
        self.lock().items.get(key).cloned()
    }

    /// Every model, by key order; pointers, not copies.
    pub fn shared(&self) -> Vec<Arc<T>> {
        self.lock().items.values().cloned().collect()
    }

    /// [`Store::shared`] with the generation it is the contents of, read together.
    pub fn shared_at(&self) -> (u64, Vec<Arc<T>>) {
        let s = self.lock();
        (s.generation, s.items.values().cloned().collect())
    }

    /// Runs `read` over the entries (key order) under the store's lock; keep it short, the watch waits for it.
    pub fn read<R>(&self, read: impl FnOnce(&BTreeMap<String, Arc<T>>) -> R) -> R {
        read(&self.lock().items)
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        // NB: a panic while holding the lock cannot leave the map half-updated (each update is one insert, remove
        // or swap).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Clone> Store<T> {
    /// A copy of the model stored under `key`.
    pub fn get(&self, key: &str) -> Option<T> {
        self.lock().items.get(key).map(|t| T::clone(t))
    }

    /// Copies of every model, by key order.
    pub fn all(&self) -> Vec<T> {
        self.lock().items.values().map(|t| T::clone(t)).collect()
    }
}

/// What one component's watches share: the client, whom they wake on a visible change, and the shutdown signal.
#[derive(Clone)]
pub struct Watcher {
    client: Client,
    changed: Arc<Notify>,
    shutdown: watch::Receiver<bool>,
}

impl Watcher {
    pub fn new(client: Client, changed: Arc<Notify>, shutdown: watch::Receiver<bool>) -> Self {
        Watcher {
            client,
            changed,
            shutdown,
        }
    }

    /// The shutdown signal every watch of this component stops on.
    pub fn shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    /// Watches `K` with `config` (selectors) into `store` as `reader` reads it, until shutdown; notifies
    /// `changed` on every visible change.
    pub async fn run<K, T, E, C, O>(
        &self,
        config: watcher::Config,
        store: Arc<Store<T>>,
        reader: Reader<C, O>,
    ) where
        K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + 'static,
        T: PartialEq,
        E: Display,
        C: Fn(K) -> Result<Option<T>, E>,
        O: Fn(Seen),
    {
        self.run_wire::<Guarded<K>, T, E, C, O>(config, store, reader, false)
            .await;
    }

    /// As [`Watcher::run`], but returns `false` at once when the API server does not serve `K` (404 at the first
    /// request: a custom resource whose definition is not installed), `true` at shutdown. So the agent's start needs
    /// no request of its own to find out whether the LocalDisk CRD exists.
    pub async fn run_if_served<K, T, E, C, O>(
        &self,
        config: watcher::Config,
        store: Arc<Store<T>>,
        reader: Reader<C, O>,
    ) -> bool
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + 'static,
        T: PartialEq,
        E: Display,
        C: Fn(K) -> Result<Option<T>, E>,
        O: Fn(Seen),
    {
        self.run_wire::<Guarded<K>, T, E, C, O>(config, store, reader, true)
            .await
    }

    /// As [`Watcher::run`], with each object handed to `reader` as its text ([`Text`]).
    pub async fn run_text<K, T, E, C, O>(
        &self,
        config: watcher::Config,
        store: Arc<Store<T>>,
        reader: Reader<C, O>,
    ) where
        K: Resource<DynamicType = ()> + Clone + Debug + Send + 'static,
        T: PartialEq,
        E: Display,
        C: Fn(Text<K>) -> Result<Option<T>, E>,
        O: Fn(Seen),
    {
        self.run_wire::<Text<K>, T, E, C, O>(config, store, reader, false)
            .await;
    }

    async fn run_wire<W, T, E, C, O>(
        &self,
        config: watcher::Config,
        store: Arc<Store<T>>,
        reader: Reader<C, O>,
        end_if_not_served: bool,
    ) -> bool
    where
        W: Wire + Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + 'static,
        T: PartialEq,
        E: Display,
        C: Fn(W::Object) -> Result<Option<T>, E>,
        O: Fn(Seen),
    {
        let api: Api<W> = Api::all(self.client.clone());
        let start = |config: watcher::Config| {
            watcher::watcher(api.clone(), config)
                .default_backoff()
                .boxed()
        };
        let mut events = start(config.clone().streaming_lists());
        let mut streaming = true;
        let kind = W::kind(&());
        let mut shutdown = self.shutdown.clone();
        loop {
            let next = tokio::select! {
                next = events.next() => next,
                _ = shutdown.changed() => return true,
            };
            match next {
                Some(Ok(event)) => {
                    if apply_wire(&store, &kind, event, &reader) {
                        self.changed.notify_one();
                    }
                }
                Some(Err(error)) if end_if_not_served && not_served(&error) => return false,
                Some(Err(error)) if streaming && refuses_streaming(&error) => {
                    warn!(kind = %kind, error = %crate::logging::error_text(&error), "the API server refuses streaming lists (its WatchList feature is off): listing, then watching");
                    streaming = false;
                    events = start(config.clone());
                }
                Some(Err(error)) => {
                    warn!(kind = %kind, error = %crate::logging::error_text(&error), "watch failed; retrying with backoff")
                }
                None => return true,
            }
        }
    }
}

/// Whether a watch's first request failed because the API server does not serve streaming lists: the WatchList
/// feature (on by default from Kubernetes 1.34) turned off refuses `sendInitialEvents` as invalid.
fn refuses_streaming(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchStartFailed(kube::Error::Api(status)) if status.code == 400 || status.code == 422)
}

/// Whether a watch's first request found no such resource (404).
fn not_served(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchStartFailed(kube::Error::Api(status)) | watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 404)
}

/// How a watch reads each object into its store.
pub struct Reader<C, O> {
    /// The model of one object: `Ok(None)` passes over an object this reader does not keep (quietly; one it kept
    /// before is dropped), an error is logged and the object skipped like a malformed one.
    pub convert: C,
    /// Hears of every object the watch shows and of each completed list, after the store has applied it: for
    /// bookkeeping beside the store.
    pub observe: O,
}

/// What a watch showed, as its [`Reader::observe`] hears it.
#[derive(Debug, PartialEq)]
pub enum Seen {
    /// An object of a (re)list, kept or not, readable or not; the store shows the list only at `Listed`.
    Relisted { uid: Option<String> },
    /// An object applied or deleted, kept or not, readable or not; the store shows it already.
    Changed { uid: Option<String> },
    /// A list completed and the store holds it now.
    Listed,
}

/// Keeps every object as it is, less its `managedFields` ([`without_managed_fields`]).
pub fn objects<K: Resource>() -> Reader<impl Fn(K) -> Result<Option<K>, Infallible>, impl Fn(Seen)>
{
    models(|k| Ok::<K, Infallible>(without_managed_fields(k)))
}

/// The object less its `managedFields`: the API server's record of which client set which field, which nothing
/// that keeps whole objects reads (every write here sends an object it built, or a patch), and which is most of a
/// small object's memory: ~6 KB of a PV the agent created once kube-controller-manager has set its phase, against
/// ~2 KB for the rest of it. A node agent with 100 disks keeps ~1 MiB less.
pub fn without_managed_fields<K: Resource>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    object
}

/// Keeps every object as the model `convert` makes (an object it refuses is logged and skipped).
pub fn models<K, T, E>(
    convert: impl Fn(K) -> Result<T, E>,
) -> Reader<impl Fn(K) -> Result<Option<T>, E>, impl Fn(Seen)> {
    Reader {
        convert: move |k| convert(k).map(Some),
        observe: |_| {},
    }
}

/// The store key: the name of a cluster-scoped object, `namespace/name` of a namespaced one.
// NB: keyed by name alone, pods `a/web-0` and `b/web-0` overwrote each other and deleting one removed both.
pub fn key(meta: &ObjectMeta) -> Option<String> {
    let name = meta.name.as_ref()?;
    Some(match &meta.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.clone(),
    })
}

/// The object's model, or `None`: passed over by `convert`, or (logged) malformed or refused by it.
fn decode<W: Wire, T, E>(
    kind: &str,
    key: &str,
    wire: W,
    convert: &impl Fn(W::Object) -> Result<Option<T>, E>,
) -> Option<T>
where
    E: Display,
{
    let error = match wire.object() {
        Ok(k) => match convert(k) {
            Ok(t) => return t,
            Err(e) => e.to_string(),
        },
        Err(error) => error,
    };
    warn!(%kind, object = %key, %error, "skipping an object that cannot be read");
    None
}

/// Applies one watch event, then tells the reader's `observe`; true when the store's visible content changed
/// (for readers' tests).
#[cfg(test)]
pub(crate) fn apply<K, T, E, C, O>(
    store: &Store<T>,
    kind: &str,
    event: Event<Guarded<K>>,
    reader: &Reader<C, O>,
) -> bool
where
    K: Resource,
    T: PartialEq,
    E: Display,
    C: Fn(K) -> Result<Option<T>, E>,
    O: Fn(Seen),
{
    apply_wire(store, kind, event, reader)
}

/// As [`apply`], for objects of any [`Wire`] type.
pub(crate) fn apply_wire<W, T, E, C, O>(
    store: &Store<T>,
    kind: &str,
    event: Event<W>,
    reader: &Reader<C, O>,
) -> bool
where
    W: Wire,
    T: PartialEq,
    E: Display,
    C: Fn(W::Object) -> Result<Option<T>, E>,
    O: Fn(Seen),
{
    let uid = |obj: &W| obj.meta().uid.clone();
    let seen = match &event {
        Event::Init => None,
        Event::InitApply(obj) => Some(Seen::Relisted { uid: uid(obj) }),
        Event::Apply(obj) | Event::Delete(obj) => Some(Seen::Changed { uid: uid(obj) }),
        Event::InitDone => Some(Seen::Listed),
    };
    let changed = update(store, kind, event, &reader.convert);
    // NB: after the update, so bookkeeping that waits for an object never sees it heard of but not yet stored.
    if let Some(seen) = seen {
        (reader.observe)(seen);
    }
    changed
}

/// Applies one watch event to `store`. An update that leaves the model as it was (a status or annotation the
/// model does not keep) changes nothing.
fn update<W, T, E>(
    store: &Store<T>,
    kind: &str,
    event: Event<W>,
    convert: &impl Fn(W::Object) -> Result<Option<T>, E>,
) -> bool
where
    W: Wire,
    T: PartialEq,
    E: Display,
{
    // NB: decode before taking the lock: readers (a snapshot build, a request) never wait for a decode.
    let (key, model, event) = match event {
        Event::Init => {
            store.lock().relist = Some(BTreeMap::new());
            return false;
        }
        Event::InitDone => {
            let mut s = store.lock();
            s.items = s.relist.take().unwrap_or_default();
            s.synced = true;
            s.generation += 1;
            return true;
        }
        Event::Delete(obj) => {
            let Some(key) = key(obj.meta()) else {
                return false;
            };
            let mut s = store.lock();
            let removed = s.items.remove(&key).is_some();
            s.generation += u64::from(removed);
            return removed;
        }
        Event::InitApply(obj) => (key(obj.meta()), obj, Stage::Relist),
        Event::Apply(obj) => (key(obj.meta()), obj, Stage::Live),
    };
    let Some(key) = key else {
        warn!(%kind, "skipping an object without a name");
        return false;
    };
    let model = decode(kind, &key, model, convert);
    let mut s = store.lock();
    match (event, model) {
        (Stage::Relist, Some(t)) => {
            s.relist
                .get_or_insert_with(BTreeMap::new)
                .insert(key, Arc::new(t));
            false
        }
        (Stage::Relist, None) => false,
        (Stage::Live, Some(t)) if s.items.get(&key).is_some_and(|old| **old == t) => false,
        (Stage::Live, Some(t)) => {
            s.items.insert(key, Arc::new(t));
            s.generation += 1;
            true
        }
        (Stage::Live, None) => {
            let removed = s.items.remove(&key).is_some();
            s.generation += u64::from(removed);
            removed
        }
    }
}

enum Stage {
    Relist,
    Live,
}

/// Store behaviour every reader of PVs relies on, checked with each reader's own model.
#[cfg(test)]
pub(crate) mod checks {
    use k8s_openapi::api::core::v1::PersistentVolume;
    use serde_json::json;

    use super::*;

    /// A guarded object from its JSON, as the watch hands it over.
    pub(crate) fn object<K: Resource + DeserializeOwned>(value: serde_json::Value) -> Guarded<K> {
        serde_json::from_str(&value.to_string()).expect("a guarded object")
    }

    /// An object as the PV index's watch hands it over: its text.
    pub(crate) fn text<K>(value: serde_json::Value) -> Text<K> {
        serde_json::from_str(&value.to_string()).expect("an object's text")
    }

    /// A reader's conversion of PVs into its model, to check the store with.
    pub(crate) struct PvModel<C>(pub C);

    impl<T: PartialEq, E: Display, C: Fn(PersistentVolume) -> Result<T, E>> PvModel<C> {
        /// An object that cannot be read is skipped; a relist replaces the store at `InitDone`.
        pub(crate) fn malformed_pvs_are_skipped_and_a_relist_replaces_the_store(&self) {
            let reader = models(&self.0);
            let store = Store::<T>::new();
            let apply_pv = |event| apply(&store, "PV", event, &reader);
            let ok = || {
                object::<PersistentVolume>(
                    json!({"metadata": {"name": "good"}, "spec": {"capacity": {"storage": "1Gi"}}}),
                )
            };
            let bad =
                object(json!({"metadata": {"name": "bad"}, "spec": {"capacity": "not a map"}}));
            apply_pv(Event::Init);
            apply_pv(Event::InitApply(ok()));
            apply_pv(Event::InitApply(bad));
            assert!(!store.synced());
            assert!(apply_pv(Event::InitDone));
            assert!(store.synced());
            assert_eq!(
                store.read(|items| items.keys().cloned().collect::<Vec<_>>()),
                ["good"]
            );
            assert!(apply_pv(Event::Delete(ok())));
            assert!(store.is_empty());
        }

        /// An update that changes only what the model does not keep (metadata) changes nothing and wakes no one.
        pub(crate) fn an_update_that_leaves_the_model_as_it_was_changes_nothing(&self) {
            let reader = models(&self.0);
            let store = Store::<T>::new();
            let pv = |version: &str, size: &str| {
                let meta = json!({"name": "pv1", "resourceVersion": version,
                              "annotations": {"example.com/seen": version}});
                Event::Apply(object::<PersistentVolume>(
                    json!({"metadata": meta, "spec": {"capacity": {"storage": size}}}),
                ))
            };
            let apply_pv = |event| apply(&store, "PV", event, &reader);
            assert!(apply_pv(pv("1", "1Gi")), "a new PV is a change");
            let seen = store.generation();
            assert!(
                !apply_pv(pv("2", "1Gi")),
                "only metadata the model ignores changed"
            );
            assert_eq!(store.generation(), seen);
            assert!(apply_pv(pv("3", "2Gi")), "the capacity changed");
            let unreadable = || {
                Event::Apply(object::<PersistentVolume>(
                    json!({"metadata": {"name": "pv1"}, "spec": {"capacity": "x"}}),
                ))
            };
            assert!(apply_pv(unreadable()), "an unreadable update drops the PV");
            assert!(!apply_pv(unreadable()), "nothing left to drop");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
    use serde_json::json;

    use super::checks::{PvModel, object};
    use super::*;

    #[test]
    fn a_malformed_object_keeps_its_metadata_and_the_rest_of_its_list_decodes() {
        let body = json!({"metadata": {}, "items": [
            {"metadata": {"name": "good", "uid": "u1"}, "spec": {"capacity": {"storage": "1Gi"}}},
            {"metadata": {"name": "bad", "uid": "u2"}, "spec": {"capacity": "not a map"}},
            {"metadata": {"name": "after", "uid": "u3"}},
        ]});
        let list: kube::core::ObjectList<Guarded<PersistentVolume>> =
            serde_json::from_slice(body.to_string().as_bytes()).expect("the list decodes");
        let names: Vec<_> = list
            .items
            .iter()
            .map(|g| g.meta().name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["good", "bad", "after"]);
        assert!(list.items[0].0.is_ok() && list.items[2].0.is_ok());
        let invalid = list.items[1]
            .0
            .as_ref()
            .expect_err("the malformed PV is an error");
        assert_eq!(invalid.metadata.uid.as_deref(), Some("u2"));
        assert!(invalid.error.contains("invalid type"), "{}", invalid.error);
        // Not even metadata: the list fails, as it did with kube's guard.
        let broken = json!({"metadata": {}, "items": [{"metadata": "nope"}]}).to_string();
        assert!(
            serde_json::from_str::<kube::core::ObjectList<Guarded<PersistentVolume>>>(&broken)
                .is_err()
        );
    }

    fn pod(namespace: &str, name: &str) -> Guarded<Pod> {
        object(
            json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")}}),
        )
    }

    /// A PV's capacity as text: the model of the tests below.
    fn capacity(pv: PersistentVolume) -> Result<String, String> {
        let spec = pv.spec.ok_or("no spec")?;
        let storage = spec.capacity.and_then(|c| c.get("storage").cloned());
        storage.map(|q| q.0).ok_or_else(|| "no capacity".into())
    }

    #[test]
    fn same_named_pods_in_two_namespaces_are_kept_apart() {
        let (store, keep) = (Store::<Pod>::new(), objects());
        for ns in ["a", "b"] {
            assert!(apply(&store, "Pod", Event::Apply(pod(ns, "web-0")), &keep));
        }
        assert_eq!(store.len(), 2);
        assert!(store.get("a/web-0").is_some() && store.get("b/web-0").is_some());
        assert!(apply(
            &store,
            "Pod",
            Event::Delete(pod("a", "web-0")),
            &keep
        ));
        let left: Vec<_> = store
            .all()
            .into_iter()
            .map(|p| p.metadata.namespace)
            .collect();
        assert_eq!(left, [Some("b".to_string())]);
    }

    #[test]
    fn same_named_pods_in_two_namespaces_survive_a_relist() {
        let (store, keep) = (Store::<Pod>::new(), objects());
        apply(&store, "Pod", Event::Init, &keep);
        for ns in ["a", "b"] {
            apply(&store, "Pod", Event::InitApply(pod(ns, "web-0")), &keep);
        }
        assert!(apply(&store, "Pod", Event::InitDone, &keep));
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn objects_are_kept_without_their_managed_fields() {
        let (store, keep) = (Store::<Node>::new(), objects());
        let managed = json!([{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                              "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]);
        let node = object::<Node>(
            json!({"metadata": {"name": "node-1", "labels": {"zone": "a"}, "managedFields": managed}}),
        );
        apply(&store, "Node", Event::Apply(node), &keep);
        let kept = store.get("node-1").expect("kept");
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(
            kept.metadata.labels,
            Some([("zone".into(), "a".into())].into())
        );
    }

    #[test]
    fn cluster_scoped_objects_are_found_by_name() {
        let (store, keep) = (Store::<Node>::new(), objects());
        let node = || object::<Node>(json!({"metadata": {"name": "node-1"}}));
        apply(&store, "Node", Event::Apply(node()), &keep);
        assert!(store.get("node-1").is_some());
        assert!(apply(&store, "Node", Event::Delete(node()), &keep));
        assert!(store.get("node-1").is_none());
    }

    #[test]
    fn malformed_objects_are_skipped_and_a_relist_replaces_the_store() {
        PvModel(capacity).malformed_pvs_are_skipped_and_a_relist_replaces_the_store();
    }

    #[test]
    fn an_object_the_model_refuses_is_skipped() {
        let (store, reader) = (Store::<String>::new(), models(capacity));
        let refused = object(json!({"metadata": {"name": "refused"}, "spec": {}}));
        apply(&store, "PV", Event::Init, &reader);
        apply(&store, "PV", Event::InitApply(refused), &reader);
        assert!(apply(&store, "PV", Event::InitDone, &reader));
        assert!(store.synced() && store.is_empty());
    }

    #[test]
    fn an_update_that_leaves_the_model_as_it_was_changes_nothing() {
        PvModel(capacity).an_update_that_leaves_the_model_as_it_was_changes_nothing();
    }

    #[test]
    fn an_object_passed_over_is_not_kept_and_drops_what_was_kept() {
        let store = Store::<Pod>::new();
        let reader = Reader {
            convert: |p: Pod| Ok::<_, Infallible>(p.metadata.labels.is_some().then_some(p)),
            observe: |_| {},
        };
        let labelled = object(
            json!({"metadata": {"name": "web-0", "namespace": "a", "labels": {"app": "web"}}}),
        );
        assert!(apply(&store, "Pod", Event::Apply(labelled), &reader));
        assert!(
            apply(&store, "Pod", Event::Apply(pod("a", "web-0")), &reader),
            "no longer kept: dropped"
        );
        assert!(store.is_empty());
        assert!(!apply(
            &store,
            "Pod",
            Event::Apply(pod("a", "web-0")),
            &reader
        ));
    }

    #[test]
    fn observe_hears_every_object_after_the_store_has_it() {
        let store = Store::<Pod>::new();
        let heard = RefCell::new(Vec::new());
        let reader = Reader {
            convert: |p: Pod| {
                Ok::<_, Infallible>((p.metadata.namespace.as_deref() == Some("a")).then_some(p))
            },
            observe: |seen| {
                let stored = store.len();
                heard.borrow_mut().push((seen, stored));
            },
        };
        apply(&store, "Pod", Event::Init, &reader);
        apply(&store, "Pod", Event::InitApply(pod("a", "r")), &reader);
        apply(&store, "Pod", Event::InitDone, &reader);
        apply(&store, "Pod", Event::Apply(pod("a", "w")), &reader);
        apply(&store, "Pod", Event::Apply(pod("b", "x")), &reader);
        apply(&store, "Pod", Event::Delete(pod("a", "w")), &reader);
        let uid = |n: &str| Some(format!("uid-{n}"));
        assert_eq!(
            heard.into_inner(),
            [
                (Seen::Relisted { uid: uid("r") }, 0),
                (Seen::Listed, 1),
                (Seen::Changed { uid: uid("w") }, 2),
                (Seen::Changed { uid: uid("x") }, 2),
                (Seen::Changed { uid: uid("w") }, 1),
            ]
        );
    }
}
