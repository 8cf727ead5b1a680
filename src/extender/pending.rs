//! Why a pod is Pending, in our words, for the pod's own Events.
//!
//! kube-scheduler runs its VolumeBinding filter before any extender, so when no node has a fitting local PV the
//! extender is never called and the pod's FailedScheduling event carries only the in-tree summary ("didn't find
//! available persistent volumes to bind"). The Lease holder therefore looks at pending pods itself and, for those
//! whose delayed local claims fit no node, adds one Event with the reason per node, grouped. Pure apart from
//! `SnapshotReasons`, which reads the latest snapshot for the leader-gated controller (`crate::controller`): it looks
//! every few seconds and publishes what `controller::pending::plan_pending_events` says.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod as KubePod;

use super::cache::Cache;
use super::decide::{PodClaims, Verdict};
use super::snapshot::Snapshot;
use super::wire::Pod;
use crate::controller::pending::{PendingPod, PendingReasons};

/// Nodes listed by name per reason before the rest are only counted.
const NAMES_PER_REASON: usize = 3;

/// The explanation for a pod no node can take, or `None` when some node fits or the pod has no delayed static
/// claims (then it is not ours to explain).
pub fn explain_pending(snap: &Snapshot, pod: &Pod) -> Option<String> {
    explain_claims(snap, pod.namespace(), &pod.claim_names())
}

/// `explain_pending` for a pod known by its namespace ("" is `default`) and the names of its claims.
pub fn explain_claims(snap: &Snapshot, namespace: &str, claim_names: &[String]) -> Option<String> {
    let namespace = if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    let claims = PodClaims::resolve(snap, namespace, claim_names).verdicts_only();
    if !claims.has_delayed() {
        return None;
    }
    // Most pending pods are only waiting their turn in the scheduler's queue, and the Lease holder looks at every
    // pending pod each tick: the first node that fits ends the look (in the snapshot's order; names are sorted
    // only for the message).
    let mut by_reason: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for node in snap.node_names() {
        match claims.decide_node(snap.node(node)) {
            Verdict::Fit(_) => return None,
            Verdict::Failed(reason) | Verdict::Unresolvable(reason) => {
                by_reason.entry(reason).or_default().push(node)
            }
        }
    }
    if by_reason.is_empty() {
        return None;
    }
    let parts: Vec<String> = by_reason
        .into_iter()
        .map(|(reason, mut nodes)| {
            nodes.sort_unstable();
            let shown = nodes
                .iter()
                .take(NAMES_PER_REASON)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            let more = nodes.len().saturating_sub(NAMES_PER_REASON);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!("{shown}{more}: {reason}")
        })
        .collect();
    Some(format!(
        "no node has free local PVs for this pod: {} (`localpv explain` shows every node)",
        parts.join("; ")
    ))
}

/// The controller's `PendingReasons` over the extender's latest snapshot: one snapshot for all the pods of a look.
pub struct SnapshotReasons {
    cache: Arc<Cache>,
    memo: Mutex<Memo>,
}

/// The answers of the last look and the snapshot they were made from. A pod's claims never change (volumes are
/// immutable in a pod's spec), so while the snapshot is the same the answer is too: a queue of pods that fit
/// nowhere costs a walk over every node once per snapshot, not once per look.
#[derive(Default)]
struct Memo {
    snapshot: Option<Arc<Snapshot>>,
    /// Pod UID -> its answer.
    by_pod: HashMap<String, Option<String>>,
}

impl SnapshotReasons {
    pub fn new(cache: Arc<Cache>) -> SnapshotReasons {
        SnapshotReasons {
            cache,
            memo: Mutex::default(),
        }
    }
}

impl PendingReasons for SnapshotReasons {
    fn claims(&self, pod: &KubePod) -> Vec<String> {
        Pod::from(pod).claim_names()
    }

