//! SCSI commands through SG_IO on a block device's SCSI generic interface (issue 37): ATA PASS-THROUGH (16 and 12,
//! T10 SAT) for the SMART commands of an ATA drive and the read of its Device Statistics log (ACS-4), and LOG SENSE
//! (SPC) for a SCSI disk's log pages. Every command sent is read-only. Part of `sys`, the one module allowed
//! `unsafe`: one ioctl, in `sg_command`.

use std::os::fd::{AsFd, AsRawFd};

/// `struct sg_io_hdr` of `include/scsi/sg.h`, field for field (88 bytes on 64-bit targets).
#[repr(C)]
struct SgIoHdr {
    interface_id: i32,
    dxfer_direction: i32,
    cmd_len: u8,
    mx_sb_len: u8,
    iovec_count: u16,
    dxfer_len: u32,
    dxferp: *mut u8,
    cmdp: *const u8,
    sbp: *mut u8,
    timeout: u32,
    flags: u32,
    pack_id: i32,
    usr_ptr: *mut u8,
    status: u8,
    masked_status: u8,
    msg_status: u8,
    sb_len_wr: u8,
    host_status: u16,
    driver_status: u16,
    resid: i32,
    duration: u32,
    info: u32,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<SgIoHdr>() == 88, "struct sg_io_hdr is 88 bytes");

// SG_IO (0x2285, an old-style request number without direction bits; include/scsi/sg.h).
nix::ioctl_readwrite_bad!(sg_io, 0x2285, SgIoHdr);

/// An ATA SMART command (B0h), sent through SCSI ATA PASS-THROUGH (16) (T10 SAT): what the kernel's ATA
/// translation (libata, for `sd` disks on SATA ports) hands to the drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtaSmart {
    /// SMART READ DATA (feature D0h): the 512-byte attribute sector.
    ReadData,
    /// SMART READ THRESHOLDS (feature D1h): the 512-byte threshold sector (obsolete since ACS-3; many drives still
    /// answer).
    ReadThresholds,
    /// SMART RETURN STATUS (feature DAh): no data, the verdict in the LBA Mid and High registers.
    ReturnStatus,
}

/// Bytes of sense data asked for: fixed format is 18, descriptor format with the ATA Status Return descriptor 22.
const SENSE_LEN: usize = 32;

/// Which ATA PASS-THROUGH command carries an ATA command: the 16-byte form (85h) libata and most translators
/// take, or the 12-byte form (A1h) some USB bridges take instead (T10 SAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassThrough {
    Sixteen,
    Twelve,
}

impl AtaSmart {
    /// The CDB of `form`.
    pub fn cdb_of(self, form: PassThrough) -> Vec<u8> {
        self.registers().cdb_of(form)
    }

    /// The 12-byte CDB (A1h).
    pub fn cdb12(self) -> [u8; 12] {
        self.registers().cdb12()
    }

    /// The 16-byte CDB (85h).
    pub fn cdb(self) -> [u8; 16] {
        self.registers().cdb16()
    }

    /// For the reads, PIO Data-In and one 512-byte block; for the status, no data and CK_COND, so the translator
    /// returns the ATA registers as sense data. The SMART signature 4Fh/C2h in LBA Mid and High.
    fn registers(self) -> Registers {
        let (protocol, flags, feature, count) = match self {
            AtaSmart::ReadData => (PIO_DATA_IN, READ_BLOCKS, 0xD0, 1),
            AtaSmart::ReadThresholds => (PIO_DATA_IN, READ_BLOCKS, 0xD1, 1),
            AtaSmart::ReturnStatus => (NON_DATA, CK_COND, 0xDA, 0),
        };
        Registers {
            protocol,
            flags,
            feature,
            count,
            lba_low: 0,
            lba_mid: 0x4F,
            lba_high: 0xC2,
            command: SMART,
            extend: false,
        }
    }
}

/// ATA PASS-THROUGH byte 1: the protocol, shifted left once (T10 SAT).
const PIO_DATA_IN: u8 = 4;
const NON_DATA: u8 = 3;
/// ATA PASS-THROUGH byte 2 of a read: T_DIR from the device (08h), BYTE_BLOCK (04h), T_LENGTH in the COUNT field
/// (02h): COUNT 512-byte blocks.
const READ_BLOCKS: u8 = 0x0E;
/// ATA PASS-THROUGH byte 2 of a command without data whose registers are wanted back as sense data.
const CK_COND: u8 = 0x20;
/// The ATA SMART command; its FEATURE says which.
const SMART: u8 = 0xB0;

