use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rstest::rstest;

use super::*;
use crate::contract::NODE_LABEL;
use crate::disk::VolumeMode;

/// The reference provisioner's documented ConfigMap shape: every value is a string holding YAML.
pub(super) const REFERENCE_CONFIGMAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-provisioner-config
  namespace: default
data:
  nodeLabelsForPV: |
    - kubernetes.io/hostname
    - topology.kubernetes.io/zone
  storageClassMap: |
    fast-disks:
       hostDir: /mnt/fast-disks
       mountDir:  /mnt/fast-disks
       blockCleanerCommand:
         - "/scripts/shred.sh"
         - "2"
       volumeMode: Filesystem
       fsType: ext4
       namePattern: "*"
    local-storage:
       hostDir: /mnt/disks
       mountDir: /mnt/container-disks
  useJobForCleaning: "yes"
  minResyncPeriod: "5m0s"
  setPVOwnerRef: "true"
"#;

fn parse(yaml: &str) -> Loaded {
    match Config::from_yaml(yaml, "test.yaml") {
        Ok(loaded) => loaded,
        Err(err) => panic!("config rejected: {err}"),
    }
}

fn problems(yaml: &str) -> Vec<String> {
    match Config::from_yaml(yaml, "test.yaml") {
        Ok(loaded) => panic!("config accepted: {loaded:?}"),
        Err(ConfigError::Invalid { problems, .. }) => {
            problems.iter().map(ToString::to_string).collect()
        }
        Err(other) => panic!("expected validation problems, got {other}"),
    }
}

