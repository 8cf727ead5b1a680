//! Runs an operator-supplied wipe command (an argv, never a shell line) with the target in one environment
//! variable, captures its output and turns a non-zero exit into an error carrying the tail of stderr.

use std::ffi::OsStr;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::Duration;

use super::Control;

/// How much of each output stream is kept for reports and events.
const TAIL_BYTES: usize = 4096;
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("failed to run the wipe command: the argv is empty")]
    Empty,
    #[error("failed to start wipe command {program:?}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to wait for wipe command {program:?}")]
    Wait {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("wipe command {program:?} failed ({status}): {stderr_tail}")]
    Failed {
        program: String,
        status: String,
        stderr_tail: String,
    },
    #[error("wipe command {program:?} was cancelled and killed")]
    Cancelled { program: String },
}

/// What a successful command printed (the last [`TAIL_BYTES`] of each stream).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandOutput {
    pub stdout_tail: String,
    pub stderr_tail: String,
}

/// Run `argv` with `env_name=env_value` added to the inherited environment and stdin closed. Blocks until it
/// exits; a cancel on `ctl` kills it.
pub fn run(
    argv: &[String],
    env_name: &str,
    env_value: &OsStr,
    ctl: &Control,
) -> Result<CommandOutput, CommandError> {
    let (program, args) = argv.split_first().ok_or(CommandError::Empty)?;
    let mut child = Command::new(program)
        .args(args)
        .env(env_name, env_value)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| CommandError::Spawn {
            program: program.clone(),
            source,
        })?;
    let stdout = child
        .stdout
        .take()
        .map(|s| thread::spawn(move || tail_of(s)));
    let stderr = child
        .stderr
        .take()
        .map(|s| thread::spawn(move || tail_of(s)));
    let status = wait(&mut child, ctl).map_err(|source| CommandError::Wait {
        program: program.clone(),
        source,
    });
    // NB: join the readers even on failure so no thread outlives the call holding a pipe.
    let output = CommandOutput {
        stdout_tail: join(stdout),
        stderr_tail: join(stderr),
    };
    match status? {
        Some(status) if status.success() => Ok(output),
        Some(status) => Err(CommandError::Failed {
            program: program.clone(),
            status: status.to_string(),
            stderr_tail: output.stderr_tail,
        }),
        None => Err(CommandError::Cancelled {
            program: program.clone(),
        }),
    }
}

/// `None` when cancelled (the child has then been killed and reaped).
fn wait(child: &mut Child, ctl: &Control) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if ctl.is_cancelled() {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        thread::sleep(POLL);
    }
}

/// Drain the stream (so the child never blocks on a full pipe) and keep its last bytes.
fn tail_of(mut stream: impl Read) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * TAIL_BYTES {
                    kept.drain(..kept.len() - TAIL_BYTES);
                }
            }
        }
    }
    let start = kept.len().saturating_sub(TAIL_BYTES);
    String::from_utf8_lossy(&kept[start..])
        .trim_end()
        .to_owned()
}

fn join(reader: Option<thread::JoinHandle<String>>) -> String {
    reader.and_then(|r| r.join().ok()).unwrap_or_default()
}
