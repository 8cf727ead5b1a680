use std::path::Path;

use nix::errno::Errno;
use rstest::rstest;

use super::fake::{BlockCall, RecordingDevice, Target};
use super::*;

const DEV: &str = "/dev/fake0";

fn opts(method: BlockMethod) -> BlockOptions {
    BlockOptions {
        method,
        chunk_bytes: MIB,
        command: None,
        idle_io_priority: false,
    }
}

fn wipe(
    dev: &RecordingDevice,
    method: BlockMethod,
    direct: bool,
) -> Result<BlockReport, BlockWipeError> {
    let opts = opts(method);
    let ctl = Control::default();
    Wiper::new(Path::new(DEV), &opts, &ctl, dev.clone(), direct)?.run()
}

fn range(op: RangeOp, mib: u64) -> BlockCall {
    BlockCall::Range {
        op,
        offset: mib * MIB,
        len: MIB,
    }
}

fn write(offset_mib: u64, len_mib: u64) -> BlockCall {
    BlockCall::Write {
        offset: offset_mib * MIB,
        len: (len_mib * MIB) as usize,
    }
}

#[rstest]
#[case(BlockMethod::ZeroOut, RangeOp::ZeroOut)]
#[case(BlockMethod::Discard, RangeOp::Discard)]
#[case(BlockMethod::SecureDiscard, RangeOp::SecureDiscard)]
fn range_method_covers_the_device_one_chunk_per_call_then_syncs(
    #[case] method: BlockMethod,
    #[case] op: RangeOp,
) {
    let dev = RecordingDevice::new(3 * MIB);
    let report = wipe(&dev, method, false).expect("wipe");
    assert_eq!(report.method, method);
    assert_eq!(report.bytes, 3 * MIB);
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            range(op, 0),
            range(op, 1),
            range(op, 2),
            BlockCall::Fsync
        ]
    );
}

#[rstest]
#[case(Errno::EOPNOTSUPP)]
#[case(Errno::EINVAL)]
fn rejected_zeroout_falls_back_to_writing_zeros_from_where_it_stopped(#[case] errno: Errno) {
    let dev = RecordingDevice::new(3 * MIB).fail(Target::Range(RangeOp::ZeroOut, MIB), errno);
    let report = wipe(&dev, BlockMethod::ZeroOut, false).expect("wipe");
    assert_eq!(report.method, BlockMethod::Overwrite);
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            range(RangeOp::ZeroOut, 0),
            range(RangeOp::ZeroOut, 1),
            BlockCall::SetDirect,
            write(1, 2),
            BlockCall::Fsync
        ]
    );
}

#[test]
fn zeroout_fallback_without_o_direct_flushes_after_every_chunk() {
    let dev = RecordingDevice::new(10 * MIB)
        .no_direct()
        .fail(Target::Range(RangeOp::ZeroOut, 0), Errno::EOPNOTSUPP);
    let report = wipe(&dev, BlockMethod::ZeroOut, false).expect("wipe");
    assert_eq!(report.method, BlockMethod::Overwrite);
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            range(RangeOp::ZeroOut, 0),
            BlockCall::SetDirect,
            write(0, 4),
            BlockCall::Fdatasync,
            write(4, 4),
            BlockCall::Fdatasync,
            write(8, 2),
            BlockCall::Fdatasync,
            BlockCall::Fsync
        ]
    );
}

#[test]
fn direct_overwrite_writes_the_device_without_intermediate_flushes() {
    let dev = RecordingDevice::new(10 * MIB);
    wipe(&dev, BlockMethod::Overwrite, true).expect("wipe");
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            write(0, 4),
            write(4, 4),
            write(8, 2),
            BlockCall::Fsync
        ]
    );
}

#[test]
fn short_writes_are_continued_where_they_stopped() {
    let dev = RecordingDevice::new(3 * MIB).short_writes(MIB as usize);
    let report = wipe(&dev, BlockMethod::Overwrite, true).expect("wipe");
    assert_eq!(report.bytes, 3 * MIB);
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            write(0, 3),
            write(1, 2),
            write(2, 1),
            BlockCall::Fsync
        ]
    );
}

#[rstest]
#[case(BlockMethod::Discard, RangeOp::Discard)]
#[case(BlockMethod::SecureDiscard, RangeOp::SecureDiscard)]
fn unsupported_discard_fails_naming_the_method_and_writes_nothing(
    #[case] method: BlockMethod,
    #[case] op: RangeOp,
) {
    let dev = RecordingDevice::new(3 * MIB).fail(Target::Range(op, 0), Errno::EOPNOTSUPP);
    let err = wipe(&dev, method, false).expect_err("unsupported");
    assert!(matches!(err, BlockWipeError::Unsupported { method: m, .. } if m == method));
    assert_eq!(
        err.to_string(),
        format!("failed to {method} {DEV}: the device does not support it")
    );
    assert_eq!(dev.calls(), [BlockCall::Size, range(op, 0)]);
}

