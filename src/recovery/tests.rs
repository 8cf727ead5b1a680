use super::*;
use crate::cleanup::ClaimRef;

/// A named change to the test scene.
type Change = (&'static str, fn(&mut Scene));

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn volume(name: &str, node: &str, phase: Phase, claim: Option<&str>) -> Arc<Volume> {
    Arc::new(Volume {
        name: name.into(),
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
        node: Some(node.into()),
        phase,
        claim: claim.map(|c| ClaimRef {
            namespace: Some("db".into()),
            name: Some(c.into()),
            uid: Some(format!("uid-{c}")),
        }),
        deleting: false,
        class: Some("fast".into()),
        node_uid: Some(format!("uid-{node}")),
    })
}

fn disk(name: &str, node: &str, pv: &str, health: Option<State>) -> DiskFacts {
    DiskFacts {
        name: name.into(),
        node: node.into(),
        pv: Some(pv.into()),
        health,
        health_reason: health.map(|_| "FilesystemShutDown".into()),
        health_message: health.map(|_| "xfs shut down".into()),
        drain: None,
    }
}

/// A Node as it was when its PVs were made: its UID is the one they record, created long before the tests' times.
fn node_state(name: &str) -> NodeState {
    NodeState {
        uid: format!("uid-{name}"),
        created: Some(SystemTime::UNIX_EPOCH),
        ..NodeState::default()
    }
}

struct World {
    pvs: Vec<Arc<Volume>>,
    disks: Vec<DiskFacts>,
    nodes: BTreeMap<String, NodeState>,
    gone_since: BTreeMap<String, SystemTime>,
    signals: NodeSignals,
}

impl World {
    fn new() -> World {
        World {
            pvs: vec![
                volume("pv-a", "node-1", Phase::Bound, Some("data-web-0")),
                volume("pv-b", "node-2", Phase::Bound, Some("data-web-1")),
                volume("pv-c", "node-1", Phase::Available, None),
            ],
            disks: vec![
                disk("node-1-a", "node-1", "pv-a", None),
                disk("node-2-b", "node-2", "pv-b", None),
            ],
            nodes: ["node-1", "node-2"]
                .into_iter()
                .map(|n| (n.to_string(), node_state(n)))
                .collect(),
            gone_since: BTreeMap::new(),
            signals: NodeSignals::default(),
        }
    }

    fn lost(&self, now: SystemTime) -> Vec<(String, Loss)> {
        lost(&Sources {
            pvs: &self.pvs,
            disks: &self.disks,
            nodes: &self.nodes,
            gone_since: &self.gone_since,
            signals: &self.signals,
            now,
        })
        .into_iter()
        .map(|l| (l.pv, l.loss))
        .collect()
    }
}

#[test]
fn a_bound_pv_is_lost_when_its_disk_failed_or_is_drained_and_never_for_a_degraded_disk() {
    let mut w = World::new();
    assert_eq!(w.lost(at(0)), vec![], "all healthy");
    w.disks[0].health = Some(State::Degraded);
    assert_eq!(w.lost(at(0)), vec![], "Degraded is not lost");
    w.disks[0].health = Some(State::Failed);
    w.disks[0].health_reason = Some("DeviceGone".into());
    w.disks[0].health_message = Some("gone 3m".into());
    assert_eq!(
        w.lost(at(0)),
        vec![(
            "pv-a".into(),
            Loss::DiskFailed {
                disk: "node-1-a".into(),
                reason: "DeviceGone".into(),
                message: "gone 3m".into()
            }
        )]
    );
    w.disks[0].health = None;
    w.disks[1].drain = Some(false);
    assert_eq!(
        w.lost(at(0)),
        vec![(
            "pv-b".into(),
            Loss::Drain {
                disk: "node-2-b".into(),
                force: false
            }
        )]
    );
}

#[test]
fn a_local_disk_naming_a_pv_of_another_node_or_an_unbound_pv_loses_nothing() {
    let mut w = World::new();
    // A LocalDisk of node-2 claims node-1's PV: it says nothing about it.
    w.disks[1].pv = Some("pv-a".into());
    w.disks[1].health = Some(State::Failed);
    w.disks[0].pv = None;
    assert_eq!(w.lost(at(0)), vec![]);
    // A Failed disk under an Available or Released PV: no claim to move.
    let mut w = World::new();
    w.disks
        .push(disk("node-1-c", "node-1", "pv-c", Some(State::Failed)));
    w.pvs
        .push(volume("pv-d", "node-1", Phase::Released, Some("old")));
    w.disks
        .push(disk("node-1-d", "node-1", "pv-d", Some(State::Failed)));
    assert_eq!(w.lost(at(0)), vec![]);
    // A PV being deleted.
    let mut w = World::new();
    w.disks[0].health = Some(State::Failed);
    Arc::make_mut(&mut w.pvs[0]).deleting = true;
    assert_eq!(w.lost(at(0)), vec![]);
}

#[test]
fn node_signals_count_only_when_each_is_opted_in() {
    // (signals, node-1's state, node-2 deleted since, now) -> lost PVs
    struct Case {
        signals: NodeSignals,
        node1: NodeState,
        node2_gone_since: Option<u64>,
        now: u64,
        lost: &'static [&'static str],
    }
    let oos = NodeState {
        out_of_service: true,
        not_ready_since: Some(at(0)),
        ..node_state("node-1")
    };
    let not_ready = NodeState {
        out_of_service: false,
        not_ready_since: Some(at(0)),
        ..node_state("node-1")
    };
    let all = NodeSignals {
        gone_after: Some(Duration::from_secs(600)),
        out_of_service: true,
        not_ready_after: Some(Duration::from_secs(300)),
        replaced_after: Some(Duration::from_secs(600)),
    };
    let cases = [
        Case {
            signals: NodeSignals::default(),
            node1: oos.clone(),
            node2_gone_since: Some(0),
            now: 10_000,
            lost: &[],
        },
        Case {
            signals: all.clone(),
            node1: oos.clone(),
            node2_gone_since: None,
            now: 1,
            lost: &["pv-a"],
        },
        Case {
            signals: all.clone(),
            node1: not_ready.clone(),
            node2_gone_since: None,
            now: 299,
            lost: &[],
        },
        Case {
            signals: all.clone(),
            node1: not_ready.clone(),
            node2_gone_since: None,
            now: 300,
            lost: &["pv-a"],
        },
        Case {
            signals: all.clone(),
            node1: node_state("node-1"),
            node2_gone_since: Some(0),
            now: 599,
            lost: &[],
        },
        Case {
            signals: all.clone(),
            node1: node_state("node-1"),
            node2_gone_since: Some(0),
            now: 600,
            lost: &["pv-b"],
        },
        Case {
            signals: NodeSignals {
                out_of_service: false,
                ..all.clone()
            },
            node1: NodeState {
                out_of_service: true,
                ..node_state("node-1")
            },
            node2_gone_since: None,
            now: 10_000,
            lost: &[],
        },
    ];
    for (i, c) in cases.into_iter().enumerate() {
        let mut w = World::new();
        w.signals = c.signals;
        w.nodes.insert("node-1".into(), c.node1);
        if let Some(since) = c.node2_gone_since {
            w.nodes.remove("node-2");
            w.gone_since.insert("node-2".into(), at(since));
        }
        let got: Vec<String> = w.lost(at(c.now)).into_iter().map(|(pv, _)| pv).collect();
        assert_eq!(got, c.lost, "case {i}");
    }
}

