//! The all-clear for a pod told its disk was failing (issue 37, point 2): once the disk under the pod's claim is
//! healthy again (a transient error gone quiet, a device back in time), the pod that got `DiskDegraded` gets
//! `DiskHealthy`, as the node agent tells the PV and the claim. Pure: the shell remembers whom it told, and asks
//! here whether the disk is healthy again for it.

use std::sync::Arc;

use super::DiskFacts;
use crate::cleanup::Volume;
use crate::contract::Phase;

/// A pod told that the disk under its claim was failing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToldPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub claim: String,
    pub pv: String,
    /// The disk's state as told (`Degraded`, `Failed`).
    pub word: String,
}

/// Whether the disk under `told`'s claim is healthy again: the PV is still Bound to that claim, on the node of a
/// LocalDisk publishing it, and that LocalDisk shows no health problem. A PV released, deleted or moved to
/// another claim (recovered), or a disk no LocalDisk shows, is not: the pod then hears nothing more.
pub fn healthy_again(told: &ToldPod, pvs: &[Arc<Volume>], disks: &[DiskFacts]) -> bool {
    let Some(pv) = pvs.iter().find(|pv| pv.name == told.pv) else {
        return false;
    };
    let claim = pv.claim.as_ref();
    let same_claim = claim.and_then(|c| c.namespace.as_deref()) == Some(told.namespace.as_str())
        && claim.and_then(|c| c.name.as_deref()) == Some(told.claim.as_str());
    if pv.phase != Phase::Bound || pv.deleting || !same_claim {
        return false;
    }
    disks.iter().any(|d| {
        d.pv.as_deref() == Some(told.pv.as_str())
            && pv.node.as_deref() == Some(d.node.as_str())
            && d.health.is_none()
    })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::cleanup::ClaimRef;
    use crate::health::State;

    fn told() -> ToldPod {
        ToldPod {
            namespace: "db".into(),
            name: "web-0".into(),
            uid: "uid-pod".into(),
            claim: "data-web-0".into(),
            pv: "pv-a".into(),
            word: "Degraded".into(),
        }
    }

    fn pv(phase: Phase, claim: &str) -> Arc<Volume> {
        Arc::new(Volume {
            name: "pv-a".into(),
            uid: "uid-pv".into(),
            resource_version: "1".into(),
            node: Some("node-1".into()),
            phase,
            claim: Some(ClaimRef {
                namespace: Some("db".into()),
                name: Some(claim.into()),
                uid: None,
            }),
            deleting: false,
            class: None,
            node_uid: None,
        })
    }

    fn disk(health: Option<State>, node: &str) -> DiskFacts {
        DiskFacts {
            name: "disk-a".into(),
            node: node.into(),
            pv: Some("pv-a".into()),
            health,
            ..DiskFacts::default()
        }
    }

    #[rstest]
    #[case::healthy_again(pv(Phase::Bound, "data-web-0"), disk(None, "node-1"), true)]
    #[case::still_degraded(
        pv(Phase::Bound, "data-web-0"),
        disk(Some(State::Degraded), "node-1"),
        false
    )]
    #[case::failed(
        pv(Phase::Bound, "data-web-0"),
        disk(Some(State::Failed), "node-1"),
        false
    )]
    #[case::released(pv(Phase::Released, "data-web-0"), disk(None, "node-1"), false)]
    #[case::another_claim(pv(Phase::Bound, "data-web-1"), disk(None, "node-1"), false)]
    #[case::a_disk_of_another_node(pv(Phase::Bound, "data-web-0"), disk(None, "node-2"), false)]
    fn a_told_pod_hears_the_all_clear_only_when_its_claims_disk_is_healthy_again(
        #[case] pv: Arc<Volume>,
        #[case] disk: DiskFacts,
        #[case] want: bool,
    ) {
        assert_eq!(healthy_again(&told(), &[pv], &[disk]), want);
    }

    #[test]
    fn a_pv_gone_or_no_localdisk_is_no_all_clear() {
        assert!(!healthy_again(&told(), &[], &[disk(None, "node-1")]));
        assert!(!healthy_again(
            &told(),
            &[pv(Phase::Bound, "data-web-0")],
            &[]
        ));
    }
}
