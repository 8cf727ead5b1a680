//! An immutable, indexed view of the cluster at one moment: every decision reads one `Snapshot` and nothing else.
//!
//! ```text
//!  volumes: Vec<Volume> sorted by (capacity, name)  <── VolId indexes into it
//!  hosts: hostname label value ──> HostId (every node's hostname and every hostname a PV is pinned to)
//!  nodes: name ──> { labels, host: HostId }
//!  by_class: class ──> { pinned: per HostId, the PVs pinned to it as [Slot]; general: [Slot] }
//!  prebound: namespace/claim ──> [VolId]   (PVs whose claimRef names the claim)
//!  claims: namespace/name ──> Claim      classes: name ──> Class
//! ```
//!
//! Local PVs pin themselves to one node with a `kubernetes.io/hostname In [..]` affinity; those are found through
//! `pinned`, by the host id the node's entry already carries, so a decision never walks a node's labels or hashes
//! its hostname. PVs with any other affinity land in `general` and are checked against every node. A `Slot` copies
//! the few PV fields the per-node scan reads, so one node's PVs of a class sit together in a few cache lines
//! instead of in scattered `Volume` records. Because `volumes` is sorted by capacity, every slot list is too:
//! "smallest fitting first" is a plain scan.

use std::collections::HashMap;
use std::sync::Arc;

use super::model::{AccessModes, Claim, Class, Volume};
use crate::contract::Phase;
use crate::disk::VolumeMode;
use crate::selector::{HOSTNAME_LABEL, Labels, NodeLabels};

use self::nodes::NodeTable;
pub use crate::fasthash::FastMap;

mod nodes;

pub type VolId = usize;
/// Dense id of a hostname label value within one snapshot.
pub type HostId = u32;

/// Attribute-class id that no PV has: a claim asking for an attributes class no PV carries.
pub const UNKNOWN_ATTRIBUTES: u32 = u32::MAX;

/// The PV fields the per-node scan reads, copied out of `Volume` and packed (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub capacity: u128,
    id: u32,
    /// Interned `spec.volumeAttributesClassName` (see `Snapshot::attributes_id`).
    pub attributes: u32,
    pub mode: VolumeMode,
    pub access: AccessModes,
    flags: u8,
}

const FREE: u8 = 1;
const CLAIMED: u8 = 2;
const COMING_BACK: u8 = 4;
const AFFINITY_IS_HOSTNAME: u8 = 8;

impl Slot {
    fn new(id: VolId, v: &Volume, attributes: u32) -> Slot {
        let free = v.claim_ref.is_none() && !v.deleting && v.phase == Phase::Available;
        let flags = [
            (free, FREE),
            (v.claim_ref.is_some(), CLAIMED),
            (v.coming_back(), COMING_BACK),
            (v.affinity.implied_by_hostname(), AFFINITY_IS_HOSTNAME),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .fold(0, |acc, (_, bit)| acc | bit);
        Slot {
            capacity: v.capacity,
            id: id as u32,
            attributes,
            mode: v.mode,
            access: v.access,
            flags,
        }
    }

    pub fn id(&self) -> VolId {
        self.id as VolId
    }

    /// No claimRef, no deletion timestamp, phase Available.
    pub fn is_free(&self) -> bool {
        self.flags & FREE != 0
    }

    /// Has a claimRef (to any claim).
    pub fn is_claimed(&self) -> bool {
        self.flags & CLAIMED != 0
    }

    /// See `Volume::coming_back`.
    pub fn coming_back(&self) -> bool {
        self.flags & COMING_BACK != 0
    }

    /// The affinity is exactly `kubernetes.io/hostname In [..]`: being listed under a node's host proves it.
    pub fn affinity_is_hostname(&self) -> bool {
        self.flags & AFFINITY_IS_HOSTNAME != 0
    }
}

/// The PVs of one class, by the host they are pinned to.
#[derive(Debug, Default)]
pub struct ClassIndex {
    /// `pinned[starts[h]..starts[h + 1]]` are the PVs pinned to host `h`, ascending by id.
    starts: Vec<u32>,
    pinned: Vec<Slot>,
    general: Vec<Slot>,
}

/// A node as a decision sees it: its labels, and its hostname's id for the pinned-PV index.
#[derive(Clone, Copy, Debug)]
pub struct NodeRef<'a> {
    labels: &'a dyn NodeLabels,
    pub host: Option<HostId>,
}

