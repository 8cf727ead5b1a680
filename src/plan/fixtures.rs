//! Builders for planning tests, and a small simulated executor that applies a plan to the inputs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{
    LocalVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeSpec,
    PersistentVolumeStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::identity;
use super::pv::{ANN_PROVISIONED_BY, MetaPatch, lifetime};
use super::{
    Action, ClassFacts, DiskLedger, DiskState, Inputs, Memory, NodeFacts, OwnedPv, Owners, Plan,
    StateChanges, StorageClassFacts,
};
use crate::config::{BlockWipe, ClassConfig, Config, FsWipe, WipeMethod};
use crate::contract::{ANN_NODE_UID, ANN_WIPE_LIFETIME, ANN_WIPE_PHASE, KEY_PREFIX, NODE_LABEL};
use crate::disk::{Discovery, Disk, DiskIdentity, VolumeMode};
use crate::pvname;

pub const NODE: &str = "n1";
pub const NODE_UID: &str = "0a1b2c3d-0000-4000-8000-00000000000a";
pub const CLASS: &str = "local-storage";
pub const DIR: &str = "/mnt/disks";

pub fn node() -> NodeFacts {
    NodeFacts {
        name: NODE.into(),
        hostname_label: Some("n1-host".into()),
        uid: NODE_UID.into(),
        labels: BTreeMap::from([
            ("kubernetes.io/hostname".into(), "n1-host".into()),
            ("topology.kubernetes.io/zone".into(), "z1".into()),
        ]),
    }
}

pub fn class_config(name: &str, dir: &str, mode: VolumeMode) -> ClassConfig {
    ClassConfig {
        name: name.into(),
        host_dir: dir.into(),
        mount_dir: format!("/host{dir}").into(),
        volume_mode: mode,
        access_modes: vec!["ReadWriteOnce".into()],
        fs_type: None,
        name_patterns: vec!["*".into()],
        selector: Vec::new(),
        wipe: if mode == VolumeMode::Block {
            WipeMethod::Block(BlockWipe::default())
        } else {
            WipeMethod::Filesystem(FsWipe::RemoveContents)
        },
        device_wipe: crate::config::BlockWipe::default(),
        wipe_on_first_discovery: false,
    }
}

pub fn class_facts(config: ClassConfig) -> ClassFacts {
    ClassFacts {
        config,
        storage_class: Some(StorageClassFacts {
            reclaim_policy: Some("Delete".into()),
            mount_options: Vec::new(),
        }),
    }
}

/// A filesystem disk `entry` under the default class, with a UUID derived from its name.
pub fn disk(entry: &str) -> Disk {
    Disk {
        class: CLASS.into(),
        entry: entry.into(),
        host_path: PathBuf::from(DIR).join(entry),
        mode: VolumeMode::Filesystem,
        capacity_bytes: 5 << 30,
        available_bytes: Some(4 << 30),
        mount_root: None,
        held: false,
        identity: DiskIdentity {
            device: Some(format!("/dev/mapper/{entry}")),
            fs_type: Some("ext4".into()),
            fs_uuid: Some(format!("uuid-{entry}")),
            ..DiskIdentity::default()
        },
    }
}

pub fn with_uuid(mut disk: Disk, uuid: &str) -> Disk {
    disk.identity.fs_uuid = Some(uuid.into());
    disk
}

pub fn at_entry(mut disk: Disk, entry: &str) -> Disk {
    disk.entry = entry.into();
    disk.host_path = PathBuf::from(DIR).join(entry);
    disk
}

/// PV builder: `Pv::test().for_disk(&disk("vol1")).released().build()`.
pub struct Pv(PersistentVolume);

