//! A disk that fails on command: ext4 or xfs on a loop device whose backing file is read and written through a
//! FUSE server (`faultyfs.py`) that returns EIO (or ENXIO) when told to. The loop driver turns those into block
//! I/O errors, so the filesystem sees what a failing disk would give it: this kernel has no device-mapper and no
//! fault injection to do it otherwise. Std and nix only, and reaches the rest of the harness only through
//! `super::disks`.
//!
//! ```text
//!  <work>/faulty-backing/disk.img   sparse image, formatted directly (no FUSE round trips for mkfs)
//!        │ faultyfs.py (FUSE, direct_io)  <── <work>/faulty.sock: ok | fail-reads | ... | flap N | gone
//!  <work>/faulty-fuse/disk.img
//!        │ losetup --direct-io=off        (buffered: the loop driver reads and writes through FUSE)
//!  /dev/loopN  ── mount_at(path) ──> ext4 (errors=remount-ro) / xfs
//! ```
//!
//! Teardown runs in the reverse order: the test drops its [`Mount`] first (declare it after the disk), then the
//! disk's Drop switches back to `ok`, detaches the loop device, unmounts the FUSE mount and waits for the server to
//! exit. A watchdog is told of the FUSE mount, the loop device and the filesystem mount in that order, and undoes
//! mounts newest first and then loop devices: the FUSE mount is then detached lazily while the loop device still
//! holds the image, and the server exits on its own once `losetup -d` lets go of it.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::ops::Range;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::mount::{MntFlags, umount2};

use super::disks::{LoopDevice, Mount, Watchdog, mkfs, run};

/// The FUSE server, next to this file.
const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/faultyfs.py");
/// NB: Debian's python3-fusepy is importable by the system python only (a pyenv shim may come first on PATH).
const PYTHON: &str = "/usr/bin/python3";
const IMAGE: &str = "disk.img";

/// What the disk does with the requests it gets from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ok,
    /// Reads fail with EIO.
    FailReads,
    /// Writes and flushes (fsync) fail with EIO.
    FailWrites,
    /// Reads, writes and flushes fail with EIO.
    FailAll,
    /// Every Nth read or write fails with EIO, counted from the switch: a flapping disk.
    Flap(u32),
    /// Every request fails with ENXIO, lookups of the image included: a disk that disappeared.
    Gone,
}

impl Mode {
    fn command(self) -> String {
        match self {
            Mode::Ok => "ok".into(),
            Mode::FailReads => "fail-reads".into(),
            Mode::FailWrites => "fail-writes".into(),
            Mode::FailAll => "fail-all".into(),
            Mode::Flap(n) => format!("flap {n}"),
            Mode::Gone => "gone".into(),
        }
    }
}

/// What the server saw since the last switch: data requests and how many of all requests it failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub reads: u64,
    pub writes: u64,
    pub failed: u64,
}

/// A formatted loop device over a FUSE-served image that fails on command. Torn down on drop.
pub struct FaultyDisk {
    fs: String,
    control: PathBuf,
    fuse_mount: PathBuf,
    server: Child,
    // An Option only so Drop can detach it before unmounting FUSE.
    device: Option<LoopDevice>,
}

impl FaultyDisk {
    /// A sparse image of `mib` MiB in `<work_dir>/faulty-backing`, formatted with `fs` ("ext4", "xfs": at least
    /// 300 MiB), served by faultyfs at `<work_dir>/faulty-fuse` and attached to a free loop device. One per
    /// `work_dir`.
    pub fn new(work_dir: &Path, mib: u64, fs: &str, watchdog: &dyn Watchdog) -> FaultyDisk {
        let backing = work_dir.join("faulty-backing");
        let fuse_mount = work_dir.join("faulty-fuse");
        let control = work_dir.join("faulty.sock");
        for dir in [&backing, &fuse_mount] {
            fs::create_dir_all(dir).expect("faulty disk dirs can be created");
        }
        let image = backing.join(IMAGE);
        let file = fs::File::create(&image).expect("disk image can be created");
        file.set_len(mib << 20).expect("disk image can be sized");
        mkfs(fs, &image.display().to_string(), None);

        watchdog.track_mount(&fuse_mount);
        let server = start_server(&backing, &fuse_mount, &control, work_dir);
        let mut disk = FaultyDisk {
            fs: fs.to_string(),
            control,
            fuse_mount,
            server,
            device: None,
        };
        disk.wait_served(&work_dir.join("faultyfs.log"));

        let served = disk.fuse_mount.join(IMAGE).display().to_string();
        let device = run("losetup", &["--direct-io=off", "--find", "--show", &served])
            .trim()
            .to_string();
        watchdog.track_loop(&device);
        disk.device = Some(LoopDevice {
            device,
            backing: image,
        });
        disk
    }

