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

/// Verdicts in input order; names are the caller's to pair (`args.nodes` or `args.node_names`).
fn verdicts(args: &ExtenderArgs, claims: &PodClaims) -> Vec<Verdict> {
    let snap = claims.snapshot();
    match (&args.nodes, &args.node_names) {
        (Some(nodes), _) => nodes
            .iter()
            .map(|n| claims.decide(Some(&n.labels)))
            .collect(),
        (None, Some(names)) => names
            .iter()
            .map(|n| claims.decide(snap.node_labels(n)))
            .collect(),
        (None, None) => Vec::new(),
    }
}

fn input_names(args: &ExtenderArgs) -> Vec<String> {
    match (&args.nodes, &args.node_names) {
        (Some(nodes), _) => nodes.iter().map(|n| n.name.clone()).collect(),
        (None, names) => names.clone().unwrap_or_default(),
    }
}

/// A verdict per candidate node of `args`, in input order, and whether the pod has delayed claims. Without
/// `detail`, fits carry no assignments (enough for filter, and cheaper).
pub fn evaluate(
    args: &ExtenderArgs,
    snap: &Snapshot,
    detail: bool,
) -> (Vec<(String, Verdict)>, bool) {
    let mut claims = PodClaims::resolve(snap, args.pod.namespace(), &args.pod.claim_names());
    if !detail {
        claims = claims.verdicts_only();
    }
    let named = input_names(args)
        .into_iter()
        .zip(verdicts(args, &claims))
        .collect();
    (named, claims.has_delayed())
}

/// Whether `snap` lacks a claim, class or PV that `args`' pod refers to (see `PodClaims::cache_miss`).
pub fn cache_miss(args: &ExtenderArgs, snap: &Snapshot) -> bool {
    PodClaims::resolve(snap, args.pod.namespace(), &args.pod.claim_names()).cache_miss()
}

pub fn filter(args: ExtenderArgs, snap: &Snapshot) -> (ExtenderFilterResult, FilterCounts) {
    let claims =
        PodClaims::resolve(snap, args.pod.namespace(), &args.pod.claim_names()).verdicts_only();
    let mut result = ExtenderFilterResult::default();
    let mut counts = FilterCounts::default();
    let n = args
        .nodes
        .as_ref()
        .map(Vec::len)
        .or(args.node_names.as_ref().map(Vec::len))
        .unwrap_or(0);
    if claims.is_trivial() {
        // Fast path: nothing to decide, every node survives as given.
        counts.passed = n;
        return (survivors(args, &vec![true; n], result), counts);
    }
    let name = |i: usize| match (&args.nodes, &args.node_names) {
        (Some(nodes), _) => nodes[i].name.clone(),
        (None, names) => names.as_ref().map(|n| n[i].clone()).unwrap_or_default(),
    };
    let mut passed = vec![false; n];
    for (i, verdict) in verdicts(&args, &claims).into_iter().enumerate() {
        match verdict {
            Verdict::Fit(_) => {
                passed[i] = true;
                counts.passed += 1;
            }
            Verdict::Failed(reason) => {
                counts.failed += 1;
                result.failed_nodes.insert(name(i), reason);
            }
            Verdict::Unresolvable(reason) => {
                counts.unresolvable += 1;
                result.failed_and_unresolvable_nodes.insert(name(i), reason);
            }
        }
    }
    (survivors(args, &passed, result), counts)
}

/// The input nodes whose `passed` flag is set, in the input's form (`Nodes` or `NodeNames`, `[]` when none).
fn survivors(
    args: ExtenderArgs,
    passed: &[bool],
    mut result: ExtenderFilterResult,
) -> ExtenderFilterResult {
    match (args.nodes, args.node_names) {
        (Some(nodes), _) => {
            let items = nodes
                .into_iter()
                .zip(passed)
                .filter(|(_, p)| **p)
                .map(|(n, _)| n.raw)
                .collect();
            result.nodes = Some(NodeListOut { items });
        }
        (None, names) => {
            let names = names.unwrap_or_default().into_iter().zip(passed);
            result.node_names = Some(names.filter(|(_, p)| **p).map(|(n, _)| n).collect());
        }
    }
    result
}

pub fn prioritize(args: &ExtenderArgs, snap: &Snapshot, strategy: Strategy) -> Vec<HostPriority> {
    let (verdicts, has_delayed) = evaluate(args, snap, true);
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
                .map(|a| (a.claim.to_string(), snap.volume(a.volume).name.clone()))
                .collect();
            out.insert(node.clone(), chosen);
        }
    }
    out
}
