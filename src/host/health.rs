//! What the kernel shows about a disk's health (issue 37, point 1), read without privileges beyond the agent's and
//! without writing anything:
//! - the device still exists (`/sys/dev/block/M:m`) and still holds something: a size of 0 (a loop device
//!   detached, removable media gone) or a loop device whose backing file was deleted (the data goes with the next
//!   unmount) is gone too. A loop device detached while mounted (`losetup -d`, or the autoclear `mount -o loop`
//!   sets) keeps serving its backing file until the unmount: not gone;
//! - ext2/3/4 keep an error counter in the superblock, shown at `/sys/fs/ext4/<dev>/errors_count`;
//! - ext4 that stopped writing after an error says `emergency_ro` in the mount table's superblock options (Linux
//!   6.x: `statvfs` and the mount options still say read-write), older kernels `ro` there or in `statvfs`; one that shut
//!   itself down (xfs after a metadata I/O error, or `xfs_io -x -c shutdown`) still answers `statvfs` but fails
//!   reading its root directory with EIO, so the root is read too;
//! - a read probe: one 4 KiB block of the device read with `O_DIRECT`, past every cache, at an offset that moves
//!   with each probe, so a failing medium answers EIO;
//! - the device's own health log (NVMe), read by `host::smart` and added by `LinuxHost::health`.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::contract::DevId;
use crate::disk::VolumeMode;
use crate::health::Signals;

/// One disk to look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthProbe {
    /// The volume as this process sees it (`mountDir/entry`).
    pub path: PathBuf,
    pub mode: VolumeMode,
    /// The device number the volume lives on (the mount's, or the block device's).
    pub dev: Option<DevId>,
    /// The device node to read from (`/dev/loop3`), when there is one.
    pub device: Option<PathBuf>,
    pub fs_type: Option<String>,
    /// The superblock options the mount table shows for the volume (`ro`, `emergency_ro`...), when known.
    pub super_options: Option<String>,
    /// Moves the probed block from one probe to the next.
    pub round: u64,
}

const BLOCK: usize = 4096;

/// Whether an error is the medium's (or the device's absence), not a permission or a bug.
fn is_io(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(nix::libc::EIO | nix::libc::ENXIO | nix::libc::ENODEV | nix::libc::EUCLEAN)
    )
}

pub(super) fn signals(sys: &Path, probe: &HealthProbe) -> Signals {
    let mut out = Signals::default();
    let sys_dev = probe
        .dev
        .filter(|d| !d.is_anonymous())
        .map(|d| sys.join("dev/block").join(d.to_string()));
    if let Some(sys_dev) = &sys_dev
        && (!sys_dev.exists() || emptied(sys_dev))
    {
        out.gone = true;
        return out;
    }
    let name = sys_dev
        .as_deref()
        .and_then(|p| fs::read_link(p).ok())
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
    if let (Some(name), Some("ext2" | "ext3" | "ext4")) = (&name, probe.fs_type.as_deref()) {
        let counter = sys.join("fs/ext4").join(name).join("errors_count");
        out.fs_errors = fs::read_to_string(counter)
            .ok()
            .and_then(|t| t.trim().parse().ok());
    }
    if probe.mode == VolumeMode::Filesystem {
        match nix::sys::statvfs::statvfs(&probe.path) {
            Ok(stat) => {
                let options = probe.super_options.as_deref().unwrap_or_default();
                let emergency = options.split(',').any(|o| o == "emergency_ro");
                let read_only = stat.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY)
                    || options.split(',').next() == Some("ro");
                out.fs_shut_down = emergency || (read_only && out.fs_errors.unwrap_or(0) > 0);
            }
            Err(errno) => {
                let error = io::Error::from(errno);
                if is_io(&error) {
                    out.fs_shut_down = true;
                    out.probe_error = Some(format!("statvfs of {}: {error}", probe.path.display()));
                }
            }
        }
    }
    // NB: the live mount table (statmount) may not carry superblock options; a filesystem that counted errors is
    // looked up in /proc/self/mountinfo, which always does (one read, only for such a disk).
    if out.fs_errors.unwrap_or(0) > 0
        && !out.fs_shut_down
        && let Ok(text) = fs::read("/proc/self/mountinfo")
        && let Ok(table) = crate::host::MountTable::parse(&text)
        && let Some(mount) = table.mount_at(&probe.path)
    {
        out.fs_shut_down = mount
            .super_options
            .split(',')
            .any(|o| o == "emergency_ro" || o == "ro");
    }
    if probe.mode == VolumeMode::Filesystem
        && out.probe_error.is_none()
        && let Err(error) =
            fs::read_dir(&probe.path).and_then(|mut d| d.next().transpose().map(drop))
        && is_io(&error)
    {
        out.probe_error = Some(format!("reading {}: {error}", probe.path.display()));
    }
    if out.probe_error.is_none()
        && let Some(device) = &probe.device
        && let Err(error) = read_one_block(device, probe.round)
        && is_io(&error)
    {
        out.probe_error = Some(format!("a direct read of {}: {error}", device.display()));
    }
    out
}

