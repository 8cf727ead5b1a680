//! Disk health (issue 37, point 1): from what the host shows about one disk, decide `Healthy`, `Degraded` or
//! `Failed`, without flapping. Pure: the agent gathers [`Signals`] (host), keeps each disk's [`Record`] between
//! observations, and calls [`judge`].
//!
//! ```text
//!  Signals (fs error counter, fs shut down or remounted read-only, the agent's read probe, device gone,
//!           hardware health log)  ─┐
//!  Record (last state, baseline)  ─┼─> judge ─> Record { state, reason, message, ... }
//!  Policy (thresholds, grace)     ─┘
//! ```
//!
//! Rules:
//! - `Degraded` on the first sign: a filesystem error counter above the one first seen (ext4 `errors_count` is
//!   kept in the superblock across mounts, so only a rise is news), a failed probe, the device's media error count
//!   above the one first seen, its spare capacity under its threshold, its temperature past a threshold, its rated
//!   endurance used up, unreadable sectors (ATA), a SCSI informational exception other than a failure prediction.
//! - `Failed` when new errors reach `failed_after_errors`, when the filesystem shut itself down or was remounted
//!   read-only by its error policy, when the device says it is failing (NVMe media read-only, reliability degraded
//!   before the endurance is used up, backup failed; ATA SMART status failing or a pre-fail attribute at its
//!   threshold; a SCSI failure prediction, ASC 5Dh), or when the device is gone for longer than `gone_grace`.
//! - Back to `Healthy` only after `healthy_after` with no new sign (a transient error does not flap), or at once
//!   when a device that was only gone is back within `gone_grace` (a false alarm). A `Failed` disk stays `Failed`
//!   while it is found; a replaced one is another identity, judged afresh.
//!
//! [`smart`] parses an NVMe or ATA drive's health log into [`Hardware`], [`scsi`] a SCSI disk's log pages.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

pub mod scsi;
pub mod smart;

/// How a disk is doing.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum State {
    #[default]
    Healthy,
    Degraded,
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "Healthy",
            State::Degraded => "Degraded",
            State::Failed => "Failed",
        }
    }
}

/// Why a disk is in its state (stable CamelCase words: conditions, Events, alerts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Cause {
    /// Nothing wrong seen.
    NoErrors,
    /// The filesystem's error counter rose.
    FilesystemErrors,
    /// The filesystem shut itself down (xfs) or its error policy remounted it read-only (ext4 `errors=remount-ro`).
    FilesystemShutDown,
    /// The agent's bounded read probe of the volume root or device failed.
    ProbeIoError,
    /// The device behind the volume is gone (removed, loop detached, backing lost).
    DeviceGone,
    /// The hardware health log reports a problem (NVMe critical warning, media errors, SMART).
    HardwareWarning,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::NoErrors => "NoErrors",
            Cause::FilesystemErrors => "FilesystemErrors",
            Cause::FilesystemShutDown => "FilesystemShutDown",
            Cause::ProbeIoError => "ProbeIoError",
            Cause::DeviceGone => "DeviceGone",
            Cause::HardwareWarning => "HardwareWarning",
        }
    }
}

/// Which health log a [`Hardware`] reading came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HardwareSource {
    /// The NVMe SMART / Health Information log page (Log Identifier 02h).
    #[default]
    Nvme,
    /// ATA SMART data, thresholds and return status; an SSD's endurance from the Device Statistics log (page 07h).
    Ata,
    /// SCSI log pages: informational exceptions (2Fh), read and write error counters (03h, 02h).
    Scsi,
}

