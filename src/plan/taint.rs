//! The startup taint (`removeNodeNotReadyTaint`): a taint the node is created with (Karpenter's `startupTaints`,
//! a kubelet's `--register-with-taints`) keeps pods off it until the agent has published the node's disks; the
//! agent then removes it. Pure: from the Node the watch shows, the merge patch that removes the taint, or nothing.
//!
//! ```text
//!  Discovery, this node's PVs, the plan's held disks ─> all_published() ─> the node is ready (once true, for good)
//!  own Node (watch store) ─┐
//!  taint key (config)     ─┼─> removal() ─> Some(merge patch: resourceVersion guard + the other taints) | None
//!  version last patched   ─┴─> removal_due(): not twice from the same version of the Node
//! ```
//!
//! The patch replaces the whole taint list, so it carries the Node's `resourceVersion`: a Node changed since the
//! watch showed it (another taint added or removed meanwhile) gets 409 and nothing is lost; the next pass tries
//! again with the new Node.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use serde_json::{Value, json};

use super::{HoldReason, Unpublished};
use crate::disk::Discovery;

/// Whether every disk `found` shows is published (a PV of this node at its path, whatever its phase) or held for a
/// reason no pass settles soon (a wipe to run, an operator to act, a StorageClass to create). Not while a class's
/// directory could not be read, nor while a disk waits only for its volume id to read back or for the PV at its
/// path to be deleted: the next passes publish those.
///
/// NB: a disk published this pass counts from the next pass on, once its PV is in `existing` (seen through the
/// watch, as the scheduler sees it).
pub fn all_published(
    found: &Discovery,
    existing: &[Arc<PersistentVolume>],
    unpublished: &[Unpublished],
) -> bool {
    if !found.failed_classes.is_empty() {
        return false;
    }
    let pv_paths: BTreeSet<&Path> = existing
        .iter()
        .filter_map(|pv| pv.spec.as_ref()?.local.as_ref())
        .map(|local| Path::new(&local.path))
        .collect();
    let held: BTreeSet<&Path> = unpublished
        .iter()
        .filter(|u| {
            !matches!(
                u.reason,
                HoldReason::AwaitingVolumeId | HoldReason::AwaitingDeletion
            )
        })
        .map(|u| u.host_path.as_path())
        .collect();
    found
        .disks
        .iter()
        .all(|d| pv_paths.contains(d.host_path.as_path()) || held.contains(d.host_path.as_path()))
}

/// The merge patch that removes every taint with `key` from `node` (whatever its effect or value), keeping the
/// others in their order; `None` when the Node has no such taint, or no resourceVersion to guard the patch with.
pub fn removal(node: &Node, key: &str) -> Option<Value> {
    let taints = node.spec.as_ref()?.taints.as_deref()?;
    if !taints.iter().any(|t| t.key == key) {
        return None;
    }
    let version = node.metadata.resource_version.as_deref()?;
    let kept: Vec<_> = taints.iter().filter(|t| t.key != key).collect();
    // NB: `null` deletes the field; an empty list would be kept as `[]`, which kubectl shows as a change.
    let taints = if kept.is_empty() {
        Value::Null
    } else {
        json!(kept)
    };
    Some(json!({"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}))
}

/// The removal patch to send now: `removal`, unless the last one was sent from this very version of the Node
/// (`untainted_from`). NB: no second patch until the watch shows the Node as it is after the first.
pub fn removal_due(node: &Node, key: &str, untainted_from: Option<&str>) -> Option<Value> {
    let patch = removal(node, key)?;
    (node.metadata.resource_version.as_deref() != untainted_from).then_some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures;

    const KEY: &str = "sig-storage-local-static-provisioner/agent-not-ready";

    fn node(taints: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "42"},
            "spec": {"taints": taints},
        }))
        .expect("a Node")
    }

    #[test]
    fn the_startup_taint_is_removed_and_every_other_taint_kept_in_order() {
        let n = node(json!([
            {"key": "a", "effect": "NoSchedule"},
            {"key": KEY, "effect": "NoSchedule"},
            {"key": KEY, "value": "x", "effect": "NoExecute"},
            {"key": "b", "value": "v", "effect": "PreferNoSchedule"},
        ]));
        assert_eq!(
            removal(&n, KEY),
            Some(
                json!({"metadata": {"resourceVersion": "42"}, "spec": {"taints": [
                    {"key": "a", "effect": "NoSchedule"},
                    {"key": "b", "value": "v", "effect": "PreferNoSchedule"},
                ]}})
            )
        );
    }

    #[test]
    fn the_last_taint_removed_deletes_the_list() {
        let n = node(json!([{"key": KEY, "effect": "NoSchedule"}]));
        assert_eq!(
            removal(&n, KEY),
            Some(json!({"metadata": {"resourceVersion": "42"}, "spec": {"taints": null}}))
        );
    }

    #[test]
    fn a_node_without_the_taint_is_not_patched() {
        assert_eq!(
            removal(&node(json!([{"key": "a", "effect": "NoSchedule"}])), KEY),
            None
        );
        assert_eq!(removal(&node(Value::Null), KEY), None);
        assert_eq!(removal(&Node::default(), KEY), None);
    }

    #[test]
    fn a_node_without_a_resource_version_is_not_patched_unguarded() {
        let mut n = node(json!([{"key": KEY, "effect": "NoSchedule"}]));
        n.metadata.resource_version = None;
        assert_eq!(removal(&n, KEY), None);
    }

    #[test]
    fn no_second_patch_until_the_watch_shows_the_node_after_the_first() {
        let n = node(json!([{"key": KEY, "effect": "NoSchedule"}]));
        assert_eq!(removal_due(&n, KEY, None), removal(&n, KEY), "never sent");
        assert_eq!(
            removal_due(&n, KEY, Some("41")),
            removal(&n, KEY),
            "sent from an older Node"
        );
        assert_eq!(removal_due(&n, KEY, Some("42")), None, "sent from this one");
        assert_eq!(removal_due(&node(Value::Null), KEY, None), None, "no taint");
    }

    fn published_now(world: &fixtures::World) -> bool {
        let existing: Vec<_> = world.existing.iter().cloned().map(Arc::new).collect();
        all_published(&world.found, &existing, &world.plan().unpublished)
    }

    #[test]
    fn a_node_is_ready_once_every_found_disk_has_a_pv() {
        let mut world =
            fixtures::World::new(vec![fixtures::disk("a"), fixtures::disk("b")], vec![]);
        assert!(!published_now(&world), "no PV yet");
        world.settle();
        assert!(published_now(&world), "{:?}", world.existing);
    }

    #[test]
    fn a_disk_held_for_a_wipe_or_an_operator_does_not_hold_the_node_back() {
        let mut world = fixtures::World::new(vec![fixtures::disk("a")], vec![]);
        world.classes[0].storage_class = None;
        assert!(
            published_now(&world),
            "NoStorageClass: nothing a pass can do"
        );
    }

    #[test]
    fn a_class_whose_directory_could_not_be_read_holds_the_node_back() {
        let mut world = fixtures::World::new(vec![], vec![]);
        world.found.failed_classes.push(crate::disk::ClassFailure {
            class: "local-storage".into(),
            mount_dir: "/mnt/disks".into(),
            message: "permission denied".into(),
        });
        assert!(!published_now(&world));
    }
}