#[test]
fn io_error_during_zeroout_fails_with_method_and_offset_and_does_not_fall_back() {
    let dev =
        RecordingDevice::new(3 * MIB).fail(Target::Range(RangeOp::ZeroOut, 2 * MIB), Errno::EIO);
    let err = wipe(&dev, BlockMethod::ZeroOut, false).expect_err("EIO");
    assert_eq!(
        err.to_string(),
        format!("failed to zeroout {DEV} at byte {}", 2 * MIB)
    );
    assert!(matches!(
        err,
        BlockWipeError::Range {
            source: Errno::EIO,
            ..
        }
    ));
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            range(RangeOp::ZeroOut, 0),
            range(RangeOp::ZeroOut, 1),
            range(RangeOp::ZeroOut, 2)
        ]
    );
}

#[test]
fn io_error_during_the_fallback_fails_naming_the_write_and_its_offset() {
    let dev = RecordingDevice::new(10 * MIB)
        .fail(Target::Range(RangeOp::ZeroOut, 0), Errno::EOPNOTSUPP)
        .fail(Target::WriteFrom(4 * MIB), Errno::EIO);
    let err = wipe(&dev, BlockMethod::ZeroOut, false).expect_err("EIO");
    assert_eq!(
        err.to_string(),
        format!("failed to write zeros to {DEV} at byte {}", 4 * MIB)
    );
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            range(RangeOp::ZeroOut, 0),
            BlockCall::SetDirect,
            write(0, 4),
            write(4, 4)
        ]
    );
}

#[test]
fn a_write_of_zero_bytes_is_an_io_error_not_a_hang() {
    let dev = RecordingDevice::new(MIB).short_writes(0);
    let err = wipe(&dev, BlockMethod::Overwrite, true).expect_err("no progress");
    assert!(matches!(
        err,
        BlockWipeError::Write {
            offset: 0,
            source: Errno::EIO,
            ..
        }
    ));
}

#[test]
fn unreadable_size_fails_before_any_write() {
    let dev = RecordingDevice::new(MIB).fail(Target::Size, Errno::ENOTTY);
    let err = wipe(&dev, BlockMethod::ZeroOut, false).expect_err("size");
    assert_eq!(err.to_string(), format!("failed to read the size of {DEV}"));
    assert_eq!(dev.calls(), [BlockCall::Size]);
}

#[rstest]
#[case(Target::Fsync)]
#[case(Target::Fdatasync)]
fn failed_flush_fails_the_wipe(#[case] target: Target) {
    let dev = RecordingDevice::new(2 * MIB)
        .no_direct()
        .fail(target, Errno::EIO);
    let err = wipe(&dev, BlockMethod::Overwrite, false).expect_err("flush");
    assert_eq!(err.to_string(), format!("failed to flush {DEV}"));
}

#[test]
fn signatures_erases_with_libblkid_then_zeros_both_ends() {
    let dev = RecordingDevice::new(5 * MIB);
    let report = wipe(&dev, BlockMethod::Signatures, false).expect("wipe");
    assert_eq!(report.bytes, 2 * MIB);
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            BlockCall::EraseSignatures,
            write(0, 1),
            write(4, 1),
            BlockCall::Fsync
        ]
    );
}

#[test]
fn signatures_on_a_device_smaller_than_a_span_zeros_it_once() {
    let dev = RecordingDevice::new(MIB / 2);
    let report = wipe(&dev, BlockMethod::Signatures, false).expect("wipe");
    assert_eq!(report.bytes, MIB / 2);
    assert_eq!(
        dev.calls(),
        [
            BlockCall::Size,
            BlockCall::EraseSignatures,
            BlockCall::Write {
                offset: 0,
                len: (MIB / 2) as usize
            },
            BlockCall::Fsync
        ]
    );
}

#[test]
fn cancelled_wipe_stops_before_the_next_chunk() {
    let dev = RecordingDevice::new(3 * MIB);
    let opts = opts(BlockMethod::ZeroOut);
    let ctl = Control::default();
    ctl.cancel();
    let err = Wiper::new(Path::new(DEV), &opts, &ctl, dev.clone(), false)
        .expect("size")
        .run()
        .expect_err("cancelled");
    assert!(matches!(err, BlockWipeError::Cancelled { done: 0, .. }));
    assert_eq!(dev.calls(), [BlockCall::Size]);
}