#[rstest::rstest]
#[case::a_restart_keeps_the_uid("uid-node-1", Some("uid-node-1"), Some(0), 10_000, false)]
#[case::a_new_uid_past_the_time("uid-node-1b", Some("uid-node-1"), Some(0), 600, true)]
#[case::a_new_uid_within_the_time("uid-node-1b", Some("uid-node-1"), Some(0), 599, false)]
#[case::the_agent_found_the_disk_since("uid-node-1b", Some("uid-node-1b"), Some(0), 10_000, false)]
#[case::the_pv_records_no_uid("uid-node-1b", None, Some(0), 10_000, false)]
#[case::the_pv_records_an_empty_uid("uid-node-1b", Some(""), Some(0), 10_000, false)]
#[case::the_node_uid_is_unknown("", Some("uid-node-1"), Some(0), 10_000, false)]
#[case::the_node_creation_is_unknown("uid-node-1b", Some("uid-node-1"), None, 10_000, false)]
#[case::a_creation_in_the_future("uid-node-1b", Some("uid-node-1"), Some(20_000), 10_000, false)]
fn a_re_created_node_loses_a_pv_only_under_a_new_uid_that_has_not_found_its_disk_for_the_time(
    #[case] node_uid: &str,
    #[case] pv_node_uid: Option<&str>,
    #[case] created: Option<u64>,
    #[case] now: u64,
    #[case] want: bool,
) {
    let mut w = World::new();
    w.signals.replaced_after = Some(Duration::from_secs(600));
    w.nodes.insert(
        "node-1".into(),
        NodeState {
            uid: node_uid.into(),
            created: created.map(at),
            ..NodeState::default()
        },
    );
    Arc::make_mut(&mut w.pvs[0]).node_uid = pv_node_uid.map(String::from);
    let got = w.lost(at(now));
    let expected = want.then(|| {
        let loss = Loss::NodeReplaced {
            node: "node-1".into(),
            was: "uid-node-1".into(),
            now: node_uid.into(),
        };
        ("pv-a".to_string(), loss)
    });
    assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
}

