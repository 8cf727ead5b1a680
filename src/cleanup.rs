//! Cluster-level clean-up after deleted nodes, run by the elected leader among `localpv extender` replicas.
//!
//! ```text
//!  Node names, our PVs as `Volume`s (label localpv.io/node), LocalDisks ──> plan (pure) ──> Actions ──> controller
//!  gone_since (node -> first seen missing), kept by the controller ──────┘            └──> new gone_since
//! ```
//!
//! A node must stay gone for the grace period before anything happens, so a node re-created under the same name
//! (a reboot of a cloud instance, a re-registration) keeps its PVs. After the grace period: its Available PVs
//! are deleted (UID and resourceVersion preconditions: a PV bound meanwhile survives), its LocalDisks are deleted,
//! each claim bound to one of its PVs gets one Warning Event, and, only when the operator opted in, such claims are
//! deleted after a further delay. Released and Bound PVs are never deleted here: a bound PV stays bound.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::contract::{ANN_NODE_UID, NODE_LABEL, Phase};
use crate::plan::PvRef;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// How long a node must be gone before its PVs and LocalDisks are cleaned up.
    pub grace: Duration,
    /// When set, claims bound to a gone node's PVs are deleted this long after the grace period ended.
    pub delete_claims_after: Option<Duration>,
}

#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// Names of the Nodes that exist.
    pub nodes: &'a BTreeSet<String>,
    /// PVs labelled `localpv.io/node`.
    pub pvs: &'a [Arc<Volume>],
    /// LocalDisks as (name, node).
    pub disks: &'a [(String, String)],
    /// When each missing node was first seen missing; kept by the shell between passes.
    pub gone_since: &'a BTreeMap<String, SystemTime>,
    /// Claims already told about their gone node (namespace/name), kept by the shell.
    pub warned: &'a BTreeSet<String>,
    pub settings: &'a Settings,
    pub now: SystemTime,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupAction {
    DeletePv(PvRef),
    DeleteLocalDisk(String),
    /// A Warning Event on the claim: its volume's node is gone.
    WarnClaim {
        namespace: String,
        name: String,
        uid: Option<String>,
        pv: String,
        node: String,
    },
    DeleteClaim {
        namespace: String,
        name: String,
        uid: Option<String>,
    },
}

/// One line for logs: `delete PV local-pv-1`, `delete PVC web/data`...
impl std::fmt::Display for CleanupAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CleanupAction::DeletePv(pv) => write!(f, "delete PV {}", pv.name),
            CleanupAction::DeleteLocalDisk(name) => write!(f, "delete LocalDisk {name}"),
            CleanupAction::WarnClaim {
                namespace,
                name,
                pv,
                node,
                ..
            } => write!(
                f,
                "warn PVC {namespace}/{name}: PV {pv} was on deleted node {node}"
            ),
            CleanupAction::DeleteClaim {
                namespace, name, ..
            } => write!(f, "delete PVC {namespace}/{name}"),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupPlan {
    pub actions: Vec<CleanupAction>,
    pub gone_since: BTreeMap<String, SystemTime>,
    pub warned: BTreeSet<String>,
}

/// The claim a PV's `spec.claimRef` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
}

/// One of our PVs as the plan reads it: what the controller keeps per PV instead of the whole object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub name: String,
    pub uid: String,
    /// The delete precondition: a PV changed (bound) since it was read is not deleted.
    pub resource_version: String,
    /// Its `localpv.io/node` label.
    pub node: Option<String>,
    pub phase: Phase,
    pub claim: Option<ClaimRef>,
    pub deleting: bool,
    /// `spec.storageClassName`.
    pub class: Option<String>,
    /// `localpv.io/node-uid`: the Node UID under which the agent last found its disk.
    pub node_uid: Option<String>,
}

impl Volume {
    pub fn from_pv(pv: &PersistentVolume) -> Volume {
        let meta = &pv.metadata;
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        let claim = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        Volume {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            node: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(NODE_LABEL).cloned()),
            // NB: a PV without a status yet is Pending (as the API server's default), but a phase string this version
            // does not know stays `Unknown`, which the plan leaves alone: a newer phase is no licence to delete.
            phase: Phase::parse(Some(phase.unwrap_or("Pending"))),
            claim: claim.map(|c| ClaimRef {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                uid: c.uid.clone(),
            }),
            deleting: meta.deletion_timestamp.is_some(),
            class: pv.spec.as_ref().and_then(|s| s.storage_class_name.clone()),
            node_uid: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_NODE_UID).cloned()),
        }
    }
}

