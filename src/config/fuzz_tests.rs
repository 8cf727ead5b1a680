//! Property tests of the configuration parser: arbitrary bytes, and YAML built from the real keys with hostile
//! values, never panic and are answered quickly. Case counts are modest so this runs in seconds.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

const KEYS: [&str; 16] = [
    "storageClassMap",
    "hostDir",
    "mountDir",
    "volumeMode",
    "accessMode",
    "fsType",
    "namePattern",
    "selector",
    "blockCleanerCommand",
    "wipeMethod",
    "minResyncPeriod",
    "nodeLabelsForPV",
    "labelsForPV",
    "useNodeNameOnly",
    "wipeConcurrency",
    "kind",
];

/// Scalars a hostile or careless operator might write where any key expects a value.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_string()),
        Just("/proc".to_string()),
        Just("/mnt/disks".to_string()),
        Just("yes".to_string()),
        Just("~".to_string()),
        Just("-1".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("1h2m3.5s".to_string()),
        Just("&a [*a]".to_string()),
        Just("!!binary aGk=".to_string()),
        Just("ConfigMap".to_string()),
        "[ -~]{0,12}",
    ]
}

/// A YAML value over the real keys, nested at most `depth` deep.
fn value(depth: u32) -> impl Strategy<Value = String> {
    scalar().prop_recursive(depth, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6)
                .prop_map(|items| format!("[{}]", items.join(", "))),
            prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..6).prop_map(
                |entries| {
                    let body: Vec<String> =
                        entries.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                    format!("{{{}}}", body.join(", "))
                }
            ),
        ]
    })
}

fn document() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(KEYS.to_vec()), value(4)), 0..8).prop_map(
        |entries| {
            entries
                .iter()
                .map(|(k, v)| format!("{k}: {v}\n"))
                .collect::<String>()
        },
    )
}

/// Parses and returns how long it took; any panic fails the property.
fn parse_timed(text: &str) -> Duration {
    let started = Instant::now();
    let _ = Config::from_yaml(text, "fuzz.yaml");
    let mut files = std::collections::BTreeMap::new();
    files.insert("storageClassMap".to_string(), text.to_string());
    let _ = Config::from_files(&files, "fuzz");
    started.elapsed()
}

const BOUND: Duration = Duration::from_millis(500);

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics_and_is_answered_quickly(text in "\\PC{0,400}") {
        prop_assert!(parse_timed(&text) < BOUND);
    }

    #[test]
    fn yaml_over_the_real_keys_never_panics_and_is_answered_quickly(text in document()) {
        prop_assert!(parse_timed(&text) < BOUND);
    }

    #[test]
    fn mutated_real_configs_never_panic(
        cuts in prop::collection::vec((0usize..2000, any::<u8>()), 1..8),
    ) {
        let mut bytes = super::tests::REFERENCE_CONFIGMAP.as_bytes().to_vec();
        for (at, byte) in cuts {
            let at = at % (bytes.len() + 1);
            match byte % 3 {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => bytes[at] = byte,
                _ => bytes.truncate(at.max(1)),
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        prop_assert!(parse_timed(&text) < BOUND);
    }
}
