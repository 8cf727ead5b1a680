//! The one writer to the API server: every create, delete, patch and Event localpv sends goes through [`Writer`].
//!
//! ```text
//!  agent: plan (pure) ──> Action ──┐                         ┌─> Ok            -> Applied::Done(object)
//!  extender leader: plan ─> Action ┴─> Writer ── request ──> │   404 / 409     -> Applied::Moot  (already done,
//!                                       │ counts every answer  │                     or no longer ours to do)
//!                                       └ logs failures        └─> anything else -> Err(Failed)   (next pass retries)
//! ```
//!
//! Idempotence is decided here once: `AlreadyExists` on create, `NotFound` on delete and a failed precondition
//! (409) mean the step is already done or moot, never an error; the next pass sees the truth and plans again.
//! Object references for Events are built here too ([`reference`]), and Event reasons are the closed
//! [`Reason`] enum, so a spelling users filter on cannot drift.
//!
//! The writer owns no policy: which objects to write and in what order is the caller's plan; the writer only
//! applies one request, classifies its answer, logs and counts it.

pub mod reason;
#[cfg(test)]
pub(crate) mod scripted;
#[cfg(test)]
mod tests;

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use prometheus_client::encoding::EncodeLabelValue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

pub use self::reason::Reason;
use crate::logging::error_text;

/// Longest Event note sent; the API server rejects notes over 1 KiB.
const NOTE_CHARS: usize = 1000;

/// The kind of request, a bounded metric label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Verb {
    Create,
    Delete,
    Patch,
    Event,
}

/// How a request went, a bounded metric label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WriteOutcome {
    Ok,
    /// `AlreadyExists`, `NotFound`, or a failed precondition: the step was already done or is moot.
    Moot,
    Error,
}

/// Where the writer counts its requests (each shell has its own metrics).
pub trait Count: Send + Sync {
    fn request(&self, verb: Verb, outcome: WriteOutcome);
}

/// For writers whose requests are not counted.
pub struct Uncounted;

impl Count for Uncounted {
    fn request(&self, _: Verb, _: WriteOutcome) {}
}

/// What a request achieved when it did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied<T> {
    /// This request made the change; the object as the API server answered it.
    Done(T),
    /// Already done, or no longer applicable (gone, changed since it was planned): not an error.
    Moot,
}

impl<T> Applied<T> {
    pub fn is_done(&self) -> bool {
        matches!(self, Applied::Done(_))
    }
}

/// A request that failed in a way worth retrying (already logged and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("failed to write to the API server")]
pub struct Failed;

/// Whether an API error means "already done / no longer applicable" rather than a failure.
pub fn moot(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404 || s.code == 409)
}

/// The reference an Event names its object by. Cluster-scoped objects have no namespace; an empty UID is left
/// out (an Event must not claim a UID it does not know).
pub fn reference<K>(namespace: Option<&str>, name: &str, uid: Option<&str>) -> ObjectReference
where
    K: Resource<DynamicType = ()>,
{
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        namespace: namespace.map(str::to_owned),
        name: Some(name.to_owned()),
        uid: uid.filter(|u| !u.is_empty()).map(str::to_owned),
        ..Default::default()
    }
}

/// Preconditions that make a delete apply only to the exact object planned for: same UID, and when given, same
/// resourceVersion (an object changed since the plan read it is left alone).
pub fn exactly(uid: &str, resource_version: Option<&str>) -> Preconditions {
    Preconditions {
        uid: Some(uid.to_owned()),
        resource_version: resource_version.map(str::to_owned),
    }
}

/// Applies single requests for one reporter (`localpv-node` on a node, `localpv-cleanup` in the extender).
#[derive(Clone)]
pub struct Writer {
    client: Client,
    recorder: Recorder,
    field_manager: String,
    count: Arc<dyn Count>,
}

