//! The placement decision: may this pod run on this node, with which PVs, and if not, why not.
//!
//! ```text
//!  pod volumes ──resolve──> PodClaims { bound: claim -> PV, delayed: static WFFC claims, problem }
//!                                 │ per node (labels)
//!                                 v
//!   bound PVs' node affinity ── delayed claims: candidates now / after wiping ── greedy (in-tree order)
//!                                 └── maximum bipartite matching when greedy misses ──> Verdict
//! ```
//!
//! Matching follows the in-tree VolumeBinding rules (REFERENCE section 6). The in-tree binder sorts claims by
//! request and lets each take the smallest matching PV; that can miss an assignment that exists (a small claim
//! taking the one PV a pickier claim needed), so when it fails we augment its partial assignment into a maximum
//! matching. When the greedy choice works we keep it: the scheduler's binder will then pick the same PVs.
//!
//! Pure: no I/O, no clocks; everything comes from the `Snapshot`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::labels::Labels;
use super::model::{Claim, Phase, Volume, format_bytes};
use super::snapshot::{ClassIndex, Snapshot, VolId};

/// One delayed claim served by one PV on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// `namespace/name` of the claim.
    pub claim: Arc<str>,
    pub class: Arc<str>,
    pub request: u128,
    pub volume: VolId,
}

/// The pod fits the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fit {
    /// Ordered as the in-tree binder processes claims (request ascending).
    pub assignments: Vec<Assignment>,
    /// Per class: matching free PVs left on the node once the pod has its share.
    pub spare: BTreeMap<Arc<str>, usize>,
    /// The in-tree binder's greedy order finds no assignment here; only the full matching does. kube-scheduler's
    /// own VolumeBinding filter then rejects the node before the extender is asked.
    pub greedy_misses: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Fit(Fit),
    /// Not now, but PVs being wiped will make it fit: kube-scheduler may retry (`FailedNodes`).
    Failed(String),
    /// No PV on this node can ever serve the pod (`FailedAndUnresolvableNodes`).
    Unresolvable(String),
}

#[derive(Debug)]
struct Delayed<'s> {
    claim: &'s Claim,
    key: Arc<str>,
    class: Arc<str>,
    index: Option<&'s ClassIndex>,
    /// A PV whose claimRef names this claim and that passes capacity, mode and deletion: it wins outright.
    prebound: Option<VolId>,
}

/// The claims of one pod, looked up once per request and then decided per node.
#[derive(Debug)]
pub struct PodClaims<'s> {
    snap: &'s Snapshot,
    bound: Vec<(String, VolId)>,
    delayed: Vec<Delayed<'s>>,
    /// Whether fits carry assignments and spare counts (prioritize, explain) or only the verdict (filter).
    detail: bool,
    /// A pod-wide reason no node can pass (missing claim or class, ...).
    /// kube-scheduler checked these objects exist before calling us, so a miss is our watch lagging: `Failed`
    /// (retried). A claim being deleted is `Unresolvable`, as in-tree.
    problem: Option<Verdict>,
}

