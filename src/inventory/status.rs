//! What one LocalDisk says: the spec from what discovery found, the phase from the PV at its path, the planner's
//! reason for not publishing it, the ledger and the wipes; and the comparison that decides whether to write.
//!
//! Phase precedence for a usable disk: `Failing` (wipes keep failing) > `IdentityChanged` (its PV was made for
//! another disk) > the PV's phase (Bound, Released or Wiping, Available) > the planner's hold reason > the ledger
//! (Dirty: Wiping, Retained: Released) > Available.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::crd::{
    CONDITION_DUPLICATE_UUID, CONDITION_HEALTHY, CONDITION_WIPE_FAILED, DuplicateUuid, LocalDisk,
    LocalDiskPhase, LocalDiskSpec, LocalDiskStatus, WipeStatus,
};
use super::format::human_bytes;
use super::inputs::{Inputs, WipeFailures, WipeSample, time};
use super::reason::DiskReason;
use crate::config::values::label_value_problem;
use crate::contract::{CLASS_LABEL, FS_UUID_LABEL, NODE_LABEL, Phase, WipePhase};
use crate::disk::{Disk, Unusable, UnusableReason};
use crate::plan::identity::{self, IdentityCheck};
use crate::plan::pv::{PvView, ReclaimPolicy};
use crate::plan::state::DiskState;
use crate::plan::{HoldReason, Unpublished};

/// Relative change below which free space and wipe counters are not rewritten (5% for wipes, 1% for free space).
const WIPE_STEP_PERCENT: u64 = 5;
const AVAILABLE_STEP_PERCENT: u64 = 1;

pub fn spec_of_disk(node: &str, disk: &Disk) -> LocalDiskSpec {
    let id = disk.identity.clone();
    LocalDiskSpec {
        node: node.to_string(),
        path: disk.host_path.display().to_string(),
        entry: disk.entry.clone(),
        storage_class: disk.class.clone(),
        volume_mode: Some(disk.mode.into()),
        device: id.device,
        dev_id: id.dev_id,
        mount_root: disk.mount_root.clone(),
        fs_type: id.fs_type,
        fs_uuid: id.fs_uuid,
        fs_label: id.fs_label,
        wwn: id.wwn,
        serial: id.serial,
        model: id.model,
        vendor: id.vendor,
        rotational: id.rotational,
        capacity_bytes: Some(disk.capacity_bytes),
        capacity_human: Some(human_bytes(disk.capacity_bytes)),
    }
}

pub fn spec_of_unusable(node: &str, entry: &Unusable) -> LocalDiskSpec {
    LocalDiskSpec {
        node: node.to_string(),
        path: entry.host_path.display().to_string(),
        entry: entry.entry.clone(),
        storage_class: entry.class.clone(),
        ..LocalDiskSpec::default()
    }
}

/// Node, class and filesystem UUID labels; a value that is not a valid label value is left out.
pub fn labels(spec: &LocalDiskSpec) -> BTreeMap<String, String> {
    [
        (NODE_LABEL, Some(&spec.node)),
        (CLASS_LABEL, Some(&spec.storage_class)),
        (FS_UUID_LABEL, spec.fs_uuid.as_ref()),
    ]
    .into_iter()
    .filter_map(|(key, value)| {
        let value = value.filter(|v| !v.is_empty() && label_value_problem(v).is_none())?;
        Some((key.to_string(), value.clone()))
    })
    .collect()
}

type PvAt<'a> = (PvView, &'a PersistentVolume);

struct PhaseVerdict {
    phase: LocalDiskPhase,
    reason: Option<DiskReason>,
    message: Option<String>,
}

fn verdict(phase: LocalDiskPhase, reason: DiskReason, message: String) -> PhaseVerdict {
    PhaseVerdict {
        phase,
        reason: Some(reason),
        message: Some(message),
    }
}

