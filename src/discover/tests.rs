//! Discovery against the fake host: classification rules, identity and capacity plumbing, and every failure path
//! staying confined to the entry or class it happened in.

use std::path::PathBuf;

use rstest::rstest;

use super::*;
use crate::host::fake::{FakeHost, HostCall};
use crate::host::{DirEntry, EntryKind, FsProbe, HardwareIds, VolumeTag};

const HOST_DIR: &str = "/mnt/disks";
const MOUNT_DIR: &str = "/host/mnt/disks";
const BLOCK_HOST_DIR: &str = "/mnt/block";
const BLOCK_MOUNT_DIR: &str = "/host/mnt/block";
const EIO: i32 = 5;
const EACCES: i32 = 13;

fn fs_class() -> DiscoveryClass {
    DiscoveryClass {
        name: "fast".into(),
        host_dir: HOST_DIR.into(),
        mount_dir: MOUNT_DIR.into(),
        mode: VolumeMode::Filesystem,
        name_patterns: vec!["*".into()],
    }
}

fn block_class() -> DiscoveryClass {
    DiscoveryClass {
        name: "raw".into(),
        host_dir: BLOCK_HOST_DIR.into(),
        mount_dir: BLOCK_MOUNT_DIR.into(),
        mode: VolumeMode::Block,
        name_patterns: vec!["*".into()],
    }
}

fn entry(name: &str, kind: EntryKind) -> DirEntry {
    DirEntry {
        name: name.into(),
        kind,
    }
}

fn dir(name: &str) -> DirEntry {
    entry(name, EntryKind::Directory)
}

fn block(major: u32, minor: u32) -> EntryKind {
    EntryKind::BlockDevice {
        rdev: DevId::new(major, minor),
    }
}

fn link_to(kind: EntryKind) -> EntryKind {
    EntryKind::Symlink {
        target: "/dev/somewhere".into(),
        leads_to: Box::new(kind),
    }
}

/// A mountinfo line for a mount at `MOUNT_DIR/<name>`.
fn mount(id: u32, dev: &str, root: &str, name: &str, fs_type: &str, source: &str) -> String {
    format!("{id} 1 {dev} {root} {MOUNT_DIR}/{name} rw,relatime shared:1 - {fs_type} {source} rw\n")
}

fn root_line() -> String {
    "1 0 253:1 / / rw shared:1 - ext4 /dev/vda1 rw\n".into()
}

fn probe_path(name: &str) -> PathBuf {
    PathBuf::from(MOUNT_DIR).join(name)
}

/// Host with the filesystem class directory holding `entries` and the given mounts.
fn host(entries: Vec<DirEntry>, mounts: &[String]) -> FakeHost {
    let table = std::iter::once(root_line())
        .chain(mounts.iter().cloned())
        .collect::<String>();
    FakeHost::new()
        .with_mountinfo(&table)
        .with_dir(MOUNT_DIR, entries)
}

fn reasons(discovery: &Discovery) -> Vec<(&str, UnusableReason)> {
    discovery
        .unusable
        .iter()
        .map(|u| (u.entry.as_str(), u.reason))
        .collect()
}

fn published(discovery: &Discovery) -> Vec<&str> {
    discovery.disks.iter().map(|d| d.entry.as_str()).collect()
}

#[test]
fn a_tmpfs_mount_is_a_disk_sized_by_statvfs_with_no_device() {
    let host = host(
        vec![dir("vol1")],
        &[mount(30, "0:50", "/", "vol1", "tmpfs", "tmpfs")],
    )
    .with_statvfs(probe_path("vol1"), 1 << 30, 1 << 29);
    let discovery = discover(&host, &[fs_class()]);
    assert_eq!(
        discovery.disks,
        vec![Arc::new(Disk {
            class: "fast".into(),
            entry: "vol1".into(),
            host_path: "/mnt/disks/vol1".into(),
            mode: VolumeMode::Filesystem,
            capacity_bytes: 1 << 30,
            available_bytes: Some(1 << 29),
            mount_root: None,
            held: false,
            identity: DiskIdentity {
                dev_id: "0:50".parse().ok(),
                fs_type: Some("tmpfs".into()),
                ..DiskIdentity::default()
            },
        })]
    );
    assert!(discovery.unusable.is_empty() && discovery.failed_classes.is_empty());
    assert!(
        !host
            .calls()
            .iter()
            .any(|c| matches!(c, HostCall::ProbeFilesystem(_) | HostCall::HardwareIds(_)))
    );
}

#[test]
fn a_device_backed_mount_carries_blkid_and_hardware_identity() {
    let mut host = ext4_on_loop0(30, "u-1").with_probe(
        "/dev/loop0",
        FsProbe {
            fs_type: Some("ext4".into()),
            uuid: Some("u-1".into()),
            label: Some("data".into()),
        },
    );
    let ids = HardwareIds {
        serial: Some("S1".into()),
        rotational: Some(false),
        ..HardwareIds::default()
    };
    host.hardware.insert(DevId::new(7, 0), Ok(ids));
    let discovery = discover(&host, &[fs_class()]);
    let identity = &discovery.disks[0].identity;
    assert_eq!(identity.device.as_deref(), Some("/dev/loop0"));
    assert_eq!(identity.dev_id, Some(DevId::new(7, 0)));
    assert_eq!(
        (
            identity.fs_type.as_deref(),
            identity.fs_uuid.as_deref(),
            identity.fs_label.as_deref()
        ),
        (Some("ext4"), Some("u-1"), Some("data"))
    );
    assert_eq!(
        (identity.serial.as_deref(), identity.rotational),
        (Some("S1"), Some(false))
    );
    assert!(
        host.calls()
            .contains(&HostCall::Statvfs(probe_path("vol1"))),
        "probing goes through mount_dir"
    );
}

