//! Filesystem wipe on real tmpfs and ext4 mounts.

use std::fs;
use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use localpv::contract::DevId;
use localpv::wipe::{Control, Expected, FsOptions, FsWipeError, SkipOp, Skipped, wipe_filesystem};
use nix::errno::Errno;
use nix::sys::stat::{Mode, SFlag, makedev, mknod};
use nix::unistd::mkfifo;
use rstest::rstest;

use crate::disks::{Mount, Unwatched, mkfs};
use crate::fixtures::{
    Immutable, deep_tree, dev_of, listing, loop_disk, many_files, snapshot, tmpfs,
};

fn paths(root: &Path, rel: &[&str]) -> Vec<PathBuf> {
    rel.iter().map(|r| root.join(r)).collect()
}

fn expect_dev(root: &Path) -> Expected<'static> {
    Expected {
        dev: Some(dev_of(root)),
        check: None,
    }
}

/// Files, links and special files a tenant could leave, pointing outside the volume wherever it can.
fn tenant_tree(vol: &Path, outside: &Path) {
    fs::create_dir_all(vol.join("data/x/y")).unwrap();
    fs::write(vol.join("data/x/y/z"), "tenant").unwrap();
    symlink(outside.join("secret"), vol.join("data/abs-file-link")).unwrap();
    symlink(outside, vol.join("data/abs-dir-link")).unwrap();
    symlink("../../outside", vol.join("data/rel-dir-link")).unwrap();
    symlink(outside.join("dir/sub"), vol.join("link-at-root")).unwrap();
    fs::hard_link(outside.join("linked"), vol.join("data/hardlink")).unwrap();
    mkfifo(&vol.join("data/fifo"), Mode::from_bits_truncate(0o644)).unwrap();
    drop(UnixListener::bind(vol.join("data/sock")).unwrap());
    mknod(
        &vol.join("data/null"),
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o600),
        makedev(1, 3),
    )
    .unwrap();
    mknod(
        &vol.join("data/blk"),
        SFlag::S_IFBLK,
        Mode::from_bits_truncate(0o600),
        makedev(7, 250),
    )
    .unwrap();
    fs::create_dir_all(vol.join("deep")).unwrap();
    deep_tree(&vol.join("deep"), 2000);
    many_files(&vol.join("many"), 10, 100);
}

fn outside_tree(outside: &Path) {
    fs::create_dir_all(outside.join("dir/sub")).unwrap();
    fs::create_dir_all(outside.join("bound")).unwrap();
    fs::write(outside.join("secret"), "keep me").unwrap();
    fs::write(outside.join("dir/sub/file"), "keep me too").unwrap();
    fs::write(outside.join("linked"), "hard linked").unwrap();
    fs::write(outside.join("bound/host-file"), "host data").unwrap();
    fs::write(outside.join("bound-file"), "bound file").unwrap();
}

#[rstest]
#[case::one_worker(1)]
#[case::two_workers(2)]
fn a_tenant_tree_is_removed_and_nothing_outside_the_volume_changes(#[case] concurrency: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("fs");
    let _fs = tmpfs(&top);
    let (outside, vol) = (top.join("outside"), top.join("vol"));
    outside_tree(&outside);
    tenant_tree(&vol, &outside);
    let _bind = Mount::bind(
        &outside.join("bound"),
        &vol.join("data/mnt/bound"),
        &Unwatched,
    );
    let _file_bind = Mount::bind(
        &outside.join("bound-file"),
        &vol.join("data/filemount"),
        &Unwatched,
    );
    let _nested = tmpfs(&vol.join("nested/tmp"));
    fs::write(vol.join("nested/tmp/inner"), "nested data").unwrap();
    let before = snapshot(&outside);

    let ctl = Control::default();
    let opts = FsOptions {
        concurrency,
        ..FsOptions::default()
    };
    let report = wipe_filesystem(&vol, &expect_dev(&vol), &opts, &ctl).unwrap();

    assert_eq!(
        report.nested_mounts,
        paths(&vol, &["data/filemount", "data/mnt/bound", "nested/tmp"])
    );
    assert_eq!(report.skipped, vec![]);
    assert_eq!(
        listing(&vol),
        paths(
            &PathBuf::new(),
            &[
                "data",
                "data/filemount",
                "data/mnt",
                "data/mnt/bound",
                "data/mnt/bound/host-file",
                "nested",
                "nested/tmp"
            ]
        )
    );
    assert_eq!(
        snapshot(&outside),
        before,
        "something outside the volume changed"
    );
    assert_eq!(
        fs::read_to_string(vol.join("nested/tmp/inner")).unwrap(),
        "nested data"
    );
    assert_eq!(
        fs::read_to_string(vol.join("data/filemount")).unwrap(),
        "bound file"
    );
    assert_eq!(ctl.progress.entries(), report.removed_entries);
    // Freed bytes come from the filesystem's usage: at least the 1001 files whose data lived only in the volume.
    assert!(report.removed_bytes >= 1001, "{report:?}");
}

