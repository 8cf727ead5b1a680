//! Maximum bipartite matching of a pod's delayed claims to PVs, starting from the in-tree binder's greedy order.

use std::collections::HashSet;

use super::VolId;

pub(super) fn merged(a: &[VolId], b: &[VolId]) -> Vec<VolId> {
    let mut all: Vec<VolId> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Greedy in claim order (each takes its smallest free candidate), then augmenting paths for the claims greedy
/// left out. Returns the PV of each claim, the first claim left unmatched if any, and whether greedy alone
/// matched all. Pods have few claims, so ownership is a linear scan rather than a map.
pub(super) fn maximum_matching(
    candidates: &[&[VolId]],
) -> (Vec<Option<VolId>>, Option<usize>, bool) {
    let mut chosen: Vec<Option<VolId>> = vec![None; candidates.len()];
    let mut missed = Vec::new();
    for (claim, cands) in candidates.iter().enumerate() {
        match cands.iter().find(|&&v| !chosen.contains(&Some(v))) {
            Some(&v) => chosen[claim] = Some(v),
            None => missed.push(claim),
        }
    }
    let mut unmatched = None;
    let greedy_complete = missed.is_empty();
    for claim in missed {
        let mut seen = HashSet::new();
        if !augment(claim, candidates, &mut chosen, &mut seen) && unmatched.is_none() {
            unmatched = Some(claim);
        }
    }
    (chosen, unmatched, greedy_complete)
}

fn augment(
    claim: usize,
    candidates: &[&[VolId]],
    chosen: &mut [Option<VolId>],
    seen: &mut HashSet<VolId>,
) -> bool {
    for &v in candidates[claim] {
        if !seen.insert(v) {
            continue;
        }
        let free = match chosen.iter().position(|c| *c == Some(v)) {
            None => true,
            Some(other) => augment(other, candidates, chosen, seen),
        };
        if free {
            chosen[claim] = Some(v);
            return true;
        }
    }
    false
}
