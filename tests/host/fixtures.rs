//! Real mounts and loop devices for host tests, each undone by a Drop guard (also when the test panics).
//!
//! A [`Scene`] owns one temporary directory and everything mounted or attached under it; dropping it unmounts in
//! reverse order, detaches loop devices, then removes the directory.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use localpv::disk::{DiscoveryClass, VolumeMode};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use tempfile::TempDir;

/// Fail (never skip) when the machine cannot run these tests.
pub fn require_root_and_tools() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "host tests need root (mount, losetup): run them as root"
    );
    for tool in [
        "losetup",
        "mkfs.ext4",
        "mkfs.xfs",
        "blkid",
        "blockdev",
        "stat",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "host tests need `{tool}` on PATH"
        );
    }
}

/// Run a command and return its stdout, failing the test with its stderr otherwise.
pub fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("command output is UTF-8")
}

pub struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(errno) = umount2(&self.0, MntFlags::MNT_DETACH) {
            eprintln!("cleanup: failed to unmount {}: {errno}", self.0.display());
        }
    }
}

pub struct LoopDevice(pub PathBuf);

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let detached = Command::new("losetup").arg("-d").arg(&self.0).status();
        if !detached.is_ok_and(|s| s.success()) {
            eprintln!("cleanup: failed to detach {}", self.0.display());
        }
    }
}

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
        require_root_and_tools();
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
        fs::create_dir_all(path).expect("create mount point");
        let options = format!("size={size}");
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            MsFlags::empty(),
            Some(options.as_str()),
        )
        .unwrap_or_else(|e| panic!("mount tmpfs on {}: {e}", path.display()));
        self.mounts.push(Mount(path.into()));
    }

    /// Create `path` if needed and mount a ramfs on it: a filesystem without extended attributes.
    pub fn ramfs(&mut self, path: &Path) {
        fs::create_dir_all(path).expect("create mount point");
        mount(
            Some("ramfs"),
            path,
            Some("ramfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap_or_else(|e| panic!("mount ramfs on {}: {e}", path.display()));
        self.mounts.push(Mount(path.into()));
    }

    /// Bind-mount `source` on `target` (created if needed).
    pub fn bind(&mut self, source: &Path, target: &Path) {
        fs::create_dir_all(target).expect("create bind target");
        mount(
            Some(source),
            target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap_or_else(|e| panic!("bind {} on {}: {e}", source.display(), target.display()));
        self.mounts.push(Mount(target.into()));
    }

    /// Attach a sparse backing file of `mib` MiB as a loop device.
    pub fn loop_device(&mut self, mib: u64) -> PathBuf {
        let backing = self
            .root()
            .join(format!("backing-{}.img", self.loops.len()));
        let file = fs::File::create(&backing).expect("create backing file");
        file.set_len(mib << 20).expect("size backing file");
        self.attach(&backing)
    }

    /// Attach `backing` as a loop device on the first free loop number.
    pub fn attach(&mut self, backing: &Path) -> PathBuf {
        let device = PathBuf::from(
            run(
                "losetup",
                &["--find", "--show", backing.to_str().expect("utf-8")],
            )
            .trim(),
        );
        self.loops.push(LoopDevice(device.clone()));
        device
    }

    /// Detach a loop device this scene attached (dropping it detaches it exactly once).
    pub fn detach(&mut self, device: &Path) {
        let at = self.loops.iter().position(|l| l.0 == device);
        drop(self.loops.remove(at.expect("a loop device of this scene")));
    }

    /// A loop device formatted with `fs_type` ("ext4" or "xfs") and `label`, mounted on `target`.
    pub fn formatted(&mut self, fs_type: &str, label: &str, target: &Path) -> PathBuf {
        let device = self.loop_device(320);
        let dev = device.to_str().expect("utf-8");
        match fs_type {
            "ext4" => run("mkfs.ext4", &["-q", "-F", "-L", label, dev]),
            "xfs" => run("mkfs.xfs", &["-q", "-f", "-L", label, dev]),
            other => panic!("no mkfs for {other}"),
        };
        fs::create_dir_all(target).expect("create mount point");
        mount(
            Some(device.as_path()),
            target,
            Some(fs_type),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap_or_else(|e| panic!("mount {} on {}: {e}", device.display(), target.display()));
        self.mounts.push(Mount(target.into()));
        device
    }

    pub fn symlink(&self, target: &Path, link: &Path) {
        symlink(target, link).expect("create symlink");
    }
}

/// `blkid -o export` of a device, as (TYPE, UUID, LABEL).
pub fn blkid(device: &Path) -> (Option<String>, Option<String>, Option<String>) {
    let export = run(
        "blkid",
        &[
            "-c",
            "/dev/null",
            "-o",
            "export",
            device.to_str().expect("utf-8"),
        ],
    );
    let field = |key: &str| {
        export
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    };
    (field("TYPE"), field("UUID"), field("LABEL"))
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
