//! Reading the PVs we own (or may adopt) into plain facts, and writing new ones.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;

use super::identity::{self, Recorded};
use super::{NodeFacts, StorageClassFacts};
use crate::config::{ClassConfig, Config, PvNaming};
use crate::contract::{
    ANN_MEDIUM, ANN_NODE_UID, ANN_WIPE_LIFETIME, ANN_WIPE_PHASE, MEDIUM_DEVICE, NODE_LABEL, Phase,
    WipePhase,
};
use crate::disk::{Disk, VolumeMode};
use crate::pvname;

pub use crate::contract::ANN_PROVISIONED_BY;
pub use crate::selector::HOSTNAME_LABEL;
const REFERENCE_PROVISIONER: &str = "local-volume-provisioner-";

/// Our `pv.kubernetes.io/provisioned-by` value for PVs we create.
pub fn provisioner_name(node: &str) -> String {
    format!("localpv-{node}")
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReclaimPolicy {
    Delete,
    Retain,
    /// Recycle or anything unknown: left alone.
    Other(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Labelled `localpv.io/node=<this node>`: created or already adopted by us.
    Ours,
    /// Created by the reference provisioner on this node and not yet adopted.
    Reference,
}

/// Identifies one PV object, with the version a precondition is checked against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PvRef {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

/// The facts planning needs from one PV we own or may adopt.
#[derive(Clone, Debug)]
pub struct PvView {
    pub pv_ref: PvRef,
    pub phase: Phase,
    pub path: PathBuf,
    pub class: String,
    /// The medium: `Block` for a raw device, also under a Filesystem PV annotated `localpv.io/medium: device`.
    pub mode: VolumeMode,
    /// The PV's own `volumeMode`: what a claim sees.
    pub published_as: VolumeMode,
    pub policy: ReclaimPolicy,
    pub deleting: bool,
    pub origin: Origin,
    pub recorded: Option<Recorded>,
    pub claim_uid: Option<String>,
    /// `spec.claimRef` as (namespace, name), when set.
    pub claim: Option<(String, String)>,
    /// The wipe phase for this PV's current lifetime (stale phases read as `None`).
    pub wipe: WipePhase,
    /// `localpv.io/node-uid`: the Node UID its disk was last found under.
    pub node_uid: Option<String>,
}

impl PvView {
    /// `None` for PVs that are not local volumes of this node.
    pub fn read(pv: &PersistentVolume, node: &NodeFacts) -> Option<PvView> {
        let meta = &pv.metadata;
        let spec = pv.spec.as_ref()?;
        let path = PathBuf::from(&spec.local.as_ref()?.path);
        let origin = origin(pv, node)?;
        let annotations = meta.annotations.clone().unwrap_or_default();
        let uid = meta.uid.clone()?;
        let claim_uid = spec.claim_ref.as_ref().and_then(|c| c.uid.clone());
        let wipe = match annotations.get(ANN_WIPE_LIFETIME) {
            Some(recorded) if *recorded == lifetime(&uid, claim_uid.as_deref()) => {
                WipePhase::parse(annotations.get(ANN_WIPE_PHASE).map(String::as_str))
            }
            _ => WipePhase::None,
        };
        Some(PvView {
            pv_ref: PvRef {
                name: meta.name.clone()?,
                uid,
                resource_version: meta.resource_version.clone().unwrap_or_default(),
            },
            phase: Phase::parse(pv.status.as_ref().and_then(|s| s.phase.as_deref())),
            path,
            class: spec.storage_class_name.clone().unwrap_or_default(),
            published_as: match spec.volume_mode.as_deref() {
                Some("Block") => VolumeMode::Block,
                _ => VolumeMode::Filesystem,
            },
            // NB: the medium, not the PV's volumeMode: a Filesystem PV over a raw device is checked, wiped and
            // identified as the device it is.
            mode: match (spec.volume_mode.as_deref(), annotations.get(ANN_MEDIUM)) {
                (Some("Block"), _) => VolumeMode::Block,
                (_, Some(medium)) if medium == MEDIUM_DEVICE => VolumeMode::Block,
                _ => VolumeMode::Filesystem,
            },
            policy: match spec.persistent_volume_reclaim_policy.as_deref() {
                Some("Delete") => ReclaimPolicy::Delete,
                Some("Retain") => ReclaimPolicy::Retain,
                other => ReclaimPolicy::Other(other.unwrap_or("(unset)").to_string()),
            },
            deleting: meta.deletion_timestamp.is_some(),
            origin,
            recorded: identity::recorded(&annotations),
            claim_uid,
            claim: spec
                .claim_ref
                .as_ref()
                .and_then(|c| Some((c.namespace.clone()?, c.name.clone()?))),
            wipe,
            node_uid: annotations.get(ANN_NODE_UID).cloned(),
        })
    }

    /// Bound, or Released and not yet wiped for this lifetime: its disk holds a tenant's data.
    pub fn holds_data(&self) -> bool {
        match self.phase {
            Phase::Bound => true,
            Phase::Released => self.wipe != WipePhase::Wiped,
            _ => false,
        }
    }

    pub fn is_unclaimed(&self) -> bool {
        // NB: a PV without a known phase is one just created (the API server sets Pending on create).
        matches!(
            self.phase,
            Phase::Pending | Phase::Unknown | Phase::Available
        )
    }
}

/// `<PV UID>/<claim UID or ->`.
pub fn lifetime(pv_uid: &str, claim_uid: Option<&str>) -> String {
    format!("{pv_uid}/{}", claim_uid.unwrap_or("-"))
}

/// Ours by label, or the reference provisioner's for this node by its `provisioned-by` text
/// (`local-volume-provisioner-<node>` or `...-<node>-<node UID>`, any UID: the Node may have been re-created).
fn origin(pv: &PersistentVolume, node: &NodeFacts) -> Option<Origin> {
    let meta = &pv.metadata;
    if meta.labels.as_ref().and_then(|l| l.get(NODE_LABEL)) == Some(&node.name) {
        return Some(Origin::Ours);
    }
    provisioned_by_reference_for(pv, &node.name).then_some(Origin::Reference)
}

/// Whether the reference provisioner made `pv` for node `node`, by its `provisioned-by` text.
fn provisioned_by_reference_for(pv: &PersistentVolume, node: &str) -> bool {
    let by = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_PROVISIONED_BY));
    let Some(rest) = by.and_then(|b| b.strip_prefix(REFERENCE_PROVISIONER)?.strip_prefix(node))
    else {
        return false;
    };
    match rest.strip_prefix('-') {
        None => rest.is_empty(),
        Some(uid) => is_uid(uid),
    }
}

