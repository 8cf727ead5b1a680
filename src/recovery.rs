//! Opt-in recovery of StatefulSet replicas whose local volume is lost (issue 37, points 3 and 4). Pure: the
//! extender's Lease holder gathers what it reads, calls [`lost`] and [`decide`], and carries out the answer.
//!
//! ```text
//!  our PVs, LocalDisks (health, drain), Nodes (gone, out-of-service, re-created, NotReady) ──> lost ──> Lost
//!  per Lost volume: its claim, the StatefulSets and pods of its namespace (a Scene) ─┐
//!  RecoveryPolicy (modes, node signals, interval) + Memory (in flight, last recovery) ───────┴─> decide ──> Decision
//! ```
//!
//! A Bound PV is lost when its disk is `Failed` (the agent's health judgement, `crate::health`), when an operator
//! drains its disk (`localpv disks drain`), or when its node is lost: deleted for longer than the clean-up grace,
//! tainted `node.kubernetes.io/out-of-service` (Kubernetes' non-graceful shutdown signal), re-created under the
//! same name (a new UID) and, for longer than a configured time, not finding the PV's disk (the agent moves the PV's
//! `localpv.io/node-uid` to its Node's UID whenever it finds the PV's own disk), or NotReady for longer than a
//! configured time; each node signal is its own opt-in. A lost volume is recovered by deleting its claim
//! and the pod using it, so the StatefulSet makes a new claim that binds to a free disk elsewhere. Never by
//! surprise:
//!
//! - only when opted in: the claim's `localpv.io/recovery` annotation, else the StatefulSet's, else the class's
//!   (`on`, `dry-run` or `off`; off when none says); a drain with `--force` counts as `on`;
//! - only a claim made from a StatefulSet's `volumeClaimTemplates` (`<template>-<set>-<ordinal>`, the set in the
//!   claim's own namespace, its pod controlled by that set), whose UID and volume are those the PV names;
//! - never more than one recovery in flight per StatefulSet, and only while every other replica is Ready;
//! - at most one recovery per `interval` in the whole cluster;
//! - `dry-run` says what it would do and does nothing.
//!
//! NB: over 500 lines: `lost`, `decide` and the words each hold says stay in one file, so a guard and what it tells
//! users change together; the read models are in `facts`.
//!
//! The old PV stays (Released, never wiped while its disk is Failed: the agent's rule); its disk, once replaced,
//! is a new identity and is published as a new PV.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cleanup::Volume;
use crate::contract::{ANN_RECOVERY, Phase, TAINT_OUT_OF_SERVICE};
use crate::health::State;

mod facts;
mod healthy;
#[cfg(test)]
mod tests;

pub use facts::{ClaimFacts, DiskFacts, NodeState, PodState, Set};
pub use healthy::{ToldPod, healthy_again};

/// What a claim, a StatefulSet or a class asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecoveryMode {
    Off,
    /// Say what would be done; do nothing.
    DryRun,
    On,
}

impl RecoveryMode {
    /// `on`, `dry-run`, `off` (case-insensitive; `true`/`false` as aliases of on/off).
    pub fn parse(text: &str) -> Option<RecoveryMode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "on" | "true" => Some(RecoveryMode::On),
            "dry-run" | "dryrun" => Some(RecoveryMode::DryRun),
            "off" | "false" => Some(RecoveryMode::Off),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryMode::Off => "off",
            RecoveryMode::DryRun => "dry-run",
            RecoveryMode::On => "on",
        }
    }
}

/// An annotation's ask: absent, understood, or a value this version does not understand (which asks for nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Ask {
    #[default]
    Unset,
    RecoveryMode(RecoveryMode),
    Invalid(String),
}

impl Ask {
    pub fn from_annotation(value: Option<&str>) -> Ask {
        match value {
            None => Ask::Unset,
            Some(text) => RecoveryMode::parse(text)
                .map_or_else(|| Ask::Invalid(text.into()), Ask::RecoveryMode),
        }
    }
}