/// A warning the device raises about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DriveWarning {
    /// NVMe critical warning bit 0, or the available spare under its threshold.
    SpareLow,
    /// NVMe bit 1: the temperature is past a threshold (transient: heals when it cools).
    Temperature,
    /// NVMe bit 2: reliability degraded by media or internal errors. Some drives (Samsung) also set it when the
    /// rated endurance is used up, with nothing else wrong.
    ReliabilityDegraded,
    /// NVMe bit 3: all media placed in read-only mode.
    ReadOnly,
    /// NVMe bit 4: the volatile memory backup device failed.
    BackupFailed,
    /// NVMe bit 5: the persistent memory region became read-only or unreliable.
    PersistentMemoryReadOnly,
    /// ATA SMART RETURN STATUS: a threshold is exceeded, the drive predicts its own failure.
    SmartFailing,
    /// An ATA attribute at or below its threshold; `prefail` attributes predict failure, the others old age.
    AttributeAtThreshold { id: u8, prefail: bool },
    /// ATA sectors the drive could not read (attributes 197 pending, 198 offline uncorrectable).
    UnreadableSectors { count: u64 },
    /// A SCSI informational exception (log page 2Fh) by its additional sense code and qualifier: 5Dh predicts
    /// failure; any other is a warning.
    Exception { asc: u8, ascq: u8 },
}

impl DriveWarning {
    /// How bad it is on its own. `worn_out`: the device reports its rated endurance used up.
    fn state(self, worn_out: bool) -> State {
        match self {
            DriveWarning::ReadOnly
            | DriveWarning::BackupFailed
            | DriveWarning::PersistentMemoryReadOnly
            | DriveWarning::SmartFailing
            | DriveWarning::AttributeAtThreshold { prefail: true, .. } => State::Failed,
            DriveWarning::Exception { asc, ascq } if scsi::predicts_failure(asc, ascq) => {
                State::Failed
            }
            // NB: bit 2 together with 100% endurance used is what some vendors report for a worn drive that still
            // works (smartmontools issue 537, a Samsung answer): Degraded (no new claims), not Failed for good.
            DriveWarning::ReliabilityDegraded if !worn_out => State::Failed,
            _ => State::Degraded,
        }
    }

    fn describe(self) -> String {
        match self {
            DriveWarning::SpareLow => "available spare below threshold".into(),
            DriveWarning::Temperature => "temperature past a threshold".into(),
            DriveWarning::ReliabilityDegraded => "reliability degraded".into(),
            DriveWarning::ReadOnly => "media placed in read-only mode".into(),
            DriveWarning::BackupFailed => "volatile memory backup failed".into(),
            DriveWarning::PersistentMemoryReadOnly => "persistent memory region read-only".into(),
            DriveWarning::SmartFailing => "SMART status failing".into(),
            DriveWarning::AttributeAtThreshold { id, prefail } => {
                let kind = if prefail { "pre-fail" } else { "old-age" };
                format!("{kind} attribute {id} at its threshold")
            }
            DriveWarning::UnreadableSectors { count } => format!("{count} unreadable sectors"),
            DriveWarning::Exception { asc, ascq } if scsi::predicts_failure(asc, ascq) => {
                format!("failure predicted (ASC {asc:02X}h ASCQ {ascq:02X}h)")
            }
            DriveWarning::Exception { asc, ascq } => format!("ASC {asc:02X}h ASCQ {ascq:02X}h"),
        }
    }
}

/// What the device's own health log says (NVMe SMART / health information page, ATA SMART).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hardware {
    pub source: HardwareSource,
    /// The warnings the device raises now.
    pub warnings: Vec<DriveWarning>,
    /// Media and data integrity errors since manufacture (NVMe), reallocated plus pending plus uncorrectable
    /// sectors (ATA 5 + 197 + 198), or uncorrected read plus write errors (SCSI): only a rise is news.
    pub media_errors: u64,
    /// Percentage of the rated endurance used (may exceed 100): NVMe "percentage used", an ATA or SCSI SSD's
    /// "percentage used endurance indicator".
    pub percentage_used: Option<u8>,
}

impl Hardware {
    fn worn_out(&self) -> bool {
        self.percentage_used.is_some_and(|p| p >= 100)
    }

    /// The worst state this reading calls for on its own, given `new_media_errors` since the baseline.
    fn state(&self, new_media_errors: u64) -> State {
        let worn_out = self.worn_out();
        let warned = self.warnings.iter().map(|w| w.state(worn_out)).max();
        let sign = (worn_out || new_media_errors > 0).then_some(State::Degraded);
        warned.max(sign).unwrap_or(State::Healthy)
    }

