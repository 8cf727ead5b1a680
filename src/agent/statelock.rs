//! One agent per state directory (issue 39, point 0b). Two agents on one ledger lose it: the second starts a new
//! generation and deletes the first's journal, the first writes its own view back on shutdown, and records of
//! either land where nothing points. A DaemonSet update with `maxSurge` runs exactly that.
//!
//! The agent takes an exclusive `flock` on `<state-dir>/agent.lock` before it reads the ledger and holds it for the
//! life of the process (the kernel drops it when the process dies, also on SIGKILL). A second agent waits for it,
//! saying so on `/readyz` and in its log every minute, and reads the ledger only once it holds the lock. The file
//! holds the holder's pid, host name and start time, for the message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch as tokio_watch;
use tracing::{info, warn};

use super::http;

/// The lock file's name inside the state directory.
pub const FILE: &str = "agent.lock";

/// How often a waiting agent tries again.
const RETRY: Duration = Duration::from_millis(500);

/// Held for the life of the agent: dropping it releases the lock.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("failed to create state directory {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to open lock file {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to lock {path}")]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Takes the lock now if it is free: `Ok(Err(who))`, naming who holds it, when another process does.
pub fn try_lock(state_dir: &Path) -> Result<Result<StateLock, String>, LockError> {
    std::fs::create_dir_all(state_dir).map_err(|source| LockError::CreateDir {
        path: state_dir.to_path_buf(),
        source,
    })?;
    let path = state_dir.join(FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| LockError::Open {
            path: path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(Err(holder(&mut file))),
        Err(TryLockError::Error(source)) => return Err(LockError::Lock { path, source }),
    }
    // NB: who holds it is only for messages; a failure to write it does not give the lock up.
    let me = format!(
        "pid {} on {}, since {}",
        std::process::id(),
        std::env::var("HOSTNAME").unwrap_or_else(|_| "an unnamed host".into()),
        k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
    );
    let _ = file
        .set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(me.as_bytes()));
    Ok(Ok(StateLock { _file: file }))
}

fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.take(256).read_to_string(&mut text);
    match text.trim() {
        "" => "another process".to_string(),
        who => format!("another localpv node agent ({who})"),
    }
}

/// Waits until this process holds the lock, saying why on `/readyz` meanwhile; `None` when shutdown came first.
pub async fn acquire(
    state_dir: &Path,
    http: &http::HttpState,
    mut shutdown: tokio_watch::Receiver<bool>,
) -> Result<Option<StateLock>, LockError> {
    let mut said: Option<tokio::time::Instant> = None;
    loop {
        match try_lock(state_dir)? {
            Ok(lock) => {
                if said.is_some() {
                    info!(state_dir = %state_dir.display(), "took the state directory lock");
                }
                http.set_waiting(None);
                return Ok(Some(lock));
            }
            Err(who) => {
                let message = format!(
                    "waiting for the state directory lock {}: held by {who}. Two agents on one state directory \
                     would lose the disk ledger; this one starts once the other stops (a DaemonSet update must not \
                     surge: updateStrategy.rollingUpdate.maxSurge 0)",
                    state_dir.join(FILE).display()
                );
                if said.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    warn!(state_dir = %state_dir.display(), "{message}");
                    said = Some(tokio::time::Instant::now());
                }
                http.set_waiting(Some(message));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY) => {}
            _ = shutdown.wait_for(|s| *s) => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_state_dir_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = try_lock(dir.path()).expect("no error").expect("free");
        let who = try_lock(dir.path()).expect("no error").expect_err("held");
        assert!(
            who.contains(&format!("pid {}", std::process::id())),
            "{who}"
        );
        drop(first);
        let again = try_lock(dir.path()).expect("no error");
        assert!(again.is_ok(), "free again once dropped");
    }

    #[test]
    fn a_state_dir_that_cannot_be_created_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("a-file");
        std::fs::write(&file, "x").expect("write");
        let err = try_lock(&file.join("state")).expect_err("not a directory");
        assert!(err.to_string().contains("a-file/state"), "{err}");
    }
}
