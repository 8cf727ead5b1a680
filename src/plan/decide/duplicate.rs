//! Two disks with one identity (issue 39, point 2): a block copy of a filesystem (same UUID), the agent's volume id
//! copied with the data onto another filesystem (`cp -a`, `rsync -X`), a cloned VM image, an LVM snapshot, two
//! devices reporting one WWN or serial. An identity that two disks answer to proves neither, so:
//! - a disk without a PV whose strong id equals that of a PV of this node elsewhere, or of another disk found on
//!   this node, is never published (`DuplicateIdentity`, an Event on the PV);
//! - a Released PV whose disk has a twin is never wiped;
//! - both are handled again as soon as the twin is gone.
//!
//! Strong ids compared: the agent's volume id; the filesystem UUID with nesting mount roots (disjoint directories
//! of one filesystem share its UUID by design, and are told apart by their volume ids); WWN; serial. A disk that
//! moved (its PV's own path is empty) is `held_elsewhere`'s case, decided before this one.

use std::path::PathBuf;

use super::{Planner, PvView};
use crate::disk::{Disk, DiskIdentity, VolumeMode};
use crate::fasthash::FastMap;
use crate::plan::identity::Recorded;
use crate::plan::state::Condition;
use crate::plan::{EventType, HoldReason, Reason};

/// One strong id: its kind and value.
type Id = (&'static str, String);

/// The found disks by strong id.
#[derive(Default)]
pub(super) struct Twins<'a> {
    by_id: FastMap<Id, Vec<&'a Disk>>,
}

impl<'a> Twins<'a> {
    pub(super) fn new<'d>(disks: impl Iterator<Item = &'d &'a Disk>) -> Self
    where
        'a: 'd,
    {
        let mut out = Twins::default();
        for disk in disks {
            for id in strong_ids(disk.mode, &disk.identity) {
                out.by_id.entry(id).or_default().push(*disk);
            }
        }
        out
    }
}

/// The strong ids of an identity for a volume mode (a block volume's filesystem is its tenant's).
fn strong_ids(mode: VolumeMode, id: &DiskIdentity) -> Vec<Id> {
    let mut ids = Vec::new();
    let mut push = |kind: &'static str, value: &Option<String>| {
        if let Some(value) = value.as_ref().filter(|v| !v.is_empty()) {
            ids.push((kind, value.clone()));
        }
    };
    if mode == VolumeMode::Filesystem {
        push("volume id", &id.volume_id);
        push("filesystem UUID", &id.fs_uuid);
    }
    push("WWN", &id.wwn);
    push("serial", &id.serial);
    ids
}

fn root(mount_root: Option<&str>) -> PathBuf {
    PathBuf::from(mount_root.unwrap_or("/"))
}

/// Whether two views share the id `kind`: for a filesystem UUID only when their roots nest.
fn same_storage(kind: &str, a: Option<&str>, b: Option<&str>) -> bool {
    if kind != "filesystem UUID" {
        return true;
    }
    let (a, b) = (root(a), root(b));
    a.starts_with(&b) || b.starts_with(&a)
}

/// A twin found for a disk: what it is and which id it shares.
struct Twin {
    what: String,
    pv: Option<PvView>,
    id: Id,
}

impl Planner<'_> {
    /// The PV elsewhere, or the other found disk, that answers to one of `disk`'s strong ids. `own` is the PV
    /// whose disk `disk` is (skipped), if any.
    fn twin_of(&self, disk: &Disk, own: Option<&PvView>) -> Option<Twin> {
        let ids = strong_ids(disk.mode, &disk.identity);
        let not_own = |pv: &PvView| own.is_none_or(|o| o.pv_ref.uid != pv.pv_ref.uid);
        for i in self.index.sharing_an_id(disk) {
            let pv = self.pv(i);
            if pv.path == disk.host_path || pv.deleting || !not_own(pv) || pv.mode != disk.mode {
                continue;
            }
            let Some(rec) = &pv.recorded else { continue };
            if let Some(id) = shared(&ids, disk, rec, pv.mode) {
                let what = format!(
                    "PV {} ({:?}, {})",
                    pv.pv_ref.name,
                    pv.phase,
                    pv.path.display()
                );
                return Some(Twin {
                    what,
                    pv: Some(pv.clone()),
                    id,
                });
            }
        }
        for id in &ids {
            let others = self.twins.by_id.get(id).into_iter().flatten();
            for other in others {
                self.reads(&other.host_path);
                if other.host_path == disk.host_path
                    || !same_storage(
                        id.0,
                        disk.mount_root.as_deref(),
                        other.mount_root.as_deref(),
                    )
                {
                    continue;
                }
                let holder = self
                    .pvs_at(&other.host_path)
                    .find(|pv| not_own(pv))
                    .cloned();
                let what = format!("the disk at {}", other.host_path.display());
                return Some(Twin {
                    what,
                    pv: holder,
                    id: id.clone(),
                });
            }
        }
        None
    }

    /// Holds back a disk without a PV that has a twin. True when held.
    pub(super) fn held_as_duplicate(&mut self, disk: &Disk) -> bool {
        let Some(twin) = self.twin_of(disk, None) else {
            return false;
        };
        let (kind, value) = &twin.id;
        let message = format!(
            "{kind} {value} is also that of {}: two disks with one identity prove neither, so neither is published \
             or wiped while both are there; give the copy a new identity or remove it",
            twin.what
        );
        self.hold(disk, HoldReason::DuplicateIdentity, message);
        if let Some(pv) = twin.pv {
            let message = format!(
                "the disk at {} answers to this PV's {kind} {value}: a copy of this PV's disk; it is not published, \
                 and this PV's disk is not wiped while both are there",
                disk.host_path.display()
            );
            self.condition(
                &pv,
                Condition::DuplicateIdentity,
                EventType::Warning,
                Reason::DuplicateIdentity,
                message,
            );
        }
        true
    }

    /// A Released PV's disk that has a twin is not wiped: true when refused.
    pub(super) fn wipe_refused_for_twin(&mut self, pv: &PvView, disk: &Disk) -> bool {
        let Some(twin) = self.twin_of(disk, Some(pv)) else {
            return false;
        };
        let (kind, value) = &twin.id;
        let message = format!(
            "not wiping {}: {kind} {value} is also that of {}, so it cannot prove which disk is here; the PV stays \
             Released until the copy is gone",
            pv.path.display(),
            twin.what
        );
        self.condition(
            pv,
            Condition::DuplicateIdentity,
            EventType::Warning,
            Reason::DuplicateIdentity,
            message,
        );
        true
    }
}

/// The first strong id of `ids` (a disk's) that a PV recorded, for the same storage.
fn shared(ids: &[Id], disk: &Disk, rec: &Recorded, mode: VolumeMode) -> Option<Id> {
    let recorded = strong_ids(mode, &rec.identity);
    ids.iter()
        .find(|id| {
            recorded.contains(id)
                && same_storage(id.0, disk.mount_root.as_deref(), rec.mount_root.as_deref())
        })
        .cloned()
}
