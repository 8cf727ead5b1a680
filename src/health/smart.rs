//! The device's own health logs, parsed (issue 37, point 1): the NVMe SMART / Health Information log page, the
//! ATA SMART data and threshold sectors and the ATA Device Statistics log's solid state page, as the device returns
//! them, into [`Hardware`] for [`super::judge`]. Pure: the host reads the bytes (`sys::nvme_smart_log`,
//! `sys::ata_smart_read`, `sys::ata_smart_return_status`, `sys::ata_device_statistics_via`), this module only reads
//! them.
//!
//! ```text
//!  NVMe Get Log Page 02h (512 bytes) ──> parse_nvme ──> NvmeHealth ──> .hardware() ─┐
//!  ATA SMART READ DATA (512 bytes)   ──> parse_ata_attributes ─┐                    ├─> Hardware
//!  ATA SMART READ THRESHOLDS         ──> parse_ata_thresholds ─┼─> ata_hardware ────┘
//!  SMART RETURN STATUS ──> ata_registers ─> ata_return_status ─┤
//!  ATA Device Statistics page 07h ──> ata_endurance_used ──────┘
//! ```
//!
//! Layouts: NVM Express Base Specification, "SMART / Health Information (Log Identifier 02h)"; ATA/ATAPI-8 and the
//! de-facto attribute table every ATA drive fills (30 entries of 12 bytes after a 2-byte revision), as smartmontools
//! reads it; the ATA registers in sense data as T10 SAT returns them for ATA PASS-THROUGH with CK_COND (the
//! layout Linux's libata writes in `ata_scsi_set_passthru_sense_fields`); ACS-4 "Device Statistics log", "Solid
//! State Device Statistics".

use super::{DriveWarning, Hardware, HardwareSource};

/// Length of the NVMe SMART / Health Information log page and of an ATA SMART data sector.
pub const PAGE_LEN: usize = 512;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("failed to parse a health log: {len} bytes, a full page is {PAGE_LEN}")]
    Short { len: usize },
    #[error(
        "failed to parse ATA SMART data: the checksum byte does not make the sector sum to zero"
    )]
    Checksum,
}

/// What the NVMe SMART / Health Information log page says, the fields localpv uses or shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmeHealth {
    /// Byte 0: one bit per warning (bit 0 spare, 1 temperature, 2 reliability, 3 read-only, 4 volatile backup,
    /// 5 persistent memory region).
    pub critical_warning: u8,
    /// Bytes 1-2: composite temperature in kelvin.
    pub temperature_kelvin: u16,
    /// Byte 3: remaining spare capacity, percent.
    pub available_spare: u8,
    /// Byte 4: the spare percentage below which the device warns.
    pub spare_threshold: u8,
    /// Byte 5: vendor estimate of the rated endurance used, percent; may exceed 100 (255 means 255 or more).
    pub percentage_used: u8,
    /// Bytes 128-143.
    pub power_on_hours: u128,
    /// Bytes 144-159.
    pub unsafe_shutdowns: u128,
    /// Bytes 160-175: unrecovered data integrity errors (ECC, CRC, LBA tag mismatch) since manufacture.
    pub media_errors: u128,
    /// Bytes 176-191.
    pub error_log_entries: u128,
}

/// Critical warning bits, in bit order.
const NVME_WARNINGS: [DriveWarning; 6] = [
    DriveWarning::SpareLow,
    DriveWarning::Temperature,
    DriveWarning::ReliabilityDegraded,
    DriveWarning::ReadOnly,
    DriveWarning::BackupFailed,
    DriveWarning::PersistentMemoryReadOnly,
];

fn le128(page: &[u8], at: usize) -> u128 {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&page[at..at + 16]);
    u128::from_le_bytes(bytes)
}

/// Parses an NVMe SMART / Health Information log page (Log Identifier 02h). Longer input is cut to the page.
pub fn parse_nvme(page: &[u8]) -> Result<NvmeHealth, ParseError> {
    if page.len() < PAGE_LEN {
        return Err(ParseError::Short { len: page.len() });
    }
    Ok(NvmeHealth {
        critical_warning: page[0],
        temperature_kelvin: u16::from_le_bytes([page[1], page[2]]),
        available_spare: page[3],
        spare_threshold: page[4],
        percentage_used: page[5],
        power_on_hours: le128(page, 128),
        unsafe_shutdowns: le128(page, 144),
        media_errors: le128(page, 160),
        error_log_entries: le128(page, 176),
    })
}

