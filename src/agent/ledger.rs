//! The disk ledger on the node's own disk: which disks served a claim and must be wiped before they are exposed
//! again. It lives outside the PVs on purpose: deleting a PV by hand must not make the agent forget a dirty disk.
//!
//! The same file records the UIDs of the PVs this agent created or adopted ([`Owners`]): the proof of ownership
//! that labels cannot give. A file from a release without owners reads as "owners never recorded".
//!
//! Every change is durable before anything acts on it. A change touches a few keys of maps that hold every disk
//! and PV of the node, so while the agent runs it appends only what changed to a journal (one line, one
//! `fdatasync`) instead of rewriting thousands of entries before each PV create:
//!
//! ```text
//!  running:  disk-ledger.json          {"disks": "<why an older release cannot read this>", "journal": G}
//!            disk-ledger.G.base.json   the whole ledger when generation G began
//!            disk-ledger.G.journal     one line per change since, in order
//!  stopped:  disk-ledger.json          the whole ledger, as every release writes and reads it
//! ```
//!
//! Each file is replaced atomically (temp file, fsync, rename, fsync of the directory), and the marker moves to a
//! new generation only once that generation's base and journal are durable: a crash at any instant leaves a
//! marker naming a complete generation, or a whole file. A journal is compacted into a new generation when it
//! outgrows its base; a line torn by a crash (no newline yet) was never acknowledged and is ignored. A clean
//! shutdown writes the whole file back, so a downgrade reads everything; after a crash an older release fails to
//! parse the marker and refuses to start, rather than forget a dirty disk.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::{DiskLedger, DiskState, OwnedPv, Owners};

const FILE: &str = "disk-ledger.json";
/// What the marker's `disks` says to whoever reads it as a whole ledger.
const MARKER_TEXT: &str = "this node's disk ledger is journaled by a running localpv agent (disk-ledger.<journal>.base.json and \
     disk-ledger.<journal>.journal); a release before the journal cannot read it and must not guess";
/// A journal no larger than this is never compacted (bytes).
const MIN_COMPACT: u64 = 256 << 10;

/// The whole ledger: `{"disks": {..}, "owners": {"recorded": true, "pvs": {<uid>: {"name", "path"}}}}`.
#[derive(Debug, Default, Deserialize)]
struct LedgerJson {
    #[serde(flatten)]
    ledger: DiskLedger,
    #[serde(default)]
    owners: Owners,
}

/// [`LedgerJson`] as written: borrowed, so a write copies nothing before it serialises.
#[derive(Serialize)]
struct StoredRef<'a> {
    #[serde(flatten)]
    ledger: &'a DiskLedger,
    owners: &'a Owners,
}

/// What `disk-ledger.json` holds while a journal is in use.
#[derive(Serialize)]
struct Marker<'a> {
    disks: &'a str,
    journal: u64,
}

/// The one field that tells a marker from a whole ledger.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    journal: Option<u64>,
}

/// One journal line: the new value of each key a change touched (`null`: removed).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Line {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    disks: BTreeMap<String, Option<DiskState>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pvs: BTreeMap<String, Option<OwnedPv>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    creating: BTreeMap<String, Option<OwnedPv>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recorded: Option<bool>,
}

impl Line {
    fn apply(self, ledger: &mut DiskLedger, owners: &mut Owners) {
        fn put<V>(map: &mut BTreeMap<String, V>, changes: BTreeMap<String, Option<V>>) {
            for (key, value) in changes {
                match value {
                    Some(value) => map.insert(key, value),
                    None => map.remove(&key),
                };
            }
        }
        put(&mut ledger.disks, self.disks);
        put(&mut owners.pvs, self.pvs);
        put(&mut owners.creating, self.creating);
        if let Some(recorded) = self.recorded {
            owners.recorded = recorded;
        }
    }
}

/// The keys one change touched; the journal line carries their values as they are after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub disks: BTreeSet<String>,
    pub pvs: BTreeSet<String>,
    pub creating: BTreeSet<String>,
    pub recorded: bool,
}

