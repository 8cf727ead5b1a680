//! The Lease holder's recovery pass (issue 37, points 2-4): the shell around the pure `crate::recovery`.
//!
//! ```text
//!  stores: our PVs, LocalDisks, Nodes ──> recovery::lost ──> lost volumes ─┐
//!  LocalDisks Degraded/Failed under a Bound PV ──> claims to tell ──────────┤ their namespaces only:
//!                                                                           └─> read the claims, StatefulSets, pods
//!  per lost volume: recovery::decide ──> Recover: Events (PV, claim, pod, set), delete claim, delete pod
//!                                    ├─> DryRun / Hold: Events once, until the decision changes
//!  per pod using a claim on a failing disk: DiskDegraded / DiskFailed Event, once per state
//!  per pod told, once its claim's disk is healthy again: DiskHealthy Event
//! ```
//!
//! Reads of claims, StatefulSets and pods are direct (a GET or a namespaced list per pass, only for the few
//! namespaces with a failing disk or a lost volume): watching every claim, set and pod of the cluster for an event
//! that rarely happens would cost the API server far more. A read that fails does nothing in that namespace this
//! pass (fail safe). Every write goes through the effects writer, each only while the Lease is held, deletes with
//! UID preconditions: a claim or pod re-created meanwhile is not touched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;
use kube::{Client, Resource};
use tracing::{info, warn};

mod tell;
#[cfg(test)]
mod tests;

use tell::{all_clear, clear_claim_health, tell_pods};

use super::LeaderWriter;
use super::metrics::{RecoveryVerdict, VerdictLabels, WriteKind, WriteVerdict};
use crate::cleanup::Volume;
use crate::effects::{self, Applied, Failed, Reason};
use crate::logging::error_text;
use crate::recovery::{
    self, Ask, ClaimFacts, Decision, DiskFacts, Lost, NodeSignals, NodeState, PodState,
    RecoveryPolicy, Scene, Set, Sources, Steps,
};

/// How often a recovery's pod delete is tried before the pass gives up on it, and the pause between tries.
const POD_DELETE_ATTEMPTS: u32 = 3;
const POD_DELETE_RETRY: Duration = Duration::from_millis(500);

/// The class policies, read fresh each pass (StorageClass name -> its `localpv.io/recovery` annotation).
pub type Classes = Arc<dyn Fn() -> BTreeMap<String, Ask> + Send + Sync>;

pub struct Settings {
    pub signals: NodeSignals,
    /// Least time between two recoveries in the cluster.
    pub interval: Duration,
    pub classes: Classes,
}

#[derive(Default)]
pub struct Memory {
    decisions: recovery::Memory,
    /// `pv:<uid>` or `pod:<uid>` -> the last thing said about it; a key not seen in a pass is forgotten.
    told: BTreeMap<String, String>,
    /// The pods told their disk was failing, by `pod:<uid>` as in `told`: to give them the all-clear.
    told_pods: BTreeMap<String, recovery::ToldPod>,
}

impl Memory {
    /// The PVs under the claims of pods told their disk was failing: their LocalDisks are read even when healthy,
    /// to give those pods the all-clear.
    pub(super) fn told_pvs(&self) -> BTreeSet<String> {
        self.told_pods.values().map(|t| t.pv.clone()).collect()
    }

    /// This replica just became the leader: the previous leader may have recovered a replica a moment ago, so the
    /// cluster's interval counts from now (a new leader waits one interval before its first recovery).
    pub(super) fn began_leading(&mut self, now: SystemTime) {
        self.decisions.last = Some(now);
    }
}

/// What one pass reads from the stores.
pub struct Inputs<'a> {
    pub pvs: &'a [Arc<Volume>],
    pub disks: &'a [DiskFacts],
    pub nodes: &'a BTreeMap<String, NodeState>,
    pub gone_since: &'a BTreeMap<String, SystemTime>,
}

