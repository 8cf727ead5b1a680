//! Storage two volumes would share: two mounts of one filesystem whose roots nest (equal, or one inside the other,
//! as a bind mount of a sub-directory is), or two entries for one block device. A wipe of one reaches the other's
//! data, and publishing both hands one tenant's files to another.
//!
//! What is published decides, never an entry's name:
//! - a disk without a PV whose storage overlaps what any PV of this node exposes or recorded (same device, any
//!   mount root, whichever phase, whether or not that PV's disk is still at its own path) is held back with
//!   `OverlappingStorage`, and the PV gets an Event once;
//! - two disks without a PV that overlap each other are both held back: nothing says which one is the disk;
//! - a PV of ours whose storage overlaps another PV's is never wiped, and an unclaimed one is withdrawn.
//!
//! A PV's footprint is the disk at its path when that disk is its own (identity `Same`), else what it recorded: a
//! disk missing from its path may still be mounted elsewhere (the very case of a bind mount of its sub-directory).

use std::path::{Path, PathBuf};

use super::{Planner, PvView};
use crate::contract::DevId;
use crate::disk::{Disk, VolumeMode};
use crate::fasthash::FastMap;
use crate::plan::identity::{self, IdentityCheck};
use crate::plan::state::Condition;
use crate::plan::{EventType, HoldReason, Reason};

/// Who exposes a piece of storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holder<'a> {
    /// The PV at this index of the pass's PVs.
    Pv(usize),
    /// The disk found at this path.
    Disk(&'a Path),
}

#[derive(Clone, Debug)]
struct Footprint<'a> {
    /// The mount root inside the filesystem (`/` for a whole filesystem and for block devices).
    root: PathBuf,
    holder: Holder<'a>,
}

/// The pass's PVs and disks by the device number their storage lives on.
#[derive(Default)]
pub(super) struct Footprints<'a> {
    by_dev: FastMap<DevId, Vec<Footprint<'a>>>,
}

impl<'a> Footprints<'a> {
    pub(super) fn new(
        pvs: &[PvView],
        disks: &std::collections::BTreeMap<&'a Path, &'a Disk>,
    ) -> Self {
        let mut out = Footprints::default();
        for (i, pv) in pvs.iter().enumerate() {
            if let Some((dev, root)) = pv_footprint(pv, disks.get(pv.path.as_path()).copied()) {
                out.push(dev, root, Holder::Pv(i));
            }
        }
        for (path, disk) in disks {
            if let Some(dev) = disk.identity.dev_id {
                out.push(
                    dev,
                    root_of(disk.mode, disk.mount_root.as_deref()),
                    Holder::Disk(path),
                );
            }
        }
        out
    }

    fn push(&mut self, dev: DevId, root: PathBuf, holder: Holder<'a>) {
        self.by_dev
            .entry(dev)
            .or_default()
            .push(Footprint { root, holder });
    }

    /// Every holder whose storage on `dev` nests with `root`.
    fn nesting(&self, dev: DevId, root: &Path) -> impl Iterator<Item = Holder<'a>> + '_ {
        let root = root.to_path_buf();
        self.by_dev
            .get(&dev)
            .into_iter()
            .flatten()
            .filter(move |f| f.root.starts_with(&root) || root.starts_with(&f.root))
            .map(|f| f.holder)
    }
}

/// The storage a PV exposes: the disk at its path when it is that PV's disk, else what the PV recorded.
fn pv_footprint(pv: &PvView, disk: Option<&Disk>) -> Option<(DevId, PathBuf)> {
    if let Some(disk) = disk
        && disk.mode == pv.mode
        && identity::check(pv.mode, pv.recorded.as_ref(), disk) == IdentityCheck::Same
        && let Some(dev) = disk.identity.dev_id
    {
        return Some((dev, root_of(disk.mode, disk.mount_root.as_deref())));
    }
    let recorded = pv.recorded.as_ref()?;
    let dev = recorded.identity.dev_id?;
    Some((dev, root_of(pv.mode, recorded.mount_root.as_deref())))
}

/// A mount root as a path; a block device is all of its storage.
fn root_of(mode: VolumeMode, mount_root: Option<&str>) -> PathBuf {
    match (mode, mount_root) {
        (VolumeMode::Filesystem, Some(root)) => PathBuf::from(root),
        _ => PathBuf::from("/"),
    }
}

