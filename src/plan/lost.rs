//! A ledger that is gone while PVs this agent published on the node still exist (issue 39, point 0c): the state
//! directory was wiped, the node re-imaged with its data disks kept, or the ledger lived on a disk that was wiped.
//! The disks it remembered as dirty are then indistinguishable from new ones, and a new PV would hand the next
//! claim the last tenant's files.
//!
//! So the first pass after the agent found no ledger file, when a PV labelled for this node (one it published or
//! adopted) exists, treats every found disk without a PV at its path as `Published`: nobody can say whether a
//! claim used it. Under reclaim policy Delete it is wiped before it is published (the LocalDisk and the disk list
//! say so), under Retain it is held for an operator. A fresh install (no PV of this node) and a migration from the
//! reference provisioner (its PVs carry no localpv label) start as before.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::identity;
use super::pv::{Origin, PvView};
use super::{DiskState, NodeFacts};
use crate::disk::Discovery;

/// What the lost ledger is taken to have said: `None` when nothing shows it was lost (no PV of ours on the node).
pub fn presumed(
    node: &NodeFacts,
    found: &Discovery,
    existing: &[Arc<PersistentVolume>],
) -> Option<Vec<(String, DiskState)>> {
    let views: Vec<PvView> = existing
        .iter()
        .filter_map(|pv| PvView::read(pv, node))
        .collect();
    if !views.iter().any(|v| v.origin == Origin::Ours) {
        return None;
    }
    let with_pv: BTreeSet<&Path> = views.iter().map(|v| v.path.as_path()).collect();
    Some(
        found
            .disks
            .iter()
            .filter(|d| !with_pv.contains(d.host_path.as_path()))
            .map(|d| (identity::disk_key(d), DiskState::Published))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::*;

    fn discovery(disks: Vec<crate::disk::Disk>) -> Discovery {
        Discovery {
            disks: disks.into_iter().map(Arc::new).collect(),
            ..Discovery::default()
        }
    }

    #[test]
    fn a_fresh_node_presumes_nothing() {
        let found = discovery(vec![disk("vol1")]);
        assert_eq!(presumed(&node(), &found, &[]), None);
    }

    #[test]
    fn reference_pvs_alone_are_a_migration_not_a_lost_ledger() {
        let found = discovery(vec![disk("vol1"), disk("vol2")]);
        let reference = Pv::test()
            .reference("local-volume-provisioner-n1-abc")
            .build();
        assert_eq!(presumed(&node(), &found, &[Arc::new(reference)]), None);
    }

    #[test]
    fn with_a_pv_of_ours_every_disk_without_a_pv_is_presumed_published() {
        let found = discovery(vec![disk("vol1"), disk("vol2"), disk("vol3")]);
        let ours = Arc::new(Pv::test().for_disk(&disk("vol1")).bound().build());
        assert_eq!(
            presumed(&node(), &found, &[ours]),
            Some(vec![
                ("fs-uuid:uuid-vol2".to_string(), DiskState::Published),
                ("fs-uuid:uuid-vol3".to_string(), DiskState::Published)
            ])
        );
    }
}
