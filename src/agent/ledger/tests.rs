use super::*;
use crate::plan::{DiskState, OwnedPv};

fn owned(name: &str, path: &str) -> OwnedPv {
    OwnedPv {
        name: name.into(),
        path: path.into(),
    }
}

/// A ledger file and the state it should hold, changed one key at a time as the agent does.
struct Subject {
    file: LedgerFile,
    ledger: DiskLedger,
    owners: Owners,
}

impl Subject {
    fn new(dir: &Path) -> Subject {
        let mut file = LedgerFile::new(dir);
        let (ledger, owners) = file.load().unwrap();
        Subject {
            file,
            ledger,
            owners,
        }
    }

    fn disk(&mut self, key: &str, state: Option<DiskState>) {
        match state {
            Some(state) => self.ledger.set(key, state),
            None => {
                self.ledger.disks.remove(key);
            }
        }
        let delta = Delta {
            disks: [key.to_string()].into(),
            ..Delta::default()
        };
        self.file.store(&self.ledger, &self.owners, &delta).unwrap();
    }

    fn pv(&mut self, uid: &str, pv: Option<OwnedPv>) {
        let creating = pv.as_ref().map(|p| p.name.clone());
        match pv {
            Some(pv) => self.owners.pvs.insert(uid.to_string(), pv),
            None => self.owners.pvs.remove(uid),
        };
        let mut delta = Delta {
            pvs: [uid.to_string()].into(),
            recorded: !self.owners.recorded,
            ..Delta::default()
        };
        self.owners.recorded = true;
        if let Some(name) = creating {
            self.owners.creating.remove(&name);
            delta.creating.insert(name);
        }
        self.file.store(&self.ledger, &self.owners, &delta).unwrap();
    }

    fn creating(&mut self, pv: OwnedPv) {
        let delta = Delta {
            creating: [pv.name.clone()].into(),
            ..Delta::default()
        };
        self.owners.creating.insert(pv.name.clone(), pv);
        self.file.store(&self.ledger, &self.owners, &delta).unwrap();
    }

    fn reads_back(&self, dir: &Path) {
        assert_eq!(
            LedgerFile::new(dir).load().unwrap(),
            (self.ledger.clone(), self.owners.clone())
        );
    }
}

/// What a release before the journal parses `disk-ledger.json` as.
#[derive(Deserialize)]
#[allow(dead_code)]
struct OldRelease {
    disks: BTreeMap<String, DiskState>,
    #[serde(default)]
    owners: Owners,
}

fn old_release_reads(dir: &Path) -> Result<OldRelease, serde_json::Error> {
    serde_json::from_slice(&fs::read(dir.join(FILE)).unwrap())
}

fn files(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A ledger in generation 1: fs:1 Published in its base, fs:2 Dirty one line of its journal.
fn journaled() -> (tempfile::TempDir, Subject) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Subject::new(dir.path());
    s.disk("fs:1", Some(DiskState::Published));
    s.disk("fs:2", Some(DiskState::Dirty));
    (dir, s)
}

#[test]
fn a_stored_ledger_reads_back_and_a_missing_one_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut s = Subject::new(&state);
    assert_eq!(s.ledger, DiskLedger::default());
    s.disk("fs:1234", Some(DiskState::Dirty));
    s.disk("fs:5678", Some(DiskState::Published));
    s.creating(owned("pv-1", "/mnt/disks/vol1"));
    s.reads_back(&state);
    s.pv("uid-1", Some(owned("pv-1", "/mnt/disks/vol1")));
    s.disk("fs:1234", None);
    s.reads_back(&state);
    assert!(s.owners.recorded && s.owners.creating.is_empty());
}