#[rstest]
#[case::plain_directory(
    dir("plain"),
    UnusableReason::NotAMountPoint,
    r#"path "/mnt/disks/plain" is not a valid mount point"#
)]
#[case::lost_and_found(
    dir("lost+found"),
    UnusableReason::NotAMountPoint,
    "belongs to the filesystem mounted on the discovery directory"
)]
#[case::stray_file(
    entry("notes.txt", EntryKind::File),
    UnusableReason::NotADiskEntry,
    "is a regular file, not a mount point"
)]
#[case::fifo(
    entry("pipe", EntryKind::Fifo),
    UnusableReason::NotADiskEntry,
    "is a fifo"
)]
#[case::dangling_symlink(entry("gone", link_to(EntryKind::Unreadable { error: "No such file or directory".into() })), UnusableReason::NotADiskEntry, "No such file or directory")]
#[case::symlink_to_a_directory(
    entry("link", link_to(EntryKind::Directory)),
    UnusableReason::NotADiskEntry,
    "a symlink to /dev/somewhere (a directory)"
)]
#[case::unreadable(entry("secret", EntryKind::Unreadable { error: "Permission denied".into() }), UnusableReason::ProbeFailed, "failed to inspect path \"/mnt/disks/secret\": Permission denied")]
fn a_filesystem_class_reports_what_is_not_a_mount_point(
    #[case] found: DirEntry,
    #[case] reason: UnusableReason,
    #[case] message: &str,
) {
    let name = found.name.clone();
    let discovery = discover(&host(vec![found], &[]), &[fs_class()]);
    assert!(discovery.disks.is_empty());
    assert_eq!(reasons(&discovery), vec![(name.as_str(), reason)]);
    let text = &discovery.unusable[0].message;
    assert!(text.contains(message), "{text}");
    assert_eq!(
        discovery.unusable[0].host_path,
        PathBuf::from(HOST_DIR).join(&name)
    );
}

/// Overlapping mounts (nested roots on one device) are all found: which one may be published depends on the PVs,
/// which the planner decides (`plan::decide::overlap`), never on the order of names.
#[rstest]
#[case::same_device_bind_mount_twice(&[("a", "7:0", "/"), ("b", "7:0", "/")])]
#[case::nested_roots(&[("a", "7:0", "/"), ("b", "7:0", "/data")])]
#[case::nested_roots_first_is_deeper(&[("a", "7:0", "/data/x"), ("b", "7:0", "/data")])]
#[case::disjoint_sub_directories(&[("a", "7:0", "/one"), ("b", "7:0", "/two")])]
#[case::last_by_name_is_found_too(&[("z", "0:60", "/"), ("m", "0:60", "/")])]
fn overlapping_mounts_are_all_found_with_their_roots(#[case] mounts: &[(&str, &str, &str)]) {
    let entries = mounts.iter().map(|(name, _, _)| dir(name)).collect();
    let lines: Vec<String> = mounts
        .iter()
        .enumerate()
        .map(|(i, (name, dev, root))| mount(30 + i as u32, dev, root, name, "tmpfs", "tmpfs"))
        .collect();
    let mut host = host(entries, &lines);
    for (name, _, _) in mounts {
        host = host.with_statvfs(probe_path(name), 10, 5);
    }
    let discovery = discover(&host, &[fs_class()]);
    let mut names: Vec<&str> = mounts.iter().map(|(name, _, _)| *name).collect();
    names.sort_unstable();
    assert_eq!(published(&discovery), names);
    assert!(discovery.unusable.is_empty(), "{:?}", discovery.unusable);
    for (name, _, root) in mounts {
        let disk = discovery
            .disks
            .iter()
            .find(|d| d.entry == *name)
            .expect("found");
        let want = (*root != "/").then(|| root.to_string());
        assert_eq!(disk.mount_root, want, "{name}");
    }
}

#[test]
fn a_bind_mount_of_a_sub_directory_records_its_root() {
    let host = host(
        vec![dir("vol1")],
        &[mount(30, "0:50", "/data/sub", "vol1", "tmpfs", "tmpfs")],
    )
    .with_statvfs(probe_path("vol1"), 10, 5);
    let discovery = discover(&host, &[fs_class()]);
    assert_eq!(discovery.disks[0].mount_root.as_deref(), Some("/data/sub"));
}

#[test]
fn the_top_mount_of_a_stack_is_the_one_described() {
    let host = host(
        vec![dir("vol1")],
        &[
            mount(30, "0:50", "/", "vol1", "tmpfs", "tmpfs"),
            mount(31, "0:51", "/", "vol1", "ramfs", "ramfs"),
        ],
    )
    .with_statvfs(probe_path("vol1"), 10, 5);
    let identity = &discover(&host, &[fs_class()]).disks[0].identity;
    assert_eq!(
        (identity.dev_id, identity.fs_type.as_deref()),
        (Some(DevId::new(0, 51)), Some("ramfs"))
    );
}

