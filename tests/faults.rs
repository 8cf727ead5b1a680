//! Real I/O errors under ext4 and xfs, from a disk that fails on command (`localpv_test_support::faulty`): what the kernel
//! records and what syscalls return, printed (eprintln) so the agent's detection can be built on exactly these
//! values. Needs root, /dev/fuse and Debian's python3-fusepy; fails, never skips, without them. Each test checks
//! that it left nothing mounted or attached.

use localpv_test_support::disks;
use localpv_test_support::faulty;

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use disks::{Mount, Unwatched, require_root_and_tools, run};
use faulty::{FaultyDisk, Mode};

const EIO: i32 = nix::libc::EIO;
const BLOCK: usize = 4096;

/// A faulty disk mounted in a temp dir. Fields drop in order: the filesystem, then the disk, then the dir.
struct Scene {
    fs: String,
    mount: Option<Mount>,
    disk: FaultyDisk,
    dir: tempfile::TempDir,
    started: Instant,
}

impl Scene {
    fn new(fs: &str, mib: u64) -> Scene {
        require_root_and_tools(
            "fault tests",
            &["losetup", "mount", "mkfs.ext4", "mkfs.xfs"],
        );
        assert!(
            Path::new("/dev/fuse").exists(),
            "fault tests need /dev/fuse (FUSE)"
        );
        let started = Instant::now();
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = FaultyDisk::new(dir.path(), mib, fs, &Unwatched);
        let mount = disk.mount_at(&dir.path().join("fs"), &Unwatched);
        Scene {
            fs: fs.to_string(),
            mount: Some(mount),
            disk,
            dir,
            started,
        }
    }

    /// A scene holding the file `data` of `blocks` blocks, written and synced while the disk was healthy.
    fn with_data(fs: &str, mib: u64, blocks: usize) -> (Scene, PathBuf) {
        let scene = Scene::new(fs, mib);
        let file = scene.path("data");
        write_synced(&file, b'a', blocks).expect("healthy disk takes writes");
        (scene, file)
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("fs")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// `/sys/fs/<fs>/<loopN>`: what the kernel shows of the mounted filesystem.
    fn sysfs(&self) -> PathBuf {
        Path::new("/sys/fs").join(&self.fs).join(self.disk.name())
    }

    /// Tears down and asserts nothing of this scene is left mounted or attached; prints how long it all took.
    fn finish(mut self, test: &str) {
        let dir = self.dir.path().display().to_string();
        drop(self.mount.take());
        let Scene { disk, dir: tmp, .. } = self;
        drop(disk);
        let mounts = fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        let loops = run("losetup", &["-a"]);
        assert!(!mounts.contains(&dir), "left mounted: {mounts}");
        assert!(!loops.contains(&dir), "left attached: {loops}");
        drop(tmp);
        eprintln!("{test}: took {:?}", self.started.elapsed());
    }
}

/// Writes `blocks` blocks of `byte` to `path` and fsyncs it.
fn write_synced(path: &Path, byte: u8, blocks: usize) -> std::io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(&vec![byte; blocks * BLOCK])?;
    file.sync_all()
}

/// Reads block `index` of `path` with O_DIRECT: it reaches the disk whatever the page cache holds.
fn read_direct(path: &Path, index: usize) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECT)
        .open(path)?;
    // NB: O_DIRECT wants a block-aligned buffer; Vec only promises u8 alignment, so align within a larger one.
    let mut raw = vec![0u8; 2 * BLOCK];
    let skip = raw.as_ptr().align_offset(BLOCK);
    file.seek(SeekFrom::Start((index * BLOCK) as u64))?;
    file.read_exact(&mut raw[skip..skip + BLOCK])
}

/// Asserts `result` is the EIO a failed disk gives, naming `what` was tried.
fn assert_eio<T: std::fmt::Debug>(result: std::io::Result<T>, what: &str) {
    let err = result.expect_err(what);
    assert_eq!(err.raw_os_error(), Some(EIO), "{what}: {err}");
}