fn warnings(yaml: &str) -> Vec<String> {
    parse(yaml)
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn one_class(body: &str) -> String {
    format!("storageClassMap:\n  fast-disks:\n{}", indent(body, 4))
}

fn indent(text: &str, by: usize) -> String {
    text.lines()
        .map(|line| format!("{}{line}\n", " ".repeat(by)))
        .collect()
}

#[test]
fn reference_configmap_manifest_is_read_unchanged() {
    let loaded = parse(REFERENCE_CONFIGMAP);
    let config = &loaded.config;
    assert_eq!(
        config.node_labels_for_pv,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    assert_eq!(config.min_resync_period, Duration::from_secs(300));
    assert!(config.set_pv_owner_ref);
    let fast = config
        .class("fast-disks")
        .expect("fast-disks is configured");
    assert_eq!(fast.host_dir, Path::new("/mnt/fast-disks"));
    assert_eq!(fast.mount_dir, Path::new("/mnt/fast-disks"));
    assert_eq!(fast.volume_mode, VolumeMode::Filesystem);
    assert_eq!(fast.fs_type.as_deref(), Some("ext4"));
    assert_eq!(fast.name_patterns, ["*"]);
    assert_eq!(fast.access_modes, ["ReadWriteOnce"]);
    assert_eq!(fast.wipe, WipeMethod::Filesystem(FsWipe::RemoveContents));
    // Its blockCleanerCommand (the stock shred script) wipes the raw devices found in it, as the reference's did.
    assert_eq!(
        Some(fast.device_wipe.clone()),
        crate::config::BlockWipe::builtin(crate::contract::BlockMethod::Overwrite)
    );
    let local = config
        .class("local-storage")
        .expect("local-storage is configured");
    assert_eq!(local.mount_dir, Path::new("/mnt/container-disks"));
    let warned: Vec<_> = loaded.warnings.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(warned, ["useJobForCleaning"]);
}

#[test]
fn mounted_configmap_directory_is_read_like_the_manifest() {
    // The kubelet's layout: keys are symlinks into `..data`, which points at a timestamped directory.
    let dir = tempfile::tempdir().expect("temp dir");
    let stamped = dir.path().join("..2024_01_01_00_00_00.000000000");
    std::fs::create_dir(&stamped).expect("stamped dir");
    std::os::unix::fs::symlink(
        stamped.file_name().expect("name"),
        dir.path().join("..data"),
    )
    .expect("..data");
    let manifest: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(REFERENCE_CONFIGMAP).expect("manifest");
    for (key, value) in manifest["data"].as_mapping().expect("data") {
        let key = key.as_str().expect("key");
        std::fs::write(stamped.join(key), value.as_str().expect("value")).expect("write key");
        std::os::unix::fs::symlink(format!("..data/{key}"), dir.path().join(key))
            .expect("key link");
    }
    let from_dir = Config::load(dir.path()).expect("directory accepted");
    assert_eq!(from_dir, parse(REFERENCE_CONFIGMAP));
}

#[test]
fn single_file_with_top_level_keys_is_read_like_the_manifest() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let yaml = r#"
nodeLabelsForPV: [kubernetes.io/hostname, topology.kubernetes.io/zone]
storageClassMap:
  fast-disks:
    hostDir: /mnt/fast-disks
    mountDir: /mnt/fast-disks
    blockCleanerCommand: ["/scripts/shred.sh", "2"]
    volumeMode: Filesystem
    fsType: ext4
    namePattern: "*"
  local-storage: {hostDir: /mnt/disks, mountDir: /mnt/container-disks}
useJobForCleaning: yes
minResyncPeriod: 5m0s
setPVOwnerRef: true
"#;
    std::fs::write(file.path(), yaml).expect("write");
    assert_eq!(
        Config::load(file.path()).expect("file accepted"),
        parse(REFERENCE_CONFIGMAP)
    );
}

#[rstest]
#[case("yes", true)]
#[case("\"yes\"", true)]
#[case("on", true)]
#[case("y", true)]
#[case("True", true)]
#[case("\"true\"", true)]
#[case("true", true)]
#[case("no", false)]
#[case("off", false)]
#[case("\"false\"", false)]
fn yaml_1_1_booleans_mean_what_the_reference_provisioner_reads(
    #[case] text: &str,
    #[case] expected: bool,
) {
    let yaml = format!(
        "useNodeNameOnly: {text}\nsetPVOwnerRef: {text}\n{}",
        one_class("hostDir: /mnt/d")
    );
    let config = parse(&yaml).config;
    assert_eq!(
        (config.use_node_name_only, config.set_pv_owner_ref),
        (expected, expected)
    );
}

#[test]
fn booleans_in_a_mounted_directory_are_yaml_1_1_too() {
    let files = BTreeMap::from([
        (
            "storageClassMap".to_string(),
            "d:\n  hostDir: /mnt/d\n".to_string(),
        ),
        ("useNodeNameOnly".to_string(), "yes\n".to_string()),
        ("capacityRounding".to_string(), "on".to_string()),
    ]);
    let config = Config::from_files(&files, "dir").expect("accepted").config;
    assert!(config.use_node_name_only);
    assert!(config.capacity_rounding);
}

#[test]
fn omitted_keys_take_their_documented_defaults() {
    let loaded = parse(&one_class("hostDir: /mnt/d/"));
    assert_eq!(loaded.warnings, []);
    let config = loaded.config;
    assert_eq!(config.min_resync_period, DEFAULT_MIN_RESYNC_PERIOD);
    assert_eq!(config.pv_naming, PvNaming::Localpv);
    assert_eq!(config.missing_disk_grace_period, Duration::ZERO);
    assert!(
        !config.capacity_rounding && !config.wipe_on_first_discovery && !config.set_pv_owner_ref
    );
    let class = &config.classes[0];
    assert_eq!(
        class.host_dir,
        PathBuf::from("/mnt/d"),
        "the trailing slash is dropped"
    );
    assert_eq!(class.mount_dir, class.host_dir);
    assert_eq!(class.volume_mode, VolumeMode::Filesystem);
    assert_eq!(class.access_modes, ["ReadWriteOnce"]);
    assert_eq!(class.name_patterns, ["*"]);
    assert_eq!(class.fs_type, None);
    assert_eq!(class.selector, []);
    assert_eq!(class.wipe, WipeMethod::Filesystem(FsWipe::RemoveContents));
}

#[test]
fn our_own_keys_are_read_beside_the_reference_keys() {
    let yaml = format!(
        "pvNaming: reference\ncapacityRounding: true\nwipeOnFirstDiscovery: yes\nmissingDiskGracePeriod: 1m30s\n\
         labelsForPV: {{team: storage, tier: \"1\"}}\nremoveNodeNotReadyTaint: true\n\
         provisionerNotReadyNodeTaintKey: example.com/storage-not-ready\n{}",
        one_class("hostDir: /mnt/d\nwipeOnFirstDiscovery: false")
    );
    let config = parse(&yaml).config;
    assert_eq!(config.pv_naming, PvNaming::Reference);
    assert!(
        config.capacity_rounding
            && config.wipe_on_first_discovery
            && config.remove_node_not_ready_taint
    );
    assert_eq!(config.missing_disk_grace_period, Duration::from_secs(90));
    assert_eq!(
        config.provisioner_not_ready_node_taint_key.as_deref(),
        Some("example.com/storage-not-ready")
    );
    assert_eq!(
        config.startup_taint(),
        Some("example.com/storage-not-ready")
    );
    assert_eq!(config.labels_for_pv["tier"], "1");
    assert!(
        !config.classes[0].wipe_on_first_discovery,
        "the class overrides the global default"
    );
}

#[test]
fn class_selector_terms_and_patterns_are_kept() {
    let body = "hostDir: /mnt/d\nnamePattern: \"nvme*, ssd?,[^ab]x\"\naccessMode: ReadWriteOncePod\nselector:\n  \
                - matchExpressions:\n    - {key: rack, operator: In, values: [r1]}\n";
    let class = parse(&one_class(body)).config.classes.remove(0);
    assert_eq!(class.name_patterns, ["nvme*", "ssd?", "[^ab]x"]);
    assert_eq!(class.access_modes, ["ReadWriteOncePod"]);
    let expressions = class.selector[0]
        .match_expressions
        .as_ref()
        .expect("expressions");
    assert_eq!(expressions[0].key, "rack");
    assert_eq!(
        expressions[0].values.as_deref(),
        Some(&["r1".to_string()][..])
    );
}

#[test]
fn config_converts_to_discovery_classes() {
    let yaml = "storageClassMap:\n  b:\n    hostDir: /mnt/b\n    volumeMode: Block\n  a:\n    hostDir: /mnt/a\n    \
                mountDir: /host/a\n    namePattern: vol*\n";
    let classes = parse(yaml).config.discovery_classes();
    let summary: Vec<_> = classes
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.host_dir.to_str(),
                c.mount_dir.to_str(),
                c.mode,
                c.name_patterns.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "a",
                Some("/mnt/a"),
                Some("/host/a"),
                VolumeMode::Filesystem,
                vec!["vol*".to_string()]
            ),
            (
                "b",
                Some("/mnt/b"),
                Some("/mnt/b"),
                VolumeMode::Block,
                vec!["*".to_string()]
            ),
        ]
    );
}