/// The ATA registers of one command as ATA PASS-THROUGH carries them, and the two CDBs that carry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Registers {
    protocol: u8,
    flags: u8,
    feature: u8,
    count: u8,
    lba_low: u8,
    lba_mid: u8,
    lba_high: u8,
    command: u8,
    /// A 48-bit command: the EXTEND bit of the 16-byte form. The upper bytes (FEATURE, COUNT and LBA (47:24)) are
    /// zero in every command sent here.
    extend: bool,
}

impl Registers {
    fn cdb_of(self, form: PassThrough) -> Vec<u8> {
        match form {
            PassThrough::Sixteen => self.cdb16().to_vec(),
            PassThrough::Twelve => self.cdb12().to_vec(),
        }
    }

    /// The 16-byte CDB (85h). Byte 1: the protocol shifted left once, EXTEND in bit 0; byte 2: the flags. FEATURE
    /// (7:0) in byte 4, COUNT (7:0) in 6, LBA (7:0), (15:8) and (23:16) in 8, 10 and 12, DEVICE in 13, COMMAND in
    /// 14; the odd bytes 3-11 hold the upper halves, zero here.
    fn cdb16(self) -> [u8; 16] {
        let mut cdb = [0u8; 16];
        cdb[0] = 0x85;
        cdb[1] = self.protocol << 1 | u8::from(self.extend);
        cdb[2] = self.flags;
        cdb[4] = self.feature;
        cdb[6] = self.count;
        cdb[8] = self.lba_low;
        cdb[10] = self.lba_mid;
        cdb[12] = self.lba_high;
        cdb[14] = self.command;
        cdb
    }

    /// The 12-byte CDB (A1h): the same protocol (byte 1) and flags (byte 2) as the 16-byte form, then FEATURE
    /// (byte 3), COUNT (4), LBA Low, Mid and High (5-7), DEVICE (8) and COMMAND (9). It has no EXTEND bit.
    fn cdb12(self) -> [u8; 12] {
        let mut cdb = [0u8; 12];
        cdb[0] = 0xA1;
        cdb[1] = self.protocol << 1;
        cdb[2] = self.flags;
        cdb[3] = self.feature;
        cdb[4] = self.count;
        cdb[5] = self.lba_low;
        cdb[6] = self.lba_mid;
        cdb[7] = self.lba_high;
        cdb[9] = self.command;
        cdb
    }
}

/// The Device Statistics log's address, in the General Purpose and the SMART log directories alike (ACS-4).
const DEVICE_STATISTICS_LOG: u8 = 0x04;
const READ_LOG_EXT: u8 = 0x2F;
/// SMART READ LOG, the feature of SMART (B0h).
const SMART_READ_LOG: u8 = 0xD5;

/// The registers that read page `page` of the Device Statistics log through `form`: READ LOG EXT (2Fh: log
/// address in LBA Low, page number in LBA Mid, COUNT one page) through the 16-byte form; SMART READ LOG (B0h
/// feature D5h) of the log's pages 0 to `page` through the 12-byte form. `None` when `form` cannot reach the page.
///
/// NB: not READ LOG EXT through the 12-byte form: it is a 48-bit command and that form has no EXTEND bit, so the
/// upper register bytes (the page number's high byte, COUNT's high byte) are not sent, and what the drive finds
/// there is the translator's doing (on a parallel ATA drive behind a bridge, what the last command left).
/// smartmontools refuses 48-bit commands through it ("48-bit ATA commands require SAT ATA PASS-THROUGH (16)").
/// SMART READ LOG is a 28-bit command and reads the same log, page N being its sector N; it has no page field,
/// so it reads the pages before too (4 KiB for page 7, once per reading).
fn device_statistics_registers(page: u8, form: PassThrough) -> Option<Registers> {
    Some(match form {
        PassThrough::Sixteen => Registers {
            protocol: PIO_DATA_IN,
            flags: READ_BLOCKS,
            feature: 0,
            count: 1,
            lba_low: DEVICE_STATISTICS_LOG,
            lba_mid: page,
            lba_high: 0,
            command: READ_LOG_EXT,
            extend: true,
        },
        PassThrough::Twelve => Registers {
            protocol: PIO_DATA_IN,
            flags: READ_BLOCKS,
            feature: SMART_READ_LOG,
            // NB: a 28-bit COUNT of 0 means 256, not 0: page FFh is out of this form's reach.
            count: page.checked_add(1)?,
            lba_low: DEVICE_STATISTICS_LOG,
            lba_mid: 0x4F,
            lba_high: 0xC2,
            command: SMART,
            extend: false,
        },
    })
}