impl<'s> PodClaims<'s> {
    /// Looks up the named claims of a pod in `namespace`. Claims that are neither bound nor delayed-static
    /// (dynamic or Immediate classes, no class) are not the extender's business and are dropped here.
    pub fn resolve(snap: &'s Snapshot, namespace: &str, claim_names: &[String]) -> PodClaims<'s> {
        let mut pc = PodClaims {
            snap,
            bound: Vec::new(),
            delayed: Vec::new(),
            detail: true,
            problem: None,
        };
        let mut seen = HashSet::new();
        for name in claim_names.iter().filter(|n| seen.insert(n.as_str())) {
            let key = format!("{namespace}/{name}");
            let Some(claim) = snap.claim(namespace, name) else {
                pc.problem = Some(Verdict::Failed(format!("claim {key}: not found")));
                return pc;
            };
            if claim.deleting {
                pc.problem = Some(Verdict::Unresolvable(format!("claim {key}: being deleted")));
                return pc;
            }
            if let Some(pv) = &claim.volume_name {
                match snap.volume_by_name(pv) {
                    Some(id) => pc.bound.push((key, id)),
                    None => {
                        pc.problem = Some(Verdict::Failed(format!(
                            "claim {key}: bound PV {pv} not found"
                        )));
                        return pc;
                    }
                }
                continue;
            }
            if claim.class.is_empty() {
                continue;
            }
            match snap.class(&claim.class) {
                None => {
                    let reason = format!("claim {key}: storage class {} not found", claim.class);
                    pc.problem = Some(Verdict::Failed(reason));
                    return pc;
                }
                Some(class) if class.is_static_delayed() => {
                    let prebound = snap.prebound_to(&key).iter().copied().find(|&id| {
                        let v = snap.volume(id);
                        v.is_bound_to(claim)
                            && v.class == claim.class
                            && v.capacity >= claim.request
                            && v.mode == claim.mode
                            && !v.deleting
                    });
                    pc.delayed.push(Delayed {
                        claim,
                        key: key.into(),
                        class: claim.class.as_str().into(),
                        index: snap.class_index(&claim.class),
                        prebound,
                    });
                }
                Some(_) => {}
            }
        }
        pc.delayed.sort_by(|a, b| {
            a.claim
                .request
                .cmp(&b.claim.request)
                .then_with(|| a.key.cmp(&b.key))
        });
        pc
    }

    pub fn snapshot(&self) -> &'s Snapshot {
        self.snap
    }

    /// Fits then carry no assignments or spare counts: cheaper, for callers that only need the verdict.
    pub fn verdicts_only(mut self) -> Self {
        self.detail = false;
        self
    }

    /// The pod refers to a claim, class or bound PV the snapshot does not have (yet).
    pub fn cache_miss(&self) -> bool {
        matches!(self.problem, Some(Verdict::Failed(_)))
    }

    /// Nothing to check: every node passes with a neutral score.
    pub fn is_trivial(&self) -> bool {
        self.problem.is_none() && self.bound.is_empty() && self.delayed.is_empty()
    }

    pub fn has_delayed(&self) -> bool {
        !self.delayed.is_empty()
    }

    /// The verdict for one node; `None` labels mean the node is unknown to the cache.
    pub fn decide(&self, labels: Option<&Labels>) -> Verdict {
        if let Some(problem) = &self.problem {
            return problem.clone();
        }
        if self.is_trivial() {
            return Verdict::Fit(Fit::default());
        }
        let Some(labels) = labels else {
            return Verdict::Failed("node not in extender cache".into());
        };
        for (key, id) in &self.bound {
            let v = self.snap.volume(*id);
            if !v.affinity.matches(labels) {
                return Verdict::Unresolvable(format!(
                    "claim {key}: bound PV {} has node affinity for other nodes",
                    v.name
                ));
            }
        }
        if self.delayed.is_empty() {
            return Verdict::Fit(Fit::default());
        }
        if !self.detail && self.fits_one_claim(labels) {
            return Verdict::Fit(Fit::default());
        }
        let mut views = Vec::with_capacity(self.delayed.len());
        for d in &self.delayed {
            match self.view(d, labels) {
                Ok(view) => views.push(view),
                Err(reason) => return Verdict::Unresolvable(reason),
            }
        }
        self.verdict(&views)
    }

    /// Allocation-free answer for the common single-claim pod when only the verdict is wanted.
    fn fits_one_claim(&self, labels: &Labels) -> bool {
        let [d] = self.delayed.as_slice() else {
            return false;
        };
        if d.prebound.is_some() {
            return false;
        }
        ClassIndex::candidates(d.index, labels).any(|id| {
            let v = self.snap.volume(id);
            v.claim_ref.is_none()
                && !v.deleting
                && v.phase == Phase::Available
                && check(v, d.claim) == Check::Fits
                && on_node(v, labels)
        })
    }