#[test]
fn changes_are_appended_not_rewritten_and_a_clean_close_leaves_one_whole_file_any_release_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Subject::new(dir.path());
    for i in 0..50 {
        s.disk(&format!("fs:{i}"), Some(DiskState::Published));
    }
    // One generation: its base holds the first change, the journal the other 49, one line each.
    assert_eq!(
        files(dir.path()),
        ["disk-ledger.1.base.json", "disk-ledger.1.journal", FILE]
            .map(String::from)
            .into()
    );
    let journal = fs::read_to_string(dir.path().join("disk-ledger.1.journal")).unwrap();
    assert_eq!(journal.lines().count(), 49);
    assert_eq!(
        journal.lines().last(),
        Some(r#"{"disks":{"fs:49":"Published"}}"#)
    );
    s.reads_back(dir.path());
    s.file.close(&s.ledger, &s.owners).unwrap();
    assert_eq!(files(dir.path()), [FILE.to_string()].into());
    let old = old_release_reads(dir.path()).expect("an older release reads the closed file");
    assert_eq!(old.disks, s.ledger.disks);
    s.reads_back(dir.path());
}

#[test]
fn while_a_journal_is_in_use_an_older_release_refuses_the_file_instead_of_reading_a_stale_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Subject::new(dir.path());
    s.disk("fs:1", Some(DiskState::Published));
    s.disk("fs:1", Some(DiskState::Dirty));
    // A crash now: the base says Published, only the journal says Dirty. An older release must not start on it.
    assert!(old_release_reads(dir.path()).is_err());
    s.reads_back(dir.path());
}

#[test]
fn a_line_torn_by_a_crash_is_ignored_and_the_next_change_starts_a_new_generation() {
    let (dir, s) = journaled();
    let journal = dir.path().join("disk-ledger.1.journal");
    let mut f = fs::OpenOptions::new().append(true).open(&journal).unwrap();
    f.write_all(br#"{"disks":{"fs:3":"Pub"#).unwrap();
    drop(f);
    s.reads_back(dir.path());
    let mut again = Subject::new(dir.path());
    again.disk("fs:4", Some(DiskState::Dirty));
    assert!(!dir.path().join("disk-ledger.1.journal").exists());
    assert!(dir.path().join("disk-ledger.2.base.json").exists());
    again.reads_back(dir.path());
    assert_eq!(again.ledger.get("fs:3"), None);
    assert_eq!(again.ledger.get("fs:2"), Some(DiskState::Dirty));
}

#[test]
fn a_damaged_whole_line_a_deleted_journal_or_a_missing_base_is_an_error_not_a_guess() {
    let (dir, _s) = journaled();
    let journal = dir.path().join("disk-ledger.1.journal");
    let good = fs::read(&journal).unwrap();
    fs::write(&journal, b"{not json\n").unwrap();
    assert!(matches!(
        LedgerFile::new(dir.path()).load(),
        Err(LedgerError::Parse { .. })
    ));
    fs::write(&journal, good).unwrap();
    // A careless operator deletes the journal (it holds the disk marked dirty): refused, never read as empty.
    fs::rename(&journal, dir.path().join("saved")).unwrap();
    assert!(matches!(
        LedgerFile::new(dir.path()).load(),
        Err(LedgerError::Missing {
            generation: 1,
            part: "journal",
            ..
        })
    ));
    fs::rename(dir.path().join("saved"), &journal).unwrap();
    fs::remove_file(dir.path().join("disk-ledger.1.base.json")).unwrap();
    assert!(matches!(
        LedgerFile::new(dir.path()).load(),
        Err(LedgerError::Missing {
            generation: 1,
            part: "base",
            ..
        })
    ));
}

#[test]
fn a_journal_grown_past_its_base_is_compacted_into_a_new_generation() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Subject::new(dir.path());
    s.file.min_compact = 0;
    for i in 0..40 {
        s.disk(&format!("fs:{}", i % 7), Some(DiskState::Published));
        s.disk(&format!("fs:{}", i % 7), Some(DiskState::Dirty));
        s.reads_back(dir.path());
    }
    assert!(s.file.generation > 3, "generation {}", s.file.generation);
    // Only the current generation's files remain.
    assert_eq!(files(dir.path()).len(), 3);
}

