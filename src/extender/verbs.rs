//! The two extender verbs as pure functions from a decoded request and a snapshot to a response value.
//!
//! `evaluate` yields a verdict per candidate node; `filter` and `prioritize` shape those into the wire results.
//! Node labels come from the request in `Nodes` mode and from the snapshot's Node cache in `NodeNames` mode.
//! Survivors are always returned in the input form, in input order, and only names from the input.

use std::collections::BTreeMap;

use super::decide::{PodClaims, Verdict};
use super::model::Strategy;
use super::score::Scorer;
use super::snapshot::Snapshot;
use super::wire::{ExtenderArgs, ExtenderFilterResult, HostPriority, NodeListOut, WireNode};

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
            .map(|n| claims.decide_node(snap.node(n)))
            .collect(),
        (None, None) => Vec::new(),
    }
}

/// Node-and-claim checks a request may cost and still be decided on the thread that read it: 5,000 nodes with 10
/// claims each, about a millisecond.
const LIGHT_CHECKS: usize = 50_000;

/// Whether deciding `args` is cheap enough for the thread that read it: the work grows with the candidates times
/// the pod's claims, and a small body can still name thousands of claims.
pub fn light(args: &ExtenderArgs) -> bool {
    let nodes = match (&args.nodes, &args.node_names) {
        (Some(nodes), _) => nodes.len(),
        (None, Some(names)) => names.len(),
        (None, None) => 0,
    };
    nodes.saturating_mul(args.pod.claim_names().len().max(1)) <= LIGHT_CHECKS
}

/// The candidate names of `args`, in input order (the nodes win when both forms are set, as in `verdicts`).
fn input_names(args: &ExtenderArgs) -> impl Iterator<Item = &String> {
    let (nodes, names): (&[WireNode], &[String]) = match (&args.nodes, &args.node_names) {
        (Some(nodes), _) => (nodes, &[]),
        (None, Some(names)) => (&[], names),
        (None, None) => (&[], &[]),
    };
    nodes.iter().map(|n| &n.name).chain(names)
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
        .cloned()
        .zip(verdicts(args, &claims))
        .collect();
    (named, claims.has_delayed())
}

/// Whether `snap` lacks a claim, class or PV that `args`' pod refers to (see `PodClaims::cache_miss`).
pub fn cache_miss(args: &ExtenderArgs, snap: &Snapshot) -> bool {
    PodClaims::resolve(snap, args.pod.namespace(), &args.pod.claim_names()).cache_miss()
}

/// Survivors keep their place in the input (`Nodes` or `NodeNames`, `[]` when none); the names of rejected nodes
/// move into the reason maps rather than being copied.
pub fn filter(args: ExtenderArgs, snap: &Snapshot) -> (ExtenderFilterResult, FilterCounts) {
    let claims =
        PodClaims::resolve(snap, args.pod.namespace(), &args.pod.claim_names()).verdicts_only();
    let mut result = ExtenderFilterResult::default();
    let mut counts = FilterCounts::default();
    // Fast path: with nothing to decide every node survives as given, without even a lookup.
    let trivial = claims.is_trivial();
    let mut keep = |verdict: Verdict, name: &mut String| match verdict {
        Verdict::Fit(_) => {
            counts.passed += 1;
            true
        }
        Verdict::Failed(reason) => {
            counts.failed += 1;
            result.failed_nodes.insert(std::mem::take(name), reason);
            false
        }
        Verdict::Unresolvable(reason) => {
            counts.unresolvable += 1;
            let name = std::mem::take(name);
            result.failed_and_unresolvable_nodes.insert(name, reason);
            false
        }
    };
    let (nodes, names) = match (args.nodes, args.node_names) {
        (Some(mut nodes), _) => {
            nodes.retain_mut(|n| trivial || keep(claims.decide(Some(&n.labels)), &mut n.name));
            (Some(nodes), None)
        }
        (None, names) => {
            let mut names = names.unwrap_or_default();
            names.retain_mut(|n| trivial || keep(claims.decide_node(snap.node(n)), n));
            (None, Some(names))
        }
    };
    if trivial {
        counts.passed = nodes.as_ref().map_or(0, Vec::len) + names.as_ref().map_or(0, Vec::len);
    }
    result.nodes = nodes.map(|nodes| NodeListOut {
        items: nodes.into_iter().map(|n| n.raw).collect(),
    });
    result.node_names = names;
    (result, counts)
}