impl<'a> NodeRef<'a> {
    /// All the node's labels, for a PV affinity that the hostname index does not settle.
    pub fn labels(&self) -> &'a Labels {
        self.labels.all()
    }
}

#[derive(Debug, Default)]
pub struct Snapshot {
    /// Shared with the watch stores: a rebuild copies pointers, not models.
    volumes: Vec<Arc<Volume>>,
    by_name: HashMap<String, VolId>,
    by_class: HashMap<String, ClassIndex>,
    prebound: HashMap<String, Vec<VolId>>,
    claims: HashMap<String, Arc<Claim>>,
    classes: HashMap<String, Class>,
    nodes: NodeTable,
    hosts: FastMap<String, HostId>,
    attributes: HashMap<String, u32>,
}

/// One class's slots while the index is built: (host, slot) for pinned PVs, and the general ones.
type ClassSlots = (Vec<(HostId, Slot)>, Vec<Slot>);

fn intern(ids: &mut FastMap<String, HostId>, name: &str) -> HostId {
    if let Some(&id) = ids.get(name) {
        return id;
    }
    let id = ids.len() as HostId;
    ids.insert(name.to_string(), id);
    id
}

impl Snapshot {
    /// Models by value or shared (`Arc`): the extender's watch stores hand over shared ones, so a rebuild after a
    /// change copies pointers and builds only the indexes.
    pub fn new<L: Into<Arc<Labels>>>(
        volumes: impl IntoIterator<Item = impl Into<Arc<Volume>>>,
        claims: impl IntoIterator<Item = impl Into<Arc<Claim>>>,
        classes: impl IntoIterator<Item = Class>,
        nodes: impl IntoIterator<Item = (String, L)>,
    ) -> Snapshot {
        let mut volumes: Vec<Arc<Volume>> = volumes.into_iter().map(Into::into).collect();
        volumes.sort_by(|a, b| {
            a.capacity
                .cmp(&b.capacity)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut snap = Snapshot {
            claims: claims
                .into_iter()
                .map(|c| {
                    let c: Arc<Claim> = c.into();
                    (c.key(), c)
                })
                .collect(),
            classes: classes.into_iter().map(|c| (c.name.clone(), c)).collect(),
            ..Snapshot::default()
        };
        let nodes = nodes.into_iter().map(|(name, labels)| {
            let labels: Arc<Labels> = labels.into();
            let host = labels
                .get(HOSTNAME_LABEL)
                .map(|h| intern(&mut snap.hosts, h));
            (name, labels, host)
        });
        snap.nodes = NodeTable::new(nodes.collect());
        snap.attributes.insert(String::new(), 0);
        let mut building: HashMap<&str, ClassSlots> = HashMap::new();
        for (id, v) in volumes.iter().enumerate() {
            snap.by_name.insert(v.name.clone(), id);
            if let Some(r) = &v.claim_ref {
                snap.prebound
                    .entry(format!("{}/{}", r.namespace, r.name))
                    .or_default()
                    .push(id);
            }
            let next = snap.attributes.len() as u32;
            let attributes = *snap
                .attributes
                .entry(v.attributes_class.clone())
                .or_insert(next);
            let slot = Slot::new(id, v, attributes);
            let (pinned, general) = building.entry(v.class.as_str()).or_default();
            match v.affinity.hostnames() {
                Some(hosts) => {
                    pinned.extend(hosts.iter().map(|h| (intern(&mut snap.hosts, h), slot)));
                }
                None => general.push(slot),
            }
        }
        let host_count = snap.hosts.len();
        for (class, (pinned, general)) in building {
            let index = ClassIndex::build(host_count, pinned, general);
            snap.by_class.insert(class.to_string(), index);
        }
        snap.volumes = volumes;
        snap
    }

    pub fn volume(&self, id: VolId) -> &Volume {
        &self.volumes[id]
    }

    pub fn volume_by_name(&self, name: &str) -> Option<VolId> {
        self.by_name.get(name).copied()
    }

    /// PVs whose `claimRef` names `namespace/name` (UID not yet compared).
    pub fn prebound_to(&self, claim_key: &str) -> &[VolId] {
        self.prebound
            .get(claim_key)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Claim> {
        self.claims
            .get(&format!("{namespace}/{name}"))
            .map(Arc::as_ref)
    }

    pub fn class(&self, name: &str) -> Option<&Class> {
        self.classes.get(name)
    }

    pub fn node_labels(&self, name: &str) -> Option<&Labels> {
        self.nodes.get(name).map(|(labels, _)| labels)
    }

    /// A cached node by name, with its host id resolved when the snapshot was built.
    pub fn node(&self, name: &str) -> Option<NodeRef<'_>> {
        self.nodes
            .get(name)
            .map(|(labels, host)| NodeRef { labels, host })
    }

    /// A node known only by its labels (`Nodes` mode): its hostname is looked up here, once.
    pub fn node_from_labels<'a>(&self, labels: &'a dyn NodeLabels) -> NodeRef<'a> {
        let host = labels.hostname().and_then(|h| self.hosts.get(h).copied());
        NodeRef { labels, host }
    }

    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.names()
    }

    pub fn class_index(&self, class: &str) -> Option<&ClassIndex> {
        self.by_class.get(class)
    }

    /// The id `Slot::attributes` carries for this attributes class name, `UNKNOWN_ATTRIBUTES` when no PV has it.
    pub fn attributes_id(&self, name: &str) -> u32 {
        self.attributes
            .get(name)
            .copied()
            .unwrap_or(UNKNOWN_ATTRIBUTES)
    }

    /// PVs of `class` that may sit on `node`, smallest first. Node affinity is not yet checked.
    pub fn candidates<'a>(&'a self, class: &str, node: NodeRef) -> Candidates<'a> {
        ClassIndex::candidates(self.class_index(class), node.host)
    }

    pub fn counts(&self) -> [(&'static str, usize); 4] {
        [
            ("persistentvolumes", self.volumes.len()),
            ("persistentvolumeclaims", self.claims.len()),
            ("storageclasses", self.classes.len()),
            ("nodes", self.nodes.len()),
        ]
    }
}

