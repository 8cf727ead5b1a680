//! The few facts a placement decision needs about PVs, PVCs, StorageClasses and Nodes, extracted once when an
//! object enters the cache so that a decision never parses quantities or selectors again.
//!
//! `Volume::from_pv`, `Claim::from_pvc`, `Class::from_storage_class` and `node_labels` read k8s-openapi objects;
//! they fail only when an object lacks a name (a malformed object the watch layer then skips and logs).

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::contract::{ANN_SCORE_STRATEGY, ANN_WIPE_PHASE, Phase};
use crate::disk::VolumeMode;
use crate::quantity::parse_quantity;
use crate::selector::{Labels, NodeAffinity, PvLabels, Selector};

pub use crate::contract::{BETA_CLASS_ANNOTATION, NO_PROVISIONER};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("failed to read {kind}: metadata.name is missing")]
    MissingName { kind: &'static str },
}

/// Access modes as a bit set, so "offers every mode the claim asks for" is one AND.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AccessModes(u8);

const ACCESS_MODE_NAMES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

impl AccessModes {
    pub fn parse<'a>(modes: impl IntoIterator<Item = &'a String>) -> AccessModes {
        let mut bits = 0u8;
        for mode in modes {
            match ACCESS_MODE_NAMES.iter().position(|m| m == mode) {
                Some(i) => bits |= 1 << i,
                // NB: an unknown mode on a claim must not be satisfiable, so it takes a bit no PV ever sets.
                None => bits |= 1 << 7,
            }
        }
        AccessModes(bits)
    }

    pub fn contains(self, wanted: AccessModes) -> bool {
        self.0 & wanted.0 == wanted.0
    }

    pub fn names(self) -> Vec<&'static str> {
        ACCESS_MODE_NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    /// Empty when the reference does not pin a UID.
    pub uid: String,
}

/// A PersistentVolume as the decision sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub name: String,
    /// Effective class: the beta annotation, else `spec.storageClassName`, else "".
    pub class: String,
    pub capacity: u128,
    pub mode: VolumeMode,
    pub access: AccessModes,
    pub labels: PvLabels,
    pub affinity: NodeAffinity,
    pub claim_ref: Option<ClaimRef>,
    pub phase: Phase,
    pub deleting: bool,
    pub reclaim_delete: bool,
    /// The node agent is wiping it (annotation `localpv.io/wipe-phase`).
    pub wiping: bool,
    /// `spec.volumeAttributesClassName` ("" when unset): must equal the claim's, as in the in-tree binder.
    pub attributes_class: String,
}

impl Volume {
    pub fn from_pv(pv: &PersistentVolume) -> Result<Volume, ModelError> {
        let meta = &pv.metadata;
        let name = meta.name.clone().ok_or(ModelError::MissingName {
            kind: "PersistentVolume",
        })?;
        let spec = pv.spec.clone().unwrap_or_default();
        let annotations = meta.annotations.as_ref();
        let class = annotations
            .and_then(|a| a.get(BETA_CLASS_ANNOTATION).cloned())
            .or(spec.storage_class_name)
            .unwrap_or_default();
        let claim_ref = spec.claim_ref.map(|r| ClaimRef {
            namespace: r.namespace.unwrap_or_default(),
            name: r.name.unwrap_or_default(),
            uid: r.uid.unwrap_or_default(),
        });
        Ok(Volume {
            name,
            class,
            capacity: spec
                .capacity
                .as_ref()
                .and_then(|c| c.get("storage"))
                .map(quantity_bytes)
                .unwrap_or(0),
            mode: parse_mode(spec.volume_mode.as_deref()),
            access: AccessModes::parse(spec.access_modes.iter().flatten()),
            labels: meta.labels.as_ref().map(PvLabels::from).unwrap_or_default(),
            affinity: NodeAffinity::compile(spec.node_affinity.as_ref()),
            claim_ref,
            phase: Phase::parse(pv.status.as_ref().and_then(|s| s.phase.as_deref())),
            deleting: meta.deletion_timestamp.is_some(),
            reclaim_delete: spec.persistent_volume_reclaim_policy.as_deref() == Some("Delete"),
            wiping: annotations
                .and_then(|a| a.get(ANN_WIPE_PHASE))
                .is_some_and(|v| !v.is_empty()),
            attributes_class: spec.volume_attributes_class_name.unwrap_or_default(),
        })
    }

    /// Whether `claim_ref` names this claim (namespace, name, and UID when the reference sets one).
    pub fn is_bound_to(&self, claim: &Claim) -> bool {
        self.claim_ref.as_ref().is_some_and(|r| {
            r.name == claim.name
                && r.namespace == claim.namespace
                && (r.uid.is_empty() || r.uid == claim.uid)
        })
    }

