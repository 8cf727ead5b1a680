//! Discovery and the mount watcher on real mounts: tmpfs, loop devices formatted ext4 and xfs, bind mounts,
//! symlinks to block devices, stray entries. Needs root; each test builds its own [`fixtures::Scene`].

#[path = "host/device_dir.rs"]
mod device_dir;
use localpv_test_support::disks;
#[path = "host/fixtures.rs"]
mod fixtures;
#[path = "host/gone.rs"]
mod gone;
#[path = "host/smart.rs"]
mod smart;
#[path = "host/volume_id.rs"]
mod volume_id;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fixtures::{Scene, blkid_identity, blockdev_size, stat_fs_total};
use localpv::discover::{Probed, discover, discover_changed, discover_with};
use localpv::disk::{Discovery, DiscoveryClass, Disk, UnusableReason, VolumeMode};
use localpv::host::linux::LinuxHost;
use localpv::host::live::{LiveMounts, Read, difference};
use localpv::host::wake::MountWatcher;
use localpv::host::{EntryKind, Host, HostChanges, MountTable};

fn disk<'a>(discovery: &'a Discovery, entry: &str) -> &'a Disk {
    discovery
        .disks
        .iter()
        .find(|d| d.entry == entry)
        .unwrap_or_else(|| panic!("{entry} not published: {discovery:#?}"))
}

fn reason(discovery: &Discovery, entry: &str) -> UnusableReason {
    discovery
        .unusable
        .iter()
        .find(|u| u.entry == entry)
        .unwrap_or_else(|| panic!("{entry} not reported unusable: {discovery:#?}"))
        .reason
}

#[test]
fn tmpfs_entries_are_published_with_their_statvfs_size() {
    let mut scene = Scene::new();
    scene.tmpfs(&scene.disks().join("vol1"), "16m");
    scene.tmpfs(&scene.disks().join("vol2"), "32m");
    let discovery = discover(&LinuxHost::default(), &[scene.fs_class()]);
    assert!(
        discovery.unusable.is_empty() && discovery.failed_classes.is_empty(),
        "{discovery:#?}"
    );
    for (entry, bytes) in [("vol1", 16 << 20), ("vol2", 32 << 20)] {
        let found = disk(&discovery, entry);
        assert_eq!(found.host_path, Path::new("/mnt/disks").join(entry));
        assert_eq!(
            (found.mode, found.capacity_bytes, found.available_bytes),
            (VolumeMode::Filesystem, bytes, Some(bytes))
        );
        assert_eq!(found.identity.fs_type.as_deref(), Some("tmpfs"));
        assert_eq!(
            (
                found.identity.device.as_deref(),
                found.identity.fs_uuid.as_deref()
            ),
            (None, None)
        );
        assert!(
            found.identity.dev_id.is_some_and(|d| d.is_anonymous()),
            "{:?}",
            found.identity
        );
        assert_eq!(found.mount_root, None);
    }
}

#[test]
fn ext4_and_xfs_loop_mounts_carry_the_identity_blkid_reports() {
    let mut scene = Scene::new();
    let ext4 = scene.formatted("ext4", "data-ext4", &scene.disks().join("vol-ext4"));
    let xfs = scene.formatted("xfs", "data-xfs", &scene.disks().join("vol-xfs"));
    let discovery = discover(&LinuxHost::default(), &[scene.fs_class()]);
    assert!(discovery.unusable.is_empty(), "{discovery:#?}");
    for (entry, device, fs_type) in [("vol-ext4", &ext4, "ext4"), ("vol-xfs", &xfs, "xfs")] {
        let found = disk(&discovery, entry);
        let (blkid_type, blkid_uuid, blkid_label) = blkid_identity(device);
        assert_eq!(blkid_type.as_deref(), Some(fs_type));
        assert_eq!(found.identity.fs_type, blkid_type);
        assert_eq!(found.identity.fs_uuid, blkid_uuid);
        assert!(found.identity.fs_uuid.is_some());
        assert_eq!(found.identity.fs_label, blkid_label);
        assert_eq!(found.identity.device.as_deref(), device.to_str());
        assert!(
            found.identity.rotational.is_some(),
            "sysfs queue/rotational is always there"
        );
        assert_eq!(
            found.capacity_bytes,
            stat_fs_total(&scene.disks().join(entry))
        );
        assert!(
            found
                .available_bytes
                .is_some_and(|a| a > 0 && a <= found.capacity_bytes)
        );
    }
}