/// The CDB that reads page `page` of the Device Statistics log through `form` (see
/// [`device_statistics_registers`]); `None` when that form cannot reach the page.
pub fn device_statistics_cdb(page: u8, form: PassThrough) -> Option<Vec<u8>> {
    device_statistics_registers(page, form).map(|r| r.cdb_of(form))
}

/// What SG_IO answered: the SCSI status, the host and driver status, and the sense data written.
struct SgAnswer {
    status: u8,
    host_status: u16,
    driver_status: u16,
    /// Bytes of the data buffer not written.
    resid: usize,
    sense: Vec<u8>,
}

impl SgAnswer {
    /// The device answered GOOD and neither the host adapter nor the driver saw an error.
    /// NB: driver_status' low nibble is the driver's verdict; DRIVER_SENSE (08h) only says sense data came back.
    fn good(&self) -> bool {
        self.status == 0 && self.host_status == 0 && self.driver_status & 0x07 == 0
    }
}

/// One SG_IO with `cdb` on the SCSI generic interface of the block device open at `fd`, reading into `data` when
/// given. The answer says how many bytes of `data` the device left unwritten (`resid`).
fn sg_command(fd: impl AsFd, cdb: &[u8], data: Option<&mut [u8]>) -> nix::Result<SgAnswer> {
    const SG_DXFER_NONE: i32 = -1;
    const SG_DXFER_FROM_DEV: i32 = -3;
    let mut sense = [0u8; SENSE_LEN];
    let (direction, len, ptr) = match data {
        Some(buf) => (
            SG_DXFER_FROM_DEV,
            u32::try_from(buf.len()).unwrap_or(u32::MAX),
            buf.as_mut_ptr(),
        ),
        None => (SG_DXFER_NONE, 0, std::ptr::null_mut()),
    };
    let mut hdr = SgIoHdr {
        interface_id: i32::from(b'S'),
        dxfer_direction: direction,
        cmd_len: u8::try_from(cdb.len()).map_err(|_| nix::errno::Errno::EINVAL)?,
        mx_sb_len: SENSE_LEN as u8,
        iovec_count: 0,
        dxfer_len: len,
        dxferp: ptr,
        cmdp: cdb.as_ptr(),
        sbp: sense.as_mut_ptr(),
        // NB: bounded: a drive busy with its own recovery may take seconds to answer.
        timeout: 5_000,
        flags: 0,
        pack_id: 0,
        usr_ptr: std::ptr::null_mut(),
        status: 0,
        masked_status: 0,
        msg_status: 0,
        sb_len_wr: 0,
        host_status: 0,
        driver_status: 0,
        resid: 0,
        duration: 0,
        info: 0,
    };
    // SAFETY: the ioctl reads one `sg_io_hdr`, the `cmd_len` bytes at `cmdp` (`cdb`), and writes at most
    // `dxfer_len` bytes to `dxferp` (the caller's buffer of that length, or none), at most `mx_sb_len` bytes to
    // `sbp` (`sense`) and the output fields of the header; all outlive the call.
    unsafe { sg_io(fd.as_fd().as_raw_fd(), &mut hdr) }?;
    let written = usize::from(hdr.sb_len_wr).min(SENSE_LEN);
    Ok(SgAnswer {
        status: hdr.status,
        host_status: hdr.host_status,
        driver_status: hdr.driver_status,
        resid: usize::try_from(hdr.resid).unwrap_or(0),
        sense: sense[..written].to_vec(),
    })
}

/// SMART READ DATA or READ THRESHOLDS of the ATA drive open at `fd` (an `sd` disk opened read-only): the sector for
/// `health::smart::parse_ata_attributes` / `parse_ata_thresholds`. Read-only commands; the kernel asks for
/// CAP_SYS_RAWIO. `ENOTTY` (or `EINVAL`) on a device without a SCSI generic interface (a loop device, NVMe);
/// `EREMOTEIO` when the drive or the translator answered with an error instead of the sector.
pub fn ata_smart_read(fd: impl AsFd, what: AtaSmart) -> nix::Result<[u8; 512]> {
    ata_smart_read_via(fd, what, PassThrough::Sixteen)
}

