use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::*;
use crate::plan::pv::HOSTNAME_LABEL;
use crate::watch::checks::text;

fn node() -> NodeFacts {
    NodeFacts {
        name: "n1".into(),
        hostname_label: Some("n1".into()),
        uid: "u".into(),
        labels: [("zone".to_string(), "a".to_string())].into(),
    }
}

fn pv_json(name: &str, labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
        "spec": spec,
    })
}

fn pv(name: &str, labels: Value) -> Text<PersistentVolume> {
    text(pv_json(name, labels, json!({})))
}

fn affinity(key: &str, value: &str) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": key, "operator": "In", "values": [value]}]}]}})
}

fn kept(name: &str, labels: Value, spec: Value) -> bool {
    let pv = serde_json::from_value(pv_json(name, labels, spec)).expect("a valid PV");
    reaches(&node(), &pv)
}

/// An index whose watch has listed (nothing) for `node()`.
fn synced() -> Arc<PvIndex> {
    let index = PvIndex::new();
    index.set_node(&node());
    index.set_narrow(false);
    index.apply(&node(), Event::Init);
    index.apply(&node(), Event::InitDone);
    index
}

#[test]
fn pvs_that_can_reach_this_node_are_kept() {
    let local = json!({"local": {"path": "/mnt/d/1"}});
    assert!(kept("labelled", json!({NODE_LABEL: "n1"}), json!({})));
    assert!(kept("no-affinity", json!({}), local.clone()));
    let mut here = local.clone();
    here["nodeAffinity"] = affinity(HOSTNAME_LABEL, "n1");
    assert!(kept("hostname", json!({}), here));
    let mut zone = json!({"hostPath": {"path": "/mnt/d"}});
    zone["nodeAffinity"] = affinity("zone", "a");
    assert!(kept("zone", json!({}), zone));
}