fn block(method: crate::contract::BlockMethod) -> WipeMethod {
    WipeMethod::Block(BlockWipe::builtin(method).expect("a built-in method"))
}

fn block_command(argv: Vec<String>) -> WipeMethod {
    WipeMethod::Block(BlockWipe::command(argv))
}

fn fs_command(argv: Vec<String>) -> WipeMethod {
    WipeMethod::Filesystem(FsWipe::Command(argv))
}

#[rstest]
#[case::block_default("volumeMode: Block", block(crate::contract::BlockMethod::ZeroOut))]
#[case::fs_default(
    "volumeMode: Filesystem",
    WipeMethod::Filesystem(FsWipe::RemoveContents)
)]
#[case::block_named(
    "volumeMode: Block\nwipeMethod: secure-discard",
    block(crate::contract::BlockMethod::SecureDiscard)
)]
#[case::block_signatures(
    "volumeMode: Block\nwipeMethod: signatures",
    block(crate::contract::BlockMethod::Signatures)
)]
#[case::block_overwrite(
    "volumeMode: Block\nwipeMethod: overwrite",
    block(crate::contract::BlockMethod::Overwrite)
)]
#[case::block_discard(
    "volumeMode: Block\nwipeMethod: discard",
    block(crate::contract::BlockMethod::Discard)
)]
#[case::operator_script(
    "volumeMode: Block\nblockCleanerCommand: [/opt/wipe.sh, fast]",
    block_command(vec!["/opt/wipe.sh".into(), "fast".into()])
)]
#[case::stock_shred(
    "volumeMode: Block\nblockCleanerCommand: [/scripts/shred.sh, \"2\"]",
    block(crate::contract::BlockMethod::Overwrite)
)]
#[case::stock_quick_reset(
    "volumeMode: Block\nblockCleanerCommand: [/scripts/quick_reset.sh]",
    block(crate::contract::BlockMethod::Signatures)
)]
#[case::stock_blkdiscard(
    "volumeMode: Block\nblockCleanerCommand: [/scripts/blkdiscard.sh]",
    block(crate::contract::BlockMethod::Discard)
)]
#[case::stock_script_forced(
    "volumeMode: Block\nwipeMethod: command\nblockCleanerCommand: [/scripts/shred.sh, \"2\"]",
    block_command(vec!["/scripts/shred.sh".into(), "2".into()])
)]
#[case::stock_dd_zero(
    "volumeMode: Block\nblockCleanerCommand: [/scripts/dd_zero.sh]",
    block(crate::contract::BlockMethod::ZeroOut)
)]
#[case::block_zeroout(
    "volumeMode: Block\nwipeMethod: zeroout",
    block(crate::contract::BlockMethod::ZeroOut)
)]
#[case::fs_remove("wipeMethod: remove", WipeMethod::Filesystem(FsWipe::RemoveContents))]
#[case::fs_command_named(
    "wipeMethod: command\nfsCleanerCommand: [/opt/clean-fs]",
    fs_command(vec!["/opt/clean-fs".into()])
)]
#[case::fs_command("fsCleanerCommand: [/opt/clean-fs]", fs_command(vec!["/opt/clean-fs".into()]))]
#[case::fs_command_single_string("fsCleanerCommand: /opt/clean-fs", fs_command(vec!["/opt/clean-fs".into()]))]
fn wipe_method_follows_mode_method_and_commands(#[case] body: &str, #[case] expected: WipeMethod) {
    let class = parse(&one_class(&format!("hostDir: /mnt/d\n{body}")))
        .config
        .classes
        .remove(0);
    assert_eq!(class.wipe, expected);
}