#[test]
fn a_re_created_node_counts_only_when_opted_in_and_a_deleted_node_is_not_a_re_created_one() {
    let mut w = World::new();
    let replaced = NodeState {
        uid: "uid-node-1b".into(),
        created: Some(at(0)),
        ..NodeState::default()
    };
    w.nodes.insert("node-1".into(), replaced);
    w.signals = NodeSignals {
        gone_after: Some(Duration::from_secs(1)),
        out_of_service: true,
        not_ready_after: Some(Duration::from_secs(1)),
        replaced_after: None,
    };
    assert_eq!(w.lost(at(100_000)), vec![], "every other signal on");
    w.signals = NodeSignals {
        replaced_after: Some(Duration::from_secs(1)),
        ..NodeSignals::default()
    };
    w.nodes.remove("node-2");
    w.gone_since.insert("node-2".into(), at(0));
    let lost: Vec<String> = w.lost(at(100_000)).into_iter().map(|(pv, _)| pv).collect();
    assert_eq!(lost, ["pv-a"], "node-2 deleted: not a re-created node");
}

fn lost_a() -> Lost {
    Lost {
        pv: "pv-a".into(),
        pv_uid: "uid-pv-a".into(),
        node: "node-1".into(),
        class: Some("fast".into()),
        namespace: "db".into(),
        claim: "data-web-0".into(),
        claim_uid: Some("uid-data-web-0".into()),
        loss: Loss::DiskFailed {
            disk: "node-1-a".into(),
            reason: "FilesystemShutDown".into(),
            message: "xfs shut down".into(),
        },
    }
}

fn pod(name: &str, owner: &str, ready: bool) -> PodState {
    PodState {
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(owner.into()),
        ready,
        deleting: false,
        claims: vec![format!("data-{name}")],
    }
}

fn scene() -> Scene {
    Scene {
        claim: Some(ClaimFacts {
            uid: "uid-data-web-0".into(),
            volume: Some("pv-a".into()),
            ask: Ask::Unset,
            deleting: false,
        }),
        sets: vec![Set {
            name: "web".into(),
            uid: "uid-web".into(),
            templates: vec!["data".into()],
            replicas: 3,
            ask: Ask::Unset,
            deleting: false,
        }],
        pods: vec![
            pod("web-0", "uid-web", false),
            pod("web-1", "uid-web", true),
            pod("web-2", "uid-web", true),
        ],
    }
}

fn policy(class: Option<RecoveryMode>) -> RecoveryPolicy {
    RecoveryPolicy {
        classes: class
            .map(|m| ("fast".to_string(), Ask::RecoveryMode(m)))
            .into_iter()
            .collect(),
        interval: Duration::from_secs(300),
    }
}

fn verdict(d: &Decision) -> String {
    match d {
        Decision::Settled => "settled".into(),
        Decision::Hold(h) => format!("hold {}", h.key()),
        Decision::DryRun(_) => "dry-run".into(),
        Decision::Recover(_) => "recover".into(),
    }
}

