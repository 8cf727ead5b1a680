use rstest::rstest;

use super::*;
use crate::extender::fixtures::{PvBuilder, PvcBuilder, class, local_class, node, pv, pvc};
use crate::extender::model::Class;

fn snapshot(pvs: Vec<PvBuilder>, pvcs: Vec<PvcBuilder>) -> Snapshot {
    let other = |name, provisioner, wffc| {
        Class::from_storage_class(&class(name, provisioner, wffc)).expect("named")
    };
    Snapshot::new(
        pvs.into_iter().map(PvBuilder::build),
        pvcs.into_iter().map(PvcBuilder::build),
        [
            local_class("local"),
            local_class("fast"),
            other("dynamic", "example.com/csi", true),
            other("immediate", "kubernetes.io/no-provisioner", false),
        ],
        [
            node("n1").label("zone", "a").build(),
            node("n2").label("zone", "b").build(),
            node("n3").build(),
        ],
    )
}

/// The detailed verdict, after checking that the shortcuts agree with the general path: the detailed one exactly
/// (assignments and spare counts included), the verdict-only one (filter's) on fit or reason.
fn decide_on(snap: &Snapshot, claims: &[&str], node: &str) -> Verdict {
    let names: Vec<String> = claims.iter().map(|c| c.to_string()).collect();
    let resolve = || PodClaims::resolve(snap, "default", &names);
    let labels = snap.node_labels(node);
    let detailed = resolve().decide(labels);
    let general = resolve().without_shortcuts().decide(labels);
    assert_eq!(
        detailed, general,
        "shortcut disagrees with the general path"
    );
    let cached = resolve().decide_node(snap.node(node));
    assert_eq!(detailed, cached, "cached node and node by labels disagree");
    for quick in [
        resolve().verdicts_only().decide(labels),
        resolve().verdicts_only().without_shortcuts().decide(labels),
    ] {
        match (&detailed, &quick) {
            (Verdict::Fit(_), Verdict::Fit(_)) => {}
            _ => assert_eq!(detailed, quick, "verdict-only path disagrees"),
        }
    }
    detailed
}

/// claim -> PV name of a fitting verdict; panics on any other verdict.
fn chosen(snap: &Snapshot, verdict: &Verdict) -> Vec<(String, String)> {
    match verdict {
        Verdict::Fit(fit) => fit
            .assignments
            .iter()
            .map(|a| (a.claim.to_string(), snap.volume(a.volume).name.clone()))
            .collect(),
        other => panic!("expected a fit, got {other:?}"),
    }
}

fn unresolvable(reason: &str) -> Verdict {
    Verdict::Unresolvable(reason.to_string())
}

fn failed(reason: &str) -> Verdict {
    Verdict::Failed(reason.to_string())
}

