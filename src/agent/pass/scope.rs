//! The PV watch's scope within a pass (`plan::narrow`, read by `agent::admission`): set before the first list,
//! narrowed when the policy has held, checked before a pass that would wipe or publish on a narrow watch, and
//! widened (with an Event on the Node) when the policy is no longer the one narrowed on.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::Agent;
use crate::agent::admission::{Dirs, Guard};
use crate::effects::Reason;
use crate::plan::narrow;

impl Agent {
    /// The agent's discovery directories, as its PVs spell their paths.
    fn discovery_dirs(&self) -> Dirs {
        let classes = &self.s.config.classes;
        Dirs {
            paths: classes.iter().map(|c| c.host_dir.clone()).collect(),
            shared: classes.iter().any(|c| !c.selector.is_empty()),
        }
    }

    /// Before the first list: narrow at once on a recorded policy (checked before the first wipe or new PV), else
    /// every PV.
    pub(super) fn start_scope(&mut self) {
        if let Some(name) = self.s.opts.admission_policy.clone() {
            let guard = Guard::start(self.s.client.clone(), name, &self.s.opts.state_dir);
            self.admission = Some(guard);
        }
        self.set_scope();
    }

    fn set_scope(&self) {
        let narrow = self.admission.as_ref().is_some_and(Guard::is_narrow);
        self.s.pvs.set_narrow(narrow);
        self.s.metrics.pv_watch_narrow.set(i64::from(narrow));
    }

    /// A narrow index may stand in for every PV only while the policy it narrowed on is in force: true when it
    /// is; otherwise the watch goes wide (it lists every PV, and its sync wakes the loop) and the Node gets an
    /// Event.
    pub(super) async fn narrow_still_safe(&mut self) -> bool {
        let dirs = self.discovery_dirs();
        let Some(guard) = self.admission.as_mut() else {
            return false;
        };
        let Err(why) = guard.verify(&dirs).await else {
            return true;
        };
        self.set_scope();
        let message = format!(
            "{why}; the agent watches every PV of the cluster again and plans no wipe and no new PV until it has \
             listed them (docs/architecture.md, \"Foreign PVs and fleet cost\")"
        );
        self.warn_on_node(Reason::AdmissionPolicyNotInForce, &message)
            .await;
        false
    }

    /// While wide, with the index complete: narrow when the policy has held long enough and no PV of the index
    /// would be missed.
    pub(super) async fn maybe_narrow(&mut self, index: &Arc<Vec<Arc<PersistentVolume>>>) {
        let dirs = self.discovery_dirs();
        let node = self.s.node.clone();
        let Some(guard) = self.admission.as_mut() else {
            return;
        };
        let blockers = || {
            index
                .iter()
                .filter(|pv| narrow::blocks(pv, &node, &dirs.paths))
                .count()
        };
        if guard.look_if_due(&dirs, blockers).await {
            self.set_scope();
        }
    }
}
