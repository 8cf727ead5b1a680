use std::time::{Duration, SystemTime};

use rstest::rstest;

use super::*;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn errors(count: u64) -> Signals {
    Signals {
        fs_errors: Some(count),
        ..Signals::default()
    }
}

/// Judges a history of (seconds, signals) from nothing; returns every state.
fn history(steps: &[(u64, Signals)]) -> Vec<(State, Cause)> {
    let policy = Policy::default();
    let mut record: Option<Record> = None;
    steps
        .iter()
        .map(|(secs, signals)| {
            let next = judge(record.as_ref(), signals, &policy, at(*secs));
            let out = (next.state, next.cause);
            record = Some(next);
            out
        })
        .collect()
}

#[test]
fn errors_counted_before_the_agent_first_looked_are_the_baseline_not_news() {
    assert_eq!(
        history(&[(0, errors(7)), (10, errors(7))]),
        [
            (State::Healthy, Cause::NoErrors),
            (State::Healthy, Cause::NoErrors)
        ]
    );
}

#[test]
fn the_first_new_error_degrades_and_the_threshold_fails() {
    let states = history(&[
        (0, errors(0)),
        (10, errors(1)),
        (20, errors(2)),
        (30, errors(3)),
    ]);
    assert_eq!(states[1], (State::Degraded, Cause::FilesystemErrors));
    assert_eq!(states[2], (State::Degraded, Cause::FilesystemErrors));
    assert_eq!(states[3], (State::Failed, Cause::FilesystemErrors));
}

#[test]
fn one_transient_error_does_not_flap_and_heals_after_a_quiet_period() {
    let states = history(&[
        (0, errors(0)),
        (10, errors(1)),
        (20, errors(1)),
        (300, errors(1)),
        (611, errors(1)),
    ]);
    assert_eq!(
        states,
        [
            (State::Healthy, Cause::NoErrors),
            (State::Degraded, Cause::FilesystemErrors),
            (State::Degraded, Cause::FilesystemErrors),
            (State::Degraded, Cause::FilesystemErrors),
            (State::Healthy, Cause::NoErrors),
        ]
    );
}

#[rstest]
#[case::shut_down(Signals { fs_shut_down: true, ..Signals::default() }, Cause::FilesystemShutDown)]
#[case::media_read_only(hw(&[DriveWarning::ReadOnly], 0, None), Cause::HardwareWarning)]
fn a_shut_down_filesystem_or_a_critical_warning_fails_at_once(
    #[case] signals: Signals,
    #[case] cause: Cause,
) {
    assert_eq!(
        history(&[(0, Signals::default()), (5, signals)])[1],
        (State::Failed, cause)
    );
}

fn hw(warnings: &[DriveWarning], media_errors: u64, percentage_used: Option<u8>) -> Signals {
    Signals {
        hardware: Some(Hardware {
            source: HardwareSource::Nvme,
            warnings: warnings.to_vec(),
            media_errors,
            percentage_used,
        }),
        ..Signals::default()
    }
}

/// What one hardware reading alone makes of a disk seen healthy before.
#[rstest]
#[case::nothing(hw(&[], 0, Some(3)), State::Healthy)]
#[case::spare_low(hw(&[DriveWarning::SpareLow], 0, Some(40)), State::Degraded)]
#[case::too_hot(hw(&[DriveWarning::Temperature], 0, None), State::Degraded)]
#[case::endurance_used_up(hw(&[], 0, Some(103)), State::Degraded)]
#[case::reliability_degraded(hw(&[DriveWarning::ReliabilityDegraded], 0, Some(20)), State::Failed)]
#[case::reliability_flag_of_a_worn_drive(hw(&[DriveWarning::ReliabilityDegraded], 0, Some(100)), State::Degraded)]
#[case::read_only(hw(&[DriveWarning::ReadOnly], 0, Some(100)), State::Failed)]
#[case::backup_failed(hw(&[DriveWarning::BackupFailed], 0, None), State::Failed)]
#[case::pmr_read_only(hw(&[DriveWarning::PersistentMemoryReadOnly], 0, None), State::Failed)]
#[case::smart_failing(hw(&[DriveWarning::SmartFailing], 0, None), State::Failed)]
#[case::prefail_attribute(hw(&[DriveWarning::AttributeAtThreshold { id: 5, prefail: true }], 0, None), State::Failed)]
#[case::old_age_attribute(hw(&[DriveWarning::AttributeAtThreshold { id: 202, prefail: false }], 0, None), State::Degraded)]
#[case::unreadable_sectors(hw(&[DriveWarning::UnreadableSectors { count: 8 }], 0, None), State::Degraded)]
fn a_hardware_reading_alone(#[case] signals: Signals, #[case] state: State) {
    let expected = match state {
        State::Healthy => (State::Healthy, Cause::NoErrors),
        state => (state, Cause::HardwareWarning),
    };
    assert_eq!(history(&[(0, hw(&[], 0, None)), (5, signals)])[1], expected);
}

