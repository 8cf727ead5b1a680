use rstest::rstest;

use super::*;
use crate::extender::fixtures::{NO_CLAIMS, NO_VOLUMES, PvBuilder, node, pv};

fn snapshot(pvs: Vec<PvBuilder>) -> Snapshot {
    Snapshot::new(
        pvs.into_iter().map(PvBuilder::build),
        NO_CLAIMS,
        [],
        [
            node("n1").label("zone", "a").build(),
            node("n2").label("zone", "b").build(),
            // A node whose hostname label is not its name, as on some clouds.
            node("n3")
                .label(HOSTNAME_LABEL, "ip-10-0-0-3")
                .label("zone", "a")
                .build(),
        ],
    )
}

fn names<'a>(snap: &'a Snapshot, class: &str, node: NodeRef) -> Vec<&'a str> {
    snap.candidates(class, node)
        .map(|s| snap.volume(s.id()).name.as_str())
        .collect()
}

fn cached<'a>(snap: &'a Snapshot, name: &str) -> NodeRef<'a> {
    snap.node(name).expect("the node is in the snapshot")
}

#[test]
fn candidates_merge_pinned_and_general_pvs_by_capacity() {
    let snap = snapshot(vec![
        pv("big").on_node("n1").capacity("100Gi"),
        pv("small").on_node("n1").capacity("1Gi"),
        pv("anywhere").capacity("5Gi"),
        pv("other-node").on_node("n2").capacity("2Gi"),
        pv("other-class")
            .on_node("n1")
            .capacity("2Gi")
            .class("fast"),
    ]);
    assert_eq!(
        names(&snap, "local", cached(&snap, "n1")),
        ["small", "anywhere", "big"]
    );
    assert_eq!(names(&snap, "fast", cached(&snap, "n1")), ["other-class"]);
}

#[rstest]
#[case::zone_affinity(pv("z").affinity(vec![vec![("zone", "In", vec!["a"])]]))]
#[case::no_affinity(pv("z"))]
#[case::hostname_or_zone(pv("z").affinity(vec![
    vec![(HOSTNAME_LABEL, "In", vec!["n1"])],
    vec![("zone", "In", vec!["b"])],
]))]
fn a_pv_not_pinned_by_hostname_alone_is_a_candidate_on_every_node(#[case] volume: PvBuilder) {
    let snap = snapshot(vec![volume]);
    for n in ["n1", "n2", "n3"] {
        assert_eq!(names(&snap, "local", cached(&snap, n)), ["z"], "node {n}");
        let slot = snap
            .candidates("local", cached(&snap, n))
            .next()
            .expect("one candidate");
        assert!(
            !slot.affinity_is_hostname(),
            "node {n}: affinity must still be evaluated"
        );
    }
}

#[test]
fn a_pv_pinned_to_several_hosts_is_found_under_each() {
    let snap = snapshot(vec![pv("shared").affinity(vec![vec![(
        HOSTNAME_LABEL,
        "In",
        vec!["n2", "n1", "elsewhere"],
    )]])]);
    assert_eq!(names(&snap, "local", cached(&snap, "n1")), ["shared"]);
    assert_eq!(names(&snap, "local", cached(&snap, "n2")), ["shared"]);
    assert!(names(&snap, "local", cached(&snap, "n3")).is_empty());
}

#[test]
fn pinned_pvs_are_found_by_the_hostname_label_not_the_node_name() {
    let snap = snapshot(vec![
        pv("by-label").on_node("ip-10-0-0-3"),
        pv("by-name").on_node("n3"),
    ]);
    assert_eq!(names(&snap, "local", cached(&snap, "n3")), ["by-label"]);
}

#[test]
fn nodes_known_only_by_labels_find_the_same_pvs_as_cached_ones() {
    let snap = snapshot(vec![
        pv("pinned").on_node("n1").capacity("1Gi"),
        pv("anywhere").capacity("2Gi"),
    ]);
    let (_, n1) = node("n1").build();
    assert_eq!(
        names(&snap, "local", snap.node_from_labels(&n1)),
        ["pinned", "anywhere"]
    );
    // A hostname neither a node nor a PV mentions: only the general PVs can be there.
    let (_, stranger) = node("stranger").build();
    assert_eq!(
        names(&snap, "local", snap.node_from_labels(&stranger)),
        ["anywhere"]
    );
}

#[rstest]
#[case::available(pv("p").on_node("n1"), true, false, false)]
#[case::bound(pv("p").on_node("n1").bound(), false, true, false)]
#[case::released_delete(pv("p").on_node("n1").released(), false, true, true)]
#[case::released_retain(pv("p").on_node("n1").released().retain(), false, true, false)]
#[case::wiping(pv("p").on_node("n1").wiping(), true, false, true)]
#[case::deleting(pv("p").on_node("n1").deleting(), false, false, false)]
#[case::pending(pv("p").on_node("n1").phase("Pending"), false, false, false)]
fn slots_copy_the_state_the_scan_reads(
    #[case] volume: PvBuilder,
    #[case] free: bool,
    #[case] claimed: bool,
    #[case] coming_back: bool,
) {
    let v = volume.build();
    let snap = Snapshot::new([v.clone()], NO_CLAIMS, [], [node("n1").build()]);
    let slot = *snap
        .candidates("local", cached(&snap, "n1"))
        .next()
        .expect("one candidate");
    assert_eq!(
        (slot.is_free(), slot.is_claimed(), slot.coming_back()),
        (free, claimed, coming_back)
    );
    assert!(slot.affinity_is_hostname());
    assert_eq!(
        (slot.capacity, slot.mode, slot.access),
        (v.capacity, v.mode, v.access)
    );
}

#[test]
fn attributes_classes_are_interned_and_unknown_ones_match_no_pv() {
    let snap = snapshot(vec![
        pv("gold").on_node("n1").attributes_class("gold"),
        pv("plain").on_node("n1").capacity("20Gi"),
    ]);
    let slots: Vec<Slot> = snap
        .candidates("local", cached(&snap, "n1"))
        .copied()
        .collect();
    assert_eq!(slots[0].attributes, snap.attributes_id("gold"));
    assert_eq!(slots[1].attributes, snap.attributes_id(""));
    assert_ne!(snap.attributes_id("gold"), snap.attributes_id(""));
    assert_eq!(snap.attributes_id("silver"), UNKNOWN_ATTRIBUTES);
}

#[test]
fn node_lookups_find_every_node_and_only_those() {
    let nodes: Vec<(String, Labels)> = (0..3000)
        .map(|i| {
            node(&format!("node-{i}"))
                .label("i", &i.to_string())
                .build()
        })
        .collect();
    // The same name twice keeps the last labels, as a map would.
    let again = node("node-7").label("i", "again").build();
    let snap = Snapshot::new(NO_VOLUMES, NO_CLAIMS, [], nodes.into_iter().chain([again]));
    assert_eq!(snap.counts()[3].1, 3000);
    for i in 0..3000 {
        let name = format!("node-{i}");
        let labels = snap.node_labels(&name).expect("every node is found");
        let want = if i == 7 {
            "again".to_string()
        } else {
            i.to_string()
        };
        assert_eq!(labels.get("i"), Some(&want));
    }
    for stranger in ["node-3000", "", "node-", "node-12345678901234567890"] {
        assert!(snap.node(stranger).is_none(), "{stranger:?} is not a node");
    }
    let mut names: Vec<&str> = snap.node_names().collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 3000);
    assert!(Snapshot::default().node("n1").is_none());
}
