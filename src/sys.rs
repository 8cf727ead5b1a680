//! The only module that talks to the kernel through `ioctl`/raw syscalls that nix does not wrap safely.
//!
//! Every function takes an open file descriptor owned by the caller and returns a plain `Result`; the unsafe blocks
//! are one ioctl each, with the argument layout the kernel expects (see `include/uapi/linux/fs.h`,
//! `include/uapi/linux/nvme_ioctl.h`, `include/scsi/sg.h`). The SCSI commands sent through SG_IO (ATA
//! PASS-THROUGH of SMART and READ LOG EXT, LOG SENSE), all read-only, are in `sys::scsi`, re-exported here.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

mod scsi;
pub use scsi::{
    AtaSmart, PassThrough, ata_device_statistics_via, ata_smart_read, ata_smart_read_via,
    ata_smart_return_status, ata_smart_return_status_via, device_statistics_cdb, log_sense_cdb,
    scsi_log_sense,
};

// _IOR(0x12, 114, size_t)
nix::ioctl_read!(blk_getsize64, 0x12, 114, u64);
// _IO(0x12, 119) with a `uint64_t[2]` {start, len} argument.
nix::ioctl_write_ptr_bad!(blk_discard, nix::request_code_none!(0x12, 119), [u64; 2]);
// _IO(0x12, 125)
nix::ioctl_write_ptr_bad!(blk_secdiscard, nix::request_code_none!(0x12, 125), [u64; 2]);
// _IO(0x12, 127)
nix::ioctl_write_ptr_bad!(blk_zeroout, nix::request_code_none!(0x12, 127), [u64; 2]);

// LOOP_GET_STATUS64 (0x4C05, an old-style request number without direction bits; include/uapi/linux/loop.h).
nix::ioctl_read_bad!(loop_get_status64, 0x4C05, LoopInfo64);

/// `struct loop_info64`, field for field.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// What a loop device is backed by: the backing file's device and inode, and the window of it the device shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopBacking {
    pub file_dev: u64,
    pub file_inode: u64,
    pub offset: u64,
    pub size_limit: u64,
}

/// The backing file of the loop device open at `fd` (`LOOP_GET_STATUS64`).
pub fn loop_backing(fd: impl AsFd) -> nix::Result<LoopBacking> {
    // SAFETY: an all-zero `loop_info64` is a valid value of a plain C struct of integers and byte arrays.
    let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
    // SAFETY: LOOP_GET_STATUS64 writes one `struct loop_info64` through the pointer, valid for the call.
    unsafe { loop_get_status64(fd.as_fd().as_raw_fd(), &mut info) }?;
    Ok(LoopBacking {
        file_dev: info.lo_device,
        file_inode: info.lo_inode,
        offset: info.lo_offset,
        size_limit: info.lo_sizelimit,
    })
}

/// Size in bytes of the block device open at `fd` (`BLKGETSIZE64`).
pub fn block_device_size(fd: impl AsFd) -> nix::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid for the duration of the call.
    unsafe { blk_getsize64(fd.as_fd().as_raw_fd(), &mut size) }?;
    Ok(size)
}

/// Which range-based block operation to ask the device for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeOp {
    /// `BLKZEROOUT`: the range reads back as zeros afterwards (offloaded when the device can).
    ZeroOut,
    /// `BLKDISCARD`: the device may drop the blocks; contents afterwards are unspecified.
    Discard,
    /// `BLKSECDISCARD`: discard that also erases every copy the device kept.
    SecureDiscard,
}

/// Apply `op` to `len` bytes starting at `start` (both multiples of the logical block size).
pub fn block_range(fd: impl AsFd, op: RangeOp, start: u64, len: u64) -> nix::Result<()> {
    let range = [start, len];
    let raw = fd.as_fd().as_raw_fd();
    // SAFETY: each of these ioctls reads a `uint64_t[2]` through the pointer, valid for the call; nothing is written.
    unsafe {
        match op {
            RangeOp::ZeroOut => blk_zeroout(raw, &range),
            RangeOp::Discard => blk_discard(raw, &range),
            RangeOp::SecureDiscard => blk_secdiscard(raw, &range),
        }
    }?;
    Ok(())
}

/// Put the calling thread in the idle I/O scheduling class (`ioprio_set(IOPRIO_WHO_PROCESS, 0, IDLE)`), so a wipe
/// only uses the disk when nothing else wants it. Best effort: schedulers without priorities ignore it.
pub fn set_idle_io_priority() -> nix::Result<()> {
    const IOPRIO_WHO_PROCESS: nix::libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: nix::libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: u32 = 13;
    // SAFETY: ioprio_set takes three integers and touches no memory of ours.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as nix::libc::c_long,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    nix::errno::Errno::result(rc).map(drop)
}

/// `struct nvme_admin_cmd` (= `nvme_passthru_cmd`) of `include/uapi/linux/nvme_ioctl.h`, 72 bytes.
#[repr(C)]
#[derive(Default)]
struct NvmeAdminCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

const _: () = assert!(
    size_of::<NvmeAdminCmd>() == 72,
    "struct nvme_admin_cmd is 72 bytes"
);

