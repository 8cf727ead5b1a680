//! Block device wipe: one [`BlockMethod`] applied to a whole device held with `O_EXCL`.
//!
//! The device is opened `O_RDWR|O_EXCL` (the kernel then refuses while it is mounted or claimed, and refuses mounts
//! while we hold it), checked to be a block device with the expected device number, and erased in chunks of
//! `chunk_bytes` so progress is published and a cancel takes effect between chunks. `zeroout` falls back to a full
//! overwrite when the device rejects `BLKZEROOUT`. For `command` the exclusive open is only a check: the device is
//! closed again before the operator's program runs, because tools like `blkdiscard` and `wipefs` open it `O_EXCL`
//! themselves.

use std::path::{Path, PathBuf};
use std::thread;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, SFlag, fstat};
use serde::{Deserialize, Serialize};

pub mod device;
pub mod fake;
#[cfg(test)]
mod tests;

use self::device::{BlockDevice, FdDevice};

use super::command::{self, CommandError, CommandOutput};
use super::{BlockMethod, Control};
use crate::contract::DevId;
use crate::sys::{self, RangeOp};

/// Environment variable naming the device for an operator's block wipe command (as in the reference provisioner).
pub const BLKDEVICE_ENV: &str = "LOCAL_PV_BLKDEVICE";
const MIB: u64 = 1 << 20;
/// Zeroed at each end of the device by `signatures`: partition tables, RAID and ZFS labels live there.
const SIGNATURE_SPAN: u64 = MIB;
/// One write of `overwrite`.
const WRITE_BYTES: usize = 4 * MIB as usize;
/// `O_DIRECT` buffers must be aligned to the logical block size; a page covers every device we know.
const DIRECT_ALIGN: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BlockOptions {
    pub method: BlockMethod,
    /// Bytes per ioctl range (and between flushes of a buffered overwrite); rounded down to whole MiB.
    pub chunk_bytes: u64,
    /// argv for [`BlockMethod::Command`].
    pub command: Option<Vec<String>>,
    pub idle_io_priority: bool,
}

