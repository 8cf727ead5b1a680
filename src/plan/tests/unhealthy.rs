//! A disk that shows signs of failing (issue 37, point 2) is never handed to a new claim and never wiped.

use super::*;
use crate::disk::DiskHealth;
use crate::health::{Cause, State};

fn sick(world: &mut World, entry: &str, state: State) {
    world.found.unhealthy.push(DiskHealth {
        host_path: PathBuf::from("/mnt/disks").join(entry),
        state,
        cause: Cause::FilesystemErrors,
        message: "the filesystem recorded 1 new error(s)".into(),
    });
}

#[rstest]
#[case::degraded(State::Degraded, HoldReason::DiskDegraded)]
#[case::failed(State::Failed, HoldReason::DiskFailed)]
fn an_unhealthy_disk_without_a_pv_is_not_published(#[case] state: State, #[case] hold: HoldReason) {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    sick(&mut world, "vol1", state);
    let plan = world.plan();
    assert!(plan.writes().next().is_none(), "{:?}", summary(&plan));
    assert_eq!(plan.unpublished[0].reason, hold);
}

#[test]
fn a_dirty_disk_that_failed_is_not_wiped() {
    let mut world = World::new(vec![disk("vol1")], vec![]);
    world.ledger.set("fs-uuid:uuid-vol1", DiskState::Dirty);
    sick(&mut world, "vol1", State::Failed);
    assert!(!summary(&world.plan()).iter().any(|s| s.starts_with("wipe")));
}

#[test]
fn an_available_pv_on_an_unhealthy_disk_is_withdrawn_and_comes_back_when_healthy() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().build()]);
    sick(&mut world, "vol1", State::Degraded);
    let plans = world.settle();
    assert_eq!(
        summary(&plans[0]),
        ["delete uid-vol1", "event uid-vol1 DiskDegraded"]
    );
    assert!(world.existing.is_empty(), "withdrawn");
    world.found.unhealthy.clear();
    world.settle();
    assert_eq!(world.existing.len(), 1, "published again once healthy");
}

#[test]
fn a_released_pv_on_a_failed_disk_is_not_wiped_and_says_so_once() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().released().build()]);
    sick(&mut world, "vol1", State::Failed);
    let plan = world.plan();
    assert!(
        !summary(&plan).iter().any(|s| s.starts_with("wipe")),
        "{:?}",
        summary(&plan)
    );
    assert!(summary(&plan).contains(&"event uid-vol1 DiskFailed".to_string()));
    world.apply(&plan);
    assert!(
        !summary(&world.plan())
            .iter()
            .any(|s| s.starts_with("event")),
        "said once"
    );
}

#[test]
fn a_bound_pv_on_a_degraded_disk_gets_one_event_and_nothing_else() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().bound().build()]);
    sick(&mut world, "vol1", State::Degraded);
    let plan = world.plan();
    let said: Vec<String> = summary(&plan)
        .into_iter()
        .filter(|s| !s.starts_with("ledger"))
        .collect();
    assert_eq!(said, ["event uid-vol1 DiskDegraded"]);
}

/// A false alarm (a transient error gone quiet, a device back within the grace): the PV and its claim were told, and
/// are told it is over, once (a Released PV's claimRef still names its claim); nothing else is planned for the PV.
#[rstest]
#[case::bound(Pv::test().bound(), true)]
#[case::released_retained(Pv::test().released().policy("Retain"), true)]
fn a_pv_told_of_a_degraded_disk_is_told_once_when_it_is_healthy_again(
    #[case] pv: Pv,
    #[case] claimed: bool,
) {
    let mut world = World::new(vec![disk("vol1")], vec![pv.build()]);
    sick(&mut world, "vol1", State::Degraded);
    world.settle();
    world.found.unhealthy.clear();
    let plan = world.plan();
    let said: Vec<String> = summary(&plan)
        .into_iter()
        .filter(|s| !s.starts_with("ledger"))
        .collect();
    assert!(
        said.contains(&"event uid-vol1 DiskHealthy".to_string()),
        "{said:?}"
    );
    assert!(
        !said
            .iter()
            .any(|s| s.starts_with("delete") || s.starts_with("wipe")),
        "{said:?}"
    );
    let claims = plan
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Event(e) if e.claim.is_some()))
        .count();
    assert_eq!(claims, usize::from(claimed), "{said:?}");
    world.apply(&plan);
    let again = summary(&world.plan());
    assert!(
        !again.iter().any(|s| s.contains("DiskHealthy")),
        "said once: {again:?}"
    );
}

#[test]
fn a_pv_on_a_disk_that_was_always_healthy_is_never_told_it_is_healthy() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().bound().build()]);
    let plans = world.settle();
    assert!(
        !plans
            .iter()
            .flat_map(summary)
            .any(|s| s.contains("DiskHealthy")),
        "{plans:?}"
    );
}

#[test]
fn the_bound_claim_is_told_too() {
    let mut world = World::new(vec![disk("vol1")], vec![Pv::test().bound().build()]);
    sick(&mut world, "vol1", State::Failed);
    let plan = world.plan();
    let claims: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) => e.claim.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(claims.len(), 1, "{:?}", summary(&plan));
    assert_eq!(claims[0].uid.as_deref(), Some("claim-1"));
}

#[test]
fn a_cordoned_disk_is_held_its_available_pv_withdrawn_and_published_again_once_uncordoned() {
    let mut world = World::new(
        vec![disk("vol1"), disk("vol2")],
        vec![
            Pv::test().build(),
            Pv::test().for_disk(&disk("vol2")).bound().build(),
        ],
    );
    world.found.cordoned = vec![
        PathBuf::from("/mnt/disks/vol1"),
        PathBuf::from("/mnt/disks/vol2"),
    ];
    let plans = world.settle();
    let first: Vec<String> = summary(&plans[0])
        .into_iter()
        .filter(|s| !s.starts_with("ledger"))
        .collect();
    assert_eq!(first, ["delete uid-vol1", "event uid-vol1 DiskCordoned"]);
    assert_eq!(world.existing.len(), 1, "the Bound PV goes on");
    let held: Vec<_> = plans
        .last()
        .expect("a plan")
        .unpublished
        .iter()
        .map(|u| u.reason)
        .collect();
    assert_eq!(held, [HoldReason::Cordoned]);
    world.found.cordoned.clear();
    world.settle();
    assert_eq!(world.existing.len(), 2, "published again once uncordoned");
}