    /// Waits until the image shows through the FUSE mount; panics with the server's log if it exits or times out.
    fn wait_served(&mut self, log: &Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.fuse_mount.join(IMAGE).exists() {
            let exited = self.server.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "faultyfs did not serve {} ({exited:?}): {}",
                    self.fuse_mount.display(),
                    fs::read_to_string(log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The loop device: `/dev/loopN`.
    pub fn device(&self) -> &str {
        &self.device.as_ref().expect("attached until dropped").device
    }

    /// The device's name under `/sys/fs/ext4/` and `/sys/fs/xfs/`: `loopN`.
    pub fn name(&self) -> &str {
        self.device().trim_start_matches("/dev/")
    }

    /// Mounts the filesystem at `path` (created if needed); ext4 with `errors=remount-ro`, as a node would.
    pub fn mount_at(&self, path: &Path, watchdog: &dyn Watchdog) -> Mount {
        fs::create_dir_all(path).expect("mount point can be created");
        watchdog.track_mount(path);
        let target = path.display().to_string();
        let mut args = vec![self.device(), target.as_str()];
        if self.fs == "ext4" {
            args.extend(["-o", "errors=remount-ro"]);
        }
        run("mount", &args);
        Mount {
            path: path.to_path_buf(),
        }
    }

    /// Switches every request from now on to `mode`.
    pub fn set(&self, mode: Mode) {
        self.send(&mode.command());
    }

    /// Switches reads and writes that overlap `bytes` of the image to `mode`; the rest, and flushes (they name no
    /// bytes), succeed. `Gone` ignores the range.
    pub fn set_range(&self, mode: Mode, bytes: Range<u64>) {
        self.send(&format!("{} {}-{}", mode.command(), bytes.start, bytes.end));
    }

    /// What the server saw since the last switch.
    pub fn stats(&self) -> Stats {
        let reply = self.send("stats");
        let mut stats = Stats::default();
        for (key, value) in reply.split_whitespace().filter_map(|w| w.split_once('=')) {
            let value = value.parse().unwrap_or(0);
            match key {
                "reads" => stats.reads = value,
                "writes" => stats.writes = value,
                "failed" => stats.failed = value,
                _ => {}
            }
        }
        stats
    }

    /// Sends one control line and returns the server's answer; panics unless it starts with "ok".
    fn send(&self, line: &str) -> String {
        self.try_send(line)
            .unwrap_or_else(|e| panic!("faultyfs control `{line}` failed: {e}"))
    }

    fn try_send(&self, line: &str) -> Result<String, String> {
        let talk = || -> std::io::Result<String> {
            let mut stream = UnixStream::connect(&self.control)?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            stream.write_all(format!("{line}\n").as_bytes())?;
            let mut reply = String::new();
            BufReader::new(stream).read_line(&mut reply)?;
            Ok(reply.trim().to_string())
        };
        match talk() {
            Ok(reply) if reply.starts_with("ok") => Ok(reply),
            Ok(reply) => Err(format!("refused: {reply}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn start_server(backing: &Path, fuse_mount: &Path, control: &Path, work_dir: &Path) -> Child {
    let log = fs::File::create(work_dir.join("faultyfs.log")).expect("server log can be created");
    Command::new(PYTHON)
        .arg(SERVER)
        .arg("--backing")
        .arg(backing)
        .arg("--mountpoint")
        .arg(fuse_mount)
        .arg("--control")
        .arg(control)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("server log can be shared"))
        .stderr(log)
        // Its own group: a ^C meant for the test must not take the FUSE mount away from under the loop device
        // before the guards (or the watchdog) have unwound it in order.
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("missing prerequisite: cannot run {PYTHON} {SERVER}: {e}"))
}

impl Drop for FaultyDisk {
    fn drop(&mut self) {
        // Healthy again, so that detaching and unmounting are not themselves failed by the server.
        if let Err(e) = self.try_send("ok") {
            eprintln!("cleanup: faultyfs did not switch back to ok: {e}");
        }
        drop(self.device.take());
        // NB: a lazy unmount would leave the server running as long as anything holds the image; try the plain
        // one first so a leftover holder shows in the log.
        if let Err(e) = umount2(&self.fuse_mount, MntFlags::empty()) {
            eprintln!(
                "cleanup: {} busy ({e}), detaching it lazily",
                self.fuse_mount.display()
            );
            let _ = umount2(&self.fuse_mount, MntFlags::MNT_DETACH);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.server.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                eprintln!("cleanup: faultyfs did not exit once unmounted, killing it");
                let _ = self.server.kill();
                let _ = self.server.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
