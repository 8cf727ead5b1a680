//! Applies the planner's API actions idempotently: `AlreadyExists` on create, `NotFound` on delete and failed
//! preconditions count as done (the next pass sees the truth), everything else is logged, counted and retried by
//! the next pass.

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder};
use tracing::{debug, info, warn};

use super::metrics::{ApiOutcome, ApiVerb, Metrics};
use crate::contract::NODE_MANAGER;
use crate::logging::error_text;
use crate::plan::{EventType, MetaPatch, PvEvent, PvRef};

pub struct Writer {
    pub pvs: Api<PersistentVolume>,
    pub recorder: Recorder,
    pub metrics: Metrics,
}

/// Whether an API error means "already done / no longer applicable" rather than a failure.
fn moot(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404 || s.code == 409)
}

impl Writer {
    fn count(&self, verb: ApiVerb, result: &Result<(), kube::Error>) -> bool {
        let outcome = match result {
            Ok(()) => ApiOutcome::Ok,
            Err(e) if moot(e) => ApiOutcome::Moot,
            Err(_) => ApiOutcome::Error,
        };
        self.metrics.api(verb, outcome);
        !matches!(outcome, ApiOutcome::Error)
    }

    /// Creates a PV. `Ok(Some(uid))` with the UID the API server gave it, `Ok(None)` when the name exists already
    /// (that PV is not necessarily ours), `Err` for a failure worth retrying.
    pub async fn create(&self, pv: &PersistentVolume) -> Result<Option<String>, ()> {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let pp = PostParams {
            field_manager: Some(NODE_MANAGER.into()),
            ..Default::default()
        };
        let result = self.pvs.create(&pp, pv).await;
        let uid = result.as_ref().ok().and_then(|c| c.metadata.uid.clone());
        let result = result.map(drop);
        match &result {
            Ok(()) => {
                let path = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.local.as_ref())
                    .map_or("", |l| l.path.as_str());
                info!(pv = %name, uid = uid.as_deref().unwrap_or_default(), path, "created PV")
            }
            Err(e) if moot(e) => debug!(pv = %name, "PV already exists"),
            Err(error) => warn!(pv = %name, error = %error_text(error), "failed to create PV"),
        }
        match (self.count(ApiVerb::Create, &result), result.is_ok()) {
            (true, true) => Ok(uid),
            (true, false) => Ok(None),
            (false, _) => Err(()),
        }
    }

    /// Deletes a PV only if it is still the object planned for (UID and resourceVersion preconditions).
    /// `Ok(true)` when this request deleted it, `Ok(false)` when moot (gone, or changed), `Err` to retry.
    pub async fn delete(&self, r: &PvRef) -> Result<bool, ()> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(r.uid.clone()),
                resource_version: Some(r.resource_version.clone()),
            }),
            ..Default::default()
        };
        let result = self.pvs.delete(&r.name, &dp).await.map(drop);
        match &result {
            Ok(()) => info!(pv = %r.name, "deleted PV"),
            Err(e) if moot(e) => {
                debug!(pv = %r.name, error = %error_text(e), "PV gone or changed; not deleted")
            }
            Err(error) => warn!(pv = %r.name, error = %error_text(error), "failed to delete PV"),
        }
        match (self.count(ApiVerb::Delete, &result), result.is_ok()) {
            (true, applied) => Ok(applied),
            (false, _) => Err(()),
        }
    }

    /// Merges labels/annotations into a PV, guarded by UID (and resourceVersion when the patch carries one).
    /// Returns `Ok(true)` when applied, `Ok(false)` when moot (PV gone or changed), `Err` for a retryable failure.
    pub async fn patch(&self, name: &str, patch: &MetaPatch) -> Result<bool, ()> {
        let pp = PatchParams {
            field_manager: Some(NODE_MANAGER.into()),
            ..Default::default()
        };
        let result = self
            .pvs
            .patch(name, &pp, &Patch::Merge(patch.to_merge_patch()))
            .await
            .map(drop);
        match &result {
            Ok(()) => debug!(pv = %name, "patched PV"),
            Err(e) if moot(e) => {
                debug!(pv = %name, error = %error_text(e), "PV gone or changed; not patched")
            }
            Err(error) => warn!(pv = %name, error = %error_text(error), "failed to patch PV"),
        }
        let ok = self.count(ApiVerb::Patch, &result);
        match (ok, result.is_ok()) {
            (true, applied) => Ok(applied),
            (false, _) => Err(()),
        }
    }

    pub async fn event(&self, e: &PvEvent) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolume".into()),
            name: Some(e.pv.name.clone()),
            uid: Some(e.pv.uid.clone()).filter(|u| !u.is_empty()),
            ..Default::default()
        };
        let type_ = match e.type_ {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        };
        self.publish(type_, e.reason, &e.message, &reference).await;
    }

    pub async fn publish(
        &self,
        type_: KubeEventType,
        reason: &str,
        message: &str,
        reference: &ObjectReference,
    ) {
        // NB: the event text is `note`, as in events.k8s.io: a `message` field would repeat the log line's own
        // `message` key in JSON output.
        let object = reference.name.as_deref().unwrap_or_default();
        match type_ {
            KubeEventType::Warning => warn!(object, reason, note = message, "event"),
            KubeEventType::Normal => info!(object, reason, note = message, "event"),
        }
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(message.chars().take(1000).collect()),
            action: reason.to_string(),
            secondary: None,
        };
        let result = self.recorder.publish(&ev, reference).await;
        if let Err(error) = &result {
            warn!(error = %error_text(error), reason, "failed to publish event");
        }
        self.count(ApiVerb::Event, &result);
    }
}