#[test]
fn a_block_class_publishes_a_symlink_to_a_loop_device_at_its_size() {
    let mut scene = Scene::new();
    let raw = scene.loop_device(24);
    scene.symlink(&raw, &scene.block().join("disk1"));
    let discovery = discover(&LinuxHost::default(), &[scene.block_class()]);
    let found = disk(&discovery, "disk1");
    assert_eq!(
        (found.mode, found.available_bytes),
        (VolumeMode::Block, None)
    );
    assert_eq!(found.capacity_bytes, blockdev_size(&raw));
    assert_eq!(found.capacity_bytes, 24 << 20);
    assert_eq!(found.host_path, Path::new("/mnt/block/disk1"));
    assert_eq!(found.identity.device.as_deref(), raw.to_str());
    assert_eq!(
        found.identity.fs_type, None,
        "an unformatted device has no filesystem"
    );
}

#[test]
fn a_same_device_bind_mount_counts_as_a_mount_point() {
    let mut scene = Scene::new();
    // NB: discovery directory and bind source on one tmpfs, so st_dev cannot tell the mount from a plain dir.
    let area = scene.root().join("area");
    scene.tmpfs(&area, "8m");
    fs::create_dir_all(area.join("disks")).expect("create discovery dir");
    fs::create_dir_all(area.join("shared")).expect("create bind source");
    scene.bind(&area.join("shared"), &area.join("disks/vol1"));
    let st_dev = |path: &Path| fs::metadata(path).expect("stat").dev();
    assert_eq!(
        st_dev(&area.join("disks/vol1")),
        st_dev(&area.join("disks")),
        "the premise of this test"
    );
    let class = DiscoveryClass {
        mount_dir: area.join("disks"),
        ..scene.fs_class()
    };
    let discovery = discover(&LinuxHost::default(), &[class]);
    let found = disk(&discovery, "vol1");
    assert_eq!(found.mount_root.as_deref(), Some("/shared"));
}

#[test]
fn a_bind_mount_of_a_sub_directory_records_its_root() {
    let mut scene = Scene::new();
    let backing = scene.root().join("backing");
    scene.tmpfs(&backing, "8m");
    fs::create_dir(backing.join("sub")).expect("create sub-directory");
    scene.bind(&backing.join("sub"), &scene.disks().join("vol1"));
    let discovery = discover(&LinuxHost::default(), &[scene.fs_class()]);
    let found = disk(&discovery, "vol1");
    assert_eq!(found.mount_root.as_deref(), Some("/sub"));
    assert_eq!(found.capacity_bytes, 8 << 20);
}