/// Which node signals count as the node being lost; each is its own opt-in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSignals {
    /// A deleted Node counts once gone this long (the clean-up grace); `None`: deleted Nodes do not count.
    pub gone_after: Option<Duration>,
    /// The `node.kubernetes.io/out-of-service` taint counts.
    pub out_of_service: bool,
    /// A Node NotReady this long counts; `None`: NotReady does not count.
    pub not_ready_after: Option<Duration>,
    /// A Node whose UID is not the one the PV's disk was last found under, created this long ago, counts; `None`:
    /// re-created Nodes do not count.
    pub replaced_after: Option<Duration>,
}

impl NodeSignals {
    /// Whether any node signal is on (the shell then reads Nodes).
    pub fn any(&self) -> bool {
        self.gone_after.is_some()
            || self.out_of_service
            || self.not_ready_after.is_some()
            || self.replaced_after.is_some()
    }

    /// Whether a signal needs each Node's state (taints, conditions, UID), not only its name.
    pub fn reads_node_state(&self) -> bool {
        self.out_of_service || self.not_ready_after.is_some() || self.replaced_after.is_some()
    }
}

/// Why a Bound volume is lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Its disk is `Failed`: the LocalDisk, the condition's reason and message.
    DiskFailed {
        disk: String,
        reason: String,
        message: String,
    },
    /// An operator drains its disk.
    Drain {
        disk: String,
        force: bool,
    },
    NodeGone {
        node: String,
    },
    NodeOutOfService {
        node: String,
    },
    NodeNotReady {
        node: String,
        since: SystemTime,
    },
    /// The Node of the PV's name is another object (a new UID) that has not found the PV's disk.
    NodeReplaced {
        node: String,
        /// The UID the PV's disk was last found under, and the Node's now.
        was: String,
        now: String,
    },
}

impl Loss {
    /// What was lost, for Events: "disk node-1-vol1 Failed (FilesystemShutDown: ...)".
    pub fn describe(&self, node: &str) -> String {
        match self {
            Loss::DiskFailed {
                disk,
                reason,
                message,
            } => format!("disk {disk} on node {node} Failed ({reason}: {message})"),
            Loss::Drain { disk, force } => {
                let forced = if *force { " with --force" } else { "" };
                format!("disk {disk} on node {node} is being drained{forced}")
            }
            Loss::NodeGone { node } => format!("node {node} was deleted"),
            Loss::NodeOutOfService { node } => {
                format!("node {node} is tainted {TAINT_OUT_OF_SERVICE} (shut down)")
            }
            Loss::NodeReplaced { node, was, now } => format!(
                "node {node} was re-created (UID {was} is now {now}: a new machine) and has not found the disk"
            ),
            Loss::NodeNotReady { node, since } => {
                let secs = since
                    .elapsed()
                    .map_or(String::new(), |d| format!(" for {}s", d.as_secs()));
                format!("node {node} is NotReady{secs}")
            }
        }
    }
}

/// A Bound PV of ours whose data is out of reach, and the claim bound to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub pv: String,
    pub pv_uid: String,
    pub node: String,
    pub class: Option<String>,
    pub namespace: String,
    pub claim: String,
    pub claim_uid: Option<String>,
    pub loss: Loss,
}

/// What [`lost`] reads.
pub struct Sources<'a> {
    pub pvs: &'a [Arc<Volume>],
    pub disks: &'a [DiskFacts],
    /// Nodes that exist.
    pub nodes: &'a BTreeMap<String, NodeState>,
    /// Deleted nodes: when each was first seen gone (kept by the clean-up).
    pub gone_since: &'a BTreeMap<String, SystemTime>,
    pub signals: &'a NodeSignals,
    pub now: SystemTime,
}

