//! The shortcuts (`decide/quick.rs`) against the general path on many generated clusters: every pod on every
//! node must get the same verdict, assignments, spare counts and reason both ways.

use rstest::rstest;

use super::*;
use crate::extender::fixtures::{PvBuilder, PvcBuilder, local_class, node, pv, pvc};
use crate::extender::model::Volume;

/// A small deterministic generator (64-bit LCG), so a failing seed reproduces.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % sides
    }
}

const NODES: [&str; 3] = ["n1", "n2", "n3"];

fn random_pv(dice: &mut Dice, i: usize) -> PvBuilder {
    let mut p = pv(&format!("p{i}"))
        .capacity(&format!("{}Gi", 1 + dice.roll(6)))
        .class(["local", "fast"][dice.roll(2) as usize]);
    p = match dice.roll(8) {
        0 => p.affinity(vec![vec![("zone", "In", vec!["a"])]]),
        1 => p.affinity(vec![vec![(
            crate::selector::HOSTNAME_LABEL,
            "In",
            vec!["n1", "n2"],
        )]]),
        _ => p.on_node(NODES[dice.roll(3) as usize]),
    };
    p = match dice.roll(16) {
        0 => p.bound(),
        1 => p.released(),
        2 => p.wiping(),
        3 => p.block(),
        4 => p.access(&["ReadOnlyMany"]),
        5 => p.label("tier", "fast"),
        6 => p.claim_ref("default", "c0", ""),
        7 => p.attributes_class("gold"),
        _ => p,
    };
    p
}

fn random_pvc(dice: &mut Dice, i: usize) -> PvcBuilder {
    let mut c = pvc(&format!("c{i}"))
        .request(&format!("{}Gi", 1 + dice.roll(5)))
        .class(["local", "fast"][dice.roll(2) as usize]);
    c = match dice.roll(8) {
        0 => c.select("tier", "fast"),
        1 => c.block(),
        2 => c.attributes_class("gold"),
        _ => c,
    };
    c
}

#[rstest]
fn shortcuts_agree_with_the_general_path_on_generated_clusters(
    #[values(1, 2, 3, 4, 5, 6, 7, 8)] seed: u64,
) {
    let mut dice = Dice(seed);
    for round in 0..40 {
        let pvs: Vec<Volume> = (0..3 + dice.roll(16) as usize)
            .map(|i| random_pv(&mut dice, i).build())
            .collect();
        let claims: Vec<Claim> = (0..3).map(|i| random_pvc(&mut dice, i).build()).collect();
        let snap = Snapshot::new(
            pvs,
            claims,
            [local_class("local"), local_class("fast")],
            [
                node("n1").label("zone", "a").build(),
                node("n2").label("zone", "b").build(),
                node("n3").label("zone", "a").build(),
            ],
        );
        for pod in [&["c0"][..], &["c1"], &["c0", "c1"], &["c0", "c1", "c2"]] {
            let names: Vec<String> = pod.iter().map(|c| c.to_string()).collect();
            for n in NODES {
                let resolve = || PodClaims::resolve(&snap, "default", &names);
                let general = resolve().without_shortcuts().decide_node(snap.node(n));
                let quick = resolve().decide_node(snap.node(n));
                let context = format!("seed {seed} round {round} pod {pod:?} node {n}");
                assert_eq!(quick, general, "{context}");
                let filter = resolve().verdicts_only().decide_node(snap.node(n));
                match (&filter, &general) {
                    (Verdict::Fit(_), Verdict::Fit(_)) => {}
                    _ => assert_eq!(filter, general, "verdict only, {context}"),
                }
            }
        }
    }
}