/// Whether the kernel still lists the device at `sys_dev` but it no longer holds the disk: size 0, or a loop device
/// (or a partition of one) whose backing file was deleted. An attribute that cannot be read says nothing.
fn emptied(sys_dev: &Path) -> bool {
    let size = fs::read_to_string(sys_dev.join("size")).ok();
    if size.and_then(|t| t.trim().parse::<u64>().ok()) == Some(0) {
        return true;
    }
    // NB: `..` of the sysfs symlink is resolved by the kernel, not lexically: a partition's parent is its disk.
    let disk = match sys_dev.join("partition").exists() {
        true => sys_dev.join(".."),
        false => sys_dev.to_path_buf(),
    };
    fs::read_to_string(disk.join("loop/backing_file"))
        .is_ok_and(|b| b.trim_end().ends_with(" (deleted)"))
}

/// Reads one block of `device` with `O_DIRECT`, at a block chosen by `round`.
fn read_one_block(device: &Path, round: u64) -> io::Result<()> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECT)
        .open(device)?;
    let size = file
        .metadata()?
        .len()
        .max(crate::sys::block_device_size(&file).unwrap_or(0));
    let blocks = (size / BLOCK as u64).max(1);
    // NB: a stride that is prime to any power of two visits every block over the rounds.
    let offset = (round.wrapping_mul(7919) % blocks) * BLOCK as u64;
    let mut buffer = vec![0u8; 2 * BLOCK];
    let start = buffer.as_ptr().align_offset(BLOCK);
    file.read_at(&mut buffer[start..start + BLOCK], offset)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A sysfs stand-in with one disk `7:0` of `size` sectors, a loop device when `backing` is given, and a
    /// partition `259:1` of it.
    fn sysfs(size: &str, backing: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = dir.path().join("devices/virtual/block/loop0");
        let part = disk.join("loop0p1");
        fs::create_dir_all(&part).expect("dirs");
        fs::write(disk.join("size"), format!("{size}\n")).expect("size");
        fs::write(part.join("size"), "2048\n").expect("size");
        fs::write(part.join("partition"), "1\n").expect("partition");
        if let Some(backing) = backing {
            fs::create_dir(disk.join("loop")).expect("loop dir");
            fs::write(disk.join("loop/backing_file"), format!("{backing}\n")).expect("backing");
        }
        let by_dev = dir.path().join("dev/block");
        fs::create_dir_all(&by_dev).expect("dev/block");
        symlink("../../devices/virtual/block/loop0", by_dev.join("7:0")).expect("link");
        symlink(
            "../../devices/virtual/block/loop0/loop0p1",
            by_dev.join("259:1"),
        )
        .expect("link");
        dir
    }

    fn gone(sys: &Path, dev: &str) -> bool {
        let volume = tempfile::tempdir().expect("temp dir");
        let probe = HealthProbe {
            path: volume.path().to_path_buf(),
            mode: VolumeMode::Filesystem,
            dev: dev.parse().ok(),
            device: None,
            fs_type: None,
            super_options: None,
            round: 0,
        };
        signals(sys, &probe).gone
    }

    #[rstest::rstest]
    #[case::attached("131072", Some("/var/lib/disk.img"), false)]
    #[case::not_a_loop_device("131072", None, false)]
    #[case::detached_size_zero("0", None, true)]
    #[case::backing_file_deleted("131072", Some("/var/lib/disk.img (deleted)"), true)]
    #[case::a_backing_file_named_like_deleted("131072", Some("/var/lib/(deleted)/disk.img"), false)]
    #[case::size_unreadable("garbage", None, false)]
    fn a_device_that_no_longer_holds_the_disk_is_gone_and_its_partitions_with_it(
        #[case] size: &str,
        #[case] backing: Option<&str>,
        #[case] want: bool,
    ) {
        let sys = sysfs(size, backing);
        assert_eq!(gone(sys.path(), "7:0"), want, "the disk");
        let deleted = backing.is_some_and(|b| b.ends_with(" (deleted)"));
        assert_eq!(gone(sys.path(), "259:1"), deleted, "its partition");
    }

    #[test]
    fn a_device_missing_from_sysfs_is_gone_and_an_anonymous_one_is_never_looked_up() {
        let sys = sysfs("131072", None);
        assert!(gone(sys.path(), "8:16"), "no such device");
        assert!(!gone(sys.path(), "0:55"), "tmpfs, overlay: no device");
    }
}