/// Whether the planner takes `pv` as one of node `node`'s existing PVs: labelled with this node (ours, or a forgery
/// the planner reports: a label proves nothing, see `owners`), or a reference-provisioner PV of this node it may
/// adopt. Every other PV of the index matters only as part of the cluster's list.
pub fn planned_on(pv: &PersistentVolume, node: &str) -> bool {
    let labels = pv.metadata.labels.as_ref();
    labels.and_then(|l| l.get(NODE_LABEL)).map(String::as_str) == Some(node) || adoptable(pv, node)
}

/// A reference-provisioner PV of `node` that carries no label of ours yet: what the agent's one start-up list
/// looks for, since its label-scoped watch cannot see such PVs.
pub fn adoptable(pv: &PersistentVolume, node: &str) -> bool {
    let labelled = pv
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(NODE_LABEL));
    !labelled && provisioned_by_reference_for(pv, node)
}

/// A Kubernetes UID: 8-4-4-4-12 hex digits.
fn is_uid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Labels and annotations to merge into a PV's metadata, guarded by UID (and resourceVersion when set).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaPatch {
    pub uid: String,
    pub resource_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl MetaPatch {
    /// A JSON merge patch. The API server refuses it (Conflict for a stale resourceVersion, an error for another
    /// UID) when the PV is no longer the object planned for, so a patch never lands on a re-created or
    /// concurrently changed PV.
    pub fn to_merge_patch(&self) -> serde_json::Value {
        let mut metadata = serde_json::json!({ "uid": self.uid });
        if let Some(rv) = &self.resource_version {
            metadata["resourceVersion"] = rv.clone().into();
        }
        if !self.labels.is_empty() {
            metadata["labels"] = serde_json::json!(self.labels);
        }
        if !self.annotations.is_empty() {
            metadata["annotations"] = serde_json::json!(self.annotations);
        }
        serde_json::json!({ "metadata": metadata })
    }
}