    fn explain(&self, pods: &[&PendingPod]) -> Vec<Option<String>> {
        let snap = self.cache.load();
        // NB: only the controller's one blocking pass takes this lock; requests never do.
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        let same = memo
            .snapshot
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &snap));
        let mut known = if same {
            std::mem::take(&mut memo.by_pod)
        } else {
            HashMap::new()
        };
        let mut by_pod = HashMap::with_capacity(pods.len());
        let answers = pods
            .iter()
            .map(|p| {
                let key = p.uid.clone().unwrap_or_default();
                let answer = known
                    .remove(&key)
                    .unwrap_or_else(|| explain_claims(&snap, &p.namespace, &p.claims));
                by_pod.insert(key, answer.clone());
                answer
            })
            .collect();
        *memo = Memo {
            snapshot: Some(snap),
            by_pod,
        };
        answers
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::controller::pending::plan_pending_events;
    use crate::extender::fixtures::{PvBuilder, PvcBuilder, local_class, node, pv, pvc};

    fn snapshot(pvs: Vec<PvBuilder>, pvcs: Vec<PvcBuilder>) -> Snapshot {
        Snapshot::new(
            pvs.into_iter().map(PvBuilder::build),
            pvcs.into_iter().map(PvcBuilder::build),
            [local_class("local")],
            ["n1", "n2", "n3", "n4", "n5"].map(|n| node(n).build()),
        )
    }

    fn pod(claims: &[&str]) -> Pod {
        let volumes: Vec<_> = claims
            .iter()
            .map(|c| serde_json::json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"volumes": volumes}
        }))
        .expect("a wire pod")
    }

    fn pending_pod(uid: &str, age_secs: i64, claims: &[&str]) -> Arc<PendingPod> {
        let volumes: Vec<_> = claims
            .iter()
            .map(|c| serde_json::json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        let created = Timestamp::UNIX_EPOCH + jiff_secs(1_000 - age_secs);
        let pod: KubePod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "creationTimestamp": created.to_string()},
            "spec": {"containers": [], "volumes": volumes}
        }))
        .expect("a v1 pod");
        Arc::new(PendingPod::new(&pod, Pod::from(&pod).claim_names()))
    }

    fn jiff_secs(secs: i64) -> k8s_openapi::jiff::SignedDuration {
        k8s_openapi::jiff::SignedDuration::from_secs(secs)
    }

    /// uid, message and whether to publish, per planned explanation.
    fn plan(pods: &[Arc<PendingPod>], published: &[(&str, &str)]) -> Vec<(String, String, bool)> {
        let snap = snapshot(
            vec![pv("small").on_node("n1").capacity("5Gi")],
            vec![pvc("big").request("50Gi"), pvc("fits").request("1Gi")],
        );
        let published = published
            .iter()
            .map(|(uid, m)| (uid.to_string(), m.to_string()))
            .collect();
        let now = Timestamp::UNIX_EPOCH + jiff_secs(1_000);
        let explain = |pods: &[&PendingPod]| {
            let explain = |p: &&PendingPod| explain_claims(&snap, &p.namespace, &p.claims);
            pods.iter().map(explain).collect()
        };
        plan_pending_events(pods, now, Duration::from_secs(5), &published, explain)
            .into_iter()
            .map(|e| (e.uid, e.message, e.publish))
            .collect()
    }

    #[test]
    fn only_pods_pending_a_while_that_fit_nowhere_are_explained() {
        let pods = [
            pending_pod("young", 2, &["big"]),
            pending_pod("old", 30, &["big"]),
            pending_pod("placeable", 30, &["fits"]),
            pending_pod("no-claims", 30, &[]),
        ];
        let planned = plan(&pods, &[]);
        let uids: Vec<(&str, bool)> = planned.iter().map(|(u, _, p)| (u.as_str(), *p)).collect();
        assert_eq!(uids, [("old", true)]);
        assert!(
            planned[0].1.contains("largest free PV is 5Gi"),
            "{}",
            planned[0].1
        );
    }

    #[test]
    fn a_message_already_published_is_kept_but_not_published_again() {
        let pods = [pending_pod("old", 30, &["big"])];
        let message = plan(&pods, &[]).remove(0).1;
        let again = plan(&pods, &[("old", &message)]);
        assert_eq!(again, [("old".to_string(), message.clone(), false)]);
        let changed = plan(&pods, &[("old", "an older reason")]);
        assert_eq!(changed, [("old".to_string(), message, true)]);
    }

    #[test]
    fn the_explainer_answers_again_from_a_new_snapshot_only() {
        let small = || vec![pv("small").on_node("n1").capacity("5Gi")];
        let cache = Arc::new(Cache::new(
            snapshot(small(), vec![pvc("data").request("50Gi")]),
            true,
        ));
        let explainer = SnapshotReasons::new(cache.clone());
        let pod = pending_pod("old", 30, &["data"]);
        let first = explainer.explain(&[&pod]);
        assert!(
            first[0]
                .as_deref()
                .is_some_and(|m| m.contains("largest free PV is 5Gi"))
        );
        assert_eq!(
            explainer.explain(&[&pod]),
            first,
            "same snapshot, same answer"
        );
        let mut grown = small();
        grown.push(pv("big").on_node("n2").capacity("100Gi"));
        cache.store(snapshot(grown, vec![pvc("data").request("50Gi")]));
        assert_eq!(
            explainer.explain(&[&pod]),
            [None],
            "a new snapshot is looked at"
        );
    }

    #[test]
    fn a_pod_that_fits_anywhere_is_not_explained() {
        let snap = snapshot(
            vec![
                pv("small").on_node("n1").capacity("5Gi"),
                pv("big").on_node("n5").capacity("100Gi"),
            ],
            vec![pvc("data").request("50Gi")],
        );
        assert_eq!(explain_pending(&snap, &pod(&["data"])), None);
    }

    #[test]
    fn a_pod_without_delayed_local_claims_is_not_ours() {
        let snap = snapshot(vec![], vec![pvc("data").class("other")]);
        assert_eq!(explain_pending(&snap, &pod(&["data"])), None);
        assert_eq!(explain_pending(&snap, &pod(&[])), None);
    }

    #[test]
    fn reasons_are_grouped_with_at_most_three_names_each() {
        let snap = snapshot(
            vec![
                pv("small").on_node("n1").capacity("5Gi"),
                pv("taken").on_node("n2").bound(),
            ],
            vec![pvc("data").request("50Gi")],
        );
        assert_eq!(
            explain_pending(&snap, &pod(&["data"])).as_deref(),
            Some(
                "no node has free local PVs for this pod: \
                 n2: claim default/data: all 1 PVs of class local are bound; \
                 n1: claim default/data: largest free PV is 5Gi, claim asks 50Gi; \
                 n3, n4, n5: claim default/data: no PV of class local on node \
                 (`localpv explain` shows every node)"
            )
        );
    }
}