/// The Bound PVs whose data is lost, one entry per PV (the first reason found: disk before node).
pub fn lost(s: &Sources<'_>) -> Vec<Lost> {
    // NB: a LocalDisk counts only for the PV it names on the PV's own node: a LocalDisk naming another node's PV
    // says nothing about it. Only Failed and drained disks matter; index them once, not per PV.
    let telling: BTreeMap<(&str, &str), &DiskFacts> = s
        .disks
        .iter()
        .filter(|d| d.health == Some(State::Failed) || d.drain.is_some())
        .filter_map(|d| Some(((d.pv.as_deref()?, d.node.as_str()), d)))
        .collect();
    let mut out = Vec::new();
    for pv in s.pvs {
        let (Phase::Bound, Some(claim), false) = (pv.phase, &pv.claim, pv.deleting) else {
            continue;
        };
        let (Some(namespace), Some(name), Some(node)) = (&claim.namespace, &claim.name, &pv.node)
        else {
            continue;
        };
        let disk = telling.get(&(pv.name.as_str(), node.as_str())).copied();
        let Some(loss) = disk.and_then(disk_loss).or_else(|| node_loss(pv, node, s)) else {
            continue;
        };
        out.push(Lost {
            pv: pv.name.clone(),
            pv_uid: pv.uid.clone(),
            node: node.clone(),
            class: pv.class.clone(),
            namespace: namespace.clone(),
            claim: name.clone(),
            claim_uid: claim.uid.clone(),
            loss,
        });
    }
    out
}

fn disk_loss(d: &DiskFacts) -> Option<Loss> {
    if d.health == Some(State::Failed) {
        return Some(Loss::DiskFailed {
            disk: d.name.clone(),
            reason: d.health_reason.clone().unwrap_or_else(|| "Failed".into()),
            message: d.health_message.clone().unwrap_or_default(),
        });
    }
    d.drain.map(|force| Loss::Drain {
        disk: d.name.clone(),
        force,
    })
}

fn node_loss(pv: &Volume, node: &str, s: &Sources<'_>) -> Option<Loss> {
    let node_name = node.to_string();
    match s.nodes.get(node) {
        None => {
            let after = s.signals.gone_after?;
            let since = s.gone_since.get(node)?;
            let gone_for = s.now.duration_since(*since).unwrap_or_default();
            (gone_for >= after).then_some(Loss::NodeGone { node: node_name })
        }
        Some(n) if n.out_of_service && s.signals.out_of_service => {
            Some(Loss::NodeOutOfService { node: node_name })
        }
        Some(n) if replaced(pv, n, s) => Some(Loss::NodeReplaced {
            node: node_name,
            was: pv.node_uid.clone().unwrap_or_default(),
            now: n.uid.clone(),
        }),
        Some(n) => {
            let after = s.signals.not_ready_after?;
            let since = n.not_ready_since?;
            let for_ = s.now.duration_since(since).unwrap_or_default();
            (for_ >= after).then_some(Loss::NodeNotReady {
                node: node_name,
                since,
            })
        }
    }
}

/// Whether the Node of `pv`'s name is another object than the one its disk was last found under, and has existed
/// for the configured time without its agent finding the disk (which moves the PV's node UID to the Node's).
/// NB: a PV that records no node UID (made before the agent recorded one, and whose disk no agent found since) or
/// a Node whose UID or creation time is unknown never counts: only a proven change of object does. A Node that
/// merely restarted keeps its UID; a Node object deleted and re-registered by the same machine gets a new UID, but
/// its agent finds the disk and moves the PV's UID within seconds, well inside the time.
fn replaced(pv: &Volume, n: &NodeState, s: &Sources<'_>) -> bool {
    let (Some(after), Some(was), Some(created)) =
        (s.signals.replaced_after, pv.node_uid.as_deref(), n.created)
    else {
        return false;
    };
    let age = s.now.duration_since(created).unwrap_or_default();
    !was.is_empty() && !n.uid.is_empty() && was != n.uid && age >= after
}

/// A claim bound to one of our PVs whose disk is Degraded or Failed: its pods and its health status are told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failing<'a> {
    pub namespace: &'a str,
    pub claim: &'a str,
    pub pv: &'a str,
    pub disk: &'a DiskFacts,
    pub state: State,
}

