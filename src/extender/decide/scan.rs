//! One claim against one node's PVs: which could serve it now or once wiped, and why none can.

use std::sync::Arc;

use super::{Delayed, PodClaims};
use crate::extender::snapshot::{ClassIndex, NodeRef, Slot, VolId};
use crate::quantity::format_bytes;

#[derive(Debug, Default)]
pub(super) struct ClaimView {
    /// Matching free PVs, smallest first (only when the scan was asked for lists).
    pub now: Vec<VolId>,
    /// PVs that would match once wiped and republished, smallest first (only with lists).
    pub later: Vec<VolId>,
    /// The smallest matching free PV, and how many there are (always counted).
    pub first_now: Option<VolId>,
    pub now_count: usize,
    pub later_count: usize,
    on_node: usize,
    /// PVs whose claimRef names another claim.
    bound: usize,
    free: usize,
    /// The check that free PVs got furthest in before failing.
    furthest: PvMatch,
    largest_free: u128,
}

/// Outcome of comparing a PV with a claim, ordered by how far the PV got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PvMatch {
    #[default]
    Mode,
    Attributes,
    Access,
    Selector,
    TooSmall,
    Fits,
}

impl<'s> PodClaims<'s> {
    /// Which PVs of the node could serve `d`, now and once wiped; `Err` when a pre-bound PV rules the node out.
    /// Without `lists` only counts and the smallest fitting PV are kept: no allocation.
    pub(super) fn view(
        &self,
        d: &Delayed,
        node: NodeRef,
        lists: bool,
    ) -> Result<ClaimView, String> {
        if let Some(id) = d.prebound {
            let v = self.snap.volume(id);
            if !v.affinity.matches(node.labels()) {
                return Err(format!(
                    "claim {}: pre-bound PV {} has node affinity for other nodes",
                    d.key, v.name
                ));
            }
            return Ok(ClaimView {
                now: vec![id],
                first_now: Some(id),
                now_count: 1,
                ..ClaimView::default()
            });
        }
        let mut view = ClaimView::default();
        for s in ClassIndex::candidates(d.index, node.host) {
            if !self.on_node(s, node) {
                continue;
            }
            view.on_node += 1;
            if !s.is_free() {
                view.bound += usize::from(s.is_claimed());
                if s.coming_back() && self.check(s, d) == PvMatch::Fits {
                    view.later_count += 1;
                    if lists {
                        view.later.push(s.id());
                    }
                }
                continue;
            }
            view.free += 1;
            match self.check(s, d) {
                PvMatch::Fits => {
                    view.first_now.get_or_insert(s.id());
                    view.now_count += 1;
                    if lists {
                        view.now.push(s.id());
                    }
                }
                PvMatch::TooSmall => {
                    view.furthest = view.furthest.max(PvMatch::TooSmall);
                    view.largest_free = view.largest_free.max(s.capacity);
                }
                other => view.furthest = view.furthest.max(other),
            }
        }
        Ok(view)
    }

    /// Node affinity, skipping the comparison when the index lookup by hostname already proved it.
    pub(super) fn on_node(&self, s: &Slot, node: NodeRef) -> bool {
        s.affinity_is_hostname() || self.snap.volume(s.id()).affinity.matches(node.labels())
    }

    /// The claim-specific rules (volume mode, volume attributes class, access modes, selector, capacity); class,
    /// claimRef, phase, deletion and node affinity are the caller's.
    pub(super) fn check(&self, s: &Slot, d: &Delayed) -> PvMatch {
        let c = d.claim;
        if s.mode != c.mode {
            PvMatch::Mode
        } else if s.attributes != d.attributes {
            PvMatch::Attributes
        } else if !s.access.contains(c.access) {
            PvMatch::Access
        } else if c
            .selector
            .as_ref()
            .is_some_and(|sel| !sel.matches(&self.snap.volume(s.id()).labels))
        {
            PvMatch::Selector
        } else if s.capacity < c.request {
            PvMatch::TooSmall
        } else {
            PvMatch::Fits
        }
    }

    /// The reason a claim has no PV now on a node, from what the scan saw. Rejected nodes mostly share a few
    /// reasons, so each is formatted once per request and then copied.
    pub(super) fn why(&self, d: &Delayed, view: &ClaimView) -> String {
        let cause = Shortfall::of(view);
        let mut memo = self.reasons.borrow_mut();
        if let Some((_, _, reason)) = memo
            .iter()
            .find(|(key, c, _)| Arc::ptr_eq(key, &d.key) && *c == cause)
        {
            return reason.clone();
        }
        let reason = cause.describe(d);
        if memo.len() < MEMO_REASONS {
            memo.push((Arc::clone(&d.key), cause, reason.clone()));
        }
        reason
    }
}

/// Distinct reasons remembered per request; past that they are formatted each time.
const MEMO_REASONS: usize = 32;

/// Why a claim has no PV now on a node: everything its reason says, and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shortfall {
    NoPv,
    Wiping(usize),
    AllBound(usize),
    NoneAvailable(usize),
    /// The check free PVs got furthest in; the largest free capacity only when that check is the size.
    Furthest(PvMatch, u128),
}

impl Shortfall {
    fn of(view: &ClaimView) -> Shortfall {
        if view.on_node == 0 {
            Shortfall::NoPv
        } else if view.later_count > 0 {
            Shortfall::Wiping(view.later_count)
        } else if view.free == 0 && view.bound == view.on_node {
            Shortfall::AllBound(view.on_node)
        } else if view.free == 0 {
            Shortfall::NoneAvailable(view.on_node)
        } else {
            match view.furthest {
                check @ (PvMatch::TooSmall | PvMatch::Fits) => {
                    Shortfall::Furthest(check, view.largest_free)
                }
                check => Shortfall::Furthest(check, 0),
            }
        }
    }

    fn describe(self, d: &Delayed) -> String {
        let (key, class) = (&d.key, &d.claim.class);
        match self {
            Shortfall::NoPv => format!("claim {key}: no PV of class {class} on node"),
            Shortfall::Wiping(n) => {
                format!("claim {key}: {n} PVs of class {class} are being wiped")
            }
            Shortfall::AllBound(n) => {
                format!("claim {key}: all {n} PVs of class {class} are bound")
            }
            Shortfall::NoneAvailable(n) => {
                format!("claim {key}: none of the {n} PVs of class {class} is Available")
            }
            Shortfall::Furthest(PvMatch::Mode, _) => format!(
                "claim {key}: no free PV of class {class} has volume mode {}",
                d.claim.mode.as_str()
            ),
            Shortfall::Furthest(PvMatch::Attributes, _) => format!(
                "claim {key}: no free PV of class {class} has volume attributes class {:?}",
                d.claim.attributes_class
            ),
            Shortfall::Furthest(PvMatch::Access, _) => format!(
                "claim {key}: no free PV of class {class} offers access modes {}",
                d.claim.access.names().join(",")
            ),
            Shortfall::Furthest(PvMatch::Selector, _) => {
                format!("claim {key}: no free PV of class {class} matches the claim's selector")
            }
            Shortfall::Furthest(PvMatch::TooSmall | PvMatch::Fits, largest_free) => format!(
                "claim {key}: largest free PV is {}, claim asks {}",
                format_bytes(largest_free),
                format_bytes(d.claim.request)
            ),
        }
    }
}