/// [`ata_smart_read`] through the 16- or the 12-byte ATA PASS-THROUGH.
pub fn ata_smart_read_via(
    fd: impl AsFd,
    what: AtaSmart,
    form: PassThrough,
) -> nix::Result<[u8; 512]> {
    if what == AtaSmart::ReturnStatus {
        return Err(nix::errno::Errno::EINVAL);
    }
    let mut sector = [0u8; 512];
    let answer = sg_command(fd, &what.cdb_of(form), Some(&mut sector))?;
    if !answer.good() {
        return Err(nix::errno::Errno::EREMOTEIO);
    }
    Ok(sector)
}

/// SMART RETURN STATUS of the ATA drive open at `fd`: the sense data the translator returns with the ATA registers
/// (CK_COND), for `health::smart::ata_registers`. Empty when the translator returned none.
pub fn ata_smart_return_status(fd: impl AsFd) -> nix::Result<Vec<u8>> {
    ata_smart_return_status_via(fd, PassThrough::Sixteen)
}

/// [`ata_smart_return_status`] through the 16- or the 12-byte ATA PASS-THROUGH.
pub fn ata_smart_return_status_via(fd: impl AsFd, form: PassThrough) -> nix::Result<Vec<u8>> {
    let answer = sg_command(fd, &AtaSmart::ReturnStatus.cdb_of(form), None)?;
    if answer.host_status != 0 {
        return Err(nix::errno::Errno::EREMOTEIO);
    }
    Ok(answer.sense)
}

/// Page `page` of the Device Statistics log of the ATA drive open at `fd` (opened read-only), through the 16- or
/// the 12-byte ATA PASS-THROUGH: the 512 bytes for `health::smart::ata_endurance_used`. A read-only command;
/// errors as [`ata_smart_read`]'s, `EREMOTEIO` also when the drive keeps no such log or page (it aborts the
/// command), `EINVAL` when `form` cannot reach the page.
pub fn ata_device_statistics_via(
    fd: impl AsFd,
    page: u8,
    form: PassThrough,
) -> nix::Result<[u8; 512]> {
    let registers = device_statistics_registers(page, form).ok_or(nix::errno::Errno::EINVAL)?;
    let mut data = vec![0u8; 512 * usize::from(registers.count)];
    let answer = sg_command(fd, &registers.cdb_of(form), Some(&mut data))?;
    if !answer.good() {
        return Err(nix::errno::Errno::EREMOTEIO);
    }
    // NB: `resid` is not looked at, as for the SMART sectors: a page that did not arrive is left zeros, which the
    // parser refuses (no revision, no page number).
    let mut sector = [0u8; 512];
    sector.copy_from_slice(&data[data.len() - 512..]);
    Ok(sector)
}

/// LOG SENSE (10) of page `page` (subpage 0, cumulative values) from the SCSI disk open at `fd` (opened
/// read-only): the page as returned, for `health::scsi::parse_log_page`. A read-only command of every SCSI disk
/// (SPC); the kernel lets a process with read access send it. `ENOTTY` (or `EINVAL`) on a device without a SCSI
/// generic interface; `EREMOTEIO` when the disk answered with an error (a page it does not keep: ILLEGAL REQUEST).
pub fn scsi_log_sense(fd: impl AsFd, page: u8) -> nix::Result<Vec<u8>> {
    // NB: 252 bytes, as smartmontools asks: some older disks and bridges reject a longer allocation length. The
    // pages read (2Fh general parameter, error counters) fit with room to spare; a longer page comes back cut.
    let mut data = vec![0u8; LOG_SENSE_LEN];
    let answer = sg_command(fd, &log_sense_cdb(page), Some(&mut data))?;
    if !answer.good() {
        return Err(nix::errno::Errno::EREMOTEIO);
    }
    data.truncate(LOG_SENSE_LEN.saturating_sub(answer.resid));
    Ok(data)
}

const LOG_SENSE_LEN: usize = 252;

/// The LOG SENSE (10) CDB (SPC-5): opcode 4Dh; byte 2 the page control (01b: cumulative values) in bits 7-6 and the
/// page code in bits 5-0; byte 3 the subpage; bytes 7-8 the allocation length, big-endian.
pub fn log_sense_cdb(page: u8) -> [u8; 10] {
    let [high, low] = (LOG_SENSE_LEN as u16).to_be_bytes();
    [0x4D, 0, 0x40 | (page & 0x3F), 0, 0, 0, 0, high, low, 0]
}

