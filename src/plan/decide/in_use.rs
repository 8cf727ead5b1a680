//! Raw devices of Filesystem classes that the kernel says are held (`Disk::held`: mounted in some mount namespace,
//! or claimed by dm/md). The agent cannot see the kubelet's mounts, so the PV's phase tells whose the hold is:
//! - Bound: the kubelet's mount for the tenant; nothing to do;
//! - no PV, or an Available PV (nothing bound it, so no kubelet mounted it): someone else uses the device. It is
//!   held back (`DeviceInUse`), the Available PV withdrawn (deleted, with an Event), and published again once free;
//! - Released: the kubelet unmounts once the pod is gone; the wipe waits (and its own `O_EXCL` open would fail).
//!
//! An unclaimed device is looked at again every 10 s: nothing the agent sees marks a mount in another namespace.
//! NB: between two looks a claim may bind an Available PV over a device someone just mounted elsewhere; the window
//! is those 10 s (the reference provisioner never looks).
//!
//! A mount of the device the agent can see is never the kubelet's: discovery reports it `DeviceInUse` whatever the
//! phase (`discover::classify`).

use std::time::Duration;

use super::{Planner, PvView};
use crate::contract::Phase;
use crate::disk::{Disk, VolumeMode};
use crate::plan::{EventType, HoldReason, Reason};

/// How soon a Released PV whose device is still held is looked at again.
const HELD_RETRY: Duration = Duration::from_secs(5);
/// How often an unclaimed device is checked again: a mount in another namespace raises no event the agent sees, so
/// this bounds how long an Available PV can stand over a device someone mounted meanwhile.
const RECHECK: Duration = Duration::from_secs(10);

impl Planner<'_> {
    /// Holds back a held device without a PV. True when held.
    pub(super) fn held_in_use(&mut self, disk: &Disk) -> bool {
        if !disk.held {
            return false;
        }
        let message = format!(
            "block device at {} is held by another user (mounted in some mount namespace, or part of a RAID or \
             device-mapper target): not published until it is free",
            disk.host_path.display()
        );
        self.hold(disk, HoldReason::DeviceInUse, message);
        self.requeue(RECHECK);
        true
    }

    /// A PV whose device is held and that no claim explains. True when that decided the PV.
    pub(super) fn pv_on_held_device(&mut self, pv: &PvView, disk: &Disk) -> bool {
        let raw_as_filesystem =
            pv.mode == VolumeMode::Block && pv.published_as == VolumeMode::Filesystem;
        if raw_as_filesystem && pv.is_unclaimed() {
            self.requeue(RECHECK);
        }
        if !disk.held {
            return false;
        }
        match pv.phase {
            Phase::Bound => false,
            Phase::Released => {
                self.requeue(HELD_RETRY);
                true
            }
            _ if pv.is_unclaimed() => {
                let message = format!(
                    "block device at {} is held by another user though no claim is bound to this PV (mounted \
                     elsewhere on the host?): the PV is withdrawn until the device is free",
                    pv.path.display()
                );
                self.event(&pv.pv_ref, EventType::Warning, Reason::DeviceInUse, message);
                self.delete(pv);
                true
            }
            _ => false,
        }
    }
}
