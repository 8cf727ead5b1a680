use std::time::Duration;

use rstest::rstest;

use super::*;
use crate::plan::DiskState;

#[rstest]
#[case::wide_complete(true, false, true)]
#[case::narrow_complete(true, true, false)]
#[case::wide_incomplete(false, false, false)]
#[case::narrow_incomplete(false, true, false)]
fn only_a_complete_wide_index_stands_in_before_the_plan(
    #[case] complete: bool,
    #[case] narrow: bool,
    #[case] want: bool,
) {
    assert_eq!(stands_in(complete, narrow), want);
}

#[rstest]
#[case::asked_for_none(false, false, false, false, false, Fill::Planned)]
#[case::had_them(true, true, true, false, false, Fill::Planned)]
#[case::narrow_complete(true, false, true, true, false, Fill::CheckPolicy)]
#[case::narrow_complete_and_overdue(true, false, true, true, true, Fill::CheckPolicy)]
#[case::overdue(true, false, false, false, true, Fill::ListEvery)]
#[case::narrow_incomplete_overdue(true, false, false, true, true, Fill::ListEvery)]
#[case::incomplete(true, false, false, false, false, Fill::Wait)]
#[case::narrow_incomplete(true, false, false, true, false, Fill::Wait)]
fn a_plan_that_wants_every_pv_gets_them_by_the_cheapest_safe_way(
    #[case] needs: bool,
    #[case] had: bool,
    #[case] complete: bool,
    #[case] narrow: bool,
    #[case] overdue: bool,
    #[case] want: Fill,
) {
    assert_eq!(fill(needs, had, complete, narrow, overdue), want);
}

fn state(key: &str) -> Action {
    Action::SetDiskState {
        key: key.into(),
        state: DiskState::Published,
    }
}

fn forget(uid: &str) -> Action {
    Action::ForgetOwner { uid: uid.into() }
}

fn create(name: &str) -> Action {
    let mut pv = k8s_openapi::api::core::v1::PersistentVolume::default();
    pv.metadata.name = Some(name.into());
    Action::CreatePv(Box::new(pv))
}

#[test]
fn ledger_states_and_creates_run_in_batches_between_the_other_actions() {
    let got = runs(vec![
        forget("u1"),
        state("a"),
        create("a"),
        state("b"),
        create("b"),
        forget("u2"),
        create("c"),
    ]);
    assert_eq!(
        got,
        vec![
            Run::One(forget("u1")),
            Run::Batch(vec![state("a"), create("a"), state("b"), create("b")]),
            Run::One(forget("u2")),
            Run::Batch(vec![create("c")]),
        ]
    );
    assert!(runs(vec![]).is_empty());
}

#[test]
fn after_a_halt_only_events_run() {
    assert!(!Run::Batch(vec![state("a")]).runs_after_halt());
    assert!(!Run::One(forget("u")).runs_after_halt());
}

#[rstest]
#[case::api_ok(Step::api(true), Step::Done)]
#[case::api_failed(Step::api(false), Step::Retry)]
#[case::ledger_ok(Step::ledger(true), Step::Done)]
#[case::ledger_failed(Step::ledger(false), Step::Halt)]
#[case::batch_done(Step::batch(true, true), Step::Done)]
#[case::batch_create_failed(Step::batch(false, true), Step::Retry)]
#[case::batch_not_recorded(Step::batch(true, false), Step::Halt)]
#[case::batch_both(Step::batch(false, false), Step::Halt)]
fn a_failed_api_write_is_retried_and_a_failed_ledger_write_halts(
    #[case] got: Step,
    #[case] want: Step,
) {
    assert_eq!(got, want);
}

#[rstest]
#[case::done(&[Step::Done], RunSoFar::default())]
#[case::retry(&[Step::Retry, Step::Done], RunSoFar { retry: true, halted: false })]
#[case::halt(&[Step::Done, Step::Halt, Step::Done], RunSoFar { retry: true, halted: true })]
fn a_halt_is_retried_and_stops_the_rest(#[case] steps: &[Step], #[case] want: RunSoFar) {
    let mut progress = RunSoFar::default();
    for step in steps {
        progress.record(*step);
    }
    assert_eq!(progress, want);
}

#[test]
fn once_halted_only_events_run() {
    let event = Run::One(Action::Event(crate::plan::PvEvent {
        pv: crate::plan::PvRef {
            name: "pv".into(),
            uid: "u".into(),
            resource_version: "1".into(),
        },
        type_: crate::plan::EventType::Normal,
        reason: crate::plan::Reason::WipeCompleted,
        message: String::new(),
        claim: None,
    }));
    let mut progress = RunSoFar::default();
    assert!(progress.runs(&Run::One(forget("u"))));
    progress.record(Step::Halt);
    assert!(!progress.runs(&Run::One(forget("u"))));
    assert!(!progress.runs(&Run::Batch(vec![state("a")])));
    assert!(progress.runs(&event));
}

#[rstest]
#[case::none(false, false, Tagging { again: false, unconfirmed: false })]
#[case::first(true, false, Tagging { again: true, unconfirmed: false })]
#[case::twice(true, true, Tagging { again: false, unconfirmed: true })]
#[case::after(false, true, Tagging { again: false, unconfirmed: false })]
fn a_volume_id_stored_twice_in_a_row_did_not_read_back(
    #[case] tagged: bool,
    #[case] before: bool,
    #[case] want: Tagging,
) {
    assert_eq!(tagging(tagged, before), want);
}