#[cfg(test)]
mod tests {
    use super::{AtaSmart, PassThrough};

    #[test]
    fn the_smart_commands_are_ata_pass_through_16_with_the_smart_signature() {
        let read = [
            0x85, 0x08, 0x0E, 0, 0xD0, 0, 1, 0, 0, 0, 0x4F, 0, 0xC2, 0, 0xB0, 0,
        ];
        assert_eq!(AtaSmart::ReadData.cdb(), read);
        let mut thresholds = read;
        thresholds[4] = 0xD1;
        assert_eq!(AtaSmart::ReadThresholds.cdb(), thresholds);
        let status = [
            0x85, 0x06, 0x20, 0, 0xDA, 0, 0, 0, 0, 0, 0x4F, 0, 0xC2, 0, 0xB0, 0,
        ];
        assert_eq!(AtaSmart::ReturnStatus.cdb(), status);
    }

    /// T10 SAT's ATA PASS-THROUGH (12): the same command, FEATURE in byte 3, COUNT in 4, the signature in 6 and 7,
    /// COMMAND in 9.
    #[test]
    fn the_smart_commands_in_the_12_byte_form_carry_the_same_registers() {
        assert_eq!(
            AtaSmart::ReadData.cdb12(),
            [0xA1, 0x08, 0x0E, 0xD0, 1, 0, 0x4F, 0xC2, 0, 0xB0, 0, 0]
        );
        assert_eq!(
            AtaSmart::ReadThresholds.cdb12(),
            [0xA1, 0x08, 0x0E, 0xD1, 1, 0, 0x4F, 0xC2, 0, 0xB0, 0, 0]
        );
        assert_eq!(
            AtaSmart::ReturnStatus.cdb12(),
            [0xA1, 0x06, 0x20, 0xDA, 0, 0, 0x4F, 0xC2, 0, 0xB0, 0, 0]
        );
        assert_eq!(
            AtaSmart::ReturnStatus.cdb_of(PassThrough::Twelve),
            AtaSmart::ReturnStatus.cdb12().to_vec()
        );
    }

    /// ACS-4 READ LOG EXT through ATA PASS-THROUGH (16): PIO Data-In with EXTEND (09h), one 512-byte block (0Eh),
    /// COUNT 1, log address 04h in LBA (7:0), page 07h in LBA (15:8), COMMAND 2Fh; the upper bytes zero.
    #[test]
    fn the_device_statistics_page_is_read_log_ext_in_the_16_byte_form() {
        assert_eq!(
            super::device_statistics_cdb(0x07, PassThrough::Sixteen),
            Some(vec![
                0x85, 0x09, 0x0E, 0, 0, 0, 1, 0, 0x04, 0, 0x07, 0, 0, 0, 0x2F, 0
            ])
        );
    }

    /// The 12-byte form carries no 48-bit command: SMART READ LOG (B0h, feature D5h) of log 04h with the SMART
    /// signature, COUNT 8 (pages 0 to 7); page FFh would need a COUNT of 256.
    #[test]
    fn the_device_statistics_page_is_smart_read_log_of_the_pages_up_to_it_in_the_12_byte_form() {
        assert_eq!(
            super::device_statistics_cdb(0x07, PassThrough::Twelve),
            Some(vec![
                0xA1, 0x08, 0x0E, 0xD5, 8, 0x04, 0x4F, 0xC2, 0, 0xB0, 0, 0
            ])
        );
        assert_eq!(
            super::device_statistics_cdb(0x00, PassThrough::Twelve).map(|c| c[4]),
            Some(1)
        );
        assert_eq!(
            super::device_statistics_cdb(0xFF, PassThrough::Twelve),
            None
        );
        assert!(super::device_statistics_cdb(0xFF, PassThrough::Sixteen).is_some());
    }

    /// SPC-5 LOG SENSE (10): page control 01b (cumulative) with the page code, 252 bytes allowed.
    #[test]
    fn log_sense_asks_for_the_cumulative_page_in_252_bytes() {
        assert_eq!(
            super::log_sense_cdb(0x2F),
            [0x4D, 0, 0x6F, 0, 0, 0, 0, 0, 0xFC, 0]
        );
        assert_eq!(super::log_sense_cdb(0x03)[2], 0x43);
    }
}