#[test]
fn media_errors_seen_first_are_the_baseline_and_only_a_rise_degrades() {
    let states = history(&[
        (0, hw(&[], 12, None)),
        (10, hw(&[], 12, None)),
        (20, hw(&[], 15, None)),
        (30, hw(&[], 15, None)),
        (630, hw(&[], 15, None)),
    ]);
    assert_eq!(
        states,
        [
            (State::Healthy, Cause::NoErrors),
            (State::Healthy, Cause::NoErrors),
            (State::Degraded, Cause::HardwareWarning),
            (State::Degraded, Cause::HardwareWarning),
            (State::Healthy, Cause::NoErrors),
        ],
        "a rise is news once; the disk heals after a quiet period like a filesystem error"
    );
}

#[test]
fn a_lasting_hardware_warning_keeps_the_disk_degraded() {
    let low = hw(&[DriveWarning::SpareLow], 0, Some(90));
    let states = history(&[(0, low.clone()), (700, low.clone()), (1_400, low)]);
    assert!(
        states
            .iter()
            .all(|s| *s == (State::Degraded, Cause::HardwareWarning)),
        "{states:?}"
    );
}

#[test]
fn a_temperature_warning_heals_once_the_device_cools() {
    let states = history(&[
        (0, hw(&[DriveWarning::Temperature], 0, None)),
        (300, hw(&[], 0, None)),
        (601, hw(&[], 0, None)),
    ]);
    assert_eq!(states[1], (State::Degraded, Cause::HardwareWarning));
    assert_eq!(states[2], (State::Healthy, Cause::NoErrors));
}

#[test]
fn media_errors_do_not_count_towards_failing_the_disk() {
    let states = history(&[
        (0, hw(&[], 0, None)),
        (10, hw(&[], 100, None)),
        (20, hw(&[], 200, None)),
        (30, hw(&[], 300, None)),
    ]);
    assert_eq!(states[3], (State::Degraded, Cause::HardwareWarning));
}

#[test]
fn the_message_names_the_hardware_facts() {
    let policy = Policy::default();
    let first = judge(None, &hw(&[], 9, Some(50)), &policy, at(0));
    let signals = hw(&[DriveWarning::SpareLow], 12, Some(103));
    let record = judge(Some(&first), &signals, &policy, at(10));
    assert_eq!(
        record.message,
        "NVMe critical warning: available spare below threshold; media errors 12 (3 new); 103% of endurance used"
    );
}

#[test]
fn failed_probes_in_a_row_fail_the_disk() {
    let eio = Signals {
        probe_error: Some("Input/output error (os error 5)".into()),
        ..Signals::default()
    };
    let states = history(&[(0, eio.clone()), (10, eio.clone()), (20, eio)]);
    assert_eq!(states[0], (State::Degraded, Cause::ProbeIoError));
    assert_eq!(states[2], (State::Failed, Cause::ProbeIoError));
}

#[test]
fn a_device_gone_within_the_grace_and_back_is_a_false_alarm() {
    let gone = Signals {
        gone: true,
        ..Signals::default()
    };
    let states = history(&[
        (0, Signals::default()),
        (10, gone.clone()),
        (60, gone),
        (70, Signals::default()),
    ]);
    assert_eq!(states[1], (State::Degraded, Cause::DeviceGone));
    assert_eq!(states[2], (State::Degraded, Cause::DeviceGone));
    assert_eq!(states[3], (State::Healthy, Cause::NoErrors));
}

#[test]
fn a_device_gone_past_the_grace_fails_and_stays_failed() {
    let gone = Signals {
        gone: true,
        ..Signals::default()
    };
    let states = history(&[
        (0, gone.clone()),
        (130, gone),
        (140, Signals::default()),
        (5_000, Signals::default()),
    ]);
    assert_eq!(states[1], (State::Failed, Cause::DeviceGone));
    assert_eq!(
        states[2],
        (State::Failed, Cause::DeviceGone),
        "a Failed disk never heals by itself"
    );
    assert_eq!(states[3], (State::Failed, Cause::DeviceGone));
}

#[test]
fn a_failed_disk_keeps_the_cause_and_time_it_failed() {
    let policy = Policy::default();
    let shut = Signals {
        fs_shut_down: true,
        ..Signals::default()
    };
    let failed = judge(None, &shut, &policy, at(0));
    let later = judge(Some(&failed), &errors(9), &policy, at(50));
    assert_eq!(
        (later.state, later.cause, later.since),
        (State::Failed, Cause::FilesystemShutDown, at(0))
    );
}

#[test]
fn a_reformatted_filesystem_resets_the_baseline() {
    let states = history(&[(0, errors(5)), (10, errors(0)), (20, errors(0))]);
    assert!(
        states
            .iter()
            .all(|s| *s == (State::Healthy, Cause::NoErrors)),
        "{states:?}"
    );
}