/// Everything a new PV is made of besides the disk.
pub struct NewPv<'a> {
    pub name: &'a str,
    pub node: &'a NodeFacts,
    pub config: &'a Config,
    pub class: &'a ClassConfig,
    pub storage_class: &'a StorageClassFacts,
}

impl NewPv<'_> {
    /// The PV publishing `disk`, whose host path is `path`.
    pub fn build(&self, disk: &Disk, path: &str) -> PersistentVolume {
        let mut annotations = identity::annotations_as(disk, self.class.volume_mode);
        annotations.insert(
            ANN_PROVISIONED_BY.to_string(),
            provisioner_name(&self.node.name),
        );
        if !self.node.uid.is_empty() {
            annotations.insert(ANN_NODE_UID.to_string(), self.node.uid.clone());
        }
        let capacity = if self.config.capacity_rounding {
            round_capacity(disk.capacity_bytes)
        } else {
            disk.capacity_bytes
        };
        let fs_type = self
            .class
            .fs_type
            .clone()
            .filter(|_| self.class.volume_mode == VolumeMode::Filesystem);
        let sc = self.storage_class;
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(self.name.to_string()),
                labels: Some(self.labels()),
                annotations: Some(annotations),
                owner_references: self.config.set_pv_owner_ref.then(|| vec![self.owner()]),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: Some(self.class.access_modes.clone()),
                capacity: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(binary_quantity(capacity)),
                )])),
                local: Some(LocalVolumeSource {
                    path: path.to_string(),
                    fs_type,
                }),
                mount_options: (!sc.mount_options.is_empty()).then(|| sc.mount_options.clone()),
                node_affinity: Some(self.affinity()),
                persistent_volume_reclaim_policy: Some(
                    sc.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
                ),
                storage_class_name: Some(self.class.name.clone()),
                volume_mode: Some(self.class.volume_mode.as_str().to_string()),
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        }
    }

    /// `labelsForPV`, then `nodeLabelsForPV` copied from the Node, then our node label (which wins).
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.config.labels_for_pv.clone();
        for key in &self.config.node_labels_for_pv {
            if let Some(value) = self.node.labels.get(key) {
                labels.insert(key.clone(), value.clone());
            }
        }
        labels.insert(NODE_LABEL.to_string(), self.node.name.clone());
        labels
    }

    /// The node's own term (hostname label, or node name with `useNodeNameOnly`), ORed with the class's terms.
    fn affinity(&self) -> VolumeNodeAffinity {
        let node = self.node;
        let value = match (&node.hostname_label, self.config.use_node_name_only) {
            (Some(hostname), false) => hostname.clone(),
            _ => node.name.clone(),
        };
        let own = NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: HOSTNAME_LABEL.to_string(),
                operator: "In".to_string(),
                values: Some(vec![value]),
            }]),
            match_fields: None,
        };
        let terms = std::iter::once(own)
            .chain(self.class.selector.iter().cloned())
            .collect();
        VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: terms,
            }),
        }
    }

    fn owner(&self) -> OwnerReference {
        OwnerReference {
            api_version: "v1".to_string(),
            kind: "Node".to_string(),
            name: self.node.name.clone(),
            uid: self.node.uid.clone(),
            ..OwnerReference::default()
        }
    }
}

const KI: u64 = 1 << 10;
const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// The reference provisioner's rounding: down to whole GiB from 10 GiB, to whole MiB from 10 MiB, else bytes.
pub fn round_capacity(bytes: u64) -> u64 {
    match bytes {
        b if b >= 10 * GI => b / GI * GI,
        b if b >= 10 * MI => b / MI * MI,
        b => b,
    }
}