#[rstest]
#[case::one_worker(1)]
#[case::three_workers(3)]
fn one_hundred_thousand_small_files_are_all_removed(#[case] concurrency: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _fs = tmpfs(&vol);
    many_files(&vol, 100, 1000);
    let ctl = Control::default();
    let opts = FsOptions {
        concurrency,
        ..FsOptions::default()
    };
    let report = wipe_filesystem(&vol, &expect_dev(&vol), &opts, &ctl).unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.removed_entries, 100_100);
    assert!(report.removed_bytes >= 100_000, "{report:?}");
    assert_eq!(ctl.progress.entries(), 100_100);
    assert_eq!(ctl.progress.bytes(), report.removed_bytes);
    assert_eq!(listing(&vol), Vec::<PathBuf>::new());
}

#[test]
fn an_immutable_file_on_ext4_is_reported_and_kept_while_the_rest_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = loop_disk(tmp.path(), 64 << 20);
    mkfs("ext4", &disk.device, None);
    let vol = tmp.path().join("vol");
    let _mount = Mount::device(&disk.device, &vol, &Unwatched);
    fs::create_dir_all(vol.join("keep/dir")).unwrap();
    fs::write(vol.join("keep/dir/frozen"), "immutable").unwrap();
    fs::write(vol.join("keep/dir/loose"), "removable").unwrap();
    fs::write(vol.join("top"), "removable").unwrap();
    let _immutable = Immutable::set(&vol.join("keep/dir/frozen"));

    let report = wipe_filesystem(
        &vol,
        &expect_dev(&vol),
        &FsOptions::default(),
        &Control::default(),
    )
    .unwrap();

    let frozen = Skipped {
        path: vol.join("keep/dir/frozen"),
        op: SkipOp::Unlink,
        errno: Errno::EPERM,
    };
    assert_eq!(report.skipped, vec![frozen]);
    assert!(!report.is_complete());
    assert_eq!(
        listing(&vol),
        paths(&PathBuf::new(), &["keep", "keep/dir", "keep/dir/frozen"])
    );
    assert_eq!(
        report.skipped[0].to_string(),
        format!(
            "{}: failed to unlink: EPERM: Operation not permitted",
            vol.join("keep/dir/frozen").display()
        )
    );
}

#[rstest]
#[case::another_device(Some(DevId { major: 4095, minor: 4095 }), false)]
#[case::the_check_says_no(None, true)]
fn a_root_that_is_not_the_expected_filesystem_is_refused(
    #[case] dev: Option<DevId>,
    #[case] refuse_check: bool,
) {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _fs = tmpfs(&vol);
    fs::write(vol.join("file"), "stays").unwrap();
    let check = |_: std::os::fd::BorrowedFd<'_>| Err::<(), _>("filesystem UUID differs".to_owned());
    let expected = Expected {
        dev,
        check: refuse_check.then_some(&check as _),
    };
    let err =
        wipe_filesystem(&vol, &expected, &FsOptions::default(), &Control::default()).unwrap_err();
    assert!(
        matches!(
            err,
            FsWipeError::WrongFilesystem { .. } | FsWipeError::RootCheck { .. }
        ),
        "{err}"
    );
    assert_eq!(fs::read_to_string(vol.join("file")).unwrap(), "stays");
}

#[test]
fn a_symlinked_root_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    let _fs = tmpfs(&real);
    fs::write(real.join("file"), "stays").unwrap();
    symlink(&real, tmp.path().join("link")).unwrap();
    let err = wipe_filesystem(
        &tmp.path().join("link"),
        &Expected::default(),
        &FsOptions::default(),
        &Control::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FsWipeError::OpenRoot {
                source: Errno::ELOOP | Errno::ENOTDIR,
                ..
            }
        ),
        "{err}"
    );
    assert!(real.join("file").exists());
}

#[test]
fn a_cancelled_wipe_stops_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _fs = tmpfs(&vol);
    many_files(&vol, 2, 10);
    let ctl = Control::default();
    ctl.cancel();
    let err = wipe_filesystem(&vol, &expect_dev(&vol), &FsOptions::default(), &ctl).unwrap_err();
    assert!(matches!(err, FsWipeError::Cancelled { .. }), "{err}");
    assert_eq!(listing(&vol).len(), 22);
}

