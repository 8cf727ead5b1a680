//! The two extender verbs as pure functions from a decoded request and a snapshot to a response value.
//!
//! `evaluate` yields a verdict per candidate node; `filter` and `prioritize` shape those into the wire results.
//! Node labels come from the request in `Nodes` mode and from the snapshot's Node cache in `NodeNames` mode.
//! Survivors are always returned in the input form, in input order, and only names from the input.

use std::collections::BTreeMap;

use super::decide::{PodClaims, Verdict};
use super::model::Strategy;
use super::score::score;
use super::snapshot::Snapshot;
use super::wire::{ExtenderArgs, ExtenderFilterResult, HostPriority, NodeListOut};

/// Counts of a filter answer, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterCounts {
    pub passed: usize,
    pub failed: usize,
    pub unresolvable: usize,
}

/// A verdict per candidate node of `args`, in input order, and whether the pod has delayed claims.
pub fn evaluate(args: &ExtenderArgs, snap: &Snapshot) -> (Vec<(String, Verdict)>, bool) {
    let claims = PodClaims::resolve(snap, args.pod.namespace(), &args.pod.claim_names());
    let verdicts = match (&args.nodes, &args.node_names) {
        (Some(nodes), _) => nodes
            .iter()
            .map(|n| (n.name.clone(), claims.decide(Some(&n.labels))))
            .collect(),
        (None, Some(names)) => names
            .iter()
            .map(|n| (n.clone(), claims.decide(snap.node_labels(n))))
            .collect(),
        (None, None) => Vec::new(),
    };
    (verdicts, claims.has_delayed())
}

pub fn filter(args: ExtenderArgs, snap: &Snapshot) -> (ExtenderFilterResult, FilterCounts) {
    let (verdicts, _) = evaluate(&args, snap);
    let mut result = ExtenderFilterResult::default();
    let mut counts = FilterCounts::default();
    let mut passed = vec![false; verdicts.len()];
    for (i, (name, verdict)) in verdicts.into_iter().enumerate() {
        match verdict {
            Verdict::Fit(_) => {
                passed[i] = true;
                counts.passed += 1;
            }
            Verdict::Failed(reason) => {
                counts.failed += 1;
                result.failed_nodes.insert(name, reason);
            }
            Verdict::Unresolvable(reason) => {
                counts.unresolvable += 1;
                result.failed_and_unresolvable_nodes.insert(name, reason);
            }
        }
    }
    match (args.nodes, args.node_names) {
        (Some(nodes), _) => {
            let items = nodes
                .into_iter()
                .zip(&passed)
                .filter(|(_, p)| **p)
                .map(|(n, _)| n.raw)
                .collect();
            result.nodes = Some(NodeListOut { items });
        }
        (None, names) => {
            let names = names.unwrap_or_default();
            result.node_names = Some(
                names
                    .into_iter()
                    .zip(&passed)
                    .filter(|(_, p)| **p)
                    .map(|(n, _)| n)
                    .collect(),
            );
        }
    }
    (result, counts)
}

pub fn prioritize(args: &ExtenderArgs, snap: &Snapshot, strategy: Strategy) -> Vec<HostPriority> {
    let (verdicts, has_delayed) = evaluate(args, snap);
    score(snap, strategy, has_delayed, &verdicts)
        .into_iter()
        .map(|(host, score)| HostPriority { host, score })
        .collect()
}

/// PV names chosen per claim on each fitting node: `node -> namespace/claim -> pv`.
pub fn assignments(
    snap: &Snapshot,
    verdicts: &[(String, Verdict)],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (node, verdict) in verdicts {
        if let Verdict::Fit(fit) = verdict {
            let chosen = fit
                .assignments
                .iter()
                .map(|a| (a.claim.clone(), snap.volume(a.volume).name.clone()))
                .collect();
            out.insert(node.clone(), chosen);
        }
    }
    out
}