/// The status of a found disk, with the PV at its path and the planner's first hold reason for it.
pub fn of_disk(
    inputs: &Inputs<'_>,
    disk: &Disk,
    pv: Option<&PvAt<'_>>,
    held: Option<&Unpublished>,
) -> LocalDiskStatus {
    let wipe = inputs.wipes.get(&disk.host_path);
    let failures = inputs.wipe_failures.get(&disk.host_path);
    let verdict = disk_verdict(inputs, disk, pv, (wipe.is_some(), held), failures);
    let mut status = LocalDiskStatus {
        phase: verdict.phase,
        reason: verdict.reason.map(|r| r.as_str().to_string()),
        message: verdict.message,
        available_bytes: disk.available_bytes,
        wipe: wipe.map(|w| wipe_status(w, inputs.now)),
        ..LocalDiskStatus::default()
    };
    set_pv(&mut status, pv);
    if let Some(failures) = failures.filter(|f| f.consecutive > 0) {
        status.conditions.push(condition(
            CONDITION_WIPE_FAILED,
            "WipeFailed",
            format!(
                "{} consecutive wipe(s) failed, the last with: {}",
                failures.consecutive, failures.last_error
            ),
            &time(inputs.now),
        ));
    }
    if let Some(health) = inputs
        .found
        .unhealthy
        .iter()
        .find(|h| h.host_path == disk.host_path)
    {
        status.health = Some(health.state.as_str().to_string());
        let mut unhealthy = condition(
            CONDITION_HEALTHY,
            health.cause.as_str(),
            health.message.clone(),
            &time(inputs.now),
        );
        unhealthy.status = "False".to_string();
        status.conditions.push(unhealthy);
    }
    status
}

fn disk_verdict(
    inputs: &Inputs<'_>,
    disk: &Disk,
    pv: Option<&PvAt<'_>>,
    (wiping, held): (bool, Option<&Unpublished>),
    failures: Option<&WipeFailures>,
) -> PhaseVerdict {
    let failing =
        |f: &&WipeFailures| f.consecutive > 0 && f.consecutive >= inputs.settings.failing_after;
    if let Some(failures) = failures.filter(failing) {
        let message = format!(
            "{} wipes in a row failed; fix the cause (the last error: {}) or replace the disk",
            failures.consecutive, failures.last_error
        );
        return verdict(LocalDiskPhase::Failing, DiskReason::WipeFailing, message);
    }
    if let Some((view, _)) = pv {
        if let IdentityCheck::Changed(what) =
            identity::check(view.mode, view.recorded.as_ref(), disk)
        {
            let message = format!(
                "PV {} was created for another disk ({what}); it is neither reused nor wiped: mount the PV's own \
                 disk here again, or see DiskIdentityChanged in docs/troubleshooting.md",
                view.pv_ref.name
            );
            return verdict(
                LocalDiskPhase::IdentityChanged,
                DiskReason::DiskIdentityChanged,
                message,
            );
        }
        if let Some(verdict) = pv_verdict(view, wiping) {
            return verdict;
        }
    }
    if wiping {
        return verdict(
            LocalDiskPhase::Wiping,
            DiskReason::Wiping,
            "the disk is being wiped".into(),
        );
    }
    if let Some(held) = held {
        return hold_verdict(held);
    }
    match inputs.ledger.get(&identity::disk_key(disk)) {
        Some(DiskState::Dirty) => verdict(
            LocalDiskPhase::Wiping,
            DiskReason::AwaitingWipe,
            "the disk served a claim and is wiped before it is published again".into(),
        ),
        Some(DiskState::Retained) => verdict(
            LocalDiskPhase::Released,
            DiskReason::Retained,
            "the disk served a claim under reclaim policy Retain; mark it clean once its data is dealt with".into(),
        ),
        _ => PhaseVerdict {
            phase: LocalDiskPhase::Available,
            reason: None,
            message: None,
        },
    }
}

/// The phase a PV at the path gives; `None` for a PV being deleted that no claim holds.
fn pv_verdict(view: &PvView, wiping: bool) -> Option<PhaseVerdict> {
    let name = &view.pv_ref.name;
    Some(match view.phase {
        Phase::Bound => PhaseVerdict {
            phase: LocalDiskPhase::Bound,
            reason: None,
            message: None,
        },
        Phase::Released if wiping || view.wipe == WipePhase::Wiping => verdict(
            LocalDiskPhase::Wiping,
            DiskReason::Reclaiming,
            format!("the disk of released PV {name} is being wiped"),
        ),
        Phase::Released if view.wipe == WipePhase::Wiped => verdict(
            LocalDiskPhase::Released,
            DiskReason::Wiped,
            format!("wiped; PV {name} is deleted next and the disk published again"),
        ),
        Phase::Released if view.policy == ReclaimPolicy::Retain => verdict(
            LocalDiskPhase::Released,
            DiskReason::Retained,
            format!(
                "PV {name} has reclaim policy Retain: the data stays until an operator deletes the PV"
            ),
        ),
        Phase::Released => verdict(
            LocalDiskPhase::Released,
            DiskReason::AwaitingWipe,
            format!(
                "the claim of PV {name} is gone; the disk is wiped before it is published again"
            ),
        ),
        Phase::Failed => verdict(
            LocalDiskPhase::Released,
            DiskReason::PvFailed,
            format!("PV {name} is Failed; see its events"),
        ),
        Phase::Pending | Phase::Unknown | Phase::Available if view.deleting => return None,
        Phase::Pending | Phase::Unknown | Phase::Available => PhaseVerdict {
            phase: LocalDiskPhase::Available,
            reason: None,
            message: None,
        },
    })
}

