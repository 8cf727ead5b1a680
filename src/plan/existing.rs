//! The planner's `existing` PVs, picked from the agent's PV index (pure; issue 35, point 2): this node's labelled
//! PVs and the reference provisioner's (`pv::planned_on`). The index hands out the same `Arc` for a PV that did not
//! change, so a pass reads the labels only of what changed since the last one.
//!
//! ```text
//!  index (generation, PVs) ─┬─ same generation as the last pick ──> the last pick's PVs, as they were
//!  last pick ───────────────┴─ otherwise ──> Picked::pick: a PV the same pointer at the same place keeps its
//!                                            decision; every other PV is read (planned_on)
//! ```

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::pv::planned_on;

/// The PVs of one index generation, as one list the planner reads.
pub type Pvs = Arc<Vec<Arc<PersistentVolume>>>;

/// The planner's `existing` PVs, picked from the PV index at one generation.
pub struct Picked {
    generation: u64,
    /// The index's PVs then, and which of them were picked.
    from: Pvs,
    picked: Vec<bool>,
    existing: Pvs,
}

impl Picked {
    /// This node's PVs in `pvs` (`planned_on`); a PV the same pointer at the same place as in `last` was picked,
    /// or not, then: its labels are not read again.
    pub fn pick(last: Option<&Picked>, generation: u64, pvs: &Pvs, node: &str) -> Picked {
        let mut picked = Vec::with_capacity(pvs.len());
        let mut existing = Vec::new();
        for (i, pv) in pvs.iter().enumerate() {
            let was = last
                .filter(|l| l.from.get(i).is_some_and(|p| Arc::ptr_eq(p, pv)))
                .map(|l| l.picked[i]);
            let pick = was.unwrap_or_else(|| planned_on(pv, node));
            picked.push(pick);
            if pick {
                existing.push(pv.clone());
            }
        }
        Picked {
            generation,
            from: pvs.clone(),
            picked,
            existing: Arc::new(existing),
        }
    }
}

/// The planner's `existing` PVs from the index at `generation`: the last pick's when the index has not changed
/// since, else picked again (`Picked::pick`) and kept in `last` for the next pass.
pub fn existing(last: &mut Option<Picked>, generation: u64, pvs: &Pvs, node: &str) -> Pvs {
    if let Some(last) = last.as_ref()
        && last.generation == generation
    {
        return last.existing.clone();
    }
    let picked = Picked::pick(last.as_ref(), generation, pvs, node);
    let existing = picked.existing.clone();
    *last = Some(picked);
    existing
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NODE: &str = "n1";

    fn pv(name: &str, node: &str) -> Arc<PersistentVolume> {
        let labels = json!({ crate::contract::NODE_LABEL: node });
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap(),
        )
    }

    fn names(pvs: &Pvs) -> Vec<String> {
        let names = pvs
            .iter()
            .map(|pv| pv.metadata.name.clone().unwrap_or_default());
        names.collect()
    }

    #[test]
    fn pvs_picked_again_are_read_only_where_the_index_changed() {
        let index = |pvs: Vec<Arc<PersistentVolume>>| Arc::new(pvs);
        let (a, b, c) = (pv("a", NODE), pv("b", "n2"), pv("c", NODE));
        let first = Picked::pick(None, 1, &index(vec![a.clone(), b.clone(), c.clone()]), NODE);
        assert_eq!(names(&first.existing), ["a", "c"]);
        // The same pointers at the same places keep their decisions; a PV replaced in place is read again, and so
        // is every PV after an insertion (nothing is where it was).
        let moved = pv("c", "n2");
        let second = Picked::pick(
            Some(&first),
            2,
            &index(vec![a.clone(), b.clone(), moved]),
            NODE,
        );
        assert_eq!(names(&second.existing), ["a"]);
        let relabelled = pv("b", NODE);
        let third = Picked::pick(
            Some(&second),
            3,
            &index(vec![pv("0", NODE), a, relabelled, c]),
            NODE,
        );
        assert_eq!(names(&third.existing), ["0", "a", "b", "c"]);
        // A decision is reused only for the very same PV: an equal copy is read again (and decided alike).
        let copies = third.from.iter().map(|p| Arc::new((**p).clone())).collect();
        let fourth = Picked::pick(Some(&third), 4, &index(copies), NODE);
        assert_eq!(names(&fourth.existing), names(&third.existing));
    }

    #[test]
    fn an_index_unchanged_since_the_last_pick_is_not_picked_again() {
        let mut last = None;
        let pvs = Arc::new(vec![pv("a", NODE), pv("b", "n2")]);
        let first = existing(&mut last, 1, &pvs, NODE);
        assert_eq!(names(&first), ["a"]);
        // The index changes its generation with its PVs: a list handed at the same generation is not even read.
        let other = Arc::new(vec![pv("c", NODE)]);
        let again = existing(&mut last, 1, &other, NODE);
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same generation: the last pick"
        );
        assert_eq!(names(&existing(&mut last, 2, &other, NODE)), ["c"]);
    }
}
