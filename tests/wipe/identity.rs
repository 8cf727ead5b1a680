//! The wipe's own last look before it removes anything (the agent's volume id on the opened root), and its check
//! after: nothing written meanwhile (issue 14 points 2-4).

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use localpv::host::Host;
use localpv::host::linux::LinuxHost;
use localpv::wipe::{Control, Expected, FsOptions, FsWipeError, volume_id_check, wipe_filesystem};

use crate::fixtures::{dev_of, tmpfs};

#[test]
fn a_wipe_pinned_to_a_volume_id_refuses_another_tmpfs_on_the_same_path() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let first = tmpfs(&vol);
    let id = LinuxHost::default().tag_volume(&vol).expect("tag");
    drop(first);
    let _second = tmpfs(&vol);
    fs::write(vol.join("other-tenant.txt"), "someone else's data").unwrap();
    let check = volume_id_check(id);
    // NB: the device number is the one found now (a swapped tmpfs often reuses the old one): it proves nothing.
    let expected = Expected {
        dev: Some(dev_of(&vol)),
        check: Some(&check),
    };
    let err = wipe_filesystem(&vol, &expected, &FsOptions::default(), &Control::default())
        .expect_err("another filesystem is refused");
    assert!(
        matches!(&err, FsWipeError::RootCheck { reason, .. } if reason.contains("is gone")),
        "{err:?}"
    );
    assert!(vol.join("other-tenant.txt").exists());
}

#[test]
fn a_wipe_pinned_to_a_volume_id_empties_the_volume_that_carries_it() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _m = tmpfs(&vol);
    let host = LinuxHost::default();
    let id = host.tag_volume(&vol).expect("tag");
    fs::create_dir_all(vol.join("a/b")).unwrap();
    fs::write(vol.join("a/b/f"), "tenant").unwrap();
    let check = volume_id_check(id.clone());
    let expected = Expected {
        dev: Some(dev_of(&vol)),
        check: Some(&check),
    };
    let report =
        wipe_filesystem(&vol, &expected, &FsOptions::default(), &Control::default()).unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(fs::read_dir(&vol).unwrap().count(), 0);
    assert_eq!(
        host.volume_id(&vol).unwrap(),
        localpv::host::VolumeTag::Present(id),
        "the id stays on the root for the next PV"
    );
}

#[test]
fn a_writer_that_keeps_writing_during_the_wipe_leaves_it_incomplete() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _m = tmpfs(&vol);
    fs::write(vol.join("before.txt"), "tenant").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, vol) = (stop.clone(), vol.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::write(vol.join(format!("late-{n}")), "late");
                n += 1;
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let expected = Expected {
        dev: Some(dev_of(&vol)),
        check: None,
    };
    let report =
        wipe_filesystem(&vol, &expected, &FsOptions::default(), &Control::default()).unwrap();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(!report.is_complete(), "{report:?}");
    assert!(
        report.left.iter().all(|p| p.starts_with(&vol)) && !report.left.is_empty(),
        "{:?}",
        report.left
    );
    let again =
        wipe_filesystem(&vol, &expected, &FsOptions::default(), &Control::default()).unwrap();
    assert!(again.is_complete(), "once the writer stopped: {again:?}");
    assert_eq!(fs::read_dir(&vol).unwrap().count(), 0);
}

#[test]
fn lost_and_found_alone_does_not_make_a_wipe_incomplete() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _m = tmpfs(&vol);
    let expected = Expected {
        dev: Some(dev_of(&vol)),
        check: None,
    };
    // e2fsck (re)creates lost+found at any time: one made right after the walk is not tenant data.
    let opts = FsOptions {
        settle_ms: 300,
        ..FsOptions::default()
    };
    let maker = {
        let vol = vol.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            fs::create_dir(vol.join("lost+found")).unwrap();
        })
    };
    let report = wipe_filesystem(&vol, &expected, &opts, &Control::default()).unwrap();
    maker.join().unwrap();
    assert!(report.left.is_empty(), "{report:?}");
}