    /// One line naming the facts, e.g. "NVMe critical warning: available spare below threshold; media errors 12
    /// (3 new); 103% of endurance used".
    pub fn describe(&self, new_media_errors: u64) -> String {
        let mut parts = Vec::new();
        let (name, warning_word) = match self.source {
            HardwareSource::Nvme => ("NVMe", "critical warning"),
            HardwareSource::Ata => ("ATA SMART", "warning"),
            HardwareSource::Scsi => ("SCSI", "informational exception"),
        };
        if !self.warnings.is_empty() {
            let list: Vec<String> = self.warnings.iter().map(|w| w.describe()).collect();
            parts.push(format!("{warning_word}: {}", list.join(", ")));
        }
        if self.media_errors > 0 {
            let errors = match self.source {
                HardwareSource::Nvme => "media errors",
                HardwareSource::Ata => "bad sectors",
                HardwareSource::Scsi => "uncorrected errors",
            };
            let mut part = format!("{errors} {}", self.media_errors);
            if new_media_errors > 0 {
                part.push_str(&format!(" ({new_media_errors} new)"));
            }
            parts.push(part);
        }
        if let Some(used) = self.percentage_used.filter(|p| *p >= 100) {
            parts.push(format!("{used}% of endurance used"));
        }
        format!("{name} {}", parts.join("; "))
    }
}

/// One observation of a disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// The filesystem's cumulative error counter (ext4 `/sys/fs/ext4/<dev>/errors_count`); `None` when the
    /// filesystem keeps none.
    pub fs_errors: Option<u64>,
    /// The filesystem refuses I/O because of an error (xfs shut down), or its error policy remounted it read-only.
    pub fs_shut_down: bool,
    /// The agent's probe failed with an I/O error: its message.
    pub probe_error: Option<String>,
    /// The device is not there.
    pub gone: bool,
    pub hardware: Option<Hardware>,
}

/// Thresholds, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// New filesystem errors (or failed probes in a row) that make a disk `Failed`.
    pub failed_after_errors: u64,
    /// How long a device may be gone before it is `Failed` (a disk detached and back within it is a false alarm).
    pub gone_grace: Duration,
    /// How long a `Degraded` disk must show no new sign to be `Healthy` again.
    pub healthy_after: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            failed_after_errors: 3,
            gone_grace: Duration::from_secs(120),
            healthy_after: Duration::from_secs(600),
        }
    }
}

/// What is remembered about a disk between observations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub state: State,
    pub cause: Cause,
    pub message: String,
    /// When the state was entered.
    pub since: SystemTime,
    /// The filesystem error counter when first seen: only a rise counts.
    pub baseline_errors: Option<u64>,
    /// The device's media error count when first seen: only a rise counts.
    #[serde(default)]
    pub baseline_media_errors: Option<u64>,
    /// New errors seen (counter rise plus failed probes) since the disk was last `Healthy`.
    pub new_errors: u64,
    /// When the last sign was seen.
    pub last_sign: Option<SystemTime>,
    /// When the device was first seen gone, while it is.
    pub gone_since: Option<SystemTime>,
}

impl Record {
    fn healthy(now: SystemTime, baseline_errors: Option<u64>) -> Record {
        Record {
            state: State::Healthy,
            cause: Cause::NoErrors,
            message: "no errors seen".to_string(),
            since: now,
            baseline_errors,
            baseline_media_errors: None,
            new_errors: 0,
            last_sign: None,
            gone_since: None,
        }
    }
}