impl Default for BlockOptions {
    fn default() -> Self {
        BlockOptions {
            method: BlockMethod::ZeroOut,
            chunk_bytes: 128 * MIB,
            command: None,
            idle_io_priority: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockReport {
    /// The method that erased the device (`overwrite` when `zeroout` was rejected).
    pub method: BlockMethod,
    pub device_bytes: u64,
    /// Bytes the method covered (the whole device, or the two signature spans).
    pub bytes: u64,
    pub command: Option<CommandOutput>,
}

#[derive(Debug, thiserror::Error)]
pub enum BlockWipeError {
    #[error("failed to open {device} exclusively: it is mounted or held by another user (EBUSY)")]
    Busy { device: PathBuf },
    #[error("failed to open {device}")]
    Open {
        device: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("failed to wipe {device}: not a block device")]
    NotABlockDevice { device: PathBuf },
    #[error("failed to verify {device}: device {found}, expected {expected}")]
    WrongDevice {
        device: PathBuf,
        expected: DevId,
        found: DevId,
    },
    #[error("failed to read the size of {device}")]
    Size {
        device: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("failed to {method} {device}: the device does not support it")]
    Unsupported {
        device: PathBuf,
        method: BlockMethod,
        #[source]
        source: Errno,
    },
    #[error("failed to {method} {device} at byte {offset}")]
    Range {
        device: PathBuf,
        method: BlockMethod,
        offset: u64,
        #[source]
        source: Errno,
    },
    #[error("failed to write zeros to {device} at byte {offset}")]
    Write {
        device: PathBuf,
        offset: u64,
        #[source]
        source: Errno,
    },
    #[error("failed to flush {device}")]
    Flush {
        device: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("failed to erase signatures on {device}")]
    Signatures {
        device: PathBuf,
        #[source]
        source: blkid::BlkIdError,
    },
    #[error("failed to wipe {device}: method command needs an argv")]
    NoCommand { device: PathBuf },
    #[error("failed to finish wiping {device}: cancelled after {done} bytes")]
    Cancelled { device: PathBuf, done: u64 },
    #[error("failed to start the wipe thread")]
    SpawnWorker(#[source] std::io::Error),
    #[error(transparent)]
    Command(#[from] CommandError),
}

/// Erase `device` with `opts.method`, after checking it is a block device numbered `expected` (when given).
/// Runs on a thread of its own so the idle I/O priority never sticks to the caller's thread.
pub fn wipe_block(
    device: &Path,
    expected: Option<DevId>,
    opts: &BlockOptions,
    ctl: &Control,
) -> Result<BlockReport, BlockWipeError> {
    thread::scope(|s| {
        let worker = thread::Builder::new()
            .name("wipe-block".into())
            .spawn_scoped(s, || {
                if opts.idle_io_priority {
                    // Best effort: schedulers without I/O priorities ignore it.
                    let _ = sys::set_idle_io_priority();
                }
                let (dev, direct) = open_checked(device, expected, opts)?;
                Wiper::new(device, opts, ctl, dev, direct)?.run()
            })
            .map_err(BlockWipeError::SpawnWorker)?;
        match worker.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

struct Wiper<'a, D> {
    device: &'a Path,
    opts: &'a BlockOptions,
    ctl: &'a Control,
    dev: D,
    size: u64,
    direct: bool,
}

/// Why a chunked range operation stopped.
enum Stop {
    Cancelled,
    Failed { offset: u64, errno: Errno },
}

/// Open `device` exclusively and check it is the block device numbered `expected`; true when opened `O_DIRECT`.
fn open_checked(
    device: &Path,
    expected: Option<DevId>,
    opts: &BlockOptions,
) -> Result<(FdDevice, bool), BlockWipeError> {
    let path = || device.to_path_buf();
    let base = OFlag::O_RDWR | OFlag::O_EXCL | OFlag::O_CLOEXEC;
    let want_direct = opts.method == BlockMethod::Overwrite;
    let opened = match want_direct {
        // NB: a few drivers refuse O_DIRECT (EINVAL); a buffered overwrite with periodic fdatasync still works.
        true => open(device, base | OFlag::O_DIRECT, Mode::empty())
            .map(|fd| (fd, true))
            .or_else(|e| match e {
                Errno::EINVAL => open(device, base, Mode::empty()).map(|fd| (fd, false)),
                e => Err(e),
            }),
        false => open(device, base, Mode::empty()).map(|fd| (fd, false)),
    };
    let (fd, direct) = opened.map_err(|source| match source {
        Errno::EBUSY => BlockWipeError::Busy { device: path() },
        source => BlockWipeError::Open {
            device: path(),
            source,
        },
    })?;
    let st = fstat(&fd).map_err(|source| BlockWipeError::Open {
        device: path(),
        source,
    })?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFBLK {
        return Err(BlockWipeError::NotABlockDevice { device: path() });
    }
    let found = DevId::from_dev(st.st_rdev);
    if let Some(expected) = expected.filter(|e| *e != found) {
        return Err(BlockWipeError::WrongDevice {
            device: path(),
            expected,
            found,
        });
    }
    Ok((FdDevice(fd), direct))
}

impl<'a, D: BlockDevice> Wiper<'a, D> {
    fn new(
        device: &'a Path,
        opts: &'a BlockOptions,
        ctl: &'a Control,
        dev: D,
        direct: bool,
    ) -> Result<Self, BlockWipeError> {
        let size = dev.size().map_err(|source| BlockWipeError::Size {
            device: device.to_path_buf(),
            source,
        })?;
        Ok(Wiper {
            device,
            opts,
            ctl,
            dev,
            size,
            direct,
        })
    }

    fn path(&self) -> PathBuf {
        self.device.to_path_buf()
    }

    fn run(mut self) -> Result<BlockReport, BlockWipeError> {
        let method = self.opts.method;
        let mut report = BlockReport {
            method,
            device_bytes: self.size,
            bytes: self.size,
            command: None,
        };
        match method {
            BlockMethod::ZeroOut => {
                self.ctl.progress.set_total(self.size);
                match self.ranges(RangeOp::ZeroOut) {
                    Err(Stop::Failed {
                        offset,
                        errno: Errno::EOPNOTSUPP | Errno::EINVAL,
                    }) => {
                        report.method = BlockMethod::Overwrite;
                        self.direct = self.dev.set_direct();
                        self.overwrite(offset)?;
                    }
                    other => self.stopped(method, other)?,
                }
            }
            BlockMethod::Discard | BlockMethod::SecureDiscard => {
                self.ctl.progress.set_total(self.size);
                let op = if method == BlockMethod::Discard {
                    RangeOp::Discard
                } else {
                    RangeOp::SecureDiscard
                };
                let result = self.ranges(op);
                self.stopped(method, result)?;
            }
            BlockMethod::Overwrite => {
                self.ctl.progress.set_total(self.size);
                self.overwrite(0)?;
            }
            BlockMethod::Signatures => report.bytes = self.signatures()?,
            BlockMethod::Command => {
                let argv = self
                    .opts
                    .command
                    .clone()
                    .ok_or_else(|| BlockWipeError::NoCommand {
                        device: self.path(),
                    })?;
                // NB: release the exclusive claim first; the operator's tools usually take it themselves.
                drop(self.dev);
                report.command = Some(command::run(
                    &argv,
                    BLKDEVICE_ENV,
                    self.device.as_os_str(),
                    self.ctl,
                )?);
                return Ok(report);
            }
        }
        self.dev.fsync().map_err(|source| BlockWipeError::Flush {
            device: self.path(),
            source,
        })?;
        Ok(report)
    }

    fn stopped(&self, method: BlockMethod, result: Result<(), Stop>) -> Result<(), BlockWipeError> {
        let device = self.path();
        match result {
            Ok(()) => Ok(()),
            Err(Stop::Cancelled) => Err(BlockWipeError::Cancelled {
                device,
                done: self.ctl.progress.bytes(),
            }),
            Err(Stop::Failed {
                errno: source @ Errno::EOPNOTSUPP,
                ..
            }) => Err(BlockWipeError::Unsupported {
                device,
                method,
                source,
            }),
            Err(Stop::Failed { offset, errno }) => Err(BlockWipeError::Range {
                device,
                method,
                offset,
                source: errno,
            }),
        }
    }

    fn chunk(&self) -> u64 {
        (self.opts.chunk_bytes / MIB).max(1) * MIB
    }

    /// Apply `op` to the whole device, one chunk per ioctl.
    fn ranges(&self, op: RangeOp) -> Result<(), Stop> {
        let chunk = self.chunk();
        let mut offset = 0;
        while offset < self.size {
            if self.ctl.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let len = chunk.min(self.size - offset);
            self.dev
                .range(op, offset, len)
                .map_err(|errno| Stop::Failed { offset, errno })?;
            self.ctl.progress.add(0, len);
            offset += len;
        }
        Ok(())
    }

    /// Write zeros from `from` to the end of the device.
    fn overwrite(&self, from: u64) -> Result<(), BlockWipeError> {
        let mut buf = vec![0u8; WRITE_BYTES + DIRECT_ALIGN];
        let start = buf.as_ptr().align_offset(DIRECT_ALIGN);
        let zeros = &mut buf[start..start + WRITE_BYTES];
        let chunk = self.chunk();
        let mut offset = from;
        let mut unsynced = 0;
        while offset < self.size {
            if self.ctl.is_cancelled() {
                return Err(BlockWipeError::Cancelled {
                    device: self.path(),
                    done: self.ctl.progress.bytes(),
                });
            }
            let len = (self.size - offset).min(WRITE_BYTES as u64) as usize;
            let written = write_all_at(&self.dev, &zeros[..len], offset).map_err(|source| {
                BlockWipeError::Write {
                    device: self.path(),
                    offset,
                    source,
                }
            })?;
            offset += written;
            unsynced += written;
            self.ctl.progress.add(0, written);
            if !self.direct && unsynced >= chunk {
                // Bound the dirty page cache a buffered overwrite builds up.
                self.dev
                    .fdatasync()
                    .map_err(|source| BlockWipeError::Flush {
                        device: self.path(),
                        source,
                    })?;
                unsynced = 0;
            }
        }
        Ok(())
    }

    /// libblkid's wipe of every signature it finds, then zeros over the first and last MiB.
    fn signatures(&self) -> Result<u64, BlockWipeError> {
        let err = |source| BlockWipeError::Signatures {
            device: self.path(),
            source,
        };
        self.dev.erase_signatures().map_err(err)?;
        let head = SIGNATURE_SPAN.min(self.size);
        let tail_start = self.size.saturating_sub(SIGNATURE_SPAN).max(head);
        self.ctl.progress.set_total(head + (self.size - tail_start));
        let zeros = vec![0u8; SIGNATURE_SPAN as usize];
        let mut bytes = 0;
        for (offset, len) in [(0, head), (tail_start, self.size - tail_start)] {
            let written =
                write_all_at(&self.dev, &zeros[..len as usize], offset).map_err(|source| {
                    BlockWipeError::Write {
                        device: self.path(),
                        offset,
                        source,
                    }
                })?;
            self.ctl.progress.add(0, written);
            bytes += written;
        }
        Ok(bytes)
    }
}

/// `pwrite` until all of `buf` is written; returns its length.
fn write_all_at(dev: &impl BlockDevice, buf: &[u8], offset: u64) -> Result<u64, Errno> {
    let mut done = 0;
    while done < buf.len() {
        match dev.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => return Err(Errno::EIO),
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done as u64)
}