/// Every spelling of every mode parses into a method of that mode that spells itself the same way.
#[rstest]
fn every_wipe_method_spelling_parses_in_its_own_mode(
    #[values(VolumeMode::Filesystem, VolumeMode::Block)] mode: VolumeMode,
) {
    let spellings = WipeMethod::spellings(mode);
    assert!(!spellings.is_empty());
    for spelling in spellings {
        let body = format!(
            "hostDir: /mnt/d\nvolumeMode: {}\nwipeMethod: {spelling}\nblockCleanerCommand: [/opt/b]\n\
             fsCleanerCommand: [/opt/f]",
            mode.as_str()
        );
        let parsed = parse(&one_class(&body));
        let wipe = &parsed.config.classes[0].wipe;
        assert_eq!((wipe.as_str(), wipe.mode()), (spelling, mode));
    }
}

/// A method of the other volume mode is refused at parse, naming the key and both modes; nothing is remapped.
#[rstest]
#[case::remove_on_block(
    "volumeMode: Block\nwipeMethod: remove",
    "wipeMethod",
    "Filesystem",
    "Block"
)]
#[case::zeroout_on_fs("wipeMethod: zeroout", "wipeMethod", "Block", "Filesystem")]
#[case::discard_on_fs("wipeMethod: discard", "wipeMethod", "Block", "Filesystem")]
#[case::secure_discard_on_fs("wipeMethod: secure-discard", "wipeMethod", "Block", "Filesystem")]
#[case::signatures_on_fs("wipeMethod: signatures", "wipeMethod", "Block", "Filesystem")]
#[case::overwrite_on_fs("wipeMethod: overwrite", "wipeMethod", "Block", "Filesystem")]
#[case::stock_shred_on_fs(
    "fsCleanerCommand: [/scripts/shred.sh]",
    "fsCleanerCommand",
    "Block",
    "Filesystem"
)]
#[case::stock_dd_zero_on_fs(
    "fsCleanerCommand: [/scripts/dd_zero.sh]",
    "fsCleanerCommand",
    "Block",
    "Filesystem"
)]
#[case::stock_quick_reset_on_fs(
    "fsCleanerCommand: [/scripts/quick_reset.sh]",
    "fsCleanerCommand",
    "Block",
    "Filesystem"
)]
#[case::stock_blkdiscard_on_fs(
    "fsCleanerCommand: [/scripts/blkdiscard.sh]",
    "fsCleanerCommand",
    "Block",
    "Filesystem"
)]
fn wipe_method_of_the_other_mode_is_refused(
    #[case] body: &str,
    #[case] key: &str,
    #[case] method_mode: &str,
    #[case] class_mode: &str,
) {
    // `problems` panics if the config was accepted.
    let found = problems(&one_class(&format!("hostDir: /mnt/d\n{body}")));
    let prefix = format!("storageClassMap.fast-disks.{key}: ");
    assert!(
        found.iter().any(|p| p.starts_with(&prefix)
            && p.contains(&format!("for {method_mode} classes"))
            && p.contains(&format!("this class is {class_mode}"))),
        "expected {prefix:?} naming {method_mode} and {class_mode} in {found:#?}"
    );
}

