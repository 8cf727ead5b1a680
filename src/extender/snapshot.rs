//! An immutable, indexed view of the cluster at one moment: every decision reads one `Snapshot` and nothing else.
//!
//! ```text
//!  volumes: Vec<Volume> sorted by (capacity, name)  <── VolId indexes into it
//!  by_class: class ──> { by_host: hostname label value ──> [VolId ascending], general: [VolId ascending] }
//!  prebound: namespace/claim ──> [VolId]   (PVs whose claimRef names the claim)
//!  claims: namespace/name ──> Claim      classes: name ──> Class      nodes: name ──> labels
//! ```
//!
//! Local PVs pin themselves to one node with a `kubernetes.io/hostname In [..]` affinity; those are found through
//! `by_host`. PVs with any other affinity land in `general` and are checked against every node. Because `volumes`
//! is sorted by capacity, every id list is too: "smallest fitting first" is a plain scan.

use std::collections::HashMap;

use super::labels::{HOSTNAME_LABEL, Labels};
use super::model::{Claim, Class, Volume};

pub type VolId = usize;

/// The PVs of one class, by the hostname they are pinned to.
#[derive(Debug, Default)]
pub struct ClassIndex {
    by_host: HashMap<String, Vec<VolId>>,
    general: Vec<VolId>,
}

#[derive(Debug, Default)]
pub struct Snapshot {
    volumes: Vec<Volume>,
    by_name: HashMap<String, VolId>,
    by_class: HashMap<String, ClassIndex>,
    prebound: HashMap<String, Vec<VolId>>,
    claims: HashMap<String, Claim>,
    classes: HashMap<String, Class>,
    nodes: HashMap<String, Labels>,
}

impl Snapshot {
    pub fn new(
        volumes: impl IntoIterator<Item = Volume>,
        claims: impl IntoIterator<Item = Claim>,
        classes: impl IntoIterator<Item = Class>,
        nodes: impl IntoIterator<Item = (String, Labels)>,
    ) -> Snapshot {
        let mut volumes: Vec<Volume> = volumes.into_iter().collect();
        volumes.sort_by(|a, b| {
            a.capacity
                .cmp(&b.capacity)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut snap = Snapshot {
            claims: claims.into_iter().map(|c| (c.key(), c)).collect(),
            classes: classes.into_iter().map(|c| (c.name.clone(), c)).collect(),
            nodes: nodes.into_iter().collect(),
            ..Snapshot::default()
        };
        for (id, v) in volumes.iter().enumerate() {
            snap.by_name.insert(v.name.clone(), id);
            if let Some(r) = &v.claim_ref {
                snap.prebound
                    .entry(format!("{}/{}", r.namespace, r.name))
                    .or_default()
                    .push(id);
            }
            let index = snap.by_class.entry(v.class.clone()).or_default();
            match v.affinity.hostnames() {
                Some(hosts) => {
                    for host in hosts {
                        index.by_host.entry(host).or_default().push(id);
                    }
                }
                None => index.general.push(id),
            }
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
        self.claims.get(&format!("{namespace}/{name}"))
    }

    pub fn class(&self, name: &str) -> Option<&Class> {
        self.classes.get(name)
    }

    pub fn node_labels(&self, name: &str) -> Option<&Labels> {
        self.nodes.get(name)
    }

    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    pub fn class_index(&self, class: &str) -> Option<&ClassIndex> {
        self.by_class.get(class)
    }

    /// PVs of `class` that may sit on a node with these labels, smallest first. Node affinity is not yet checked.
    pub fn candidates<'a>(
        &'a self,
        class: &str,
        node: &Labels,
    ) -> impl Iterator<Item = VolId> + 'a {
        ClassIndex::candidates(self.class_index(class), node)
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
    /// PVs of the class that may sit on a node with these labels, smallest first (`index` from `class_index`,
    /// looked up once per claim rather than once per node).
    pub fn candidates<'a>(
        index: Option<&'a ClassIndex>,
        node: &Labels,
    ) -> impl Iterator<Item = VolId> + 'a {
        let host = node.get(HOSTNAME_LABEL);
        let pinned = index
            .and_then(|i| host.and_then(|h| i.by_host.get(h)))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let general = index.map(|i| i.general.as_slice()).unwrap_or(&[]);
        MergeAscending {
            a: pinned,
            b: general,
        }
    }
}

/// Merge of two ascending id lists, so candidates stay ordered by capacity.
struct MergeAscending<'a> {
    a: &'a [VolId],
    b: &'a [VolId],
}

impl Iterator for MergeAscending<'_> {
    type Item = VolId;

    fn next(&mut self) -> Option<VolId> {
        let take_a = match (self.a.first(), self.b.first()) {
            (Some(x), Some(y)) => x <= y,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let (head, rest) = if take_a {
            self.a.split_first()?
        } else {
            self.b.split_first()?
        };
        if take_a {
            self.a = rest;
        } else {
            self.b = rest;
        }
        Some(*head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extender::fixtures::{node, pv};

    #[test]
    fn candidates_merge_pinned_and_general_pvs_by_capacity() {
        let snap = Snapshot::new(
            [
                pv("big")
                    .on_node("n1")
                    .capacity("100Gi")
                    .class("local")
                    .build(),
                pv("small")
                    .on_node("n1")
                    .capacity("1Gi")
                    .class("local")
                    .build(),
                pv("anywhere").capacity("5Gi").class("local").build(),
                pv("other-node")
                    .on_node("n2")
                    .capacity("2Gi")
                    .class("local")
                    .build(),
                pv("other-class")
                    .on_node("n1")
                    .capacity("2Gi")
                    .class("fast")
                    .build(),
            ],
            [],
            [],
            [node("n1").build()],
        );
        let labels = snap
            .node_labels("n1")
            .expect("n1 is in the snapshot")
            .clone();
        let names: Vec<&str> = snap
            .candidates("local", &labels)
            .map(|id| snap.volume(id).name.as_str())
            .collect();
        assert_eq!(names, ["small", "anywhere", "big"]);
    }
}
