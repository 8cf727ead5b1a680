use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::json;

use super::*;

/// A guarded object from its JSON, as the watch hands it over.
pub(crate) fn object<K: Resource + DeserializeOwned>(value: serde_json::Value) -> Guarded<K> {
    serde_json::from_str(&value.to_string()).expect("a guarded object")
}

/// An object as the PV index's watch hands it over: its text.
pub(crate) fn text<K>(value: serde_json::Value) -> Text<K> {
    serde_json::from_str(&value.to_string()).expect("an object's text")
}

/// A reader's conversion of PVs into its model, to check the store with.
pub(crate) struct PvModel<C>(pub C);

impl<T: PartialEq, E: Display, C: Fn(PersistentVolume) -> Result<T, E>> PvModel<C> {
    /// An object that cannot be read is skipped; a relist replaces the store at `InitDone`.
    pub(crate) fn malformed_pvs_are_skipped_and_a_relist_replaces_the_store(&self) {
        let reader = models(&self.0);
        let store = Store::<T>::new();
        let apply_pv = |event| apply(&store, "PV", event, &reader);
        let ok = || {
            object::<PersistentVolume>(
                json!({"metadata": {"name": "good"}, "spec": {"capacity": {"storage": "1Gi"}}}),
            )
        };
        let bad = object(json!({"metadata": {"name": "bad"}, "spec": {"capacity": "not a map"}}));
        apply_pv(Event::Init);
        apply_pv(Event::InitApply(ok()));
        apply_pv(Event::InitApply(bad));
        assert!(!store.synced());
        assert!(apply_pv(Event::InitDone));
        assert!(store.synced());
        assert_eq!(
            store.read(|items| items.keys().cloned().collect::<Vec<_>>()),
            ["good"]
        );
        assert!(apply_pv(Event::Delete(ok())));
        assert!(store.is_empty());
    }

    /// An update that changes only what the model does not keep (metadata) changes nothing and wakes no one.
    pub(crate) fn an_update_that_leaves_the_model_as_it_was_changes_nothing(&self) {
        let reader = models(&self.0);
        let store = Store::<T>::new();
        let pv = |version: &str, size: &str| {
            let meta = json!({"name": "pv1", "resourceVersion": version,
                          "annotations": {"example.com/seen": version}});
            Event::Apply(object::<PersistentVolume>(
                json!({"metadata": meta, "spec": {"capacity": {"storage": size}}}),
            ))
        };
        let apply_pv = |event| apply(&store, "PV", event, &reader);
        assert!(apply_pv(pv("1", "1Gi")), "a new PV is a change");
        let seen = store.generation();
        assert!(
            !apply_pv(pv("2", "1Gi")),
            "only metadata the model ignores changed"
        );
        assert_eq!(store.generation(), seen);
        assert!(apply_pv(pv("3", "2Gi")), "the capacity changed");
        let unreadable = || {
            Event::Apply(object::<PersistentVolume>(
                json!({"metadata": {"name": "pv1"}, "spec": {"capacity": "x"}}),
            ))
        };
        assert!(apply_pv(unreadable()), "an unreadable update drops the PV");
        assert!(!apply_pv(unreadable()), "nothing left to drop");
    }
}
