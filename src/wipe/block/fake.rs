//! A recording [`BlockDevice`] with error injection, for testing the wipe's fallbacks without failing hardware.

use std::sync::{Arc, Mutex, PoisonError};

use nix::errno::Errno;

use super::device::BlockDevice;
use crate::sys::RangeOp;

/// One call the wipe made, with its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockCall {
    Size,
    Range {
        op: RangeOp,
        offset: u64,
        len: u64,
    },
    /// `len` is what the wipe asked to write; a short write accepts less.
    Write {
        offset: u64,
        len: usize,
    },
    SetDirect,
    Fdatasync,
    Fsync,
    EraseSignatures,
}

/// Which calls an injected error applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Size,
    /// Ranges of this operation starting at or after the offset.
    Range(RangeOp, u64),
    /// Writes starting at or after this offset.
    WriteFrom(u64),
    Fdatasync,
    Fsync,
}

/// Records every call; calls matching an injected [`Target`] fail with its errno (and are still recorded).
/// Clones share one log, so a test keeps a clone while the wipe owns the device.
#[derive(Clone, Debug)]
pub struct RecordingDevice {
    size: u64,
    direct: bool,
    /// Largest number of bytes one write accepts (short writes when smaller than the buffer).
    max_write: usize,
    faults: Vec<(Target, Errno)>,
    log: Arc<Mutex<Vec<BlockCall>>>,
}

impl RecordingDevice {
    pub fn new(size: u64) -> Self {
        RecordingDevice {
            size,
            direct: true,
            max_write: usize::MAX,
            faults: Vec::new(),
            log: Arc::default(),
        }
    }

    pub fn fail(mut self, target: Target, errno: Errno) -> Self {
        self.faults.push((target, errno));
        self
    }

    /// The driver refuses `O_DIRECT`.
    pub fn no_direct(mut self) -> Self {
        self.direct = false;
        self
    }

    pub fn short_writes(mut self, max: usize) -> Self {
        self.max_write = max;
        self
    }

    pub fn calls(&self) -> Vec<BlockCall> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, call: BlockCall) -> Result<(), Errno> {
        let fault = self
            .faults
            .iter()
            .find(|(target, _)| match (target, &call) {
                (Target::Size, BlockCall::Size) | (Target::Fdatasync, BlockCall::Fdatasync) => true,
                (Target::Fsync, BlockCall::Fsync) => true,
                (Target::Range(want, from), BlockCall::Range { op, offset, .. }) => {
                    want == op && offset >= from
                }
                (Target::WriteFrom(from), BlockCall::Write { offset, .. }) => offset >= from,
                _ => false,
            });
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
        fault.map_or(Ok(()), |(_, errno)| Err(*errno))
    }
}

impl BlockDevice for RecordingDevice {
    fn size(&self) -> Result<u64, Errno> {
        self.record(BlockCall::Size).map(|()| self.size)
    }

    fn range(&self, op: RangeOp, offset: u64, len: u64) -> Result<(), Errno> {
        self.record(BlockCall::Range { op, offset, len })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, Errno> {
        let len = buf.len();
        self.record(BlockCall::Write { offset, len })
            .map(|()| len.min(self.max_write))
    }

    fn set_direct(&self) -> bool {
        self.record(BlockCall::SetDirect).is_ok() && self.direct
    }

    fn fdatasync(&self) -> Result<(), Errno> {
        self.record(BlockCall::Fdatasync)
    }

    fn fsync(&self) -> Result<(), Errno> {
        self.record(BlockCall::Fsync)
    }

    fn erase_signatures(&self) -> Result<(), blkid::BlkIdError> {
        // NB: never fails; the signature wipe's own fallbacks live in libblkid.
        let _ = self.record(BlockCall::EraseSignatures);
        Ok(())
    }
}