#[test]
fn opt_in_comes_from_the_claim_then_the_set_then_the_class_and_is_off_by_default() {
    let on = Ask::RecoveryMode(RecoveryMode::On);
    let off = Ask::RecoveryMode(RecoveryMode::Off);
    let dry = Ask::RecoveryMode(RecoveryMode::DryRun);
    // (claim, set, class) -> verdict
    let cases: [(Ask, Ask, Option<RecoveryMode>, &str); 8] = [
        (Ask::Unset, Ask::Unset, None, "hold Off"),
        (Ask::Unset, Ask::Unset, Some(RecoveryMode::On), "recover"),
        (
            Ask::Unset,
            Ask::Unset,
            Some(RecoveryMode::DryRun),
            "dry-run",
        ),
        (Ask::Unset, off.clone(), Some(RecoveryMode::On), "hold Off"),
        (on.clone(), off.clone(), None, "recover"),
        (off.clone(), on.clone(), Some(RecoveryMode::On), "hold Off"),
        (dry.clone(), on.clone(), None, "dry-run"),
        (
            Ask::Invalid("yes please".into()),
            on.clone(),
            Some(RecoveryMode::On),
            "hold BadAnnotation { value: \"yes please\" }",
        ),
    ];
    for (i, (claim, set, class, want)) in cases.into_iter().enumerate() {
        let mut s = scene();
        s.claim.as_mut().unwrap().ask = claim;
        s.sets[0].ask = set;
        let got = decide(&lost_a(), &s, &policy(class), &mut Memory::default(), at(0));
        assert_eq!(verdict(&got), want, "case {i}");
    }
}

#[test]
fn a_recovery_deletes_the_claim_and_the_pod_it_names_and_says_what_is_lost() {
    let got = decide(
        &lost_a(),
        &scene(),
        &policy(Some(RecoveryMode::On)),
        &mut Memory::default(),
        at(0),
    );
    let Decision::Recover(steps) = got else {
        panic!("{got:?}")
    };
    assert_eq!(steps.claim, "data-web-0");
    assert_eq!(steps.claim_uid, "uid-data-web-0");
    assert_eq!(
        steps.replica,
        Replica {
            set: "web".into(),
            set_uid: "uid-web".into(),
            ordinal: 0,
            pod: "web-0".into(),
            pod_uid: Some("uid-web-0".into()),
        }
    );
    for word in [
        "node-1-a",
        "FilesystemShutDown",
        "pv-a",
        "db/data-web-0",
        "web-0",
        "StatefulSet web",
    ] {
        assert!(steps.message.contains(word), "{word} in {}", steps.message);
    }
}

#[test]
fn only_a_claim_of_a_statefulset_template_in_its_own_namespace_with_its_pod_owned_by_the_set_is_recovered()
 {
    let on = policy(Some(RecoveryMode::On));
    let cases: [Change; 6] = [
        ("no set in the namespace", |s| s.sets.clear()),
        ("another template", |s| {
            s.sets[0].templates = vec!["logs".into()]
        }),
        ("the pod has another owner", |s| {
            s.pods[0].controller = Some("uid-someone".into())
        }),
        ("the set is being deleted", |s| s.sets[0].deleting = true),
        ("two sets could have made the name", |s| {
            // `data-web-0` = template `data` of set `web`, or template `data-web`... of set `web`? Not quite:
            // template `data` of `web` and template `data` of a set named `web` in another shape cannot clash,
            // but `a-b` + `c` and `a` + `b-c` can: make the claim `data-x-web-0`.
            s.sets.push(Set {
                name: "x-web".into(),
                uid: "uid-x-web".into(),
                templates: vec!["data".into()],
                replicas: 3,
                ..Set::default()
            });
            s.sets[0].templates = vec!["data-x".into()];
        }),
        ("a set of a similar name", |s| {
            s.sets[0].templates = vec!["data".into()];
            s.sets[0].name = "we".into();
        }),
    ];
    for (what, change) in cases {
        let mut s = scene();
        change(&mut s);
        let mut l = lost_a();
        if what == "two sets could have made the name" {
            l.claim = "data-x-web-0".into();
            s.claim.as_mut().unwrap().volume = Some("pv-a".into());
        }
        let got = decide(&l, &s, &on, &mut Memory::default(), at(0));
        assert_eq!(verdict(&got), "hold NotStatefulSet", "{what}");
    }
    for claim in ["data-web-+0", "data-web-00", "data-web-", "data-web0"] {
        assert!(replica_of(claim, &scene()).is_none(), "{claim}");
    }
}

