//! Real disks for tests: tmpfs mounts and loop devices formatted with mkfs. Each is undone on drop, and tracked by
//! the control plane's watchdog (or a standalone one) in case the test process dies first.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::proc::Reaper;

/// Runs a command, panicking with its output when it fails or is missing.
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

/// A mount this test made (tmpfs, a loop-device filesystem, a bind mount). Unmounted on drop.
pub struct Mount {
    pub path: PathBuf,
}

impl Mount {
    pub fn tmpfs(path: &Path, size: &str, reaper: &Reaper) -> Mount {
        fs::create_dir_all(path).expect("mount point can be created");
        reaper.track_mount(path);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("tmpfs");
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                name,
                &path.display().to_string(),
            ],
        );
        Mount {
            path: path.to_path_buf(),
        }
    }

    pub fn device(dev: &str, path: &Path, reaper: &Reaper) -> Mount {
        fs::create_dir_all(path).expect("mount point can be created");
        reaper.track_mount(path);
        run("mount", &[dev, &path.display().to_string()]);
        Mount {
            path: path.to_path_buf(),
        }
    }

    /// A bind mount of directory `source` at `path`.
    pub fn bind(source: &Path, path: &Path, reaper: &Reaper) -> Mount {
        fs::create_dir_all(path).expect("mount point can be created");
        reaper.track_mount(path);
        run(
            "mount",
            &[
                "--bind",
                &source.display().to_string(),
                &path.display().to_string(),
            ],
        );
        Mount {
            path: path.to_path_buf(),
        }
    }

    pub fn unmount(mut self) {
        self.release();
    }

    fn release(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
            self.path = PathBuf::new();
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.release();
    }
}

/// A loop device over a sparse file, optionally formatted.
pub struct LoopDevice {
    pub device: String,
    pub backing: PathBuf,
}

impl LoopDevice {
    /// A `size_mib` MiB loop device; `fs` is `Some("ext4")`, `Some("xfs")` or `None` (raw, for block mode).
    pub fn new(backing: &Path, size_mib: u64, fs: Option<&str>, reaper: &Reaper) -> LoopDevice {
        let f = fs::File::create(backing).expect("backing file can be created");
        f.set_len(size_mib << 20)
            .expect("backing file can be sized");
        if let Some(fs) = fs {
            let b = backing.display().to_string();
            match fs {
                "xfs" => run("mkfs.xfs", &["-q", "-f", &b]),
                other => run(&format!("mkfs.{other}"), &["-q", "-F", &b]),
            };
        }
        let device = run(
            "losetup",
            &["--find", "--show", &backing.display().to_string()],
        )
        .trim()
        .to_string();
        reaper.track_loop(&device);
        LoopDevice {
            device,
            backing: backing.to_path_buf(),
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}
