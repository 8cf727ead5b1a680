//! The `LocalDisk` custom resource (`localpv.io/v1alpha1`, cluster-scoped, short name `ldisk`): one object per
//! entry a node agent found under a discovery directory, usable or not.
//!
//! `spec` says what the disk is (where, which class, its identity and size); `status` says what became of it
//! (phase, the PV and claim on it, a running wipe). The CRD is generated from these types; the YAML copies under
//! `config/crd/` and `charts/localpv/crds/` are checked against [`crd_yaml`] by a test.
//!
//! NB: there is deliberately no status subresource. One writer (the node agent of `spec.node`) owns the whole
//! object and writes it with one server-side apply per change; a subresource would double every write (main
//! resource, then `/status`) and leave a window where a new object has no phase.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use kube::core::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::DevId;

/// Condition type: another node's LocalDisk carries the same filesystem UUID.
pub const CONDITION_DUPLICATE_UUID: &str = "DuplicateUUID";
/// Condition type: the last wipe of this disk failed.
pub const CONDITION_WIPE_FAILED: &str = "WipeFailed";
/// Set (status `False`) while the disk shows signs of failing; absent while it is healthy.
pub const CONDITION_HEALTHY: &str = "Healthy";

/// What a node agent found at one path, and what it is.
// NB: clippy reads the repeated `type_ = "string"` of the printer columns as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    // NB: the derive takes a literal only; a test checks it against `contract::GROUP`.
    group = "localpv.io",
    version = "v1alpha1",
    kind = "LocalDisk",
    plural = "localdisks",
    shortname = "ldisk",
    status = "LocalDiskStatus",
    derive = "PartialEq",
    doc = "A disk (mount point or block device) a localpv node agent found under a discovery directory, and what became of it.",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Path", type_ = "string", json_path = ".spec.path"),
    printcolumn(name = "Class", type_ = "string", json_path = ".spec.storageClass"),
    printcolumn(name = "Size", type_ = "string", json_path = ".spec.capacityHuman"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(name = "Health", type_ = "string", json_path = ".status.health"),
    printcolumn(name = "PV", type_ = "string", json_path = ".status.pv"),
    printcolumn(name = "Claim", type_ = "string", json_path = ".status.claim"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Device",
        type_ = "string",
        json_path = ".spec.device",
        priority = 1
    ),
    printcolumn(
        name = "FSType",
        type_ = "string",
        json_path = ".spec.fsType",
        priority = 1
    ),
    printcolumn(
        name = "FSUUID",
        type_ = "string",
        json_path = ".spec.fsUuid",
        priority = 1
    ),
    printcolumn(
        name = "Model",
        type_ = "string",
        json_path = ".spec.model",
        priority = 1
    ),
    printcolumn(
        name = "Serial",
        type_ = "string",
        json_path = ".spec.serial",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct LocalDiskSpec {
    /// Node the disk is attached to.
    pub node: String,
    /// Host path of the entry (`hostDir/entry`), as published in a PV's `spec.local.path`.
    pub path: String,
    /// Entry name inside the discovery directory.
    pub entry: String,
    /// Storage class whose discovery directory holds the entry.
    pub storage_class: String,
    /// `Filesystem` or `Block`; unset for entries rejected before their kind was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<DiskVolumeMode>,
    /// Backing block device, e.g. `/dev/sdb`; unset for filesystems without one (tmpfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// `major:minor` of the backing device.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "DevId::deserialize_or_none"
    )]
    pub dev_id: Option<DevId>,
    /// For a bind mount of a sub-directory: that directory inside the filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_root: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    /// Total bytes; unset when the entry could not be measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// The capacity in binary units with one decimal (`10.0GiB`), for the SIZE column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_human: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DiskVolumeMode {
    Filesystem,
    Block,
}

impl From<crate::disk::VolumeMode> for DiskVolumeMode {
    fn from(mode: crate::disk::VolumeMode) -> Self {
        match mode {
            crate::disk::VolumeMode::Filesystem => DiskVolumeMode::Filesystem,
            crate::disk::VolumeMode::Block => DiskVolumeMode::Block,
        }
    }
}

/// Where a disk is in its life.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub enum LocalDiskPhase {
    /// Published (or about to be) as an Available PV.
    #[default]
    Available,
    /// Its PV is bound to a claim.
    Bound,
    /// Its claim is gone; the PV waits for its wipe (Delete) or for an operator (Retain).
    Released,
    /// Being wiped, or queued for a wipe before it is published again.
    Wiping,
    /// Found but not publishable; `reason` and `message` say why.
    Unusable,
    /// No longer found on its node; removed after a grace period unless it returns.
    Missing,
    /// The disk now at the path is not the one its PV was created for.
    IdentityChanged,
    /// Wipes keep failing.
    Failing,
}