impl NvmeHealth {
    /// The page as a health signal.
    pub fn hardware(&self) -> Hardware {
        let mut warnings: Vec<DriveWarning> = NVME_WARNINGS
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.critical_warning & (1 << bit) != 0)
            .map(|(_, w)| *w)
            .collect();
        // NB: a threshold above 100 is reserved (a Samsung 980 PRO was seen reporting 255): it cannot be compared.
        let spare_low = self.spare_threshold <= 100 && self.available_spare < self.spare_threshold;
        if spare_low && !warnings.contains(&DriveWarning::SpareLow) {
            warnings.insert(0, DriveWarning::SpareLow);
        }
        Hardware {
            source: HardwareSource::Nvme,
            warnings,
            media_errors: u64::try_from(self.media_errors).unwrap_or(u64::MAX),
            percentage_used: Some(self.percentage_used),
        }
    }
}

/// One entry of the ATA SMART attribute table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtaAttribute {
    pub id: u8,
    pub flags: u16,
    /// The normalised value (1-253, higher is better), compared with the threshold.
    pub value: u8,
    pub worst: u8,
    /// The six raw bytes, little-endian; what they count is the vendor's (most count sectors or events).
    pub raw: u64,
}

impl AtaAttribute {
    /// Flag bit 0: the attribute at or below its threshold predicts failure (pre-fail), rather than old age.
    pub fn prefail(&self) -> bool {
        self.flags & 1 != 0
    }
}

/// Attribute ids that count sectors the drive could not read or had to move.
pub const REALLOCATED_SECTORS: u8 = 5;
pub const PENDING_SECTORS: u8 = 197;
pub const UNCORRECTABLE_SECTORS: u8 = 198;

const ATA_ENTRIES: usize = 30;
const ATA_ENTRY_LEN: usize = 12;

/// Checks the length and the checksum (byte 511 makes the 512 bytes sum to zero; a drive that leaves it zero
/// with a non-zero sum is not trusted either).
fn ata_sector(data: &[u8]) -> Result<&[u8], ParseError> {
    let sector = data
        .get(..PAGE_LEN)
        .ok_or(ParseError::Short { len: data.len() })?;
    let sum = sector.iter().fold(0u8, |s, b| s.wrapping_add(*b));
    if sum != 0 {
        return Err(ParseError::Checksum);
    }
    Ok(sector)
}

/// The attribute table of a SMART READ DATA sector (feature D0h), entries with id 0 left out.
pub fn parse_ata_attributes(data: &[u8]) -> Result<Vec<AtaAttribute>, ParseError> {
    let sector = ata_sector(data)?;
    Ok(sector[2..2 + ATA_ENTRIES * ATA_ENTRY_LEN]
        .chunks_exact(ATA_ENTRY_LEN)
        .filter(|e| e[0] != 0)
        .map(|e| {
            let mut raw = [0u8; 8];
            raw[..6].copy_from_slice(&e[5..11]);
            AtaAttribute {
                id: e[0],
                flags: u16::from_le_bytes([e[1], e[2]]),
                value: e[3],
                worst: e[4],
                raw: u64::from_le_bytes(raw),
            }
        })
        .collect())
}

/// The (id, threshold) pairs of a SMART READ THRESHOLDS sector (feature D1h), entries with id 0 left out.
pub fn parse_ata_thresholds(data: &[u8]) -> Result<Vec<(u8, u8)>, ParseError> {
    let sector = ata_sector(data)?;
    Ok(sector[2..2 + ATA_ENTRIES * ATA_ENTRY_LEN]
        .chunks_exact(ATA_ENTRY_LEN)
        .filter(|e| e[0] != 0)
        .map(|e| (e[0], e[1]))
        .collect())
}

/// SMART RETURN STATUS (feature DAh) answers in the LBA Mid and High registers: `Some(true)` when a threshold
/// is exceeded (F4h, 2Ch), `Some(false)` when not (4Fh, C2h), `None` for anything else.
pub fn ata_return_status(lba_mid: u8, lba_high: u8) -> Option<bool> {
    match (lba_mid, lba_high) {
        (0x4F, 0xC2) => Some(false),
        (0xF4, 0x2C) => Some(true),
        _ => None,
    }
}

/// The ATA registers a SAT translator returns for an ATA PASS-THROUGH command, the ones SMART RETURN STATUS answers
/// in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtaRegisters {
    pub error: u8,
    pub status: u8,
    pub lba_mid: u8,
    pub lba_high: u8,
}