#[test]
fn a_claim_that_is_gone_replaced_or_no_longer_the_pvs_is_settled() {
    let on = policy(Some(RecoveryMode::On));
    let cases: [Change; 4] = [
        ("gone", |s| s.claim = None),
        ("deleting", |s| s.claim.as_mut().unwrap().deleting = true),
        ("re-created (another UID)", |s| {
            s.claim.as_mut().unwrap().uid = "uid-new".into()
        }),
        ("bound to another PV", |s| {
            s.claim.as_mut().unwrap().volume = Some("pv-z".into())
        }),
    ];
    for (what, change) in cases {
        let mut s = scene();
        change(&mut s);
        let got = decide(&lost_a(), &s, &on, &mut Memory::default(), at(0));
        assert_eq!(got, Decision::Settled, "{what}");
    }
}

#[test]
fn recovery_waits_while_another_replica_is_not_ready_missing_or_terminating() {
    let on = policy(Some(RecoveryMode::On));
    let cases: [(Change, &str); 4] = [
        (("web-1 not Ready", |s| s.pods[1].ready = false), "web-1"),
        (
            ("web-2 missing", |s| {
                s.pods.remove(2);
            }),
            "web-2",
        ),
        (
            ("web-2 terminating", |s| s.pods[2].deleting = true),
            "web-2",
        ),
        (
            ("web-1 owned by another set", |s| {
                s.pods[1].controller = Some("uid-other".into())
            }),
            "web-1",
        ),
    ];
    for ((what, change), pod) in cases {
        let mut s = scene();
        change(&mut s);
        let got = decide(&lost_a(), &s, &on, &mut Memory::default(), at(0));
        assert_eq!(
            got,
            Decision::Hold(Hold::ReplicaNotReady { pod: pod.into() }),
            "{what}"
        );
    }
    // Scaled down to one replica: no sibling to wait for. Past the replicas: left alone.
    let mut s = scene();
    s.sets[0].replicas = 1;
    s.pods.truncate(1);
    assert_eq!(
        verdict(&decide(&lost_a(), &s, &on, &mut Memory::default(), at(0))),
        "recover"
    );
    s.sets[0].replicas = 0;
    assert_eq!(
        verdict(&decide(&lost_a(), &s, &on, &mut Memory::default(), at(0))),
        "hold ScaledDown"
    );
}

#[test]
fn one_recovery_in_flight_per_set_and_one_per_interval_in_the_cluster() {
    let on = policy(Some(RecoveryMode::On));
    let mut memory = Memory::default();
    let Decision::Recover(steps) = decide(&lost_a(), &scene(), &on, &mut memory, at(0)) else {
        panic!()
    };
    memory.started(&steps, at(0));

    // Another replica of the same set lost in the same pass: its view of web-0 is stale (still there, Ready).
    let mut l1 = lost_a();
    l1.pv = "pv-b".into();
    l1.claim = "data-web-1".into();
    l1.claim_uid = Some("uid-data-web-1".into());
    let mut s1 = scene();
    s1.claim = Some(ClaimFacts {
        uid: "uid-data-web-1".into(),
        volume: Some("pv-b".into()),
        ..ClaimFacts::default()
    });
    s1.pods[0].ready = true;
    assert_eq!(
        decide(&l1, &s1, &on, &mut memory, at(1)),
        Decision::Hold(Hold::InFlight {
            pod: "web-0".into()
        })
    );
    // The same pod back Ready (not a new one): still in flight.
    assert_eq!(
        decide(&l1, &s1, &on, &mut memory, at(400)),
        Decision::Hold(Hold::InFlight {
            pod: "web-0".into()
        })
    );
    // A new web-0 runs Ready: settled; now the interval is the only limit, and it has passed.
    s1.pods[0].uid = "uid-web-0-new".into();
    assert_eq!(
        verdict(&decide(&l1, &s1, &on, &mut memory, at(400))),
        "recover"
    );
    assert!(memory.in_flight.is_empty());

    // Another set, within the interval: rate-limited; dry-run is never limited.
    let mut other = scene();
    for s in &mut other.sets {
        s.uid = "uid-other".into();
    }
    for p in &mut other.pods {
        p.controller = Some("uid-other".into());
    }
    let mut memory = Memory {
        last: Some(at(100)),
        ..Memory::default()
    };
    assert_eq!(
        decide(&lost_a(), &other, &on, &mut memory, at(399)),
        Decision::Hold(Hold::RateLimited { until: at(400) })
    );
    assert_eq!(
        verdict(&decide(
            &lost_a(),
            &other,
            &policy(Some(RecoveryMode::DryRun)),
            &mut memory,
            at(399)
        )),
        "dry-run"
    );
    assert_eq!(
        verdict(&decide(&lost_a(), &other, &on, &mut memory, at(400))),
        "recover"
    );
}