impl Pv {
    /// Our Available PV for `disk("vol1")` on node n1.
    pub fn test() -> Pv {
        let pv = PersistentVolume {
            metadata: ObjectMeta {
                resource_version: Some("1".into()),
                labels: Some(BTreeMap::from([(NODE_LABEL.into(), NODE.into())])),
                annotations: Some(BTreeMap::from([(
                    ANN_PROVISIONED_BY.into(),
                    format!("localpv-{NODE}"),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                persistent_volume_reclaim_policy: Some("Delete".into()),
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        };
        Pv(pv).for_disk(&disk("vol1")).available()
    }

    pub fn for_disk(mut self, disk: &Disk) -> Pv {
        let meta = &mut self.0.metadata;
        meta.name = Some(pvname::localpv_name(NODE, &disk.class, &disk.entry));
        meta.uid = Some(format!("uid-{}", disk.entry));
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        annotations.retain(|k, _| !k.starts_with(KEY_PREFIX));
        annotations.extend(identity::annotations(disk));
        annotations.insert(ANN_NODE_UID.into(), NODE_UID.into());
        let spec = self.spec();
        spec.local = Some(LocalVolumeSource {
            path: disk.host_path.display().to_string(),
            fs_type: None,
        });
        spec.storage_class_name = Some(disk.class.clone());
        spec.volume_mode = Some(disk.mode.as_str().into());
        self
    }

    /// `spec.local.path` spelled exactly as given.
    pub fn at_path(mut self, path: &str) -> Pv {
        self.spec().local = Some(LocalVolumeSource {
            path: path.into(),
            fs_type: None,
        });
        self
    }

    /// A `hostPath` volume at `path` instead of a local one.
    pub fn host_path(mut self, path: &str) -> Pv {
        let spec = self.spec();
        spec.local = None;
        spec.host_path = Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: path.into(),
            type_: None,
        });
        self
    }

    pub fn uid(mut self, uid: &str) -> Pv {
        self.0.metadata.uid = Some(uid.into());
        self
    }

    pub fn unlabelled(mut self) -> Pv {
        self.0.metadata.labels = None;
        self
    }

    /// Required node affinity `kubernetes.io/hostname In [hostname]`.
    pub fn affine_to(mut self, hostname: &str) -> Pv {
        use k8s_openapi::api::core::v1::{
            NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, VolumeNodeAffinity,
        };
        self.spec().node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "kubernetes.io/hostname".into(),
                        operator: "In".into(),
                        values: Some(vec![hostname.into()]),
                    }]),
                    match_fields: None,
                }],
            }),
        });
        self
    }

    pub fn on_node(mut self, node: &str) -> Pv {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(NODE_LABEL.into(), node.into());
        self
    }

    pub fn name(mut self, name: &str) -> Pv {
        self.0.metadata.name = Some(name.into());
        self
    }

    pub fn available(self) -> Pv {
        self.phase("Available", None)
    }

    pub fn pending(mut self) -> Pv {
        self.0.status = None;
        self
    }

    pub fn bound(self) -> Pv {
        self.phase("Bound", Some("claim-1"))
    }

    pub fn released(self) -> Pv {
        self.phase("Released", Some("claim-1"))
    }

    pub fn claim(mut self, claim_uid: &str) -> Pv {
        let claim = self
            .spec()
            .claim_ref
            .get_or_insert_with(ObjectReference::default);
        claim.uid = Some(claim_uid.into());
        claim.namespace.get_or_insert_with(|| "shop".into());
        claim.name.get_or_insert_with(|| "data".into());
        self
    }

    pub fn policy(mut self, policy: &str) -> Pv {
        self.spec().persistent_volume_reclaim_policy = Some(policy.into());
        self
    }

    pub fn deleting(mut self) -> Pv {
        self.0.metadata.deletion_timestamp = Some(Time(jiff_epoch()));
        self
    }

    /// Wipe phase `phase` recorded for this PV's current lifetime.
    pub fn wipe_phase(self, phase: &str) -> Pv {
        let claim = self
            .0
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|c| c.uid.clone());
        let uid = self.0.metadata.uid.clone().unwrap_or_default();
        self.wipe_phase_for(phase, &lifetime(&uid, claim.as_deref()))
    }

    pub fn wipe_phase_for(mut self, phase: &str, lifetime: &str) -> Pv {
        let annotations = self
            .0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        annotations.insert(ANN_WIPE_PHASE.into(), phase.into());
        annotations.insert(ANN_WIPE_LIFETIME.into(), lifetime.into());
        self
    }

    /// As the reference provisioner leaves it: no label of ours, no identity, its `provisioned-by` text.
    pub fn reference(mut self, provisioned_by: &str) -> Pv {
        let meta = &mut self.0.metadata;
        meta.labels = None;
        meta.annotations = Some(BTreeMap::from([(
            ANN_PROVISIONED_BY.into(),
            provisioned_by.into(),
        )]));
        self
    }

    pub fn without_identity(mut self) -> Pv {
        if let Some(annotations) = self.0.metadata.annotations.as_mut() {
            annotations.retain(|k, _| !k.starts_with(KEY_PREFIX));
        }
        self
    }

    pub fn build(self) -> PersistentVolume {
        self.0
    }

    fn phase(mut self, phase: &str, claim: Option<&str>) -> Pv {
        self.0.status = Some(PersistentVolumeStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        match claim {
            Some(claim) if self.0.spec.as_ref().is_some_and(|s| s.claim_ref.is_none()) => {
                self.claim(claim)
            }
            _ => self,
        }
    }

    fn spec(&mut self) -> &mut PersistentVolumeSpec {
        self.0
            .spec
            .get_or_insert_with(PersistentVolumeSpec::default)
    }
}

