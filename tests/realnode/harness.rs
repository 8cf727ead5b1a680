//! The harness's own promise: a run killed with its watchdog (SIGKILL of the whole session) is reverted by the
//! next run, and nothing else is.

use std::fs;
use std::path::Path;

use crate::support::realnode::undo::{owner_of, sweep_stale};

fn state(parent: &Path, name: &str, owner: Option<&str>) -> std::path::PathBuf {
    let dir = parent.join(format!("localpv-rn-{name}.undo"));
    fs::create_dir_all(&dir).unwrap();
    if let Some(owner) = owner {
        fs::write(dir.join("owner"), owner).unwrap();
    }
    let mark = parent.join(format!("reverted-{name}"));
    fs::write(dir.join("undo.sh"), format!("touch {}\n", mark.display())).unwrap();
    dir
}

#[test]
fn a_killed_run_is_reverted_by_the_next_and_live_or_unowned_runs_are_not() {
    let parent = tempfile::tempdir().unwrap();
    let p = parent.path();
    let me = owner_of(std::process::id()).expect("own /proc/self/stat reads");
    // A pid above the kernel's limit never runs; a live pid with another start time is a reused pid.
    let dead = state(p, "dead", Some("4194305 1"));
    let reused = state(p, "reused", Some(&format!("{} 1", std::process::id())));
    let live = state(p, "live", Some(&me));
    let legacy = state(p, "legacy", None);
    let other = p.join("localpv-other-x.undo");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("owner"), "4194305 1").unwrap();

    sweep_stale(&p.join("localpv-rn-new.undo"));

    for (name, dir, reverted) in [
        ("dead", &dead, true),
        ("reused", &reused, true),
        ("live", &live, false),
        ("legacy", &legacy, false),
    ] {
        assert_eq!(
            p.join(format!("reverted-{name}")).exists(),
            reverted,
            "{name}: undo log run"
        );
        assert_eq!(dir.exists(), !reverted, "{name}: state dir kept");
    }
    assert!(other.exists(), "another prefix is never touched");
}

/// A loop device detached before teardown (its guard's `Drop`, a test's own `losetup -d`) frees its number, and a
/// test running beside this one may attach its own device there: the undo log must not detach that one (CI saw a
/// real-node test's device go to size 0 under it).
#[test]
fn the_undo_log_never_detaches_a_loop_number_another_device_has_taken_since() {
    use crate::support::disks::Watchdog;
    use crate::support::disks::{LoopDevice, Unwatched, run};
    use crate::support::realnode::undo::Undo;

    let dir = tempfile::tempdir().unwrap();
    let undo = Undo::start(&dir.path().join("localpv-rn-looptest.undo"));
    let ours = LoopDevice::new(&dir.path().join("ours.img"), 1, None, &Unwatched);
    undo.track_loop(&ours.device);
    let number = ours.device.clone();
    drop(ours);
    let theirs_file = dir.path().join("theirs.img");
    fs::File::create(&theirs_file)
        .and_then(|f| f.set_len(1 << 20))
        .unwrap();
    run("losetup", &[&number, &theirs_file.display().to_string()]);
    undo.run();
    let shown = run("losetup", &["-n", "-O", "BACK-FILE", &number]);
    run("losetup", &["-d", &number]);
    assert_eq!(
        shown.trim(),
        theirs_file.display().to_string(),
        "the other test's device is still attached at {number}"
    );
}
