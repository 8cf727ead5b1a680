//! The disk ledger on the node's own disk: which disks served a claim and must be wiped before they are exposed
//! again. It lives outside the PVs on purpose: deleting a PV by hand must not make the agent forget a dirty disk.
//!
//! The same file records the UIDs of the PVs this agent created or adopted ([`Owners`]): the proof of ownership
//! that labels cannot give. A file from a release without owners reads as "owners never recorded".
//!
//! Written atomically (temp file, fsync, rename, fsync of the directory) after every change; read once at start.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::{DiskLedger, Owners};

/// The file's content: `{"disks": {..}, "owners": {"recorded": true, "pvs": {<uid>: {"name", "path"}}}}`.
#[derive(Debug, Default, Deserialize)]
struct Stored {
    #[serde(flatten)]
    ledger: DiskLedger,
    #[serde(default)]
    owners: Owners,
}

/// [`Stored`] as written: borrowed, so a write copies nothing before it serialises (it runs before every PV create).
#[derive(Serialize)]
struct StoredRef<'a> {
    #[serde(flatten)]
    ledger: &'a DiskLedger,
    owners: &'a Owners,
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("failed to read disk ledger {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse disk ledger {}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to write disk ledger {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub struct LedgerFile {
    path: PathBuf,
}

impl LedgerFile {
    pub fn new(state_dir: &Path) -> LedgerFile {
        LedgerFile {
            path: state_dir.join("disk-ledger.json"),
        }
    }

    /// The stored ledger; empty when the file does not exist yet. A corrupt file is an error, never "empty":
    /// forgetting dirty disks would let a tenant's data reach the next one.
    pub fn load(&self) -> Result<(DiskLedger, Owners), LedgerError> {
        match fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(|s: Stored| (s.ledger, s.owners))
                .map_err(|source| LedgerError::Parse {
                    path: self.path.clone(),
                    source,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Default::default()),
            Err(source) => Err(LedgerError::Read {
                path: self.path.clone(),
                source,
            }),
        }
    }

    pub fn store(&self, ledger: &DiskLedger, owners: &Owners) -> Result<(), LedgerError> {
        let err = |source| LedgerError::Write {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(err)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let stored = StoredRef { ledger, owners };
        // NB: compact, not pretty: the write precedes every PV create, and at 1,000 disks indentation is a fifth of
        // the bytes serialised and synced (`jq . disk-ledger.json` shows it indented).
        let bytes = serde_json::to_vec(&stored).expect("a ledger always serialises");
        let mut f = fs::File::create(&tmp).map_err(err)?;
        f.write_all(&bytes).map_err(err)?;
        f.sync_all().map_err(err)?;
        fs::rename(&tmp, &self.path).map_err(err)?;
        // NB: the rename itself is durable only once the directory is synced.
        if let Some(dir) = self.path.parent() {
            fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DiskState, OwnedPv};

    #[test]
    fn a_stored_ledger_reads_back_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = LedgerFile::new(&dir.path().join("state"));
        assert_eq!(file.load().unwrap(), Default::default());
        let mut ledger = DiskLedger::default();
        ledger.set("fs:1234", DiskState::Dirty);
        ledger.set("fs:5678", DiskState::Published);
        let mut owners = Owners {
            recorded: true,
            ..Owners::default()
        };
        let owned = OwnedPv {
            name: "pv-1".into(),
            path: "/mnt/disks/vol1".into(),
        };
        owners.pvs.insert("uid-1".into(), owned);
        file.store(&ledger, &owners).unwrap();
        assert_eq!(file.load().unwrap(), (ledger, owners));
    }

    #[test]
    fn a_ledger_from_before_owners_were_recorded_reads_as_owners_never_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let file = LedgerFile::new(dir.path());
        fs::write(
            dir.path().join("disk-ledger.json"),
            br#"{"disks": {"fs-uuid:u1": "Dirty"}}"#,
        )
        .unwrap();
        let (ledger, owners) = file.load().unwrap();
        assert_eq!(ledger.get("fs-uuid:u1"), Some(DiskState::Dirty));
        assert!(!owners.recorded);
        assert!(owners.pvs.is_empty());
    }

    #[test]
    fn a_pretty_ledger_from_an_earlier_release_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let file = LedgerFile::new(dir.path());
        let mut ledger = DiskLedger::default();
        ledger.set("fs:1234", DiskState::Dirty);
        let owners = Owners {
            recorded: true,
            ..Owners::default()
        };
        let pretty = serde_json::to_vec_pretty(&StoredRef {
            ledger: &ledger,
            owners: &owners,
        })
        .unwrap();
        fs::write(dir.path().join("disk-ledger.json"), pretty).unwrap();
        assert_eq!(file.load().unwrap(), (ledger, owners));
    }

    #[test]
    fn a_corrupt_ledger_is_an_error_not_an_empty_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let file = LedgerFile::new(dir.path());
        fs::write(dir.path().join("disk-ledger.json"), b"{not json").unwrap();
        assert!(matches!(file.load(), Err(LedgerError::Parse { .. })));
    }
}
