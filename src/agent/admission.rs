//! The chart's admission policy as the agent reads it, to narrow its PV watch while the policy is in force: reads,
//! the record in the state directory, and the steps of the pure `plan::narrow` applied to the PV index.
//!
//! Costs nothing in steady state: none at start (a restart resumes from its record), two while wide once its index
//! is complete and again after [`narrow::SETTLE`], and two before a pass that would wipe or publish while narrow (a
//! pass with nothing to write asks none).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::{Api, Client};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::plan::narrow::{
    self, BindingSeen, Fingerprint, InForce, Mode, Narrowing, PolicySeen, WatchMove,
};

/// The record of the fingerprint the agent narrowed on, in its state directory: a restart under the same policy
/// narrows at once, without listing every PV of the cluster.
const RECORD: &str = "pv-watch.json";

#[derive(Serialize, Deserialize)]
struct NarrowRecord {
    policy: String,
    fingerprint: Fingerprint,
}

/// The agent's discovery directories, as its PVs spell their paths, and whether a class has `selector` terms.
pub struct Dirs {
    pub paths: Vec<PathBuf>,
    pub shared: bool,
}

pub struct Guard {
    client: Client,
    name: String,
    record: PathBuf,
    narrowing: Narrowing,
    /// While wide: when to look at the policy again (`None`: at the first pass with a complete index).
    next_look: Option<Instant>,
}

impl Guard {
    /// The guard for the policy named `name`, starting narrow on the record in `state_dir` (nothing is read: the
    /// first pass that would wipe or publish verifies it, see `Narrowing::resume`), wide without one.
    pub fn start(client: Client, name: String, state_dir: &Path) -> Guard {
        let record = state_dir.join(RECORD);
        let recorded = read_record(&record, &name);
        if recorded.is_some() {
            info!(policy = %name, "resuming the narrow PV watch recorded under the admission policy: only this node's PVs; the policy is read again before any wipe or new PV");
        }
        Guard {
            client,
            name,
            record,
            narrowing: Narrowing::resume(recorded.as_ref()),
            next_look: None,
        }
    }

    pub fn is_narrow(&self) -> bool {
        self.narrowing.is_narrow()
    }

    /// While wide, with the index complete: looks at the policy when due; `blockers` counts the index's PVs a
    /// narrow watch would miss (`narrow::blocks`). True when the watch may narrow now.
    pub async fn look_if_due(&mut self, dirs: &Dirs, blockers: impl FnOnce() -> usize) -> bool {
        if self.is_narrow() || self.next_look.is_some_and(|at| Instant::now() < at) {
            return false;
        }
        let seen = self.read(dirs).await;
        let step = self.narrowing.look(seen, Instant::now(), blockers());
        self.next_look = None;
        match step {
            WatchMove::CheckIn(after) => {
                self.next_look = Some(Instant::now() + after);
                false
            }
            WatchMove::Narrow(fingerprint) => {
                self.remember(&fingerprint);
                info!(policy = %self.name, "admission policy in force: watching only this node's PVs");
                true
            }
            WatchMove::Widen(_) | WatchMove::Keep => false,
        }
    }

    /// While narrow, before a wipe or a new PV: `Ok` when the policy the agent narrowed on is still in force;
    /// otherwise the watch goes wide (the record is forgotten) and the reason is returned.
    pub async fn verify(&mut self, dirs: &Dirs) -> Result<(), String> {
        let seen = self.read(dirs).await;
        match self.narrowing.verify(seen) {
            WatchMove::Keep => Ok(()),
            WatchMove::Widen(why) => {
                warn!(%why, "admission policy not in force as narrowed on: watching every PV again");
                self.forget();
                self.next_look = None;
                Err(why)
            }
            other => Err(format!("unexpected step {other:?}")),
        }
    }

    /// How long until the guard wants to look again (wide only).
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        match self.narrowing.mode() {
            Mode::Wide => self.next_look.map(|at| at.saturating_duration_since(now)),
            Mode::Narrow(_) => None,
        }
    }

    async fn read(&self, dirs: &Dirs) -> InForce {
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(self.client.clone());
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(self.client.clone());
        let (policy, binding) =
            tokio::join!(policies.get_opt(&self.name), bindings.get_opt(&self.name));
        let (policy, binding) = match (policy, binding) {
            (Ok(p), Ok(b)) => (p, b),
            (Err(e), _) | (_, Err(e)) => {
                return InForce::No(format!(
                    "admission policy {}: failed to read it: {e}",
                    self.name
                ));
            }
        };
        let policy = policy.as_ref().map(PolicySeen::of);
        let binding = binding.as_ref().map(BindingSeen::of);
        narrow::in_force(
            &self.name,
            policy.as_ref(),
            binding.as_ref(),
            &dirs.paths,
            dirs.shared,
        )
    }

    fn remember(&self, fingerprint: &Fingerprint) {
        let record = NarrowRecord {
            policy: self.name.clone(),
            fingerprint: fingerprint.clone(),
        };
        let bytes = serde_json::to_vec(&record).expect("a record always serialises");
        let dir = self.record.parent().unwrap_or(Path::new("."));
        let written = super::ledger::replace(&self.record, &bytes)
            .and_then(|()| super::ledger::sync_dir(dir));
        if let Err(error) = written {
            // NB: only costs a list of every PV at the next start.
            warn!(%error, path = %self.record.display(), "failed to record the admission policy narrowed on");
        }
    }

    fn forget(&self) {
        match std::fs::remove_file(&self.record) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                warn!(%error, path = %self.record.display(), "failed to remove the admission policy record")
            }
        }
    }
}

fn read_record(path: &Path, name: &str) -> Option<Fingerprint> {
    let bytes = std::fs::read(path).ok()?;
    match serde_json::from_slice::<NarrowRecord>(&bytes) {
        Ok(r) if r.policy == name => Some(r.fingerprint),
        Ok(_) => None,
        Err(error) => {
            warn!(%error, path = %path.display(), "unreadable admission policy record; watching every PV");
            None
        }
    }
}