// NVME_IOCTL_ADMIN_CMD: _IOWR('N', 0x41, struct nvme_admin_cmd)
nix::ioctl_readwrite!(nvme_admin_cmd, b'N', 0x41, NvmeAdminCmd);

/// The NVMe SMART / Health Information log page (Get Log Page, Log Identifier 02h, for the whole controller:
/// NSID FFFFFFFFh) of the NVMe namespace open at `fd`: 512 bytes for `health::smart::parse_nvme`. A read-only
/// admin command; the kernel asks for CAP_SYS_ADMIN (or, since 6.2, a descriptor open for writing, which this is
/// never given). `ENOTTY` on a device that is not NVMe; `EREMOTEIO` when the controller answered with an NVMe
/// status instead of the page.
pub fn nvme_smart_log(fd: impl AsFd) -> nix::Result<[u8; 512]> {
    const GET_LOG_PAGE: u8 = 0x02;
    const SMART_HEALTH: u32 = 0x02;
    const LEN: usize = 512;
    let mut page = [0u8; LEN];
    // NUMD is 0's based, in dwords.
    let numd = (LEN / 4 - 1) as u32;
    let mut cmd = NvmeAdminCmd {
        opcode: GET_LOG_PAGE,
        nsid: u32::MAX,
        addr: page.as_mut_ptr() as u64,
        data_len: LEN as u32,
        cdw10: SMART_HEALTH | (numd << 16),
        // NB: bounded: the kernel's default admin timeout is 60 s.
        timeout_ms: 5_000,
        ..NvmeAdminCmd::default()
    };
    // SAFETY: the ioctl reads one `nvme_admin_cmd` and writes its `result` back, and the controller writes at most
    // `data_len` (512) bytes to `addr`, which points to `page`; both outlive the call.
    let status = unsafe { nvme_admin_cmd(fd.as_fd().as_raw_fd(), &mut cmd) }?;
    if status != 0 {
        return Err(nix::errno::Errno::EREMOTEIO);
    }
    Ok(page)
}

/// The extended attribute holding the agent's volume id on a volume's root directory. In the `trusted.` namespace
/// so only CAP_SYS_ADMIN can set or remove it: a tenant owning the directory cannot forge or erase it.
pub const VOLUME_ID_XATTR: &std::ffi::CStr = c"trusted.localpv.id";
/// Where an agent without CAP_SYS_ADMIN (the chart's `node.privileged: false`) keeps the id instead. A tenant with
/// write access to the volume root can change or remove it; that only makes the wipe of its own volume refused.
pub const VOLUME_ID_USER_XATTR: &std::ffi::CStr = c"user.localpv.id";

/// The agent's volume id on the directory open at `fd`: `trusted.localpv.id`, else `user.localpv.id`. `None` when
/// neither is set; `EOPNOTSUPP` when the filesystem has no extended attributes at all.
/// NB: without CAP_SYS_ADMIN the kernel hides `trusted.*` (ENODATA), so an unprivileged agent sees only the other.
pub fn read_volume_id(fd: impl AsFd) -> nix::Result<Option<Vec<u8>>> {
    let fd = fd.as_fd();
    match get_xattr(fd, VOLUME_ID_XATTR)? {
        Some(value) => Ok(Some(value)),
        None => match get_xattr(fd, VOLUME_ID_USER_XATTR) {
            // `trusted.*` works but `user.*` does not (tmpfs before Linux 6.6): simply no id yet.
            Err(nix::errno::Errno::EOPNOTSUPP) => Ok(None),
            other => other,
        },
    }
}

/// Stores `value` as the volume id of the directory open at `fd` unless one exists (`EEXIST`): in
/// `trusted.localpv.id`, or in `user.localpv.id` when this process may not write `trusted.*` (`EPERM`).
pub fn create_volume_id(fd: impl AsFd, value: &[u8]) -> nix::Result<()> {
    let fd = fd.as_fd();
    match create_xattr(fd, VOLUME_ID_XATTR, value) {
        Err(nix::errno::Errno::EPERM) => create_xattr(fd, VOLUME_ID_USER_XATTR, value),
        other => other,
    }
}

