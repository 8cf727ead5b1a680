//! The agent's PV writes, in the planner's terms, through the one writer (`effects::Writer`): it decides what a
//! 404/409 means, counts and logs; this module only turns plan values into its requests and keeps the agent's
//! own info lines (`created PV`, `deleted PV`).

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::runtime::events::EventType as KubeEventType;
use tracing::info;

use crate::effects::{self, Applied, Failed, Reason, Writer};
use crate::plan::{EventType, MetaPatch, PvEvent, PvRef};

pub struct PvWriter {
    pub writer: Writer,
}

impl PvWriter {
    /// Creates a PV. `Ok(Some(uid))` with the UID the API server gave it, `Ok(None)` when the name exists already
    /// (that PV is not necessarily ours), `Err` for a failure worth retrying.
    pub async fn create(&self, pv: &PersistentVolume) -> Result<Option<String>, Failed> {
        match self.writer.create(pv).await? {
            Applied::Done(created) => {
                let name = pv.metadata.name.as_deref().unwrap_or_default();
                let path = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.local.as_ref())
                    .map_or("", |l| l.path.as_str());
                let uid = created.metadata.uid.unwrap_or_default();
                info!(pv = %name, uid = %uid, path, "created PV");
                Ok(Some(uid))
            }
            Applied::Moot => Ok(None),
        }
    }

    /// Deletes a PV only if it is still the object planned for (UID and resourceVersion preconditions).
    /// `Ok(true)` when this request deleted it, `Ok(false)` when moot (gone, or changed), `Err` to retry.
    pub async fn delete(&self, r: &PvRef) -> Result<bool, Failed> {
        let pre = effects::exactly(&r.uid, Some(&r.resource_version));
        let deleted = self
            .writer
            .delete::<PersistentVolume>(None, &r.name, Some(pre))
            .await?
            .is_done();
        if deleted {
            info!(pv = %r.name, "deleted PV");
        }
        Ok(deleted)
    }

    /// Merges labels/annotations into a PV, guarded by UID (and resourceVersion when the patch carries one).
    /// `Ok(true)` when applied, `Ok(false)` when moot (PV gone or changed), `Err` for a retryable failure.
    pub async fn patch(&self, name: &str, patch: &MetaPatch) -> Result<bool, Failed> {
        let applied = self
            .writer
            .merge_patch::<PersistentVolume>(None, name, &patch.to_merge_patch())
            .await?;
        Ok(applied.is_done())
    }

    /// A planned Event on a PV.
    pub async fn event(&self, e: &PvEvent) {
        let type_ = match e.type_ {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        };
        self.on_pv(&e.pv.name, Some(&e.pv.uid), type_, e.reason, &e.message)
            .await;
        if let Some(claim) = &e.claim {
            let regarding = effects::reference::<PersistentVolumeClaim>(
                Some(&claim.namespace),
                &claim.name,
                claim.uid.as_deref(),
            );
            let note = format!("PV {}: {}", e.pv.name, e.message);
            let _ = self.writer.event(&regarding, type_, e.reason, &note).await;
        }
    }

    /// An Event on a PV from the agent's own outcomes (a finished wipe). A failed publish is logged and counted.
    pub async fn on_pv(
        &self,
        name: &str,
        uid: Option<&str>,
        type_: KubeEventType,
        reason: Reason,
        note: &str,
    ) {
        let regarding = effects::reference::<PersistentVolume>(None, name, uid);
        let _ = self.writer.event(&regarding, type_, reason, note).await;
    }

    /// An Event on this agent's Node (a rejected configuration, the missing inventory).
    pub async fn on_node(
        &self,
        node: &str,
        uid: Option<&str>,
        type_: KubeEventType,
        reason: Reason,
        note: &str,
    ) {
        let regarding = effects::reference::<Node>(None, node, uid);
        let _ = self.writer.event(&regarding, type_, reason, note).await;
    }
}