#[test]
fn stray_entries_are_reported_unusable_with_their_reason() {
    let scene = Scene::new();
    let disks = scene.disks();
    fs::write(disks.join("notes.txt"), "hello").expect("create stray file");
    fs::create_dir(disks.join("plain")).expect("create plain dir");
    fs::create_dir(disks.join("lost+found")).expect("create lost+found");
    nix::unistd::mkfifo(&disks.join("pipe"), nix::sys::stat::Mode::S_IRWXU).expect("create fifo");
    scene.symlink(Path::new("/nonexistent/disk"), &disks.join("dangling"));
    scene.symlink(Path::new("/dev/null"), &scene.block().join("null"));
    let discovery = discover(
        &LinuxHost::default(),
        &[scene.fs_class(), scene.block_class()],
    );
    assert!(discovery.disks.is_empty(), "{discovery:#?}");
    for (entry, expected) in [
        ("notes.txt", UnusableReason::NotADiskEntry),
        ("plain", UnusableReason::NotAMountPoint),
        ("lost+found", UnusableReason::NotAMountPoint),
        ("pipe", UnusableReason::NotADiskEntry),
        ("dangling", UnusableReason::NotADiskEntry),
        ("null", UnusableReason::NotADiskEntry),
    ] {
        assert_eq!(reason(&discovery, entry), expected, "{entry}");
    }
    let plain = discovery
        .unusable
        .iter()
        .find(|u| u.entry == "plain")
        .expect("plain reported");
    assert!(
        plain
            .message
            .starts_with(r#"path "/mnt/disks/plain" is not a valid mount point"#),
        "{}",
        plain.message
    );
}

/// The listing takes directories' and files' kinds from the directory itself (`d_type`), with no stat of each entry:
/// every kind of entry it can meet must come out as a stat of the entry says, a mount point, a mounted file and
/// symlinks (to each kind and dangling) included.
#[test]
fn the_listing_reports_every_kind_of_entry_as_a_stat_of_it_does() {
    let mut scene = Scene::new();
    let disks = scene.disks();
    fs::write(disks.join("file"), "x").expect("create file");
    fs::create_dir(disks.join("dir")).expect("create dir");
    scene.tmpfs(&disks.join("mounted"), "1m");
    fs::write(disks.join("mounted-file"), "").expect("create mount point file");
    fs::write(scene.root().join("over"), "y").expect("create bind source file");
    scene.bind(&scene.root().join("over"), &disks.join("mounted-file"));
    nix::unistd::mkfifo(&disks.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("create fifo");
    let device = scene.loop_device(1);
    scene.symlink(&device, &disks.join("to-device"));
    scene.symlink(&disks.join("dir"), &disks.join("to-dir"));
    scene.symlink(&disks.join("file"), &disks.join("to-file"));
    scene.symlink(Path::new("/nonexistent/disk"), &disks.join("dangling"));
    scene.symlink(Path::new("/dev/null"), &disks.join("to-char"));
    let stat_kind = |path: &Path| {
        let meta = fs::symlink_metadata(path).expect("lstat");
        let of = |m: &fs::Metadata| {
            let t = m.file_type();
            use std::os::unix::fs::FileTypeExt;
            match () {
                _ if t.is_dir() => "directory".to_string(),
                _ if t.is_file() => "file".to_string(),
                _ if t.is_block_device() => format!("block {}", m.rdev()),
                _ if t.is_char_device() => "char".to_string(),
                _ if t.is_fifo() => "fifo".to_string(),
                _ => "other".to_string(),
            }
        };
        if meta.file_type().is_symlink() {
            let target = fs::metadata(path).map_or("unreadable".to_string(), |m| of(&m));
            format!(
                "symlink to {}: {target}",
                fs::read_link(path).expect("readlink").display()
            )
        } else {
            of(&meta)
        }
    };
    let listed_kind = |kind: &EntryKind| -> String {
        let of = |k: &EntryKind| match k {
            EntryKind::Directory => "directory".to_string(),
            EntryKind::File => "file".to_string(),
            EntryKind::BlockDevice { rdev } => {
                format!(
                    "block {}",
                    nix::sys::stat::makedev(rdev.major.into(), rdev.minor.into())
                )
            }
            EntryKind::CharDevice => "char".to_string(),
            EntryKind::Fifo => "fifo".to_string(),
            EntryKind::Unreadable { .. } => "unreadable".to_string(),
            _ => "other".to_string(),
        };
        match kind {
            EntryKind::Symlink { target, leads_to } => {
                format!("symlink to {}: {}", target.display(), of(leads_to))
            }
            k => of(k),
        }
    };
    let mut listed = LinuxHost::default().read_dir(&disks).expect("list");
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "dangling",
            "dir",
            "fifo",
            "file",
            "mounted",
            "mounted-file",
            "to-char",
            "to-device",
            "to-dir",
            "to-file"
        ]
    );
    for entry in &listed {
        assert_eq!(
            listed_kind(&entry.kind),
            stat_kind(&disks.join(&entry.name)),
            "{}",
            entry.name
        );
    }
}