#[test]
fn a_block_class_publishes_block_devices_and_symlinks_to_them() {
    let host = FakeHost::new()
        .with_mountinfo(&root_line())
        .with_dir(
            BLOCK_MOUNT_DIR,
            vec![
                entry("dev1", block(7, 1)),
                entry("dev2", link_to(block(7, 2))),
            ],
        )
        .with_block_size("/host/mnt/block/dev1", 1 << 20)
        .with_block_size("/host/mnt/block/dev2", 2 << 20)
        .with_probe("/host/mnt/block/dev1", FsProbe::default())
        .with_probe(
            "/host/mnt/block/dev2",
            FsProbe {
                fs_type: Some("xfs".into()),
                ..FsProbe::default()
            },
        )
        .with_device_node(DevId::new(7, 2), "/dev/loop2");
    let discovery = discover(&host, &[block_class()]);
    let summary: Vec<_> = discovery
        .disks
        .iter()
        .map(|d| {
            (
                d.entry.as_str(),
                d.mode,
                d.capacity_bytes,
                d.available_bytes,
                d.identity.device.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("dev1", VolumeMode::Block, 1 << 20, None, None),
            ("dev2", VolumeMode::Block, 2 << 20, None, Some("/dev/loop2")),
        ]
    );
    assert_eq!(discovery.disks[1].identity.fs_type.as_deref(), Some("xfs"));
    assert_eq!(
        discovery.disks[1].host_path,
        PathBuf::from("/mnt/block/dev2")
    );
}

#[rstest]
#[case::mounted_directory(
    dir("mnt"),
    true,
    UnusableReason::WrongVolumeMode,
    "publishes Block volumes"
)]
#[case::plain_directory(
    dir("plain"),
    false,
    UnusableReason::NotADiskEntry,
    "is a directory, not a block device"
)]
#[case::stray_file(
    entry("f", EntryKind::File),
    false,
    UnusableReason::NotADiskEntry,
    "is a regular file"
)]
#[case::symlink_to_a_file(
    entry("l", link_to(EntryKind::File)),
    false,
    UnusableReason::NotADiskEntry,
    "(a regular file)"
)]
#[case::char_device(
    entry("null", EntryKind::CharDevice),
    false,
    UnusableReason::NotADiskEntry,
    "a character device"
)]
fn a_block_class_reports_what_is_not_a_block_device(
    #[case] found: DirEntry,
    #[case] mounted: bool,
    #[case] reason: UnusableReason,
    #[case] message: &str,
) {
    let mut table = root_line();
    if mounted {
        table.push_str(&format!(
            "30 1 0:50 / {BLOCK_MOUNT_DIR}/{} rw - tmpfs tmpfs rw\n",
            found.name
        ));
    }
    let host = FakeHost::new()
        .with_mountinfo(&table)
        .with_dir(BLOCK_MOUNT_DIR, vec![found]);
    let discovery = discover(&host, &[block_class()]);
    assert!(discovery.disks.is_empty());
    assert_eq!(discovery.unusable[0].reason, reason);
    assert!(
        discovery.unusable[0].message.contains(message),
        "{}",
        discovery.unusable[0].message
    );
}

#[rstest]
#[case::published_by_a_filesystem_class("7:0", "/host/mnt/disks/vol1")]
#[case::mounted_outside_any_discovery_directory("253:1", "/")]
fn a_block_entry_for_a_mounted_device_is_in_use(#[case] dev: &str, #[case] mounted_on: &str) {
    let host = host(
        vec![dir("vol1")],
        &[mount(30, "7:0", "/", "vol1", "ext4", "/dev/loop0")],
    )
    .with_statvfs(probe_path("vol1"), 100, 40)
    .with_probe("/dev/loop0", FsProbe::default())
    .with_device_node(DevId::new(7, 0), "/dev/loop0")
    .with_dir(
        BLOCK_MOUNT_DIR,
        vec![entry(
            "dev0",
            link_to(
                dev.parse::<DevId>()
                    .map(|d| block(d.major, d.minor))
                    .expect("dev"),
            ),
        )],
    );
    let discovery = discover(&host, &[block_class(), fs_class()]);
    assert_eq!(published(&discovery), vec!["vol1"]);
    assert_eq!(
        reasons(&discovery),
        vec![("dev0", UnusableReason::DeviceInUse)]
    );
    let message = &discovery.unusable[0].message;
    assert!(
        message.contains(&format!("which is mounted on {mounted_on}:")),
        "{message}"
    );
}

#[test]
fn two_block_entries_for_one_device_are_both_found_for_the_planner() {
    let host = FakeHost::new()
        .with_mountinfo(&root_line())
        .with_dir(
            BLOCK_MOUNT_DIR,
            vec![entry("b", link_to(block(7, 1))), entry("a", block(7, 1))],
        )
        .with_block_size("/host/mnt/block/a", 1 << 20)
        .with_probe("/host/mnt/block/a", FsProbe::default())
        .with_block_size("/host/mnt/block/b", 1 << 20)
        .with_probe("/host/mnt/block/b", FsProbe::default());
    let discovery = discover(&host, &[block_class()]);
    assert_eq!(published(&discovery), vec!["a", "b"]);
    assert!(discovery.unusable.is_empty(), "{:?}", discovery.unusable);
}