impl LocalDiskPhase {
    pub const ALL: [LocalDiskPhase; 8] = [
        LocalDiskPhase::Available,
        LocalDiskPhase::Bound,
        LocalDiskPhase::Released,
        LocalDiskPhase::Wiping,
        LocalDiskPhase::Unusable,
        LocalDiskPhase::Missing,
        LocalDiskPhase::IdentityChanged,
        LocalDiskPhase::Failing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LocalDiskPhase::Available => "Available",
            LocalDiskPhase::Bound => "Bound",
            LocalDiskPhase::Released => "Released",
            LocalDiskPhase::Wiping => "Wiping",
            LocalDiskPhase::Unusable => "Unusable",
            LocalDiskPhase::Missing => "Missing",
            LocalDiskPhase::IdentityChanged => "IdentityChanged",
            LocalDiskPhase::Failing => "Failing",
        }
    }

    /// Case-insensitive, for command-line filters.
    pub fn parse(text: &str) -> Option<LocalDiskPhase> {
        Self::ALL
            .into_iter()
            .find(|phase| phase.as_str().eq_ignore_ascii_case(text))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalDiskStatus {
    #[serde(default)]
    pub phase: LocalDiskPhase,
    /// CamelCase reason for the phase (`NotAMountPoint`, `Retained`, `WipeFailing`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What an operator can do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Free bytes of a filesystem when last written (changes under 1% of the capacity are not written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// The PV publishing the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pv: Option<String>,
    /// `namespace/name` of the claim bound to (or last released from) that PV.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// When the agent last wrote this object while the disk was present. Not a heartbeat: an unchanged disk is
    /// not rewritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Time>,
    /// When the agent first noticed the disk gone (phase `Missing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_since: Option<Time>,
    /// The running wipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wipe: Option<WipeStatus>,
    /// Set when another node's LocalDisk already carries this filesystem UUID (a cloned disk): both are kept,
    /// never merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_uuid: Option<DuplicateUuid>,
    /// `Degraded` or `Failed` while the disk shows signs of failing (I/O errors, a hardware warning); absent while
    /// it is healthy. The `Healthy` condition says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Progress of the wipe running on a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WipeStatus {
    pub started: Time,
    /// Bytes erased (block) or freed (filesystem) so far.
    pub bytes_done: u64,
    /// Directory entries removed so far (filesystem wipes).
    pub entries_done: u64,
    /// Bytes the wipe covers in total, when known (block wipes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_total: Option<u64>,
    /// Average rate since the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<u64>,
}

/// The other LocalDisk with the same filesystem UUID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DuplicateUuid {
    pub node: String,
    pub local_disk: String,
}

/// The CustomResourceDefinition, as installed.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = LocalDisk::crd();
    // The derive adds a status subresource along with the status type; see the module doc for why we drop it.
    for version in &mut crd.spec.versions {
        version.subresources = None;
    }
    crd
}

/// The CRD as YAML: what `localpv crd` prints and the checked-in copies hold.
pub fn crd_yaml() -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(&crd())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::config("config/crd/localdisk.yaml")]
    #[case::chart("charts/localpv/crds/localdisk.yaml")]
    fn checked_in_crd_copies_equal_the_generated_crd(#[case] copy: &str) {
        let generated = crd_yaml().expect("the CRD serialises");
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(copy);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == generated,
            "{copy} differs from the generated CRD: run `cargo run -- crd > {copy}` to update"
        );
    }

    /// LocalDisks written while the device number was a string read the same; one edited by hand reads as having
    /// none (the next apply writes it again) instead of failing every list of LocalDisks.
    #[rstest]
    #[case::as_written("7:3", Some(DevId::new(7, 3)))]
    #[case::edited("sdb", None)]
    fn a_local_disk_reads_its_device_number_from_text(
        #[case] text: &str,
        #[case] read: Option<DevId>,
    ) {
        let spec = serde_json::json!({"node": "n1", "path": "/mnt/disks/vol1", "entry": "vol1",
                                      "storageClass": "fast", "devId": text});
        let spec: LocalDiskSpec = serde_json::from_value(spec).expect("a LocalDisk spec");
        assert_eq!(spec.dev_id, read);
        if read.is_some() {
            assert_eq!(serde_json::to_value(&spec).unwrap()["devId"], text);
        }
    }

    #[test]
    fn crd_is_cluster_scoped_without_status_subresource() {
        let crd = crd();
        assert_eq!(crd.spec.group, crate::contract::GROUP);
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["ldisk".to_string()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.subresources.is_none());
    }

    #[test]
    fn wide_columns_are_priority_one() {
        let crd = crd();
        let columns = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        let by_priority = |p: i32| -> Vec<String> {
            columns
                .iter()
                .filter(|c| c.priority.unwrap_or(0) == p)
                .map(|c| c.name.to_uppercase())
                .collect()
        };
        assert_eq!(
            by_priority(0),
            [
                "NODE", "PATH", "CLASS", "SIZE", "PHASE", "REASON", "HEALTH", "PV", "CLAIM", "AGE"
            ]
        );
        assert_eq!(
            by_priority(1),
            ["DEVICE", "FSTYPE", "FSUUID", "MODEL", "SERIAL"]
        );
    }

    #[rstest]
    #[case("bound", Some(LocalDiskPhase::Bound))]
    #[case("IdentityChanged", Some(LocalDiskPhase::IdentityChanged))]
    #[case("gone", None)]
    fn phases_parse_case_insensitively(
        #[case] text: &str,
        #[case] expected: Option<LocalDiskPhase>,
    ) {
        assert_eq!(LocalDiskPhase::parse(text), expected);
    }
}