pub(super) async fn pass(
    writer: &LeaderWriter,
    client: &Client,
    settings: &Settings,
    inputs: &Inputs<'_>,
    memory: &mut Memory,
) {
    let now = SystemTime::now();
    let lost = recovery::lost(&Sources {
        pvs: inputs.pvs,
        disks: inputs.disks,
        nodes: inputs.nodes,
        gone_since: inputs.gone_since,
        signals: &settings.signals,
        now,
    });
    let failing = recovery::failing(inputs.pvs, inputs.disks);
    let namespaces: BTreeSet<&str> = lost
        .iter()
        .map(|l| l.namespace.as_str())
        .chain(failing.iter().map(|f| f.namespace))
        .collect();
    let mut seen = BTreeSet::new();
    if namespaces.is_empty() {
        clear_claim_health(writer, memory, &mut seen).await;
        all_clear(writer, inputs, memory, &mut seen).await;
        memory.told.retain(|k, _| seen.contains(k));
        return;
    }
    let policy = RecoveryPolicy {
        classes: (settings.classes)(),
        interval: settings.interval,
    };
    for ns in namespaces {
        let Some(mut scene) = read_namespace(client, ns).await else {
            // NB: keep what was said about this namespace: nothing changed that we know of.
            seen.extend(memory.told.keys().cloned());
            continue;
        };
        for f in failing.iter().filter(|f| f.namespace == ns) {
            tell_pods(writer, f, &scene, memory, &mut seen).await;
        }
        for l in lost.iter().filter(|l| l.namespace == ns) {
            scene.claim = match read_claim(client, ns, &l.claim).await {
                Ok(claim) => claim,
                Err(()) => {
                    seen.insert(pv_key(l));
                    continue;
                }
            };
            let decision = recovery::decide(l, &scene, &policy, &mut memory.decisions, now);
            seen.insert(pv_key(l));
            act(writer, l, decision, memory, now).await;
        }
    }
    clear_claim_health(writer, memory, &mut seen).await;
    all_clear(writer, inputs, memory, &mut seen).await;
    memory.told.retain(|k, _| seen.contains(k));
}

fn pv_key(l: &Lost) -> String {
    format!("pv:{}", l.pv_uid)
}

/// The StatefulSets and pods of one namespace; `None` when either read failed.
async fn read_namespace(client: &Client, ns: &str) -> Option<Scene> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default();
    let (sets, pods) = match tokio::try_join!(sets.list(&lp), pods.list(&lp)) {
        Ok(both) => both,
        Err(error) => {
            warn!(namespace = ns, error = %error_text(&error), "recovery: failed to read StatefulSets and pods; nothing done there this pass");
            return None;
        }
    };
    Some(Scene {
        claim: None,
        sets: sets.items.iter().map(Set::from_statefulset).collect(),
        pods: pods.items.iter().map(PodState::from_pod).collect(),
    })
}

async fn read_claim(client: &Client, ns: &str, name: &str) -> Result<Option<ClaimFacts>, ()> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await {
        Ok(claim) => Ok(claim.as_ref().map(ClaimFacts::from_claim)),
        Err(error) => {
            warn!(namespace = ns, claim = name, error = %error_text(&error), "recovery: failed to read the claim; nothing done for it this pass");
            Err(())
        }
    }
}

async fn act(
    writer: &LeaderWriter,
    l: &Lost,
    decision: Decision,
    memory: &mut Memory,
    now: SystemTime,
) {
    let key = pv_key(l);
    let said = memory.told.get(&key).cloned();
    match decision {
        Decision::Settled => {}
        Decision::Hold(hold) => {
            let what = hold.key();
            if said.as_deref() == Some(what.as_str()) {
                return;
            }
            writer.count_verdict(RecoveryVerdict::Held);
            let note = hold.message(l);
            let claim = claim_ref(l);
            if writer
                .note_as(&claim, Reason::ReplicaRecoveryHeld, hold.action(), &note)
                .await
            {
                memory.told.insert(key, what);
            }
        }
        Decision::DryRun(steps) => {
            if said.as_deref() == Some("dry-run") {
                return;
            }
            writer.count_verdict(RecoveryVerdict::DryRun);
            let mut all = true;
            for regarding in regarding(l, &steps) {
                all &= writer
                    .note(&regarding, Reason::ReplicaRecoveryDryRun, &steps.message)
                    .await;
            }
            if all {
                memory.told.insert(key, "dry-run".into());
            }
        }
        Decision::Recover(steps) => {
            if !writer.lease.holds() {
                writer.count(WriteKind::DeleteClaim, WriteVerdict::NotLeader);
                return;
            }
            // NB: the Events go first: once the claim is gone, its Events are the only record of what was lost.
            for regarding in regarding(l, &steps) {
                writer
                    .note(&regarding, Reason::ReplicaRecovered, &steps.message)
                    .await;
            }
            let claim = writer
                .remove::<PersistentVolumeClaim>(
                    Some(&steps.namespace),
                    &steps.claim,
                    &steps.claim_uid,
                    WriteKind::DeleteClaim,
                )
                .await;
            if claim == WriteVerdict::Applied
                && let Some(uid) = &steps.replica.pod_uid
            {
                // NB: once the claim is deleting, a later pass sees it settled and would not delete the pod again;
                // a failed pod delete is retried here (the claim then waits, protected, until the pod is gone).
                for attempt in 0..POD_DELETE_ATTEMPTS {
                    if attempt > 0 {
                        tokio::time::sleep(POD_DELETE_RETRY).await;
                    }
                    let pod = writer
                        .remove::<Pod>(
                            Some(&steps.namespace),
                            &steps.replica.pod,
                            uid,
                            WriteKind::DeletePod,
                        )
                        .await;
                    if matches!(
                        pod,
                        WriteVerdict::Applied | WriteVerdict::AlreadyDone | WriteVerdict::NotLeader
                    ) {
                        break;
                    }
                }
            }
            if claim == WriteVerdict::Applied {
                info!(pv = %l.pv, claim = %format!("{}/{}", steps.namespace, steps.claim), pod = %steps.replica.pod, "recovered a StatefulSet replica whose local volume is lost");
                writer.count_verdict(RecoveryVerdict::Recovered);
                memory.decisions.started(&steps, now);
                memory.told.insert(key, "recovered".into());
            }
        }
    }
}

