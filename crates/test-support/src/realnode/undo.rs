//! The undo log of a real-node run: every change the run makes to the host (a bridge, an iptables chain, a mount,
//! a cgroup, a process tree) is recorded as the shell command that reverts it, before or right after it is made.
//! `Drop` runs the log backwards; a watchdog shell runs the same log if the test process dies first, so one code
//! path reverts both ways and nothing outlives the run.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::disks::Watchdog;
use crate::proc::OnExit;

pub struct Undo {
    log: PathBuf,
    // Dropped after `Drop::drop` ran the log: killed once the orderly undo is done.
    watchdog: OnExit,
}

impl Undo {
    /// Starts the watchdog for a run whose state lives in `state_dir` (outside the run dir it removes).
    pub fn start(state_dir: &Path) -> Undo {
        sweep_stale(state_dir);
        fs::create_dir_all(state_dir).expect("undo state dir can be created");
        // NB: the owner is written before the log: a state dir with a log and no owner is never swept.
        fs::write(
            state_dir.join(OWNER),
            owner_of(std::process::id()).unwrap_or_default(),
        )
        .expect("undo owner file can be written");
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

/// The file naming the process that owns a state dir: its pid and start time (a reused pid is another process).
const OWNER: &str = "owner";

pub fn owner_of(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // NB: the command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
    let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
    Some(format!("{pid} {start}"))
}

/// Reverts the runs whose test process and watchdog were both killed (a SIGKILL of the whole session): the state
/// dirs beside `state_dir` with the same prefix whose owner is gone and that no watchdog works in. Never touches a
/// live run's state, nor one without an owner file.
pub fn sweep_stale(state_dir: &Path) {
    let (Some(parent), Some(name)) = (state_dir.parent(), state_dir.file_name()) else {
        return;
    };
    let name = name.to_string_lossy();
    let prefix = name.split('-').take(2).collect::<Vec<_>>().join("-");
    let watched: Vec<PathBuf> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| fs::read_link(e.path().join("cwd")).ok())
        .collect();
    for dir in fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
    {
        let file = dir
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !file.starts_with(&prefix) || !file.ends_with(".undo") || dir == state_dir {
            continue;
        }
        let Ok(owner) = fs::read_to_string(dir.join(OWNER)) else {
            continue;
        };
        let pid = owner.split_whitespace().next().and_then(|p| p.parse().ok());
        let alive = pid
            .and_then(owner_of)
            .is_some_and(|now| now == owner.trim());
        if alive || owner.trim().is_empty() || watched.contains(&dir) {
            continue;
        }
        eprintln!(
            "reverting a stale real-node run left by a killed test process: {}",
            dir.display()
        );
        let log = dir.join("undo.sh");
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "tac {log} | sh >/dev/null 2>&1",
                log = log.display()
            ))
            .status();
        let _ = fs::remove_dir_all(&dir);
    }
}

/// The file loop device `device` shows (`losetup -O BACK-FILE`), empty when it shows none.
fn back_file(device: &str) -> String {
    Command::new("losetup")
        .args(["-n", "-O", "BACK-FILE", device])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Watchdog for Undo {
    fn track_mount(&self, path: &Path) {
        self.push(&format!("umount -l {}", path.display()));
    }

    fn track_loop(&self, device: &str) {
        // NB: only while the number still shows the file it showed when tracked. A guard that detached the device
        // before teardown (its `Drop`, a test's own `losetup -d`) frees the number for another test running beside
        // this one, whose device must not be detached: CI caught a device of another test's going to size 0.
        let backing = back_file(device);
        // Whatever attached a loop device onto ours (the kubelet does for block volumes) goes first.
        self.push(&format!(
            "if [ -n '{backing}' ] && [ \"$(losetup -n -O BACK-FILE {device})\" = '{backing}' ]; then \
             for l in $(losetup -n -O NAME -j {device}); do losetup -d $l; done; losetup -d {device}; fi"
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
