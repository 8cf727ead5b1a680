//! The ATA Device Statistics solid state page (07h) on two real drives' `smartctl` renderings and on hand-written
//! pages for what no recording shows (`tests/fixtures/smart/README.md` says which is which).

use std::time::SystemTime;

use rstest::rstest;

use super::*;
use crate::health::{Cause, Policy, Signals, State, judge};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/smart/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// The bytes of a hand-written `.hex` fixture (hex pairs, `#` comments), as written.
fn hex(name: &str) -> Vec<u8> {
    fixture(name)
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .flat_map(str::split_whitespace)
        .map(|b| u8::from_str_radix(b, 16).expect("a hex byte"))
        .collect()
}

/// A hand-written page, padded with zeros to a whole page as a drive returns it.
fn hex_page(name: &str) -> Vec<u8> {
    let mut page = hex(name);
    page.resize(PAGE_LEN, 0);
    page
}

/// The page 07h a `smartctl -l devstat` (or `-l ssd`) rendering shows, at the ACS-4 offsets: the header's revision
/// ("(rev N)") and page number, then each statistic's qword at its offset with its value, supported and valid set
/// (smartctl prints a value only for those) and the flags it prints: N normalized (bit 61), D supports DSN (60),
/// C monitored condition met (59).
fn rendered_page(text: &str) -> Vec<u8> {
    let mut page = vec![0u8; PAGE_LEN];
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"0x07") {
            continue;
        }
        if let Some(rev) = line.split("(rev ").nth(1) {
            let rev: u16 = rev
                .split(')')
                .next()
                .and_then(|r| r.parse().ok())
                .expect("a revision");
            page[0..2].copy_from_slice(&rev.to_le_bytes());
            page[2] = 0x07;
            continue;
        }
        let [_, offset, _size, value, flags, ..] = words.as_slice() else {
            continue;
        };
        let offset = usize::from_str_radix(offset.trim_start_matches("0x"), 16).expect("an offset");
        let mut qword: u64 = value.parse().expect("a value");
        qword |= STATISTIC_SUPPORTED | STATISTIC_VALID;
        for (flag, bit) in [('N', 61), ('D', 60), ('C', 59)] {
            if flags.contains(flag) {
                qword |= 1 << bit;
            }
        }
        page[offset..offset + 8].copy_from_slice(&qword.to_le_bytes());
    }
    page
}

#[rstest]
#[case::normalized_20_percent("ata-devstat-ssd-20pct.smartctl.txt", 20)]
#[case::hpe_3_percent("ata-devstat-hpe-vk000480gxnza-3pct.smartctl.txt", 3)]
fn the_recorded_endurance_reads_at_the_acs_offsets(#[case] name: &str, #[case] used: u8) {
    let page = rendered_page(&fixture(name));
    assert_eq!(ata_endurance_used(&page), Some(used));
}

#[rstest]
#[case::worn("ata-devstat-worn.hex", Some(100))]
#[case::supported_but_no_valid_value("ata-devstat-not-valid.hex", None)]
#[case::not_supported("ata-devstat-unsupported.hex", None)]
#[case::another_page("ata-devstat-wrong-page.hex", None)]
fn only_a_supported_valid_statistic_of_page_7_is_an_endurance(
    #[case] name: &str,
    #[case] used: Option<u8>,
) {
    assert_eq!(ata_endurance_used(&hex_page(name)), used);
}

#[test]
fn the_endurance_may_pass_100_up_to_255_and_the_reserved_bits_are_not_part_of_it() {
    let mut page = hex_page("ata-devstat-worn.hex");
    page[8] = 0xFF;
    assert_eq!(ata_endurance_used(&page), Some(255));
    page[8] = 0x67;
    page[9..14].fill(0xAA); // bits 55:8 are reserved
    assert_eq!(ata_endurance_used(&page), Some(103));
}

#[test]
fn a_page_the_drive_does_not_keep_or_a_short_buffer_is_refused() {
    assert_eq!(
        ata_endurance_used(&[0; PAGE_LEN]),
        None,
        "zeros: revision 0"
    );
    let mut no_revision = hex_page("ata-devstat-worn.hex");
    no_revision[0] = 0;
    assert_eq!(ata_endurance_used(&no_revision), None);
    assert_eq!(
        ata_endurance_used(&hex("ata-devstat-worn.hex")),
        None,
        "16 bytes"
    );
    let page = rendered_page(&fixture("ata-devstat-ssd-20pct.smartctl.txt"));
    assert_eq!(ata_endurance_used(&page[..PAGE_LEN - 1]), None);
    assert_eq!(ata_endurance_used(&[]), None);
}

/// What `judge` makes of an ATA reading: the endurance alone decides nothing below 100, and degrades (never fails)
/// from 100 on, as an NVMe drive's or a SAS SSD's.
#[test]
fn a_sata_ssd_with_its_endurance_used_up_is_degraded_not_failed() {
    let judged = |used: Option<u8>| {
        let signals = Signals {
            hardware: Some(ata_hardware(&[], &[], Some(false), used)),
            ..Signals::default()
        };
        judge(None, &signals, &Policy::default(), SystemTime::UNIX_EPOCH)
    };
    let worn = ata_endurance_used(&hex_page("ata-devstat-worn.hex"));
    let record = judged(worn);
    assert_eq!(
        (record.state, record.cause, record.message.as_str()),
        (
            State::Degraded,
            Cause::HardwareWarning,
            "ATA SMART 100% of endurance used"
        )
    );
    let page = rendered_page(&fixture("ata-devstat-ssd-20pct.smartctl.txt"));
    assert_eq!(judged(ata_endurance_used(&page)).state, State::Healthy);
    assert_eq!(judged(None).state, State::Healthy);
}
