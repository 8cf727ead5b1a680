//! How a plan that would wipe or publish gets what it must not act without (`cadence::fill`): every PV of the
//! cluster (the PV index once the admission policy is confirmed, or one list of every PV), and StorageClasses
//! listed just now when it reads a class's policy. Each is planned again on what it got.

use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use tracing::warn;

use super::{Agent, Facts};
use crate::plan::cadence::{Fill, RunSoFar};
use crate::plan::{self, existing::Pvs};

impl Agent {
    /// `plan` (made with `cluster`), planned again with every PV as `fill` says (`index`: the PV index), and again
    /// on StorageClasses listed now when it reads a class's policy; with the PVs it was planned with (`None`: not
    /// every PV, so no wipe and no new PV this pass). A failed list marks `progress` to retry.
    pub(super) async fn fill(
        &mut self,
        facts: &Facts<'_>,
        (mut plan, mut cluster): (plan::Plan, Option<Pvs>),
        index: &Pvs,
        fill: Fill,
        progress: &mut RunSoFar,
    ) -> (plan::Plan, Option<Pvs>) {
        match fill {
            // NB: planned again on the narrow index once the policy is confirmed; widened otherwise (the wide
            // list's sync wakes the loop, which plans then).
            Fill::CheckPolicy if self.narrow_still_safe().await => {
                cluster = Some(index.clone());
                plan = self.plan(facts, cluster.as_deref().map(Vec::as_slice));
            }
            // NB: planned again on a list taken just now; the actions of the plan without it are dropped.
            Fill::ListEvery => match self.list_all_pvs().await {
                Ok(all) => {
                    self.s.pvs.listed();
                    cluster = Some(Arc::new(all.into_iter().map(Arc::new).collect()));
                    plan = self.plan(facts, cluster.as_deref().map(Vec::as_slice));
                }
                Err(error) => {
                    warn!(error = %format!("{error:#}"), "failed to list PersistentVolumes; no wipe and no new PV this pass");
                    progress.retry = true;
                }
            },
            Fill::CheckPolicy | Fill::Planned | Fill::Wait => {}
        }
        // NB: a new PV takes its class's reclaim policy and mount options, and a disk whose PV went is wiped or kept
        // by its class's policy; StorageClasses are polled, not watched, and a class may have been made again with
        // another policy since the last list (however recent), so such a plan is made again on a list taken now. A
        // failed list leaves the last one, as a broken watch would.
        if plan.reads_class_policy()
            && self.s.classes_polled.lists_before_acting()
            && self.relist_classes().await
        {
            let classes = self.class_facts();
            let facts = Facts {
                classes: &classes,
                ..*facts
            };
            plan = self.plan(&facts, cluster.as_deref().map(Vec::as_slice));
        }
        (plan, cluster)
    }

    /// One paginated list of every PV in the cluster: the fallback when a PV the agent created has not reached
    /// the PV index for a long time (`pvindex::AWAIT_LIMIT`).
    async fn list_all_pvs(&self) -> anyhow::Result<Vec<PersistentVolume>> {
        let api: Api<PersistentVolume> = Api::all(self.s.client.clone());
        let mut found = Vec::new();
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = api
                .list(&lp)
                .await
                .context("failed to list PersistentVolumes")?;
            found.extend(page.items);
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }
        Ok(found)
    }

    /// Lists the StorageClasses now (a consistent read), into the store the poller keeps; false when the list
    /// failed (logged).
    async fn relist_classes(&self) -> bool {
        let (params, reader) = (
            kube::api::ListParams::default(),
            crate::watch::objects::<StorageClass>(),
        );
        match crate::watch::list_into(&self.s.client, &params, &self.s.classes, &reader).await {
            Ok(_) => true,
            Err(error) => {
                warn!(error = %crate::logging::error_text(&error), "failed to list StorageClasses; planning on the last list");
                false
            }
        }
    }
}
