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
#[case::critical_hardware(
    Signals { hardware: Some(Hardware { critical: true, ..Hardware::default() }), ..Signals::default() },
    Cause::HardwareWarning
)]
fn a_shut_down_filesystem_or_a_critical_warning_fails_at_once(
    #[case] signals: Signals,
    #[case] cause: Cause,
) {
    assert_eq!(
        history(&[(0, Signals::default()), (5, signals)])[1],
        (State::Failed, cause)
    );
}

#[test]
fn media_errors_without_a_critical_warning_degrade() {
    let worn = Signals {
        hardware: Some(Hardware {
            media_errors: 2,
            ..Hardware::default()
        }),
        ..Signals::default()
    };
    assert_eq!(
        history(&[(0, worn)])[0],
        (State::Degraded, Cause::HardwareWarning)
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
