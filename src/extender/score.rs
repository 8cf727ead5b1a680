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

use std::sync::Arc;

use super::decide::Verdict;
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
    let mut scorer = Scorer::new(snap, global, has_delayed);
    for v in verdicts {
        scorer.add(v);
    }
    scorer.finish()
}

/// Scores nodes one verdict at a time, keeping only the few numbers each score needs, so a caller can drop
/// every verdict (and what it allocated) before deciding the next node. Spread is relative to the most spare PVs
/// among all fitting nodes, hence the final pass in `finish`.
pub struct Scorer<'a> {
    snap: &'a Snapshot,
    global: Strategy,
    has_delayed: bool,
    /// Each class met: its name, its strategy, the most spare PVs of it left on any fitting node.
    classes: Vec<(Arc<str>, Strategy, usize)>,
    nodes: Vec<NodeScore>,
    /// Per fitting node, its claims grouped by class in class order: `NodeScore::Groups` ranges over this.
    groups: Vec<Group>,
}

enum NodeScore {
    Fixed(i64),
    Groups(usize, usize),
}

/// The claims of one class on one node.
struct Group {
    class: usize,
    claims: usize,
    requested: u128,
    capacity: u128,
    spare: usize,
}

impl<'a> Scorer<'a> {
    pub fn new(snap: &'a Snapshot, global: Strategy, has_delayed: bool) -> Scorer<'a> {
        Scorer {
            snap,
            global,
            has_delayed,
            classes: Vec::new(),
            nodes: Vec::new(),
            groups: Vec::new(),
        }
    }

    /// The next node's verdict.
    pub fn add(&mut self, verdict: &Verdict) {
        let fit = match verdict {
            Verdict::Fit(fit) if self.has_delayed => fit,
            Verdict::Fit(_) => return self.nodes.push(NodeScore::Fixed(NEUTRAL_SCORE)),
            _ => return self.nodes.push(NodeScore::Fixed(0)),
        };
        for (class, n) in &fit.spare {
            let c = self.class_id(class);
            self.classes[c].2 = self.classes[c].2.max(*n);
        }
        if fit.assignments.is_empty() {
            return self.nodes.push(NodeScore::Fixed(NEUTRAL_SCORE));
        }
        let start = self.groups.len();
        for a in &fit.assignments {
            let class = self.class_id(&a.class);
            match self.groups[start..].iter_mut().find(|g| g.class == class) {
                Some(g) => {
                    g.claims += 1;
                    g.requested += a.request;
                    g.capacity += a.capacity;
                }
                None => self.groups.push(Group {
                    class,
                    claims: 1,
                    requested: a.request,
                    capacity: a.capacity,
                    spare: fit
                        .spare
                        .iter()
                        .find(|(c, _)| *c == a.class)
                        .map_or(0, |(_, n)| *n),
                }),
            }
        }
        let classes = &self.classes;
        self.groups[start..].sort_unstable_by(|a, b| classes[a.class].0.cmp(&classes[b.class].0));
        self.nodes.push(NodeScore::Groups(start, self.groups.len()));
    }

    fn class_id(&mut self, class: &Arc<str>) -> usize {
        let known = self
            .classes
            .iter()
            .position(|(c, _, _)| Arc::ptr_eq(c, class) || c == class);
        known.unwrap_or_else(|| {
            let strategy = self
                .snap
                .class(class)
                .and_then(|c| c.strategy)
                .unwrap_or(self.global);
            self.classes.push((Arc::clone(class), strategy, 0));
            self.classes.len() - 1
        })
    }

    /// Scores in the order the verdicts were added.
    pub fn finish(self) -> Vec<i64> {
        self.nodes
            .iter()
            .map(|node| {
                let s = match *node {
                    NodeScore::Fixed(s) => s,
                    NodeScore::Groups(start, end) => self.mean(&self.groups[start..end]),
                };
                s.clamp(0, MAX_SCORE)
            })
            .collect()
    }

    /// The claim-weighted mean of the per-class scores of one node.
    fn mean(&self, groups: &[Group]) -> i64 {
        let (mut weighted, mut claims) = (0.0, 0usize);
        for g in groups {
            let (_, strategy, most) = &self.classes[g.class];
            let s = match strategy {
                Strategy::Binpack if g.capacity == 0 => 1.0,
                Strategy::Binpack => (g.requested as f64 / g.capacity as f64).min(1.0),
                Strategy::Spread if *most == 0 => 0.0,
                Strategy::Spread => g.spare as f64 / *most as f64,
            };
            weighted += s * g.claims as f64;
            claims += g.claims;
        }
        (weighted / claims as f64 * MAX_SCORE as f64).round() as i64
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::contract::ANN_SCORE_STRATEGY;
    use crate::extender::decide::PodClaims;
    use crate::extender::fixtures::{
        NO_CLAIMS, NO_VOLUMES, PvBuilder, class, local_class, node, pv, pvc,
    };
    use crate::extender::model::Class;

    fn annotated(name: &str, strategy: &str) -> Class {
        let mut sc = class(name, "kubernetes.io/no-provisioner", true);
        sc.metadata.annotations =
            Some([(ANN_SCORE_STRATEGY.to_string(), strategy.to_string())].into());
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
        let snap = Snapshot::new(NO_VOLUMES, NO_CLAIMS, [], [node("n1").build()]);
        let pc = PodClaims::resolve(&snap, "default", &[]);
        let verdicts = vec![pc.decide_node(None), pc.decide_node(None)];
        let got = score(&snap, Strategy::Binpack, pc.has_delayed(), &verdicts);
        assert_eq!(got, [NEUTRAL_SCORE, NEUTRAL_SCORE]);
    }
}