/// A byte count as Kubernetes prints a binary quantity: the largest binary suffix that divides it exactly.
pub fn binary_quantity(bytes: u64) -> String {
    const SUFFIXES: [(&str, u64); 6] = [
        ("Ei", 1 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", GI),
        ("Mi", MI),
        ("Ki", KI),
    ];
    SUFFIXES
        .iter()
        .find(|(_, unit)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map_or_else(
            || bytes.to_string(),
            |(suffix, unit)| format!("{}{suffix}", bytes / unit),
        )
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::small_stays_exact(5 * MI + 7, 5 * MI + 7)]
    #[case::mib_from_ten_mib(10 * MI + 12_345, 10 * MI)]
    #[case::just_below_ten_gib(10 * GI - 1, 10 * GI - MI)]
    #[case::gib_from_ten_gib(10 * GI + 5 * MI, 10 * GI)]
    fn capacity_rounds_down_like_the_reference_provisioner(
        #[case] bytes: u64,
        #[case] expected: u64,
    ) {
        assert_eq!(round_capacity(bytes), expected);
    }

    #[rstest]
    #[case(0, "0")]
    #[case(1000, "1000")]
    #[case(1024, "1Ki")]
    #[case(1_048_801_280, "1024220Ki")]
    #[case(5 * GI, "5Gi")]
    #[case(3 * MI, "3Mi")]
    fn quantities_use_the_largest_exact_binary_suffix(#[case] bytes: u64, #[case] expected: &str) {
        assert_eq!(binary_quantity(bytes), expected);
    }

    #[rstest]
    #[case("01234567-89ab-cdef-0123-456789abcdef", true)]
    #[case("2", false)]
    #[case("0123456789ab-cdef-0123-4567-89abcdef", false)]
    fn uids_are_recognised_by_shape(#[case] text: &str, #[case] expected: bool) {
        assert_eq!(is_uid(text), expected);
    }

    #[test]
    fn merge_patch_carries_its_preconditions() {
        let patch = MetaPatch {
            uid: "u".into(),
            resource_version: Some("7".into()),
            labels: BTreeMap::from([("a".into(), "b".into())]),
            annotations: BTreeMap::new(),
        };
        let expected = serde_json::json!({"metadata": {"uid": "u", "resourceVersion": "7", "labels": {"a": "b"}}});
        assert_eq!(patch.to_merge_patch(), expected);
    }
}

#[cfg(test)]
mod adoptable_tests {
    use super::*;

    fn by(text: &str, labelled: bool) -> PersistentVolume {
        let mut pv = PersistentVolume::default();
        pv.metadata.annotations = Some([(ANN_PROVISIONED_BY.to_string(), text.to_string())].into());
        if labelled {
            pv.metadata.labels = Some([(NODE_LABEL.to_string(), "node-1".to_string())].into());
        }
        pv
    }

    #[rstest::rstest]
    #[case::plain("local-volume-provisioner-node-1", false, true)]
    #[case::with_node_uid(
        "local-volume-provisioner-node-1-8f1c2f4e-1b2a-4c3d-9e8f-0a1b2c3d4e5f",
        false,
        true
    )]
    #[case::another_node_sharing_the_prefix("local-volume-provisioner-node-1-a", false, false)]
    #[case::another_node("local-volume-provisioner-node-10", false, false)]
    #[case::already_ours("local-volume-provisioner-node-1", true, false)]
    #[case::someone_else("example.com/csi", false, false)]
    fn only_unlabelled_reference_pvs_of_this_node_are_adoptable(
        #[case] text: &str,
        #[case] labelled: bool,
        #[case] want: bool,
    ) {
        assert_eq!(adoptable(&by(text, labelled), "node-1"), want);
    }

    fn labelled(node: &str) -> PersistentVolume {
        let mut pv = PersistentVolume::default();
        pv.metadata.labels = Some([(NODE_LABEL.to_string(), node.to_string())].into());
        pv
    }

    #[test]
    fn the_planner_takes_this_nodes_labelled_pvs_and_the_reference_pvs_it_may_adopt_and_no_other() {
        assert!(planned_on(&labelled("node-1"), "node-1"));
        assert!(planned_on(
            &by("local-volume-provisioner-node-1", false),
            "node-1"
        ));
        assert!(!planned_on(&labelled("node-10"), "node-1"));
        assert!(!planned_on(&labelled("node-1"), "node-10"));
        assert!(!planned_on(
            &by("local-volume-provisioner-node-10", false),
            "node-1"
        ));
        assert!(!planned_on(&by("example.com/csi", false), "node-1"));
        assert!(!planned_on(&PersistentVolume::default(), "node-1"));
    }
}

/// The name a PV for `disk` on node `node` gets.
pub fn pv_name(config: &Config, node: &str, disk: &Disk) -> String {
    match config.pv_naming {
        PvNaming::Localpv => pvname::localpv_name(node, &disk.class, &disk.entry),
        PvNaming::Reference => pvname::reference_name(&disk.entry, node, &disk.class),
    }
}
