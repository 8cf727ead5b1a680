//! The calls a block wipe makes on an opened device, behind one narrow trait.
//!
//! [`FdDevice`] makes the real system calls; [`super::fake::RecordingDevice`] records each call and fails the ones a
//! test asks it to, so every fallback of the wipe is exercised without hardware that refuses `BLKZEROOUT`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use blkid::prober::{ProbeState, Prober};
use blkid::{PartitionsFlags, SuperblocksFlags};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::uio::pwrite;
use nix::unistd::{fdatasync, fsync};

use crate::sys::{self, RangeOp};

/// What the block wipe does to an opened device. Each method is one system call (or one libblkid pass).
pub trait BlockDevice {
    /// `BLKGETSIZE64`.
    fn size(&self) -> Result<u64, Errno>;
    /// `BLKZEROOUT`, `BLKDISCARD` or `BLKSECDISCARD` over `len` bytes from `offset`.
    fn range(&self, op: RangeOp, offset: u64, len: u64) -> Result<(), Errno>;
    /// One `pwrite`; may write fewer bytes than given.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, Errno>;
    /// Switch to `O_DIRECT`; false when the driver refuses it.
    fn set_direct(&self) -> bool;
    fn fdatasync(&self) -> Result<(), Errno>;
    fn fsync(&self) -> Result<(), Errno>;
    /// libblkid's erase of every superblock and partition-table signature it finds.
    fn erase_signatures(&self) -> Result<(), blkid::BlkIdError>;
}

/// The real device: a file descriptor opened `O_RDWR|O_EXCL`.
#[derive(Debug)]
pub struct FdDevice(pub OwnedFd);

impl BlockDevice for FdDevice {
    fn size(&self) -> Result<u64, Errno> {
        sys::block_device_size(&self.0)
    }

    fn range(&self, op: RangeOp, offset: u64, len: u64) -> Result<(), Errno> {
        sys::block_range(&self.0, op, offset, len)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, Errno> {
        let at = i64::try_from(offset).map_err(|_| Errno::EOVERFLOW)?;
        pwrite(self.0.as_fd(), buf, at)
    }

    fn set_direct(&self) -> bool {
        fcntl(&self.0, FcntlArg::F_SETFL(OFlag::O_DIRECT)).is_ok()
    }

    fn fdatasync(&self) -> Result<(), Errno> {
        fdatasync(&self.0)
    }

    fn fsync(&self) -> Result<(), Errno> {
        fsync(&self.0)
    }

    fn erase_signatures(&self) -> Result<(), blkid::BlkIdError> {
        let mut probe = Prober::new()?;
        probe.set_device(self.0.as_raw_fd(), 0, None)?;
        probe.enable_superblocks(true)?;
        probe.set_superblocks_flags(SuperblocksFlags::MAGIC | SuperblocksFlags::BADCSUM)?;
        probe.enable_partitions(true)?;
        probe.set_partitions_flags(PartitionsFlags::MAGIC)?;
        // Bounded: each round erases one signature; a device never carries hundreds.
        for _ in 0..256 {
            match probe.do_probe()? {
                ProbeState::Success => probe.do_wipe(false)?,
                _ => break,
            };
        }
        Ok(())
    }
}
