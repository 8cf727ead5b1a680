//! Class directories under `/dev` against the fake host: a directory of devices is discovered like any Block
//! class's, and one that holds anything else, or does not lie on devtmpfs, is refused as a whole.

use rstest::rstest;

use super::*;
use crate::host::fake::FakeHost;
use crate::host::{DirEntry, EntryKind, FsProbe};

const DIR: &str = "/dev/disk/kubernetes";
const DEVTMPFS: &str = "2 1 0:6 / /dev rw,relatime shared:2 - devtmpfs devtmpfs rw\n";

fn class(mode: VolumeMode, patterns: &[&str]) -> DiscoveryClass {
    DiscoveryClass {
        name: "nvme-ssd".into(),
        host_dir: DIR.into(),
        mount_dir: DIR.into(),
        mode,
        name_patterns: patterns.iter().map(|p| p.to_string()).collect(),
    }
}

fn block(minor: u32) -> EntryKind {
    EntryKind::BlockDevice {
        rdev: DevId::new(259, minor),
    }
}

fn link(target: &str, kind: EntryKind) -> EntryKind {
    EntryKind::Symlink {
        target: target.into(),
        leads_to: Box::new(kind),
    }
}

fn entry(name: &str, kind: EntryKind) -> DirEntry {
    DirEntry {
        name: name.into(),
        kind,
    }
}

fn devices() -> Vec<DirEntry> {
    vec![
        entry("nvme-a", link("../../nvme1n1", block(1))),
        entry("nvme-b", link("../../nvme2n1", block(2))),
    ]
}

fn host(mounts: &str, entries: Vec<DirEntry>) -> FakeHost {
    let table = format!("1 0 253:1 / / rw shared:1 - ext4 /dev/vda1 rw\n{mounts}");
    let mut host = FakeHost::new()
        .with_mountinfo(&table)
        .with_dir(DIR, entries);
    for name in ["nvme-a", "nvme-b"] {
        let path = format!("{DIR}/{name}");
        host = host
            .with_block_size(&path, 1 << 30)
            .with_probe(&path, FsProbe::default());
    }
    host
}

fn found(discovery: &Discovery) -> (Vec<&str>, Vec<(&str, UnusableReason)>) {
    (
        discovery.disks.iter().map(|d| d.entry.as_str()).collect(),
        discovery
            .unusable
            .iter()
            .map(|u| (u.entry.as_str(), u.reason))
            .collect(),
    )
}

#[test]
fn a_directory_of_device_links_on_devtmpfs_is_discovered_like_a_block_class() {
    let discovery = discover(
        &host(DEVTMPFS, devices()),
        &[class(VolumeMode::Block, &["*"])],
    );
    assert_eq!(found(&discovery), (vec!["nvme-a", "nvme-b"], vec![]));
    assert!(discovery.failed_classes.is_empty());
}

#[test]
fn in_a_filesystem_class_the_devices_are_found_as_devices_as_the_reference_eks_example_needs() {
    let mut host = host(DEVTMPFS, devices());
    for name in ["nvme-a", "nvme-b"] {
        host = host.with_claimed(format!("{DIR}/{name}"), false);
    }
    let discovery = discover(&host, &[class(VolumeMode::Filesystem, &["*"])]);
    assert_eq!(found(&discovery), (vec!["nvme-a", "nvme-b"], vec![]));
    assert!(discovery.disks.iter().all(|d| d.mode == VolumeMode::Block));
    assert!(discovery.failed_classes.is_empty());
}