impl ClassIndex {
    /// Groups `pinned` by host (a counting sort that keeps each host's slots in id order) behind `starts`.
    fn build(hosts: usize, pinned: Vec<(HostId, Slot)>, general: Vec<Slot>) -> ClassIndex {
        let mut starts = vec![0u32; hosts + 1];
        for (h, _) in &pinned {
            starts[*h as usize + 1] += 1;
        }
        for h in 0..hosts {
            starts[h + 1] += starts[h];
        }
        let mut next = starts.clone();
        let mut slots = vec![None; pinned.len()];
        for (h, slot) in pinned {
            let at = &mut next[h as usize];
            slots[*at as usize] = Some(slot);
            *at += 1;
        }
        ClassIndex {
            starts,
            pinned: slots.into_iter().flatten().collect(),
            general,
        }
    }

    /// The PVs pinned to `host`, smallest first.
    pub fn pinned(&self, host: HostId) -> &[Slot] {
        let h = host as usize;
        match (self.starts.get(h), self.starts.get(h + 1)) {
            (Some(&a), Some(&b)) => &self.pinned[a as usize..b as usize],
            _ => &[],
        }
    }

    /// PVs of the class that may sit on the node of `host`, smallest first (`index` from `class_index`, looked
    /// up once per claim rather than once per node).
    pub fn candidates(index: Option<&ClassIndex>, host: Option<HostId>) -> Candidates<'_> {
        let Some(index) = index else {
            return Candidates { a: &[], b: &[] };
        };
        Candidates {
            a: host.map(|h| index.pinned(h)).unwrap_or(&[]),
            b: &index.general,
        }
    }
}

/// Merge of two slot lists ascending by id, so candidates stay ordered by capacity.
#[derive(Clone, Debug)]
pub struct Candidates<'a> {
    a: &'a [Slot],
    b: &'a [Slot],
}

impl<'a> Iterator for Candidates<'a> {
    type Item = &'a Slot;

    fn next(&mut self) -> Option<&'a Slot> {
        let take_a = match (self.a.first(), self.b.first()) {
            (Some(x), Some(y)) => x.id <= y.id,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let list = if take_a { &mut self.a } else { &mut self.b };
        let (head, rest) = list.split_first()?;
        *list = rest;
        Some(head)
    }
}

#[cfg(test)]
mod tests;
