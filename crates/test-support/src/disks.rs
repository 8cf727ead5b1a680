//! Real disks for tests: tmpfs, ramfs, bind and device mounts, loop devices over sparse files formatted with mkfs,
//! and the host tools under them. The one copy for every tier: every test, benchmark and the demo reach it as
//! `localpv_test_support::disks`. It names nothing else of the harness (std and nix only).
//!
//! ```text
//!  Mount::tmpfs / ramfs / bind / device ──┐  guard: unmounted (lazily) on drop, also while a failing test unwinds
//!  LoopDevice::new / attach ──────────────┤  guard: detached on drop
//!                                         └─> Watchdog::track_*: undone by a watchdog if the process dies first
//! ```
//!
//! The control plane's `proc::Reaper` and the real-node tier's `realnode::undo::Undo` are watchdogs; the host and
//! wipe tests run without one ([`Unwatched`]). Tools that are missing fail the test naming them, never skip it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::{MntFlags, MsFlags, mount, umount2};

/// What undoes a mount or a loop device when the test process dies before its guard is dropped.
pub trait Watchdog {
    fn track_mount(&self, path: &Path);
    fn track_loop(&self, device: &str);
}

/// No watchdog: the guards' `Drop` alone undoes the work.
pub struct Unwatched;

impl Watchdog for Unwatched {
    fn track_mount(&self, _: &Path) {}
    fn track_loop(&self, _: &str) {}
}

/// Fails (never skips) unless the test runs as root with every one of `tools` on PATH; `tests` names the tests
/// in the message ("host tests").
pub fn require_root_and_tools(tests: &str, tools: &[&str]) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "{tests} need root (mount, losetup): run them as root"
    );
    for tool in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "{tests} need `{tool}` on PATH"
        );
    }
}