/// The chart's schema lists the same spellings the parser accepts.
#[test]
fn chart_schema_lists_the_wipe_method_spellings() {
    let mut parser = WipeMethod::every_spelling();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/localpv/values.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("values.schema.json"))
            .expect("json");
    let mut enums = Vec::new();
    find_wipe_method_enums(&schema, &mut enums);
    assert_eq!(enums.len(), 1, "one wipeMethod enum in {}", path.display());
    let mut chart: Vec<&str> = enums[0].iter().map(String::as_str).collect();
    parser.sort_unstable();
    chart.sort_unstable();
    assert_eq!(chart, parser);
}

fn find_wipe_method_enums(value: &serde_json::Value, out: &mut Vec<Vec<String>>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map {
                if key == "wipeMethod"
                    && let Some(list) = child.get("enum").and_then(|e| e.as_array())
                {
                    out.push(
                        list.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect(),
                    );
                }
                find_wipe_method_enums(child, out);
            }
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|v| find_wipe_method_enums(v, out))
        }
        _ => {}
    }
}

#[rstest]
#[case::bad_volume_mode(
    "hostDir: /mnt/d\nvolumeMode: Blok",
    r#"storageClassMap.fast-disks.volumeMode: "Blok" is not one of Filesystem, Block"#
)]
#[case::missing_host_dir("mountDir: /mnt/d", "storageClassMap.fast-disks.hostDir: required")]
#[case::relative_host_dir(
    "hostDir: mnt/d",
    r#"storageClassMap.fast-disks.hostDir: "mnt/d" is relative; an absolute path is required"#
)]
#[case::relative_mount_dir(
    "hostDir: /mnt/d\nmountDir: ./d",
    r#"storageClassMap.fast-disks.mountDir: "./d" is relative; an absolute path is required"#
)]
#[case::parent_dir(
    "hostDir: /mnt/../etc",
    r#"storageClassMap.fast-disks.hostDir: "/mnt/../etc" contains "..""#
)]
#[case::lone_backslash(
    "hostDir: /mnt/d\nnamePattern: 'vol\\'",
    r#"storageClassMap.fast-disks.namePattern: "vol\\" is not a valid glob: ends with a lone backslash"#
)]
#[case::bad_glob(
    "hostDir: /mnt/d\nnamePattern: \"vol*,[a\"",
    r#"storageClassMap.fast-disks.namePattern: "[a" is not a valid glob"#
)]
#[case::bad_access_mode(
    "hostDir: /mnt/d\naccessMode: RWO",
    r#"storageClassMap.fast-disks.accessMode: "RWO" is not one of ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod"#
)]
#[case::block_method_on_fs_class(
    "hostDir: /mnt/d\nwipeMethod: zeroout",
    r#"storageClassMap.fast-disks.wipeMethod: "zeroout" is not one of remove, command for Filesystem classes"#
)]
#[case::command_without_argv(
    "hostDir: /mnt/d\nvolumeMode: Block\nwipeMethod: command",
    r#"storageClassMap.fast-disks.wipeMethod: "command" needs blockCleanerCommand"#
)]
#[case::empty_argv(
    "hostDir: /mnt/d\nvolumeMode: Block\nblockCleanerCommand: []",
    "storageClassMap.fast-disks.blockCleanerCommand: must name a program (a non-empty list: program, then arguments)"
)]
#[case::selector_not_terms(
    "hostDir: /mnt/d\nselector: {rack: r1}",
    "storageClassMap.fast-disks.selector: expected a list of node selector terms"
)]
#[case::empty_selector_term(
    "hostDir: /mnt/d\nselector: [{}]",
    "storageClassMap.fast-disks.selector[0]: an empty term"
)]
#[case::class_not_a_mapping(
    "[/mnt/d]",
    "storageClassMap.fast-disks: expected a mapping, found a list"
)]
fn invalid_class_keys_are_named_with_their_problem(#[case] body: &str, #[case] expected: &str) {
    let found = problems(&one_class(body));
    assert!(
        found.iter().any(|p| p.starts_with(expected)),
        "expected {expected:?} in {found:#?}"
    );
}

