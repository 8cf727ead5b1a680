//! Configurations an attacker or a careless operator might write: system directories, the same directory twice
//! (also through symlinks), nested classes, and inputs built to make parsing slow.

use std::path::Path;

use rstest::rstest;

use super::dirs::{ClassDirs, problems as dir_problems, resolve};
use super::*;

fn problems(yaml: &str) -> Vec<String> {
    match Config::from_yaml(yaml, "test.yaml") {
        Ok(loaded) => panic!("config accepted: {loaded:?}"),
        Err(ConfigError::Invalid { problems, .. }) => {
            problems.iter().map(ToString::to_string).collect()
        }
        Err(other) => panic!("expected validation problems, got {other}"),
    }
}

fn dirs(name: &str, host: &str, mount: &str, resolved: &str) -> ClassDirs {
    ClassDirs {
        name: name.into(),
        host_dir: host.into(),
        mount_dir: mount.into(),
        resolved_mount_dir: resolved.into(),
    }
}

#[rstest]
#[case::root("/", "/ contains the system directory /proc")]
#[case::proc("/proc", "/proc is a system directory")]
#[case::sys("/sys", "/sys is a system directory")]
#[case::dev("/dev", "/dev is a system directory")]
#[case::etc("/etc", "/etc is a system directory")]
#[case::boot("/boot", "/boot is a system directory")]
#[case::usr("/usr", "/usr is a system directory")]
#[case::lib64("/lib64", "/lib64 is a system directory")]
#[case::run("/run", "/run is a system directory")]
#[case::var("/var", "/var contains the system directory /var/run")]
#[case::var_lib("/var/lib", "/var/lib contains the system directory /var/lib/kubelet")]
#[case::kubelet("/var/lib/kubelet", "/var/lib/kubelet is a system directory")]
#[case::kubelet_pods(
    "/var/lib/kubelet/pods",
    "/var/lib/kubelet/pods is inside the system directory /var/lib/kubelet"
)]
#[case::dot_spelling("/./proc/", "/proc is a system directory")]
fn a_system_directory_as_host_dir_is_refused_naming_the_key(#[case] dir: &str, #[case] why: &str) {
    let yaml = format!("storageClassMap:\n  evil:\n    hostDir: {dir}\n");
    assert_eq!(
        problems(&yaml),
        [format!("storageClassMap.evil.hostDir: {why}")]
    );
}

#[rstest]
#[case::shm(
    "/dev/shm",
    "/dev/shm is /dev/shm, which is not a directory of block devices"
)]
#[case::in_shm(
    "/dev/shm/x",
    "/dev/shm/x is inside /dev/shm, which is not a directory of block devices"
)]
#[case::pts(
    "/dev/pts",
    "/dev/pts is /dev/pts, which is not a directory of block devices"
)]
#[case::mqueue(
    "/dev/mqueue",
    "/dev/mqueue is /dev/mqueue, which is not a directory of block devices"
)]
#[case::hugepages("/dev/hugepages", "/dev/hugepages is /dev/hugepages, which is not")]
#[case::mapper(
    "/dev/mapper",
    "/dev/mapper is /dev/mapper, which is not a directory of block devices"
)]
#[case::block(
    "/dev/block",
    "/dev/block is /dev/block, which is not a directory of block devices"
)]
#[case::disk("/dev/disk", "/dev/disk is udev's: it links every disk of the node")]
#[case::by_id(
    "/dev/disk/by-id",
    "/dev/disk/by-id is udev's: it links every disk of the node"
)]
#[case::by_anything("/dev/disk/by-whatever/x", "/dev/disk/by-whatever/x is udev's")]
#[case::dev_itself("/dev", "/dev is a system directory")]
#[case::dev_dot_spelling("/dev/.", "/dev is a system directory")]
fn a_dev_directory_that_is_not_a_directory_of_device_links_is_refused(
    #[case] dir: &str,
    #[case] why: &str,
) {
    for mode in ["Block", "Filesystem"] {
        let yaml =
            format!("storageClassMap:\n  evil:\n    hostDir: {dir}\n    volumeMode: {mode}\n");
        let found = problems(&yaml);
        assert_eq!(found.len(), 1, "{dir} ({mode}): {found:?}");
        assert!(
            found[0].starts_with(&format!("storageClassMap.evil.hostDir: {why}")),
            "{dir} ({mode}): {found:?}"
        );
    }
}

