//! Prioritize: turn per-node verdicts into scores 0..=10, the range kube-scheduler expects from an extender.
//!
//! - `binpack` (default): the share of the chosen PVs' capacity the pod actually asks for, so an 8Gi claim
//!   scores 8 on a node whose best PV is 10Gi, 4 with 20Gi and 1 with 100Gi: big disks stay for big claims.
//! - `spread`: matching free PVs left on the node after the pod takes its share, relative to the node with the
//!   most left among those scored.
//!
//! A StorageClass annotation `localpv.io/score-strategy` overrides the global strategy for its claims; a pod with
//! claims of several classes gets the claim-weighted mean of its per-class scores. Nodes that cannot take the pod
//! score 0; pods without delayed claims get `NEUTRAL` everywhere, so the extender does not sway their placement.
//! Pure and deterministic: the same verdicts always give the same scores.

use std::collections::BTreeMap;

use super::decide::{Fit, Verdict};
use super::model::Strategy;
use super::snapshot::Snapshot;

pub const MAX_SCORE: i64 = 10;
pub const NEUTRAL_SCORE: i64 = 5;

/// Scores in the order of `verdicts`. `has_delayed` says whether the pod has any delayed static claim.
pub fn score(
    snap: &Snapshot,
    global: Strategy,
    has_delayed: bool,
    verdicts: &[Verdict],
) -> Vec<i64> {
    let fits: Vec<Option<&Fit>> = verdicts
        .iter()
        .map(|v| match v {
            Verdict::Fit(fit) => Some(fit),
            _ => None,
        })
        .collect();
    // Spread is relative: the most spare PVs of each class among the nodes that fit.
    let mut most_spare: BTreeMap<&str, usize> = BTreeMap::new();
    for fit in fits.iter().flatten() {
        for (class, &n) in &fit.spare {
            let m = most_spare.entry(class.as_ref()).or_default();
            *m = (*m).max(n);
        }
    }
    // Every assigned class has a spare entry; resolving strategies once spares a class lookup per node.
    let strategies: BTreeMap<&str, Strategy> = most_spare
        .keys()
        .map(|&class| (class, strategy_of(snap, global, class)))
        .collect();
    let classes = Classes {
        snap,
        global,
        most_spare: &most_spare,
        strategies: &strategies,
    };
    fits.iter()
        .map(|fit| {
            let s = match fit {
                None => 0,
                Some(_) if !has_delayed => NEUTRAL_SCORE,
                Some(fit) => classes.node_score(fit),
            };
            s.clamp(0, MAX_SCORE)
        })
        .collect()
}

fn strategy_of(snap: &Snapshot, global: Strategy, class: &str) -> Strategy {
    snap.class(class).and_then(|c| c.strategy).unwrap_or(global)
}

/// What scoring one node needs to know about the classes of the pod's claims.
struct Classes<'a> {
    snap: &'a Snapshot,
    global: Strategy,
    most_spare: &'a BTreeMap<&'a str, usize>,
    strategies: &'a BTreeMap<&'a str, Strategy>,
}

impl Classes<'_> {
    fn node_score(&self, fit: &Fit) -> i64 {
        if let [a] = fit.assignments.as_slice() {
            // The common single-claim pod: the mean below over one claim, without grouping.
            let capacity = a.capacity;
            return to_score(self.class_score(fit, &a.class, a.request, capacity));
        }
        // (class, claims, requested bytes, chosen capacity), in class order
        let mut groups: Vec<(&str, usize, u128, u128)> = Vec::new();
        for a in &fit.assignments {
            let capacity = a.capacity;
            match groups.iter_mut().find(|g| g.0 == a.class.as_ref()) {
                Some(g) => {
                    g.1 += 1;
                    g.2 += a.request;
                    g.3 += capacity;
                }
                None => groups.push((a.class.as_ref(), 1, a.request, capacity)),
            }
        }
        groups.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let (mut weighted, mut claims) = (0.0, 0usize);
        for (class, n, requested, capacity) in groups {
            weighted += self.class_score(fit, class, requested, capacity) * n as f64;
            claims += n;
        }
        if claims == 0 {
            return NEUTRAL_SCORE;
        }
        to_score(weighted / claims as f64)
    }

    /// The 0..=1 score of the claims of one class on a node.
    fn class_score(&self, fit: &Fit, class: &str, requested: u128, capacity: u128) -> f64 {
        let strategy = match self.strategies.get(class) {
            Some(&s) => s,
            None => strategy_of(self.snap, self.global, class),
        };
        match strategy {
            Strategy::Binpack if capacity == 0 => 1.0,
            Strategy::Binpack => (requested as f64 / capacity as f64).min(1.0),
            Strategy::Spread => {
                let most = self.most_spare.get(class).copied().unwrap_or(0);
                let spare = fit.spare.get(class).copied().unwrap_or(0);
                if most == 0 {
                    0.0
                } else {
                    spare as f64 / most as f64
                }
            }
        }
    }
}