#[rstest]
#[case::free_pv_on_the_node_fits(pv("p").on_node("n1"), pvc("data"), None)]
#[case::claim_ref_to_this_claim_fits(pv("p").on_node("n1").claim_ref("default", "data", ""), pvc("data"), None)]
#[case::claim_ref_with_this_uid_fits(pv("p").on_node("n1").claim_ref("default", "data", "u-data"), pvc("data"), None)]
#[case::claim_ref_with_another_uid_is_bound(
    pv("p").on_node("n1").claim_ref("default", "data", "u-old").phase("Bound"),
    pvc("data"),
    Some(unresolvable("claim default/data: all 1 PVs of class local are bound"))
)]
#[case::claim_ref_to_another_claim_is_bound(
    pv("p").on_node("n1").bound(),
    pvc("data"),
    Some(unresolvable("claim default/data: all 1 PVs of class local are bound"))
)]
#[case::too_small(
    pv("p").on_node("n1").capacity("5Gi"),
    pvc("data").request("10Gi"),
    Some(unresolvable("claim default/data: largest free PV is 5Gi, claim asks 10Gi"))
)]
#[case::volume_mode_differs(
    pv("p").on_node("n1").block(),
    pvc("data"),
    Some(unresolvable("claim default/data: no free PV of class local has volume mode Filesystem"))
)]
#[case::block_claim_takes_block_pv(pv("p").on_node("n1").block(), pvc("data").block(), None)]
#[case::deletion_timestamp(
    pv("p").on_node("n1").deleting(),
    pvc("data"),
    Some(unresolvable("claim default/data: none of the 1 PVs of class local is Available"))
)]
#[case::affinity_for_another_node(
    pv("p").on_node("n2"),
    pvc("data"),
    Some(unresolvable("claim default/data: no PV of class local on node"))
)]
#[case::label_affinity_matching_the_node(pv("p").affinity(vec![vec![("zone", "In", vec!["a"])]]), pvc("data"), None)]
#[case::label_affinity_for_other_nodes(
    pv("p").affinity(vec![vec![("zone", "NotIn", vec!["a"])]]),
    pvc("data"),
    Some(unresolvable("claim default/data: no PV of class local on node"))
)]
#[case::phase_pending(
    pv("p").on_node("n1").phase("Pending"),
    pvc("data"),
    Some(unresolvable("claim default/data: none of the 1 PVs of class local is Available"))
)]
#[case::selector_matches(pv("p").on_node("n1").label("tier", "fast"), pvc("data").select("tier", "fast"), None)]
#[case::selector_differs(
    pv("p").on_node("n1").label("tier", "slow"),
    pvc("data").select("tier", "fast"),
    Some(unresolvable("claim default/data: no free PV of class local matches the claim's selector"))
)]
#[case::selector_expression(
    pv("p").on_node("n1").label("tier", "slow"),
    pvc("data").select_expr("tier", "NotIn", &["slow"]),
    Some(unresolvable("claim default/data: no free PV of class local matches the claim's selector"))
)]
#[case::class_differs(
    pv("p").on_node("n1").class("fast"),
    pvc("data"),
    Some(unresolvable("claim default/data: no PV of class local on node"))
)]
#[case::beta_annotation_wins_on_the_pv(pv("p").on_node("n1").class("fast").beta_class("local"), pvc("data"), None)]
#[case::beta_annotation_moves_the_pv_away(
    pv("p").on_node("n1").beta_class("fast"),
    pvc("data"),
    Some(unresolvable("claim default/data: no PV of class local on node"))
)]
#[case::beta_annotation_wins_on_the_claim(pv("p").on_node("n1").class("fast"), pvc("data").beta_class("fast"), None)]
#[case::access_modes_missing(
    pv("p").on_node("n1"),
    pvc("data").access(&["ReadWriteOnce", "ReadWriteMany"]),
    Some(unresolvable("claim default/data: no free PV of class local offers access modes ReadWriteOnce,ReadWriteMany"))
)]
#[case::access_modes_superset(pv("p").on_node("n1").access(&["ReadWriteOnce", "ReadOnlyMany"]), pvc("data"), None)]
#[case::released_with_delete_comes_back(
    pv("p").on_node("n1").released(),
    pvc("data"),
    Some(failed("claim default/data: 1 PVs of class local are being wiped"))
)]
#[case::being_wiped_comes_back(
    pv("p").on_node("n1").released().retain().wiping(),
    pvc("data"),
    Some(failed("claim default/data: 1 PVs of class local are being wiped"))
)]
#[case::released_with_retain_stays_bound(
    pv("p").on_node("n1").released().retain(),
    pvc("data"),
    Some(unresolvable("claim default/data: all 1 PVs of class local are bound"))
)]
#[case::volume_attributes_class_must_be_equal(
    pv("p").on_node("n1").attributes_class("gold"),
    pvc("data"),
    Some(unresolvable("claim default/data: no free PV of class local has volume attributes class \"\""))
)]
#[case::equal_volume_attributes_classes_fit(
    pv("p").on_node("n1").attributes_class("gold"),
    pvc("data").attributes_class("gold"),
    None
)]
#[case::released_but_too_small_never_helps(
    pv("p").on_node("n1").released().capacity("512Mi"),
    pvc("data"),
    Some(unresolvable("claim default/data: all 1 PVs of class local are bound"))
)]
fn each_in_tree_rule_decides_a_single_claim(
    #[case] volume: PvBuilder,
    #[case] claim: PvcBuilder,
    #[case] rejected: Option<Verdict>,
) {
    let snap = snapshot(vec![volume], vec![claim]);
    let verdict = decide_on(&snap, &["data"], "n1");
    match rejected {
        None => assert_eq!(
            chosen(&snap, &verdict),
            [("default/data".to_string(), "p".to_string())]
        ),
        Some(want) => assert_eq!(verdict, want),
    }
}

#[test]
fn the_smallest_fitting_pv_is_chosen() {
    let snap = snapshot(
        vec![
            pv("p100").on_node("n1").capacity("100Gi"),
            pv("p10").on_node("n1").capacity("10Gi"),
            pv("p20").on_node("n1").capacity("20Gi"),
            pv("p5").on_node("n1").capacity("5Gi"),
        ],
        vec![pvc("data").request("8Gi")],
    );
    assert_eq!(
        chosen(&snap, &decide_on(&snap, &["data"], "n1")),
        [("default/data".into(), "p10".into())]
    );
}