impl Delta {
    fn line(&self, ledger: &DiskLedger, owners: &Owners) -> Line {
        Line {
            disks: self
                .disks
                .iter()
                .map(|k| (k.clone(), ledger.get(k)))
                .collect(),
            pvs: self
                .pvs
                .iter()
                .map(|k| (k.clone(), owners.pvs.get(k).cloned()))
                .collect(),
            creating: self
                .creating
                .iter()
                .map(|k| (k.clone(), owners.creating.get(k).cloned()))
                .collect(),
            recorded: self.recorded.then_some(owners.recorded),
        }
    }
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
    #[error("disk ledger {} names journal generation {generation}, whose {part} is missing", path.display())]
    Missing {
        path: PathBuf,
        generation: u64,
        /// `base` or `journal`.
        part: &'static str,
    },
    #[error("failed to write disk ledger {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The journal of the current generation, open for appends.
struct Journal {
    file: fs::File,
    len: u64,
    /// The base's size: the journal is compacted once it grows past this (or `MIN_COMPACT`).
    base_len: u64,
}

pub struct LedgerFile {
    dir: PathBuf,
    path: PathBuf,
    /// `None` until the first change of this run (and after a failed append): the next change starts a generation.
    journal: Option<Journal>,
    /// The last generation seen on disk or started: a new one is always higher.
    generation: u64,
    /// The file on disk is a marker (a journal is in use, or one was left by a crash).
    marked: bool,
    /// Journals up to this size are never compacted (tests lower it).
    min_compact: u64,
}

impl LedgerFile {
    pub fn new(state_dir: &Path) -> LedgerFile {
        LedgerFile {
            dir: state_dir.to_path_buf(),
            path: state_dir.join(FILE),
            journal: None,
            generation: 0,
            marked: false,
            min_compact: MIN_COMPACT,
        }
    }

    /// Whether a ledger file is there at all (before `load`): none on a node that has a PV of this agent means the
    /// ledger was lost (`plan::lost`).
    pub fn exists(&self) -> bool {
        fs::symlink_metadata(&self.path).is_ok()
    }

    fn base_path(&self, generation: u64) -> PathBuf {
        self.dir.join(format!("disk-ledger.{generation}.base.json"))
    }

    fn journal_path(&self, generation: u64) -> PathBuf {
        self.dir.join(format!("disk-ledger.{generation}.journal"))
    }

    fn write_err(&self) -> impl Fn(std::io::Error) -> LedgerError + '_ {
        |source| LedgerError::Write {
            path: self.path.clone(),
            source,
        }
    }

