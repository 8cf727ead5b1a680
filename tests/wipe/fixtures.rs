//! What only the wipe tests need on top of `localpv_test_support::disks`: their tmpfs and loop device sizes, immutable flags,
//! tree snapshots and trees built by fd. Every guard undoes its work in `Drop`, so a panicking test leaves no
//! mount, loop device or immutable flag behind.

use std::collections::BTreeMap;
use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::fcntl::{OFlag, open, openat};
use nix::sys::stat::{Mode, mkdirat};

use crate::disks::{LoopDevice, Mount, Unwatched, run};

/// A tmpfs on `at` large enough for the many-files trees (2 GiB, 2 million inodes; memory only as it fills).
pub fn tmpfs(at: &Path) -> Mount {
    Mount::tmpfs_with(at, "size=2g,nr_inodes=2m", &Unwatched)
}

/// A raw loop device of `bytes` (whole MiB) over a sparse `dir/disk.img`.
pub fn loop_disk(dir: &Path, bytes: u64) -> LoopDevice {
    assert_eq!(bytes % (1 << 20), 0, "loop devices come in whole MiB");
    LoopDevice::new(&dir.join("disk.img"), bytes >> 20, None, &Unwatched)
}

/// `chattr +i` on a file, undone on drop (before its filesystem is unmounted: declare it after the mount).
pub struct Immutable(PathBuf);

impl Immutable {
    pub fn set(path: &Path) -> Immutable {
        run("chattr", &["+i", path.to_str().unwrap()]);
        Immutable(path.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// What a tree looks like without crossing mounts or following symlinks: relative path -> kind and content hash.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let dev = fs::symlink_metadata(root).unwrap().dev();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let kind = meta.file_type();
            let desc = if kind.is_symlink() {
                format!("symlink {}", fs::read_link(&path).unwrap().display())
            } else if kind.is_dir() {
                if meta.dev() == dev {
                    todo.push(path.clone());
                }
                format!("dir dev={}", meta.dev() == dev)
            } else if kind.is_file() {
                let mut h = DefaultHasher::new();
                fs::read(&path).unwrap().hash(&mut h);
                format!("file {:x}", h.finish())
            } else if kind.is_fifo() {
                "fifo".into()
            } else if kind.is_socket() {
                "socket".into()
            } else {
                format!("device {:x}", meta.rdev())
            };
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), desc);
        }
    }
    out
}

/// Names under `root` (relative), without crossing into mounts.
pub fn listing(root: &Path) -> Vec<PathBuf> {
    snapshot(root).into_keys().collect()
}

/// `levels` nested directories named `d` under `dir`, built by fd so no path exceeds PATH_MAX; a file at the bottom.
pub fn deep_tree(dir: &Path, levels: usize) {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut fd: OwnedFd = open(dir, flags, Mode::empty()).unwrap();
    for _ in 0..levels {
        mkdirat(fd.as_fd(), "d", Mode::from_bits_truncate(0o755)).unwrap();
        fd = openat(fd.as_fd(), "d", flags, Mode::empty()).unwrap();
    }
    let file = openat(
        fd.as_fd(),
        "bottom",
        OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    );
    drop(file.unwrap());
}

/// `dirs` directories of `per_dir` small files each under `root`.
pub fn many_files(root: &Path, dirs: usize, per_dir: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("dir{d:04}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir {
            fs::write(dir.join(format!("f{f:05}")), b"x").unwrap();
        }
    }
}

/// `st_dev` of `path` as the wipe expects it.
pub fn dev_of(path: &Path) -> localpv::contract::DevId {
    localpv::contract::DevId::from_dev(fs::metadata(path).unwrap().dev())
}
