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
//!
//! NB: over 500 lines because the wire forms (`Guarded`, `Text`), the store and the watch loop are one contract:
//! how an object read from the API server becomes the model every reader sees. Its tests live in `watch/tests.rs`
//! and `watch/checks.rs`, the polled store in `watch/poll.rs`.

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
pub use poll::{Cadence, Polled, list_into};

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
/// (for readers' tests, and for a writer that puts its own answers into a polled store).
#[cfg(any(test, feature = "node"))]
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

/// Replaces `store`'s content with `objects` as a completed list does (`Init`, one `InitApply` each, `InitDone`):
/// a poller's list, and a store seeded from what a clean stop left (`agent::warmstart`).
pub(crate) fn replace<W, T, E, C, O>(
    store: &Store<T>,
    kind: &str,
    objects: impl IntoIterator<Item = W>,
    reader: &Reader<C, O>,
) where
    W: Wire,
    T: PartialEq,
    E: Display,
    C: Fn(W::Object) -> Result<Option<T>, E>,
    O: Fn(Seen),
{
    apply_wire(store, kind, Event::<W>::Init, reader);
    for object in objects {
        apply_wire(store, kind, Event::InitApply(object), reader);
    }
    apply_wire(store, kind, Event::<W>::InitDone, reader);
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
pub(crate) mod checks;

#[cfg(test)]
mod tests;
