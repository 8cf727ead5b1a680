//! Why a pod is Pending, in our words, for the pod's own Events.
//!
//! kube-scheduler runs its VolumeBinding filter before any extender, so when no node has a fitting local PV the
//! extender is never called and the pod's FailedScheduling event carries only the in-tree summary ("didn't find
//! available persistent volumes to bind"). The Lease holder therefore looks at pending pods itself and, for those
//! whose delayed local claims fit no node, adds one Event with the reason per node, grouped. Pure: the shell in
//! `cleanup::run` decides when to look and publishes the message.

use std::collections::BTreeMap;

use super::decide::{PodClaims, Verdict};
use super::snapshot::Snapshot;
use super::wire::Pod;

/// Nodes listed by name per reason before the rest are only counted.
const NAMES_PER_REASON: usize = 3;

/// The explanation for a pod no node can take, or `None` when some node fits or the pod has no delayed static
/// claims (then it is not ours to explain).
pub fn explain_pending(snap: &Snapshot, pod: &Pod) -> Option<String> {
    let claims = PodClaims::resolve(snap, pod.namespace(), &pod.claim_names()).verdicts_only();
    if !claims.has_delayed() {
        return None;
    }
    // Most pending pods are only waiting their turn in the scheduler's queue, and the Lease holder looks at every
    // pending pod each tick: the first node that fits ends the look (in the snapshot's order; names are sorted
    // only for the message).
    let mut by_reason: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for node in snap.node_names() {
        match claims.decide_node(snap.node(node)) {
            Verdict::Fit(_) => return None,
            Verdict::Failed(reason) | Verdict::Unresolvable(reason) => {
                by_reason.entry(reason).or_default().push(node)
            }
        }
    }
    if by_reason.is_empty() {
        return None;
    }
    let parts: Vec<String> = by_reason
        .into_iter()
        .map(|(reason, mut nodes)| {
            nodes.sort_unstable();
            let shown = nodes
                .iter()
                .take(NAMES_PER_REASON)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            let more = nodes.len().saturating_sub(NAMES_PER_REASON);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!("{shown}{more}: {reason}")
        })
        .collect();
    Some(format!(
        "no node has free local PVs for this pod: {} (`localpv explain` shows every node)",
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extender::fixtures::{PvBuilder, PvcBuilder, local_class, node, pv, pvc};

    fn snapshot(pvs: Vec<PvBuilder>, pvcs: Vec<PvcBuilder>) -> Snapshot {
        Snapshot::new(
            pvs.into_iter().map(PvBuilder::build),
            pvcs.into_iter().map(PvcBuilder::build),
            [local_class("local")],
            ["n1", "n2", "n3", "n4", "n5"].map(|n| node(n).build()),
        )
    }

    fn pod(claims: &[&str]) -> Pod {
        let volumes: Vec<_> = claims
            .iter()
            .map(|c| serde_json::json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"volumes": volumes}
        }))
        .expect("a wire pod")
    }

    #[test]
    fn a_pod_that_fits_anywhere_is_not_explained() {
        let snap = snapshot(
            vec![
                pv("small").on_node("n1").capacity("5Gi"),
                pv("big").on_node("n5").capacity("100Gi"),
            ],
            vec![pvc("data").request("50Gi")],
        );
        assert_eq!(explain_pending(&snap, &pod(&["data"])), None);
    }

    #[test]
    fn a_pod_without_delayed_local_claims_is_not_ours() {
        let snap = snapshot(vec![], vec![pvc("data").class("other")]);
        assert_eq!(explain_pending(&snap, &pod(&["data"])), None);
        assert_eq!(explain_pending(&snap, &pod(&[])), None);
    }

    #[test]
    fn reasons_are_grouped_with_at_most_three_names_each() {
        let snap = snapshot(
            vec![
                pv("small").on_node("n1").capacity("5Gi"),
                pv("taken").on_node("n2").bound(),
            ],
            vec![pvc("data").request("50Gi")],
        );
        assert_eq!(
            explain_pending(&snap, &pod(&["data"])).as_deref(),
            Some(
                "no node has free local PVs for this pod: \
                 n2: claim default/data: all 1 PVs of class local are bound; \
                 n1: claim default/data: largest free PV is 5Gi, claim asks 50Gi; \
                 n3, n4, n5: claim default/data: no PV of class local on node \
                 (`localpv explain` shows every node)"
            )
        );
    }
}