#[test]
fn a_glance_keeps_exactly_the_pvs_a_full_decode_keeps() {
    let local = json!({"local": {"path": "/mnt/d/1"}});
    let with = |mut spec: Value, key: &str, value: &str| {
        spec["nodeAffinity"] = affinity(key, value);
        spec
    };
    let by_fields = json!({"local": {"path": "/mnt/d/1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]}}});
    let not_in = json!({"local": {"path": "/mnt/d/1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]}}});
    let reference =
        |node: &str| json!({ANN_PROVISIONED_BY: format!("local-volume-provisioner-{node}-abc")});
    let cases = [
        pv_json("labelled", json!({NODE_LABEL: "n1"}), json!({})),
        pv_json(
            "labelled-elsewhere",
            json!({NODE_LABEL: "n2"}),
            with(local.clone(), HOSTNAME_LABEL, "n2"),
        ),
        pv_json("local-no-affinity", json!({}), local.clone()),
        pv_json(
            "local-here",
            json!({}),
            with(local.clone(), HOSTNAME_LABEL, "n1"),
        ),
        pv_json(
            "local-elsewhere",
            json!({}),
            with(local.clone(), HOSTNAME_LABEL, "n2"),
        ),
        pv_json(
            "hostpath-zone",
            json!({}),
            with(json!({"hostPath": {"path": "/d"}}), "zone", "a"),
        ),
        pv_json(
            "hostpath-other-zone",
            json!({}),
            with(json!({"hostPath": {"path": "/d"}}), "zone", "b"),
        ),
        pv_json("by-fields", json!({}), by_fields),
        pv_json("not-in", json!({}), not_in),
        pv_json(
            "nfs",
            json!({}),
            json!({"nfs": {"server": "s", "path": "/x"}}),
        ),
        pv_json("null-labels", Value::Null, local.clone()),
        json!({"metadata": {"name": "no-spec", "labels": {NODE_LABEL: "n1"}}}),
        json!({"metadata": {"name": "null-spec"}, "spec": null}),
        json!({"metadata": {"name": "ref-here", "annotations": reference("n1")},
               "spec": with(local.clone(), HOSTNAME_LABEL, "n7")}),
        json!({"metadata": {"name": "ref-elsewhere", "annotations": reference("n2")},
               "spec": with(local.clone(), HOSTNAME_LABEL, "n2")}),
        // Malformed where the glance reads, and where it does not: kept or dropped as the full decode says.
        pv_json("bad-label", json!({NODE_LABEL: 5}), local.clone()),
        pv_json(
            "bad-affinity",
            json!({}),
            json!({"local": {"path": "/d"}, "nodeAffinity": "n1"}),
        ),
        pv_json(
            "bad-here",
            json!({NODE_LABEL: "n1"}),
            json!({"capacity": "not a map"}),
        ),
        pv_json(
            "bad-elsewhere",
            json!({NODE_LABEL: "n2"}),
            json!({"capacity": "not a map"}),
        ),
    ];
    for case in cases {
        let full = serde_json::from_value::<PersistentVolume>(case.clone())
            .ok()
            .filter(|pv| reaches(&node(), pv));
        let kept = keep(&node(), &text(case.clone())).ok().flatten();
        assert_eq!(kept, full, "{case}");
    }
}

#[test]
fn pvs_that_cannot_reach_this_node_are_dropped() {
    let mut elsewhere = json!({"local": {"path": "/mnt/d/1"}});
    elsewhere["nodeAffinity"] = affinity(HOSTNAME_LABEL, "n2");
    assert!(!kept("other-node", json!({NODE_LABEL: "n2"}), elsewhere));
    let nfs = json!({"nfs": {"server": "s", "path": "/x"}});
    assert!(!kept("nfs", json!({}), nfs));
}

#[test]
fn the_index_is_complete_only_once_synced_with_every_own_create_shown() {
    let index = PvIndex::new();
    index.set_node(&node());
    index.set_narrow(false);
    assert!(!index.view().complete);
    index.apply(&node(), Event::Init);
    index.apply(&node(), Event::InitDone);
    assert!(index.view().complete);
    index.created("mine", "uid-mine");
    assert!(!index.view().complete, "an own create not yet shown");
    let mine = pv("mine", json!({NODE_LABEL: "n1"}));
    assert!(index.apply(&node(), Event::Apply(mine)));
    assert!(index.view().complete);
    let mut relabelled = node();
    relabelled.labels.insert("zone".into(), "b".into());
    index.set_node(&relabelled);
    assert!(!index.view().complete, "filtered with stale labels");
}

#[test]
fn a_kept_pv_is_kept_without_its_managed_fields() {
    let index = synced();
    let mut mine = pv_json("mine", json!({NODE_LABEL: "n1"}), json!({}));
    mine["metadata"]["managedFields"] = json!([{"manager": "kube-controller-manager", "operation": "Update",
        "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]);
    assert!(index.apply(&node(), Event::Apply(text(mine))));
    let view = index.view();
    let kept: Vec<_> = view.pvs.pvs.iter().map(|pv| &pv.metadata).collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].name.as_deref(), Some("mine"));
    assert_eq!(kept[0].managed_fields, None);
}

#[test]
fn a_pv_that_stops_reaching_this_node_leaves_the_index() {
    let index = PvIndex::new();
    index.set_node(&node());
    index.set_narrow(false);
    let labelled = pv("p", json!({NODE_LABEL: "n1"}));
    assert!(index.apply(&node(), Event::Apply(labelled)));
    let moved = pv("p", json!({NODE_LABEL: "n2"}));
    assert!(index.apply(&node(), Event::Apply(moved)));
    assert!(index.view().pvs.pvs.is_empty());
}

#[test]
fn an_own_create_shown_then_deleted_before_the_response_is_not_awaited() {
    let index = synced();
    let mine = pv("mine", json!({NODE_LABEL: "n1"}));
    index.apply(&node(), Event::Apply(mine));
    index.created("mine", "uid-mine");
    assert!(index.view().complete, "shown before the create response");
    index.created("gone", "uid-gone");
    let gone = pv("gone", json!({NODE_LABEL: "n1"}));
    index.apply(&node(), Event::Delete(gone));
    assert!(index.view().complete, "a delete shows the PV too");
}

#[test]
fn a_relist_shows_own_creates_only_when_it_completes() {
    let index = synced();
    index.created("mine", "uid-mine");
    index.apply(&node(), Event::Init);
    let mine = pv("mine", json!({NODE_LABEL: "n1"}));
    index.apply(&node(), Event::InitApply(mine));
    assert!(!index.view().complete, "listed but not yet in the store");
    index.apply(&node(), Event::InitDone);
    let view = index.view();
    assert!(view.complete && view.pvs.pvs.len() == 1);
}

#[test]
fn a_view_with_no_pv_changed_shares_the_last_one_and_a_change_makes_a_new_one() {
    let index = synced();
    index.apply(&node(), Event::Apply(pv("a", json!({NODE_LABEL: "n1"}))));
    let first = index.view().pvs;
    let second = index.view().pvs;
    assert!(
        Arc::ptr_eq(&first.pvs, &second.pvs),
        "nothing changed: the same list"
    );
    index.apply(&node(), Event::Apply(pv("b", json!({NODE_LABEL: "n1"}))));
    let third = index.view().pvs;
    assert!(third.generation > first.generation);
    assert_eq!(third.pvs.len(), 2);
    index.apply(&node(), Event::Delete(pv("a", json!({NODE_LABEL: "n1"}))));
    assert_eq!(index.view().pvs.pvs.len(), 1, "a delete shows too");
}

#[test]
fn an_own_create_is_not_taken_as_shown_by_an_older_pv_of_that_name() {
    let index = synced();
    // The store still holds an earlier PV of the name (UID uid-mine); the new one is another object.
    index.apply(&node(), Event::Apply(pv("mine", json!({NODE_LABEL: "n1"}))));
    index.created("mine", "uid-recreated");
    assert!(!index.view().complete, "the new UID is not shown yet");
}
