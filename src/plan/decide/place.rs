//! Found disks without a PV: published, wiped first, or held back with a reason.

use super::{Planner, SOON, process_path};
use crate::disk::{Disk, VolumeMode};
use crate::plan::identity;
use crate::plan::pv::{NewPv, PvView, pv_name};
use crate::plan::relation::Link;
use crate::plan::state::{Condition, DiskState};
use crate::plan::{Action, ClassFacts, EventType, HoldReason, Reason, WipeOrder};

impl Planner<'_> {
    pub(super) fn place_disk(&mut self, disk: &Disk) {
        let Some(class) = self.class_by_name(&disk.class) else {
            return;
        };
        let at_path: Vec<&PvView> = self.pvs_at(&disk.host_path).collect();
        if !at_path.is_empty() {
            if at_path
                .iter()
                .all(|pv| pv.deleting || self.deleted.contains(&pv.pv_ref.uid))
            {
                self.hold(
                    disk,
                    HoldReason::AwaitingDeletion,
                    "the PV at this path is being deleted".into(),
                );
                self.requeue(SOON);
            }
            return;
        }
        if let Some(other) = self.foreign_on(disk) {
            let message = format!(
                "PV {}, which localpv did not create or adopt, reaches this disk: nothing is published or wiped \
                 while it exists",
                other.pv_ref.name
            );
            self.hold(disk, HoldReason::HeldByAnotherPv, message);
            return;
        }
        if self.held_elsewhere(disk)
            || self.held_for_overlap(disk)
            || self.held_as_duplicate(disk)
            || self.held_unhealthy(disk)
            || self.held_cordoned(disk)
            || self.held_in_use(disk)
            || !self.identified(disk, class)
        {
            return;
        }
        let key = identity::disk_key(disk);
        match (self.ledger(&key), class.config.wipe_on_first_discovery) {
            (Some(DiskState::Dirty), _) => self.wipe_unpublished(
                disk,
                class,
                key,
                "it served a claim and was not wiped since".into(),
            ),
            (Some(DiskState::Published), _) => self.published_without_pv(disk, class, key),
            (None, true) => {
                self.wipe_unpublished(disk, class, key, "wipeOnFirstDiscovery is set".into())
            }
            (Some(DiskState::Retained), _) => {
                let message = format!(
                    "served a claim under reclaim policy Retain and its PV is gone; it stays unpublished until an \
                     operator releases disk {key}"
                );
                self.hold(disk, HoldReason::Retained, message);
            }
            _ => self.publish(disk, class),
        }
    }

    /// Whether another PV of ours already holds this very disk (it moved to a new path).
    fn held_elsewhere(&mut self, disk: &Disk) -> bool {
        let holder = self
            .index
            .sharing_an_id(disk)
            .into_iter()
            .map(|i| self.pv(i))
            .find(|pv| {
                !pv.deleting
                    && !self.at_own_path(pv)
                    && identity::may_be_same(pv.mode, pv.recorded.as_ref(), disk)
            });
        let Some(holder) = holder.cloned() else {
            return false;
        };
        let message = format!(
            "the disk is held by PV {} at {}",
            holder.pv_ref.name,
            holder.path.display()
        );
        self.hold(disk, HoldReason::HeldByAnotherPv, message);
        if holder.is_unclaimed() {
            // Its PV goes once its own path is seen empty; publish here after that.
            self.requeue(SOON);
        } else {
            let message = format!(
                "the disk of this PV now appears at {}; no second PV is published for it",
                disk.host_path.display()
            );
            self.condition(
                &holder,
                Condition::DiskMoved,
                EventType::Warning,
                Reason::DiskMoved,
                message,
            );
        }
        true
    }

    /// Whether a PV's own disk is at its path: then a disk elsewhere that looks like it is a second view of the
    /// same storage or a copy, never the disk moved (see `overlap` and `duplicate`).
    fn at_own_path(&self, pv: &PvView) -> bool {
        self.disk_at(&pv.path).is_some_and(|own| {
            own.mode == pv.mode
                && identity::check(pv.mode, pv.recorded.as_ref(), own)
                    == identity::IdentityCheck::Same
        })
    }

    /// Published by us, and its PV went without the agent deleting it as unclaimed: a claim may have used it.
    fn published_without_pv(&mut self, disk: &Disk, class: &ClassFacts, key: String) {
        let Some(storage_class) = &class.storage_class else {
            let message = format!("StorageClass {} does not exist", class.config.name);
            self.hold(disk, HoldReason::NoStorageClass, message);
            return;
        };
        match storage_class.reclaim_policy.as_deref() {
            None | Some("Delete") => self.wipe_unpublished(
                disk,
                class,
                key,
                "its PV went while the agent could not see whether a claim used it".into(),
            ),
            Some(policy) => {
                let message = format!(
                    "its PV went while the agent could not see whether a claim used it, and the class's reclaim \
                     policy is {policy}: it stays unpublished until an operator releases disk {key}"
                );
                self.hold(disk, HoldReason::Retained, message);
            }
        }
    }

    fn wipe_unpublished(&mut self, disk: &Disk, class: &ClassFacts, key: String, why: String) {
        if !self.listed() {
            return;
        }
        if !identity::is_strong(disk.mode, &disk.identity) {
            let message = format!(
                "must be wiped before it is published ({why}), but it has no identity that can authorise a wipe \
                 (no WWN or serial): wipe it by hand, then release disk {key}"
            );
            self.hold(disk, HoldReason::NoStableIdentity, message);
            return;
        }
        let order = WipeOrder {
            key,
            pv: None,
            class: class.config.name.clone(),
            host_path: disk.host_path.clone(),
            path: process_path(class, &disk.host_path),
            method: class.config.wipe_for(disk.mode),
            expected: disk.identity.clone(),
            expected_mount_root: disk.mount_root.clone(),
            on_start: None,
            on_success: None,
        };
        self.writes.push(Action::Wipe(Box::new(order)));
        self.hold(
            disk,
            HoldReason::AwaitingWipe,
            format!("wiped before it is published: {why}"),
        );
    }

    fn publish(&mut self, disk: &Disk, class: &ClassFacts) {
        let Some(storage_class) = &class.storage_class else {
            let message = format!("StorageClass {} does not exist", class.config.name);
            self.hold(disk, HoldReason::NoStorageClass, message);
            return;
        };
        let Some(path) = disk.host_path.to_str() else {
            self.hold(
                disk,
                HoldReason::PathNotUtf8,
                "the path is not valid UTF-8".into(),
            );
            return;
        };
        let node = self.inputs.node;
        let name = pv_name(self.inputs.config, &node.name, disk);
        let named = Link::Name(name.clone());
        if let Some(taken) = self
            .index
            .linked(&named)
            .first()
            .map(|&i| self.pv(i).clone())
        {
            let message = format!("name {name} belongs to PV for {}", taken.path.display());
            self.hold(disk, HoldReason::NameTaken, message);
            let message = format!("{path} would get this PV's name; it is not published");
            self.condition(
                &taken,
                Condition::NameCollision,
                EventType::Warning,
                Reason::NameCollision,
                message,
            );
            return;
        }
        if !self.listed() {
            return;
        }
        // NB: remembered before the PV exists: a crash after the create must not forget what the disk exposed.
        self.set_disk_state(identity::disk_key(disk), DiskState::Published);
        let new = NewPv {
            name: &name,
            node,
            config: self.inputs.config,
            class: &class.config,
            storage_class,
        };
        self.writes
            .push(Action::CreatePv(Box::new(new.build(disk, path))));
    }

    /// Whether `disk` carries an identity its PV can record. A filesystem disk without UUID, or a bind-mounted
    /// directory, without the agent's volume id is tagged first and published in the next pass; one that cannot be
    /// tagged needs a filesystem UUID. A disk at a path whose earlier, unidentifiable disk was published or served
    /// a claim is held: it may be that disk.
    fn identified(&mut self, disk: &Disk, class: &ClassFacts) -> bool {
        let id = &disk.identity;
        if disk.mode == VolumeMode::Block
            || id.volume_id.is_some()
            || !identity::needs_volume_id(disk)
        {
            return true;
        }
        let path_key = identity::ledger_key(disk.mode, &Default::default(), None, &disk.host_path);
        if matches!(
            self.ledger(&path_key),
            Some(DiskState::Dirty | DiskState::Retained | DiskState::Published)
        ) {
            let message = format!(
                "a disk that served a claim at this path had no identity the agent can check, so this may be it: \
                 wipe it by hand if needed, then release disk {path_key}"
            );
            self.hold(disk, HoldReason::NoStableIdentity, message);
            return false;
        }
        match (id.volume_id_unsupported, id.fs_uuid.is_some()) {
            (true, true) => true,
            (true, false) => {
                let message = format!(
                    "filesystem {} has no UUID and no extended attributes for the agent's volume id: without an \
                     identity a swapped disk could be wiped, so it is not published",
                    id.fs_type.as_deref().unwrap_or("(unknown)")
                );
                self.hold(disk, HoldReason::NoStableIdentity, message);
                false
            }
            (false, _) => {
                self.writes.push(Action::TagVolume {
                    host_path: disk.host_path.clone(),
                    path: process_path(class, &disk.host_path),
                });
                let message =
                    "the agent's volume id is being stored on the volume root".to_string();
                self.hold(disk, HoldReason::AwaitingVolumeId, message);
                self.requeue(SOON);
                false
            }
        }
    }
}
