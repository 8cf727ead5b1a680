//! Disks that show signs of failing (issue 37, point 2): a `Degraded` or `Failed` disk (`health::judge`, reported
//! in `Discovery::unhealthy`) is never handed to a new claim and never wiped.
//! - without a PV: held (`DiskDegraded` / `DiskFailed` on its LocalDisk), also when it is dirty: a wipe of a failing
//!   disk proves nothing, and its data may still be wanted;
//! - its Available PV is withdrawn (deleted, with an Event), and published again only once the disk is `Healthy`;
//! - its Released PV is not wiped (an Event once), its Bound PV gets an Event once: the tenant is told;
//! - once the disk is `Healthy` again (a transient error gone quiet, a device back within the grace), a PV that was
//!   told gets `DiskHealthy` (with its claim): the all-clear for whoever read the warning.
//!
//! A disk an operator cordoned (`localpv disks cordon`) is held and its Available PV withdrawn the same way; its
//! Bound and Released PVs go on as usual (a cordon only stops publishing).

use super::{Planner, PvView};
use crate::disk::{Disk, DiskHealth};
use crate::health::State;
use crate::plan::state::Condition;
use crate::plan::{EventType, HoldReason, Reason};

fn words(health: &DiskHealth) -> (HoldReason, Condition, Reason) {
    match health.state {
        State::Failed => (
            HoldReason::DiskFailed,
            Condition::DiskFailed,
            Reason::DiskFailed,
        ),
        _ => (
            HoldReason::DiskDegraded,
            Condition::DiskDegraded,
            Reason::DiskDegraded,
        ),
    }
}

impl Planner<'_> {
    fn health_of(&self, disk: &Disk) -> Option<&DiskHealth> {
        self.unhealthy
            .get(disk.host_path.as_path())
            .copied()
            .filter(|h| h.state != State::Healthy)
    }

    fn cordoned(&self, disk: &Disk) -> bool {
        self.inputs.found.cordoned.contains(&disk.host_path)
    }

    /// Holds back a cordoned disk without a PV. True when held.
    pub(super) fn held_cordoned(&mut self, disk: &Disk) -> bool {
        if !self.cordoned(disk) {
            return false;
        }
        let message =
            "cordoned by an operator: not published until `localpv disks uncordon`".to_string();
        self.hold(disk, HoldReason::Cordoned, message);
        true
    }

    /// An unclaimed PV of ours on a cordoned disk is withdrawn. True when that decided the PV.
    pub(super) fn pv_on_cordoned_disk(&mut self, pv: &PvView, disk: &Disk) -> bool {
        if !pv.is_unclaimed() || !self.cordoned(disk) {
            return false;
        }
        let message = format!(
            "{} was cordoned by an operator: this unclaimed PV is withdrawn until `localpv disks uncordon`",
            pv.path.display()
        );
        self.event(&pv.pv_ref, EventType::Normal, Reason::DiskCordoned, message);
        self.delete(pv);
        true
    }

    /// Holds back a disk without a PV that is not healthy. True when held.
    pub(super) fn held_unhealthy(&mut self, disk: &Disk) -> bool {
        let Some(health) = self.health_of(disk).cloned() else {
            return false;
        };
        let (hold, ..) = words(&health);
        let message = format!(
            "{} ({}): {}; not published until it is Healthy again",
            health.state.as_str(),
            health.cause.as_str(),
            health.message
        );
        self.hold(disk, hold, message);
        true
    }

    /// A PV of ours whose disk is not healthy: an unclaimed one is withdrawn, a Released one is not wiped, a Bound
    /// one is told. True when that decided the PV (nothing else is planned for it).
    pub(super) fn pv_on_unhealthy_disk(&mut self, pv: &PvView, disk: &Disk) -> bool {
        let Some(health) = self.health_of(disk).cloned() else {
            self.healthy_again(pv);
            return false;
        };
        let (_, condition, reason) = words(&health);
        let what = format!(
            "the disk at {} is {} ({}): {}",
            pv.path.display(),
            health.state.as_str(),
            health.cause.as_str(),
            health.message
        );
        if pv.is_unclaimed() {
            let message =
                format!("{what}; this unclaimed PV is withdrawn so no new claim gets the disk");
            self.event(&pv.pv_ref, EventType::Warning, reason, message);
            self.delete(pv);
            return true;
        }
        let message = match pv.phase {
            crate::contract::Phase::Released => {
                format!("{what}; it is not wiped: replace the disk, then delete this PV")
            }
            _ => format!(
                "{what}; the claim's data is at risk: move the workload's data elsewhere (docs/failure.md)"
            ),
        };
        self.condition(pv, condition, EventType::Warning, reason, message);
        self.tell_claim(pv);
        pv.phase == crate::contract::Phase::Released
    }

    /// A PV told its disk was `Degraded` (or `Failed`) in the last pass, on that disk healthy now: says so, once,
    /// on the PV and its claim. Nothing else changes for it (it was never withdrawn, wiped or deleted).
    fn healthy_again(&mut self, pv: &PvView) {
        let uid = &pv.pv_ref.uid;
        let was = [Condition::DiskDegraded, Condition::DiskFailed]
            .into_iter()
            .find(|c| self.inputs.memory.had(uid, *c));
        let Some(was) = was else {
            return;
        };
        let was = match was {
            Condition::DiskFailed => State::Failed,
            _ => State::Degraded,
        };
        let message = format!(
            "the disk at {} is Healthy again (it was {}): no new sign seen since",
            pv.path.display(),
            was.as_str()
        );
        self.event(&pv.pv_ref, EventType::Normal, Reason::DiskHealthy, message);
        self.tell_claim(pv);
    }
}