fn hold_verdict(held: &Unpublished) -> PhaseVerdict {
    let (phase, reason) = match held.reason {
        HoldReason::Retained => (LocalDiskPhase::Released, DiskReason::Retained),
        HoldReason::AwaitingWipe => (LocalDiskPhase::Wiping, DiskReason::AwaitingWipe),
        HoldReason::AwaitingDeletion => (LocalDiskPhase::Available, DiskReason::AwaitingDeletion),
        HoldReason::HeldByAnotherPv => (LocalDiskPhase::Unusable, DiskReason::HeldByAnotherPv),
        HoldReason::NoStorageClass => (LocalDiskPhase::Unusable, DiskReason::NoStorageClass),
        HoldReason::NameTaken => (LocalDiskPhase::Unusable, DiskReason::NameTaken),
        HoldReason::PathNotUtf8 => (LocalDiskPhase::Unusable, DiskReason::PathNotUtf8),
        HoldReason::AwaitingVolumeId => (LocalDiskPhase::Available, DiskReason::AwaitingVolumeId),
        HoldReason::NoStableIdentity => (LocalDiskPhase::Unusable, DiskReason::NoStableIdentity),
        HoldReason::OverlappingStorage => {
            (LocalDiskPhase::Unusable, DiskReason::OverlappingStorage)
        }
        HoldReason::DuplicateIdentity => (LocalDiskPhase::Unusable, DiskReason::DuplicateIdentity),
        HoldReason::DiskDegraded => (LocalDiskPhase::Unusable, DiskReason::DiskDegraded),
        HoldReason::DiskFailed => (LocalDiskPhase::Unusable, DiskReason::DiskFailed),
        HoldReason::Cordoned => (LocalDiskPhase::Unusable, DiskReason::Cordoned),
        HoldReason::DeviceInUse => (LocalDiskPhase::Unusable, DiskReason::DeviceInUse),
    };
    verdict(phase, reason, held.message.clone())
}

pub fn of_unusable(entry: &Unusable, pv: Option<&PvAt<'_>>) -> LocalDiskStatus {
    let mut status = LocalDiskStatus {
        phase: LocalDiskPhase::Unusable,
        reason: Some(entry.reason.as_str().to_string()),
        message: Some(entry.message.clone()),
        ..LocalDiskStatus::default()
    };
    set_pv(&mut status, pv);
    // NB: discovery's advice for an unusable entry ("mount a filesystem on it, or remove it") is wrong when a PV
    // still holds a claim's data there: that data is on the disk that is missing from the path.
    if let Some((view, _)) = pv.filter(|(view, _)| !view.is_unclaimed() && !view.deleting) {
        let holder = match &status.claim {
            Some(claim) => format!("PV {} ({:?}, claim {claim})", view.pv_ref.name, view.phase),
            None => format!("PV {} ({:?})", view.pv_ref.name, view.phase),
        };
        let (reason, message) = if entry.reason == UnusableReason::NotAMountPoint {
            let message = format!(
                "{holder} keeps its data on the disk that belongs at {}, but nothing is mounted there: mount that \
                 disk here again; do not format, wipe or remove it",
                entry.host_path.display()
            );
            (DiskReason::DiskNotMounted.as_str(), message)
        } else {
            let message = format!(
                "{holder} keeps its data here; do not format, wipe or remove the disk. {}",
                entry.message
            );
            (entry.reason.as_str(), message)
        };
        status.reason = Some(reason.to_string());
        status.message = Some(message);
    }
    status
}

fn set_pv(status: &mut LocalDiskStatus, pv: Option<&PvAt<'_>>) {
    let Some((view, raw)) = pv else {
        return;
    };
    status.pv = Some(view.pv_ref.name.clone());
    status.claim = raw
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|c| {
            Some(format!(
                "{}/{}",
                c.namespace.as_deref()?,
                c.name.as_deref()?
            ))
        });
}

