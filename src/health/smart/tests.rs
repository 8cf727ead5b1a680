//! The parsers on real drives' recorded outputs (`tests/fixtures/smart/README.md` says where each came from).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::*;
use crate::health::{Cause, Policy, Signals, State, judge};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/smart/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// The bytes of an `nvme get-log -vv` hex dump ("0000: 00 38 01 ..."), padded with zeros to a whole page.
fn hexdump_page(text: &str) -> Vec<u8> {
    let mut page = Vec::new();
    for line in text.lines() {
        let Some((offset, rest)) = line.split_once(": ") else {
            continue;
        };
        let Ok(offset) = usize::from_str_radix(offset.trim(), 16) else {
            continue;
        };
        assert_eq!(offset, page.len(), "hex dump lines in order: {line}");
        let hex = rest.split('"').next().unwrap_or_default();
        page.extend(
            hex.split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).expect("a hex byte")),
        );
    }
    page.resize(PAGE_LEN, 0);
    page
}

/// The fields of an `nvme smart-log` or `smartctl -a` rendering, by the names `nvme smart-log` gives them.
fn rendered_fields(text: &str) -> HashMap<String, u128> {
    let mut fields = HashMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key: String = key
            .trim()
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let key = match key.as_str() {
            "media_and_data_integrity_errors" => "media_errors".to_string(),
            "error_information_log_entries" => "num_err_log_entries".to_string(),
            _ => key,
        };
        let first = value.split_whitespace().next().unwrap_or_default();
        let number = first.trim_end_matches('%').replace(',', "");
        let parsed = match number.strip_prefix("0x") {
            Some(hex) => u128::from_str_radix(hex, 16),
            None => number.parse(),
        };
        if let Ok(mut n) = parsed {
            if key == "temperature" {
                n += 273; // both tools print Celsius first; the page holds kelvin
            }
            fields.insert(key, n);
        }
    }
    fields
}

/// A log page 02h holding `fields` at the NVMe base specification's offsets; zero elsewhere.
fn nvme_page(fields: &HashMap<String, u128>) -> Vec<u8> {
    let mut page = vec![0u8; PAGE_LEN];
    let get = |k: &str| fields.get(k).copied().unwrap_or(0);
    page[0] = get("critical_warning") as u8;
    page[1..3].copy_from_slice(&(get("temperature") as u16).to_le_bytes());
    page[3] = get("available_spare") as u8;
    page[4] = get("available_spare_threshold") as u8;
    page[5] = get("percentage_used") as u8;
    for (at, key) in [
        (128, "power_on_hours"),
        (144, "unsafe_shutdowns"),
        (160, "media_errors"),
        (176, "num_err_log_entries"),
    ] {
        page[at..at + 16].copy_from_slice(&get(key).to_le_bytes());
    }
    page
}

fn nvme_fixture(name: &str) -> NvmeHealth {
    parse_nvme(&nvme_page(&rendered_fields(&fixture(name)))).expect("a whole page")
}

#[test]
fn the_recorded_hex_dump_reads_at_the_spec_offsets() {
    let health = parse_nvme(&hexdump_page(&fixture("nvme-get-log-hexdump-partial.txt")))
        .expect("a whole page");
    assert_eq!(
        health,
        NvmeHealth {
            critical_warning: 0,
            temperature_kelvin: 0x0138,
            available_spare: 100,
            spare_threshold: 10,
            percentage_used: 1,
            ..NvmeHealth::default()
        }
    );
    assert_eq!(health.hardware().warnings, []);
}

#[test]
fn a_healthy_nvme_drive_gives_no_sign() {
    let health = nvme_fixture("nvme-wd-2tb-healthy.smart-log.txt");
    assert_eq!(
        (health.temperature_kelvin, health.percentage_used),
        (315, 3)
    );
    assert_eq!((health.power_on_hours, health.error_log_entries), (241, 1));
    let hardware = health.hardware();
    assert_eq!(
        hardware,
        Hardware {
            source: HardwareSource::Nvme,
            warnings: vec![],
            media_errors: 0,
            percentage_used: Some(3),
        }
    );
    let signals = Signals {
        hardware: Some(hardware),
        ..Signals::default()
    };
    let record = judge(None, &signals, &Policy::default(), SystemTime::UNIX_EPOCH);
    assert_eq!(record.state, State::Healthy);
}