impl Writer {
    /// `controller` names the reporter of Events and is the field manager; `instance` tells replicas apart.
    pub fn new(client: Client, controller: &str, instance: &str, count: Arc<dyn Count>) -> Writer {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: Some(instance.to_owned()),
        };
        Writer {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            field_manager: controller.to_owned(),
            count,
        }
    }

    /// The same writer under another field manager (the agent's LocalDisks have one per node).
    pub fn with_field_manager(&self, field_manager: impl Into<String>) -> Writer {
        Writer {
            field_manager: field_manager.into(),
            ..self.clone()
        }
    }

    /// Requests for `K` in `namespace` (`None` for cluster-scoped kinds).
    ///
    /// NB: built from the kind's URL rather than `Api::namespaced`, which only accepts namespaced kinds at compile
    /// time; the writer serves both scopes with one set of methods.
    fn requests<K>(namespace: Option<&str>) -> kube::core::Request
    where
        K: Resource<DynamicType = ()>,
    {
        kube::core::Request::new(K::url_path(&(), namespace))
    }

    /// Sends one built request and decodes the object the API server answers with.
    async fn send<K>(
        &self,
        req: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        verb: &'static str,
    ) -> Result<K, kube::Error>
    where
        K: DeserializeOwned,
    {
        let mut req = req.map_err(kube::Error::BuildRequest)?;
        // The client's tracing names the request by this, as `Api` does.
        req.extensions_mut().insert(verb);
        self.client.request::<K>(req).await
    }

    /// Counts and logs one answer, and sorts it into done, moot or failed.
    fn settle<T>(
        &self,
        verb: Verb,
        kind: &str,
        name: &str,
        result: Result<T, kube::Error>,
    ) -> Result<Applied<T>, Failed> {
        let (outcome, settled) = match result {
            Ok(object) => {
                debug!(?verb, kind, name, "applied");
                (WriteOutcome::Ok, Ok(Applied::Done(object)))
            }
            Err(error) if moot(&error) => {
                debug!(?verb, kind, name, error = %error_text(&error), "already done or no longer applicable");
                (WriteOutcome::Moot, Ok(Applied::Moot))
            }
            Err(error) => {
                warn!(?verb, kind, name, error = %error_text(&error), "failed to write to the API server");
                (WriteOutcome::Error, Err(Failed))
            }
        };
        self.count.request(verb, outcome);
        settled
    }

    /// Creates `object` (in its own namespace when it has one). An existing object of that name is
    /// [`Applied::Moot`]: it is not necessarily the caller's, so callers that care compare UIDs.
    pub async fn create<K>(&self, object: &K) -> Result<Applied<K>, Failed>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let pp = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..Default::default()
        };
        let result = match serde_json::to_vec(object) {
            Ok(body) => {
                let req = Self::requests::<K>(object.meta().namespace.as_deref()).create(&pp, body);
                self.send(req, "create").await
            }
            Err(error) => Err(kube::Error::SerdeError(error)),
        };
        self.settle(Verb::Create, &K::kind(&()), &name, result)
    }

    /// Deletes an object, guarded by `preconditions` when given (see [`exactly`]). A missing object or a failed
    /// precondition is [`Applied::Moot`].
    pub async fn delete<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<Preconditions>,
    ) -> Result<Applied<()>, Failed>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
    {
        let dp = DeleteParams {
            preconditions,
            ..Default::default()
        };
        let result = match Self::requests::<K>(namespace).delete(name, &dp) {
            Ok(mut req) => {
                req.extensions_mut().insert("delete");
                self.client.request_status::<K>(req).await.map(drop)
            }
            Err(error) => Err(kube::Error::BuildRequest(error)),
        };
        self.settle(Verb::Delete, &K::kind(&()), name, result)
    }

    /// A JSON merge patch. Guards belong in the patch itself (`metadata.uid`, `metadata.resourceVersion`): the
    /// API server answers 409 when they no longer hold, which is [`Applied::Moot`].
    pub async fn merge_patch<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Applied<K>, Failed>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
    {
        self.merge_patch_of(namespace, name, None, patch).await
    }

    /// A JSON merge patch of the object's `status` subresource (guards as for [`Writer::merge_patch`]).
    pub async fn merge_patch_status<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Applied<K>, Failed>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
    {
        self.merge_patch_of(namespace, name, Some("status"), patch)
            .await
    }

    async fn merge_patch_of<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch: &serde_json::Value,
    ) -> Result<Applied<K>, Failed>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
    {
        let pp = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..Default::default()
        };
        let requests = Self::requests::<K>(namespace);
        let patch = Patch::Merge(patch);
        let req = match subresource {
            Some(sub) => requests.patch_subresource(sub, name, &pp, &patch),
            None => requests.patch(name, &pp, &patch),
        };
        let result = self.send(req, "patch").await;
        self.settle(Verb::Patch, &K::kind(&()), name, result)
    }

    /// Server-side apply of `object` with this writer's field manager. Without `force` a field another manager
    /// owns is a conflict (409, [`Applied::Moot`]), never a takeover.
    pub async fn apply<K>(&self, object: &K, force: bool) -> Result<Applied<K>, Failed>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let mut pp = PatchParams::apply(&self.field_manager);
        pp.force = force;
        let namespace = object.meta().namespace.as_deref();
        let req = Self::requests::<K>(namespace).patch(&name, &pp, &Patch::Apply(object));
        let result = self.send(req, "patch").await;
        self.settle(Verb::Patch, &K::kind(&()), &name, result)
    }

    /// Publishes an Event about `regarding` (build it with [`reference`]) and logs it. A failure is logged,
    /// counted and returned; callers that must not forget an Event try again later.
    pub async fn event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: Reason,
        note: &str,
    ) -> Result<(), Failed> {
        self.event_as(regarding, type_, reason, reason.action(), note)
            .await
    }

    /// As [`Writer::event`] with its own `action`. NB: Events with the same regarding object, reason and action
    /// within a few minutes become one series that keeps the first note: one reason that says different things
    /// (why a recovery is held) needs an action per thing said.
    pub async fn event_as(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: Reason,
        action: &str,
        note: &str,
    ) -> Result<(), Failed> {
        // NB: the event text is `note`, as in events.k8s.io: a `message` field would repeat the log line's own
        // `message` key in JSON output.
        let object = regarding.name.as_deref().unwrap_or_default();
        let reason_text = reason.as_str();
        match type_ {
            EventType::Warning => warn!(object, reason = reason_text, note, "event"),
            EventType::Normal => info!(object, reason = reason_text, note, "event"),
        }
        let ev = Event {
            type_,
            reason: reason_text.to_owned(),
            note: Some(note.chars().take(NOTE_CHARS).collect()),
            action: action.to_owned(),
            secondary: None,
        };
        let result = self.recorder.publish(&ev, regarding).await;
        let outcome = match &result {
            Ok(()) => WriteOutcome::Ok,
            Err(error) if moot(error) => WriteOutcome::Moot,
            Err(error) => {
                warn!(error = %error_text(error), reason = reason_text, object, "failed to publish event");
                WriteOutcome::Error
            }
        };
        self.count.request(Verb::Event, outcome);
        result.map_err(|_| Failed)
    }
}