fn node_of(pv: &Volume) -> Option<&str> {
    pv.node.as_deref()
}

/// Decides one pass. Pure: same inputs, same plan.
pub fn plan(inputs: &Inputs<'_>) -> CleanupPlan {
    let mut out = CleanupPlan::default();
    let referenced: BTreeSet<&str> = inputs
        .pvs
        .iter()
        .filter_map(|pv| node_of(pv))
        .chain(inputs.disks.iter().map(|(_, n)| n.as_str()))
        .collect();
    for node in referenced
        .into_iter()
        .filter(|n| !inputs.nodes.contains(*n))
    {
        let since = inputs.gone_since.get(node).copied().unwrap_or(inputs.now);
        out.gone_since.insert(node.to_string(), since);
        let gone_for = inputs.now.duration_since(since).unwrap_or_default();
        if gone_for < inputs.settings.grace {
            continue;
        }
        let delete_claims = inputs
            .settings
            .delete_claims_after
            .is_some_and(|d| gone_for >= inputs.settings.grace + d);
        for pv in inputs.pvs.iter().filter(|pv| node_of(pv) == Some(node)) {
            plan_pv(pv, node, delete_claims, inputs.warned, &mut out);
        }
        for (name, _) in inputs.disks.iter().filter(|(_, n)| n == node) {
            out.actions
                .push(CleanupAction::DeleteLocalDisk(name.clone()));
        }
    }
    out
}

