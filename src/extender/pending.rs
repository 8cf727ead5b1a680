//! Why a pod is Pending, in our words, for the pod's own Events.
//!
//! kube-scheduler runs its VolumeBinding filter before any extender, so when no node has a fitting local PV the
//! extender is never called and the pod's FailedScheduling event carries only the in-tree summary ("didn't find
//! available persistent volumes to bind"). The Lease holder therefore looks at pending pods itself and, for those
//! whose delayed local claims fit no node, adds one Event with the reason per node, grouped. Pure: the shell in
//! `cleanup::run` decides when to look and publishes the message.

use std::collections::BTreeMap;

use super::decide::Verdict;
use super::snapshot::Snapshot;
use super::verbs;
use super::wire::{ExtenderArgs, Pod};

/// Nodes listed by name per reason before the rest are only counted.
const NAMES_PER_REASON: usize = 3;

/// The explanation for a pod no node can take, or `None` when some node fits or the pod has no delayed static
/// claims (then it is not ours to explain).
pub fn explain_pending(snap: &Snapshot, pod: Pod) -> Option<String> {
    let mut names: Vec<String> = snap.node_names().map(String::from).collect();
    if names.is_empty() {
        return None;
    }
    names.sort();
    let args = ExtenderArgs {
        pod,
        nodes: None,
        node_names: Some(names),
    };
    let (verdicts, delayed) = verbs::evaluate(&args, snap, false);
    if !delayed || verdicts.iter().any(|(_, v)| matches!(v, Verdict::Fit(_))) {
        return None;
    }
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (node, verdict) in &verdicts {
        let reason = match verdict {
            Verdict::Failed(r) | Verdict::Unresolvable(r) => r.as_str(),
            _ => continue,
        };
        by_reason.entry(reason).or_default().push(node);
    }
    let parts: Vec<String> = by_reason
        .into_iter()
        .map(|(reason, nodes)| {
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