/// The claims on Degraded or Failed disks: a LocalDisk counts only for the Bound PV it names on its own node.
pub fn failing<'a>(pvs: &'a [Arc<Volume>], disks: &'a [DiskFacts]) -> Vec<Failing<'a>> {
    if disks.iter().all(|d| d.health.is_none()) {
        return Vec::new();
    }
    let by_name: BTreeMap<&str, &Volume> = pvs.iter().map(|pv| (pv.name.as_str(), &**pv)).collect();
    let mut out = Vec::new();
    for disk in disks {
        let (Some(state), Some(pv)) = (disk.health, disk.pv.as_deref()) else {
            continue;
        };
        let Some(volume) = by_name.get(pv) else {
            continue;
        };
        let (Phase::Bound, Some(claim)) = (volume.phase, &volume.claim) else {
            continue;
        };
        if volume.node.as_deref() != Some(disk.node.as_str()) {
            continue;
        }
        let (Some(namespace), Some(name)) = (claim.namespace.as_deref(), claim.name.as_deref())
        else {
            continue;
        };
        out.push(Failing {
            namespace,
            claim: name,
            pv: &volume.name,
            disk,
            state,
        });
    }
    out
}

/// What the shell read about one lost volume's namespace.
#[derive(Clone, Debug, Default)]
pub struct Scene {
    /// The claim the PV names (by namespace and name); `None` when it is gone.
    pub claim: Option<ClaimFacts>,
    /// The StatefulSets of the claim's namespace.
    pub sets: Vec<Set>,
    /// The pods of the claim's namespace.
    pub pods: Vec<PodState>,
}

/// The cluster's recovery settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryPolicy {
    /// Class name -> its `localpv.io/recovery` annotation.
    pub classes: BTreeMap<String, Ask>,
    /// Least time between two recoveries in the whole cluster.
    pub interval: Duration,
}

/// What the Lease holder remembers between passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// StatefulSet UID -> the replica being recovered.
    pub in_flight: BTreeMap<String, InFlight>,
    /// When the last recovery was carried out.
    pub last: Option<SystemTime>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub ordinal: u32,
    /// The pod deleted, if one was.
    pub pod_uid: Option<String>,
    pub since: SystemTime,
}

/// The StatefulSet replica a claim belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    pub set: String,
    pub set_uid: String,
    pub ordinal: u32,
    /// `<set>-<ordinal>`.
    pub pod: String,
    /// The pod's UID when it exists.
    pub pod_uid: Option<String>,
}

/// What recovery of one lost volume would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steps {
    pub namespace: String,
    pub claim: String,
    pub claim_uid: String,
    pub replica: Replica,
    /// One sentence naming what is lost and what is done.
    pub message: String,
}

/// Why nothing is done for a lost volume now. Each is said once (an Event) until it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Not opted in: what to do by hand.
    Off,
    /// An annotation this version does not understand.
    BadAnnotation { value: String },
    /// The claim was not made from a StatefulSet's `volumeClaimTemplates` (or the set is going away).
    NotStatefulSet,
    /// The replica's ordinal is at or past the set's replicas (scaled down).
    ScaledDown,
    /// Another replica of the set (this pod) is being recovered.
    InFlight { pod: String },
    /// Another replica is not Ready (or missing).
    ReplicaNotReady { pod: String },
    /// The cluster's last recovery was too recent.
    RateLimited { until: SystemTime },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to say: the claim is gone, being deleted, or is no longer the PV's.
    Settled,
    Hold(Hold),
    DryRun(Steps),
    Recover(Steps),
}