/// A directory of its own under `/dev`, where a node's bootstrap links the disks meant for volumes (the reference
/// provisioner's EKS recipe), in either volume mode: discovery confines it to block devices.
#[rstest]
#[case::eks("/dev/disk/kubernetes", "Filesystem")]
#[case::eks_block("/dev/disk/kubernetes", "Block")]
#[case::own("/dev/localpv-disks", "Block")]
#[case::lvm_group("/dev/vg-volumes", "Block")]
fn a_directory_of_device_links_under_dev_is_accepted(#[case] dir: &str, #[case] mode: &str) {
    let yaml = format!("storageClassMap:\n  nvme:\n    hostDir: {dir}\n    volumeMode: {mode}\n");
    Config::from_yaml(&yaml, "test").expect("valid");
}

#[test]
fn a_system_directory_as_mount_dir_is_refused_under_its_own_key() {
    let yaml = "storageClassMap:\n  evil:\n    hostDir: /mnt/disks\n    mountDir: /dev\n";
    assert_eq!(
        problems(yaml),
        ["storageClassMap.evil.mountDir: /dev is a system directory"]
    );
}

#[rstest]
#[case::disks("/mnt/disks")]
#[case::fast("/mnt/fast-disks")]
#[case::tmp_tree("/tmp/localpv-test/disks")]
#[case::var_other("/var/lib/disks")]
#[case::srv("/srv/volumes")]
fn ordinary_discovery_directories_pass(#[case] dir: &str) {
    let yaml = format!("storageClassMap:\n  ok:\n    hostDir: {dir}\n");
    Config::from_yaml(&yaml, "test").expect("valid");
}

#[test]
fn a_mount_dir_resolving_to_root_is_refused_naming_the_key_and_the_target() {
    let found = dir_problems(&[dirs("evil", "/mnt/disks", "/mnt/link", "/")]);
    assert_eq!(
        found.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "storageClassMap.evil.mountDir: /mnt/link resolves to /: / contains the system directory /proc"
        ]
    );
}

#[test]
fn a_host_dir_resolving_to_a_system_directory_is_named_by_host_dir_when_mount_dir_is_defaulted() {
    let found = dir_problems(&[dirs("evil", "/mnt/link", "/mnt/link", "/etc")]);
    assert_eq!(
        found.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["storageClassMap.evil.hostDir: /mnt/link resolves to /etc: /etc is a system directory"]
    );
}

#[test]
fn two_classes_on_one_directory_through_a_symlink_are_refused() {
    let found = dir_problems(&[
        dirs("a", "/mnt/disks", "/mnt/disks", "/mnt/disks"),
        dirs("b", "/mnt/alias", "/mnt/alias", "/mnt/disks"),
    ]);
    assert_eq!(
        found.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            r#"storageClassMap.b.mountDir: /mnt/alias (resolved: /mnt/disks) is also the mountDir of class "a""#
        ]
    );
}

#[rstest]
#[case::inner_second("/mnt", "/mnt/d")]
#[case::outer_second("/mnt/d", "/mnt")]
fn nested_classes_are_refused(#[case] first: &str, #[case] second: &str) {
    let yaml = format!("storageClassMap:\n  a: {{hostDir: {first}}}\n  b: {{hostDir: {second}}}\n");
    let found = problems(&yaml);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("storageClassMap.b.hostDir: ") && p.contains("are nested")),
        "{found:#?}"
    );
}

#[test]
fn nested_classes_through_a_symlink_are_refused() {
    let found = dir_problems(&[
        dirs("a", "/mnt/disks", "/mnt/disks", "/mnt/disks"),
        dirs("b", "/mnt/other", "/mnt/other", "/mnt/disks/fast"),
    ]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].to_string().contains("are nested"), "{found:#?}");
}

#[test]
fn resolve_follows_real_symlinks_and_keeps_missing_tails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).expect("mkdir");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let root_link = tmp.path().join("root");
    std::os::unix::fs::symlink("/", &root_link).expect("symlink");
    let real = std::fs::canonicalize(&real).expect("canonical");
    assert_eq!(resolve(&link), real);
    assert_eq!(resolve(&link.join("later/x")), real.join("later/x"));
    assert_eq!(resolve(&root_link), Path::new("/"));
    assert_eq!(resolve(&root_link.join("proc")), Path::new("/proc"));
}

