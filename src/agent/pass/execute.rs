//! Runs a plan's steps: one action at a time, or a batch of ledger states and creates (`cadence::Run`), each
//! reported as a `cadence::Step` (retry or halt on failure) for the pass to record.

use std::path::PathBuf;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use tracing::{info, warn};

use super::Agent;
use super::record::OwnerChange;
use crate::effects;
use crate::plan::cadence::Step;
use crate::plan::{Action, DiskState, OwnedPv};

/// PV creates in flight at once: enough to hide the round trip, few enough not to crowd the API server's
/// per-client limits.
const CREATE_CONCURRENCY: usize = 16;

impl Agent {
    /// Applies one action.
    pub(super) async fn execute(&mut self, action: Action) -> Step {
        let (retry, halt) = (Step::api, Step::ledger);
        match action {
            Action::CreatePv(pv) => self.publish_batch(vec![Action::CreatePv(pv)]).await,
            Action::DeletePv(r) => retry(self.writer.delete(&r).await.is_ok()),
            Action::DeleteUnclaimedPv { pv, disk } => match self.writer.delete(&pv).await {
                Ok(true) => halt(self.book.set_disk_state(&disk, DiskState::Clean)),
                Ok(false) => Step::Done,
                Err(_) => Step::Retry,
            },
            Action::AdoptPv { name, patch } | Action::RecordIdentity { name, patch } => {
                retry(self.writer.patch(&name, &patch).await.is_ok())
            }
            Action::SetDiskState { key, state } => halt(self.book.set_disk_state(&key, state)),
            Action::RecordOwner { uid, pv } => halt(
                self.book
                    .update_owners(vec![OwnerChange::Record { uid, pv }]),
            ),
            Action::ForgetOwner { uid } => {
                halt(self.book.update_owners(vec![OwnerChange::Forget { uid }]))
            }
            Action::OwnersRecorded => halt(self.book.update_owners(vec![OwnerChange::Recorded])),
            Action::Wipe(order) => retry(self.start_wipe(*order).await),
            Action::TagVolume { host_path, path } => match self.host.tag_volume(&path) {
                Ok(id) => {
                    self.probed.forget(&host_path);
                    self.tagged = true;
                    info!(path = %host_path.display(), volume_id = %id, "stored the volume id");
                    Step::Done
                }
                Err(error) => {
                    warn!(path = %host_path.display(), error = %crate::host::error_chain(&error), "failed to store the volume id");
                    Step::Retry
                }
            },
            Action::Event(e) => {
                self.writer.event(&e).await;
                Step::Done
            }
        }
    }

    /// Applies a run of `SetDiskState` and `CreatePv` actions: every ledger state in one write, then every name as
    /// being created in one write (so a lost response, timeout or crash still lets the next pass recognise the PV:
    /// `Owners::creating`), then the creates, at most [`CREATE_CONCURRENCY`] at once, then every UID as ours in one
    /// write. Nothing is created unless the writes before it were stored.
    pub(super) async fn publish_batch(&mut self, batch: Vec<Action>) -> Step {
        let mut states = Vec::new();
        let mut pvs = Vec::new();
        for action in batch {
            match action {
                Action::SetDiskState { key, state } => states.push((key, state)),
                Action::CreatePv(pv) => pvs.push(*pv),
                _ => {}
            }
        }
        let owned: Vec<OwnedPv> = pvs.iter().map(owned_pv).collect();
        if !self.book.remember_before_create(&states, &owned) {
            return Step::Halt;
        }
        let writer = &self.writer;
        let results: Vec<(usize, Result<Option<String>, effects::Failed>)> =
            futures::stream::iter(pvs.iter().enumerate())
                .map(|(i, pv)| async move { (i, writer.create(pv).await) })
                .buffer_unordered(CREATE_CONCURRENCY)
                .collect()
                .await;
        let mut created_all = true;
        let mut created = Vec::new();
        for (i, result) in results {
            match result {
                Ok(Some(uid)) => created.push((uid, owned[i].clone())),
                Ok(None) => {}
                Err(effects::Failed) => created_all = false,
            }
        }
        let recorded = self.book.update_owners(
            created
                .iter()
                .map(|(uid, pv)| OwnerChange::Record {
                    uid: uid.clone(),
                    pv: pv.clone(),
                })
                .collect(),
        );
        for (uid, pv) in &created {
            self.s.pvs.created(&pv.name, uid);
        }
        Step::batch(created_all, recorded)
    }
}

/// What the ledger remembers of a PV the agent creates.
fn owned_pv(pv: &PersistentVolume) -> OwnedPv {
    OwnedPv {
        name: pv.metadata.name.clone().unwrap_or_default(),
        path: pv
            .spec
            .as_ref()
            .and_then(|s| s.local.as_ref())
            .map(|l| PathBuf::from(&l.path))
            .unwrap_or_default(),
    }
}
