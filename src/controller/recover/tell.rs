//! What a recovery pass tells about a disk's health, apart from recovering: the claim's `status.healthStatus`,
//! an Event per pod using a claim on a failing disk, and the all-clear for those pods once the disk is healthy
//! again. Part of the recovery pass's shell (`controller::recover`), sharing its memory of whom it told.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use super::{Inputs, Memory};
use crate::controller::LeaderWriter;
use crate::controller::metrics::{WriteKind, WriteVerdict};
use crate::effects::{self, Applied, Failed, Reason};
use crate::health::State;
use crate::recovery::{self, Failing, Scene};

/// `DiskHealthy` on each pod told its disk was failing that this pass no longer tells, when the disk under its claim
/// is healthy again (`recovery::healthy_again`); a pod whose claim or PV went another way hears nothing more. A write
/// that fails stays in `seen`, to be tried again next pass.
pub(super) async fn all_clear(
    writer: &LeaderWriter,
    inputs: &Inputs<'_>,
    memory: &mut Memory,
    seen: &mut BTreeSet<String>,
) {
    let stale: Vec<String> = memory
        .told_pods
        .keys()
        .filter(|k| !seen.contains(*k))
        .cloned()
        .collect();
    for key in stale {
        let Some(told) = memory.told_pods.get(&key) else {
            continue;
        };
        if recovery::healthy_again(told, inputs.pvs, inputs.disks) {
            let note = format!(
                "the disk under claim {} (PV {}) is Healthy again (it was {}); see docs/failure.md",
                told.claim, told.pv, told.word
            );
            let regarding =
                effects::reference::<Pod>(Some(&told.namespace), &told.name, Some(&told.uid));
            if !writer.note(&regarding, Reason::DiskHealthy, &note).await {
                seen.insert(key);
                continue;
            }
        }
        memory.told_pods.remove(&key);
    }
}

/// Clears the health status of claims written before whose disk is no longer failing (or no longer theirs); a
/// clear that fails stays in `seen`, to be tried again next pass.
pub(super) async fn clear_claim_health(
    writer: &LeaderWriter,
    memory: &mut Memory,
    seen: &mut BTreeSet<String>,
) {
    let stale: Vec<String> = memory
        .told
        .keys()
        .filter(|k| k.starts_with("claim:") && !seen.contains(*k))
        .cloned()
        .collect();
    for key in stale {
        let Some((namespace, claim)) = key.trim_start_matches("claim:").split_once('/') else {
            continue;
        };
        if write_claim_health(writer, namespace, claim, None).await {
            memory.told.remove(&key);
        } else {
            seen.insert(key);
        }
    }
}

/// The claim's `status.healthStatus` (served by Kubernetes behind the `CSIVolumeHealth` gate; a server without it
/// drops the field): one condition while its disk is Degraded or Failed, none once it is healthy.
fn health_status(f: Option<&Failing<'_>>) -> serde_json::Value {
    let Some(f) = f else {
        return serde_json::json!({"status": {"healthStatus": null}});
    };
    let (status, reason) = match f.state {
        State::Failed => ("Inaccessible", Reason::DiskFailed),
        _ => ("Degraded", Reason::DiskDegraded),
    };
    let message = format!(
        "disk {} on node {} (PV {}) is {}{}",
        f.disk.name,
        f.disk.node,
        f.pv,
        f.state.as_str(),
        f.disk
            .health_message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    );
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    serde_json::json!({"status": {"healthStatus": {
        "healthConditions": [{"status": status, "reason": reason.as_str(), "message": message}],
        "lastTransitionTime": now,
    }}})
}

/// Writes (or clears, with `f` None) a claim's health status once per state; true when written.
async fn write_claim_health(
    writer: &LeaderWriter,
    namespace: &str,
    claim: &str,
    f: Option<&Failing<'_>>,
) -> bool {
    if !writer.lease.holds() {
        return false;
    }
    let patch = health_status(f);
    let sent = writer
        .effects
        .merge_patch_status::<PersistentVolumeClaim>(Some(namespace), claim, &patch)
        .await;
    let outcome = match sent {
        Ok(Applied::Done(_)) => WriteVerdict::Applied,
        Ok(Applied::Moot) => WriteVerdict::AlreadyDone,
        Err(Failed) => WriteVerdict::Failed,
    };
    writer.count(WriteKind::ClaimHealth, outcome);
    outcome != WriteVerdict::Failed
}

/// One Event per pod using a claim on a failing disk and state.
pub(super) async fn tell_pods(
    writer: &LeaderWriter,
    f: &Failing<'_>,
    scene: &Scene,
    memory: &mut Memory,
    seen: &mut BTreeSet<String>,
) {
    let (reason, word) = match f.state {
        State::Failed => (Reason::DiskFailed, "Failed"),
        _ => (Reason::DiskDegraded, "Degraded"),
    };
    let claim_key = format!("claim:{}/{}", f.namespace, f.claim);
    seen.insert(claim_key.clone());
    if memory.told.get(&claim_key).map(String::as_str) != Some(word)
        && write_claim_health(writer, f.namespace, f.claim, Some(f)).await
    {
        memory.told.insert(claim_key, word.into());
    }
    for pod in recovery::pods_using(f.claim, scene) {
        let key = format!("pod:{}", pod.uid);
        seen.insert(key.clone());
        if memory.told.get(&key).map(String::as_str) == Some(word) {
            continue;
        }
        let why = match (&f.disk.health_reason, &f.disk.health_message) {
            (Some(r), Some(m)) => format!(" ({r}: {m})"),
            _ => String::new(),
        };
        let note = format!(
            "disk {} on node {} under claim {} (PV {}) is {word}{why}; see docs/failure.md",
            f.disk.name, f.disk.node, f.claim, f.pv
        );
        let regarding = effects::reference::<Pod>(Some(f.namespace), &pod.name, Some(&pod.uid));
        if writer.note(&regarding, reason, &note).await {
            memory.told.insert(key.clone(), word.into());
            let told = recovery::ToldPod {
                namespace: f.namespace.to_string(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                claim: f.claim.to_string(),
                pv: f.pv.to_string(),
                word: word.to_string(),
            };
            memory.told_pods.insert(key, told);
        }
    }
}