/// A crash between any two steps of a compaction: the new generation's files exist, the marker still names the
/// old one. The old generation is read whole; the next change compacts over the leftovers.
#[test]
fn a_compaction_cut_short_leaves_the_previous_generation_in_force() {
    let (dir, s) = journaled();
    // The leftovers of a compaction to generation 2 that never moved the marker (a different state in them).
    fs::write(
        dir.path().join("disk-ledger.2.base.json"),
        br#"{"disks":{"fs:9":"Dirty"}}"#,
    )
    .unwrap();
    fs::write(
        dir.path().join("disk-ledger.2.journal"),
        b"{\"disks\":{\"fs:8\"",
    )
    .unwrap();
    s.reads_back(dir.path());
    let mut again = Subject::new(dir.path());
    again.disk("fs:3", Some(DiskState::Published));
    again.reads_back(dir.path());
    assert_eq!(again.ledger.get("fs:9"), None);
}

/// Random changes, each read back after a crash cut the journal at a random byte: what is read is exactly the
/// state after some change at most one behind the last acknowledged one (the torn one), never a mix.
#[test]
fn a_crash_at_any_byte_of_the_journal_reads_back_a_state_the_agent_acknowledged() {
    let mut rng = crate::plan::fixtures::Rng::seeded(7);
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Subject::new(dir.path());
        s.file.min_compact = 2_000;
        let mut states = vec![(s.ledger.clone(), s.owners.clone())];
        for _ in 0..60 {
            let key = format!("k{}", rng.below(12));
            match rng.below(4) {
                0 => s.disk(&key, None),
                1 => s.disk(&key, Some(DiskState::Dirty)),
                2 => s.pv(
                    &key,
                    Some(owned(&format!("pv-{key}"), &format!("/d/{key}"))),
                ),
                _ => s.pv(&key, None),
            }
            states.push((s.ledger.clone(), s.owners.clone()));
        }
        let journal = s.file.journal_path(s.file.generation);
        let bytes = fs::read(&journal).unwrap();
        let cut = rng.below(bytes.len() + 1);
        fs::write(&journal, &bytes[..cut]).unwrap();
        let read = LedgerFile::new(dir.path()).load().unwrap();
        let whole_lines = bytes[..cut].iter().filter(|&&b| b == b'\n').count();
        let all_lines = bytes.iter().filter(|&&b| b == b'\n').count();
        let expected = &states[states.len() - 1 - (all_lines - whole_lines)];
        assert_eq!(&read, expected, "cut at {cut} of {}", bytes.len());
    }
}

#[test]
fn a_ledger_from_before_owners_were_recorded_reads_as_owners_never_recorded() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(FILE),
        br#"{"disks": {"fs-uuid:u1": "Dirty"}}"#,
    )
    .unwrap();
    let (ledger, owners) = LedgerFile::new(dir.path()).load().unwrap();
    assert_eq!(ledger.get("fs-uuid:u1"), Some(DiskState::Dirty));
    assert!(!owners.recorded);
    assert!(owners.pvs.is_empty());
}

#[test]
fn a_pretty_ledger_from_an_earlier_release_reads_the_same_and_is_journaled_from_the_next_change() {
    let dir = tempfile::tempdir().unwrap();
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
    fs::write(dir.path().join(FILE), pretty).unwrap();
    let mut s = Subject::new(dir.path());
    assert_eq!((&s.ledger, &s.owners), (&ledger, &owners));
    s.disk("fs:5678", Some(DiskState::Published));
    s.reads_back(dir.path());
    assert_eq!(s.ledger.get("fs:1234"), Some(DiskState::Dirty));
}

#[test]
fn a_corrupt_ledger_is_an_error_not_an_empty_ledger() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(FILE), b"{not json").unwrap();
    assert!(matches!(
        LedgerFile::new(dir.path()).load(),
        Err(LedgerError::Parse { .. })
    ));
}
