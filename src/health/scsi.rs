//! SCSI log pages, parsed (issue 37, point 1): the health a SAS (or other SCSI) disk keeps about itself, read with
//! LOG SENSE (`sys::scsi_log_sense`), into [`Hardware`] for [`super::judge`]. Pure: the host reads the bytes, this
//! module only reads them.
//!
//! ```text
//!  LOG SENSE page 2Fh (informational exceptions) ──> parse_log_page ──> informational_exception ─┐
//!  LOG SENSE page 03h (read error counters)      ──> parse_log_page ──> uncorrected_errors ──────┼─> scsi_hardware
//!  LOG SENSE page 02h (write error counters)     ──> parse_log_page ──> uncorrected_errors ──────┤     ─> Hardware
//!  LOG SENSE page 11h (solid state media)        ──> parse_log_page ──> endurance_used ──────────┘
//! ```
//!
//! Layouts (T10 SPC-4/SPC-5, "Log parameters" and the pages named): a 4-byte page header (page code in bits 5-0 of
//! byte 0, subpage in byte 1, the length of what follows in bytes 2-3, big-endian), then log parameters, each a
//! 4-byte header (parameter code in bytes 0-1, control byte, length of the value in byte 3) and its value. The
//! informational exceptions general parameter (code 0000h) holds the exception's additional sense code (ASC) and
//! qualifier (ASCQ) and the most recent temperature (degrees Celsius, FFh: none). The error counter pages count in
//! parameter 0006h the errors the drive could not correct, as a big-endian number as long as the parameter. The
//! solid state media page (an SSD's) gives in parameter 0001h, byte 3 of its value, the percentage of the rated
//! endurance used.

use super::{DriveWarning, Hardware, HardwareSource};

/// Page codes read.
pub const INFORMATIONAL_EXCEPTIONS: u8 = 0x2F;
pub const READ_ERRORS: u8 = 0x03;
pub const WRITE_ERRORS: u8 = 0x02;
pub const SOLID_STATE_MEDIA: u8 = 0x11;

/// The error counter pages' "total uncorrected errors" parameter.
const UNCORRECTED: u16 = 0x0006;

/// ASC of "FAILURE PREDICTION THRESHOLD EXCEEDED" (and its 5Dh family, "impending failure").
const ASC_FAILURE_PREDICTED: u8 = 0x5D;
/// ASCQ FFh of 5Dh: "FAILURE PREDICTION THRESHOLD EXCEEDED (FALSE)", what a drive reports when told to test it.
const ASCQ_TEST: u8 = 0xFF;
/// ASC 0Bh ASCQ 01h: "WARNING - SPECIFIED TEMPERATURE EXCEEDED".
const ASC_WARNING: u8 = 0x0B;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScsiParseError {
    #[error("failed to parse a SCSI log page: {len} bytes, shorter than its 4-byte header")]
    Short { len: usize },
    #[error("failed to parse a SCSI log page: page {got:#04x} where {want:#04x} was asked for")]
    WrongPage { want: u8, got: u8 },
}

/// One log page: its code, subpage and the parameters as returned (cut to what was returned when the drive said
/// more than the buffer held).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogPage<'a> {
    pub code: u8,
    pub subpage: u8,
    params: &'a [u8],
}

/// One log parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogParameter<'a> {
    pub code: u16,
    pub value: &'a [u8],
}

/// The page `want` in `data` (what LOG SENSE returned).
pub fn parse_log_page(data: &[u8], want: u8) -> Result<LogPage<'_>, ScsiParseError> {
    let header = data
        .get(..4)
        .ok_or(ScsiParseError::Short { len: data.len() })?;
    let code = header[0] & 0x3F;
    if code != want {
        return Err(ScsiParseError::WrongPage { want, got: code });
    }
    let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let end = (4 + len).min(data.len());
    Ok(LogPage {
        code,
        subpage: header[1],
        params: &data[4..end],
    })
}

