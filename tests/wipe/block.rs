//! Block wipe on loop devices, one per method.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use localpv::contract::DevId;
use localpv::wipe::{BlockMethod, BlockOptions, BlockWipeError, Control, wipe_block};
use rstest::rstest;

use crate::disks::{Mount, Unwatched, mkfs, run};
use crate::fixtures::loop_disk;

const SIZE: u64 = 64 << 20;
const MIB: u64 = 1 << 20;

/// Fill the first, a middle and the last MiB of the backing file with a non-zero pattern.
fn scribble(backing: &Path) {
    let mut file = fs::OpenOptions::new().write(true).open(backing).unwrap();
    for at in [0, SIZE / 2 - 4096, SIZE - MIB] {
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(&vec![0xa5; MIB as usize]).unwrap();
    }
    file.sync_all().unwrap();
}

fn all_zero(device: &Path) -> bool {
    let mut file = fs::File::open(device).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            return true;
        }
        if buf[..n].iter().any(|b| *b != 0) {
            return false;
        }
    }
}

fn opts(method: BlockMethod) -> BlockOptions {
    BlockOptions {
        method,
        chunk_bytes: 16 * MIB,
        ..BlockOptions::default()
    }
}

fn dev_of(device: &Path) -> DevId {
    DevId::from_dev(fs::metadata(device).unwrap().rdev())
}

#[rstest]
#[case::zeroout(BlockMethod::ZeroOut)]
#[case::discard(BlockMethod::Discard)]
#[case::overwrite(BlockMethod::Overwrite)]
fn the_whole_device_reads_back_as_zeros(#[case] method: BlockMethod) {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    scribble(&disk.backing);
    assert!(!all_zero(disk.path()));
    let ctl = Control::default();
    let report = wipe_block(disk.path(), Some(dev_of(disk.path())), &opts(method), &ctl).unwrap();
    assert_eq!(report.method, method);
    assert_eq!((report.bytes, report.device_bytes), (SIZE, SIZE));
    assert_eq!(
        (ctl.progress.bytes(), ctl.progress.total_bytes()),
        (SIZE, SIZE)
    );
    assert!(all_zero(disk.path()), "{method} left data behind");
}

#[test]
fn discard_on_a_loop_device_punches_holes_in_the_sparse_backing_file() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    scribble(&disk.backing);
    let allocated = fs::metadata(&disk.backing).unwrap().blocks() * 512;
    assert!(
        allocated >= 3 * MIB,
        "the scribble was not allocated: {allocated}"
    );
    wipe_block(
        disk.path(),
        None,
        &opts(BlockMethod::Discard),
        &Control::default(),
    )
    .unwrap();
    assert_eq!(fs::metadata(&disk.backing).unwrap().blocks(), 0);
}

#[test]
fn secure_discard_on_a_device_without_it_fails_as_unsupported() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    let err = wipe_block(
        disk.path(),
        None,
        &opts(BlockMethod::SecureDiscard),
        &Control::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            BlockWipeError::Unsupported {
                method: BlockMethod::SecureDiscard,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn signatures_leave_nothing_blkid_recognises() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    mkfs("ext4", &disk.device, None);
    assert_eq!(
        run("blkid", &["-p", "-o", "value", "-s", "TYPE", &disk.device]).trim(),
        "ext4"
    );
    let report = wipe_block(
        disk.path(),
        None,
        &opts(BlockMethod::Signatures),
        &Control::default(),
    )
    .unwrap();
    assert_eq!(report.bytes, 2 * MIB);
    let probe = Command::new("blkid")
        .args(["-p", &disk.device])
        .output()
        .unwrap();
    // blkid exits 2 when it finds nothing.
    assert_eq!(
        probe.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&probe.stdout)
    );
}

#[test]
fn the_command_gets_the_device_in_its_environment_and_the_device_unclaimed() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    let record = tmp.path().join("record");
    let script = tmp.path().join("cleaner.sh");
    // blkdiscard opens the device O_EXCL itself, as operators' scripts do.
    let body = format!(
        "#!/bin/sh\nset -e\necho \"$LOCAL_PV_BLKDEVICE\" > {}\nblkdiscard \"$LOCAL_PV_BLKDEVICE\"\necho cleaned\n",
        record.display()
    );
    fs::write(&script, body).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let opts = BlockOptions {
        command: Some(vec![script.display().to_string()]),
        ..opts(BlockMethod::Command)
    };
    let report = wipe_block(disk.path(), None, &opts, &Control::default()).unwrap();
    assert_eq!(fs::read_to_string(&record).unwrap().trim(), disk.device);
    assert_eq!(report.command.unwrap().stdout_tail, "cleaned");
}

#[test]
fn a_failing_command_reports_its_exit_and_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    let argv = vec![
        "sh".into(),
        "-c".into(),
        "echo \"cannot clean $LOCAL_PV_BLKDEVICE\" >&2; exit 7".into(),
    ];
    let opts = BlockOptions {
        command: Some(argv),
        ..opts(BlockMethod::Command)
    };
    let err = wipe_block(disk.path(), None, &opts, &Control::default()).unwrap_err();
    assert!(err.to_string().contains("exit status: 7"), "{err}");
    assert!(
        err.to_string()
            .ends_with(&format!("cannot clean {}", disk.device)),
        "{err}"
    );
}

#[rstest]
#[case::zeroout(BlockMethod::ZeroOut)]
#[case::command(BlockMethod::Command)]
fn a_mounted_device_is_refused_as_busy(#[case] method: BlockMethod) {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    mkfs("ext4", &disk.device, None);
    let _mount = Mount::device(&disk.device, &tmp.path().join("mnt"), &Unwatched);
    let opts = BlockOptions {
        command: Some(vec!["true".into()]),
        ..opts(method)
    };
    let err = wipe_block(disk.path(), None, &opts, &Control::default()).unwrap_err();
    assert!(matches!(err, BlockWipeError::Busy { .. }), "{err}");
    assert!(err.to_string().contains("EBUSY"), "{err}");
}

#[test]
fn a_different_device_number_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    scribble(&disk.backing);
    let expected = DevId {
        major: 4095,
        minor: 4095,
    };
    let err = wipe_block(
        disk.path(),
        Some(expected),
        &opts(BlockMethod::ZeroOut),
        &Control::default(),
    )
    .unwrap_err();
    assert!(matches!(err, BlockWipeError::WrongDevice { .. }), "{err}");
    assert!(!all_zero(disk.path()));
}

#[test]
fn a_cancelled_block_wipe_stops_between_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), SIZE);
    let ctl = Control::default();
    ctl.cancel();
    let err = wipe_block(disk.path(), None, &opts(BlockMethod::Overwrite), &ctl).unwrap_err();
    assert!(
        matches!(err, BlockWipeError::Cancelled { done: 0, .. }),
        "{err}"
    );
}
