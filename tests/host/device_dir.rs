//! A discovery directory under `/dev` on the real devtmpfs, as a node's bootstrap makes one (the reference
//! provisioner's EKS recipe: `/dev/disk/kubernetes`, symlinks to the NVMe devices): real loop devices linked in are
//! published; one hostile entry (a regular file, `/dev/null` linked in, a directory) refuses the whole directory,
//! naming the entry; a tmpfs mounted under `/dev` is refused though it holds only device links.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use localpv::discover::discover;
use localpv::disk::{Discovery, DiscoveryClass, UnusableReason, VolumeMode};
use localpv::host::linux::LinuxHost;

use crate::fixtures::Scene;

/// A directory of this test's own on the host's devtmpfs, removed with everything in it when dropped.
struct DevDir(PathBuf);

impl DevDir {
    fn new(name: &str) -> DevDir {
        let path = PathBuf::from(format!("/dev/localpv-test-{}-{name}", std::process::id()));
        fs::create_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        DevDir(path)
    }
}

impl Drop for DevDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn class(dir: &Path) -> DiscoveryClass {
    DiscoveryClass {
        name: "nvme-ssd".into(),
        host_dir: dir.into(),
        mount_dir: dir.into(),
        mode: VolumeMode::Block,
        name_patterns: vec!["nvme-*".into()],
    }
}

/// (published entries, (entry, reason) of the unusable ones), each sorted.
fn summary(d: &Discovery) -> (Vec<String>, Vec<(String, UnusableReason)>) {
    let mut disks: Vec<String> = d.disks.iter().map(|x| x.entry.clone()).collect();
    let mut unusable: Vec<_> = d
        .unusable
        .iter()
        .map(|u| (u.entry.clone(), u.reason))
        .collect();
    disks.sort();
    unusable.sort_by(|x, y| x.0.cmp(&y.0));
    (disks, unusable)
}

/// Links `device` into `dir` as `name` the way udev rules do, relative to the directory (`../loopN`).
fn link_relative(dir: &Path, name: &str, device: &Path) {
    let depth = dir.components().count() - 1;
    let up = "../".repeat(depth - 1);
    let target = format!(
        "{up}{}",
        device.strip_prefix("/dev").expect("under /dev").display()
    );
    symlink(&target, dir.join(name)).expect("symlink");
}

/// Creates one hostile entry at the path given.
type MakeEntry = fn(&Path);

#[test]
fn a_directory_of_device_links_under_dev_is_published_and_one_hostile_entry_refuses_it_whole() {
    let mut scene = Scene::new();
    let dir = DevDir::new("disks");
    let a = scene.loop_device(16);
    let b = scene.loop_device(32);
    link_relative(&dir.0, "nvme-a", &a);
    symlink(&b, dir.0.join("nvme-b")).expect("symlink");
    let host = LinuxHost::default();
    let discovery = discover(&host, &[class(&dir.0)]);
    assert_eq!(
        summary(&discovery),
        (vec!["nvme-a".into(), "nvme-b".into()], vec![]),
        "{discovery:#?}"
    );
    assert!(discovery.disks.iter().all(|d| d.mode == VolumeMode::Block));
    assert!(discovery.failed_classes.is_empty());

    let hostile: [(&str, MakeEntry, &str); 3] = [
        (
            "notes",
            |p| fs::write(p, "x").expect("file"),
            "a regular file",
        ),
        (
            "zz-null",
            |p| symlink("/dev/null", p).expect("link"),
            "a symlink to /dev/null (a character device)",
        ),
        ("sub", |p| fs::create_dir(p).expect("dir"), "a directory"),
    ];
    for (name, make, what) in hostile {
        let path = dir.0.join(name);
        make(&path);
        let discovery = discover(&host, &[class(&dir.0)]);
        let refused = (
            vec![],
            vec![
                ("nvme-a".to_string(), UnusableReason::DeviceDirRefused),
                ("nvme-b".to_string(), UnusableReason::DeviceDirRefused),
            ],
        );
        assert_eq!(summary(&discovery), refused, "{name}: {discovery:#?}");
        let message = &discovery.failed_classes[0].message;
        assert!(
            message.contains(&format!("its entry {name:?} is {what}")),
            "{name}: {message}"
        );
        assert!(discovery.unusable.iter().all(|u| u.message == *message));
        if path.is_dir() && !path.is_symlink() {
            fs::remove_dir(&path).expect("rmdir");
        } else {
            fs::remove_file(&path).expect("rm");
        }
        let discovery = discover(&host, &[class(&dir.0)]);
        assert_eq!(
            summary(&discovery).0,
            ["nvme-a", "nvme-b"],
            "{name} removed"
        );
    }
}

#[test]
fn a_tmpfs_under_dev_is_refused_though_it_holds_only_device_links() {
    let dir = DevDir::new("shm");
    let mut scene = Scene::new();
    scene.tmpfs(&dir.0, "1m");
    let a = scene.loop_device(16);
    symlink(&a, dir.0.join("nvme-a")).expect("symlink");
    let discovery = discover(&LinuxHost::default(), &[class(&dir.0)]);
    assert_eq!(
        summary(&discovery),
        (
            vec![],
            vec![("nvme-a".into(), UnusableReason::DeviceDirRefused)]
        ),
        "{discovery:#?}"
    );
    let message = &discovery.failed_classes[0].message;
    assert!(message.contains("it is on tmpfs (mounted on "), "{message}");
}
