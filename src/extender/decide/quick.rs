//! Shortcuts for the pods kube-scheduler sends most: the in-tree greedy placement without allocating, and one
//! counting scan for a single claim. Each answers exactly what the general path (views, then maximum matching)
//! answers for that node, fit details included; `None` hands the node to the general path. Tests run every
//! decision both ways (`PodClaims::without_shortcuts`).

use std::sync::Arc;

use super::scan::PvMatch;
use super::{Delayed, Fit, PodClaims, Verdict, assignment};
use crate::extender::snapshot::{ClassIndex, NodeRef, Slot, VolId};

/// Pods with more delayed claims than this take the general path.
const MOST_CLAIMS: usize = 8;

impl PodClaims<'_> {
    pub(super) fn shortcut(&self, node: NodeRef) -> Option<Verdict> {
        let single = matches!(self.delayed.as_slice(), [d] if d.prebound.is_none());
        if single && self.detail {
            return Some(self.decide_one(&self.delayed[0], node));
        }
        if let Some(taken) = self.greedy(node) {
            if !self.detail {
                return Some(Verdict::Fit(Fit::default()));
            }
            // NB: a pre-bound PV is not free, so the spare counts below would miss it; leave those pods alone.
            if self.delayed.iter().all(|d| d.prebound.is_none()) {
                return Some(Verdict::Fit(self.greedy_fit(node, &taken)));
            }
            return None;
        }
        single.then(|| self.decide_one(&self.delayed[0], node))
    }

    /// The in-tree binder's choice: claims in order, each taking its smallest fitting PV not yet taken. `None`
    /// when some claim finds none (a maximum matching may still exist) or the pod has too many claims.
    fn greedy(&self, node: NodeRef) -> Option<[VolId; MOST_CLAIMS]> {
        if self.delayed.len() > MOST_CLAIMS {
            return None;
        }
        let mut taken = [VolId::MAX; MOST_CLAIMS];
        for (i, d) in self.delayed.iter().enumerate() {
            let free = |id: &VolId| !taken[..i].contains(id);
            taken[i] = match d.prebound {
                Some(id) => Some(id)
                    .filter(free)
                    .filter(|&id| self.snap.volume(id).affinity.matches(node.labels()))?,
                None => ClassIndex::candidates(d.index, node.host)
                    .find(|s| {
                        s.is_free()
                            && free(&s.id())
                            && self.check(s, d) == PvMatch::Fits
                            && self.on_node(s, node)
                    })
                    .map(Slot::id)?,
            };
        }
        Some(taken)
    }

    /// The fit of a greedy placement: when greedy succeeds the matching keeps its choice, and each class's
    /// spare count is its free PVs that fit any of the pod's claims of that class, less those taken.
    fn greedy_fit(&self, node: NodeRef, taken: &[VolId]) -> Fit {
        let mut fit = Fit::default();
        for (d, &id) in self.delayed.iter().zip(taken) {
            fit.assignments.push(assignment(self.snap, d, id));
        }
        for (i, d) in self.delayed.iter().enumerate() {
            if self.delayed[..i].iter().any(|e| e.class == d.class) {
                continue;
            }
            let same = || self.delayed[i..].iter().filter(|e| e.class == d.class);
            let usable = ClassIndex::candidates(d.index, node.host)
                .filter(|s| {
                    s.is_free()
                        && same().any(|e| self.check(s, e) == PvMatch::Fits)
                        && self.on_node(s, node)
                })
                .count();
            let spare = usable.saturating_sub(same().count());
            let at = fit.spare.partition_point(|(c, _)| *c < d.class);
            fit.spare.insert(at, (Arc::clone(&d.class), spare));
        }
        fit
    }

    /// One claim without a pre-bound PV: one counting scan, no lists and no matching. For one claim the general
    /// path reduces to "the smallest fitting PV, else why not".
    fn decide_one(&self, d: &Delayed, node: NodeRef) -> Verdict {
        let view = match self.view(d, node, false) {
            Ok(view) => view,
            Err(reason) => return Verdict::Unresolvable(reason),
        };
        match view.first_now {
            Some(_) if !self.detail => Verdict::Fit(Fit::default()),
            Some(id) => Verdict::Fit(Fit {
                assignments: vec![assignment(self.snap, d, id)],
                spare: vec![(Arc::clone(&d.class), view.now_count - 1)],
                greedy_misses: false,
            }),
            None if view.later_count > 0 => Verdict::Failed(self.why(d, &view)),
            None => Verdict::Unresolvable(self.why(d, &view)),
        }
    }
}
