//! Whether the agent may watch only its own labelled PVs instead of every PV of the cluster (issue 34).
//!
//! ```text
//!  policy + binding, as read ──> in_force (the chart's rules, failing closed, covering every discovery dir)
//!                                    │ Yes(fingerprint) / No(why)
//!  every PV the wide index kept ──> blocks (a PV the narrow watch would miss that reaches a discovery dir)
//!                                    v
//!  Narrowing: Wide ──(same fingerprint for SETTLE, no blocker)──> Narrow(fingerprint)
//!             Narrow ──(before a wipe or a new PV, fingerprint differs or not in force)──> Wide (list every PV)
//! ```
//!
//! A PV that is not ours can make a disk of ours unsafe to wipe or publish, and only a watch of every PV sees one
//! made by hand. The chart's ValidatingAdmissionPolicy refuses, to anyone but a node's agent, a local or hostPath
//! PV at a discovery directory, any PV carrying our identity annotations, and any change of our node label. While
//! it is in force, every PV that could reach this node's disks is either labelled for this node (the narrow watch
//! shows it) or was there before the policy: the wide watch saw it, and narrowing waits until none is left.
//!
//! "In force" is judged from the objects: the policy and binding as this release renders them (fail closed, deny,
//! every PV create and update, the rules' version, every discovery directory of the agent). Their UIDs and
//! generations make the fingerprint: a policy deleted and made again, or edited, has another one, so PVs made
//! while it was away are caught by listing every PV again. The agent checks the fingerprint before each wipe and
//! new PV (never in steady state), so a narrow watch costs no request per pass.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::contract::{ANN_POLICY_RULES, KEY_PREFIX, NODE_LABEL};
use crate::plan::owners::{normalise, overlaps, raw_path};

/// The version of the policy's rules this agent relies on (`contract::ANN_POLICY_RULES` on the policy). Version 2
/// added the identity annotations and the node label; a policy of version 1 does not keep a narrow watch safe.
pub const RULES_VERSION: &str = "2";

/// How long one fingerprint must be seen before the agent narrows: a policy reaches admission through each API
/// server's informer, a moment after it is stored; a PV created in that moment is in the wide watch by then.
pub const SETTLE: Duration = Duration::from_secs(10);

/// How often a wide agent looks at the policy again while it is not in force or something blocks narrowing.
pub const CHECK_EVERY: Duration = Duration::from_secs(300);

/// The policy as read: only what `in_force` judges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicySeen {
    pub uid: String,
    pub generation: i64,
    /// `spec.failurePolicy` (the API server defaults it to `Fail`).
    pub failure_policy: Option<String>,
    /// Some resource rule matches CREATE and UPDATE of `persistentvolumes` in the core group.
    pub matches_pv_writes: bool,
    /// The value of `contract::ANN_POLICY_RULES`.
    pub rules: Option<String>,
    /// The `dirs` variable's expression (a JSON list of `[directory key, selector terms]`).
    pub dirs: Option<String>,
}

/// The binding as read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BindingSeen {
    pub uid: String,
    pub generation: i64,
    pub policy_name: String,
    pub validation_actions: Vec<String>,
    /// A `paramRef` or `matchResources` that could leave some PVs out.
    pub narrowed: bool,
}

impl PolicySeen {
    /// What `in_force` judges of a policy as the API server returned it.
    pub fn of(p: &ValidatingAdmissionPolicy) -> PolicySeen {
        let (uid, generation) = ids(&p.metadata);
        let spec = p.spec.as_ref();
        let dirs = spec
            .and_then(|s| s.variables.as_ref())
            .and_then(|vs| vs.iter().find(|v| v.name == "dirs"))
            .map(|v| v.expression.clone());
        PolicySeen {
            uid,
            generation,
            failure_policy: spec.and_then(|s| s.failure_policy.clone()),
            matches_pv_writes: spec
                .and_then(|s| s.match_constraints.as_ref())
                .is_some_and(matches_pv_writes),
            rules: p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_POLICY_RULES))
                .cloned(),
            dirs,
        }
    }
}

impl BindingSeen {
    /// What `in_force` judges of a binding as the API server returned it.
    pub fn of(b: &ValidatingAdmissionPolicyBinding) -> BindingSeen {
        let (uid, generation) = ids(&b.metadata);
        let spec = &b.spec;
        BindingSeen {
            uid,
            generation,
            policy_name: spec.policy_name.clone(),
            validation_actions: spec.validation_actions.clone(),
            narrowed: spec.param_ref.is_some()
                || spec.match_resources.as_ref().is_some_and(leaves_some_out),
        }
    }
}

fn ids(meta: &ObjectMeta) -> (String, i64) {
    (
        meta.uid.clone().unwrap_or_default(),
        meta.generation.unwrap_or_default(),
    )
}