impl<'a> LogPage<'a> {
    /// The parameters in order; a parameter cut short by the end of the page ends the list.
    pub fn parameters(&self) -> impl Iterator<Item = LogParameter<'a>> + 'a {
        let mut rest = self.params;
        std::iter::from_fn(move || {
            let header = rest.get(..4)?;
            let len = usize::from(header[3]);
            let value = rest.get(4..4 + len)?;
            let code = u16::from_be_bytes([header[0], header[1]]);
            rest = &rest[4 + len..];
            Some(LogParameter { code, value })
        })
    }

    fn parameter(&self, code: u16) -> Option<LogParameter<'a>> {
        self.parameters().find(|p| p.code == code)
    }
}

/// What the informational exceptions general parameter says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InformationalException {
    /// 0 when the drive reports no exception.
    pub asc: u8,
    pub ascq: u8,
    /// The most recent temperature, when the drive gives one.
    pub temperature_celsius: Option<u8>,
}

/// The general parameter (0000h) of an informational exceptions page (2Fh); `None` when the page lacks it.
pub fn informational_exception(page: &LogPage<'_>) -> Option<InformationalException> {
    let value = page.parameter(0x0000)?.value;
    let (asc, ascq) = (*value.first()?, *value.get(1)?);
    Some(InformationalException {
        asc,
        ascq,
        temperature_celsius: value.get(2).copied().filter(|t| *t != 0xFF),
    })
}

/// The total uncorrected errors (parameter 0006h) of a read, write or verify error counter page.
pub fn uncorrected_errors(page: &LogPage<'_>) -> Option<u64> {
    let value = page.parameter(UNCORRECTED)?.value;
    // NB: counters may be up to 8 bytes; a longer one (none seen) saturates rather than wraps.
    if value.is_empty() {
        return None;
    }
    if value.len() > 8 && value[..value.len() - 8].iter().any(|b| *b != 0) {
        return Some(u64::MAX);
    }
    Some(
        value
            .iter()
            .rev()
            .take(8)
            .rev()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b)),
    )
}

/// The percentage used endurance indicator (parameter 0001h) of a solid state media page (11h).
pub fn endurance_used(page: &LogPage<'_>) -> Option<u8> {
    page.parameter(0x0001)?.value.get(3).copied()
}

impl InformationalException {
    /// The warning the exception raises, if any: 5Dh (failure predicted, not the test report FFh) fails the disk;
    /// 0Bh/01h is a temperature warning; any other exception is a warning that degrades it.
    pub fn warning(&self) -> Option<DriveWarning> {
        match (self.asc, self.ascq) {
            (0, _) => None,
            (ASC_FAILURE_PREDICTED, ASCQ_TEST) => None,
            (ASC_WARNING, 0x01) => Some(DriveWarning::Temperature),
            (asc, ascq) => Some(DriveWarning::Exception { asc, ascq }),
        }
    }
}

/// Whether an informational exception predicts failure (fails the disk) rather than warns.
pub fn predicts_failure(asc: u8, ascq: u8) -> bool {
    asc == ASC_FAILURE_PREDICTED && ascq != ASCQ_TEST
}

/// What a SCSI disk's log pages said, each `None` when the disk did not answer that page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScsiPages {
    pub exception: Option<InformationalException>,
    pub read_uncorrected: Option<u64>,
    pub write_uncorrected: Option<u64>,
    /// Percentage of the rated endurance used (an SSD's solid state media page).
    pub endurance_used: Option<u8>,
}

/// The SCSI log pages as a health signal; `None` when the drive answered none of them.
pub fn scsi_hardware(pages: ScsiPages) -> Option<Hardware> {
    let ScsiPages {
        exception,
        read_uncorrected,
        write_uncorrected,
        endurance_used,
    } = pages;
    if pages == ScsiPages::default() {
        return None;
    }
    Some(Hardware {
        source: HardwareSource::Scsi,
        warnings: exception.and_then(|e| e.warning()).into_iter().collect(),
        media_errors: read_uncorrected
            .unwrap_or(0)
            .saturating_add(write_uncorrected.unwrap_or(0)),
        percentage_used: endurance_used,
    })
}

#[cfg(test)]
mod tests;