/// Runs a command and returns its stdout, panicking with its output when it fails or is missing.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("missing prerequisite: cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The filesystem type libblkid finds on `device`, probed directly (past any cache); `None` when there is none.
pub fn fs_signature(device: &str) -> Option<String> {
    let out = std::process::Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE", device])
        .output()
        .expect("missing prerequisite: blkid");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Formats `target` (a device or an image file) with `fs` ("ext4", "xfs", ...), with `label` if given.
pub fn mkfs(fs: &str, target: &str, label: Option<&str>) {
    // NB: mkfs.xfs forces with -f, the mke2fs family with -F.
    let force = if fs == "xfs" { "-f" } else { "-F" };
    let mut args = vec!["-q", force];
    if let Some(label) = label {
        args.extend(["-L", label]);
    }
    args.push(target);
    run(&format!("mkfs.{fs}"), &args);
}

/// What libblkid reads on `device`, probed directly (`-p`: no cache, which a reformat makes stale): TYPE, UUID,
/// LABEL...
pub fn blkid(device: &str) -> std::collections::BTreeMap<String, String> {
    run("blkid", &["-p", "-o", "export", device])
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A mount this test made. Unmounted lazily on drop.
pub struct Mount {
    pub path: PathBuf,
}

impl Mount {
    /// A tmpfs of `size` (`64M`) on `path`, created if needed.
    pub fn tmpfs(path: &Path, size: &str, watchdog: &dyn Watchdog) -> Mount {
        Self::tmpfs_with(path, &format!("size={size}"), watchdog)
    }

    /// A tmpfs with mount `options` (`size=2g,nr_inodes=2m`) on `path`, created if needed.
    pub fn tmpfs_with(path: &Path, options: &str, watchdog: &dyn Watchdog) -> Mount {
        // The source names the disk in the mount table, as an operator's would.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("tmpfs");
        Self::kernel(name, "tmpfs", Some(options), path, watchdog)
    }

    /// A ramfs on `path`: a filesystem without extended attributes.
    pub fn ramfs(path: &Path, watchdog: &dyn Watchdog) -> Mount {
        Self::kernel("ramfs", "ramfs", None, path, watchdog)
    }

    fn kernel(
        source: &str,
        fs_type: &str,
        options: Option<&str>,
        path: &Path,
        watchdog: &dyn Watchdog,
    ) -> Mount {
        fs::create_dir_all(path).expect("mount point can be created");
        watchdog.track_mount(path);
        mount(Some(source), path, Some(fs_type), MsFlags::empty(), options).unwrap_or_else(|e| {
            panic!(
                "missing prerequisite: cannot mount {fs_type} on {} (root needed): {e}",
                path.display()
            )
        });
        Mount {
            path: path.to_path_buf(),
        }
    }

    /// A bind mount of `source` (a directory or a file) at `path`, created as the same kind if needed.
    pub fn bind(source: &Path, path: &Path, watchdog: &dyn Watchdog) -> Mount {
        if source.is_dir() {
            fs::create_dir_all(path).expect("bind target can be created");
        } else if !path.exists() {
            fs::write(path, b"").expect("bind target file can be created");
        }
        watchdog.track_mount(path);
        mount(
            Some(source),
            path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap_or_else(|e| {
            panic!(
                "cannot bind {} on {}: {e}",
                source.display(),
                path.display()
            )
        });
        Mount {
            path: path.to_path_buf(),
        }
    }

    /// The filesystem on `device` at `path` (created if needed); `mount` probes its type.
    pub fn device(device: impl AsRef<Path>, path: &Path, watchdog: &dyn Watchdog) -> Mount {
        fs::create_dir_all(path).expect("mount point can be created");
        watchdog.track_mount(path);
        let device = device.as_ref().display().to_string();
        run("mount", &[&device, &path.display().to_string()]);
        Mount {
            path: path.to_path_buf(),
        }
    }

    /// Unmounts lazily now (what dropping does, at a point the test chooses).
    pub fn unmount(self) {}

    /// Leaves the mount in place for the watchdog to remove (an undo log that runs in order, at the end of the
    /// run), and returns its path.
    pub fn keep(mut self) -> PathBuf {
        std::mem::take(&mut self.path)
    }

    /// Unmounts now and not lazily: the device must be free before it is detached or reformatted.
    pub fn unmount_now(mut self) {
        let path = std::mem::take(&mut self.path);
        umount2(&path, MntFlags::empty())
            .unwrap_or_else(|e| panic!("failed to unmount {}: {e}", path.display()));
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.path.as_os_str().is_empty() {
            return;
        }
        if let Err(e) = umount2(&self.path, MntFlags::MNT_DETACH) {
            eprintln!("cleanup: failed to unmount {}: {e}", self.path.display());
        }
    }
}

/// A loop device over a backing file. Detached on drop.
pub struct LoopDevice {
    pub device: String,
    pub backing: PathBuf,
}

impl LoopDevice {
    /// A sparse backing file of `mib` MiB, formatted with `fs` when given (`Some("ext4")`, `Some("xfs")`; `None`
    /// leaves it raw, for block mode), attached to the first free loop device.
    pub fn new(backing: &Path, mib: u64, fs: Option<&str>, watchdog: &dyn Watchdog) -> LoopDevice {
        let file = fs::File::create(backing).expect("backing file can be created");
        file.set_len(mib << 20).expect("backing file can be sized");
        if let Some(fs) = fs {
            mkfs(fs, &backing.display().to_string(), None);
        }
        Self::attach(backing, watchdog)
    }

    /// `backing` as it is (not truncated, unlike `new`) attached to the first free loop device.
    pub fn attach(backing: &Path, watchdog: &dyn Watchdog) -> LoopDevice {
        let device = run(
            "losetup",
            &["--find", "--show", &backing.display().to_string()],
        )
        .trim()
        .to_string();
        watchdog.track_loop(&device);
        LoopDevice {
            device,
            backing: backing.to_path_buf(),
        }
    }

    /// `backing` attached under a loop number of its own, far above the lowest free one that `losetup --find`
    /// hands out (the kernel's LOOP_CTL_GET_FREE), so the test may detach it ([`LoopDevice::detach_only`]) and
    /// attach the same backing again as the same device ([`LoopDevice::reattach`]) without another process
    /// taking the number in between. `losetup` makes the device through `/dev/loop-control` when it is missing.
    pub fn attach_apart(backing: &Path, watchdog: &dyn Watchdog) -> LoopDevice {
        let start = 200 + std::process::id() % 40;
        for n in start..start + 40 {
            if Path::new(&format!("/sys/block/loop{n}/loop")).exists() {
                continue;
            }
            let device = format!("/dev/loop{n}");
            let attached = Command::new("losetup")
                .args([device.as_str(), &backing.display().to_string()])
                .output()
                .is_ok_and(|o| o.status.success());
            if attached {
                watchdog.track_loop(&device);
                return LoopDevice {
                    device,
                    backing: backing.to_path_buf(),
                };
            }
        }
        panic!("no free loop number in {start}..{}", start + 40);
    }

    /// Detaches the device and keeps its number (and the guard): what the kernel shows of a raw loop device
    /// detached (size 0, no `loop/`) until [`LoopDevice::reattach`].
    pub fn detach_only(&self) {
        run("losetup", &["-d", &self.device]);
    }

    /// Attaches the same backing file again under the same number: the same device, back.
    pub fn reattach(&self) {
        run(
            "losetup",
            &[&self.device, &self.backing.display().to_string()],
        );
    }

    pub fn path(&self) -> &Path {
        Path::new(&self.device)
    }

    /// Leaves the device attached for the watchdog to detach (an undo log that runs in order, at the end of the
    /// run), and returns its path.
    pub fn keep(mut self) -> String {
        std::mem::take(&mut self.device)
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if self.device.is_empty() {
            return;
        }
        let detached = Command::new("losetup").args(["-d", &self.device]).status();
        if !detached.is_ok_and(|s| s.success()) {
            eprintln!("cleanup: failed to detach {}", self.device);
        }
    }
}