#[test]
fn loading_from_disk_refuses_a_symlink_to_root_and_two_spellings_of_one_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let disks = tmp.path().join("disks");
    std::fs::create_dir(&disks).expect("mkdir");
    std::os::unix::fs::symlink("/", tmp.path().join("root")).expect("symlink");
    std::os::unix::fs::symlink(&disks, tmp.path().join("alias")).expect("symlink");
    let t = tmp.path().display();
    let file = tmp.path().join("config.yaml");
    let write_and_load = |yaml: String| {
        std::fs::write(&file, yaml).expect("write");
        Config::load(&file)
            .map(|_| ())
            .expect_err("must be refused")
            .to_string()
    };
    let err = write_and_load(format!(
        "storageClassMap:\n  evil:\n    hostDir: {t}/root\n"
    ));
    assert!(
        err.contains("storageClassMap.evil.hostDir:") && err.contains("resolves to /:"),
        "{err}"
    );
    let err = write_and_load(format!(
        "storageClassMap:\n  a:\n    hostDir: {t}/disks\n  b:\n    hostDir: {t}/alias\n"
    ));
    assert!(
        err.contains("storageClassMap.b.mountDir:")
            && err.contains(r#"is also the mountDir of class "a""#),
        "{err}"
    );
}

#[rstest]
#[case::flow_sequences(format!("storageClassMap: {}{}", "[".repeat(100_000), "]".repeat(100_000)))]
#[case::flow_maps(format!("storageClassMap: {}", "{a: ".repeat(50_000)))]
#[case::block_items(format!("storageClassMap:\n{}x\n", "- ".repeat(100_000)))]
#[case::indented_maps((0..1_000).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect::<String>())]
fn deeply_nested_yaml_is_refused_naming_the_limit(#[case] yaml: String) {
    let err = Config::from_yaml(&yaml, "test.yaml")
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("nested") && err.contains("at most 64"),
        "{err}"
    );
}

#[test]
fn a_config_larger_than_the_cap_is_refused_naming_the_limit() {
    let yaml = format!("# {}\nstorageClassMap: {{}}\n", "x".repeat(2 << 20));
    let err = Config::from_yaml(&yaml, "big.yaml")
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("too large") && err.contains("1048576"),
        "{err}"
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    for i in 0..3 {
        std::fs::write(tmp.path().join(format!("k{i}")), "x".repeat(400 << 10)).expect("write");
    }
    let err = Config::load(tmp.path()).expect_err("refused").to_string();
    assert!(
        err.contains("too large") && err.contains("1048576"),
        "{err}"
    );
}

#[test]
fn too_many_classes_are_refused_naming_the_limit() {
    let yaml: String = std::iter::once("storageClassMap:\n".to_string())
        .chain((0..5_000).map(|i| format!("  c{i}:\n    hostDir: /mnt/c{i}\n")))
        .collect();
    let found = match Config::from_yaml(&yaml, "test.yaml") {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}"),
    };
    assert!(
        found
            .iter()
            .any(|p| p.key == "storageClassMap" && p.message.contains("at most 256")),
        "{:?}",
        &found[..3.min(found.len())]
    );
}

#[test]
fn unchanged_text_is_parsed_once_however_often_it_is_loaded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("config.yaml");
    std::fs::write(&file, "storageClassMap:\n  a: {hostDir: /mnt/a}\n").expect("write");
    let mut cache = LoadCache::default();
    for _ in 0..50 {
        cache.load(&file).expect("valid");
    }
    assert_eq!(cache.parses(), 1);
    std::fs::write(&file, "storageClassMap:\n  a: {hostDir: /mnt/b}\n").expect("write");
    let loaded = cache.load(&file).expect("valid");
    assert_eq!(cache.parses(), 2);
    assert_eq!(loaded.config.classes[0].host_dir, Path::new("/mnt/b"));
    std::fs::write(&file, "storageClassMap:\n  a: {hostDir: /proc}\n").expect("write");
    for _ in 0..5 {
        cache.load(&file).expect_err("refused");
    }
    assert_eq!(cache.parses(), 3);
}

#[test]
fn legitimate_nesting_stays_well_below_the_limit() {
    let yaml = "storageClassMap:\n  a:\n    hostDir: /mnt/a\n    selector:\n      - matchExpressions:\n          - key: zone\n            operator: In\n            values: [\"a\", {x: [1]}]\n";
    assert!(
        source::shape(yaml).depth < 16,
        "{}",
        source::shape(yaml).depth
    );
    Config::from_yaml(yaml, "t").map(drop).unwrap_or_else(|e| {
        assert!(!e.to_string().contains("nested"), "{e}");
    });
}

