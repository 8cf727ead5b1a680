use std::cell::RefCell;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use serde_json::json;

use super::checks::{PvModel, object};
use super::*;

#[test]
fn a_malformed_object_keeps_its_metadata_and_the_rest_of_its_list_decodes() {
    let body = json!({"metadata": {}, "items": [
        {"metadata": {"name": "good", "uid": "u1"}, "spec": {"capacity": {"storage": "1Gi"}}},
        {"metadata": {"name": "bad", "uid": "u2"}, "spec": {"capacity": "not a map"}},
        {"metadata": {"name": "after", "uid": "u3"}},
    ]});
    let list: kube::core::ObjectList<Guarded<PersistentVolume>> =
        serde_json::from_slice(body.to_string().as_bytes()).expect("the list decodes");
    let names: Vec<_> = list
        .items
        .iter()
        .map(|g| g.meta().name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["good", "bad", "after"]);
    assert!(list.items[0].0.is_ok() && list.items[2].0.is_ok());
    let invalid = list.items[1]
        .0
        .as_ref()
        .expect_err("the malformed PV is an error");
    assert_eq!(invalid.metadata.uid.as_deref(), Some("u2"));
    assert!(invalid.error.contains("invalid type"), "{}", invalid.error);
    // Not even metadata: the list fails, as it did with kube's guard.
    let broken = json!({"metadata": {}, "items": [{"metadata": "nope"}]}).to_string();
    assert!(
        serde_json::from_str::<kube::core::ObjectList<Guarded<PersistentVolume>>>(&broken).is_err()
    );
}

fn pod(namespace: &str, name: &str) -> Guarded<Pod> {
    object(
        json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")}}),
    )
}

/// A PV's capacity as text: the model of the tests below.
fn capacity(pv: PersistentVolume) -> Result<String, String> {
    let spec = pv.spec.ok_or("no spec")?;
    let storage = spec.capacity.and_then(|c| c.get("storage").cloned());
    storage.map(|q| q.0).ok_or_else(|| "no capacity".into())
}

#[test]
fn same_named_pods_in_two_namespaces_are_kept_apart() {
    let (store, keep) = (Store::<Pod>::new(), objects());
    for ns in ["a", "b"] {
        assert!(apply(&store, "Pod", Event::Apply(pod(ns, "web-0")), &keep));
    }
    assert_eq!(store.len(), 2);
    assert!(store.get("a/web-0").is_some() && store.get("b/web-0").is_some());
    assert!(apply(
        &store,
        "Pod",
        Event::Delete(pod("a", "web-0")),
        &keep
    ));
    let left: Vec<_> = store
        .all()
        .into_iter()
        .map(|p| p.metadata.namespace)
        .collect();
    assert_eq!(left, [Some("b".to_string())]);
}

#[test]
fn same_named_pods_in_two_namespaces_survive_a_relist() {
    let (store, keep) = (Store::<Pod>::new(), objects());
    apply(&store, "Pod", Event::Init, &keep);
    for ns in ["a", "b"] {
        apply(&store, "Pod", Event::InitApply(pod(ns, "web-0")), &keep);
    }
    assert!(apply(&store, "Pod", Event::InitDone, &keep));
    assert_eq!(store.len(), 2);
}