/// The ATA registers in `sense`: descriptor format (response code 72h/73h) with the ATA Status Return descriptor
/// (code 09h, 12 bytes: LBA Mid (7:0) at 9, LBA High (7:0) at 11, STATUS at 13), or fixed format (70h/71h, the
/// VALID bit allowed) with the additional sense code "ATA PASS-THROUGH INFORMATION AVAILABLE" (00h/1Dh: ERROR at
/// 3, STATUS at 4, LBA (15:8) at 10, LBA (23:16) at 11). `None` for any other sense data (a drive that refused the
/// command, a truncated buffer).
pub fn ata_registers(sense: &[u8]) -> Option<AtaRegisters> {
    match sense.first()? & 0x7F {
        0x72 | 0x73 => {
            let end = (8 + usize::from(*sense.get(7)?)).min(sense.len());
            let mut at = 8;
            while at + 2 <= end {
                let (code, len) = (sense[at], usize::from(sense[at + 1]));
                if code == 0x09 && len == 12 {
                    let d = sense.get(at..at + 14)?;
                    return Some(AtaRegisters {
                        error: d[3],
                        status: d[13],
                        lba_mid: d[9],
                        lba_high: d[11],
                    });
                }
                at += 2 + len;
            }
            None
        }
        0x70 | 0x71 => {
            let (asc, ascq) = (*sense.get(12)?, *sense.get(13)?);
            ((asc, ascq) == (0x00, 0x1D)).then(|| AtaRegisters {
                error: sense[3],
                status: sense[4],
                lba_mid: sense[10],
                lba_high: sense[11],
            })
        }
        _ => None,
    }
}

/// The page of the ATA Device Statistics log that holds the Solid State Device Statistics.
pub const SOLID_STATE_STATISTICS: u8 = 0x07;

/// Flags of a device statistic (the top byte of its qword): the drive supports it, and its value is valid.
const STATISTIC_SUPPORTED: u64 = 1 << 63;
const STATISTIC_VALID: u64 = 1 << 62;

/// The Percentage Used Endurance Indicator of page 07h of the ATA Device Statistics log (Solid State Device
/// Statistics): the drive's estimate of its rated endurance used, percent; may exceed 100 (255 means 255 or more).
/// The page starts with a header qword (bytes 0-1 the revision, byte 2 the page number); the statistic is the qword
/// at byte 8: bit 63 supported, bit 62 valid value, bits 7:0 the percentage. `None` for what does not say it: a
/// buffer shorter than a page, a header that is not page 07h's (a drive answers a page it does not keep with zeros,
/// revision 0), a statistic not supported or without a valid value.
pub fn ata_endurance_used(page: &[u8]) -> Option<u8> {
    let page = page.get(..PAGE_LEN)?;
    let revision = u16::from_le_bytes([page[0], page[1]]);
    if revision == 0 || page[2] != SOLID_STATE_STATISTICS {
        return None;
    }
    let mut qword = [0u8; 8];
    qword.copy_from_slice(&page[8..16]);
    let statistic = u64::from_le_bytes(qword);
    let flags = STATISTIC_SUPPORTED | STATISTIC_VALID;
    (statistic & flags == flags).then_some(qword[0])
}

/// The ATA SMART data as a health signal. `failing` is SMART RETURN STATUS's verdict, when it was read;
/// `endurance_used` the Device Statistics' percentage used endurance indicator, when the drive gave one.
pub fn ata_hardware(
    attributes: &[AtaAttribute],
    thresholds: &[(u8, u8)],
    failing: Option<bool>,
    endurance_used: Option<u8>,
) -> Hardware {
    let mut warnings = Vec::new();
    if failing == Some(true) {
        warnings.push(DriveWarning::SmartFailing);
    }
    for attribute in attributes {
        // NB: a threshold of 0 never trips (e.g. 197, whose normalised value barely moves); 255 is "always failing"
        // in some firmware's idea of a placeholder, not a verdict.
        let threshold = thresholds
            .iter()
            .find(|(id, _)| *id == attribute.id)
            .map_or(0, |(_, t)| *t);
        if threshold != 0 && threshold != 255 && attribute.value <= threshold {
            warnings.push(DriveWarning::AttributeAtThreshold {
                id: attribute.id,
                prefail: attribute.prefail(),
            });
        }
    }
    let raw = |id| {
        attributes
            .iter()
            .find(|a| a.id == id)
            .map_or(0, |a| a.raw & 0xFFFF_FFFF)
    };
    let unreadable = raw(PENDING_SECTORS).max(raw(UNCORRECTABLE_SECTORS));
    if unreadable > 0 {
        warnings.push(DriveWarning::UnreadableSectors { count: unreadable });
    }
    Hardware {
        source: HardwareSource::Ata,
        warnings,
        // NB: only the low 32 bits: several vendors keep other counters in the upper raw bytes of these attributes.
        media_errors: raw(REALLOCATED_SECTORS) + raw(PENDING_SECTORS) + raw(UNCORRECTABLE_SECTORS),
        percentage_used: endurance_used,
    }
}

#[cfg(test)]
mod devstat_tests;
#[cfg(test)]
mod tests;
