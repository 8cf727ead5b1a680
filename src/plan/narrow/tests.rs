use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolume;
use rstest::rstest;
use serde_json::json;

use super::*;
use crate::contract::ANN_FS_UUID;

const NAME: &str = "localpv-discovery-dirs";

fn policy() -> PolicySeen {
    PolicySeen {
        uid: "p-1".into(),
        generation: 1,
        failure_policy: Some("Fail".into()),
        matches_pv_writes: true,
        rules: Some(RULES_VERSION.into()),
        dirs: Some(r#"[["/mnt/disks/",""],["/mnt/fast/",""]]"#.into()),
    }
}

fn binding() -> BindingSeen {
    BindingSeen {
        uid: "b-1".into(),
        generation: 1,
        policy_name: NAME.into(),
        validation_actions: vec!["Deny".into()],
        narrowed: false,
    }
}

fn dirs() -> Vec<PathBuf> {
    vec![PathBuf::from("/mnt/disks"), PathBuf::from("/mnt/fast/")]
}

fn fingerprint() -> Fingerprint {
    Fingerprint {
        policy_uid: "p-1".into(),
        policy_generation: 1,
        binding_uid: "b-1".into(),
        binding_generation: 1,
    }
}

#[test]
fn the_policy_as_the_chart_renders_it_is_in_force() {
    let got = in_force(NAME, Some(&policy()), Some(&binding()), &dirs(), false);
    assert_eq!(got, InForce::Yes(fingerprint()));
}

#[rstest]
#[case::no_policy(None, Some(binding()), "does not exist")]
#[case::no_binding(Some(policy()), None, "Binding does not exist")]
#[case::ignore(Some(PolicySeen { failure_policy: Some("Ignore".into()), ..policy() }), Some(binding()), "failurePolicy")]
#[case::not_pv_writes(Some(PolicySeen { matches_pv_writes: false, ..policy() }), Some(binding()), "every create and update")]
#[case::old_rules(Some(PolicySeen { rules: Some("1".into()), ..policy() }), Some(binding()), "version 1")]
#[case::no_rules(Some(PolicySeen { rules: None, ..policy() }), Some(binding()), "version none")]
#[case::other_policy(Some(policy()), Some(BindingSeen { policy_name: "other".into(), ..binding() }), "names policy other")]
#[case::warn_only(Some(policy()), Some(BindingSeen { validation_actions: vec!["Warn".into(), "Audit".into()], ..binding() }), "does not Deny")]
#[case::param_ref(Some(policy()), Some(BindingSeen { narrowed: true, ..binding() }), "paramRef")]
#[case::no_dirs(Some(PolicySeen { dirs: None, ..policy() }), Some(binding()), "dirs variable")]
#[case::dirs_not_json(Some(PolicySeen { dirs: Some("variables.x".into()), ..policy() }), Some(binding()), "dirs variable")]
#[case::a_dir_left_out(Some(PolicySeen { dirs: Some(r#"[["/mnt/disks/",""]]"#.into()), ..policy() }), Some(binding()), "/mnt/fast")]
#[case::selector_terms(Some(PolicySeen { dirs: Some(r#"[["/mnt/disks/",""],["/mnt/fast/","zone In a|"]]"#.into()), ..policy() }), Some(binding()), "selector terms")]
#[case::a_sibling_is_not_cover(Some(PolicySeen { dirs: Some(r#"[["/mnt/disk",""],["/mnt/fast/",""]]"#.into()), ..policy() }), Some(binding()), "/mnt/disks")]
fn a_policy_that_could_let_a_pv_through_is_not_in_force(
    #[case] p: Option<PolicySeen>,
    #[case] b: Option<BindingSeen>,
    #[case] why: &str,
) {
    match in_force(NAME, p.as_ref(), b.as_ref(), &dirs(), false) {
        InForce::No(message) => {
            assert!(message.contains(why), "{message:?} should say {why:?}");
            assert!(message.contains(NAME), "{message:?} names the policy");
        }
        other => panic!("expected not in force ({why}), got {other:?}"),
    }
}

#[test]
fn an_agent_whose_own_class_has_selector_terms_stays_wide() {
    match in_force(NAME, Some(&policy()), Some(&binding()), &dirs(), true) {
        InForce::No(why) => assert!(why.contains("selector terms"), "{why}"),
        other => panic!("a shared class keeps the watch wide, got {other:?}"),
    }
}

#[test]
fn a_discovery_directory_inside_a_covered_one_is_covered() {
    let p = PolicySeen {
        dirs: Some(r#"[["/mnt/",""]]"#.into()),
        ..policy()
    };
    let got = in_force(NAME, Some(&p), Some(&binding()), &dirs(), false);
    assert_eq!(got, InForce::Yes(fingerprint()));
}

fn pv(value: serde_json::Value) -> PersistentVolume {
    serde_json::from_value(value).expect("a PV")
}

#[rstest]
#[case::ours(json!({"metadata": {"name": "a", "labels": {NODE_LABEL: "node-1"}}, "spec": {"local": {"path": "/mnt/disks/vol1"}}}), false)]
#[case::other_nodes_label(json!({"metadata": {"name": "a", "labels": {NODE_LABEL: "node-2"}}, "spec": {"local": {"path": "/srv/x"}}}), true)]
#[case::unlabelled_at_a_disk(json!({"metadata": {"name": "a"}, "spec": {"local": {"path": "/mnt/disks/vol1"}}}), true)]
#[case::unlabelled_host_path_above(json!({"metadata": {"name": "a"}, "spec": {"hostPath": {"path": "/mnt"}}}), true)]
#[case::dot_spelling(json!({"metadata": {"name": "a"}, "spec": {"local": {"path": "/mnt/./disks//vol1/"}}}), true)]
#[case::identity_elsewhere(json!({"metadata": {"name": "a", "annotations": {ANN_FS_UUID: "u"}}, "spec": {"csi": {"driver": "d", "volumeHandle": "h"}}}), true)]
#[case::elsewhere(json!({"metadata": {"name": "a"}, "spec": {"local": {"path": "/var/openebs/local/pvc-1"}}}), false)]
#[case::sibling(json!({"metadata": {"name": "a"}, "spec": {"local": {"path": "/mnt/disks2/vol1"}}}), false)]
#[case::not_local(json!({"metadata": {"name": "a", "annotations": {"pv.kubernetes.io/provisioned-by": "x"}}, "spec": {"nfs": {"server": "s", "path": "/mnt/disks"}}}), false)]
fn only_a_pv_the_narrow_watch_would_miss_and_that_may_reach_a_disk_blocks(
    #[case] value: serde_json::Value,
    #[case] want: bool,
) {
    assert_eq!(blocks(&pv(value), "node-1", &dirs()), want);
}

#[test]
fn a_wide_agent_narrows_only_after_one_fingerprint_held_for_the_settle_time_with_no_blocker() {
    let t0 = Instant::now();
    let mut n = Narrowing::resume(None);
    assert_eq!(n.mode(), &Mode::Wide, "no record: wide");
    assert_eq!(
        n.look(InForce::Yes(fingerprint()), t0, 0),
        WatchMove::CheckIn(SETTLE)
    );
    let half = t0 + SETTLE / 2;
    assert_eq!(
        n.look(InForce::Yes(fingerprint()), half, 0),
        WatchMove::CheckIn(SETTLE / 2)
    );
    // Another fingerprint (edited meanwhile) starts the wait again.
    let edited = Fingerprint {
        policy_generation: 2,
        ..fingerprint()
    };
    let t1 = t0 + SETTLE;
    assert_eq!(
        n.look(InForce::Yes(edited.clone()), t1, 0),
        WatchMove::CheckIn(SETTLE)
    );
    // A blocker keeps it wide.
    let t2 = t1 + SETTLE;
    assert_eq!(
        n.look(InForce::Yes(edited.clone()), t2, 1),
        WatchMove::CheckIn(CHECK_EVERY)
    );
    assert!(!n.is_narrow());
    // Gone: the wait starts again from nothing.
    let gone = InForce::No("gone".into());
    assert_eq!(n.look(gone, t2, 0), WatchMove::CheckIn(CHECK_EVERY));
    assert_eq!(
        n.look(InForce::Yes(edited.clone()), t2, 0),
        WatchMove::CheckIn(SETTLE)
    );
    let t3 = t2 + SETTLE;
    assert_eq!(
        n.look(InForce::Yes(edited.clone()), t3, 0),
        WatchMove::Narrow(edited.clone())
    );
    assert_eq!(n.mode(), &Mode::Narrow(edited));
}

#[rstest]
#[case::same(InForce::Yes(fingerprint()), true)]
#[case::edited(InForce::Yes(Fingerprint { policy_generation: 2, ..fingerprint() }), false)]
#[case::made_again(InForce::Yes(Fingerprint { binding_uid: "b-2".into(), ..fingerprint() }), false)]
#[case::gone(InForce::No("admission policy x: gone".into()), false)]
fn a_narrow_agent_keeps_its_watch_only_while_the_fingerprint_it_narrowed_on_is_in_force(
    #[case] seen: InForce,
    #[case] keep: bool,
) {
    let mut n = Narrowing::resume(Some(&fingerprint()));
    assert!(n.is_narrow(), "a record resumes narrow");
    let step = n.verify(seen);
    assert_eq!(step == WatchMove::Keep, keep, "{step:?}");
    assert_eq!(n.is_narrow(), keep);
    if !keep {
        assert!(matches!(step, WatchMove::Widen(_)));
        // Wide again: it must see one fingerprint for the settle time before narrowing again.
        let t = Instant::now();
        assert_eq!(
            n.look(InForce::Yes(fingerprint()), t, 0),
            WatchMove::CheckIn(SETTLE)
        );
    }
}

#[rstest]
#[case::changed(InForce::Yes(Fingerprint { policy_uid: "p-0".into(), ..fingerprint() }))]
#[case::gone(InForce::No("gone".into()))]
fn a_restart_resumes_narrow_on_its_record_and_its_first_check_widens_when_the_policy_changed_meanwhile(
    #[case] now: InForce,
) {
    assert_eq!(
        Narrowing::resume(None).mode(),
        &Mode::Wide,
        "no record: wide"
    );
    let mut n = Narrowing::resume(Some(&fingerprint()));
    assert_eq!(n.mode(), &Mode::Narrow(fingerprint()));
    assert!(matches!(n.verify(now), WatchMove::Widen(_)));
    assert_eq!(n.mode(), &Mode::Wide);
    let _ = Duration::ZERO;
}

/// A policy as the API server returns it, its `matchConstraints` given.
fn policy_object(match_constraints: serde_json::Value) -> ValidatingAdmissionPolicy {
    serde_json::from_value(json!({
        "metadata": {
            "name": NAME, "uid": "p-1", "generation": 3,
            "annotations": {ANN_POLICY_RULES: RULES_VERSION},
        },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": match_constraints,
            "variables": [{"name": "dirs", "expression": "[]"}],
            "validations": [{"expression": "true"}],
        },
    }))
    .expect("a policy")
}

fn pv_rule(operations: &[&str]) -> serde_json::Value {
    json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumes"], "operations": operations})
}

#[rstest]
#[case::as_rendered(json!({"resourceRules": [pv_rule(&["CREATE", "UPDATE"])]}), true)]
#[case::wildcards(json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]}), true)]
#[case::split_over_two_rules(json!({"resourceRules": [pv_rule(&["CREATE"]), pv_rule(&["UPDATE"])]}), false)]
#[case::create_only(json!({"resourceRules": [pv_rule(&["CREATE"])]}), false)]
#[case::no_rules(json!({}), false)]
#[case::named_pvs_only(json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumes"], "operations": ["CREATE", "UPDATE"], "resourceNames": ["a"]}]}), false)]
#[case::another_group(json!({"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "resources": ["persistentvolumes"], "operations": ["*"]}]}), false)]
#[case::excluding(json!({"resourceRules": [pv_rule(&["CREATE", "UPDATE"])], "excludeResourceRules": [pv_rule(&["UPDATE"])]}), false)]
#[case::object_selector(json!({"resourceRules": [pv_rule(&["CREATE", "UPDATE"])], "objectSelector": {"matchLabels": {"a": "b"}}}), false)]
#[case::empty_object_selector(json!({"resourceRules": [pv_rule(&["CREATE", "UPDATE"])], "objectSelector": {}}), true)]
fn a_policy_matches_every_pv_write_only_with_one_rule_for_both_and_nothing_left_out(
    #[case] match_constraints: serde_json::Value,
    #[case] matches: bool,
) {
    let seen = PolicySeen::of(&policy_object(match_constraints));
    assert_eq!(seen.matches_pv_writes, matches);
    assert_eq!(
        (
            seen.uid.as_str(),
            seen.generation,
            seen.rules.as_deref(),
            seen.dirs.as_deref()
        ),
        ("p-1", 3, Some(RULES_VERSION), Some("[]"))
    );
}

#[rstest]
#[case::as_rendered(json!({}), false)]
#[case::param_ref(json!({"paramRef": {"name": "p", "parameterNotFoundAction": "Deny"}}), true)]
#[case::own_rules(json!({"matchResources": {"resourceRules": [pv_rule(&["CREATE"])]}}), true)]
#[case::exclusions(json!({"matchResources": {"excludeResourceRules": [pv_rule(&["UPDATE"])]}}), true)]
#[case::object_selector(json!({"matchResources": {"objectSelector": {"matchLabels": {"a": "b"}}}}), true)]
#[case::empty_match_resources(json!({"matchResources": {}}), false)]
fn a_binding_that_could_leave_some_pvs_out_is_narrowed(
    #[case] extra: serde_json::Value,
    #[case] narrowed: bool,
) {
    let mut spec = json!({"policyName": NAME, "validationActions": ["Deny"]});
    spec.as_object_mut()
        .expect("an object")
        .extend(extra.as_object().expect("an object").clone());
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": NAME, "uid": "b-1", "generation": 2},
        "spec": spec,
    }))
    .expect("a binding");
    let seen = BindingSeen::of(&binding);
    assert_eq!(seen.narrowed, narrowed);
    assert_eq!(
        (
            seen.uid.as_str(),
            seen.generation,
            seen.policy_name.as_str()
        ),
        ("b-1", 2, NAME)
    );
    assert_eq!(seen.validation_actions, ["Deny"]);
}