/// `warned` holds the claims told in earlier passes; `out.warned` keeps only those still concerned, so a claim
/// whose node came back is told again if it goes again.
fn plan_pv(
    pv: &Volume,
    node: &str,
    delete_claims: bool,
    warned: &BTreeSet<String>,
    out: &mut CleanupPlan,
) {
    if pv.deleting {
        return;
    }
    let name = pv.name.clone();
    match (pv.phase, &pv.claim) {
        (Phase::Available | Phase::Pending, None) => {
            out.actions.push(CleanupAction::DeletePv(PvRef {
                name,
                uid: pv.uid.clone(),
                resource_version: pv.resource_version.clone(),
            }))
        }
        (Phase::Bound, Some(c)) => {
            let (Some(namespace), Some(claim_name)) = (c.namespace.clone(), c.name.clone()) else {
                return;
            };
            let key = format!("{namespace}/{claim_name}");
            if !warned.contains(&key) {
                out.actions.push(CleanupAction::WarnClaim {
                    namespace: namespace.clone(),
                    name: claim_name.clone(),
                    uid: c.uid.clone(),
                    pv: name,
                    node: node.to_string(),
                });
            }
            out.warned.insert(key);
            if delete_claims {
                out.actions.push(CleanupAction::DeleteClaim {
                    namespace,
                    name: claim_name,
                    uid: c.uid.clone(),
                });
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(name: &str, node: &str, phase: &str, claim: Option<&str>) -> PersistentVolume {
        let mut v = json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "7",
                         "labels": {NODE_LABEL: node}},
            "spec": {},
            "status": {"phase": phase},
        });
        if let Some(c) = claim {
            v["spec"]["claimRef"] =
                json!({"namespace": "ns", "name": c, "uid": format!("uid-{c}")});
        }
        serde_json::from_value(v).unwrap()
    }

    fn settings(grace: u64, claims: Option<u64>) -> Settings {
        Settings {
            grace: Duration::from_secs(grace),
            delete_claims_after: claims.map(Duration::from_secs),
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    struct Case {
        nodes: BTreeSet<String>,
        pvs: Vec<Arc<Volume>>,
        disks: Vec<(String, String)>,
        gone_since: BTreeMap<String, SystemTime>,
        warned: BTreeSet<String>,
        settings: Settings,
    }

    impl Case {
        fn new(nodes: &[&str], pvs: Vec<PersistentVolume>, settings: Settings) -> Case {
            Case {
                nodes: nodes.iter().map(|n| n.to_string()).collect(),
                pvs: pvs.iter().map(|pv| Arc::new(Volume::from_pv(pv))).collect(),
                disks: vec![
                    ("fs-1".into(), "gone".into()),
                    ("fs-2".into(), "here".into()),
                ],
                gone_since: BTreeMap::new(),
                warned: BTreeSet::new(),
                settings,
            }
        }

        fn run(&mut self, now: SystemTime) -> Vec<CleanupAction> {
            let p = plan(&Inputs {
                nodes: &self.nodes,
                pvs: &self.pvs,
                disks: &self.disks,
                gone_since: &self.gone_since,
                warned: &self.warned,
                settings: &self.settings,
                now,
            });
            self.gone_since = p.gone_since;
            self.warned = p.warned;
            p.actions
        }
    }

    #[test]
    fn a_pv_with_a_phase_this_version_does_not_know_is_left_alone_and_one_without_a_status_is_pending()
     {
        let odd = pv("odd", "gone", "Archived", None);
        let mut fresh = pv("fresh", "gone", "Available", None);
        fresh.status = None;
        let mut c = Case::new(&["here"], vec![odd, fresh], settings(60, None));
        c.run(at(0));
        let deleted: Vec<String> = c
            .run(at(60))
            .into_iter()
            .filter_map(|a| match a {
                CleanupAction::DeletePv(r) => Some(r.name),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, vec!["fresh".to_string()]);
    }

    #[test]
    fn nothing_happens_while_the_node_is_gone_for_less_than_the_grace_period() {
        let mut c = Case::new(
            &["here"],
            vec![pv("a", "gone", "Available", None)],
            settings(60, None),
        );
        assert_eq!(c.run(at(0)), vec![]);
        assert_eq!(c.run(at(59)), vec![]);
        assert_eq!(c.gone_since["gone"], at(0));
    }

    #[test]
    fn after_the_grace_period_available_pvs_and_local_disks_go_and_bound_claims_are_warned_once() {
        let pvs = vec![
            pv("a", "gone", "Available", None),
            pv("b", "gone", "Bound", Some("data")),
            pv("c", "gone", "Released", Some("old")),
            pv("d", "here", "Available", None),
        ];
        let mut c = Case::new(&["here"], pvs, settings(60, None));
        c.run(at(0));
        let actions = c.run(at(60));
        assert_eq!(
            actions,
            vec![
                CleanupAction::DeletePv(PvRef {
                    name: "a".into(),
                    uid: "uid-a".into(),
                    resource_version: "7".into()
                }),
                CleanupAction::WarnClaim {
                    namespace: "ns".into(),
                    name: "data".into(),
                    uid: Some("uid-data".into()),
                    pv: "b".into(),
                    node: "gone".into()
                },
                CleanupAction::DeleteLocalDisk("fs-1".into()),
            ]
        );
        let again = c.run(at(61));
        assert!(
            !again
                .iter()
                .any(|a| matches!(a, CleanupAction::WarnClaim { .. })),
            "warned once: {again:?}"
        );
    }

    #[test]
    fn a_node_recreated_within_the_grace_period_keeps_its_pvs() {
        let mut c = Case::new(
            &["here"],
            vec![pv("a", "gone", "Available", None)],
            settings(60, None),
        );
        c.run(at(0));
        c.nodes.insert("gone".into());
        assert_eq!(c.run(at(30)), vec![]);
        assert!(c.gone_since.is_empty());
        c.nodes.remove("gone");
        assert_eq!(c.run(at(100)), vec![], "the grace period starts again");
    }

    #[test]
    fn claims_are_deleted_only_when_opted_in_and_after_the_extra_delay() {
        let mut c = Case::new(
            &[],
            vec![pv("b", "gone", "Bound", Some("data"))],
            settings(60, Some(30)),
        );
        c.run(at(0));
        assert!(
            !c.run(at(60))
                .iter()
                .any(|a| matches!(a, CleanupAction::DeleteClaim { .. }))
        );
        let later = c.run(at(90));
        assert!(later.contains(&CleanupAction::DeleteClaim {
            namespace: "ns".into(),
            name: "data".into(),
            uid: Some("uid-data".into())
        }));
    }

    #[test]
    fn a_pv_being_deleted_is_left_alone() {
        let mut p = pv("a", "gone", "Available", None);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let mut c = Case::new(&[], vec![p], settings(0, None));
        c.disks.clear();
        assert_eq!(c.run(at(0)), vec![]);
    }
}