/// Some rule matches CREATE and UPDATE of every PersistentVolume (core group, `*` counts), with no resource names,
/// and nothing is excluded or selected away.
fn matches_pv_writes(m: &MatchResources) -> bool {
    let any = |list: &Option<Vec<String>>, want: &str| {
        list.as_ref()
            .is_some_and(|l| l.iter().any(|x| x == want || x == "*"))
    };
    let rule = m.resource_rules.as_ref().is_some_and(|rules| {
        rules.iter().any(|r| {
            any(&r.api_groups, "")
                && any(&r.resources, "persistentvolumes")
                && any(&r.operations, "CREATE")
                && any(&r.operations, "UPDATE")
                && r.resource_names.as_ref().is_none_or(Vec::is_empty)
        })
    });
    rule && !excluding(m)
}

/// Exclusions or an object selector: some PVs the rules match could still be left out.
fn excluding(m: &MatchResources) -> bool {
    m.exclude_resource_rules
        .as_ref()
        .is_some_and(|r| !r.is_empty())
        || m.object_selector
            .as_ref()
            .is_some_and(|s| s != &Default::default())
}

/// A binding's `matchResources` that narrows what its policy matches: any rules of its own, exclusions or an
/// object selector.
fn leaves_some_out(m: &MatchResources) -> bool {
    m.resource_rules.as_ref().is_some_and(|r| !r.is_empty()) || excluding(m)
}

/// What identifies one state of the policy and its binding: any change (an edit, a delete and create) changes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub policy_uid: String,
    pub policy_generation: i64,
    pub binding_uid: String,
    pub binding_generation: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum InForce {
    Yes(Fingerprint),
    /// Why not, for a log line and an Event.
    No(String),
}

/// Whether `policy` and `binding` (read by name `name`) refuse every PV that could reach one of `dirs` (the
/// agent's discovery directories, as PV paths spell them) unless this node's agent made it. `shared`: a class of
/// this agent has `selector` terms.
///
/// A class with `selector` terms (storage reachable from several nodes) makes PVs that other nodes can mount: a PV
/// that node-1's agent made, labelled for node-1, reaches the same storage at the same path on node-2, and only a
/// watch of every PV shows it to node-2's agent. Such a class, in the policy's directories or in the agent's own
/// configuration, keeps the watch wide.
pub fn in_force(
    name: &str,
    policy: Option<&PolicySeen>,
    binding: Option<&BindingSeen>,
    dirs: &[PathBuf],
    shared: bool,
) -> InForce {
    let no = |why: String| InForce::No(format!("admission policy {name}: {why}"));
    let Some(p) = policy else {
        return no("the ValidatingAdmissionPolicy does not exist".into());
    };
    let Some(b) = binding else {
        return no("its ValidatingAdmissionPolicyBinding does not exist".into());
    };
    if p.failure_policy.as_deref().unwrap_or("Fail") != "Fail" {
        return no("failurePolicy is not Fail".into());
    }
    if !p.matches_pv_writes {
        return no("it does not match every create and update of a PersistentVolume".into());
    }
    if p.rules.as_deref() != Some(RULES_VERSION) {
        let had = p.rules.as_deref().unwrap_or("none");
        return no(format!(
            "its rules are version {had}, this agent needs {RULES_VERSION} (upgrade the chart)"
        ));
    }
    if b.policy_name != name {
        return no(format!("the binding names policy {}", b.policy_name));
    }
    if !b.validation_actions.iter().any(|a| a == "Deny") {
        return no("the binding does not Deny".into());
    }
    if b.narrowed {
        return no("the binding has a paramRef or matchResources".into());
    }
    let Some(Ok(listed)) = p
        .dirs
        .as_deref()
        .map(serde_json::from_str::<Vec<Vec<String>>>)
    else {
        return no("its dirs variable is missing or not a list".into());
    };
    if shared
        || listed
            .iter()
            .any(|d| d.get(1).is_some_and(|t| !t.is_empty()))
    {
        return no(
            "a class has selector terms: other nodes' PVs can reach this node's disks, which only a watch of \
             every PV shows"
                .into(),
        );
    }
    let keys: Vec<String> = listed
        .into_iter()
        .filter_map(|d| d.into_iter().next())
        // NB: the chart spells every key with a final `/`; any other is not a directory key of ours.
        .filter(|k| k.ends_with('/'))
        .collect();
    for dir in dirs {
        let key = dir_key(dir);
        if !keys.iter().any(|k| key.starts_with(k.as_str())) {
            return no(format!(
                "it does not cover the discovery directory {}",
                dir.display()
            ));
        }
    }
    InForce::Yes(Fingerprint {
        policy_uid: p.uid.clone(),
        policy_generation: p.generation,
        binding_uid: b.uid.clone(),
        binding_generation: b.generation,
    })
}

