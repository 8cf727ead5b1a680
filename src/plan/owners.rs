//! Which PVs are the agent's own, and which other PVs reach its disks.
//!
//! Labels, annotations and names can be copied by anyone who may create PVs, so none of them proves that a PV is
//! ours. A PV is ours when its UID is recorded in the node-local ledger ([`Owners`](super::Owners)): written from
//! the create response when the agent creates a PV, and when it adopts one. Two narrow doors let a PV the agent did
//! not create become ours, both only for a PV that is the one PV at its exact path:
//!
//! - adoption of a reference-provisioner PV of this node (migration);
//! - the one-time take-over of this node's labelled PVs when the ledger has never recorded owners (an upgrade from
//!   a release that did not record them, or a node whose state dir was emptied).
//!
//! Every other PV is foreign. A foreign PV "reaches" a disk when the kubelet of this node could mount it (its node
//! affinity admits this node) and its path, normalised, is the disk's path, inside it, or encloses it, or it
//! records the disk's identity. Paths are compared lexically: a path through a symlink is not resolved.

use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::PersistentVolume;

use super::NodeFacts;
use super::identity::{self, IdentityCheck, Recorded};
use super::pv::PvRef;
use crate::contract::NODE_LABEL;
use crate::disk::Disk;
use crate::selector::NodeAffinity;

/// `path` made absolute-lexical: empty and `.` components dropped, `..` removes the component before it.
/// `None` for a relative path.
pub fn normalise(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether `path` is spelled exactly as the agent writes PV paths: absolute, no `.` or `..` component, no repeated
/// or trailing `/`.
pub fn is_canonical(path: &str) -> bool {
    match path.strip_prefix('/') {
        Some(rest) if !rest.is_empty() => rest.split('/').all(|c| !matches!(c, "" | "." | "..")),
        _ => false,
    }
}

/// Whether one of two normalised paths lies within the other (or they are the same).
pub fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The host path a PV exposes: `spec.local.path` or `spec.hostPath.path`, as written.
pub fn raw_path(pv: &PersistentVolume) -> Option<&str> {
    let spec = pv.spec.as_ref()?;
    spec.local
        .as_ref()
        .map(|l| l.path.as_str())
        .or_else(|| spec.host_path.as_ref().map(|h| h.path.as_str()))
}

/// Whether the kubelet on this node could mount `pv`: no required node affinity, or one that admits this node.
/// NB: terms with `matchFields` count as admitting (the scheduler's label-only matching never selects them, but a
/// pod bound by hand could still use them).
pub fn mountable_here(pv: &PersistentVolume, node: &NodeFacts) -> bool {
    let affinity = pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref());
    let by_fields = affinity.and_then(|a| a.required.as_ref()).is_some_and(|r| {
        r.node_selector_terms
            .iter()
            .any(|t| t.match_fields.as_ref().is_some_and(|f| !f.is_empty()))
    });
    let mut labels = node.labels.clone();
    if let Some(hostname) = &node.hostname_label {
        labels
            .entry(super::pv::HOSTNAME_LABEL.to_string())
            .or_insert_with(|| hostname.clone());
    }
    by_fields || NodeAffinity::compile(affinity).matches(&labels)
}

/// A PV that is not ours, with what matters about it to our disks.
#[derive(Clone, Debug)]
pub struct OtherPv {
    pub pv_ref: PvRef,
    /// The exposed host path, normalised; `None` when it has none (not a local or hostPath volume).
    pub path: Option<PathBuf>,
    /// The disk identity its annotations record (copied from one of ours, perhaps).
    pub recorded: Option<Recorded>,
    /// Carries `localpv.io/node=<this node>`.
    pub labelled: bool,
    pub mountable: bool,
}

impl OtherPv {
    pub fn read(pv: &PersistentVolume, node: &NodeFacts) -> OtherPv {
        let meta = &pv.metadata;
        let annotations = meta.annotations.clone().unwrap_or_default();
        OtherPv {
            pv_ref: PvRef {
                name: meta.name.clone().unwrap_or_default(),
                uid: meta.uid.clone().unwrap_or_default(),
                resource_version: meta.resource_version.clone().unwrap_or_default(),
            },
            path: raw_path(pv).and_then(normalise),
            recorded: identity::recorded(&annotations),
            labelled: meta.labels.as_ref().and_then(|l| l.get(NODE_LABEL)) == Some(&node.name),
            mountable: mountable_here(pv, node),
        }
    }

    /// Whether this PV gives access to `disk`: mountable here, and its path overlaps the disk's or it records the
    /// disk's identity.
    pub fn reaches(&self, disk: &Disk) -> bool {
        self.mountable
            && (self.reaches_path(&disk.host_path)
                || identity::check(disk.mode, self.recorded.as_ref(), disk) == IdentityCheck::Same)
    }

    /// Whether this PV, mountable here, exposes `path` or a directory enclosing or inside it.
    pub fn reaches_path(&self, path: &Path) -> bool {
        self.mountable
            && self.path.as_deref().is_some_and(|p| {
                normalise(&path.to_string_lossy()).is_some_and(|d| overlaps(p, &d))
            })
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::plain("/mnt/disks/vol1", Some("/mnt/disks/vol1"))]
    #[case::dot("/mnt/disks/./vol1", Some("/mnt/disks/vol1"))]
    #[case::double_slash("/mnt/disks//vol1", Some("/mnt/disks/vol1"))]
    #[case::trailing_slash("/mnt/disks/vol1/", Some("/mnt/disks/vol1"))]
    #[case::dot_dot("/mnt/disks/x/../vol1", Some("/mnt/disks/vol1"))]
    #[case::above_root("/../mnt", Some("/mnt"))]
    #[case::relative("mnt/disks/vol1", None)]
    fn paths_are_normalised_lexically(#[case] raw: &str, #[case] want: Option<&str>) {
        assert_eq!(normalise(raw), want.map(PathBuf::from));
    }

    #[rstest]
    #[case("/mnt/disks/vol1", true)]
    #[case("/mnt/disks/./vol1", false)]
    #[case("/mnt/disks//vol1", false)]
    #[case("/mnt/disks/vol1/", false)]
    #[case("/mnt/disks/x/../vol1", false)]
    #[case("/", false)]
    #[case("vol1", false)]
    fn only_paths_spelled_as_the_agent_writes_them_are_canonical(
        #[case] raw: &str,
        #[case] want: bool,
    ) {
        assert_eq!(is_canonical(raw), want);
    }

    #[rstest]
    #[case::same("/mnt/disks/vol1", "/mnt/disks/vol1", true)]
    #[case::enclosing_dir("/mnt/disks", "/mnt/disks/vol1", true)]
    #[case::inside("/mnt/disks/vol1/sub", "/mnt/disks/vol1", true)]
    #[case::sibling("/mnt/disks/vol10", "/mnt/disks/vol1", false)]
    #[case::elsewhere("/srv/data", "/mnt/disks/vol1", false)]
    fn paths_overlap_when_one_encloses_the_other(
        #[case] a: &str,
        #[case] b: &str,
        #[case] want: bool,
    ) {
        assert_eq!(overlaps(Path::new(a), Path::new(b)), want);
    }
}