#[test]
fn objects_are_kept_without_their_managed_fields() {
    let (store, keep) = (Store::<Node>::new(), objects());
    let managed = json!([{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                          "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]);
    let node = object::<Node>(
        json!({"metadata": {"name": "node-1", "labels": {"zone": "a"}, "managedFields": managed}}),
    );
    apply(&store, "Node", Event::Apply(node), &keep);
    let kept = store.get("node-1").expect("kept");
    assert_eq!(kept.metadata.managed_fields, None);
    assert_eq!(
        kept.metadata.labels,
        Some([("zone".into(), "a".into())].into())
    );
}

#[test]
fn cluster_scoped_objects_are_found_by_name() {
    let (store, keep) = (Store::<Node>::new(), objects());
    let node = || object::<Node>(json!({"metadata": {"name": "node-1"}}));
    apply(&store, "Node", Event::Apply(node()), &keep);
    assert!(store.get("node-1").is_some());
    assert!(apply(&store, "Node", Event::Delete(node()), &keep));
    assert!(store.get("node-1").is_none());
}

#[test]
fn malformed_objects_are_skipped_and_a_relist_replaces_the_store() {
    PvModel(capacity).malformed_pvs_are_skipped_and_a_relist_replaces_the_store();
}

#[test]
fn an_object_the_model_refuses_is_skipped() {
    let (store, reader) = (Store::<String>::new(), models(capacity));
    let refused = object(json!({"metadata": {"name": "refused"}, "spec": {}}));
    apply(&store, "PV", Event::Init, &reader);
    apply(&store, "PV", Event::InitApply(refused), &reader);
    assert!(apply(&store, "PV", Event::InitDone, &reader));
    assert!(store.synced() && store.is_empty());
}

#[test]
fn an_update_that_leaves_the_model_as_it_was_changes_nothing() {
    PvModel(capacity).an_update_that_leaves_the_model_as_it_was_changes_nothing();
}

#[test]
fn an_object_passed_over_is_not_kept_and_drops_what_was_kept() {
    let store = Store::<Pod>::new();
    let reader = Reader {
        convert: |p: Pod| Ok::<_, Infallible>(p.metadata.labels.is_some().then_some(p)),
        observe: |_| {},
    };
    let labelled =
        object(json!({"metadata": {"name": "web-0", "namespace": "a", "labels": {"app": "web"}}}));
    assert!(apply(&store, "Pod", Event::Apply(labelled), &reader));
    assert!(
        apply(&store, "Pod", Event::Apply(pod("a", "web-0")), &reader),
        "no longer kept: dropped"
    );
    assert!(store.is_empty());
    assert!(!apply(
        &store,
        "Pod",
        Event::Apply(pod("a", "web-0")),
        &reader
    ));
}

#[test]
fn observe_hears_every_object_after_the_store_has_it() {
    let store = Store::<Pod>::new();
    let heard = RefCell::new(Vec::new());
    let reader = Reader {
        convert: |p: Pod| {
            Ok::<_, Infallible>((p.metadata.namespace.as_deref() == Some("a")).then_some(p))
        },
        observe: |seen| {
            let stored = store.len();
            heard.borrow_mut().push((seen, stored));
        },
    };
    apply(&store, "Pod", Event::Init, &reader);
    apply(&store, "Pod", Event::InitApply(pod("a", "r")), &reader);
    apply(&store, "Pod", Event::InitDone, &reader);
    apply(&store, "Pod", Event::Apply(pod("a", "w")), &reader);
    apply(&store, "Pod", Event::Apply(pod("b", "x")), &reader);
    apply(&store, "Pod", Event::Delete(pod("a", "w")), &reader);
    let uid = |n: &str| Some(format!("uid-{n}"));
    assert_eq!(
        heard.into_inner(),
        [
            (Seen::Relisted { uid: uid("r") }, 0),
            (Seen::Listed, 1),
            (Seen::Changed { uid: uid("w") }, 2),
            (Seen::Changed { uid: uid("x") }, 2),
            (Seen::Changed { uid: uid("w") }, 1),
        ]
    );
}

#[test]
fn a_replace_leaves_exactly_the_objects_given_and_the_store_synced() {
    let (store, keep) = (Store::<Pod>::new(), objects());
    apply(&store, "Pod", Event::Apply(pod("a", "gone")), &keep);
    assert!(!store.synced());
    replace(&store, "Pod", [pod("a", "web-0"), pod("b", "web-0")], &keep);
    assert!(store.synced());
    let mut left: Vec<_> = store
        .all()
        .into_iter()
        .map(|p| p.metadata.namespace)
        .collect();
    left.sort();
    assert_eq!(left, [Some("a".to_string()), Some("b".to_string())]);
    replace(&store, "Pod", Vec::<Guarded<Pod>>::new(), &keep);
    assert!(
        store.is_empty() && store.synced(),
        "an empty list empties it"
    );
}