/// The value of extended attribute `name` of the file open at `fd`; `None` when it is not set (`ENODATA`).
/// `EOPNOTSUPP` (a filesystem without extended attributes) is returned as an error for the caller to tell apart.
pub fn get_xattr(fd: impl AsFd, name: &std::ffi::CStr) -> nix::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 256];
    // SAFETY: fgetxattr writes at most `buf.len()` bytes into `buf`, valid for the call; `name` is NUL-terminated.
    let rc = unsafe {
        nix::libc::fgetxattr(
            fd.as_fd().as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    match nix::errno::Errno::result(rc) {
        Ok(len) => {
            buf.truncate(usize::try_from(len).unwrap_or(0));
            Ok(Some(buf))
        }
        Err(nix::errno::Errno::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sets extended attribute `name` of the file open at `fd` only if it does not exist yet (`XATTR_CREATE`: `EEXIST`
/// otherwise). Metadata of the inode only: no file data is written.
pub fn create_xattr(fd: impl AsFd, name: &std::ffi::CStr, value: &[u8]) -> nix::Result<()> {
    // SAFETY: fsetxattr reads `value.len()` bytes from `value` and the NUL-terminated `name`, both valid for the call.
    let rc = unsafe {
        nix::libc::fsetxattr(
            fd.as_fd().as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            nix::libc::XATTR_CREATE,
        )
    };
    nix::errno::Errno::result(rc).map(drop)
}

/// `struct mnt_id_req` of `include/uapi/linux/mount.h`, first version (24 bytes).
#[repr(C)]
struct MntIdReq {
    size: u32,
    spare: u32,
    mnt_id: u64,
    param: u64,
}

// Syscall numbers of the unified table (x86_64, aarch64, riscv64 and every other architecture but alpha and mips),
// which the libc crate does not name yet.
const SYS_STATMOUNT: nix::libc::c_long = 457;
const SYS_LISTMOUNT: nix::libc::c_long = 458;

/// `listmount(2)`'s "the root of this process's mount namespace".
const LSMT_ROOT: u64 = u64::MAX;

/// One `listmount`/`statmount` call on `mnt_id` with `param`, writing at most `out.len()` items (ids for
/// listmount, bytes for statmount) into `out`; returns what the kernel returned.
fn mount_call<T>(
    nr: nix::libc::c_long,
    mnt_id: u64,
    param: u64,
    out: &mut [T],
) -> nix::Result<usize> {
    let req = MntIdReq {
        size: size_of::<MntIdReq>() as u32,
        spare: 0,
        mnt_id,
        param,
    };
    // SAFETY: both calls read one `mnt_id_req` and write at most `out.len()` items of `T` (u64 ids, or bytes) into
    // `out`; both stay valid for the call.
    let rc = unsafe {
        nix::libc::syscall(
            nr,
            &req as *const MntIdReq,
            out.as_mut_ptr(),
            out.len(),
            0 as nix::libc::c_uint,
        )
    };
    nix::errno::Errno::result(rc).map(|n| usize::try_from(n).unwrap_or(0))
}

/// The unique ids (Linux 6.8+) of every mount this process's mount table shows, ascending: one `listmount(2)` per
/// 4,096 mounts. `ENOSYS` on an older kernel.
pub fn list_mounts() -> nix::Result<Vec<u64>> {
    const BATCH: usize = 4096;
    let mut ids: Vec<u64> = Vec::new();
    let mut batch = vec![0u64; BATCH];
    let mut last = 0;
    loop {
        let written = mount_call(SYS_LISTMOUNT, LSMT_ROOT, last, &mut batch)?.min(BATCH);
        ids.extend_from_slice(&batch[..written]);
        match batch[..written].last() {
            Some(&id) if written == BATCH => last = id,
            _ => return Ok(ids),
        }
    }
}

/// `statmount(2)` (Linux 6.8+) of the mount with unique id `id`, asking for the fields in `mask`: the kernel's
/// `struct statmount` and the strings after it, as bytes, for [`crate::host::mountapi`] to read. Grows `buf`
/// while the kernel says it is too small (`EOVERFLOW`). `ENOENT` when the mount is gone.
pub fn stat_mount(id: u64, mask: u64, buf: &mut Vec<u8>) -> nix::Result<()> {
    const MAX: usize = 16 << 20;
    if buf.len() < 4096 {
        buf.resize(4096, 0);
    }
    loop {
        match mount_call(SYS_STATMOUNT, id, mask, buf) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EOVERFLOW) if buf.len() < MAX => {
                let grown = buf.len() * 4;
                buf.resize(grown, 0);
            }
            Err(errno) => return Err(errno),
        }
    }
}

/// A fanotify group that reports every mount attached to, detached from or moved within this process's mount
/// namespace (Linux 6.14+, CAP_SYS_ADMIN), non-blocking: read it with `read(2)` and
/// [`crate::host::mountapi::mount_events`]. `EINVAL` on an older kernel, `EPERM` without the capability.
pub fn mount_events() -> nix::Result<OwnedFd> {
    use nix::libc;
    const FAN_REPORT_MNT: libc::c_uint = 0x4000;
    const FAN_MARK_MNTNS: libc::c_uint = 0x110;
    const FAN_MNT_ATTACH: u64 = 0x0100_0000;
    const FAN_MNT_DETACH: u64 = 0x0200_0000;
    let namespace = nix::fcntl::open(
        "/proc/self/ns/mnt",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | FAN_REPORT_MNT;
    // SAFETY: fanotify_init takes two integers and touches no memory of ours.
    let rc =
        unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint) };
    let raw = nix::errno::Errno::result(rc)?;
    // SAFETY: fanotify_init returned a new descriptor that nothing else owns.
    let group = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: fanotify_mark reads no path when given a null one; both descriptors are open for the call.
    let rc = unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            libc::FAN_MARK_ADD | FAN_MARK_MNTNS,
            FAN_MNT_ATTACH | FAN_MNT_DETACH,
            namespace.as_raw_fd(),
            std::ptr::null(),
        )
    };
    nix::errno::Errno::result(rc)?;
    Ok(group)
}
