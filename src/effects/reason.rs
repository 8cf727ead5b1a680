//! Every Event reason localpv writes, in one closed enum. The spellings are part of the interface: users filter
//! on them (`kubectl get events --field-selector reason=WipeRefused`), docs/troubleshooting.md lists them and tests
//! read them, so a variant's spelling never changes once released.
//!
//! A leaf: no imports beyond `serde`, so the pure planners can name a reason without reaching any I/O.

use std::fmt;

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Reason {
    // On PVs, decided by the planner.
    DiskMissing,
    DiskReturned,
    DiskIdentityChanged,
    DiskMoved,
    WipeRefused,
    VolumeRetained,
    ReclaimPolicyUnsupported,
    NameCollision,
    /// Two volumes' storage nests (a bind mount of a sub-directory, a parent or the same root).
    OverlappingStorage,
    /// Two disks answer to one strong id (a block copy, a copied volume id, a cloned image).
    DuplicateIdentity,
    /// The disk under the PV shows signs of failing (I/O errors, a hardware warning).
    DiskDegraded,
    /// The disk under the PV failed.
    DiskFailed,
    /// The disk under the PV, `Degraded` before, is `Healthy` again (a transient error, a device back in time).
    DiskHealthy,
    /// An operator cordoned the disk: its Available PV is withdrawn.
    DiskCordoned,
    /// A raw device of a Filesystem class is held by another user though no claim explains it: its Available PV
    /// is withdrawn.
    DeviceInUse,
    Adopted,
    /// On a PV the agent did not create or adopt that carries its label or reaches one of its disks.
    #[serde(rename = "ForeignPersistentVolume")]
    ForeignPv,
    // On PVs, from the outcome of a wipe.
    WipeCompleted,
    WipeFailed,
    WipeIncomplete,
    // On the Node.
    ConfigRejected,
    /// No ledger file although PVs of the node exist: disks without a PV are treated as of unknown state.
    LedgerMissing,
    InventoryUnavailable,
    /// The chart's admission policy is no longer in force as the agent narrowed its PV watch on: it watches every
    /// PV again.
    AdmissionPolicyNotInForce,
    // Written by the extender's leader: on pending pods and on claims of a deleted node.
    NoLocalVolume,
    NodeDeleted,
    // Written by the extender's leader about a StatefulSet replica whose local volume is lost (issue 37): on its
    // PV, claim, pod and StatefulSet.
    /// The claim and pod were deleted so the StatefulSet makes a new claim on a free disk.
    ReplicaRecovered,
    /// Dry run: what recovery would delete.
    ReplicaRecoveryDryRun,
    /// Nothing done: recovery is off, or a guard holds it (another replica not Ready, one in flight, the rate).
    ReplicaRecoveryHeld,
}

impl Reason {
    /// Every reason, for tests and documentation checks.
    pub const ALL: [Reason; 29] = [
        Reason::DiskMissing,
        Reason::DiskReturned,
        Reason::DiskIdentityChanged,
        Reason::DiskMoved,
        Reason::WipeRefused,
        Reason::VolumeRetained,
        Reason::ReclaimPolicyUnsupported,
        Reason::NameCollision,
        Reason::OverlappingStorage,
        Reason::DuplicateIdentity,
        Reason::DiskDegraded,
        Reason::DiskFailed,
        Reason::DiskHealthy,
        Reason::DiskCordoned,
        Reason::DeviceInUse,
        Reason::Adopted,
        Reason::ForeignPv,
        Reason::WipeCompleted,
        Reason::WipeFailed,
        Reason::WipeIncomplete,
        Reason::ConfigRejected,
        Reason::LedgerMissing,
        Reason::InventoryUnavailable,
        Reason::AdmissionPolicyNotInForce,
        Reason::NoLocalVolume,
        Reason::NodeDeleted,
        Reason::ReplicaRecovered,
        Reason::ReplicaRecoveryDryRun,
        Reason::ReplicaRecoveryHeld,
    ];

    /// The stable CamelCase spelling the Event carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::DiskMissing => "DiskMissing",
            Reason::DiskReturned => "DiskReturned",
            Reason::DiskIdentityChanged => "DiskIdentityChanged",
            Reason::DiskMoved => "DiskMoved",
            Reason::WipeRefused => "WipeRefused",
            Reason::VolumeRetained => "VolumeRetained",
            Reason::ReclaimPolicyUnsupported => "ReclaimPolicyUnsupported",
            Reason::NameCollision => "NameCollision",
            Reason::OverlappingStorage => "OverlappingStorage",
            Reason::DuplicateIdentity => "DuplicateIdentity",
            Reason::DiskDegraded => "DiskDegraded",
            Reason::DiskFailed => "DiskFailed",
            Reason::DiskHealthy => "DiskHealthy",
            Reason::DiskCordoned => "DiskCordoned",
            Reason::DeviceInUse => "DeviceInUse",
            Reason::Adopted => "Adopted",
            Reason::ForeignPv => "ForeignPersistentVolume",
            Reason::WipeCompleted => "WipeCompleted",
            Reason::WipeFailed => "WipeFailed",
            Reason::WipeIncomplete => "WipeIncomplete",
            Reason::ConfigRejected => "ConfigRejected",
            Reason::LedgerMissing => "LedgerMissing",
            Reason::InventoryUnavailable => "InventoryUnavailable",
            Reason::AdmissionPolicyNotInForce => "AdmissionPolicyNotInForce",
            Reason::NoLocalVolume => "NoLocalVolume",
            Reason::NodeDeleted => "NodeDeleted",
            Reason::ReplicaRecovered => "ReplicaRecovered",
            Reason::ReplicaRecoveryDryRun => "ReplicaRecoveryDryRun",
            Reason::ReplicaRecoveryHeld => "ReplicaRecoveryHeld",
        }
    }

    /// The events.k8s.io `action` field: what the reporter did. The reason itself, except for the pending-pod
    /// explanation, whose action has always been `Explain`.
    pub fn action(self) -> &'static str {
        match self {
            Reason::NoLocalVolume => "Explain",
            other => other.as_str(),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn spellings_are_camel_case_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for r in Reason::ALL {
            let s = r.as_str();
            assert!(
                s.chars().next().is_some_and(|c| c.is_ascii_uppercase()),
                "{s}"
            );
            assert!(s.chars().all(|c| c.is_ascii_alphanumeric()), "{s}");
            assert!(seen.insert(s), "{s} twice");
        }
    }

    #[test]
    fn serialised_spelling_is_the_event_spelling() {
        for r in Reason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }

    #[test]
    fn every_reason_is_documented_for_users() {
        let doc = include_str!("../../docs/troubleshooting.md");
        let missing: Vec<&str> = Reason::ALL
            .iter()
            .map(|r| r.as_str())
            .filter(|s| !doc.contains(s))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/troubleshooting.md does not name {missing:?}"
        );
    }
}