#[test]
fn media_errors_seen_at_the_first_look_are_the_baseline_and_a_rise_degrades() {
    let health = nvme_fixture("nvme-3-media-errors.smart-log.txt");
    assert_eq!((health.media_errors, health.available_spare), (3, 53));
    let seen = Signals {
        hardware: Some(health.hardware()),
        ..Signals::default()
    };
    let policy = Policy::default();
    let t0 = SystemTime::UNIX_EPOCH;
    let first = judge(None, &seen, &policy, t0);
    assert_eq!(first.state, State::Healthy, "{first:?}");
    let mut rose = seen.clone();
    if let Some(hw) = rose.hardware.as_mut() {
        hw.media_errors = 5;
    }
    let later = judge(Some(&first), &rose, &policy, t0 + Duration::from_secs(600));
    assert_eq!(
        (later.state, later.cause, later.message.as_str()),
        (
            State::Degraded,
            Cause::HardwareWarning,
            "NVMe media errors 5 (2 new)"
        )
    );
}

#[test]
fn a_samsung_worn_out_warning_degrades_but_does_not_fail() {
    let health = nvme_fixture("nvme-samsung-critical-0x04-worn.smartctl.txt");
    assert_eq!(
        (health.critical_warning, health.percentage_used),
        (0x04, 100)
    );
    let hardware = health.hardware();
    assert_eq!(hardware.warnings, [DriveWarning::ReliabilityDegraded]);
    let signals = Signals {
        hardware: Some(hardware),
        ..Signals::default()
    };
    let record = judge(None, &signals, &Policy::default(), SystemTime::UNIX_EPOCH);
    assert_eq!(
        (record.state, record.message.as_str()),
        (
            State::Degraded,
            "NVMe critical warning: reliability degraded; 100% of endurance used"
        )
    );
}

#[test]
fn every_critical_warning_bit_is_named_in_order() {
    let mut page = vec![0u8; PAGE_LEN];
    page[0] = 0x3f;
    let warnings = parse_nvme(&page).expect("a whole page").hardware().warnings;
    assert_eq!(warnings, NVME_WARNINGS);
}

#[test]
fn a_spare_under_its_threshold_warns_even_without_the_bit_but_a_reserved_threshold_does_not() {
    let mut page = vec![0u8; PAGE_LEN];
    (page[3], page[4]) = (5, 10);
    let low = parse_nvme(&page).expect("a whole page").hardware();
    assert_eq!(low.warnings, [DriveWarning::SpareLow]);
    (page[3], page[4]) = (64, 255);
    let reserved = parse_nvme(&page).expect("a whole page").hardware();
    assert_eq!(reserved.warnings, []);
}

#[test]
fn a_short_page_is_refused() {
    assert_eq!(parse_nvme(&[0; 100]), Err(ParseError::Short { len: 100 }));
}

#[test]
fn the_128_bit_media_error_count_saturates() {
    let mut page = vec![0u8; PAGE_LEN];
    page[160 + 8] = 1; // 2^64
    let health = parse_nvme(&page).expect("a whole page");
    assert_eq!(health.media_errors, 1 << 64);
    assert_eq!(health.hardware().media_errors, u64::MAX);
}

/// One ATA attribute as `smartctl -A` prints it, or as a "name val= worst= thresh= raw=" summary.
struct Recorded {
    id: u8,
    flags: u16,
    value: u8,
    worst: u8,
    threshold: u8,
    raw: u64,
}

fn ata_recorded(text: &str) -> Vec<Recorded> {
    let by_name = |name: &str| match name {
        "Reallocated_Sector_Ct" => Some(5),
        "Current_Pending_Sector" => Some(197),
        "Offline_Uncorrectable" => Some(198),
        _ => None,
    };
    let mut found = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |w: &str| w.parse::<u64>().ok();
        if let [id, _name, flag, value, worst, thresh, .., raw] = words.as_slice()
            && let (Some(id), Some(value), Some(worst), Some(threshold), Some(raw)) =
                (num(id), num(value), num(worst), num(thresh), num(raw))
            && let Some(flags) = flag.strip_prefix("0x")
        {
            found.push(Recorded {
                id: id as u8,
                flags: u16::from_str_radix(flags, 16).expect("hex flags"),
                value: value as u8,
                worst: worst as u8,
                threshold: threshold as u8,
                raw,
            });
        } else if let Some(id) = words.first().and_then(|w| by_name(w)) {
            let field = |key: &str| {
                words
                    .iter()
                    .find_map(|w| w.strip_prefix(key))
                    .and_then(num)
                    .expect("a recorded field")
            };
            found.push(Recorded {
                id,
                flags: 0, // not posted
                value: field("val=") as u8,
                worst: field("worst=") as u8,
                threshold: field("thresh=") as u8,
                raw: field("raw="),
            });
        }
    }
    found
}