#[test]
fn a_forced_drain_needs_no_opt_in_but_keeps_every_guard() {
    let mut l = lost_a();
    l.loss = Loss::Drain {
        disk: "node-1-a".into(),
        force: true,
    };
    let off = policy(Some(RecoveryMode::Off));
    assert_eq!(
        verdict(&decide(&l, &scene(), &off, &mut Memory::default(), at(0))),
        "recover"
    );
    let mut s = scene();
    s.pods[2].ready = false;
    assert_eq!(
        verdict(&decide(&l, &s, &off, &mut Memory::default(), at(0))),
        "hold ReplicaNotReady { pod: \"web-2\" }"
    );
    l.loss = Loss::Drain {
        disk: "node-1-a".into(),
        force: false,
    };
    assert_eq!(
        verdict(&decide(&l, &scene(), &off, &mut Memory::default(), at(0))),
        "hold Off"
    );
}

#[test]
fn a_claim_without_a_pod_is_recovered_by_deleting_the_claim_alone() {
    let mut s = scene();
    s.pods.remove(0);
    let got = decide(
        &lost_a(),
        &s,
        &policy(Some(RecoveryMode::On)),
        &mut Memory::default(),
        at(0),
    );
    let Decision::Recover(steps) = got else {
        panic!("{got:?}")
    };
    assert_eq!(steps.replica.pod_uid, None);
    assert!(!steps.message.contains("and pod"), "{}", steps.message);
}

#[test]
fn modes_and_annotations_parse_strictly() {
    for (text, want) in [
        ("on", Some(RecoveryMode::On)),
        ("On", Some(RecoveryMode::On)),
        ("true", Some(RecoveryMode::On)),
        ("dry-run", Some(RecoveryMode::DryRun)),
        ("DryRun", Some(RecoveryMode::DryRun)),
        ("off", Some(RecoveryMode::Off)),
        ("", None),
        ("yes", None),
    ] {
        assert_eq!(RecoveryMode::parse(text), want, "{text:?}");
    }
    assert_eq!(Ask::from_annotation(None), Ask::Unset);
    assert_eq!(
        Ask::from_annotation(Some("nope")),
        Ask::Invalid("nope".into())
    );
}

#[test]
fn a_failing_disk_tells_the_claim_of_the_bound_pv_it_names_on_its_own_node_only() {
    let mut w = World::new();
    assert_eq!(failing(&w.pvs, &w.disks), vec![], "all healthy");
    w.disks[0].health = Some(State::Degraded);
    // node-2's LocalDisk names node-1's PV: it says nothing about it.
    w.disks[1].health = Some(State::Failed);
    w.disks[1].pv = Some("pv-a".into());
    // A Failed disk under an Available PV has no claim to tell.
    w.disks
        .push(disk("node-1-c", "node-1", "pv-c", Some(State::Failed)));
    let got: Vec<(&str, &str, State)> = failing(&w.pvs, &w.disks)
        .iter()
        .map(|f| (f.namespace, f.claim, f.state))
        .collect();
    assert_eq!(got, vec![("db", "data-web-0", State::Degraded)]);
}