/// How an overlap is shown to the operator: the device and, for a sub-directory, the directory.
fn shown(dev: DevId, root: &Path) -> String {
    match root == Path::new("/") {
        true => format!("device {dev}"),
        false => format!("device {dev} (directory {})", root.display()),
    }
}

impl Planner<'_> {
    /// Holds back a disk without a PV whose storage overlaps a PV's or another found disk's; the PV it overlaps
    /// gets an Event. True when held.
    pub(super) fn held_for_overlap(&mut self, disk: &Disk) -> bool {
        let Some(dev) = disk.identity.dev_id else {
            return false;
        };
        let root = root_of(disk.mode, disk.mount_root.as_deref());
        let mut pv = None;
        let mut other = None;
        for holder in self.footprints.nesting(dev, &root) {
            match holder {
                Holder::Pv(i) if self.pv(i).path != disk.host_path => {
                    pv = pv.or(Some(i));
                }
                Holder::Disk(path) if path != disk.host_path => {
                    self.reads(path);
                    other = other.or(Some(path));
                }
                _ => {}
            }
        }
        let what = shown(dev, &root);
        if let Some(i) = pv {
            let holder = self.pv(i).clone();
            let message = format!(
                "exposes {what}, storage that PV {} ({:?}, {}) exposes too: it is never published or wiped while \
                 that PV exists; remove this mount",
                holder.pv_ref.name,
                holder.phase,
                holder.path.display()
            );
            self.hold(disk, HoldReason::OverlappingStorage, message);
            let message = format!(
                "{} exposes {what}, which overlaps this PV's storage: it is not published, and this PV's disk is \
                 not wiped while both exist; remove that mount",
                disk.host_path.display()
            );
            self.condition(
                &holder,
                Condition::StorageOverlap,
                EventType::Warning,
                Reason::OverlappingStorage,
                message,
            );
            return true;
        }
        if let Some(path) = other {
            let message = format!(
                "exposes {what}, storage that {} exposes too: neither is published while both are there; remove \
                 one of the two mounts",
                path.display()
            );
            self.hold(disk, HoldReason::OverlappingStorage, message);
            return true;
        }
        false
    }

    /// Another PV whose storage overlaps this PV's (its disk at its path, or what it recorded).
    pub(super) fn overlapping_pv(&self, pv: &PvView, disk: Option<&Disk>) -> Option<PvView> {
        let own = pv_footprint(pv, disk);
        let recorded = pv.recorded.as_ref().and_then(|r| {
            Some((
                r.identity.dev_id?,
                root_of(pv.mode, r.mount_root.as_deref()),
            ))
        });
        let live =
            disk.and_then(|d| Some((d.identity.dev_id?, root_of(d.mode, d.mount_root.as_deref()))));
        [own, recorded, live]
            .into_iter()
            .flatten()
            .flat_map(|(dev, root)| self.footprints.nesting(dev, &root).collect::<Vec<_>>())
            .find_map(|holder| match holder {
                Holder::Pv(i) if self.pv(i).pv_ref.uid != pv.pv_ref.uid => Some(self.pv(i).clone()),
                Holder::Disk(path) if path != pv.path => self
                    .pvs_at(path)
                    .find(|other| other.pv_ref.uid != pv.pv_ref.uid)
                    .cloned(),
                _ => None,
            })
    }

    /// A PV of ours sharing storage with another PV: no wipe; an unclaimed one is withdrawn so no claim binds it.
    /// True when the overlap decided.
    pub(super) fn pv_overlaps(&mut self, pv: &PvView, disk: Option<&Disk>) -> bool {
        let Some(other) = self.overlapping_pv(pv, disk) else {
            return false;
        };
        let path = pv.path.display();
        if pv.is_unclaimed() {
            let message = format!(
                "the storage at {path} overlaps that of PV {} ({}): this unclaimed PV is withdrawn so no claim gets \
                 another tenant's files",
                other.pv_ref.name,
                other.path.display()
            );
            self.event(
                &pv.pv_ref,
                EventType::Warning,
                Reason::OverlappingStorage,
                message,
            );
            self.delete(pv);
            return true;
        }
        let message = format!(
            "the storage at {path} overlaps that of PV {} ({}): it is not wiped while both exist; remove the mount \
             that should not be there",
            other.pv_ref.name,
            other.path.display()
        );
        self.condition(
            pv,
            Condition::StorageOverlap,
            EventType::Warning,
            Reason::OverlappingStorage,
            message,
        );
        true
    }
}
