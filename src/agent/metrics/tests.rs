use super::*;
use crate::telemetry::scrape;

#[test]
fn every_known_label_set_is_exported_at_zero_before_its_first_event() {
    let text = crate::telemetry::assert_registered(
        Metrics::register,
        &[
            r#"localpv_node_wipes_total{method="remove",outcome="Error"} 0"#,
            r#"localpv_node_wipes_total{method="command",outcome="Refused"} 0"#,
            r#"localpv_node_api_requests_total{verb="Create",outcome="Error"} 0"#,
            r#"localpv_node_config_reloads_total{outcome="Error"} 0"#,
            r#"localpv_node_disks_unusable{reason="DeviceInUse"} 0"#,
            r#"localpv_node_persistent_volumes{phase="Released"} 0"#,
        ],
    );
    assert_eq!(text.matches("localpv_node_wipes_total{").count(), 7 * 3);
}

fn pv(class: &str, phase: &str, size: &str) -> PersistentVolume {
    let pv = localpv_test_support::objects::Pv::local(&format!("pv-{class}-{phase}-{size}"), "n1");
    pv.class(class).capacity(size).phase(phase).build()
}

#[test]
fn a_tally_kept_between_passes_counts_what_a_fresh_one_counts() {
    let phases = ["Pending", "Available", "Bound", "Released", "Failed"];
    let classes = ["fast", "slow", "gone"];
    let mut pvs: Vec<Arc<PersistentVolume>> = Vec::new();
    let mut kept = PvTally::default();
    let mut seed = 7u64;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    for step in 0..400 {
        let at = next(pvs.len().max(1));
        let fresh = Arc::new(pv(
            classes[next(3)],
            phases[next(5)],
            ["1Gi", "0", "5Gi"][next(3)],
        ));
        match next(6) {
            0 | 1 => pvs.push(fresh),
            2 if !pvs.is_empty() => {
                pvs.remove(at);
            }
            _ if !pvs.is_empty() => pvs[at] = fresh,
            _ => {}
        }
        kept.update(&pvs);
        let mut whole = PvTally::default();
        whole.update(&pvs);
        assert!(kept.is_of(&pvs), "step {step}");
        assert_eq!(kept.phases, whole.phases, "step {step}");
        assert_eq!(kept.bytes, whole.bytes, "step {step}");
    }
}

#[test]
fn a_pass_sets_free_and_bound_capacity_per_class_and_resets_counts() {
    let mut reg = Registry::default();
    let m = Metrics::register(&mut reg);
    let pvs = [
        pv("fast", "Available", "10Gi"),
        pv("fast", "Available", "5Gi"),
        pv("fast", "Bound", "1Gi"),
    ]
    .map(Arc::new);
    let mut tally = PvTally::default();
    tally.update(&pvs);
    m.publish_pass(["fast", "slow"], &[], &tally);
    let text = scrape(&reg);
    let gib: i64 = 1 << 30;
    for line in [
        format!(
            r#"localpv_node_pv_capacity_bytes{{storage_class="fast",phase="Available"}} {}"#,
            15 * gib
        ),
        format!(r#"localpv_node_pv_capacity_bytes{{storage_class="fast",phase="Bound"}} {gib}"#),
        r#"localpv_node_pv_capacity_bytes{storage_class="slow",phase="Available"} 0"#.to_string(),
        r#"localpv_node_persistent_volumes{phase="Available"} 2"#.to_string(),
    ] {
        assert!(text.contains(&line), "{line} missing:\n{text}");
    }
    tally.update(&[]);
    m.publish_pass(["fast"], &[], &tally);
    let text = scrape(&reg);
    assert!(
        text.contains(r#"localpv_node_persistent_volumes{phase="Available"} 0"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"storage_class="slow""#),
        "a removed class is no longer reported:\n{text}"
    );
}