/// The SMART READ DATA and READ THRESHOLDS sectors holding `recorded`, checksummed.
fn ata_sectors(recorded: &[Recorded]) -> (Vec<u8>, Vec<u8>) {
    let mut data = vec![0u8; PAGE_LEN];
    let mut thresholds = vec![0u8; PAGE_LEN];
    data[0] = 16; // revision
    thresholds[0] = 16;
    for (i, r) in recorded.iter().enumerate() {
        let at = 2 + 12 * i;
        data[at] = r.id;
        data[at + 1..at + 3].copy_from_slice(&r.flags.to_le_bytes());
        (data[at + 3], data[at + 4]) = (r.value, r.worst);
        data[at + 5..at + 11].copy_from_slice(&r.raw.to_le_bytes()[..6]);
        (thresholds[at], thresholds[at + 1]) = (r.id, r.threshold);
    }
    for sector in [&mut data, &mut thresholds] {
        let sum = sector.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        sector[511] = 0u8.wrapping_sub(sum);
    }
    (data, thresholds)
}

fn ata_fixture(name: &str, failing: Option<bool>) -> Hardware {
    let (data, thresholds) = ata_sectors(&ata_recorded(&fixture(name)));
    let attributes = parse_ata_attributes(&data).expect("a checksummed sector");
    let thresholds = parse_ata_thresholds(&thresholds).expect("a checksummed sector");
    ata_hardware(&attributes, &thresholds, failing, None)
}

#[test]
fn the_attribute_table_reads_back_as_recorded() {
    let (data, _) = ata_sectors(&ata_recorded(&fixture("ata-hdd-reallocated-1.txt")));
    let attributes = parse_ata_attributes(&data).expect("a checksummed sector");
    assert_eq!(attributes.len(), 9);
    assert_eq!(
        attributes[3],
        AtaAttribute {
            id: 5,
            flags: 0x0033,
            value: 200,
            worst: 200,
            raw: 1,
        }
    );
    assert!(attributes[3].prefail());
    assert_eq!(attributes[5].raw, 31762);
}

#[test]
fn one_old_reallocated_sector_is_the_baseline_not_a_sign() {
    let hardware = ata_fixture("ata-hdd-reallocated-1.txt", Some(false));
    assert_eq!((hardware.warnings.len(), hardware.media_errors), (0, 1));
    let signals = Signals {
        hardware: Some(hardware),
        ..Signals::default()
    };
    let record = judge(None, &signals, &Policy::default(), SystemTime::UNIX_EPOCH);
    assert_eq!(record.state, State::Healthy);
}

#[test]
fn pending_sectors_degrade_though_smart_says_passed() {
    let hardware = ata_fixture("ata-st12000nm0127-pending.txt", Some(false));
    assert_eq!(
        (hardware.warnings.as_slice(), hardware.media_errors),
        (
            [DriveWarning::UnreadableSectors { count: 624 }].as_slice(),
            2872 + 624 + 624
        )
    );
    let signals = Signals {
        hardware: Some(hardware),
        ..Signals::default()
    };
    let record = judge(None, &signals, &Policy::default(), SystemTime::UNIX_EPOCH);
    assert_eq!(
        (record.state, record.message.as_str()),
        (
            State::Degraded,
            "ATA SMART warning: 624 unreadable sectors; bad sectors 4120"
        )
    );
}

#[test]
fn a_failing_smart_status_fails_the_disk() {
    let text = fixture("ata-ssd-lifetime-used-failed.txt");
    assert!(text.contains("test result: FAILED!"));
    let hardware = ata_fixture("ata-ssd-lifetime-used-failed.txt", Some(true));
    assert_eq!(
        hardware.warnings,
        [
            DriveWarning::SmartFailing,
            DriveWarning::AttributeAtThreshold {
                id: 202,
                prefail: false
            }
        ]
    );
    let signals = Signals {
        hardware: Some(hardware),
        ..Signals::default()
    };
    let record = judge(None, &signals, &Policy::default(), SystemTime::UNIX_EPOCH);
    assert_eq!(
        (record.state, record.cause),
        (State::Failed, Cause::HardwareWarning)
    );
}