/// Decides one lost volume. On `Recover` the caller records [`Memory::started`] before the next decision.
pub fn decide(
    lost: &Lost,
    scene: &Scene,
    policy: &RecoveryPolicy,
    memory: &mut Memory,
    now: SystemTime,
) -> Decision {
    let Some(claim) = scene.claim.as_ref().filter(|c| {
        !c.deleting
            && c.volume.as_deref() == Some(lost.pv.as_str())
            && lost.claim_uid.as_deref().is_none_or(|uid| uid == c.uid)
    }) else {
        return Decision::Settled;
    };
    let forced = matches!(lost.loss, Loss::Drain { force: true, .. });
    let Some((set, replica)) = replica_of(&lost.claim, scene) else {
        return Decision::Hold(Hold::NotStatefulSet);
    };
    let class = lost.class.as_ref().and_then(|c| policy.classes.get(c));
    let mode = match [&claim.ask, &set.ask, class.unwrap_or(&Ask::Unset)]
        .into_iter()
        .find(|a| **a != Ask::Unset)
    {
        _ if forced => RecoveryMode::On,
        Some(Ask::RecoveryMode(m)) => *m,
        Some(Ask::Invalid(value)) => {
            return Decision::Hold(Hold::BadAnnotation {
                value: value.clone(),
            });
        }
        Some(Ask::Unset) | None => RecoveryMode::Off,
    };
    if mode == RecoveryMode::Off {
        return Decision::Hold(Hold::Off);
    }
    if replica.ordinal >= set.replicas {
        return Decision::Hold(Hold::ScaledDown);
    }
    if let Some(f) = memory.in_flight.get(&set.uid) {
        if settled(f, set, scene) {
            memory.in_flight.remove(&set.uid);
        } else {
            let pod = format!("{}-{}", set.name, f.ordinal);
            return Decision::Hold(Hold::InFlight { pod });
        }
    }
    if let Some(pod) = unready_sibling(set, replica.ordinal, scene) {
        return Decision::Hold(Hold::ReplicaNotReady { pod });
    }
    if mode == RecoveryMode::On
        && let Some(last) = memory.last
        && now < last + policy.interval
    {
        return Decision::Hold(Hold::RateLimited {
            until: last + policy.interval,
        });
    }
    let pod_part = match &replica.pod_uid {
        Some(_) => format!(" and pod {}", replica.pod),
        None => String::new(),
    };
    let message = format!(
        "{}: the data of PV {} is out of reach; {} claim {}/{}{} so StatefulSet {} makes a new claim on a free disk \
         (the replica starts empty and re-syncs from its peers; PV {} stays Released and is never wiped while its \
         disk is Failed)",
        lost.loss.describe(&lost.node),
        lost.pv,
        if mode == RecoveryMode::On {
            "deleting"
        } else {
            "dry run: would delete"
        },
        lost.namespace,
        lost.claim,
        pod_part,
        set.name,
        lost.pv,
    );
    let steps = Steps {
        namespace: lost.namespace.clone(),
        claim: lost.claim.clone(),
        claim_uid: claim.uid.clone(),
        replica,
        message,
    };
    match mode {
        RecoveryMode::On => Decision::Recover(steps),
        _ => Decision::DryRun(steps),
    }
}

impl Memory {
    /// Records a recovery carried out: the set's replica is in flight and the cluster's interval starts.
    pub fn started(&mut self, steps: &Steps, now: SystemTime) {
        self.in_flight.insert(
            steps.replica.set_uid.clone(),
            InFlight {
                ordinal: steps.replica.ordinal,
                pod_uid: steps.replica.pod_uid.clone(),
                since: now,
            },
        );
        self.last = Some(now);
    }
}

/// The one StatefulSet of the claim's namespace whose template made this claim, and the replica. The claim's name
/// is `<template>-<set>-<ordinal>`; a pod of that replica, if there is one, must be controlled by that set.
pub fn replica_of<'s>(claim: &str, scene: &'s Scene) -> Option<(&'s Set, Replica)> {
    let mut found = None;
    for set in scene.sets.iter().filter(|s| !s.deleting) {
        for template in &set.templates {
            let Some(ordinal) = claim
                .strip_prefix(template.as_str())
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|r| r.strip_prefix(set.name.as_str()))
                .and_then(|r| r.strip_prefix('-'))
                .filter(|r| {
                    r.bytes().all(|b| b.is_ascii_digit()) && (*r == "0" || !r.starts_with('0'))
                })
                .and_then(|r| r.parse::<u32>().ok())
            else {
                continue;
            };
            if found.is_some() {
                // NB: two sets could each have made this name (`a-b` + `c` and `a` + `b-c`): do nothing.
                return None;
            }
            found = Some((set, ordinal));
        }
    }
    let (set, ordinal) = found?;
    let pod = format!("{}-{ordinal}", set.name);
    let pod_uid = match scene.pods.iter().find(|p| p.name == pod) {
        Some(p) if p.controller.as_deref() == Some(set.uid.as_str()) => Some(p.uid.clone()),
        Some(_) => return None,
        None => None,
    };
    Some((
        set,
        Replica {
            set: set.name.clone(),
            set_uid: set.uid.clone(),
            ordinal,
            pod,
            pod_uid,
        },
    ))
}