#[rstest]
#[case::statvfs_fails("statvfs")]
#[case::blkid_fails("probe")]
fn a_probe_failure_spoils_only_its_own_entry(#[case] failing: &str) {
    let mut host = host(
        vec![dir("bad"), dir("good")],
        &[
            mount(30, "7:0", "/", "bad", "ext4", "/dev/loop0"),
            mount(31, "0:50", "/", "good", "tmpfs", "tmpfs"),
        ],
    )
    .with_statvfs(probe_path("bad"), 100, 40)
    .with_statvfs(probe_path("good"), 10, 5)
    .with_device_node(DevId::new(7, 0), "/dev/loop0")
    .with_probe("/dev/loop0", FsProbe::default());
    match failing {
        "statvfs" => host.statvfs.insert(probe_path("bad"), Err(EIO)).map(drop),
        _ => host
            .probes
            .insert("/dev/loop0".into(), Err(EACCES))
            .map(drop),
    };
    let discovery = discover(&host, &[fs_class()]);
    assert_eq!(published(&discovery), vec!["good"]);
    assert_eq!(
        reasons(&discovery),
        vec![("bad", UnusableReason::ProbeFailed)]
    );
    assert!(
        discovery.unusable[0]
            .message
            .starts_with(r#"failed to inspect path "/mnt/disks/bad": failed to"#)
    );
}

#[test]
fn missing_hardware_ids_do_not_fail_the_entry() {
    let mut host = host(
        vec![dir("vol1")],
        &[mount(30, "7:0", "/", "vol1", "ext4", "/dev/loop0")],
    )
    .with_statvfs(probe_path("vol1"), 100, 40)
    .with_device_node(DevId::new(7, 0), "/dev/loop0")
    .with_probe("/dev/loop0", FsProbe::default());
    host.hardware.insert(DevId::new(7, 0), Err(EIO));
    let discovery = discover(&host, &[fs_class()]);
    assert_eq!(published(&discovery), vec!["vol1"]);
    assert_eq!(discovery.disks[0].identity.serial, None);
}

#[test]
fn an_unreadable_directory_fails_its_class_only() {
    let mut host = FakeHost::new()
        .with_mountinfo(&root_line())
        .with_dir(BLOCK_MOUNT_DIR, vec![entry("dev1", block(7, 1))])
        .with_block_size("/host/mnt/block/dev1", 1 << 20)
        .with_probe("/host/mnt/block/dev1", FsProbe::default());
    host.dirs.insert(MOUNT_DIR.into(), Err(EACCES));
    host.canonical
        .insert(MOUNT_DIR.into(), Ok(MOUNT_DIR.into()));
    let discovery = discover(&host, &[fs_class(), block_class()]);
    assert_eq!(published(&discovery), vec!["dev1"]);
    assert_eq!(discovery.failed_classes.len(), 1);
    let failure = &discovery.failed_classes[0];
    assert_eq!(
        (failure.class.as_str(), failure.mount_dir.as_path()),
        ("fast", std::path::Path::new(MOUNT_DIR))
    );
    assert!(
        failure
            .message
            .contains("failed to list directory /host/mnt/disks: Permission denied"),
        "{}",
        failure.message
    );
}

#[test]
fn an_unreadable_mount_table_fails_filesystem_classes_but_not_block_classes() {
    let mut host = FakeHost::new()
        .with_dir(MOUNT_DIR, vec![dir("vol1")])
        .with_dir(BLOCK_MOUNT_DIR, vec![entry("dev1", block(7, 1))])
        .with_block_size("/host/mnt/block/dev1", 1 << 20)
        .with_probe("/host/mnt/block/dev1", FsProbe::default());
    host.mountinfo = Some(Err(EIO));
    let discovery = discover(&host, &[fs_class(), block_class()]);
    assert_eq!(published(&discovery), vec!["dev1"]);
    assert_eq!(
        discovery
            .failed_classes
            .iter()
            .map(|f| f.class.as_str())
            .collect::<Vec<_>>(),
        vec!["fast"]
    );
    assert!(
        discovery.failed_classes[0]
            .message
            .contains("failed to read the mount table")
    );
}

#[test]
fn a_discovery_directory_reached_through_a_symlink_is_matched_by_its_real_path() {
    let mut host = FakeHost::new()
        .with_mountinfo(&format!(
            "{}30 1 0:50 / /real/disks/vol1 rw - tmpfs tmpfs rw\n",
            root_line()
        ))
        .with_dir(MOUNT_DIR, vec![dir("vol1")])
        .with_statvfs(probe_path("vol1"), 10, 5);
    host.canonical
        .insert(MOUNT_DIR.into(), Ok("/real/disks".into()));
    assert_eq!(published(&discover(&host, &[fs_class()])), vec!["vol1"]);
}

/// The mount table is looked up by entry name within each directory; paths match as they would component by
/// component, however the directory is spelled, and only a mount directly in the directory is an entry's.
#[rstest]
#[case::plain("/real/disks", "/real/disks/vol1")]
#[case::trailing_separator("/real/disks/", "/real/disks/vol1")]
#[case::repeated_separator("/real//disks", "/real/disks/vol1")]
#[case::dot_component("/real/./disks", "/real/disks/vol1")]
#[case::spelled_oddly_in_the_table("/real/disks", "/real//disks/./vol1")]
#[case::the_root_directory("/", "/vol1")]
fn an_entrys_mount_is_found_however_the_directory_is_spelled(
    #[case] resolved: &str,
    #[case] mount_point: &str,
) {
    let mut host = FakeHost::new()
        .with_mountinfo(&format!(
            "{}30 1 0:50 / {mount_point} rw - tmpfs tmpfs rw\n31 1 0:51 / {mount_point}/vol2 rw - tmpfs t rw\n",
            root_line()
        ))
        .with_dir(MOUNT_DIR, vec![dir("vol1"), dir("vol2")])
        .with_statvfs(probe_path("vol1"), 10, 5);
    host.canonical.insert(MOUNT_DIR.into(), Ok(resolved.into()));
    let found = discover(&host, &[fs_class()]);
    assert_eq!(published(&found), vec!["vol1"]);
    // vol2's mount lies inside vol1, not in the directory: vol2 is an empty directory.
    assert_eq!(
        reasons(&found),
        vec![("vol2", UnusableReason::NotAMountPoint)]
    );
}

#[rstest]
#[case::only_matching_entries(vec!["vol*".to_string()], vec!["vol1", "vol2"], 0)]
#[case::exact_name(vec!["vol1".to_string()], vec!["vol1"], 0)]
#[case::any_of_several_patterns(vec!["x*".to_string(), "v?l2".to_string()], vec!["vol2"], 0)]
#[case::malformed_pattern_fails_the_class(vec!["vol[".to_string()], vec![], 1)]
fn name_patterns_select_entries(
    #[case] patterns: Vec<String>,
    #[case] disks: Vec<&str>,
    #[case] failed: usize,
) {
    let host = host(
        vec![dir("vol1"), dir("vol2"), dir("other")],
        &[
            mount(30, "0:50", "/", "vol1", "tmpfs", "tmpfs"),
            mount(31, "0:51", "/", "vol2", "tmpfs", "tmpfs"),
        ],
    )
    .with_statvfs(probe_path("vol1"), 10, 5)
    .with_statvfs(probe_path("vol2"), 10, 5);
    let class = DiscoveryClass {
        name_patterns: patterns,
        ..fs_class()
    };
    let discovery = discover(&host, &[class]);
    assert_eq!(published(&discovery), disks);
    assert!(
        discovery.unusable.is_empty(),
        "unmatched entries are not ours to report"
    );
    assert_eq!(discovery.failed_classes.len(), failed);
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[rstest]
#[case::zero(0, 0)]
#[case::small_is_exact(10 * MIB - 1, 10 * MIB - 1)]
#[case::ten_mib_exact(10 * MIB, 10 * MIB)]
#[case::mib_rounded_down(10 * MIB + 12345, 10 * MIB)]
#[case::just_below_ten_gib(10 * GIB - 1, 10 * GIB - MIB)]
#[case::ten_gib_exact(10 * GIB, 10 * GIB)]
#[case::gib_rounded_down(10 * GIB + 3 * MIB, 10 * GIB)]
#[case::large(1000 * GIB + GIB - 1, 1000 * GIB)]
fn capacity_rounds_down_like_the_reference_provisioner(#[case] bytes: u64, #[case] rounded: u64) {
    assert_eq!(round_capacity(bytes), rounded);
}

#[rstest]
#[case::tagged(Ok(VolumeTag::Present("v1".into())), Some("v1"), false)]
#[case::untagged(Ok(VolumeTag::Absent), None, false)]
#[case::no_extended_attributes(Ok(VolumeTag::Unsupported), None, true)]
fn the_agents_volume_id_is_read_from_the_volume_root(
    #[case] tag: Result<VolumeTag, i32>,
    #[case] volume_id: Option<&str>,
    #[case] unsupported: bool,
) {
    let host = host(
        vec![dir("vol1")],
        &[mount(30, "0:50", "/", "vol1", "tmpfs", "tmpfs")],
    )
    .with_statvfs(probe_path("vol1"), 1 << 30, 1 << 29);
    host.volume_ids
        .lock()
        .unwrap()
        .insert(probe_path("vol1"), tag);
    let discovery = discover(&host, &[fs_class()]);
    let identity = &discovery.disks[0].identity;
    assert_eq!(
        (
            identity.volume_id.as_deref(),
            identity.volume_id_unsupported
        ),
        (volume_id, unsupported)
    );
    assert!(
        host.calls()
            .contains(&HostCall::VolumeId(probe_path("vol1")))
    );
}

#[test]
fn an_unreadable_volume_id_spoils_only_its_entry_and_block_entries_are_never_asked() {
    let host = host(
        vec![dir("vol1")],
        &[mount(30, "0:50", "/", "vol1", "tmpfs", "tmpfs")],
    )
    .with_statvfs(probe_path("vol1"), 1 << 30, 1 << 29)
    .with_dir(BLOCK_MOUNT_DIR, vec![entry("raw", block(7, 3))])
    .with_block_size(PathBuf::from(BLOCK_MOUNT_DIR).join("raw"), 1 << 30)
    .with_probe(
        PathBuf::from(BLOCK_MOUNT_DIR).join("raw"),
        FsProbe::default(),
    );
    host.volume_ids
        .lock()
        .unwrap()
        .insert(probe_path("vol1"), Err(EACCES));
    let discovery = discover(&host, &[fs_class(), block_class()]);
    assert_eq!(published(&discovery), vec!["raw"]);
    assert_eq!(
        reasons(&discovery),
        vec![("vol1", UnusableReason::ProbeFailed)]
    );
    assert!(!host.calls().iter().any(
        |c| matches!(c, HostCall::VolumeId(p) | HostCall::TagVolume(p) if p.starts_with(BLOCK_MOUNT_DIR))
    ));
}

// ---- measurements reused across passes ----

fn statvfs_calls(host: &FakeHost) -> Vec<PathBuf> {
    host.calls()
        .into_iter()
        .filter_map(|c| match c {
            HostCall::Statvfs(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn tmpfs_host(mounts: &[(u32, &str)]) -> FakeHost {
    let entries = mounts.iter().map(|(_, name)| dir(name)).collect();
    let lines: Vec<String> = mounts
        .iter()
        .map(|(id, name)| mount(*id, &format!("0:{id}"), "/", name, "tmpfs", "tmpfs"))
        .collect();
    let mut host = host(entries, &lines).with_unique_ids();
    for (_, name) in mounts {
        host = host.with_statvfs(probe_path(name), 10, 5);
    }
    host
}

#[test]
fn a_pass_after_one_new_mount_measures_only_that_mount() {
    let mut probed = Probed::default();
    let before = tmpfs_host(&[(30, "vol1"), (31, "vol2")]);
    discover_with(&before, &[fs_class()], &mut probed);
    assert_eq!(probed.last_measured, 2);
    let after = tmpfs_host(&[(30, "vol1"), (31, "vol2"), (32, "vol3")]);
    let discovery = discover_with(&after, &[fs_class()], &mut probed);
    assert_eq!(published(&discovery), ["vol1", "vol2", "vol3"]);
    assert_eq!(statvfs_calls(&after), [probe_path("vol3")]);
    assert_eq!(probed.last_measured, 1);
}

fn dir_reads(host: &FakeHost) -> usize {
    host.calls()
        .iter()
        .filter(|c| matches!(c, HostCall::ReadDir(_)))
        .count()
}

fn named(names: &[&str]) -> HostChanges {
    HostChanges {
        mounts: true,
        entries: names
            .iter()
            .map(|n| (PathBuf::from(MOUNT_DIR), (*n).into()))
            .collect(),
        list_all: false,
    }
}

#[test]
fn a_pass_after_a_named_entry_and_a_mount_looks_at_that_entry_alone() {
    let mut probed = Probed::default();
    discover_with(
        &tmpfs_host(&[(30, "vol1"), (31, "vol2")]),
        &[fs_class()],
        &mut probed,
    );
    let after = tmpfs_host(&[(30, "vol1"), (31, "vol2"), (32, "vol3")]);
    let discovery = discover_changed(&after, &[fs_class()], &mut probed, &named(&["vol3"]));
    assert_eq!(published(&discovery), ["vol1", "vol2", "vol3"]);
    assert_eq!(dir_reads(&after), 0, "the directory is not listed again");
    assert!(
        after
            .calls()
            .contains(&HostCall::DirEntry(PathBuf::from(MOUNT_DIR).join("vol3")))
    );
    assert_eq!(statvfs_calls(&after), [probe_path("vol3")]);
    // Only a mount event (the directory existed): the listing stands, the new mount table decides.
    let unmounted = tmpfs_host(&[(30, "vol1"), (32, "vol3")])
        .with_dir(MOUNT_DIR, vec![dir("vol1"), dir("vol2"), dir("vol3")]);
    let discovery = discover_changed(&unmounted, &[fs_class()], &mut probed, &named(&[]));
    assert_eq!(published(&discovery), ["vol1", "vol3"]);
    assert_eq!(dir_reads(&unmounted), 0);
    assert_eq!(
        reasons(&discovery),
        [("vol2", UnusableReason::NotAMountPoint)]
    );
    // A named entry that is gone leaves the listing.
    let removed = tmpfs_host(&[(30, "vol1"), (32, "vol3")]);
    let discovery = discover_changed(&removed, &[fs_class()], &mut probed, &named(&["vol2"]));
    assert_eq!(published(&discovery), ["vol1", "vol3"]);
    assert!(discovery.unusable.is_empty(), "{:?}", discovery.unusable);
}

#[test]
fn a_listing_with_a_symlink_or_a_failed_class_is_not_reused() {
    let mut probed = Probed::default();
    let with_link = || {
        tmpfs_host(&[(30, "vol1")]).with_dir(
            MOUNT_DIR,
            vec![dir("vol1"), entry("link", link_to(EntryKind::Directory))],
        )
    };
    discover_with(&with_link(), &[fs_class()], &mut probed);
    let again = with_link();
    discover_changed(&again, &[fs_class()], &mut probed, &named(&[]));
    assert_eq!(
        dir_reads(&again),
        1,
        "a symlink's target can change with no event in the directory"
    );
    let mut probed = Probed::default();
    let mut failing = FakeHost::new().with_mountinfo(&root_line());
    failing.dirs.insert(MOUNT_DIR.into(), Err(EACCES));
    discover_with(&failing, &[fs_class()], &mut probed);
    let fixed = tmpfs_host(&[(30, "vol1")]);
    let discovery = discover_changed(&fixed, &[fs_class()], &mut probed, &named(&[]));
    assert_eq!(
        published(&discovery),
        ["vol1"],
        "a class that failed is listed again"
    );
    let everything = tmpfs_host(&[(30, "vol1")]);
    discover_changed(&everything, &[fs_class()], &mut probed, &HostChanges::all());
    assert_eq!(dir_reads(&everything), 1);
}

#[test]
fn another_mount_at_the_same_path_is_measured_again() {
    let mut probed = Probed::default();
    discover_with(&tmpfs_host(&[(30, "vol1")]), &[fs_class()], &mut probed);
    let swapped = tmpfs_host(&[(40, "vol1")]);
    let discovery = discover_with(&swapped, &[fs_class()], &mut probed);
    assert_eq!(statvfs_calls(&swapped), [probe_path("vol1")]);
    assert_eq!(discovery.disks[0].identity.dev_id, Some(DevId::new(0, 40)));
}

#[test]
fn a_forgotten_or_cleared_entry_is_measured_again_and_gone_entries_are_dropped() {
    let mut probed = Probed::default();
    let host = || tmpfs_host(&[(30, "vol1"), (31, "vol2")]);
    discover_with(&host(), &[fs_class()], &mut probed);
    probed.forget(&PathBuf::from(HOST_DIR).join("vol2"));
    let again = host();
    discover_with(&again, &[fs_class()], &mut probed);
    assert_eq!(statvfs_calls(&again), [probe_path("vol2")]);
    probed.clear();
    let resync = host();
    discover_with(&resync, &[fs_class()], &mut probed);
    assert_eq!(statvfs_calls(&resync).len(), 2);
    discover_with(&tmpfs_host(&[(30, "vol1")]), &[fs_class()], &mut probed);
    assert_eq!(probed.len(), 1, "an unmounted entry is not kept");
}

#[test]
fn block_entries_are_measured_on_every_pass() {
    let host = || {
        FakeHost::new()
            .with_mountinfo(&root_line())
            .with_dir(BLOCK_MOUNT_DIR, vec![entry("raw1", block(7, 3))])
            .with_block_size(PathBuf::from(BLOCK_MOUNT_DIR).join("raw1"), 1 << 20)
    };
    let mut probed = Probed::default();
    discover_with(&host(), &[block_class()], &mut probed);
    let again = host();
    discover_with(&again, &[block_class()], &mut probed);
    assert_eq!(probed.last_measured, 1);
    assert!(
        again
            .calls()
            .iter()
            .any(|c| matches!(c, HostCall::BlockDeviceSize(_)))
    );
}

#[test]
fn a_pass_on_an_unchanged_host_measures_only_forgotten_entries_and_reads_no_listing() {
    let mut probed = Probed::default();
    let host = tmpfs_host(&[(30, "vol1"), (31, "vol2")]);
    let first = discover_with(&host, &[fs_class()], &mut probed);
    probed.forget(&PathBuf::from(HOST_DIR).join("vol2"));
    let again = tmpfs_host(&[(30, "vol1"), (31, "vol2")]);
    let discovery = discover_again(&again, &[fs_class()], &mut probed);
    assert_eq!(discovery, first);
    assert_eq!(
        again.calls(),
        [
            HostCall::Statvfs(probe_path("vol2")),
            HostCall::VolumeId(probe_path("vol2"))
        ]
    );
    assert_eq!(probed.last_measured, 1);
}

#[test]
fn a_pass_after_a_resync_or_with_other_classes_lists_the_host_again() {
    let mut probed = Probed::default();
    discover_with(&tmpfs_host(&[(30, "vol1")]), &[fs_class()], &mut probed);
    probed.clear();
    let resync = tmpfs_host(&[(30, "vol1"), (31, "vol2")]);
    assert_eq!(
        published(&discover_again(&resync, &[fs_class()], &mut probed)),
        ["vol1", "vol2"]
    );
    let mut other = fs_class();
    other.name = "other".into();
    let reconfigured = tmpfs_host(&[(30, "vol1")]);
    discover_again(&reconfigured, &[other], &mut probed);
    assert!(reconfigured.calls().contains(&HostCall::MountTable));
}

/// A pass on an unchanged host keeps every other measurement as it was, the very same allocation (the planner
/// recognises unchanged disks by address), and measures again what failed and what was forgotten; after a listing
/// pass (positions start over) the next unchanged pass measures only what failed.
#[test]
fn a_pass_on_an_unchanged_host_keeps_the_same_disks_and_measures_again_what_failed() {
    let lines: Vec<String> = [(30, "vol1"), (31, "vol2"), (32, "vol3")]
        .iter()
        .map(|(id, name)| mount(*id, &format!("0:{id}"), "/", name, "tmpfs", "tmpfs"))
        .collect();
    // vol2 cannot be measured: the fake host has no statvfs answer for it.
    let host = || {
        host(vec![dir("vol1"), dir("vol2"), dir("vol3")], &lines)
            .with_statvfs(probe_path("vol1"), 10, 5)
            .with_statvfs(probe_path("vol3"), 10, 5)
    };
    let mut probed = Probed::default();
    let first = discover_with(&host(), &[fs_class()], &mut probed);
    assert_eq!(published(&first), ["vol1", "vol3"]);
    let again = host();
    let second = discover_again(&again, &[fs_class()], &mut probed);
    assert_eq!(
        statvfs_calls(&again),
        [probe_path("vol2")],
        "only what failed"
    );
    assert_eq!(second, first);
    assert!(
        first
            .disks
            .iter()
            .zip(&second.disks)
            .all(|(a, b)| Arc::ptr_eq(a, b)),
        "unchanged disks are the same allocations"
    );
    probed.forget(&PathBuf::from(HOST_DIR).join("vol3"));
    let listed = host();
    discover_with(&listed, &[fs_class()], &mut probed);
    assert_eq!(
        statvfs_calls(&listed),
        [probe_path("vol2"), probe_path("vol3")]
    );
    let third = host();
    discover_again(&third, &[fs_class()], &mut probed);
    assert_eq!(statvfs_calls(&third), [probe_path("vol2")]);
}

/// What a raw device (or a link to one) in a Filesystem class comes to: the reference provisioner publishes it for
/// the kubelet to format. Its medium is `Block` (identity, wipe and checks of a device); a mount of it this process
/// can see refuses it (`DeviceInUse`); one the kernel says is held elsewhere is found `held` for the planner; a
/// kernel that cannot tell refuses it (`ProbeFailed`).
#[rstest]
#[case::free_device(entry("sdb", block(8, 16)), None, Ok(false), Ok(false))]
#[case::free_link(entry("disk", link_to(block(8, 16))), None, Ok(false), Ok(false))]
#[case::held_elsewhere(entry("disk", link_to(block(8, 16))), None, Ok(true), Ok(true))]
#[case::mounted_here(
    entry("disk", link_to(block(8, 16))),
    Some("/srv/data"),
    Ok(false),
    Err(UnusableReason::DeviceInUse)
)]
#[case::cannot_tell(
    entry("disk", link_to(block(8, 16))),
    None,
    Err(EIO),
    Err(UnusableReason::ProbeFailed)
)]
fn a_raw_device_in_a_filesystem_class_is_a_device_candidate(
    #[case] found: DirEntry,
    #[case] mounted_on: Option<&str>,
    #[case] claimed: Result<bool, i32>,
    #[case] expected: Result<bool, UnusableReason>,
) {
    let name = found.name.clone();
    let probe = format!("{MOUNT_DIR}/{name}");
    let mounts: Vec<String> = mounted_on
        .map(|at| format!("40 1 8:16 / {at} rw - ext4 /dev/sdb rw\n"))
        .into_iter()
        .collect();
    let mut host = host(vec![found], &mounts)
        .with_block_size(&probe, 1 << 30)
        .with_probe(&probe, FsProbe::default());
    host.claimed.insert(probe.clone().into(), claimed);
    let discovery = discover(&host, &[fs_class()]);
    match expected {
        Ok(held) => {
            assert!(discovery.unusable.is_empty(), "{:?}", discovery.unusable);
            let disk = &discovery.disks[0];
            assert_eq!((disk.mode, disk.held), (VolumeMode::Block, held));
            assert_eq!(disk.capacity_bytes, 1 << 30);
            assert_eq!(disk.host_path, PathBuf::from(HOST_DIR).join(&name));
        }
        Err(reason) => {
            assert!(discovery.disks.is_empty(), "{:?}", discovery.disks);
            assert_eq!(reasons(&discovery), vec![(name.as_str(), reason)]);
        }
    }
}

/// vol1: an ext4 filesystem with `uuid` on /dev/loop0, mounted with mountinfo id `id`.
fn ext4_on_loop0(id: u32, uuid: &str) -> FakeHost {
    host(
        vec![dir("vol1")],
        &[mount(id, "7:0", "/", "vol1", "ext4", "/dev/loop0")],
    )
    .with_statvfs(probe_path("vol1"), 100, 40)
    .with_device_node(DevId::new(7, 0), "/dev/loop0")
    .with_probe(
        "/dev/loop0",
        FsProbe {
            fs_type: Some("ext4".into()),
            uuid: Some(uuid.into()),
            label: None,
        },
    )
}

/// The filesystem class's pass after a mount event that named no entry.
fn after_a_mount_event(host: &FakeHost, probed: &mut Probed) -> Discovery {
    discover_changed(host, &[fs_class()], probed, &named(&[]))
}

fn fs_uuid(discovery: &Discovery) -> Vec<Option<&str>> {
    discovery
        .disks
        .iter()
        .map(|d| d.identity.fs_uuid.as_deref())
        .collect()
}

#[test]
fn a_filesystem_made_again_and_mounted_under_a_reused_mountinfo_id_is_measured_again() {
    // Unmount, mkfs, mount between two reads of mountinfo: the kernel hands the freed id to the new mount, and the
    // device, path and options are the same; only the filesystem is another one.
    let mut probed = Probed::default();
    let first = discover_with(&ext4_on_loop0(30, "u-old"), &[fs_class()], &mut probed);
    assert_eq!(fs_uuid(&first), [Some("u-old")]);
    let made_again = ext4_on_loop0(30, "u-new");
    let quiet = discover_changed(
        &made_again,
        &[fs_class()],
        &mut probed,
        &HostChanges::default(),
    );
    assert_eq!(
        fs_uuid(&quiet),
        [Some("u-old")],
        "no mount event, nothing looked at"
    );
    let after_event = after_a_mount_event(&made_again, &mut probed);
    assert_eq!(
        fs_uuid(&after_event),
        [Some("u-new")],
        "after a mount event, a table without unique ids cannot vouch for any measurement"
    );
    assert_eq!(probed.last_measured, 1);
}

#[test]
fn a_filesystem_mounted_again_is_another_mount_to_the_mount_api() {
    let mut probed = Probed::default();
    let before = ext4_on_loop0(30, "u-old").with_unique_ids();
    discover_with(&before, &[fs_class()], &mut probed);
    // Another mount elsewhere: vol1's unique id stands, its measurement is kept.
    let unrelated = after_a_mount_event(&ext4_on_loop0(30, "u-new").with_unique_ids(), &mut probed);
    assert_eq!(fs_uuid(&unrelated), [Some("u-old")]);
    assert_eq!(probed.last_measured, 0);
    // Unmounted, made again and mounted under the freed mountinfo id: a new unique id.
    let again = after_a_mount_event(
        &ext4_on_loop0(30, "u-new").with_mounts_made_again(),
        &mut probed,
    );
    assert_eq!(fs_uuid(&again), [Some("u-new")]);
    assert_eq!(probed.last_measured, 1);
}