#[test]
fn greedy_order_is_kept_when_it_works() {
    let snap = snapshot(
        vec![
            pv("p4").on_node("n1").capacity("4Gi"),
            pv("p2").on_node("n1").capacity("2Gi"),
            pv("p3").on_node("n1").capacity("3Gi"),
        ],
        vec![pvc("b").request("2Gi"), pvc("a").request("1Gi")],
    );
    let verdict = decide_on(&snap, &["b", "a"], "n1");
    assert!(matches!(&verdict, Verdict::Fit(fit) if !fit.greedy_misses));
    let got = chosen(&snap, &verdict);
    assert_eq!(
        got,
        [
            ("default/a".into(), "p2".into()),
            ("default/b".into(), "p3".into())
        ]
    );
}

#[test]
fn an_assignment_is_found_where_greedy_fails() {
    // Greedy gives the small claim the small fast PV, leaving the fast-only claim nothing.
    let snap = snapshot(
        vec![
            pv("fast")
                .on_node("n1")
                .capacity("5Gi")
                .label("tier", "fast"),
            pv("plain").on_node("n1").capacity("10Gi"),
        ],
        vec![
            pvc("small").request("1Gi"),
            pvc("picky").request("2Gi").select("tier", "fast"),
        ],
    );
    let verdict = decide_on(&snap, &["small", "picky"], "n1");
    assert!(matches!(&verdict, Verdict::Fit(fit) if fit.greedy_misses));
    let got = chosen(&snap, &verdict);
    assert_eq!(
        got,
        [
            ("default/small".into(), "plain".into()),
            ("default/picky".into(), "fast".into())
        ]
    );
}

#[test]
fn an_assignment_is_found_across_a_chain_of_displacements() {
    let snap = snapshot(
        vec![
            pv("x").on_node("n1").capacity("1Gi").label("k", "x"),
            pv("y").on_node("n1").capacity("2Gi").label("k", "y"),
            pv("z").on_node("n1").capacity("3Gi"),
        ],
        vec![
            pvc("a").request("1Gi"),
            pvc("b").request("1Gi").select_expr("k", "In", &["x", "y"]),
            pvc("c").request("1Gi").select("k", "x"),
        ],
    );
    let got = chosen(&snap, &decide_on(&snap, &["a", "b", "c"], "n1"));
    assert_eq!(
        got,
        [
            ("default/a".into(), "z".into()),
            ("default/b".into(), "y".into()),
            ("default/c".into(), "x".into())
        ]
    );
}

#[test]
fn two_claims_competing_for_one_pv_are_unresolvable() {
    let snap = snapshot(vec![pv("only").on_node("n1")], vec![pvc("a"), pvc("b")]);
    assert_eq!(
        decide_on(&snap, &["a", "b"], "n1"),
        unresolvable(
            "claim default/b: its 1 matching PVs of class local are needed by the pod's other claims"
        )
    );
}

#[test]
fn competing_claims_wait_when_a_wiped_pv_will_serve_one() {
    let snap = snapshot(
        vec![
            pv("free").on_node("n1"),
            pv("wiped").on_node("n1").released(),
        ],
        vec![pvc("a"), pvc("b")],
    );
    assert_eq!(
        decide_on(&snap, &["a", "b"], "n1"),
        failed(
            "claim default/b: its 1 matching PVs of class local are needed by the pod's other claims; 1 more being wiped"
        )
    );
}

#[test]
fn a_prebound_pv_wins_over_a_smaller_free_one() {
    let snap = snapshot(
        vec![
            pv("small").on_node("n1").capacity("2Gi"),
            pv("mine")
                .on_node("n1")
                .capacity("50Gi")
                .claim_ref("default", "data", "u-data"),
        ],
        vec![pvc("data")],
    );
    assert_eq!(
        chosen(&snap, &decide_on(&snap, &["data"], "n1")),
        [("default/data".into(), "mine".into())]
    );
}

#[test]
fn a_prebound_pv_on_another_node_rules_this_node_out() {
    let snap = snapshot(
        vec![
            pv("free").on_node("n1"),
            pv("mine").on_node("n2").claim_ref("default", "data", ""),
        ],
        vec![pvc("data")],
    );
    assert_eq!(
        decide_on(&snap, &["data"], "n1"),
        unresolvable("claim default/data: pre-bound PV mine has node affinity for other nodes")
    );
    assert_eq!(
        chosen(&snap, &decide_on(&snap, &["data"], "n2")),
        [("default/data".into(), "mine".into())]
    );
}