fn claim_ref(l: &Lost) -> k8s_openapi::api::core::v1::ObjectReference {
    effects::reference::<PersistentVolumeClaim>(
        Some(&l.namespace),
        &l.claim,
        l.claim_uid.as_deref(),
    )
}

/// Where a recovery's Events go: the PV, the claim, the pod (if any) and the StatefulSet.
fn regarding(l: &Lost, steps: &Steps) -> Vec<k8s_openapi::api::core::v1::ObjectReference> {
    let ns = Some(steps.namespace.as_str());
    let mut out = vec![
        effects::reference::<PersistentVolume>(None, &l.pv, Some(&l.pv_uid)),
        claim_ref(l),
    ];
    if let Some(uid) = &steps.replica.pod_uid {
        out.push(effects::reference::<Pod>(ns, &steps.replica.pod, Some(uid)));
    }
    out.push(effects::reference::<StatefulSet>(
        ns,
        &steps.replica.set,
        Some(&steps.replica.set_uid),
    ));
    out
}

impl LeaderWriter {
    /// One Warning Event through the effects writer, only while the Lease is held; true when published.
    pub(super) async fn note(
        &self,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
        reason: Reason,
        note: &str,
    ) -> bool {
        self.note_as(regarding, reason, reason.action(), note).await
    }

    /// A Warning Event with its own action (see `effects::Writer::event_as`), only while the Lease is held.
    async fn note_as(
        &self,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
        reason: Reason,
        action: &str,
        note: &str,
    ) -> bool {
        if !self.lease.holds() {
            self.count(WriteKind::RecoveryEvent, WriteVerdict::NotLeader);
            return false;
        }
        self.event_counted(regarding, reason, action, note, WriteKind::RecoveryEvent)
            .await
    }

    /// A Warning Event, counted as `write` by its outcome; true when published.
    pub(super) async fn event_counted(
        &self,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
        reason: Reason,
        action: &str,
        note: &str,
        write: WriteKind,
    ) -> bool {
        let sent = self
            .effects
            .event_as(regarding, EventType::Warning, reason, action, note)
            .await;
        let outcome = if sent.is_ok() {
            WriteVerdict::Applied
        } else {
            WriteVerdict::Failed
        };
        self.count(write, outcome);
        sent.is_ok()
    }

    /// Deletes one object with its UID as precondition, only while the Lease is held.
    async fn remove<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        uid: &str,
        write: WriteKind,
    ) -> WriteVerdict
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        if !self.lease.holds() {
            self.count(write, WriteVerdict::NotLeader);
            return WriteVerdict::NotLeader;
        }
        let exact = effects::exactly(uid, None);
        let outcome = match self.effects.delete::<K>(namespace, name, Some(exact)).await {
            Ok(Applied::Done(())) => WriteVerdict::Applied,
            Ok(Applied::Moot) => WriteVerdict::AlreadyDone,
            Err(Failed) => WriteVerdict::Failed,
        };
        self.count(write, outcome);
        outcome
    }

    fn count_verdict(&self, verdict: RecoveryVerdict) {
        let labels = VerdictLabels { verdict };
        self.metrics.recoveries.get_or_create(&labels).inc();
    }
}