/// Verdicts are scored as they come and dropped at once, so a request holds no per-node allocations.
pub fn prioritize(args: &ExtenderArgs, snap: &Snapshot, strategy: Strategy) -> Vec<HostPriority> {
    let claims = PodClaims::resolve(snap, args.pod.namespace(), &args.pod.claim_names());
    let mut scorer = Scorer::new(snap, strategy, claims.has_delayed());
    match (&args.nodes, &args.node_names) {
        (Some(nodes), _) => nodes
            .iter()
            .for_each(|n| scorer.add(&claims.decide(Some(&n.labels)))),
        (None, Some(names)) => names
            .iter()
            .for_each(|n| scorer.add(&claims.decide_node(snap.node(n)))),
        (None, None) => {}
    }
    input_names(args)
        .zip(scorer.finish())
        .map(|(host, score)| HostPriority {
            host: host.clone(),
            score,
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extender::fixtures::{local_class, node, pv, pvc};

    fn snapshot(pv: crate::extender::fixtures::PvBuilder) -> Snapshot {
        Snapshot::new(
            [pv.build()],
            [pvc("data").build()],
            [local_class("local")],
            // NB: the cache's n1 is in zone b; the requests below say zone a.
            [node("n1").label("zone", "b").build()],
        )
    }

    fn nodes_request() -> ExtenderArgs {
        let body = r#"{"Pod":{"metadata":{"name":"p","namespace":"default"},"spec":{"volumes":[
            {"name":"d","persistentVolumeClaim":{"claimName":"data"}}]}},
            "Nodes":{"items":[{"metadata":{"name":"n1","labels":{"kubernetes.io/hostname":"n1","zone":"a"}}}]}}"#;
        ExtenderArgs::from_slice(body.as_bytes()).expect("valid args")
    }

    /// `nodes` candidate names and a pod with `claims` claim volumes.
    fn names_request(nodes: usize, claims: usize) -> ExtenderArgs {
        let volumes: Vec<serde_json::Value> = (0..claims)
            .map(|i| serde_json::json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": "data"}}))
            .collect();
        let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
        let body = serde_json::json!({"Pod": {"metadata": {"name": "p"}, "spec": {"volumes": volumes}},
                                      "NodeNames": names});
        // NB: more names than the default --max-nodes; `light` must still hold past it.
        let limits = crate::extender::wire::DecodeLimits {
            max_nodes: 100_000,
            ..Default::default()
        };
        ExtenderArgs::decode_within(body.to_string().into(), &limits).expect("valid args")
    }

    #[rstest::rstest]
    #[case::five_thousand_names_one_claim(5_000, 1, true)]
    #[case::no_claims_counts_as_one(50_000, 0, true)]
    #[case::ten_claims_on_five_thousand(5_000, 10, true)]
    #[case::eleven_claims_on_five_thousand(5_000, 11, false)]
    #[case::a_small_body_naming_a_thousand_claims(100, 1_000, false)]
    #[case::more_names_than_the_bound(50_001, 1, false)]
    fn a_decision_is_light_by_candidates_times_claims(
        #[case] nodes: usize,
        #[case] claims: usize,
        #[case] light_: bool,
    ) {
        assert_eq!(light(&names_request(nodes, claims)), light_);
    }

    fn fits(args: &ExtenderArgs, snap: &Snapshot) -> bool {
        let (verdicts, _) = evaluate(args, snap, false);
        matches!(verdicts.as_slice(), [(name, Verdict::Fit(_))] if name == "n1")
    }

    #[test]
    fn in_nodes_mode_a_zonal_pv_is_matched_against_the_requests_labels() {
        let snap = snapshot(pv("zonal").affinity(vec![vec![("zone", "In", vec!["a"])]]));
        let args = nodes_request();
        assert!(fits(&args, &snap));
        assert!(args.nodes.as_ref().expect("nodes")[0].labels.is_built());
    }

    #[test]
    fn a_pv_pinned_by_hostname_never_builds_the_requests_label_map() {
        let snap = snapshot(pv("pinned").on_node("n1"));
        let args = nodes_request();
        assert!(fits(&args, &snap));
        assert!(!args.nodes.as_ref().expect("nodes")[0].labels.is_built());
    }
}
