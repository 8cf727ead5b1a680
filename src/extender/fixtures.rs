//! Test builders: `pv("a").on_node("n1").capacity("10Gi").class("local").build()` and friends.
//!
//! They build real k8s-openapi objects and convert them with the production code, so the conversions are
//! exercised by every decision test.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeSpec,
    PersistentVolumeStatus, VolumeNodeAffinity, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};

use super::model::{BETA_CLASS_ANNOTATION, Claim, Class, Volume, node_labels};
use crate::contract::ANN_WIPE_PHASE;
use crate::selector::{HOSTNAME_LABEL, Labels};

fn deleted_now() -> Time {
    Time(
        "2024-01-01T00:00:00Z"
            .parse()
            .expect("a valid timestamp literal"),
    )
}

/// Empty model lists for `Snapshot::new`, whose element types an empty `[]` does not name.
pub const NO_VOLUMES: [Volume; 0] = [];
pub const NO_CLAIMS: [Claim; 0] = [];

pub struct PvBuilder(pub PersistentVolume);

pub fn pv(name: &str) -> PvBuilder {
    let mut pv = PersistentVolume::default();
    pv.metadata.name = Some(name.into());
    pv.spec = Some(PersistentVolumeSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        capacity: Some(BTreeMap::from([(
            "storage".into(),
            Quantity("10Gi".into()),
        )])),
        storage_class_name: Some("local".into()),
        persistent_volume_reclaim_policy: Some("Delete".into()),
        ..Default::default()
    });
    pv.status = Some(PersistentVolumeStatus {
        phase: Some("Available".into()),
        ..Default::default()
    });
    PvBuilder(pv)
}

impl PvBuilder {
    fn spec(&mut self) -> &mut PersistentVolumeSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }

    pub fn on_node(self, node: &str) -> Self {
        self.affinity(vec![vec![(HOSTNAME_LABEL, "In", vec![node])]])
    }

    /// Terms ORed, each a list of (key, operator, values) ANDed.
    pub fn affinity(mut self, terms: Vec<Vec<(&str, &str, Vec<&str>)>>) -> Self {
        let terms = terms
            .into_iter()
            .map(|t| NodeSelectorTerm {
                match_expressions: Some(
                    t.into_iter()
                        .map(|(k, op, vals)| NodeSelectorRequirement {
                            key: k.into(),
                            operator: op.into(),
                            values: Some(vals.into_iter().map(String::from).collect()),
                        })
                        .collect(),
                ),
                match_fields: None,
            })
            .collect();
        self.spec().node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: terms,
            }),
        });
        self
    }

    pub fn capacity(mut self, q: &str) -> Self {
        self.spec().capacity = Some(BTreeMap::from([("storage".into(), Quantity(q.into()))]));
        self
    }

    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.into());
        self
    }

    pub fn beta_class(mut self, class: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(BETA_CLASS_ANNOTATION.into(), class.into());
        self
    }

    pub fn block(mut self) -> Self {
        self.spec().volume_mode = Some("Block".into());
        self
    }

    pub fn access(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn claim_ref(mut self, namespace: &str, name: &str, uid: &str) -> Self {
        self.spec().claim_ref = Some(ObjectReference {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: (!uid.is_empty()).then(|| uid.into()),
            ..Default::default()
        });
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status = Some(PersistentVolumeStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        self
    }

    /// Bound to some other pod's claim.
    pub fn bound(self) -> Self {
        self.claim_ref("other", "someone-else", "u-other")
            .phase("Bound")
    }

    pub fn released(self) -> Self {
        self.claim_ref("other", "gone", "u-gone").phase("Released")
    }

    pub fn retain(mut self) -> Self {
        self.spec().persistent_volume_reclaim_policy = Some("Retain".into());
        self
    }

    pub fn attributes_class(mut self, name: &str) -> Self {
        self.spec().volume_attributes_class_name = Some(name.into());
        self
    }

    pub fn wiping(mut self) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_WIPE_PHASE.into(), "Wiping".into());
        self
    }

    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(deleted_now());
        self
    }

    pub fn build(self) -> Volume {
        Volume::from_pv(&self.0).expect("fixture PVs have names")
    }
}

pub struct PvcBuilder(pub PersistentVolumeClaim);

/// A claim `default/<name>` asking 1Gi of class `local`, ReadWriteOnce, uid `u-<name>`.
pub fn pvc(name: &str) -> PvcBuilder {
    let mut pvc = PersistentVolumeClaim::default();
    pvc.metadata.name = Some(name.into());
    pvc.metadata.namespace = Some("default".into());
    pvc.metadata.uid = Some(format!("u-{name}"));
    pvc.spec = Some(PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        storage_class_name: Some("local".into()),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            ..Default::default()
        }),
        ..Default::default()
    });
    PvcBuilder(pvc)
}

impl PvcBuilder {
    fn spec(&mut self) -> &mut PersistentVolumeClaimSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }

    pub fn request(mut self, q: &str) -> Self {
        self.spec().resources = Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([("storage".into(), Quantity(q.into()))])),
            ..Default::default()
        });
        self
    }

    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.into());
        self
    }

    pub fn no_class(mut self) -> Self {
        self.spec().storage_class_name = None;
        self
    }

    pub fn beta_class(mut self, class: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(BETA_CLASS_ANNOTATION.into(), class.into());
        self
    }

    pub fn block(mut self) -> Self {
        self.spec().volume_mode = Some("Block".into());
        self
    }

    pub fn access(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }

    pub fn select(mut self, key: &str, value: &str) -> Self {
        let sel = self
            .spec()
            .selector
            .get_or_insert_with(LabelSelector::default);
        sel.match_labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn select_expr(mut self, key: &str, op: &str, values: &[&str]) -> Self {
        let sel = self
            .spec()
            .selector
            .get_or_insert_with(LabelSelector::default);
        sel.match_expressions
            .get_or_insert_with(Vec::new)
            .push(LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            });
        self
    }

    pub fn volume_name(mut self, pv: &str) -> Self {
        self.spec().volume_name = Some(pv.into());
        self
    }

    pub fn attributes_class(mut self, name: &str) -> Self {
        self.spec().volume_attributes_class_name = Some(name.into());
        self
    }

    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(deleted_now());
        self
    }

    pub fn build(self) -> Claim {
        Claim::from_pvc(&self.0).expect("fixture PVCs have names")
    }
}

/// A class `name` with the given provisioner and binding mode.
pub fn class(name: &str, provisioner: &str, wffc: bool) -> StorageClass {
    let mut sc = StorageClass {
        provisioner: provisioner.into(),
        ..Default::default()
    };
    sc.metadata.name = Some(name.into());
    sc.volume_binding_mode = Some(
        if wffc {
            "WaitForFirstConsumer"
        } else {
            "Immediate"
        }
        .into(),
    );
    sc
}

/// The static local class `name` (no-provisioner, WaitForFirstConsumer).
pub fn local_class(name: &str) -> Class {
    Class::from_storage_class(&class(name, "kubernetes.io/no-provisioner", true))
        .expect("fixture classes have names")
}

pub struct NodeBuilder(pub Node);

/// A node `name` labelled `kubernetes.io/hostname=<name>`.
pub fn node(name: &str) -> NodeBuilder {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some(BTreeMap::from([(HOSTNAME_LABEL.into(), name.into())]));
    NodeBuilder(n)
}

impl NodeBuilder {
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn build(self) -> (String, Labels) {
        node_labels(&self.0).expect("fixture nodes have names")
    }
}
