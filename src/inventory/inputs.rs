//! What one inventory pass looks at: the inputs `build` decides from and `status` reads, in one leaf file so
//! that neither of the two imports the other for them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::crd::LocalDisk;
use crate::disk::Discovery;
use crate::plan::{DiskLedger, Unpublished};

/// Tunables of the inventory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// How long a disk stays `Missing` before its LocalDisk is deleted.
    pub missing_grace: Duration,
    /// Consecutive failed wipes after which a disk is `Failing`.
    pub failing_after: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            missing_grace: Duration::from_secs(24 * 3600),
            failing_after: 3,
        }
    }
}

/// Everything one inventory pass looks at. Maps are keyed by host path.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    pub node: &'a str,
    pub found: &'a Discovery,
    /// `Plan::unpublished` of the same pass.
    pub unpublished: &'a [Unpublished],
    /// This node's PVs (ours and the reference provisioner's), as given to the planner.
    pub pvs: &'a [Arc<PersistentVolume>],
    pub ledger: &'a DiskLedger,
    /// Wipes running now.
    pub wipes: &'a BTreeMap<PathBuf, WipeSample>,
    /// Consecutive failed wipes (reset by a successful one).
    pub wipe_failures: &'a BTreeMap<PathBuf, WipeFailures>,
    /// This node's LocalDisks (label `localpv.io/node=<node>`).
    pub existing: &'a [Arc<LocalDisk>],
    /// Other nodes' LocalDisks fetched by `build::names_to_look_up`.
    pub others: &'a [LocalDisk],
    pub settings: &'a Settings,
    pub now: SystemTime,
}

/// A wipe running now, as the agent's wipe control reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WipeSample {
    pub started: SystemTime,
    pub bytes_done: u64,
    pub entries_done: u64,
    /// Known for block wipes.
    pub bytes_total: Option<u64>,
}

/// Consecutive failed wipes of one disk, reset by a successful wipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WipeFailures {
    pub consecutive: u32,
    pub last_error: String,
}

/// `now` as an API timestamp, to the second as the API server stores it.
pub fn time(now: SystemTime) -> Time {
    let exact = Timestamp::try_from(now).unwrap_or(Timestamp::UNIX_EPOCH);
    Time(Timestamp::from_second(exact.as_second()).unwrap_or(exact))
}
