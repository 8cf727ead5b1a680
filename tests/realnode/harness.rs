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