fn syncfs(dir: &Path) -> nix::Result<()> {
    nix::unistd::syncfs(File::open(dir).expect("mount root opens"))
}

/// `name=value` for each regular file under `dir`, recursively, sorted; values trimmed, unreadable ones skipped.
fn sysfs_values(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(value) = fs::read_to_string(&path) {
                let name = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                out.push(format!("{name}={}", value.trim().replace('\n', " | ")));
            }
        }
    }
    out.sort();
    out
}

/// The mountinfo line of the mount at `path`.
fn mountinfo(path: &Path) -> String {
    let target = format!(" {} ", path.display());
    fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .find(|l| l.contains(&target))
        .unwrap_or_else(|| panic!("{} not in mountinfo", path.display()))
        .to_string()
}

#[test]
fn ext4_counts_the_error_and_goes_read_only_when_its_disk_fails_writes() {
    let (scene, _) = Scene::with_data("ext4", 64, 4);
    let (root, sysfs) = (scene.root(), scene.sysfs());
    assert_eq!(
        fs::read_to_string(sysfs.join("errors_count"))
            .unwrap()
            .trim(),
        "0"
    );

    scene.disk.set(Mode::FailWrites);
    assert_eio(write_synced(&scene.path("during"), b'b', 4), "fsync fails");
    // The data write failed; the journal commit that syncfs forces fails too and aborts the journal, which ext4
    // notices (and records) at the next metadata change.
    assert_eq!(syncfs(&root), Err(nix::errno::Errno::EIO));
    let err = File::create(scene.path("after")).expect_err("metadata change refused");
    assert_eq!(err.kind(), ErrorKind::ReadOnlyFilesystem, "{err}");

    let values = sysfs_values(&sysfs);
    let line = mountinfo(&root);
    let flags = nix::sys::statvfs::statvfs(&root).unwrap().flags();
    eprintln!("ext4 after failed writes: {values:#?}\nmountinfo: {line}\nstatvfs flags: {flags:?}");
    let value = |name: &str| {
        fs::read_to_string(sysfs.join(name))
            .unwrap()
            .trim()
            .to_string()
    };
    assert!(value("errors_count").parse::<u64>().unwrap() > 0);
    assert_ne!(value("first_error_time"), "0");
    // EXT4_ERR_EIO
    assert_eq!(value("first_error_errcode"), "2");
    // NB: 6.18 marks the superblock `emergency_ro` and leaves both option fields `rw` (statvfs's ST_RDONLY is
    // clear too); older kernels show `ro` instead.
    let super_options = line.rsplit(' ').next().unwrap();
    assert!(
        super_options
            .split(',')
            .any(|o| o == "emergency_ro" || o == "ro"),
        "{line}"
    );
    let stats = scene.disk.stats();
    eprintln!("faultyfs: {stats:?}");
    assert!(stats.failed > 0);
    scene.finish("ext4 fail-writes");
}

#[test]
fn ext4_reads_of_a_disk_failing_reads_return_eio() {
    let (scene, file) = Scene::with_data("ext4", 64, 4);
    read_direct(&file, 0).expect("healthy disk reads");

    scene.disk.set(Mode::FailReads);
    assert_eio(read_direct(&file, 1), "read fails");
    // Writes still go through: the disk fails only one direction.
    write_synced(&scene.path("more"), b'b', 1).expect("writes still work");
    eprintln!(
        "ext4 after a failed data read: {:#?}\nfaultyfs: {:?}",
        sysfs_values(&scene.sysfs()),
        scene.disk.stats()
    );

    scene.disk.set(Mode::Ok);
    read_direct(&file, 1).expect("reads again once the disk is ok");
    scene.finish("ext4 fail-reads");
}