    /// The stored ledger; empty when the file does not exist yet. A corrupt file (or a marker whose generation is
    /// incomplete) is an error, never "empty": forgetting dirty disks would let a tenant's data reach the next one.
    pub fn load(&mut self) -> Result<(DiskLedger, Owners), LedgerError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
            Err(source) => {
                return Err(LedgerError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let parse = |path: &Path, bytes: &[u8]| {
            serde_json::from_slice::<LedgerJson>(bytes)
                .map(|s| (s.ledger, s.owners))
                .map_err(|source| LedgerError::Parse {
                    path: path.to_path_buf(),
                    source,
                })
        };
        // NB: a whole file is parsed once; only what is not one (a marker's `disks` is a string) is asked for its
        // generation.
        let whole = parse(&self.path, &bytes);
        let Err(error) = whole else {
            return whole;
        };
        let Some(generation) = serde_json::from_slice::<Head>(&bytes)
            .ok()
            .and_then(|h| h.journal)
        else {
            return Err(error);
        };
        self.generation = generation;
        self.marked = true;
        let base = self.base_path(generation);
        let (mut ledger, mut owners) = match fs::read(&base) {
            Ok(bytes) => parse(&base, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(self.missing(generation, "base"));
            }
            Err(source) => return Err(LedgerError::Read { path: base, source }),
        };
        let journal = self.journal_path(generation);
        let text = match fs::read(&journal) {
            Ok(text) => text,
            // NB: a generation's journal is durable before its marker names it: missing, it was deleted or lost, and
            // with it changes such as a disk marked dirty. Never read as empty.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(self.missing(generation, "journal"));
            }
            Err(source) => {
                return Err(LedgerError::Read {
                    path: journal,
                    source,
                });
            }
        };
        // NB: only whole lines count; a tail without its newline is an append a crash cut short, never acknowledged.
        let whole = text
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(&text[..0], |end| &text[..=end]);
        for line in whole.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let line: Line = serde_json::from_slice(line).map_err(|source| LedgerError::Parse {
                path: journal.clone(),
                source,
            })?;
            line.apply(&mut ledger, &mut owners);
        }
        Ok((ledger, owners))
    }

    fn missing(&self, generation: u64, part: &'static str) -> LedgerError {
        LedgerError::Missing {
            path: self.path.clone(),
            generation,
            part,
        }
    }

    /// Makes one change durable: `ledger` and `owners` as they are now, `delta` the keys the change touched.
    pub fn store(
        &mut self,
        ledger: &DiskLedger,
        owners: &Owners,
        delta: &Delta,
    ) -> Result<(), LedgerError> {
        let Some(journal) = self.journal.as_mut() else {
            return self.compact(ledger, owners);
        };
        if journal.len > journal.base_len.max(self.min_compact) {
            return self.compact(ledger, owners);
        }
        let mut bytes =
            serde_json::to_vec(&delta.line(ledger, owners)).expect("a line always serialises");
        bytes.push(b'\n');
        let appended = journal
            .file
            .write_all(&bytes)
            .and_then(|()| journal.file.sync_data());
        match appended {
            Ok(()) => {
                journal.len += bytes.len() as u64;
                Ok(())
            }
            Err(source) => {
                // NB: the line may be partly written; the next change starts a new generation rather than append
                // after it. Cutting it off is best effort: a whole line that survives records a change not acted on,
                // which only ever keeps a disk out of use longer.
                let _ = journal.file.set_len(journal.len);
                self.journal = None;
                Err(LedgerError::Write {
                    path: self.journal_path(self.generation),
                    source,
                })
            }
        }
    }

    /// Starts a new generation holding `ledger` and `owners` whole, and moves the marker to it.
    fn compact(&mut self, ledger: &DiskLedger, owners: &Owners) -> Result<(), LedgerError> {
        fs::create_dir_all(&self.dir).map_err(self.write_err())?;
        let generation = self.generation + 1;
        let base =
            serde_json::to_vec(&StoredRef { ledger, owners }).expect("a ledger always serialises");
        replace(&self.base_path(generation), &base).map_err(self.write_err())?;
        let file = fs::File::create(self.journal_path(generation))
            .and_then(|f| f.sync_all().map(|()| f))
            .map_err(self.write_err())?;
        sync_dir(&self.dir).map_err(self.write_err())?;
        let marker = serde_json::to_vec(&Marker {
            disks: MARKER_TEXT,
            journal: generation,
        })
        .expect("a marker always serialises");
        replace(&self.path, &marker).map_err(self.write_err())?;
        sync_dir(&self.dir).map_err(self.write_err())?;
        let previous = self.generation;
        self.generation = generation;
        self.marked = true;
        self.journal = Some(Journal {
            file,
            len: 0,
            base_len: base.len() as u64,
        });
        // NB: best effort; a leftover of an older generation is never read (the marker names the current one).
        let _ = fs::remove_file(self.base_path(previous));
        let _ = fs::remove_file(self.journal_path(previous));
        Ok(())
    }

    /// Writes the whole ledger back as one file (every release reads it) and removes the journal: on a clean
    /// shutdown, so that a downgrade loses nothing. Nothing to do when the file on disk is already whole.
    pub fn close(&mut self, ledger: &DiskLedger, owners: &Owners) -> Result<(), LedgerError> {
        if !self.marked {
            return Ok(());
        }
        let whole =
            serde_json::to_vec(&StoredRef { ledger, owners }).expect("a ledger always serialises");
        replace(&self.path, &whole).map_err(self.write_err())?;
        sync_dir(&self.dir).map_err(self.write_err())?;
        self.marked = false;
        self.journal = None;
        let _ = fs::remove_file(self.base_path(self.generation));
        let _ = fs::remove_file(self.journal_path(self.generation));
        Ok(())
    }
}

/// Replaces `path` with `bytes` atomically: a temp file beside it, synced, renamed over it. The caller syncs the
/// directory.
pub(super) fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)
}

/// Makes the directory's entries (a rename, a new file) durable.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