#[rstest]
#[case::bad_duration(
    "minResyncPeriod: 5 minutes",
    r#"minResyncPeriod: "5 minutes" is not a duration"#
)]
#[case::number_duration("minResyncPeriod: 300", "minResyncPeriod: 300 is not a duration")]
#[case::zero_resync("minResyncPeriod: 0s", "minResyncPeriod: must be longer than zero")]
#[case::negative_grace(
    "missingDiskGracePeriod: -1m",
    r#"missingDiskGracePeriod: "-1m" is negative"#
)]
#[case::bad_bool(
    "setPVOwnerRef: maybe",
    r#"setPVOwnerRef: "maybe" is not a boolean (use true or false)"#
)]
#[case::bad_naming(
    "pvNaming: random",
    r#"pvNaming: "random" is not one of localpv, reference"#
)]
#[case::bad_label_key(
    "nodeLabelsForPV: [\"bad key\"]",
    "nodeLabelsForPV[0]: label key \"bad key\" is invalid"
)]
#[case::bad_label_value(
    "labelsForPV: {team: \"a b\"}",
    "labelsForPV.team: label value \"a b\" is invalid"
)]
#[case::labels_not_a_map("labelsForPV: [a]", "labelsForPV: expected a mapping, found a list")]
#[case::bad_class_name(
    "storageClassMap: {Fast_Disks: {hostDir: /mnt/d}}",
    "storageClassMap.Fast_Disks: is not a valid"
)]
fn invalid_global_keys_are_named_with_their_problem(#[case] yaml: &str, #[case] expected: &str) {
    let yaml = if yaml.starts_with("storageClassMap") {
        yaml.to_string()
    } else {
        format!("{yaml}\n{}", one_class("hostDir: /mnt/d"))
    };
    let found = problems(&yaml);
    assert!(
        found.iter().any(|p| p.starts_with(expected)),
        "expected {expected:?} in {found:#?}"
    );
}

#[test]
fn two_classes_on_one_host_dir_are_refused() {
    let yaml = "storageClassMap:\n  a: {hostDir: /mnt/disks}\n  b: {hostDir: /mnt/disks/}\n";
    assert_eq!(
        problems(yaml),
        [
            r#"storageClassMap.b.hostDir: /mnt/disks is also the hostDir of class "a""#,
            r#"storageClassMap.b.mountDir: /mnt/disks is also the mountDir of class "a""#,
        ]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let yaml = "minResyncPeriod: soon\nstorageClassMap:\n  a: {volumeMode: Blok}\n";
    let found = problems(yaml);
    assert_eq!(found.len(), 3, "{found:#?}");
    let err = Config::from_yaml(yaml, "x").expect_err("invalid");
    assert!(
        err.to_string()
            .starts_with("invalid configuration: minResyncPeriod: "),
        "{err}"
    );
}

#[test]
fn malformed_yaml_names_its_origin() {
    let err = Config::from_yaml("storageClassMap: [unclosed", "/etc/localpv/config.yaml")
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "failed to parse /etc/localpv/config.yaml as YAML"
    );
    let files = BTreeMap::from([("storageClassMap".to_string(), "a: [".to_string())]);
    let err = Config::from_files(&files, "/etc/localpv").expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "failed to parse /etc/localpv/storageClassMap as YAML"
    );
}