fn jiff_epoch() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::UNIX_EPOCH
}

/// Inputs of a pass, and a simulated executor that applies plans to them as the shell would.
pub struct World {
    pub node: NodeFacts,
    pub config: Config,
    pub classes: Vec<ClassFacts>,
    pub found: Discovery,
    pub existing: Vec<PersistentVolume>,
    /// PVs outside the agent's label-scoped watch; only a cluster list shows them.
    pub others: Vec<PersistentVolume>,
    /// Whether `plan` is given a fresh list of every PV (`existing` and `others`).
    pub listed: bool,
    /// Whether that list holds the very objects of `existing`, as the agent's index hands them (otherwise copies,
    /// as a list from the API server is).
    pub list_shares_objects: bool,
    pub ledger: DiskLedger,
    pub owners: Owners,
    pub memory: Memory,
    pub now: SystemTime,
    created: u32,
    /// The objects the last pass was handed: a PV unchanged since is handed over as the same allocation, as the
    /// agent's index does (the incremental planner recognises those by address).
    handed: std::cell::RefCell<Vec<Arc<PersistentVolume>>>,
    /// Ledger keys and owner UIDs changed since the last [`World::with_changes`] call.
    pub changes: StateChanges,
    told: Option<StateChanges>,
}

impl World {
    /// Node n1 with class `local-storage` on `/mnt/disks` (Filesystem), these disks and PVs. The PVs labelled for n1
    /// are recorded as ours (as if the agent had created them); the cluster list is given to every pass.
    pub fn new(disks: Vec<Disk>, pvs: Vec<PersistentVolume>) -> World {
        let owned = pvs
            .iter()
            .filter(|pv| {
                pv.metadata.labels.as_ref().and_then(|l| l.get(NODE_LABEL))
                    == Some(&NODE.to_string())
            })
            .map(|pv| {
                let uid = pv.metadata.uid.clone().unwrap_or_default();
                let path = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.local.as_ref())
                    .map(|l| PathBuf::from(&l.path))
                    .unwrap_or_default();
                let name = pv.metadata.name.clone().unwrap_or_default();
                (uid, OwnedPv { name, path })
            })
            .collect();
        let mut ledger = DiskLedger::default();
        for pv in &pvs {
            let published = super::pv::PvView::read(pv, &node())
                .filter(|v| v.is_unclaimed() && v.origin == super::pv::Origin::Ours);
            if let Some(rec) = published.as_ref().and_then(|v| v.recorded.as_ref()) {
                let v = published.as_ref().expect("checked");
                let key =
                    identity::ledger_key(v.mode, &rec.identity, rec.mount_root.as_deref(), &v.path);
                // As the agent recorded it before creating the PV.
                ledger.set(&key, DiskState::Published);
            }
        }
        World {
            node: node(),
            config: Config::default(),
            classes: vec![class_facts(class_config(
                CLASS,
                DIR,
                VolumeMode::Filesystem,
            ))],
            found: Discovery {
                disks: disks.into_iter().map(Arc::new).collect(),
                ..Discovery::default()
            },
            existing: pvs,
            others: Vec::new(),
            listed: true,
            list_shares_objects: false,
            ledger,
            owners: Owners {
                recorded: true,
                pvs: owned,
                creating: Default::default(),
            },
            memory: Memory::default(),
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000),
            created: 0,
            handed: Default::default(),
            changes: StateChanges::default(),
            told: None,
        }
    }

    pub fn plan(&self) -> Plan {
        self.with_inputs(super::plan)
    }

    /// Runs `f` on this world's inputs of a pass.
    pub fn with_inputs<R>(&self, f: impl FnOnce(&Inputs<'_>) -> R) -> R {
        let existing: Vec<Arc<PersistentVolume>> = {
            let mut handed = self.handed.borrow_mut();
            let by_name: std::collections::HashMap<Option<&str>, &Arc<PersistentVolume>> = handed
                .iter()
                .map(|h| (h.metadata.name.as_deref(), h))
                .collect();
            let existing: Vec<Arc<PersistentVolume>> = self
                .existing
                .iter()
                .map(|pv| match by_name.get(&pv.metadata.name.as_deref()) {
                    Some(same) if ***same == *pv => Arc::clone(same),
                    _ => Arc::new(pv.clone()),
                })
                .collect();
            drop(by_name);
            handed.clone_from(&existing);
            existing
        };
        let cluster: Vec<Arc<PersistentVolume>> = match self.list_shares_objects {
            true => existing.to_vec(),
            false => self.existing.iter().cloned().map(Arc::new).collect(),
        };
        let others = self.others.iter().cloned().map(Arc::new);
        let cluster: Vec<Arc<PersistentVolume>> = cluster.into_iter().chain(others).collect();
        f(&Inputs {
            node: &self.node,
            config: &self.config,
            classes: &self.classes,
            found: &self.found,
            existing: &existing,
            ledger: &self.ledger,
            owners: &self.owners,
            cluster: self.listed.then_some(cluster.as_slice()),
            memory: &self.memory,
            now: self.now,
            changes: self.told.as_ref(),
        })
    }

    /// [`World::with_inputs`] naming the ledger keys and owners changed since the last such call, as the agent
    /// does (`StateChanges`); then counts the next call from this one.
    pub fn with_changes<R>(&mut self, f: impl FnOnce(&Inputs<'_>) -> R) -> R {
        self.told = Some(self.changes.clone());
        let r = self.with_inputs(f);
        self.told = None;
        self.changes.advance();
        r
    }

    /// Sets a disk's ledger state, naming the key as changed.
    pub fn set_state(&mut self, key: &str, state: DiskState) {
        self.ledger.set(key, state);
        self.changes.ledger.insert(key.to_string());
    }

    /// Plans and applies until a pass writes nothing; returns every plan made (the last one writes nothing).
    pub fn settle(&mut self) -> Vec<Plan> {
        let mut plans = Vec::new();
        for _ in 0..10 {
            let plan = self.plan();
            let done = plan.writes().next().is_none();
            self.apply(&plan);
            plans.push(plan);
            if done {
                return plans;
            }
        }
        panic!("the world did not settle in 10 passes: {:#?}", plans.last());
    }

    /// Executes a plan the way the shell does, with every wipe succeeding.
    pub fn apply(&mut self, plan: &Plan) {
        for action in &plan.actions {
            match action {
                Action::CreatePv(pv) => self.create(pv),
                Action::DeletePv(r) => {
                    self.delete(r);
                }
                Action::DeleteUnclaimedPv { pv, disk } => {
                    if self.delete(pv) {
                        self.set_state(disk, DiskState::Clean);
                    }
                }
                Action::RecordOwner { uid, pv } => {
                    self.owners.creating.remove(&pv.name);
                    self.owners.pvs.insert(uid.clone(), pv.clone());
                    self.changes.owners.insert(uid.clone());
                }
                Action::ForgetOwner { uid } => {
                    self.owners.pvs.remove(uid);
                    self.changes.owners.insert(uid.clone());
                }
                Action::OwnersRecorded => self.owners.recorded = true,
                Action::AdoptPv { patch, .. } | Action::RecordIdentity { patch, .. } => {
                    self.patch(patch)
                }
                Action::SetDiskState { key, state } => self.set_state(key, *state),
                Action::Wipe(order) => {
                    order.on_start.iter().for_each(|p| self.patch(p));
                    self.set_state(&order.key, DiskState::Clean);
                    order.on_success.iter().for_each(|p| self.patch(p));
                }
                Action::TagVolume { host_path, .. } => {
                    let found = self.found.disks.iter_mut();
                    for disk in found.filter(|d| &d.host_path == host_path) {
                        let id = format!("vid-{}", disk.entry);
                        Arc::make_mut(disk).identity.volume_id.get_or_insert(id);
                    }
                }
                Action::Event(_) => {}
            }
        }
        self.memory = plan.memory.clone();
    }

    /// Deletes with the UID and resourceVersion preconditions; true when a PV was deleted.
    fn delete(&mut self, r: &super::PvRef) -> bool {
        let before = self.existing.len();
        self.existing.retain(|pv| {
            let meta = &pv.metadata;
            !(meta.uid.as_ref() == Some(&r.uid)
                && meta.resource_version.as_ref() == Some(&r.resource_version))
        });
        self.existing.len() < before
    }

    fn create(&mut self, pv: &PersistentVolume) {
        if self
            .existing
            .iter()
            .any(|e| e.metadata.name == pv.metadata.name)
        {
            return;
        }
        self.created += 1;
        let mut pv = pv.clone();
        pv.metadata.uid = Some(format!("created-{}", self.created));
        // The shell records the owner from the create response.
        let path = pv
            .spec
            .as_ref()
            .and_then(|s| s.local.as_ref())
            .map(|l| PathBuf::from(&l.path))
            .unwrap_or_default();
        let name = pv.metadata.name.clone().unwrap_or_default();
        self.owners
            .pvs
            .insert(format!("created-{}", self.created), OwnedPv { name, path });
        pv.metadata.resource_version = Some("1".into());
        pv.status = Some(PersistentVolumeStatus {
            phase: Some("Available".into()),
            ..Default::default()
        });
        self.existing.push(pv);
    }

    fn patch(&mut self, patch: &MetaPatch) {
        let Some(pv) = self
            .existing
            .iter_mut()
            .find(|pv| pv.metadata.uid.as_ref() == Some(&patch.uid))
        else {
            return;
        };
        let meta = &mut pv.metadata;
        if patch
            .resource_version
            .as_ref()
            .is_some_and(|rv| meta.resource_version.as_ref() != Some(rv))
        {
            return;
        }
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .extend(patch.labels.clone());
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(patch.annotations.clone());
        let rv: u64 = meta
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        meta.resource_version = Some((rv + 1).to_string());
    }
}

/// A small deterministic generator (xorshift64*) for tests over random worlds, so a failing seed can be run again.
pub struct Rng(pub u64);

impl Rng {
    /// A generator for `seed` (any value, zero too).
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// `disk`'s entry, rejected for `reason`.
pub fn unusable(
    disk: Disk,
    reason: crate::disk::UnusableReason,
    message: &str,
) -> crate::disk::Unusable {
    crate::disk::Unusable {
        class: disk.class,
        entry: disk.entry,
        host_path: disk.host_path,
        reason,
        message: message.into(),
    }
}