fn to_score(share: f64) -> i64 {
    (share * MAX_SCORE as f64).round() as i64
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::extender::decide::PodClaims;
    use crate::extender::fixtures::{PvBuilder, class, local_class, node, pv, pvc};
    use crate::extender::model::{Class, SCORE_STRATEGY_ANNOTATION};

    fn annotated(name: &str, strategy: &str) -> Class {
        let mut sc = class(name, "kubernetes.io/no-provisioner", true);
        sc.metadata.annotations =
            Some([(SCORE_STRATEGY_ANNOTATION.to_string(), strategy.to_string())].into());
        Class::from_storage_class(&sc).expect("named")
    }

    /// Scores of nodes n1..n3 for a pod with one 8Gi claim `data` of class `local` (and `b` of class `fast`
    /// when `two_classes`).
    fn scores(pvs: Vec<PvBuilder>, global: Strategy, fast: Class, two_classes: bool) -> Vec<i64> {
        let mut claims = vec![pvc("data").request("8Gi").build()];
        let mut names = vec!["data".to_string()];
        if two_classes {
            claims.push(pvc("b").class("fast").build());
            names.push("b".into());
        }
        let snap = Snapshot::new(
            pvs.into_iter().map(PvBuilder::build),
            claims,
            [local_class("local"), fast],
            ["n1", "n2", "n3"].map(|n| node(n).build()),
        );
        let pc = PodClaims::resolve(&snap, "default", &names);
        let verdicts: Vec<Verdict> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| pc.decide(snap.node_labels(n)))
            .collect();
        score(&snap, global, pc.has_delayed(), &verdicts)
    }

    #[test]
    fn binpack_prefers_the_pv_that_wastes_least() {
        let pvs = vec![
            pv("a").on_node("n1").capacity("100Gi"),
            pv("b").on_node("n2").capacity("10Gi"),
            pv("c").on_node("n3").capacity("20Gi"),
        ];
        assert_eq!(
            scores(pvs, Strategy::Binpack, local_class("fast"), false),
            [1, 8, 4]
        );
    }

    #[test]
    fn spread_prefers_the_node_with_most_pvs_left() {
        let mut pvs = vec![pv("a").on_node("n1").capacity("10Gi")];
        pvs.extend((0..3).map(|i| pv(&format!("b{i}")).on_node("n2").capacity("10Gi")));
        pvs.extend((0..2).map(|i| pv(&format!("c{i}")).on_node("n3").capacity("100Gi")));
        assert_eq!(
            scores(pvs, Strategy::Spread, local_class("fast"), false),
            [0, 10, 5]
        );
    }

    #[rstest]
    #[case::class_override_spread(annotated("fast", "spread"), [0, 10, 5])]
    #[case::class_override_binpack(annotated("fast", "Binpack"), [5, 10, 8])]
    #[case::unknown_override_falls_back(annotated("fast", "random"), [0, 10, 5])]
    fn a_class_annotation_overrides_the_global_strategy(
        #[case] fast: Class,
        #[case] want: [i64; 3],
    ) {
        // Claim data (8Gi, local, global spread) fits everywhere; claim b (1Gi, fast) differs per node.
        let pvs = vec![
            pv("l1").on_node("n1").capacity("8Gi"),
            pv("f1").on_node("n1").capacity("1Gi").class("fast"),
            pv("l2").on_node("n2").capacity("8Gi"),
            pv("l2b").on_node("n2").capacity("8Gi"),
            pv("f2").on_node("n2").capacity("1Gi").class("fast"),
            pv("f2b").on_node("n2").capacity("1Gi").class("fast"),
            pv("l3").on_node("n3").capacity("8Gi"),
            pv("l3b").on_node("n3").capacity("8Gi"),
            pv("f3").on_node("n3").capacity("2Gi").class("fast"),
        ];
        assert_eq!(scores(pvs, Strategy::Spread, fast, true), want);
    }

    #[test]
    fn nodes_that_cannot_take_the_pod_score_zero() {
        let pvs = vec![pv("a").on_node("n1").capacity("10Gi")];
        assert_eq!(
            scores(pvs, Strategy::Binpack, local_class("fast"), false),
            [8, 0, 0]
        );
    }

    #[test]
    fn pods_without_delayed_claims_get_one_neutral_score() {
        let snap = Snapshot::new([], [], [], [node("n1").build()]);
        let pc = PodClaims::resolve(&snap, "default", &[]);
        let verdicts = vec![pc.decide(None), pc.decide(None)];
        let got = score(&snap, Strategy::Binpack, pc.has_delayed(), &verdicts);
        assert_eq!(got, [NEUTRAL_SCORE, NEUTRAL_SCORE]);
    }
}