#[rstest]
#[case::regular_file(
    entry("notes", EntryKind::File),
    "its entry \"notes\" is a regular file"
)]
#[case::char_device_linked_in(
    entry("zz-null", link("/dev/null", EntryKind::CharDevice)),
    "its entry \"zz-null\" is a symlink to /dev/null (a character device)"
)]
#[case::directory(
    entry("by-x", EntryKind::Directory),
    "its entry \"by-x\" is a directory"
)]
#[case::dangling_link(
    entry("gone", link("../../nvme9n1", EntryKind::Unreadable { error: "No such file or directory".into() })),
    "its entry \"gone\" is a symlink to ../../nvme9n1 (unreadable (No such file or directory))"
)]
fn one_entry_that_is_not_a_block_device_refuses_the_whole_directory(
    #[case] hostile: DirEntry,
    #[case] why: &str,
    #[values(VolumeMode::Block, VolumeMode::Filesystem)] mode: VolumeMode,
) {
    let mut entries = devices();
    entries.push(hostile);
    // NB: the class looks only at nvme-*; the directory is judged by all it holds.
    let discovery = discover(&host(DEVTMPFS, entries), &[class(mode, &["nvme-*"])]);
    assert_eq!(
        found(&discovery),
        (
            vec![],
            vec![
                ("nvme-a", UnusableReason::DeviceDirRefused),
                ("nvme-b", UnusableReason::DeviceDirRefused)
            ]
        )
    );
    let failed = &discovery.failed_classes;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].class, "nvme-ssd");
    for message in
        std::iter::once(&failed[0].message).chain(discovery.unusable.iter().map(|u| &u.message))
    {
        assert!(
            message.starts_with(&format!(
                "discovery directory \"{DIR}\" is refused as a whole: {why}"
            )),
            "{message}"
        );
    }
}

#[rstest]
#[case::tmpfs_over_it(
    "3 2 0:50 / /dev/disk/kubernetes rw - tmpfs tmpfs rw\n",
    "it is on tmpfs (mounted on /dev/disk/kubernetes), not on devtmpfs"
)]
#[case::dev_is_not_devtmpfs(
    "2 1 0:7 / /dev rw - tmpfs tmpfs rw\n",
    "it is on tmpfs (mounted on /dev), not on devtmpfs"
)]
fn a_directory_under_dev_not_on_devtmpfs_is_refused_whole(#[case] mounts: &str, #[case] why: &str) {
    let table = format!("{DEVTMPFS}{mounts}");
    let discovery = discover(
        &host(&table, devices()),
        &[class(VolumeMode::Block, &["*"])],
    );
    assert_eq!(discovery.disks.len(), 0);
    assert_eq!(discovery.unusable.len(), 2);
    assert!(
        discovery.failed_classes[0].message.contains(why),
        "{:?}",
        discovery.failed_classes
    );
}

#[test]
fn without_a_mount_table_a_directory_under_dev_is_unknown_not_empty() {
    let mut host = FakeHost::new().with_dir(DIR, devices());
    host.mountinfo = Some(Err(5));
    let discovery = discover(&host, &[class(VolumeMode::Block, &["*"])]);
    assert_eq!(found(&discovery), (vec![], vec![]));
    assert_eq!(discovery.failed_classes.len(), 1);
    // An empty table (no mount holds the directory) is refused likewise.
    let host = FakeHost::new().with_mountinfo("").with_dir(DIR, devices());
    let discovery = discover(&host, &[class(VolumeMode::Block, &["*"])]);
    assert!(
        discovery.failed_classes[0]
            .message
            .ends_with("no mount holds it in the mount table"),
        "{:?}",
        discovery.failed_classes
    );
}

#[test]
fn an_entry_changed_in_a_directory_under_dev_makes_the_next_pass_judge_all_of_it() {
    let mut probed = Probed::default();
    let classes = [class(VolumeMode::Block, &["nvme-*"])];
    let first = discover_with(&host(DEVTMPFS, devices()), &classes, &mut probed);
    assert_eq!(found(&first).0, vec!["nvme-a", "nvme-b"]);
    let mut entries = devices();
    entries.push(entry("notes", EntryKind::File));
    let changes = HostChanges {
        entries: vec![(DIR.into(), "notes".into())],
        ..HostChanges::default()
    };
    let second = discover_changed(&host(DEVTMPFS, entries), &classes, &mut probed, &changes);
    assert_eq!(found(&second).0, Vec::<&str>::new());
    assert_eq!(second.failed_classes.len(), 1);
}
