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
//! Matching follows the in-tree VolumeBinding plugin (`FindMatchingVolume` in Kubernetes'
//! `pkg/controller/volume/persistentvolume/util`): claim reference, capacity, volume mode, no deletion, node
//! affinity, pre-bound first, phase Available, selector, class, access modes. The in-tree binder sorts claims by
//! request and lets each take the smallest matching PV; that can miss an assignment that exists (a small claim
//! taking the one PV a pickier claim needed), so when it fails we augment its partial assignment into a maximum
//! matching. When the greedy choice works we keep it: the scheduler's binder will then pick the same PVs.
//!
//! Pure: no I/O, no clocks; everything comes from the `Snapshot`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use self::matching::{maximum_matching, merged};
use self::scan::{ClaimView, Shortfall};
use super::model::Claim;
use super::snapshot::{ClassIndex, NodeRef, Snapshot, VolId};
use crate::selector::NodeLabels;

mod matching;
mod quick;
mod scan;

/// One delayed claim served by one PV on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// `namespace/name` of the claim.
    pub claim: Arc<str>,
    pub class: Arc<str>,
    pub request: u128,
    pub volume: VolId,
    /// The volume's capacity, so scoring reads no `Volume`.
    pub capacity: u128,
}

/// The pod fits the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fit {
    /// Ordered as the in-tree binder processes claims (request ascending).
    pub assignments: Vec<Assignment>,
    /// Per class, ascending by class: matching free PVs left on the node once the pod has its share. A list,
    /// not a map: pods have one or two classes, and prioritize builds and drops one of these per node.
    pub spare: Vec<(Arc<str>, usize)>,
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
    /// The claim's volume attributes class as `Slot::attributes` ids it.
    attributes: u32,
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
    /// Whether the allocation-free shortcuts may answer (off only in tests comparing them with the general path).
    fast: bool,
    /// A pod-wide reason no node can pass (missing claim or class, ...).
    /// kube-scheduler checked these objects exist before calling us, so a miss is our watch lagging: `Failed`
    /// (retried). A claim being deleted is `Unresolvable`, as in-tree.
    problem: Option<Verdict>,
    /// Reasons already formatted for this request (see `why`).
    reasons: RefCell<Vec<(Arc<str>, Shortfall, String)>>,
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
            fast: true,
            problem: None,
            reasons: RefCell::default(),
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
                        attributes: snap.attributes_id(&claim.attributes_class),
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

    /// Only the general path (views and maximum matching) decides: tests compare the shortcuts with it.
    #[cfg(test)]
    pub fn without_shortcuts(mut self) -> Self {
        self.fast = false;
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
    pub fn decide<L: NodeLabels>(&self, labels: Option<&L>) -> Verdict {
        self.decide_node(labels.map(|l| self.snap.node_from_labels(l)))
    }

    /// The verdict for one node (`Snapshot::node` or `Snapshot::node_from_labels`); `None` means the node is
    /// unknown to the cache.
    pub fn decide_node(&self, node: Option<NodeRef>) -> Verdict {
        if let Some(problem) = &self.problem {
            return problem.clone();
        }
        if self.is_trivial() {
            return Verdict::Fit(Fit::default());
        }
        let Some(node) = node else {
            return Verdict::Failed("node not in extender cache".into());
        };
        for (key, id) in &self.bound {
            let v = self.snap.volume(*id);
            if !v.affinity.matches(node.labels()) {
                return Verdict::Unresolvable(format!(
                    "claim {key}: bound PV {} has node affinity for other nodes",
                    v.name
                ));
            }
        }
        if self.delayed.is_empty() {
            return Verdict::Fit(Fit::default());
        }
        if self.fast
            && let Some(verdict) = self.shortcut(node)
        {
            return verdict;
        }
        let mut views = Vec::with_capacity(self.delayed.len());
        for d in &self.delayed {
            match self.view(d, node, true) {
                Ok(view) => views.push(view),
                Err(reason) => return Verdict::Unresolvable(reason),
            }
        }
        self.verdict(&views)
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
            // NB: only called on a complete matching, where every claim has a PV.
            fit.assignments
                .push(assignment(self.snap, d, chosen[i].unwrap_or_default()));
        }
        let mut pool: Vec<(&Arc<str>, VolId)> = Vec::new();
        for (d, view) in self.delayed.iter().zip(views) {
            pool.extend(view.now.iter().map(|&v| (&d.class, v)));
        }
        pool.sort_unstable();
        pool.dedup();
        let mut spare: BTreeMap<&Arc<str>, usize> = BTreeMap::new();
        for (class, _) in &pool {
            *spare.entry(class).or_default() += 1;
        }
        for a in &fit.assignments {
            if let Some(n) = spare.get_mut(&a.class) {
                *n = n.saturating_sub(1);
            }
        }
        fit.spare = spare.into_iter().map(|(c, n)| (Arc::clone(c), n)).collect();
        fit
    }
}

fn assignment(snap: &Snapshot, d: &Delayed, volume: VolId) -> Assignment {
    Assignment {
        claim: Arc::clone(&d.key),
        class: Arc::clone(&d.class),
        request: d.claim.request,
        volume,
        capacity: snap.volume(volume).capacity,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod agree_tests;
