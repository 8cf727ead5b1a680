//! The agent's own Node: its facts for the planner, the `localpv disks` mark on it (`plan::polled`), the startup
//! taint taken off it (`plan::taint`), and Warning Events on it (a lost ledger, `plan::lost`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use kube::runtime::events::EventType as KubeEventType;
use tracing::{debug, error, info};

use super::Agent;
use crate::disk::Discovery;
use crate::effects::{self, Reason};
use crate::plan::{self, NodeFacts, polled};

impl Agent {
    /// Lists the LocalDisks at once when `localpv disks` marked the Node since the last pass (`polled::DisksMark`):
    /// an operator changed one.
    pub(super) fn look_for_disk_marks(&mut self) {
        let node = self.s.nodes.get_shared(&self.s.node);
        let mark = node.and_then(|n| polled::mark_of(&n));
        if self.disks_mark.see(mark.clone()) {
            debug!(mark = ?mark, "the Node says a LocalDisk changed; listing them");
            self.s.disks_polled.poke();
        }
    }

    pub(super) fn node_facts(&self) -> Option<NodeFacts> {
        let node = self.s.nodes.get(&self.s.node)?;
        let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
        Some(NodeFacts {
            name: self.s.node.clone(),
            hostname_label: labels.get(crate::contract::HOSTNAME_LABEL).cloned(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            labels,
        })
    }

    /// Removes the startup taint (`removeNodeNotReadyTaint`) from this node, if it has it. True when the patch
    /// failed or met a Node changed meanwhile: try again soon (the Node's watch event wakes the loop too).
    pub(super) async fn remove_startup_taint(&mut self) -> bool {
        let Some(key) = self.s.config.startup_taint() else {
            return false;
        };
        let Some(node) = self.s.nodes.get_shared(&self.s.node) else {
            return false;
        };
        let Some(patch) = plan::taint::removal_due(&node, key, self.untainted_from.as_deref())
        else {
            return false;
        };
        let version = node.metadata.resource_version.clone();
        let patched = self
            .writer
            .writer
            .merge_patch::<Node>(None, &self.s.node, &patch)
            .await;
        match patched {
            Ok(effects::Applied::Done(_)) => {
                info!(node = %self.s.node, taint = key, "removed the startup taint: the node's disks are published");
                self.untainted_from = version;
                false
            }
            Ok(effects::Applied::Moot) | Err(_) => true,
        }
    }

    /// The first pass without a ledger file: when a PV of this node shows the ledger was lost, says so loudly and
    /// stores every disk without a PV as `Published` (wiped or held before it is published: `plan::lost`). False
    /// when that could not be stored (the pass acts on nothing).
    pub(super) async fn settle_missing_ledger(
        &mut self,
        node: &NodeFacts,
        found: &Discovery,
        existing: &[Arc<PersistentVolume>],
    ) -> bool {
        let Some(presumed) = plan::lost::presumed(node, found, existing) else {
            return self.book.settle_missing(&[]);
        };
        let message = format!(
            "no disk ledger in {} although PVs of this node exist: it was lost (state directory deleted, node \
             re-imaged, or the ledger was on a wiped disk). The {} disks without a PV are of unknown state: each \
             is wiped before it is published (reclaim policy Delete) or held for an operator (Retain)",
            self.s.opts.state_dir.display(),
            presumed.len()
        );
        error!(state_dir = %self.s.opts.state_dir.display(), disks = presumed.len(), "{message}");
        if !self.book.settle_missing(&presumed) {
            return false;
        }
        self.warn_on_node(Reason::LedgerMissing, &message).await;
        true
    }

    /// A Warning Event on this node's Node object.
    pub(super) async fn warn_on_node(&self, reason: Reason, message: &str) {
        let uid = self.s.nodes.get(&self.s.node).and_then(|n| n.metadata.uid);
        self.writer
            .on_node(
                &self.s.node,
                uid.as_deref(),
                KubeEventType::Warning,
                reason,
                message,
            )
            .await;
    }
}
