use super::*;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("a valid time")
}

fn held(holder: Option<&str>, renewed: Option<i64>, duration: Option<i32>) -> LeaseSpec {
    LeaseSpec {
        holder_identity: holder.map(str::to_string),
        renew_time: renewed.map(|s| MicroTime(at(s))),
        lease_duration_seconds: duration,
        lease_transitions: Some(2),
        ..LeaseSpec::default()
    }
}

#[test]
fn each_lease_state_gives_one_step() {
    let follow = |until: i64| LeaseStep::Follow {
        holder: "b".into(),
        until: Some(at(until)),
    };
    // (lease, now) -> step, for replica "a"
    let cases: [(Option<LeaseSpec>, i64, LeaseStep); 9] = [
        (None, 0, LeaseStep::Create),
        (
            Some(held(Some("a"), Some(0), Some(15))),
            5,
            LeaseStep::Renew,
        ),
        (
            Some(held(Some("a"), Some(0), Some(15))),
            500,
            LeaseStep::Renew,
        ),
        (Some(held(Some("b"), Some(0), Some(15))), 5, follow(15)),
        (Some(held(Some("b"), Some(0), Some(15))), 15, follow(15)),
        (
            Some(held(Some("b"), Some(0), Some(15))),
            16,
            LeaseStep::TakeOver,
        ),
        (Some(held(None, Some(0), Some(15))), 1, LeaseStep::TakeOver),
        (
            Some(held(Some(""), Some(0), Some(15))),
            1,
            LeaseStep::TakeOver,
        ),
        (
            Some(held(Some("b"), None, Some(15))),
            1,
            LeaseStep::TakeOver,
        ),
    ];
    for (i, (lease, now, want)) in cases.into_iter().enumerate() {
        assert_eq!(decide(lease.as_ref(), "a", at(now)), want, "case {i}");
    }
    let zero = held(Some("b"), Some(0), Some(0));
    assert_eq!(
        decide(Some(&zero), "a", at(0)),
        LeaseStep::TakeOver,
        "a zero duration holds nothing"
    );
}

#[test]
fn a_take_over_counts_a_transition_and_a_renewal_keeps_the_acquire_time() {
    let theirs = LeaseSpec {
        acquire_time: Some(MicroTime(at(-100))),
        ..held(Some("b"), Some(0), Some(15))
    };
    let taken = next_spec(Some(&theirs), &LeaseStep::TakeOver, "a", 15, at(20));
    assert_eq!(taken.holder_identity.as_deref(), Some("a"));
    assert_eq!(taken.lease_transitions, Some(3));
    assert_eq!(taken.acquire_time, Some(MicroTime(at(20))));
    assert_eq!(taken.renew_time, Some(MicroTime(at(20))));
    let renewed = next_spec(Some(&taken), &LeaseStep::Renew, "a", 15, at(25));
    assert_eq!(renewed.lease_transitions, Some(3));
    assert_eq!(renewed.acquire_time, Some(MicroTime(at(20))));
    assert_eq!(renewed.renew_time, Some(MicroTime(at(25))));
    let created = next_spec(None, &LeaseStep::Create, "a", 0, at(1));
    assert_eq!(created.lease_duration_seconds, Some(1), "at least a second");
    assert_eq!(created.lease_transitions, None);
}

#[test]
fn two_replicas_reading_the_same_lease_never_both_hold_it_without_a_write() {
    // Replicas a and b read one Lease at the same instants: at most one of them sees it as its own without
    // writing; where both would write (both take over an expired Lease), the shell's resourceVersion makes the
    // second write a 409.
    for lease in [
        None,
        Some(held(Some("a"), Some(0), Some(15))),
        Some(held(Some("b"), Some(0), Some(15))),
        Some(held(Some("c"), Some(0), Some(15))),
    ] {
        for now in [0, 10, 15, 16, 100] {
            let a = decide(lease.as_ref(), "a", at(now));
            let b = decide(lease.as_ref(), "b", at(now));
            assert!(
                !(a == LeaseStep::Renew && b == LeaseStep::Renew),
                "{lease:?} at {now}: both renew"
            );
            if a.writes() && b.writes() {
                // NB: a holder renewing past its expiry races a taker; the resourceVersion settles it.
                let race = matches!(
                    (&a, &b),
                    (LeaseStep::Create, LeaseStep::Create)
                        | (LeaseStep::TakeOver, LeaseStep::TakeOver)
                        | (LeaseStep::Renew, LeaseStep::TakeOver)
                        | (LeaseStep::TakeOver, LeaseStep::Renew)
                );
                assert!(
                    race,
                    "{lease:?} at {now}: {a:?} and {b:?} race only for a free Lease"
                );
            }
        }
    }
}