#[rstest]
#[case::unknown_global("someFutureKey: 1", "someFutureKey: unknown key, ignored")]
#[case::unknown_class_key("", "storageClassMap.fast-disks.colour: unknown key, ignored")]
#[case::job_tolerations("jobTolerations: [{key: a}]", "jobTolerations: accepted but ignored")]
#[case::use_job("useJobForCleaning: on", "useJobForCleaning: accepted but ignored")]
fn unsupported_keys_are_accepted_with_a_warning_naming_them(
    #[case] extra: &str,
    #[case] expected: &str,
) {
    let yaml = match extra.strip_prefix("storageClassMap:\n") {
        Some(more) => format!("{}{more}", one_class("hostDir: /mnt/d\ncolour: red")),
        None => format!("{extra}\n{}", one_class("hostDir: /mnt/d\ncolour: red")),
    };
    let found = warnings(&yaml);
    assert!(
        found.iter().any(|w| w.starts_with(expected)),
        "expected {expected:?} in {found:#?}"
    );
}

#[rstest]
#[case::fs_type_on_block(
    "volumeMode: Block\nfsType: ext4",
    "storageClassMap.fast-disks.fsType: ignored for Block"
)]
#[case::cleaner_shadowed(
    "volumeMode: Block\nwipeMethod: discard\nblockCleanerCommand: [/opt/x]",
    r#"storageClassMap.fast-disks.blockCleanerCommand: ignored: wipeMethod is "discard""#
)]
#[case::stock_script(
    "volumeMode: Block\nblockCleanerCommand: [/scripts/dd_zero.sh]",
    "storageClassMap.fast-disks.blockCleanerCommand: [\"/scripts/dd_zero.sh\"] is a reference provisioner script"
)]
fn settings_without_effect_are_warned_about(#[case] body: &str, #[case] expected: &str) {
    let found = warnings(&one_class(&format!("hostDir: /mnt/d\n{body}")));
    assert!(
        found.iter().any(|w| w.starts_with(expected)),
        "expected {expected:?} in {found:#?}"
    );
}

#[test]
fn an_empty_config_is_valid_but_warned_about() {
    let loaded = parse("");
    assert_eq!(loaded.config.classes, []);
    assert_eq!(loaded.warnings[0].key, "storageClassMap");
}

#[test]
fn our_node_label_is_reserved_in_labels_for_pv() {
    let yaml = format!(
        "labelsForPV: {{{NODE_LABEL}: x}}\n{}",
        one_class("hostDir: /mnt/d")
    );
    let expected = format!("labelsForPV.{NODE_LABEL}: {NODE_LABEL} is set by");
    let found = problems(&yaml);
    assert!(
        found.iter().any(|p| p.starts_with(&expected)),
        "expected {expected:?} in {found:#?}"
    );
}

#[rstest]
#[case::default("", 2, true)]
#[case::set("wipeConcurrency: 4\nwipeIdleIoPriority: \"no\"\n", 4, false)]
fn wipe_share_keys_are_read_with_defaults(
    #[case] extra: &str,
    #[case] workers: usize,
    #[case] idle: bool,
) {
    let text = format!("storageClassMap:\n  local:\n    hostDir: /mnt/disks\n{extra}");
    let config = Config::from_yaml(&text, "test").unwrap().config;
    assert_eq!(
        (config.wipe_concurrency, config.wipe_idle_io_priority),
        (workers, idle)
    );
}