#[test]
fn the_most_classes_allowed_parse() {
    let yaml: String = std::iter::once("storageClassMap:\n".to_string())
        .chain((0..MAX_CLASSES).map(|i| format!("  c{i}:\n    hostDir: /mnt/c{i}\n")))
        .collect();
    let parsed = Config::from_yaml(&yaml, "test.yaml").expect("valid");
    assert_eq!(parsed.config.classes.len(), MAX_CLASSES);
}

/// The agent's state directory nested with a class's directory, as written or through a symlink in `mountDir`
/// (issue 39, point 0c): one problem per class, naming the key and both directories.
#[rstest]
#[case::inside_an_entry("/mnt/disks/vol1/state", "/mnt/disks/vol1/state", Some("hostDir"))]
#[case::the_discovery_dir("/mnt/disks", "/mnt/disks", Some("hostDir"))]
#[case::around_it("/mnt", "/mnt", Some("hostDir"))]
#[case::inside_through_a_symlink("/srv/state", "/host/disks/state", Some("mountDir"))]
#[case::beside_it("/var/lib/localpv", "/var/lib/localpv", None)]
#[case::a_prefix_is_not_a_parent("/mnt/disks2", "/mnt/disks2", None)]
fn a_state_dir_nested_with_a_class_dir_is_refused(
    #[case] state: &str,
    #[case] resolved: &str,
    #[case] key: Option<&str>,
) {
    let classes = [dirs("fast", "/mnt/disks", "/mnt/disks", "/host/disks")];
    let found = super::dirs::state_dir_problems(Path::new(state), Path::new(resolved), &classes);
    let keys: Vec<String> = found.iter().map(|p| p.key.clone()).collect();
    let want: Vec<String> = key
        .map(|k| format!("storageClassMap.fast.{k}"))
        .into_iter()
        .collect();
    assert_eq!(keys, want, "{found:?}");
    for problem in &found {
        assert!(
            problem.message.contains(state) && problem.message.contains("--state-dir"),
            "{problem}"
        );
    }
}

/// Texts under the byte cap whose parsed tree would hold hundreds of thousands of nodes, each many times its text.
#[rstest]
#[case::a_flow_list_of_tiny_items(format!("storageClassMap: {{}}\nx: [{}]\n", vec!["a"; 400_000].join(",")))]
#[case::a_block_list_of_tiny_items(format!("storageClassMap: {{}}\nx:\n{}", "- a\n".repeat(200_000)))]
#[case::many_tiny_keys((0..100_000).map(|i| format!("k{i:x}: 1\n")).collect::<String>())]
#[case::tiny_maps_in_a_flow_list(format!("x: [{}]\n", vec!["{a: b}"; 120_000].join(",")))]
fn many_tiny_entries_are_refused_before_parsing_naming_the_limit(#[case] yaml: String) {
    assert!(yaml.len() as u64 <= MAX_CONFIG_BYTES, "{}", yaml.len());
    let err = Config::from_yaml(&yaml, "test.yaml")
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("entries") && err.contains(&format!("at most {}", source::MAX_ENTRIES)),
        "{err}"
    );
}

#[test]
fn the_largest_legitimate_configuration_stays_below_the_entry_limit() {
    let class = |i: usize| {
        let labels: String = (0..40).map(|l| format!("      l{l}: v\n")).collect();
        format!(
            "  c{i}:\n    hostDir: /mnt/c{i}\n    volumeMode: Filesystem\n    selector:\n      - matchExpressions:\n          - key: zone\n            operator: In\n            values: [a, b, c]\n    labels:\n{labels}"
        )
    };
    let yaml: String = std::iter::once("storageClassMap:\n".to_string())
        .chain((0..MAX_CLASSES).map(class))
        .collect();
    let entries = source::shape(&yaml).entries;
    assert!(entries * 2 < source::MAX_ENTRIES, "{entries}");
}

#[test]
fn an_alias_bomb_is_refused_by_the_parser() {
    // Nine levels of ten references each: a billion scalars if the aliases were expanded.
    let mut yaml = String::from("a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 10].join(",");
        yaml.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    yaml.push_str("storageClassMap: {}\n");
    assert!(source::shape(&yaml).entries < source::MAX_ENTRIES);
    let err = Config::from_yaml(&yaml, "test.yaml").expect_err("refused");
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        source
            .as_deref()
            .is_some_and(|s| s.contains("repetition limit")),
        "{err}: {source:?}"
    );
}
