//! The undo log of a real-node run: every change the run makes to the host (a bridge, an iptables chain, a mount,
//! a cgroup, a process tree) is recorded as the shell command that reverts it, before or right after it is made.
//! `Drop` runs the log backwards; a watchdog shell runs the same log if the test process dies first, so one code
//! path reverts both ways and nothing outlives the run.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::disks::Watchdog;
use crate::support::proc::OnExit;

pub struct Undo {
    log: PathBuf,
    // Dropped after `Drop::drop` ran the log: killed once the orderly undo is done.
    watchdog: OnExit,
}

impl Undo {
    /// Starts the watchdog for a run whose state lives in `state_dir` (outside the run dir it removes).
    pub fn start(state_dir: &Path) -> Undo {
        fs::create_dir_all(state_dir).expect("undo state dir can be created");
        let log = state_dir.join("undo.sh");
        File::create(&log).expect("undo log can be created");
        let script = format!(
            "tac {log} > {log}.rev; sh {log}.rev >/dev/null 2>&1\nrm -rf {state}",
            log = log.display(),
            state = state_dir.display(),
        );
        Undo {
            watchdog: OnExit::start(&script, state_dir),
            log,
        }
    }

    /// Records a shell command that reverts one change. Commands run last-recorded first, each on its own line.
    pub fn push(&self, command: &str) {
        assert!(!command.contains('\n'), "one undo command per line");
        let mut f = OpenOptions::new()
            .append(true)
            .open(&self.log)
            .expect("undo log opens");
        writeln!(f, "{command}").expect("undo log is writable");
    }

    /// Runs the log backwards now and empties it.
    pub fn run(&self) {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        for line in text.lines().rev() {
            let _ = Command::new("sh")
                .arg("-c")
                .arg(line)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = fs::write(&self.log, "");
    }
}

impl Watchdog for Undo {
    fn track_mount(&self, path: &Path) {
        self.push(&format!("umount -l {}", path.display()));
    }

    fn track_loop(&self, device: &str) {
        // Whatever attached a loop device onto ours (the kubelet does for block volumes) goes first.
        self.push(&format!(
            "for l in $(losetup -n -O NAME -j {device}); do losetup -d $l; done; losetup -d {device}"
        ));
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        self.run();
        if let Some(dir) = self.log.parent() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}