    /// A volume that is not free now but will be once the node agent has wiped and republished it.
    pub fn coming_back(&self) -> bool {
        self.wiping || (self.phase == Phase::Released && self.reclaim_delete)
    }
}

/// A PersistentVolumeClaim as the decision sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Effective class: the beta annotation, else `spec.storageClassName`, else "".
    pub class: String,
    pub request: u128,
    pub mode: VolumeMode,
    pub access: AccessModes,
    pub selector: Option<Selector>,
    /// `spec.volumeName`: the claim is bound (or pre-bound by the user) to this PV.
    pub volume_name: Option<String>,
    pub deleting: bool,
    /// `spec.volumeAttributesClassName` ("" when unset).
    pub attributes_class: String,
}

impl Claim {
    pub fn from_pvc(pvc: &PersistentVolumeClaim) -> Result<Claim, ModelError> {
        let meta = &pvc.metadata;
        let name = meta.name.clone().ok_or(ModelError::MissingName {
            kind: "PersistentVolumeClaim",
        })?;
        let spec = pvc.spec.clone().unwrap_or_default();
        let class = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(BETA_CLASS_ANNOTATION).cloned())
            .or(spec.storage_class_name)
            .unwrap_or_default();
        let request = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"));
        Ok(Claim {
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name,
            uid: meta.uid.clone().unwrap_or_default(),
            class,
            request: request.map(quantity_bytes).unwrap_or(0),
            mode: parse_mode(spec.volume_mode.as_deref()),
            access: AccessModes::parse(spec.access_modes.iter().flatten()),
            selector: spec.selector.as_ref().map(Selector::compile),
            volume_name: spec.volume_name.filter(|v| !v.is_empty()),
            deleting: meta.deletion_timestamp.is_some(),
            attributes_class: spec
                .volume_attributes_class_name
                .clone()
                .unwrap_or_default(),
        })
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Score strategies for prioritize; the global flag picks one, a class annotation may override it.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Least capacity wasted on the PVs the pod would get: keeps big disks for big claims.
    #[default]
    Binpack,
    /// Most matching PVs left on the node after the pod takes its share.
    Spread,
}

impl Strategy {
    pub fn parse(s: &str) -> Option<Strategy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "binpack" => Some(Strategy::Binpack),
            "spread" => Some(Strategy::Spread),
            _ => None,
        }
    }
}

/// A StorageClass as the decision sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    pub name: String,
    pub provisioner: String,
    pub wait_for_first_consumer: bool,
    pub strategy: Option<Strategy>,
    /// Its `localpv.io/recovery` annotation (read by the Lease holder's recovery, not by the scheduling decision).
    pub recovery: crate::recovery::Ask,
}

impl Class {
    pub fn from_storage_class(sc: &StorageClass) -> Result<Class, ModelError> {
        let name = sc.metadata.name.clone().ok_or(ModelError::MissingName {
            kind: "StorageClass",
        })?;
        let annotations = sc.metadata.annotations.as_ref();
        let strategy = annotations.and_then(|a| a.get(ANN_SCORE_STRATEGY));
        let recovery = annotations
            .and_then(|a| a.get(crate::contract::ANN_RECOVERY))
            .map(String::as_str);
        Ok(Class {
            name,
            provisioner: sc.provisioner.clone(),
            wait_for_first_consumer: sc.volume_binding_mode.as_deref()
                == Some("WaitForFirstConsumer"),
            strategy: strategy.and_then(|s| Strategy::parse(s)),
            recovery: crate::recovery::Ask::from_annotation(recovery),
        })
    }

    /// Delayed static binding: the scheduler must pick an existing PV when it picks the node.
    pub fn is_static_delayed(&self) -> bool {
        self.wait_for_first_consumer && self.provisioner == NO_PROVISIONER
    }
}

pub fn node_labels(node: &Node) -> Result<(String, Labels), ModelError> {
    let name = node
        .metadata
        .name
        .clone()
        .ok_or(ModelError::MissingName { kind: "Node" })?;
    Ok((name, node.metadata.labels.clone().unwrap_or_default()))
}

fn parse_mode(mode: Option<&str>) -> VolumeMode {
    match mode {
        Some("Block") => VolumeMode::Block,
        _ => VolumeMode::Filesystem,
    }
}

fn quantity_bytes(q: &Quantity) -> u128 {
    parse_quantity(&q.0).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_access_modes_are_never_offered() {
        let pv = AccessModes::parse(&["ReadWriteOnce".to_string(), "ReadWriteMany".to_string()]);
        assert!(pv.contains(AccessModes::parse(&["ReadWriteMany".to_string()])));
        assert!(!pv.contains(AccessModes::parse(&["ReadWriteOncePod".to_string()])));
        assert!(!pv.contains(AccessModes::parse(&["Bogus".to_string()])));
    }
}