/// The disk's state after one observation.
pub fn judge(
    previous: Option<&Record>,
    signals: &Signals,
    policy: &Policy,
    now: SystemTime,
) -> Record {
    let mut next = previous
        .cloned()
        .unwrap_or_else(|| Record::healthy(now, signals.fs_errors));
    if signals.gone {
        let since = *next.gone_since.get_or_insert(now);
        let gone_for = now.duration_since(since).unwrap_or_default();
        if gone_for >= policy.gone_grace {
            let message = format!("the device has been gone for {}s", gone_for.as_secs());
            return enter(next, State::Failed, Cause::DeviceGone, message, now);
        }
        let message = format!(
            "the device is gone; Failed if it is not back within {}s",
            policy.gone_grace.as_secs()
        );
        let state = State::Degraded.max(next.state);
        return enter(next, state, Cause::DeviceGone, message, now);
    }
    next.gone_since = None;
    let mut signs: Vec<(State, Cause, String)> = Vec::new();
    // A counter lower than the baseline is a new filesystem (reformatted): it becomes the baseline.
    if let Some(count) = signals.fs_errors {
        let base = *next.baseline_errors.get_or_insert(count);
        if count < base {
            next.baseline_errors = Some(count);
        } else if count > base {
            next.new_errors += count - base;
            next.baseline_errors = Some(count);
            let message = format!(
                "the filesystem recorded {} new error(s) ({count} in all)",
                count - base
            );
            signs.push((State::Degraded, Cause::FilesystemErrors, message));
        }
    }
    if let Some(error) = &signals.probe_error {
        next.new_errors += 1;
        signs.push((
            State::Degraded,
            Cause::ProbeIoError,
            format!("the read probe failed: {error}"),
        ));
    }
    if signals.fs_shut_down {
        let message =
            "the filesystem shut itself down or was remounted read-only after an error".to_string();
        signs.push((State::Failed, Cause::FilesystemShutDown, message));
    }
    if let Some(hw) = &signals.hardware
        && let Some(sign) = hardware_sign(&mut next, hw)
    {
        signs.push(sign);
    }
    if next.new_errors >= policy.failed_after_errors
        && let Some((_, cause, message)) = signs.first().cloned()
    {
        let message = format!("{message}; {} new errors in all", next.new_errors);
        signs.push((State::Failed, cause, message));
    }
    if let Some((state, cause, message)) = signs.into_iter().max_by_key(|(state, ..)| *state) {
        next.last_sign = Some(now);
        let state = state.max(next.state);
        return enter(next, state, cause, message, now);
    }
    // No sign now.
    let quiet_for = next
        .last_sign
        .map(|at| now.duration_since(at).unwrap_or_default())
        .unwrap_or(Duration::MAX);
    match next.state {
        State::Degraded if quiet_for >= policy.healthy_after => healthy_again(&next, now),
        // NB: a disk that was only gone, and is back within the grace, is healthy at once: a false alarm.
        State::Degraded if next.cause == Cause::DeviceGone && next.new_errors == 0 => {
            healthy_again(&next, now)
        }
        _ => next,
    }
}

/// `record` after an operator said its disk is healthy again (`localpv disks clear-health`): `Healthy` from `now`,
/// keeping what it learnt of the counters, so only a new sign degrades it again.
pub fn cleared(record: &Record, now: SystemTime) -> Record {
    healthy_again(record, now)
}

/// A healthy record that keeps what `record` learnt of the counters.
fn healthy_again(record: &Record, now: SystemTime) -> Record {
    Record {
        baseline_media_errors: record.baseline_media_errors,
        ..Record::healthy(now, record.baseline_errors)
    }
}

/// The sign the device's health log gives, if any. The media error count seen first is the baseline, as for the
/// filesystem's counter: a drive that logged errors years ago is not news. A rise degrades the disk but does not
/// count towards `failed_after_errors`: the drive's own verdict (a critical warning) is what fails it.
fn hardware_sign(record: &mut Record, hw: &Hardware) -> Option<(State, Cause, String)> {
    let base = *record.baseline_media_errors.get_or_insert(hw.media_errors);
    let new_media = hw.media_errors.saturating_sub(base);
    record.baseline_media_errors = Some(hw.media_errors);
    let state = hw.state(new_media);
    (state != State::Healthy).then(|| (state, Cause::HardwareWarning, hw.describe(new_media)))
}

/// `record` in `state` for `cause`, keeping `since` when neither changed.
fn enter(
    mut record: Record,
    state: State,
    cause: Cause,
    message: String,
    now: SystemTime,
) -> Record {
    // NB: a Failed disk keeps the cause that failed it and the time it failed.
    if record.state == State::Failed && state == State::Failed && record.cause != cause {
        return record;
    }
    if record.state != state || record.cause != cause {
        record.since = now;
    }
    record.state = state;
    record.cause = cause;
    record.message = message;
    record
}

#[cfg(test)]
mod tests;