#[test]
fn a_bound_claim_needs_its_pv_on_the_node() {
    let snap = snapshot(
        vec![pv("p").on_node("n1").bound()],
        vec![pvc("data").volume_name("p")],
    );
    assert_eq!(
        decide_on(&snap, &["data"], "n1"),
        Verdict::Fit(Fit::default())
    );
    assert_eq!(
        decide_on(&snap, &["data"], "n2"),
        unresolvable("claim default/data: bound PV p has node affinity for other nodes")
    );
}

#[rstest]
#[case::dynamic_class(pvc("data").class("dynamic"))]
#[case::immediate_class(pvc("data").class("immediate"))]
#[case::no_class(pvc("data").no_class())]
fn claims_outside_static_delayed_classes_pass_every_node(#[case] claim: PvcBuilder) {
    let snap = snapshot(vec![], vec![claim]);
    let pc = PodClaims::resolve(&snap, "default", &["data".to_string()]);
    assert!(pc.is_trivial());
    assert_eq!(pc.decide_node(None), Verdict::Fit(Fit::default()));
    assert_eq!(
        pc.decide(snap.node_labels("n1")),
        Verdict::Fit(Fit::default())
    );
}

#[rstest]
#[case::missing_claim_is_cache_lag(vec![], failed("claim default/data: not found"))]
#[case::missing_class_is_cache_lag(
    vec![pvc("data").class("gone")],
    failed("claim default/data: storage class gone not found")
)]
#[case::claim_being_deleted(vec![pvc("data").deleting()], unresolvable("claim default/data: being deleted"))]
#[case::bound_pv_missing_is_cache_lag(
    vec![pvc("data").volume_name("ghost")],
    failed("claim default/data: bound PV ghost not found")
)]
fn pod_wide_problems_reject_every_node(#[case] claims: Vec<PvcBuilder>, #[case] want: Verdict) {
    let snap = snapshot(vec![pv("p").on_node("n1")], claims);
    for n in ["n1", "n2"] {
        assert_eq!(decide_on(&snap, &["data"], n), want);
    }
}

#[test]
fn a_node_unknown_to_the_cache_fails_resolvably() {
    let snap = snapshot(vec![pv("p").on_node("n1")], vec![pvc("data")]);
    let pc = PodClaims::resolve(&snap, "default", &["data".to_string()]);
    assert_eq!(pc.decide_node(None), failed("node not in extender cache"));
}

#[test]
fn a_claim_without_pvs_names_itself_among_several() {
    let snap = snapshot(
        vec![pv("p").on_node("n1")],
        vec![pvc("a"), pvc("b").class("fast")],
    );
    assert_eq!(
        decide_on(&snap, &["a", "b"], "n1"),
        unresolvable("claim default/b: no PV of class fast on node")
    );
}

#[test]
fn spare_counts_matching_free_pvs_left_per_class() {
    let snap = snapshot(
        vec![
            pv("p1").on_node("n1"),
            pv("p2").on_node("n1"),
            pv("p3").on_node("n1"),
            pv("f1").on_node("n1").class("fast"),
        ],
        vec![pvc("a"), pvc("b").class("fast")],
    );
    let Verdict::Fit(fit) = decide_on(&snap, &["a", "b"], "n1") else {
        panic!("expected a fit")
    };
    assert_eq!(fit.spare, [("fast".into(), 0), ("local".into(), 2)]);
}

#[test]
fn the_same_claim_mounted_twice_needs_one_pv() {
    let snap = snapshot(vec![pv("p").on_node("n1")], vec![pvc("data")]);
    assert_eq!(
        chosen(&snap, &decide_on(&snap, &["data", "data"], "n1")).len(),
        1
    );
}

#[test]
fn remembered_reasons_still_name_each_nodes_own_numbers() {
    let snap = snapshot(
        vec![
            pv("a").on_node("n1").capacity("5Gi"),
            pv("b").on_node("n2").capacity("5Gi"),
            pv("c").on_node("n3").capacity("7Gi"),
        ],
        vec![pvc("data").request("10Gi")],
    );
    let names = ["data".to_string()];
    let pc = PodClaims::resolve(&snap, "default", &names);
    let reasons: Vec<Verdict> = ["n1", "n2", "n3", "n1"]
        .iter()
        .map(|n| pc.decide(snap.node_labels(n)))
        .collect();
    let small = unresolvable("claim default/data: largest free PV is 5Gi, claim asks 10Gi");
    let bigger = unresolvable("claim default/data: largest free PV is 7Gi, claim asks 10Gi");
    assert_eq!(reasons, [small.clone(), small.clone(), bigger, small]);
}
