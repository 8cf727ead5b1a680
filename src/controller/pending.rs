//! Which pending pods get an explanation Event, and which of those are new. Pure: the controller hands in the
//! pods of its store and the extender's `PendingReasons`, and publishes what `plan_pending_events` returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// A pod not yet placed on a node, as the controller keeps it (the whole object is not needed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingPod {
    /// `metadata.namespace` as written ("" when unset).
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub created: Option<Timestamp>,
    /// The claims its volumes use, as `PendingReasons::claims` names them.
    pub claims: Vec<String>,
}

impl PendingPod {
    pub fn new(pod: &Pod, claims: Vec<String>) -> PendingPod {
        let meta = &pod.metadata;
        PendingPod {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            claims,
        }
    }
}

/// Why pods fit no node, in the extender's words; implemented over its latest snapshot.
pub trait PendingReasons: Send + Sync {
    /// The claims a pod's volumes use, by name (persistentVolumeClaim and generic ephemeral volumes).
    fn claims(&self, pod: &Pod) -> Vec<String>;
    /// For each pod, why no node can take it; `None` when one can or the pod has no claims of ours to explain.
    fn explain(&self, pods: &[&PendingPod]) -> Vec<Option<String>>;
}

/// A pending pod's explanation, and whether it still has to be published.
#[derive(Debug)]
pub struct Explanation {
    pub pod: Arc<PendingPod>,
    pub uid: String,
    pub message: String,
    /// False when `published` already holds this message for the pod: one Event per pod and distinct message.
    pub publish: bool,
}

/// The pods among `pods` pending at least `after` (by creation time) that no node can take, with their
/// explanations. `published` maps pod uid to the message last published; the caller keeps, for the next look, the
/// entries it published (or did not need to).
pub fn plan_pending_events(
    pods: &[Arc<PendingPod>],
    now: Timestamp,
    after: Duration,
    published: &BTreeMap<String, String>,
    explain: impl FnOnce(&[&PendingPod]) -> Vec<Option<String>>,
) -> Vec<Explanation> {
    let old_enough = |pod: &PendingPod| {
        pod.created
            .is_some_and(|t| now.duration_since(t).as_secs() >= after.as_secs() as i64)
    };
    let looked_at: Vec<&Arc<PendingPod>> = pods
        .iter()
        .filter(|pod| old_enough(pod) && pod.uid.is_some())
        .collect();
    let plain: Vec<&PendingPod> = looked_at.iter().map(|p| p.as_ref()).collect();
    let messages = explain(&plain);
    looked_at
        .into_iter()
        .zip(messages)
        .filter_map(|(pod, message)| {
            let message = message?;
            let uid = pod.uid.clone()?;
            let publish = published.get(&uid) != Some(&message);
            Some(Explanation {
                pod: pod.clone(),
                uid,
                message,
                publish,
            })
        })
        .collect()
}
