//! Which PVs and disks a decision about one path may read besides those at its own path: the one description of
//! the relation, from which both the whole planner's lookups and the incremental planner's re-planning derive.
//!
//! ```text
//!  pv_links(PV), disk_links(disk) ──> Link: a shared id, a PV name, a ledger key
//!        ├─> PvsByLink: the whole planner finds other PVs only through a link of what it decides
//!        ├─> incremental: a change at one path plans again every path sharing a link with it
//!        └─> Reach (debug builds): every read of another path, or of a ledger key, is checked against the links
//! ```
//!
//! A decision about the PVs and the disk at a path may read: anything at that path; another path only when the
//! two share a [`Link`]; the ledger only at a key its path links. The planner reads other PVs only through
//! [`PvsByLink`], which answers only links; every other cross-path read (the disk at another PV's path, a footprint,
//! a twin disk, a ledger entry) goes through a planner accessor that asks [`Reach`] in debug builds. So a new rule
//! that reads something the incremental planner does not follow fails every test that exercises it (a debug
//! assertion), instead of leaving a stale plan that only a random world might show.

use std::path::{Path, PathBuf};

use super::Inputs;
use super::identity;
use super::pv::{self, PvView};
use crate::disk::Disk;
use crate::fasthash::{FastMap, FastSet};

/// What relates items at different paths.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// An id `identity::match_keys` gives (a moved disk is held by its PV elsewhere; twins share a strong id; one
    /// device's footprints share its device number).
    Id(&'static str, String),
    /// A PV's name, and the name a disk's PV would get (a name taken by a PV at another path).
    Name(String),
    /// A disk ledger key (one key read or written by several items).
    Ledger(String),
}

/// The links of a found disk.
pub fn disk_links(inputs: &Inputs<'_>, disk: &Disk) -> Vec<Link> {
    let mut links: Vec<Link> = identity::match_keys(&disk.identity)
        .map(|(field, value)| Link::Id(field, value))
        .collect();
    links.push(Link::Name(pv::pv_name(
        inputs.config,
        &inputs.node.name,
        disk,
    )));
    links.push(Link::Ledger(identity::disk_key(disk)));
    links.push(Link::Ledger(path_key(disk.mode, &disk.host_path)));
    links
}

/// The links of a PV: its name, and what it recorded (ids, ledger key).
pub fn pv_links(view: &PvView) -> Vec<Link> {
    let mut links = pv_lookup_links(view);
    if let Some(rec) = &view.recorded {
        let key = identity::ledger_key(
            view.mode,
            &rec.identity,
            rec.mount_root.as_deref(),
            &view.path,
        );
        links.push(Link::Ledger(key));
    }
    links.push(Link::Ledger(path_key(view.mode, &view.path)));
    links
}

/// The links another decision finds a PV by (its name and recorded ids): `pv_links` without the ledger keys.
fn pv_lookup_links(view: &PvView) -> Vec<Link> {
    let mut links = vec![Link::Name(view.pv_ref.name.clone())];
    if let Some(rec) = &view.recorded {
        links.extend(
            identity::match_keys(&rec.identity).map(|(field, value)| Link::Id(field, value)),
        );
    }
    links
}

/// The ledger key of whatever is at a path when nothing identifies it.
fn path_key(mode: crate::disk::VolumeMode, path: &Path) -> String {
    identity::ledger_key(mode, &Default::default(), None, path)
}

/// The pass's PVs by path and by the links that find them (indices in the pass's order), so placing each disk is
/// not a scan of every PV. Only ids and names are indexed: no decision looks a PV up by ledger key.
#[derive(Default)]
pub struct PvsByLink {
    at_path: FastMap<PathBuf, Vec<usize>>,
    linked: FastMap<Link, Vec<usize>>,
}

impl PvsByLink {
    pub fn new(pvs: &[PvView]) -> PvsByLink {
        let mut index = PvsByLink::default();
        for (i, pv) in pvs.iter().enumerate() {
            index.at_path.entry(pv.path.clone()).or_default().push(i);
            for link in pv_lookup_links(pv) {
                index.linked.entry(link).or_default().push(i);
            }
        }
        index
    }

    /// Indices of the PVs at `path` (compared as paths are: component by component).
    pub fn at_path(&self, path: &Path) -> &[usize] {
        self.at_path.get(path).map_or(&[], Vec::as_slice)
    }

    /// Indices, in order, of the PVs carrying `link`.
    pub fn linked(&self, link: &Link) -> &[usize] {
        self.linked.get(link).map_or(&[], Vec::as_slice)
    }

    /// Indices, in order, of every PV that shares one of the ids `disk` carries: the only PVs that
    /// `identity::may_be_same` can match with it.
    pub fn sharing_an_id(&self, disk: &Disk) -> Vec<usize> {
        let mut found: Vec<usize> = identity::match_keys(&disk.identity)
            .flat_map(|(field, value)| self.linked(&Link::Id(field, value)).iter().copied())
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }
}

/// Every path's links (its disk's and its PVs'), to check a read of another path against (debug builds).
#[derive(Default)]
pub struct Reach {
    at: FastMap<PathBuf, FastSet<Link>>,
}

impl Reach {
    pub fn new<'p>(
        inputs: &Inputs<'_>,
        pvs: &[PvView],
        disks: impl Iterator<Item = &'p Disk>,
    ) -> Reach {
        let mut reach = Reach::default();
        for pv in pvs {
            reach
                .at
                .entry(pv.path.clone())
                .or_default()
                .extend(pv_links(pv));
        }
        for disk in disks {
            let links = disk_links(inputs, disk);
            reach
                .at
                .entry(disk.host_path.clone())
                .or_default()
                .extend(links);
        }
        reach
    }

    /// Whether a decision at `from` may read what is at `to`: the same path, or a link both carry.
    pub fn reaches(&self, from: &Path, to: &Path) -> bool {
        if from == to {
            return true;
        }
        match (self.at.get(from), self.at.get(to)) {
            (Some(a), Some(b)) => a.iter().any(|link| b.contains(link)),
            _ => false,
        }
    }

    /// Whether a decision at `from` may read the ledger at `key`: its path links that key.
    pub fn reads_key(&self, from: &Path, key: &str) -> bool {
        self.at
            .get(from)
            .is_some_and(|links| links.contains(&Link::Ledger(key.to_string())))
    }
}