    fn verdict(&self, views: &[ClaimView]) -> Verdict {
        let now: Vec<&[VolId]> = views.iter().map(|v| v.now.as_slice()).collect();
        let (chosen, unmatched, greedy_complete) = maximum_matching(&now);
        if unmatched.is_none() {
            let mut fit = self.fit(views, &chosen);
            fit.greedy_misses = !greedy_complete;
            return Verdict::Fit(fit);
        }
        let with_later: Vec<Vec<VolId>> = views.iter().map(|v| merged(&v.now, &v.later)).collect();
        let with_later: Vec<&[VolId]> = with_later.iter().map(Vec::as_slice).collect();
        let (_, unmatched_later, _) = maximum_matching(&with_later);
        let failed = unmatched_later.is_none();
        if let Some(i) = views
            .iter()
            .position(|v| v.now.is_empty() && (failed || v.later.is_empty()))
        {
            let reason = self.why(&self.delayed[i], &views[i]);
            return if failed {
                Verdict::Failed(reason)
            } else {
                Verdict::Unresolvable(reason)
            };
        }
        let i = if failed { unmatched } else { unmatched_later }.unwrap_or(0);
        let d = &self.delayed[i];
        let n = if failed {
            views[i].now.len()
        } else {
            with_later[i].len()
        };
        let reason = format!(
            "claim {}: its {n} matching PVs of class {} are needed by the pod's other claims",
            d.key, d.claim.class
        );
        if failed {
            Verdict::Failed(format!(
                "{reason}; {} more being wiped",
                views[i].later.len()
            ))
        } else {
            Verdict::Unresolvable(reason)
        }
    }

    fn fit(&self, views: &[ClaimView], chosen: &[Option<VolId>]) -> Fit {
        let mut fit = Fit::default();
        for (i, d) in self.delayed.iter().enumerate() {
            fit.assignments.push(Assignment {
                claim: d.key.clone(),
                class: d.class.clone(),
                request: d.claim.request,
                // NB: only called on a complete matching, where every claim has a PV.
                volume: chosen[i].unwrap_or_default(),
            });
        }
        let mut pool: Vec<(&Arc<str>, VolId)> = Vec::new();
        for (d, view) in self.delayed.iter().zip(views) {
            pool.extend(view.now.iter().map(|&v| (&d.class, v)));
        }
        pool.sort_unstable();
        pool.dedup();
        for (class, _) in &pool {
            *fit.spare.entry(Arc::clone(class)).or_default() += 1;
        }
        for a in &fit.assignments {
            if let Some(n) = fit.spare.get_mut(&a.class) {
                *n = n.saturating_sub(1);
            }
        }
        fit
    }

    /// Which PVs of the node could serve `d`, now and once wiped; `Err` when a pre-bound PV rules the node out.
    fn view(&self, d: &Delayed, labels: &Labels) -> Result<ClaimView, String> {
        if let Some(id) = d.prebound {
            let v = self.snap.volume(id);
            if !v.affinity.matches(labels) {
                return Err(format!(
                    "claim {}: pre-bound PV {} has node affinity for other nodes",
                    d.key, v.name
                ));
            }
            return Ok(ClaimView {
                now: vec![id],
                ..ClaimView::default()
            });
        }
        let mut view = ClaimView::default();
        for id in ClassIndex::candidates(d.index, labels) {
            let v = self.snap.volume(id);
            if !on_node(v, labels) {
                continue;
            }
            view.on_node += 1;
            let free = v.claim_ref.is_none() && !v.deleting && v.phase == Phase::Available;
            if !free {
                view.bound += usize::from(v.claim_ref.is_some());
                if v.coming_back() && check(v, d.claim) == Check::Fits {
                    view.later.push(id);
                }
                continue;
            }
            view.free += 1;
            match check(v, d.claim) {
                Check::Fits => view.now.push(id),
                Check::TooSmall => {
                    view.furthest = view.furthest.max(Check::TooSmall);
                    view.largest_free = view.largest_free.max(v.capacity);
                }
                other => view.furthest = view.furthest.max(other),
            }
        }
        Ok(view)
    }