#[test]
fn xfs_shuts_down_when_its_disk_fails_writes() {
    let (scene, data) = Scene::with_data("xfs", 300, 4);
    let (root, sysfs) = (scene.root(), scene.sysfs());
    let healthy = sysfs_values(&sysfs);

    scene.disk.set(Mode::FailWrites);
    assert_eio(write_synced(&scene.path("during"), b'b', 4), "fsync fails");
    // The log write fails: xfs shuts down ("log I/O error -5", "Filesystem has been shut down due to log error").
    assert_eq!(syncfs(&root), Err(nix::errno::Errno::EIO));
    // Shut down, every path lookup and change fails with EIO, even of what was written while healthy; the disk is
    // not consulted (it is ok again), statfs alone still answers.
    scene.disk.set(Mode::Ok);
    for (what, result) in [
        ("stat root", fs::metadata(&root).map(drop)),
        ("read", fs::read(&data).map(drop)),
        ("create", File::create(scene.path("after")).map(drop)),
    ] {
        assert_eio(result, what);
    }
    // NB: on 6.18, /sys/fs/xfs/<dev>/ holds no shutdown state: error/ is the retry configuration (fail_at_unmount,
    // metadata/<errno>/max_retries, retry_timeout_seconds), log/ the head and tail LSNs and grant heads, stats/stats
    // operation counters with no error counter. The only difference from before is counters moving.
    let failed = sysfs_values(&sysfs);
    let changed: Vec<_> = failed.iter().filter(|v| !healthy.contains(v)).collect();
    eprintln!("xfs shut down: {failed:#?}\nchanged since healthy: {changed:#?}");
    eprintln!("mountinfo: {}", mountinfo(&root));
    assert!(nix::sys::statvfs::statvfs(&root).is_ok());
    scene.finish("xfs fail-writes");
}

#[test]
fn a_range_fails_only_the_requests_that_overlap_it() {
    let scene = Scene::new("ext4", 64);
    // The device itself, read with O_DIRECT: device offsets are image offsets.
    let device = PathBuf::from(scene.disk.device());
    scene
        .disk
        .set_range(Mode::FailReads, 1 << 20..(1 << 20) + BLOCK as u64);
    assert_eio(read_direct(&device, 256), "block at 1 MiB fails");
    read_direct(&device, 255).expect("block before the range reads");
    read_direct(&device, 257).expect("block after the range reads");
    let stats = scene.disk.stats();
    eprintln!("range 1MiB..+4KiB: faultyfs: {stats:?}");
    assert_eq!((stats.reads, stats.failed), (3, 1));
    scene.finish("range");
}

#[test]
fn reads_of_a_disk_that_is_gone_return_eio() {
    let (scene, file) = Scene::with_data("ext4", 64, 4);

    scene.disk.set(Mode::Gone);
    assert_eio(read_direct(&file, 0), "read fails");
    assert_eio(write_synced(&scene.path("new"), b'b', 1), "fsync fails");
    let stats = scene.disk.stats();
    eprintln!(
        "ext4 on a gone disk: {:#?}\nfaultyfs: {stats:?}",
        sysfs_values(&scene.sysfs())
    );
    assert!(stats.failed >= 2, "{stats:?}");
    scene.finish("gone");
}

#[test]
fn a_flapping_disk_fails_only_every_nth_read() {
    let (scene, file) = Scene::with_data("ext4", 64, 12);

    scene.disk.set(Mode::Flap(3));
    // One O_DIRECT block read is one request to the disk.
    let outcome: Vec<bool> = (0..12).map(|i| read_direct(&file, i).is_ok()).collect();
    let stats = scene.disk.stats();
    eprintln!("flap 3 over 12 reads (true = ok): {outcome:?}\nfaultyfs: {stats:?}");
    let failed = outcome.iter().filter(|ok| !**ok).count();
    assert_eq!((failed, stats.reads, stats.failed), (4, 12, 4));
    assert_eq!(outcome, [true, true, false].repeat(4));
    scene.finish("flap");
}