#[rstest]
#[case::clean(Ended::default(), true)]
#[case::retry(Ended { retry: true, ..Ended::default() }, false)]
#[case::held_back(Ended { held_back: true, ..Ended::default() }, false)]
#[case::tagged(Ended { tagging: Some(tagging(true, false)), ..Ended::default() }, false)]
#[case::unconfirmed(Ended { tagging: Some(tagging(true, true)), ..Ended::default() }, false)]
fn only_a_clean_pass_may_take_the_startup_taint_off(#[case] ended: Ended, #[case] want: bool) {
    assert_eq!(untaint_allowed(ended), want);
}

const S: Duration = Duration::from_secs(1);

#[rstest]
#[case::nothing(Ended::default(), Wakes::default(), None)]
#[case::nearest(Ended::default(), Wakes { plan: Some(30 * S), health: Some(15 * S), backoff: Some(20 * S), ..Wakes::default() }, Some(15 * S))]
#[case::progress(Ended::default(), Wakes { plan: Some(30 * S), progress: Some(2 * S), ..Wakes::default() }, Some(2 * S))]
#[case::scope(Ended::default(), Wakes { scope: Some(10 * S), ..Wakes::default() }, Some(10 * S))]
#[case::retry_soon(Ended { retry: true, ..Ended::default() }, Wakes { plan: Some(30 * S), ..Wakes::default() }, Some(FIRST_BACKOFF))]
#[case::untaint_again(Ended::default(), Wakes { untaint_again: true, ..Wakes::default() }, Some(FIRST_BACKOFF))]
#[case::unconfirmed_backs_off(Ended { tagging: Some(tagging(true, true)), ..Ended::default() }, Wakes::default(), Some(FIRST_BACKOFF))]
#[case::tagged_at_once(Ended { tagging: Some(tagging(true, false)), retry: true, ..Ended::default() }, Wakes { progress: Some(2 * S), ..Wakes::default() }, Some(Duration::ZERO))]
fn the_next_pass_comes_at_the_nearest_reason(
    #[case] ended: Ended,
    #[case] wakes: Wakes,
    #[case] want: Option<Duration>,
) {
    assert_eq!(next_pass(ended, wakes), want);
}

#[rstest]
#[case::first(1, 10 * S)]
#[case::second(2, 20 * S)]
#[case::seventh(7, 600 * S)]
#[case::capped(8, 600 * S)]
#[case::many(40, 600 * S)]
fn a_failed_wipe_backs_off_doubling_up_to_ten_minutes(
    #[case] failures: u32,
    #[case] want: Duration,
) {
    assert_eq!(wipe_backoff(failures), want);
}

#[test]
fn only_backoffs_still_running_out_bring_the_next_pass() {
    let now = std::time::Instant::now();
    assert_eq!(nearest_backoff([], now), None);
    assert_eq!(
        nearest_backoff([now, now - S], now),
        None,
        "already out: tried by this pass"
    );
    assert_eq!(
        nearest_backoff([now + 30 * S, now, now + 5 * S], now),
        Some(5 * S)
    );
}

fn class(mode: crate::disk::VolumeMode) -> crate::disk::DiscoveryClass {
    crate::disk::DiscoveryClass {
        name: "local".into(),
        host_dir: "/mnt/disks".into(),
        mount_dir: "/mnt/disks".into(),
        mode,
        name_patterns: vec!["*".into()],
    }
}

#[rstest]
#[case::filesystem_only(&[crate::disk::VolumeMode::Filesystem], false, false)]
#[case::raw_found_last_pass(&[crate::disk::VolumeMode::Filesystem], true, true)]
#[case::block_class(&[crate::disk::VolumeMode::Filesystem, crate::disk::VolumeMode::Block], false, true)]
#[case::no_class(&[], false, false)]
fn block_entries_list_the_host_every_pass(
    #[case] modes: &[crate::disk::VolumeMode],
    #[case] raw_found_last: bool,
    #[case] want: bool,
) {
    let classes: Vec<_> = modes.iter().map(|m| class(*m)).collect();
    assert_eq!(lists_host(&classes, raw_found_last), want);
}

#[test]
fn a_block_disk_or_a_device_in_use_is_a_raw_device_found() {
    use crate::disk::{Unusable, UnusableReason, VolumeMode};
    let mut found = crate::disk::Discovery::default();
    found
        .disks
        .push(std::sync::Arc::new(crate::plan::fixtures::disk("fs")));
    assert!(!found_raw(&found), "a filesystem disk");
    let unusable = |reason| Unusable {
        class: "local".into(),
        entry: "sdb".into(),
        host_path: "/mnt/disks/sdb".into(),
        reason,
        message: String::new(),
    };
    found
        .unusable
        .push(unusable(UnusableReason::NotAMountPoint));
    assert!(!found_raw(&found));
    found.unusable.push(unusable(UnusableReason::DeviceInUse));
    assert!(found_raw(&found), "a device mounted elsewhere");
    let mut block = crate::plan::fixtures::disk("blk");
    block.mode = VolumeMode::Block;
    let found = crate::disk::Discovery {
        disks: vec![std::sync::Arc::new(block)],
        ..Default::default()
    };
    assert!(found_raw(&found), "a block disk");
}

#[rstest]
#[case::idle(false, None, true)]
#[case::running(true, None, false)]
#[case::backing_off(false, Some(5), false)]
#[case::backoff_out(false, Some(0), true)]
#[case::running_and_out(true, Some(0), false)]
fn a_wipe_starts_only_when_none_runs_and_its_backoff_ran_out(
    #[case] running: bool,
    #[case] in_secs: Option<u64>,
    #[case] want: bool,
) {
    let now = std::time::Instant::now();
    let not_before = in_secs.map(|s| now + Duration::from_secs(s));
    assert_eq!(wipe_due(running, not_before, now), want);
}
