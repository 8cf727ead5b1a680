use std::time::{Duration, SystemTime};

use rstest::rstest;

use super::*;
use crate::health::{Cause, Policy, Signals, State, judge};

/// The bytes of a hand-written fixture (`tests/fixtures/scsi/`): hex pairs, `#` comments.
fn hex(text: &str) -> Vec<u8> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .flat_map(str::split_whitespace)
        .map(|b| u8::from_str_radix(b, 16).expect("a hex byte"))
        .collect()
}

const IE_NONE: &str = include_str!("../../../tests/fixtures/scsi/ie-no-exception.hex");
const IE_FAILING: &str = include_str!("../../../tests/fixtures/scsi/ie-failure-predicted.hex");
const IE_HOT: &str = include_str!("../../../tests/fixtures/scsi/ie-temperature.hex");
const IE_TEST: &str = include_str!("../../../tests/fixtures/scsi/ie-test-trigger.hex");
const READ: &str = include_str!("../../../tests/fixtures/scsi/read-errors.hex");
const WRITE: &str = include_str!("../../../tests/fixtures/scsi/write-errors.hex");
const WORN: &str = include_str!("../../../tests/fixtures/scsi/ssd-media-worn.hex");
const READ_CUT: &str = include_str!("../../../tests/fixtures/scsi/read-errors-cut.hex");

fn exception(text: &str) -> InformationalException {
    let bytes = hex(text);
    let page = parse_log_page(&bytes, INFORMATIONAL_EXCEPTIONS).expect("page 2Fh");
    informational_exception(&page).expect("the general parameter")
}

fn uncorrected(text: &str, code: u8) -> Option<u64> {
    let bytes = hex(text);
    uncorrected_errors(&parse_log_page(&bytes, code).expect("the page"))
}

#[test]
fn the_informational_exceptions_page_gives_the_exception_and_the_temperature() {
    assert_eq!(
        exception(IE_NONE),
        InformationalException {
            asc: 0,
            ascq: 0,
            temperature_celsius: Some(38)
        }
    );
    assert_eq!(
        (exception(IE_FAILING).asc, exception(IE_FAILING).ascq),
        (0x5D, 0x10)
    );
    assert_eq!(exception(IE_TEST).temperature_celsius, None, "FFh: none");
}

#[rstest]
#[case::no_exception(IE_NONE, None)]
#[case::failure_predicted(IE_FAILING, Some(DriveWarning::Exception { asc: 0x5D, ascq: 0x10 }))]
#[case::too_hot(IE_HOT, Some(DriveWarning::Temperature))]
#[case::a_test_of_the_prediction(IE_TEST, None)]
fn each_exception_raises_its_warning(#[case] page: &str, #[case] want: Option<DriveWarning>) {
    assert_eq!(exception(page).warning(), want);
}

#[test]
fn the_error_counter_pages_give_the_uncorrected_errors() {
    assert_eq!(uncorrected(READ, READ_ERRORS), Some(2));
    assert_eq!(uncorrected(WRITE, WRITE_ERRORS), Some(0));
    let bytes = hex(READ);
    let page = parse_log_page(&bytes, READ_ERRORS).expect("page 03h");
    let codes: Vec<u16> = page.parameters().map(|p| p.code).collect();
    assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6]);
    let processed = page.parameters().find(|p| p.code == 5).expect("0005h");
    assert_eq!(processed.value.len(), 8);
}

#[test]
fn a_page_cut_short_gives_what_came_back_and_no_counter_it_lost() {
    let bytes = hex(READ_CUT);
    let page = parse_log_page(&bytes, READ_ERRORS).expect("page 03h");
    assert_eq!(
        page.parameters().count(),
        2,
        "the cut parameter ends the list"
    );
    assert_eq!(uncorrected_errors(&page), None);
}

#[test]
fn another_page_or_a_short_answer_is_refused() {
    let read = hex(READ);
    assert_eq!(
        parse_log_page(&read, INFORMATIONAL_EXCEPTIONS),
        Err(ScsiParseError::WrongPage {
            want: 0x2F,
            got: 0x03
        })
    );
    assert_eq!(
        parse_log_page(&read[..3], READ_ERRORS),
        Err(ScsiParseError::Short { len: 3 })
    );
}

#[test]
fn nothing_answered_is_no_reading() {
    assert_eq!(scsi_hardware(ScsiPages::default()), None);
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

/// A disk judged on a first reading `first`, then `then`; the second state.
fn judged(first: Hardware, then: Hardware) -> (State, Cause, String) {
    let policy = Policy::default();
    let signals = |h: Hardware| Signals {
        hardware: Some(h),
        ..Signals::default()
    };
    let before = judge(None, &signals(first), &policy, at(0));
    let after = judge(Some(&before), &signals(then), &policy, at(10));
    (after.state, after.cause, after.message)
}

fn reading(ie: &str, read: &str) -> Hardware {
    scsi_hardware(ScsiPages {
        exception: Some(exception(ie)),
        read_uncorrected: uncorrected(read, READ_ERRORS),
        write_uncorrected: uncorrected(WRITE, WRITE_ERRORS),
        endurance_used: None,
    })
    .expect("a reading")
}

#[test]
fn a_sas_drive_predicting_its_failure_fails_the_disk_and_says_why() {
    let (state, cause, message) = judged(reading(IE_NONE, READ), reading(IE_FAILING, READ));
    assert_eq!((state, cause), (State::Failed, Cause::HardwareWarning));
    assert_eq!(
        message,
        "SCSI informational exception: failure predicted (ASC 5Dh ASCQ 10h); uncorrected errors 2"
    );
}

#[test]
fn uncorrected_errors_seen_first_are_the_baseline_and_a_rise_degrades() {
    let first = reading(IE_NONE, READ);
    assert_eq!(first.media_errors, 2);
    assert_eq!(judged(first.clone(), first.clone()).0, State::Healthy);
    let more = Hardware {
        media_errors: 5,
        ..first.clone()
    };
    let (state, cause, message) = judged(first, more);
    assert_eq!((state, cause), (State::Degraded, Cause::HardwareWarning));
    assert!(
        message.contains("uncorrected errors 5 (3 new)"),
        "{message}"
    );
}

#[test]
fn a_temperature_exception_degrades_and_another_exception_warns() {
    let healthy = reading(IE_NONE, READ);
    assert_eq!(
        judged(healthy.clone(), reading(IE_HOT, READ)).0,
        State::Degraded
    );
    let other = Hardware {
        warnings: vec![DriveWarning::Exception {
            asc: 0x0B,
            ascq: 0x02,
        }],
        ..healthy.clone()
    };
    let (state, _, message) = judged(healthy, other);
    assert_eq!(state, State::Degraded);
    assert!(message.contains("ASC 0Bh ASCQ 02h"), "{message}");
}

#[test]
fn an_ssd_past_its_rated_endurance_is_degraded_not_failed() {
    let bytes = hex(WORN);
    let used = endurance_used(&parse_log_page(&bytes, SOLID_STATE_MEDIA).expect("page 11h"));
    assert_eq!(used, Some(102));
    let healthy = reading(IE_NONE, READ);
    let worn = Hardware {
        percentage_used: used,
        ..healthy.clone()
    };
    let (state, cause, message) = judged(healthy, worn);
    assert_eq!((state, cause), (State::Degraded, Cause::HardwareWarning));
    assert!(message.ends_with("102% of endurance used"), "{message}");
    let only_media = scsi_hardware(ScsiPages {
        endurance_used: used,
        ..ScsiPages::default()
    });
    assert_eq!(only_media.map(|h| h.percentage_used), Some(Some(102)));
}