#[test]
fn the_filesystem_command_runs_after_the_wipe_with_the_root_in_its_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _fs = tmpfs(&vol);
    many_files(&vol, 1, 3);
    let record = tmp.path().join("record");
    let script = format!(
        "ls -A \"$LOCAL_PV_FSPATH\" | wc -l > {0}; echo \"$LOCAL_PV_FSPATH\" >> {0}; echo done",
        record.display()
    );
    let opts = FsOptions {
        command: Some(vec!["sh".into(), "-c".into(), script]),
        ..FsOptions::default()
    };
    let report = wipe_filesystem(&vol, &expect_dev(&vol), &opts, &Control::default()).unwrap();
    assert_eq!(
        fs::read_to_string(&record).unwrap(),
        format!("0\n{}\n", vol.display())
    );
    assert_eq!(report.command.unwrap().stdout_tail, "done");
}

#[test]
fn a_failing_filesystem_command_fails_the_wipe_with_its_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let _fs = tmpfs(&vol);
    let opts = FsOptions {
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo boom >&2; exit 3".into(),
        ]),
        ..FsOptions::default()
    };
    let err = wipe_filesystem(&vol, &expect_dev(&vol), &opts, &Control::default()).unwrap_err();
    assert!(err.to_string().ends_with("boom"), "{err}");
    assert!(err.to_string().contains("exit status: 3"), "{err}");
}

/// True when every component of `path` below `vol` is a real directory. The racer plays a tenant, whose symlinks
/// resolve inside its container; on the host its own renames must not follow them (only it creates symlinks, and the
/// wipe only removes, so this check cannot go stale).
fn real_dir(vol: &Path, path: &Path) -> bool {
    let mut at = vol.to_path_buf();
    path.strip_prefix(vol).unwrap().components().all(|c| {
        at.push(c);
        fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
    })
}

/// Moves directories around inside the volume and swaps directories for symlinks to outside, until told to stop.
fn racer(vol: &Path, outside: &Path, stop: &AtomicBool) -> u64 {
    let mut moves = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let t = vol.join(format!("t{:03}", i % 200));
        let other = vol.join(format!("t{:03}", (i * 7 + 3) % 200));
        // Up and sideways: a subtree the wipe may be inside moves to the root or into another subtree.
        if real_dir(vol, &t) {
            moves += fs::rename(t.join("a"), vol.join(format!("moved{i}"))).is_ok() as u64;
        }
        if real_dir(vol, &other) {
            moves += fs::rename(
                vol.join(format!("moved{}", i.saturating_sub(1))),
                other.join("a2"),
            )
            .is_ok() as u64;
        }
        // A directory the wipe listed becomes a symlink to outside.
        if real_dir(vol, &other.join("a"))
            && fs::rename(other.join("a/b"), vol.join(format!("gone{i}"))).is_ok()
        {
            moves += symlink(outside, other.join("a/b")).is_ok() as u64;
        }
        if real_dir(vol, &t) && fs::rename(&t, vol.join(format!("swapped{i}"))).is_ok() {
            moves += symlink(outside.join("victim"), &t).is_ok() as u64;
        }
        let fresh = vol.join(format!("fresh{i}"));
        if fs::create_dir(&fresh).is_ok() {
            let _ = symlink(outside, fresh.join("escape"));
        }
        i += 1;
    }
    moves
}

#[test]
fn renames_racing_the_wipe_never_reach_outside_the_volume() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("fs");
    let _fs = tmpfs(&top);
    let (outside, vol) = (top.join("outside"), top.join("vol"));
    many_files(&outside.join("victim"), 5, 40);
    for t in 0..200 {
        many_files(&vol.join(format!("t{t:03}/a/b/c")), 2, 20);
    }
    let before = snapshot(&outside);

    let stop = AtomicBool::new(false);
    let opts = FsOptions {
        concurrency: 2,
        ..FsOptions::default()
    };
    let moves = thread::scope(|s| {
        let racing = s.spawn(|| racer(&vol, &outside, &stop));
        for _ in 0..3 {
            wipe_filesystem(&vol, &expect_dev(&vol), &opts, &Control::default()).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        racing.join().unwrap()
    });
    assert!(moves > 0, "the racer never got a rename in");
    assert_eq!(
        snapshot(&outside),
        before,
        "something outside the volume changed"
    );

    let report = wipe_filesystem(&vol, &expect_dev(&vol), &opts, &Control::default()).unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(listing(&vol), Vec::<PathBuf>::new());
    assert_eq!(snapshot(&outside), before);
}