/// The reference provisioner's EKS and GKE recipes: a raw device in a Filesystem class is found as a device (sized,
/// identified by its loop backing here) for a Filesystem PV the kubelet formats; mounted where this process sees
/// it, it is refused (`DeviceInUse`).
#[test]
fn a_block_device_in_a_filesystem_class_is_found_as_a_device_unless_mounted() {
    let mut scene = Scene::new();
    let raw = scene.loop_device(16);
    scene.symlink(&raw, &scene.disks().join("disk1"));
    let discovery = discover(&LinuxHost::default(), &[scene.fs_class()]);
    let found = disk(&discovery, "disk1");
    assert_eq!(
        (found.mode, found.capacity_bytes, found.held),
        (VolumeMode::Block, 16 << 20, false)
    );
    assert!(found.identity.serial.is_some(), "{:?}", found.identity);
    let busy = scene.formatted("ext4", "busy", &scene.root().join("elsewhere"));
    scene.symlink(&busy, &scene.disks().join("disk2"));
    let discovery = discover(&LinuxHost::default(), &[scene.fs_class()]);
    assert_eq!(reason(&discovery, "disk2"), UnusableReason::DeviceInUse);
}

/// Two entries on one filesystem are both found, with the device and root the planner compares to hold them back
/// (`plan::decide::overlap`): which one may be published depends on the PVs, never on names.
#[test]
fn two_entries_on_one_filesystem_are_both_found_with_their_device_and_root() {
    let mut scene = Scene::new();
    let first = scene.disks().join("a");
    scene.tmpfs(&first, "8m");
    std::fs::create_dir_all(first.join("sub")).expect("sub-directory");
    scene.bind(&first, &scene.disks().join("b"));
    scene.bind(&first.join("sub"), &scene.disks().join("c"));
    let discovery = discover(&LinuxHost::default(), &[scene.fs_class()]);
    let found: Vec<(&str, Option<&str>)> = discovery
        .disks
        .iter()
        .map(|d| (d.entry.as_str(), d.mount_root.as_deref()))
        .collect();
    assert_eq!(found, vec![("a", None), ("b", None), ("c", Some("/sub"))]);
    let devs: Vec<_> = discovery.disks.iter().map(|d| d.identity.dev_id).collect();
    assert!(
        devs[0].is_some() && devs.iter().all(|d| *d == devs[0]),
        "{devs:?}"
    );
    assert!(discovery.unusable.is_empty(), "{:?}", discovery.unusable);
}

/// Wait for the watcher, failing after a generous bound: the contract is "within a second", the bound only keeps
/// a slow CI machine from flaking.
async fn expect_wake_up(watcher: &mut MountWatcher, what: &str) -> HostChanges {
    tokio::time::timeout(Duration::from_secs(5), watcher.changed())
        .await
        .unwrap_or_else(|_| panic!("the watcher did not wake up after {what}"))
}

#[tokio::test]
async fn the_watcher_wakes_up_when_a_filesystem_is_mounted() {
    let mut scene = Scene::new();
    let target: PathBuf = scene.disks().join("vol1");
    // Created before the watcher starts, so only the mount itself can wake it (inotify ignores mounts).
    fs::create_dir(&target).expect("create mount point");
    let mut watcher = MountWatcher::new(&[scene.disks()]).expect("start watcher");
    scene.tmpfs(&target, "8m");
    let changes = expect_wake_up(&mut watcher, "a tmpfs mount").await;
    assert!(
        changes.mounts,
        "the mount table is said to have changed: {changes:?}"
    );
    let discovery = discover(&LinuxHost::default(), &[scene.fs_class()]);
    assert_eq!(disk(&discovery, "vol1").capacity_bytes, 8 << 20);
}