fn wipe_status(sample: &WipeSample, now: SystemTime) -> WipeStatus {
    let seconds = now
        .duration_since(sample.started)
        .unwrap_or_default()
        .as_secs();
    WipeStatus {
        started: time(sample.started),
        bytes_done: sample.bytes_done,
        entries_done: sample.entries_done,
        bytes_total: sample.bytes_total,
        bytes_per_second: (seconds > 0).then(|| sample.bytes_done / seconds),
    }
}

fn condition(type_: &str, reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        last_transition_time: now.clone(),
        message,
        observed_generation: None,
        reason: reason.to_string(),
        status: "True".to_string(),
        type_: type_.to_string(),
    }
}

pub fn flag_duplicate(status: &mut LocalDiskStatus, duplicate: DuplicateUuid, now: &Time) {
    let message = format!(
        "LocalDisk {} on node {} has the same filesystem UUID: a cloned disk? Both are kept; give one a new UUID",
        duplicate.local_disk, duplicate.node
    );
    status.conditions.push(condition(
        CONDITION_DUPLICATE_UUID,
        "ClonedFilesystem",
        message,
        now,
    ));
    status.duplicate_uuid = Some(duplicate);
}

/// `existing`, now `Missing` since `now`, with only the fields this agent owns (an apply body carries no
/// server-set metadata).
pub fn missing(existing: &LocalDisk, node: &str, now: &Time) -> LocalDisk {
    let name = existing.metadata.name.clone().unwrap_or_default();
    let mut object = LocalDisk::new(&name, existing.spec.clone());
    object.metadata.labels = Some(labels(&existing.spec));
    let mut status = existing.status.clone().unwrap_or_default();
    status.phase = LocalDiskPhase::Missing;
    status.reason = Some(DiskReason::DiskNotFound.as_str().into());
    status.message = Some(format!(
        "no longer found at {} on node {node}; the object is removed after the grace period unless the disk returns",
        existing.spec.path
    ));
    status.missing_since = Some(now.clone());
    status.wipe = None;
    object.status = Some(status);
    object
}

/// Whether writing `desired` over `existing` would change anything that matters: labels we set, spec, and status
/// apart from timestamps, the wipe rate and small moves of free space and wipe counters.
pub fn unchanged(desired: &LocalDisk, existing: &LocalDisk) -> bool {
    let have = existing.metadata.labels.clone().unwrap_or_default();
    let labels_same = desired
        .metadata
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| have.get(k) == Some(v));
    let capacity = desired.spec.capacity_bytes.unwrap_or(0);
    let want = desired.status.clone().unwrap_or_default();
    let had = existing.status.clone().unwrap_or_default();
    labels_same
        && desired.spec == existing.spec
        && comparable(tolerate(want, &had, capacity)) == comparable(had)
}

/// `want` with values close enough to `had` replaced by `had`'s.
fn tolerate(mut want: LocalDiskStatus, had: &LocalDiskStatus, capacity: u64) -> LocalDiskStatus {
    if let (Some(a), Some(b)) = (want.available_bytes, had.available_bytes)
        && close(a, b, capacity, AVAILABLE_STEP_PERCENT)
    {
        want.available_bytes = had.available_bytes;
    }
    if let (Some(w), Some(h)) = (want.wipe.as_mut(), had.wipe.as_ref())
        && w.started == h.started
    {
        let scale = w.bytes_total.unwrap_or(capacity);
        if close(w.bytes_done, h.bytes_done, scale, WIPE_STEP_PERCENT) {
            w.bytes_done = h.bytes_done;
        }
        let entries_scale = w.entries_done.max(h.entries_done);
        if close(
            w.entries_done,
            h.entries_done,
            entries_scale,
            WIPE_STEP_PERCENT,
        ) {
            w.entries_done = h.entries_done;
        }
    }
    want
}

fn close(a: u64, b: u64, scale: u64, percent: u64) -> bool {
    u128::from(a.abs_diff(b)) * 100 < u128::from(scale) * u128::from(percent)
}

/// The status without the fields that change on every write.
fn comparable(mut status: LocalDiskStatus) -> LocalDiskStatus {
    status.last_seen = None;
    if let Some(wipe) = status.wipe.as_mut() {
        wipe.bytes_per_second = None;
    }
    for condition in &mut status.conditions {
        condition.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        condition.observed_generation = None;
    }
    status
}
