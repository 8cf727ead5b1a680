//! What recovery reads of the cluster's objects: compact models of LocalDisks, Nodes, claims, StatefulSets and
//! pods, each built from the object by a pure constructor (no I/O), so the decision in `recovery` sees only what
//! it needs.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};

use super::Ask;
use crate::contract::{ANN_DRAIN, ANN_RECOVERY, DRAIN_FORCE, TAINT_OUT_OF_SERVICE};
use crate::health::State;

impl Ask {
    fn of(annotations: Option<&BTreeMap<String, String>>) -> Ask {
        Ask::from_annotation(
            annotations
                .and_then(|a| a.get(ANN_RECOVERY))
                .map(String::as_str),
        )
    }
}

/// One LocalDisk as recovery reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskFacts {
    pub name: String,
    pub node: String,
    /// The PV publishing it (`status.pv`).
    pub pv: Option<String>,
    /// `status.health`: `Degraded`, `Failed`, or absent (healthy).
    pub health: Option<State>,
    /// The `Healthy` condition's reason and message, when not healthy.
    pub health_reason: Option<String>,
    pub health_message: Option<String>,
    /// `localpv.io/drain`: `None` when not draining, `Some(true)` when forced.
    pub drain: Option<bool>,
}

impl DiskFacts {
    pub fn from_local_disk(d: &crate::inventory::LocalDisk) -> DiskFacts {
        let status = d.status.as_ref();
        let health = status
            .and_then(|s| s.health.as_deref())
            .and_then(|h| match h {
                "Degraded" => Some(State::Degraded),
                "Failed" => Some(State::Failed),
                _ => None,
            });
        let condition = status.and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Healthy" && c.status == "False")
        });
        let drain = d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_DRAIN))
            .map(|v| v.trim() == DRAIN_FORCE);
        DiskFacts {
            name: d.metadata.name.clone().unwrap_or_default(),
            node: d.spec.node.clone(),
            pv: status.and_then(|s| s.pv.clone()),
            health,
            health_reason: condition.map(|c| c.reason.clone()),
            health_message: condition.map(|c| c.message.clone()),
            drain,
        }
    }
}

/// A Node as recovery reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    pub out_of_service: bool,
    /// When its Ready condition last turned False or Unknown, while it is not Ready.
    pub not_ready_since: Option<SystemTime>,
    /// The object's UID: a new one under the same name is a re-created Node.
    pub uid: String,
    /// `metadata.creationTimestamp`.
    pub created: Option<SystemTime>,
}

impl NodeState {
    pub fn from_node(node: &Node) -> NodeState {
        let spec = node.spec.as_ref();
        let out_of_service = spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == TAINT_OUT_OF_SERVICE));
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let not_ready_since = ready.filter(|c| c.status != "True").map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0))
        });
        NodeState {
            out_of_service,
            not_ready_since,
            uid: node.metadata.uid.clone().unwrap_or_default(),
            created: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| SystemTime::from(t.0)),
        }
    }
}

/// A claim as recovery reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimFacts {
    pub uid: String,
    pub volume: Option<String>,
    pub ask: Ask,
    pub deleting: bool,
}

impl ClaimFacts {
    pub fn from_claim(c: &PersistentVolumeClaim) -> ClaimFacts {
        ClaimFacts {
            uid: c.metadata.uid.clone().unwrap_or_default(),
            volume: c.spec.as_ref().and_then(|s| s.volume_name.clone()),
            ask: Ask::of(c.metadata.annotations.as_ref()),
            deleting: c.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// A StatefulSet as recovery reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    pub name: String,
    pub uid: String,
    /// Names of its `volumeClaimTemplates`.
    pub templates: Vec<String>,
    pub replicas: u32,
    pub ask: Ask,
    pub deleting: bool,
}

impl Set {
    pub fn from_statefulset(s: &StatefulSet) -> Set {
        let spec = &s.spec;
        let templates = spec
            .volume_claim_templates
            .as_ref()
            .map(|t| t.iter().filter_map(|c| c.metadata.name.clone()).collect())
            .unwrap_or_default();
        Set {
            name: s.metadata.name.clone().unwrap_or_default(),
            uid: s.metadata.uid.clone().unwrap_or_default(),
            templates,
            replicas: spec.replicas.map_or(1, |r| u32::try_from(r).unwrap_or(0)),
            ask: Ask::of(s.metadata.annotations.as_ref()),
            deleting: s.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// A pod as recovery reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    pub name: String,
    pub uid: String,
    /// The UID of its controlling owner.
    pub controller: Option<String>,
    pub ready: bool,
    pub deleting: bool,
    /// Claims its volumes name.
    pub claims: Vec<String>,
}

impl PodState {
    pub fn from_pod(p: &Pod) -> PodState {
        let meta = &p.metadata;
        let controller = meta
            .owner_references
            .as_ref()
            .and_then(|o| o.iter().find(|o| o.controller == Some(true)))
            .map(|o| o.uid.clone());
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let claims = p
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .map(|v| {
                v.iter()
                    .filter_map(|v| v.persistent_volume_claim.as_ref())
                    .map(|c| c.claim_name.clone())
                    .collect()
            })
            .unwrap_or_default();
        PodState {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            controller,
            ready,
            deleting: meta.deletion_timestamp.is_some(),
            claims,
        }
    }
}