#[tokio::test]
async fn the_watcher_wakes_up_when_an_entry_appears_in_a_discovery_directory() {
    let scene = Scene::new();
    let mut watcher = MountWatcher::new(&[scene.block()]).expect("start watcher");
    scene.symlink(Path::new("/dev/null"), &scene.block().join("new-link"));
    let changes = expect_wake_up(&mut watcher, "a new symlink").await;
    assert_eq!(
        changes.entries,
        [(scene.block(), "new-link".into())],
        "the entry is named, so a pass looks at it alone: {changes:?}"
    );
    assert!(!changes.list_all, "{changes:?}");
}

/// Unmounts what a test mounted even when it fails half-way; lazily, so a busy mount cannot hang the suite.
struct Unmount(Vec<PathBuf>);

impl Drop for Unmount {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::process::Command::new("umount")
                .args(["-l", "-q"])
                .arg(path)
                .status();
        }
    }
}

/// The live table after a change: read one changed mount at a time, and equal to what mountinfo says (read again
/// while other tests' mounts come and go in between).
fn live_step(live: &LiveMounts, what: &str) -> MountTable {
    let own = Path::new("/proc/self/mountinfo");
    for attempt in 0..40 {
        let (table, read) = live.table(own).expect("the mount API stays usable");
        if attempt == 0 {
            assert!(
                matches!(read, Read::Changed(n) if n >= 1),
                "{what}: read one mount at a time, not the whole table ({read:?})"
            );
        }
        let text = fs::read(own).expect("read mountinfo");
        let parsed = MountTable::parse(&text).expect("parse mountinfo");
        if difference(&table, &parsed).is_none() {
            return table;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (table, _) = live.table(own).expect("the mount API stays usable");
    let parsed = MountTable::parse(&fs::read(own).expect("read mountinfo")).expect("parse");
    panic!(
        "{what}: the live table differs from mountinfo: {:?}",
        difference(&table, &parsed)
    );
}

/// The live mount table (fanotify mount events + statmount, Linux 6.14+) follows a mount, a move and an unmount of
/// one mount at a time and agrees with mountinfo after each: a moved mount is not left at its old place, where a
/// stale table would keep publishing an empty directory as the disk.
#[test]
fn the_live_mount_table_follows_a_mount_a_move_and_an_unmount() {
    let scene = Scene::new();
    let (a, b) = (scene.disks().join("a"), scene.disks().join("b"));
    fs::create_dir(&a).expect("create a");
    fs::create_dir(&b).expect("create b");
    let _cleanup = Unmount(vec![a.clone(), b.clone()]);
    let live = LiveMounts::default();
    let Some((_, first)) = live.table(Path::new("/proc/self/mountinfo")) else {
        panic!(
            "missing prerequisite: the mount API (Linux 6.14+: fanotify mount events, listmount, statmount) as root: {:?}",
            live.off_reason()
        );
    };
    assert_eq!(first, Read::Full);
    let (a_text, b_text) = (a.display().to_string(), b.display().to_string());
    disks::run(
        "mount",
        &["-t", "tmpfs", "-o", "size=4m", "live-test", &a_text],
    );
    let table = live_step(&live, "a mount");
    assert_eq!(
        table.mount_at(&a).map(|m| m.source.as_str()),
        Some("live-test")
    );
    let text = fs::read("/proc/self/mountinfo").expect("read mountinfo");
    let parsed = MountTable::parse(&text).expect("parse mountinfo");
    let live_entry = table.mount_at(&a).expect("mounted");
    assert!(
        live_entry.unique_id.is_some(),
        "the mount API's entry carries the unique mount id: {live_entry:?}"
    );
    let spelled = localpv::host::MountEntry {
        unique_id: None,
        ..live_entry.clone()
    };
    assert_eq!(
        Some(&spelled),
        parsed.mount_at(&a),
        "spelled exactly as mountinfo spells it, options too, the unique id aside (mountinfo does not show it)"
    );
    disks::run("mount", &["--move", &a_text, &b_text]);
    let table = live_step(&live, "a move");
    assert!(
        table.mount_at(&a).is_none(),
        "the moved mount left its old place"
    );
    assert_eq!(
        table.mount_at(&b).map(|m| m.source.as_str()),
        Some("live-test")
    );
    disks::run("umount", &[&b_text]);
    let table = live_step(&live, "an unmount");
    assert!(
        table.mount_at(&b).is_none(),
        "the unmounted filesystem is gone"
    );
}

/// Unmount, mkfs and mount again between two passes, with no pass in between: whether the table is the live one
/// (unique mount ids) or mountinfo's (whose ids the kernel hands out again), the second pass measures the new
/// filesystem, never the one it replaced.
#[test]
fn a_filesystem_made_again_between_two_passes_is_measured_again() {
    let own = LinuxHost::default();
    let mut mountinfo = LinuxHost::default();
    mountinfo.mountinfo = "/proc/thread-self/mountinfo".into();
    for (host, table) in [(&own, "the live table"), (&mountinfo, "mountinfo")] {
        let mut scene = Scene::new();
        let target = scene.disks().join("vol1");
        let device = scene.formatted("ext4", "before", &target);
        let mut probed = Probed::default();
        let first = discover_with(host, &[scene.fs_class()], &mut probed);
        let (_, old_uuid, _) = blkid_identity(&device);
        assert_eq!(disk(&first, "vol1").identity.fs_uuid, old_uuid, "{table}");
        scene.made_again(&device, "ext4", &target);
        let (_, new_uuid, _) = blkid_identity(&device);
        assert_ne!(new_uuid, old_uuid, "mkfs makes a new UUID");
        let changes = HostChanges {
            mounts: true,
            ..HostChanges::default()
        };
        let second = discover_changed(host, &[scene.fs_class()], &mut probed, &changes);
        assert_eq!(
            disk(&second, "vol1").identity.fs_uuid,
            new_uuid,
            "{table}: the new filesystem's identity, not the cached one"
        );
    }
}

#[test]
fn a_symlink_to_a_mounted_device_is_not_published_as_a_block_volume() {
    let mut scene = Scene::new();
    let device = scene.formatted("ext4", "busy", &scene.root().join("elsewhere"));
    scene.symlink(&device, &scene.block().join("busy"));
    let discovery = discover(&LinuxHost::default(), &[scene.block_class()]);
    assert_eq!(reason(&discovery, "busy"), UnusableReason::DeviceInUse);
}

/// The kubelet mounts a raw device of a Filesystem class in its own mount namespace, out of the agent's mount
/// table: the kernel's answer to an exclusive open still tells the device is held, and free once unmounted.
#[test]
fn a_device_mounted_in_another_mount_namespace_is_claimed_and_free_once_unmounted() {
    let mut scene = Scene::new();
    let device = scene.loop_device(16);
    let host = LinuxHost::default();
    assert!(!host.device_claimed(&device).expect("probe a free device"));
    disks::mkfs("ext4", &device.display().to_string(), None);
    let target = scene.root().join("elsewhere");
    fs::create_dir(&target).expect("mount point");
    let ready = scene.root().join("mounted");
    let script = format!(
        "mount {} {} && touch {} && exec sleep 60",
        device.display(),
        target.display(),
        ready.display()
    );
    let mut holder = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .spawn()
        .expect("missing prerequisite: unshare (util-linux)");
    for _ in 0..100 {
        if ready.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let claimed = host.device_claimed(&device);
    let in_our_table = host
        .mount_table()
        .expect("mount table")
        .entries
        .iter()
        .any(|m| m.source == device.display().to_string());
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(
        ready.exists(),
        "the other namespace never mounted the device"
    );
    assert!(!in_our_table, "the premise: the mount is not in our table");
    assert!(
        claimed.expect("probe a mounted device"),
        "a mounted device is held"
    );
    // The namespace died with its last process, and its mount with it.
    let mut free = false;
    for _ in 0..100 {
        if !host.device_claimed(&device).expect("probe") {
            free = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(free, "the device is free once unmounted");
    let file = scene.root().join("not-a-device");
    fs::write(&file, "x").expect("file");
    assert!(
        host.device_claimed(&file).is_err(),
        "a regular file is not answered \"free\""
    );
}