/// A directory spelled as the chart's `localpv.dirKey`: its segments, each after a `/`, then a final `/`.
fn dir_key(dir: &Path) -> String {
    match normalise(&dir.to_string_lossy()) {
        Some(d) if d != Path::new("/") => format!("{}/", d.display()),
        _ => "/".to_string(),
    }
}

/// Whether the narrow watch (PVs labelled for `node`) would miss `pv` though it may reach one of `dirs`: not
/// labelled for this node, and a local or hostPath path that is, lies in or encloses a discovery directory, or
/// any key of ours (our identity annotations). Such a PV, made before the policy, keeps the agent wide.
pub fn blocks(pv: &PersistentVolume, node: &str, dirs: &[PathBuf]) -> bool {
    let meta = &pv.metadata;
    if meta
        .labels
        .as_ref()
        .and_then(|l| l.get(NODE_LABEL))
        .map(String::as_str)
        == Some(node)
    {
        return false;
    }
    let ours = |keys: Option<&std::collections::BTreeMap<String, String>>| {
        keys.is_some_and(|k| k.keys().any(|k| k.starts_with(KEY_PREFIX)))
    };
    if ours(meta.annotations.as_ref()) || ours(meta.labels.as_ref()) {
        return true;
    }
    let Some(path) = raw_path(pv) else {
        return false;
    };
    // NB: a path that cannot be normalised (relative) is refused by the API server; count it as reaching.
    let Some(path) = normalise(path) else {
        return true;
    };
    dirs.iter()
        .filter_map(|d| normalise(&d.to_string_lossy()))
        .any(|d| overlaps(&path, &d))
}

/// The PV watch's scope.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Every PV of the cluster.
    Wide,
    /// Only PVs labelled for this node, while the policy with this fingerprint is in force.
    Narrow(Fingerprint),
}

/// What the shell does after a step.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchMove {
    /// Nothing changes; look again after this long.
    CheckIn(Duration),
    /// Watch only this node's PVs from now on (and record the fingerprint).
    Narrow(Fingerprint),
    /// Watch every PV again (and forget the recorded fingerprint); the reason.
    Widen(String),
    /// Narrow and still in force: go on.
    Keep,
}

/// The agent's choice of watch between passes.
#[derive(Clone, Debug)]
pub struct Narrowing {
    mode: Mode,
    /// The fingerprint first seen in force while wide, and when.
    candidate: Option<(Fingerprint, Instant)>,
}

impl Narrowing {
    /// At start: narrow at once on the recorded fingerprint, wide without one. Nothing is read for it: the first
    /// pass that would wipe or publish verifies the fingerprint first ([`Narrowing::verify`]), as every later one
    /// does, and widens when the policy changed while the agent was away; no other step needs every PV.
    pub fn resume(recorded: Option<&Fingerprint>) -> Narrowing {
        let mode = match recorded {
            Some(f) => Mode::Narrow(f.clone()),
            None => Mode::Wide,
        };
        Narrowing {
            mode,
            candidate: None,
        }
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    pub fn is_narrow(&self) -> bool {
        matches!(self.mode, Mode::Narrow(_))
    }

    /// A wide agent, its index complete, looked at the policy (`seen`) at `now`; `blockers` PVs of the index would
    /// be missed by a narrow watch (`blocks`).
    pub fn look(&mut self, seen: InForce, now: Instant, blockers: usize) -> WatchMove {
        if self.is_narrow() {
            return self.verify(seen);
        }
        let InForce::Yes(fingerprint) = seen else {
            self.candidate = None;
            return WatchMove::CheckIn(CHECK_EVERY);
        };
        let since = match &self.candidate {
            Some((f, at)) if *f == fingerprint => *at,
            _ => {
                self.candidate = Some((fingerprint, now));
                return WatchMove::CheckIn(SETTLE);
            }
        };
        let held = now.saturating_duration_since(since);
        if held < SETTLE {
            return WatchMove::CheckIn(SETTLE - held);
        }
        if blockers > 0 {
            return WatchMove::CheckIn(CHECK_EVERY);
        }
        self.candidate = None;
        self.mode = Mode::Narrow(fingerprint.clone());
        WatchMove::Narrow(fingerprint)
    }

    /// A narrow agent is about to wipe or publish: it may rely on its narrow watch only while the fingerprint it
    /// narrowed on is still the one in force.
    pub fn verify(&mut self, seen: InForce) -> WatchMove {
        let Mode::Narrow(narrowed_on) = &self.mode else {
            return WatchMove::Widen("the PV watch is not narrow".into());
        };
        let why = match seen {
            InForce::Yes(f) if f == *narrowed_on => return WatchMove::Keep,
            InForce::Yes(_) => {
                "the admission policy or its binding changed since the agent narrowed its watch"
                    .to_string()
            }
            InForce::No(why) => why,
        };
        self.mode = Mode::Wide;
        self.candidate = None;
        WatchMove::Widen(why)
    }
}

#[cfg(test)]
#[path = "narrow/tests.rs"]
mod tests;
