//! Host fixtures for the wipe tests: tmpfs and bind mounts, loop devices, immutable flags, tree snapshots. Every
//! guard undoes its work in `Drop`, so a panicking test leaves no mount or loop device behind.

use std::collections::BTreeMap;
use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::fcntl::{OFlag, open, openat};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::{Mode, mkdirat};

/// Run a host tool; panic with its stderr when it fails (a missing tool is a failed prerequisite, never a skip).
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("prerequisite missing: cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A mount that is detached on drop.
pub struct Mount(PathBuf);

impl Mount {
    pub fn tmpfs(at: &Path) -> Mount {
        fs::create_dir_all(at).unwrap();
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=2g,nr_inodes=2m"),
        )
        .unwrap_or_else(|e| {
            panic!(
                "prerequisite missing: cannot mount tmpfs at {} (root needed): {e}",
                at.display()
            )
        });
        Mount(at.to_path_buf())
    }

    /// Bind `source` (a directory or a file) onto `at`, creating `at` as the same kind.
    pub fn bind(source: &Path, at: &Path) -> Mount {
        if source.is_dir() {
            fs::create_dir_all(at).unwrap();
        } else {
            fs::write(at, b"").unwrap();
        }
        mount(
            Some(source),
            at,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap_or_else(|e| {
            panic!(
                "cannot bind {} onto {}: {e}",
                source.display(),
                at.display()
            )
        });
        Mount(at.to_path_buf())
    }

    pub fn device(device: &Path, at: &Path) -> Mount {
        fs::create_dir_all(at).unwrap();
        run("mount", &[device.to_str().unwrap(), at.to_str().unwrap()]);
        Mount(at.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = umount2(&self.0, MntFlags::MNT_DETACH) {
            eprintln!("failed to unmount {}: {e}", self.0.display());
        }
    }
}

/// A loop device over a file; detached on drop.
pub struct Loop {
    pub device: PathBuf,
    pub backing: PathBuf,
}

impl Loop {
    /// A sparse backing file of `bytes` attached to a free loop device.
    pub fn new(dir: &Path, bytes: u64) -> Loop {
        let backing = dir.join("disk.img");
        fs::File::create(&backing).unwrap().set_len(bytes).unwrap();
        let device = run("losetup", &["--find", "--show", backing.to_str().unwrap()]);
        Loop {
            device: PathBuf::from(device),
            backing,
        }
    }

    pub fn path(&self) -> &str {
        self.device.to_str().unwrap()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let status = Command::new("losetup").arg("-d").arg(&self.device).status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("failed to detach {}", self.device.display());
        }
    }
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