#[test]
fn a_sector_with_a_wrong_checksum_is_refused() {
    let (mut data, _) = ata_sectors(&ata_recorded(&fixture("ata-hdd-reallocated-1.txt")));
    data[511] = data[511].wrapping_add(1);
    assert_eq!(parse_ata_attributes(&data), Err(ParseError::Checksum));
}

#[test]
fn the_return_status_registers_say_pass_fail_or_nothing() {
    assert_eq!(ata_return_status(0x4F, 0xC2), Some(false));
    assert_eq!(ata_return_status(0xF4, 0x2C), Some(true));
    assert_eq!(ata_return_status(0, 0), None);
}

/// Each sense buffer of a kernel log ("Descriptor sense data with sense descriptors (in hex):" and its hex lines).
fn logged_sense(text: &str) -> Vec<Vec<u8>> {
    let mut buffers: Vec<Vec<u8>> = Vec::new();
    for line in text.lines() {
        let rest = line.split_once("] ").map_or(line, |(_, r)| r);
        if rest.starts_with("Descriptor sense data") {
            buffers.push(Vec::new());
            continue;
        }
        let bytes: Option<Vec<u8>> = rest
            .split_whitespace()
            .map(|b| {
                (b.len() == 2)
                    .then(|| u8::from_str_radix(b, 16).ok())
                    .flatten()
            })
            .collect();
        if let (Some(bytes), Some(last)) = (bytes.filter(|b| !b.is_empty()), buffers.last_mut()) {
            last.extend(bytes);
        }
    }
    buffers
}

#[test]
fn the_recorded_return_status_sense_says_passing_and_another_commands_says_nothing() {
    let logged = logged_sense(&fixture("ata-sat-sense.dmesg.txt"));
    assert_eq!(logged.len(), 2, "{logged:x?}");
    let passing = ata_registers(&logged[0]).expect("an ATA Status Return descriptor");
    assert_eq!(
        passing,
        AtaRegisters {
            error: 0,
            status: 0x50,
            lba_mid: 0x4F,
            lba_high: 0xC2
        }
    );
    assert_eq!(
        ata_return_status(passing.lba_mid, passing.lba_high),
        Some(false)
    );
    let other = ata_registers(&logged[1]).expect("an ATA Status Return descriptor");
    assert_eq!(ata_return_status(other.lba_mid, other.lba_high), None);
}

#[test]
fn a_failing_verdict_reads_in_both_sense_formats_and_other_sense_data_is_no_verdict() {
    let logged = logged_sense(&fixture("ata-sat-sense.dmesg.txt"));
    let mut failing = logged[0].clone();
    (failing[17], failing[19]) = (0xF4, 0x2C);
    let verdict =
        |sense: &[u8]| ata_registers(sense).and_then(|r| ata_return_status(r.lba_mid, r.lba_high));
    assert_eq!(verdict(&failing), Some(true), "descriptor format");
    // Fixed format, as libata writes it: VALID set, RECOVERED ERROR, 00h/1Dh, ERROR 3, STATUS 4, LBA 9-11.
    let mut fixed = [0u8; 18];
    fixed[0] = 0xF0;
    fixed[2] = 0x01;
    fixed[7] = 10;
    fixed[4] = 0x50;
    (fixed[9], fixed[10], fixed[11]) = (0, 0xF4, 0x2C);
    fixed[13] = 0x1D;
    assert_eq!(verdict(&fixed), Some(true), "fixed format");
    (fixed[10], fixed[11]) = (0x4F, 0xC2);
    assert_eq!(verdict(&fixed), Some(false), "fixed format, passing");
    // A SAS drive refusing the command: ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE (20h/00h), whatever its
    // command-specific bytes hold.
    let mut refused = fixed;
    (refused[2], refused[12], refused[13]) = (0x05, 0x20, 0x00);
    assert_eq!(ata_registers(&refused), None);
    for cut in 0..logged[0].len() {
        assert_eq!(ata_registers(&logged[0][..cut]), None, "cut at {cut}");
    }
    assert_eq!(ata_registers(&[]), None);
    // A descriptor list whose lengths run past the buffer.
    let mut runaway = logged[0].clone();
    (runaway[7], runaway[9]) = (0xFF, 0xFF);
    assert_eq!(ata_registers(&runaway), None);
}