/// The first other replica (ordinal below `replicas`) without a Ready pod controlled by the set.
fn unready_sibling(set: &Set, ordinal: u32, scene: &Scene) -> Option<String> {
    (0..set.replicas).filter(|o| *o != ordinal).find_map(|o| {
        let name = format!("{}-{o}", set.name);
        let ok = scene.pods.iter().any(|p| {
            p.name == name
                && p.controller.as_deref() == Some(set.uid.as_str())
                && p.ready
                && !p.deleting
        });
        (!ok).then_some(name)
    })
}

/// A recovery is over once its replica runs again: a new pod (another UID) at its ordinal, Ready.
fn settled(f: &InFlight, set: &Set, scene: &Scene) -> bool {
    let name = format!("{}-{}", set.name, f.ordinal);
    scene.pods.iter().any(|p| {
        p.name == name
            && p.controller.as_deref() == Some(set.uid.as_str())
            && p.ready
            && !p.deleting
            && f.pod_uid.as_deref() != Some(p.uid.as_str())
    })
}

/// Pods of the scene using `claim`: those told about a failing disk.
pub fn pods_using<'s>(claim: &str, scene: &'s Scene) -> impl Iterator<Item = &'s PodState> {
    scene
        .pods
        .iter()
        .filter(move |p| !p.deleting && p.claims.iter().any(|c| c == claim))
}

impl Hold {
    /// The Event's sentence: what holds it and what an operator can do.
    pub fn message(&self, lost: &Lost) -> String {
        let what = lost.loss.describe(&lost.node);
        let claim = format!("{}/{}", lost.namespace, lost.claim);
        match self {
            Hold::Off => format!(
                "{what}: the data of PV {} is out of reach and recovery is off for claim {claim}. To move the \
                 replica by hand: delete the claim, then its pod (the StatefulSet makes a new claim); or opt in \
                 with the annotation {ANN_RECOVERY}=on (or dry-run) on the claim, its StatefulSet or its class",
                lost.pv
            ),
            Hold::BadAnnotation { value } => format!(
                "{what}: annotation {ANN_RECOVERY}={value:?} is not understood (on, dry-run or off); nothing done \
                 for claim {claim}"
            ),
            Hold::NotStatefulSet => format!(
                "{what}: claim {claim} was not made by a StatefulSet's volumeClaimTemplates in its namespace (or \
                 its pod has another owner); localpv recovers only StatefulSet replicas. Move the workload by hand"
            ),
            Hold::ScaledDown => format!(
                "{what}: claim {claim} belongs to a replica the StatefulSet no longer runs; nothing done"
            ),
            Hold::InFlight { pod } => format!(
                "{what}: waiting: replica {pod} of the same StatefulSet is being recovered (one at a time)"
            ),
            Hold::ReplicaNotReady { pod } => format!(
                "{what}: waiting: pod {pod} of the same StatefulSet is not Ready, and recovery runs only while \
                 every other replica is"
            ),
            Hold::RateLimited { .. } => format!(
                "{what}: waiting: another recovery ran recently in this cluster (one per interval)"
            ),
        }
    }

    /// The Event's action: one per kind of hold (Events with one reason and action merge into one series).
    pub fn action(&self) -> &'static str {
        match self {
            Hold::Off => "RecoveryOff",
            Hold::BadAnnotation { .. } => "AnnotationNotUnderstood",
            Hold::NotStatefulSet => "NotStatefulSetReplica",
            Hold::ScaledDown => "ReplicaScaledDown",
            Hold::InFlight { .. } => "WaitForRecoveryInFlight",
            Hold::ReplicaNotReady { .. } => "WaitForReplicaReady",
            Hold::RateLimited { .. } => "WaitForRateLimit",
        }
    }

    /// A key that changes when the Event should be written again.
    pub fn key(&self) -> String {
        match self {
            Hold::RateLimited { .. } => "RateLimited".into(),
            other => format!("{other:?}"),
        }
    }
}