#[test]
fn wipe_concurrency_out_of_range_names_the_key() {
    let text = "storageClassMap:\n  local:\n    hostDir: /mnt/disks\nwipeConcurrency: 0\n";
    let err = Config::from_yaml(text, "test").unwrap_err().to_string();
    assert!(
        err.contains("wipeConcurrency") && err.contains("from 1 to 64"),
        "{err}"
    );
}

#[test]
fn disk_health_thresholds_are_read_and_bad_ones_name_the_key() {
    let yaml = "storageClassMap: {}\ndiskHealthCheckPeriod: 30s\ndiskFailedAfterErrors: 5\n\
                diskGoneGracePeriod: 5m\ndiskHealthyAfter: 1h\n";
    let config = Config::from_yaml(yaml, "test.yaml").expect("valid").config;
    assert_eq!(config.health_check_period, Duration::from_secs(30));
    assert_eq!(config.health.failed_after_errors, 5);
    assert_eq!(config.health.gone_grace, Duration::from_secs(300));
    assert_eq!(config.health.healthy_after, Duration::from_secs(3600));
    for (bad, key) in [
        ("diskHealthCheckPeriod: 100ms", "diskHealthCheckPeriod"),
        ("diskFailedAfterErrors: 0", "diskFailedAfterErrors"),
        ("diskGoneGracePeriod: -1m", "diskGoneGracePeriod"),
    ] {
        let err = Config::from_yaml(&format!("storageClassMap: {{}}\n{bad}\n"), "test.yaml")
            .expect_err(bad)
            .to_string();
        assert!(err.contains(key), "{bad}: {err}");
    }
}

#[rstest]
#[case(
    "removeNodeNotReadyTaint: false\nprovisionerNotReadyNodeTaintKey: a/b\n",
    None
)]
#[case(
    "removeNodeNotReadyTaint: \"yes\"\n",
    Some(crate::config::DEFAULT_STARTUP_TAINT)
)]
#[case(
    "removeNodeNotReadyTaint: true\nprovisionerNotReadyNodeTaintKey: a/b\n",
    Some("a/b")
)]
fn the_startup_taint_is_removed_only_when_asked_with_the_reference_charts_default_key(
    #[case] keys: &str,
    #[case] taint: Option<&str>,
) {
    let loaded = parse(&format!("{keys}{}", one_class("hostDir: /mnt/d")));
    assert_eq!(loaded.config.startup_taint(), taint);
    assert!(
        loaded.warnings.iter().all(|w| !w.key.contains("Taint")),
        "the taint keys are acted on, not warned about: {:?}",
        loaded.warnings
    );
}

/// A Filesystem class's raw devices (published for the kubelet to format) are wiped by a block method: its
/// `blockCleanerCommand` read as a Block class reads it, `zeroout` without one; its `wipeMethod` stays the
/// filesystem method for its mounted disks.
#[rstest]
#[case::default_zeroout("", crate::config::BlockWipe::default())]
#[case::stock_shred(
    "blockCleanerCommand: [/scripts/shred.sh, \"2\"]",
    crate::config::BlockWipe::builtin(crate::contract::BlockMethod::Overwrite).expect("built-in")
)]
#[case::stock_quick_reset(
    "blockCleanerCommand: [/scripts/quick_reset.sh]",
    crate::config::BlockWipe::builtin(crate::contract::BlockMethod::Signatures).expect("built-in")
)]
#[case::own_command(
    "blockCleanerCommand: [/opt/wipe.sh, fast]",
    crate::config::BlockWipe::command(vec!["/opt/wipe.sh".into(), "fast".into()])
)]
fn a_filesystem_class_wipes_its_raw_devices_by_a_block_method(
    #[case] body: &str,
    #[case] expected: crate::config::BlockWipe,
) {
    let loaded = parse(&one_class(&format!("hostDir: /mnt/d\n{body}")));
    let class = loaded.config.class("fast-disks").expect("class");
    assert_eq!(class.wipe, WipeMethod::Filesystem(FsWipe::RemoveContents));
    assert_eq!(class.device_wipe, expected);
    assert_eq!(
        class.wipe_for(VolumeMode::Block),
        WipeMethod::Block(expected)
    );
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}
