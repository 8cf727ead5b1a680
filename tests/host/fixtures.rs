//! The host tests' world: a [`Scene`] owns one temporary directory with the discovery directories and everything
//! mounted or attached under it (the guards of `localpv_test_support::disks`); dropping it unmounts in reverse order, detaches
//! loop devices, then removes the directory. Also what the tests compare discovery with: blkid, statvfs, blockdev.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use localpv::disk::{DiscoveryClass, VolumeMode};
use tempfile::TempDir;

use crate::disks::{LoopDevice, Mount, Unwatched, blkid, mkfs, require_root_and_tools, run};

/// One test's world: a discovery directory `disks/` inside a private temp dir, plus its mounts and loops.
pub struct Scene {
    mounts: Vec<Mount>,
    loops: Vec<LoopDevice>,
    dir: TempDir,
}

impl Drop for Scene {
    fn drop(&mut self) {
        // Stacked and nested mounts come off top first; loop devices only once nothing uses them.
        while let Some(mount) = self.mounts.pop() {
            drop(mount);
        }
        self.loops.clear();
    }
}

impl Scene {
    pub fn new() -> Self {
        require_root_and_tools(
            "host tests",
            &[
                "losetup",
                "mkfs.ext4",
                "mkfs.xfs",
                "blkid",
                "blockdev",
                "stat",
            ],
        );
        let dir = tempfile::Builder::new()
            .prefix("localpv-host-")
            .tempdir()
            .expect("create temp dir");
        fs::create_dir(dir.path().join("disks")).expect("create discovery dir");
        fs::create_dir(dir.path().join("block")).expect("create block discovery dir");
        Scene {
            mounts: Vec::new(),
            loops: Vec::new(),
            dir,
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The Filesystem discovery directory.
    pub fn disks(&self) -> PathBuf {
        self.root().join("disks")
    }

    /// The Block discovery directory.
    pub fn block(&self) -> PathBuf {
        self.root().join("block")
    }

    /// A Filesystem class over `disks/`, published under a different host path so tests see the two apart.
    pub fn fs_class(&self) -> DiscoveryClass {
        DiscoveryClass {
            name: "local-fs".into(),
            host_dir: "/mnt/disks".into(),
            mount_dir: self.disks(),
            mode: VolumeMode::Filesystem,
            name_patterns: vec!["*".into()],
        }
    }

    pub fn block_class(&self) -> DiscoveryClass {
        DiscoveryClass {
            name: "local-block".into(),
            host_dir: "/mnt/block".into(),
            mount_dir: self.block(),
            mode: VolumeMode::Block,
            name_patterns: vec!["*".into()],
        }
    }

    /// Create `path` (a directory) if needed and mount a tmpfs of `size` (e.g. `16m`) on it.
    pub fn tmpfs(&mut self, path: &Path, size: &str) {
        self.mounts.push(Mount::tmpfs(path, size, &Unwatched));
    }

    /// Create `path` if needed and mount a ramfs on it: a filesystem without extended attributes.
    pub fn ramfs(&mut self, path: &Path) {
        self.mounts.push(Mount::ramfs(path, &Unwatched));
    }

    /// Bind-mount `source` on `target` (created if needed).
    pub fn bind(&mut self, source: &Path, target: &Path) {
        self.mounts.push(Mount::bind(source, target, &Unwatched));
    }

    /// Attach a sparse backing file of `mib` MiB as a loop device.
    pub fn loop_device(&mut self, mib: u64) -> PathBuf {
        let backing = self
            .root()
            .join(format!("backing-{}.img", self.loops.len()));
        let _numbers = loop_numbers();
        self.keep_loop(LoopDevice::new(&backing, mib, None, &Unwatched))
    }

    /// Attach `backing` as a loop device on the first free loop number.
    pub fn attach(&mut self, backing: &Path) -> PathBuf {
        let _numbers = loop_numbers();
        self.keep_loop(LoopDevice::attach(backing, &Unwatched))
    }

    fn keep_loop(&mut self, device: LoopDevice) -> PathBuf {
        let path = device.path().to_path_buf();
        self.loops.push(device);
        path
    }

    /// Detach a loop device this scene attached (dropping it detaches it exactly once).
    pub fn detach(&mut self, device: &Path) {
        let at = self.loops.iter().position(|l| l.path() == device);
        drop(self.loops.remove(at.expect("a loop device of this scene")));
    }

    /// A loop device formatted with `fs_type` ("ext4" or "xfs") and `label`, mounted on `target`.
    pub fn formatted(&mut self, fs_type: &str, label: &str, target: &Path) -> PathBuf {
        let device = self.loop_device(320);
        mkfs(fs_type, device.to_str().expect("utf-8"), Some(label));
        self.mounts.push(Mount::device(&device, target, &Unwatched));
        device
    }

    /// Unmounts what this scene mounted on `target`, makes a new `fs_type` filesystem on `device` and mounts it
    /// there again: the same device, path and options, another filesystem.
    pub fn made_again(&mut self, device: &Path, fs_type: &str, target: &Path) {
        let at = self.mounts.iter().position(|m| m.path == target);
        self.mounts
            .remove(at.expect("a mount of this scene"))
            .unmount_now();
        mkfs(fs_type, device.to_str().expect("utf-8"), None);
        self.mounts.push(Mount::device(device, target, &Unwatched));
    }

    pub fn symlink(&self, target: &Path, link: &Path) {
        symlink(target, link).expect("create symlink");
    }
}

/// What blkid reads on a device, as (TYPE, UUID, LABEL).
pub fn blkid_identity(device: &Path) -> (Option<String>, Option<String>, Option<String>) {
    let mut found = blkid(device.to_str().expect("utf-8"));
    (
        found.remove("TYPE"),
        found.remove("UUID"),
        found.remove("LABEL"),
    )
}

/// statvfs total of `path` according to `stat -f` (blocks times fundamental block size).
pub fn stat_fs_total(path: &Path) -> u64 {
    let out = run(
        "stat",
        &["-f", "-c", "%b %S", path.to_str().expect("utf-8")],
    );
    let mut fields = out
        .split_whitespace()
        .map(|f| f.parse::<u64>().expect("number"));
    fields.next().expect("blocks") * fields.next().expect("block size")
}

/// Size in bytes according to `blockdev --getsize64`.
pub fn blockdev_size(device: &Path) -> u64 {
    run(
        "blockdev",
        &["--getsize64", device.to_str().expect("utf-8")],
    )
    .trim()
    .parse()
    .expect("number")
}

/// Held while a test of this binary attaches a loop device, and by a test that must see a freed loop number stay
/// free for a while (a detached device looked at twice): tests run in parallel and `losetup -f` takes the first free
/// number.
static LOOP_NUMBERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn loop_numbers() -> std::sync::MutexGuard<'static, ()> {
    LOOP_NUMBERS.lock().unwrap_or_else(|e| e.into_inner())
}