    /// The reason a claim has no PV now on a node, from what the scan saw.
    fn why(&self, d: &Delayed, view: &ClaimView) -> String {
        let (key, class) = (&d.key, &d.claim.class);
        if view.on_node == 0 {
            return format!("claim {key}: no PV of class {class} on node");
        }
        if !view.later.is_empty() {
            return format!(
                "claim {key}: {} PVs of class {class} are being wiped",
                view.later.len()
            );
        }
        if view.free == 0 && view.bound == view.on_node {
            return format!(
                "claim {key}: all {} PVs of class {class} are bound",
                view.on_node
            );
        }
        if view.free == 0 {
            return format!(
                "claim {key}: none of the {} PVs of class {class} is Available",
                view.on_node
            );
        }
        match view.furthest {
            Check::Mode => format!(
                "claim {key}: no free PV of class {class} has volume mode {}",
                d.claim.mode.as_str()
            ),
            Check::Attributes => format!(
                "claim {key}: no free PV of class {class} has volume attributes class {:?}",
                d.claim.attributes_class
            ),
            Check::Access => format!(
                "claim {key}: no free PV of class {class} offers access modes {}",
                d.claim.access.names().join(",")
            ),
            Check::Selector => {
                format!("claim {key}: no free PV of class {class} matches the claim's selector")
            }
            Check::TooSmall | Check::Fits => format!(
                "claim {key}: largest free PV is {}, claim asks {}",
                format_bytes(view.largest_free),
                format_bytes(d.claim.request)
            ),
        }
    }
}

#[derive(Debug, Default)]
struct ClaimView {
    /// Matching free PVs, smallest first.
    now: Vec<VolId>,
    /// PVs that would match once wiped and republished, smallest first.
    later: Vec<VolId>,
    on_node: usize,
    /// PVs whose claimRef names another claim.
    bound: usize,
    free: usize,
    /// The check that free PVs got furthest in before failing.
    furthest: Check,
    largest_free: u128,
}

/// Outcome of comparing a PV with a claim, ordered by how far the PV got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Check {
    #[default]
    Mode,
    Attributes,
    Access,
    Selector,
    TooSmall,
    Fits,
}

/// Node affinity, skipping the comparison when the index lookup by hostname already proved it.
fn on_node(v: &Volume, labels: &Labels) -> bool {
    v.affinity.implied_by_hostname() || v.affinity.matches(labels)
}

/// The claim-specific rules (volume mode, volume attributes class, access modes, selector, capacity); class,
/// claimRef, phase, deletion
/// and node affinity are the caller's.
fn check(v: &Volume, c: &Claim) -> Check {
    if v.mode != c.mode {
        Check::Mode
    } else if v.attributes_class != c.attributes_class {
        Check::Attributes
    } else if !v.access.contains(c.access) {
        Check::Access
    } else if c.selector.as_ref().is_some_and(|s| !s.matches(&v.labels)) {
        Check::Selector
    } else if v.capacity < c.request {
        Check::TooSmall
    } else {
        Check::Fits
    }
}

fn merged(a: &[VolId], b: &[VolId]) -> Vec<VolId> {
    let mut all: Vec<VolId> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Greedy in claim order (each takes its smallest free candidate), then augmenting paths for the claims greedy
/// left out. Returns the PV of each claim, the first claim left unmatched if any, and whether greedy alone
/// matched all. Pods have few claims, so ownership is a linear scan rather than a map.
fn maximum_matching(candidates: &[&[VolId]]) -> (Vec<Option<VolId>>, Option<usize>, bool) {
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

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
