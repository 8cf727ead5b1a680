//! Child processes of the harness: each component runs in its own process group with its output captured to a
//! log file, and a watchdog shell that outlives a crashed test process reaps whatever the test left behind.
//!
//! Normal teardown is `Drop` (which also runs while a failing test unwinds). The watchdog covers the cases where
//! `Drop` never runs: the test binary aborted, was killed, or timed out.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::disks::Watchdog;

/// A running component (etcd, kube-apiserver, a localpv agent...).
pub struct Component {
    pub name: String,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Component {
    /// Starts `program args` in a new process group, stdout and stderr appended to `log_dir/<name>.log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log_dir: &Path,
        reaper: &Reaper,
    ) -> Component {
        Self::spawn_with_env(name, program, args, &[], log_dir, reaper)
    }

    pub fn spawn_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log_dir: &Path,
        reaper: &Reaper,
    ) -> Component {
        fs::create_dir_all(log_dir).expect("log dir can be created");
        let log = log_dir.join(format!("{name}.log"));
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file opens");
        let err = out.try_clone().expect("log file handle clones");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {name} ({}): {e}", program.display()));
        reaper.track_group(child.id());
        Component {
            name: name.to_string(),
            log,
            child: Some(child),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends `sig` to the whole process group.
    pub fn signal(&self, sig: Signal) {
        if let Some(c) = &self.child {
            let _ = killpg(Pid::from_raw(c.id() as i32), sig);
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for the exit. Returns how long the exit took after SIGTERM,
    /// or `None` when SIGKILL was needed.
    pub fn stop(&mut self, grace: Duration) -> Option<Duration> {
        let mut child = self.child.take()?;
        let pgid = Pid::from_raw(child.id() as i32);
        let _ = killpg(pgid, Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < grace {
            if let Ok(Some(_)) = child.try_wait() {
                let _ = killpg(pgid, Signal::SIGKILL);
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = child.wait();
        None
    }

    /// SIGKILL the group right away (a crash, as far as the component can tell).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// The last `n` lines of the log.
    pub fn tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// Runs `cmd` to its end and returns its stdout; panics naming `what`, with its exit status and stderr, when it
/// cannot be run or fails.
pub fn stdout_of(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("missing prerequisite: cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The last `n` lines of a text file ("" when it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    let Ok(f) = File::open(path) else {
        return String::new();
    };
    let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A watchdog process that kills tracked process groups, unmounts tracked mounts, detaches tracked loop devices
/// and removes the work dir once the test process is gone, whatever way it went.
pub struct Reaper {
    state: PathBuf,
    // Dropped after `Drop::drop` ran: killed once the orderly teardown is done.
    watchdog: OnExit,
}

impl Reaper {
    pub fn start(work_dir: &Path) -> Reaper {
        let state = work_dir.with_extension("reap");
        fs::create_dir_all(&state).expect("reaper state dir can be created");
        for f in ["groups", "mounts", "loops"] {
            File::create(state.join(f)).expect("reaper state file can be created");
        }
        let script = format!(
            r#"for g in $(cat groups); do kill -9 -$g 2>/dev/null; done
tac mounts | while read -r m; do umount -l "$m" 2>/dev/null; done
for l in $(cat loops); do losetup -d "$l" 2>/dev/null; done
rm -rf "{work}" "{state}""#,
            work = work_dir.display(),
            state = state.display(),
        );
        Reaper {
            watchdog: OnExit::start(&script, &state),
            state,
        }
    }

    pub fn track_group(&self, pgid: u32) {
        self.append("groups", &pgid.to_string());
    }

    fn append(&self, file: &str, line: &str) {
        let mut f = OpenOptions::new()
            .append(true)
            .open(self.state.join(file))
            .expect("reaper state opens");
        writeln!(f, "{line}").expect("reaper state is writable");
    }
}

impl Watchdog for Reaper {
    fn track_mount(&self, path: &Path) {
        self.append("mounts", &path.display().to_string());
    }

    fn track_loop(&self, device: &str) {
        self.append("loops", device);
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // Orderly teardown already happened; the watchdog has nothing left to do.
        let _ = fs::remove_dir_all(&self.state);
    }
}

/// A shell in a process group of its own that waits until this test process is gone, however it went, then runs
/// `script` in `dir`. Killed when dropped: the test undid its work itself.
pub struct OnExit(Child);

impl OnExit {
    pub fn start(script: &str, dir: &Path) -> OnExit {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done\n{script}",
            pid = std::process::id()
        );
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("sh is available for the watchdog");
        OnExit(child)
    }
}

impl Drop for OnExit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
