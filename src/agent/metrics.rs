//! Node agent metrics. Labels are small closed sets (phases, verbs, outcomes, reasons, classes of the config):
//! never node, PV or claim names, nor paths; the one exception is [`disk`]'s per-disk series, labelled by class and
//! entry (bounded by the disks the node holds). The node is the scrape target's: the chart's ServiceMonitor sets a `node`
//! target label from the pod's node.
//!
//! Every known label set is created at registration, at zero (`telemetry::at_zero` says why).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::config::WipeMethod;
use crate::disk::{Unusable, UnusableReason};
use crate::telemetry::at_zero;

const UNUSABLE_REASONS: [UnusableReason; 6] = [
    UnusableReason::NotAMountPoint,
    UnusableReason::NotADiskEntry,
    UnusableReason::WrongVolumeMode,
    UnusableReason::ProbeFailed,
    UnusableReason::DeviceInUse,
    UnusableReason::DeviceDirRefused,
];

/// The writer's request labels (`effects::Writer` counts through [`Metrics`]).
pub use crate::effects::{Verb as ApiVerb, WriteOutcome as ApiOutcome};

mod disk;
pub use disk::DiskMetrics;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum StepOutcome {
    Ok,
    Error,
    /// The disk at the path was not the one expected: nothing was touched.
    Refused,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub verb: ApiVerb,
    pub outcome: ApiOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: StepOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HealthLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// Capacity of this node's PVs; `storage_class` is a class of the configuration (or of a PV found on the node).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CapacityLabels {
    pub storage_class: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WipeLabels {
    pub method: String,
    pub outcome: StepOutcome,
}

#[derive(Clone)]
pub struct Metrics {
    pub discovery_passes: Counter,
    pub discovery_seconds: Histogram,
    pub discovery_probed: Histogram,
    pub disks_found: Gauge,
    pub disks_unusable: Family<ReasonLabels, Gauge>,
    pub pvs: Family<PhaseLabels, Gauge>,
    pub api_requests: Family<ApiLabels, Counter>,
    pub config_reloads: Family<OutcomeLabels, Counter>,
    pub wipes: Family<WipeLabels, Counter>,
    pub wipes_running: Gauge,
    pub wipe_bytes: Counter,
    pub wipe_entries: Counter,
    pub capacity: Family<CapacityLabels, Gauge>,
    pub disks_health: Family<HealthLabels, Gauge>,
    pub disk: Arc<DiskMetrics>,
    pub pv_watch_narrow: Gauge,
}

const API_VERBS: [ApiVerb; 4] = [
    ApiVerb::Create,
    ApiVerb::Delete,
    ApiVerb::Patch,
    ApiVerb::Event,
];
const API_OUTCOMES: [ApiOutcome; 3] = [ApiOutcome::Ok, ApiOutcome::Moot, ApiOutcome::Error];
const WIPE_OUTCOMES: [StepOutcome; 3] = [StepOutcome::Ok, StepOutcome::Error, StepOutcome::Refused];
pub const PV_PHASES: [&str; 5] = ["Pending", "Available", "Bound", "Released", "Failed"];
/// The capacity phases every class always shows (0 when none): what dashboards graph as free and used.
const CAPACITY_PHASES: [&str; 3] = ["Available", "Bound", "Released"];

impl Metrics {
    pub fn register(reg: &mut Registry) -> Metrics {
        let m = Metrics {
            discovery_passes: Counter::default(),
            discovery_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            discovery_probed: Histogram::new(exponential_buckets(1.0, 4.0, 8)),
            disks_found: Gauge::default(),
            disks_unusable: Family::default(),
            pvs: Family::default(),
            api_requests: Family::default(),
            config_reloads: Family::default(),
            wipes: Family::default(),
            wipes_running: Gauge::default(),
            wipe_bytes: Counter::default(),
            wipe_entries: Counter::default(),
            capacity: Family::default(),
            disks_health: Family::default(),
            disk: Arc::default(),
            pv_watch_narrow: Gauge::default(),
        };
        m.zero_label_sets();
        let r = reg.sub_registry_with_prefix("localpv_node");
        let m = Metrics {
            disk: Arc::new(DiskMetrics::register(r)),
            ..m
        };
        r.register(
            "discovery_passes",
            "Discovery passes run",
            m.discovery_passes.clone(),
        );
        r.register(
            "discovery_duration_seconds",
            "Time one discovery and planning pass took",
            m.discovery_seconds.clone(),
        );
        r.register(
            "discovery_probed_entries",
            "Entries one pass measured (size, identity): new or changed mounts and block entries, all after a resync",
            m.discovery_probed.clone(),
        );
        r.register(
            "disks_found",
            "Usable disks found by the last pass",
            m.disks_found.clone(),
        );
        r.register(
            "disks_unusable",
            "Entries found unusable by the last pass, by reason",
            m.disks_unusable.clone(),
        );
        r.register(
            "persistent_volumes",
            "This node's PVs by phase",
            m.pvs.clone(),
        );
        r.register(
            "api_requests",
            "Write requests to the API server by verb and outcome",
            m.api_requests.clone(),
        );
        r.register(
            "config_reloads",
            "Configuration reloads by outcome",
            m.config_reloads.clone(),
        );
        r.register(
            "wipes",
            "Finished wipes by method and outcome",
            m.wipes.clone(),
        );
        r.register(
            "wipes_running",
            "Wipes in progress",
            m.wipes_running.clone(),
        );
        r.register("wipe_bytes", "Bytes erased by wipes", m.wipe_bytes.clone());
        r.register(
            "wipe_entries",
            "Directory entries removed by filesystem wipes",
            m.wipe_entries.clone(),
        );
        r.register(
            "disks_health",
            "Found disks by health state (Healthy, Degraded, Failed), as last looked at",
            m.disks_health.clone(),
        );
        r.register(
            "pv_watch_narrow",
            "1 while the agent watches only its own node's PVs (the chart's admission policy in force), 0 while it watches every PV",
            m.pv_watch_narrow.clone(),
        );
        r.register(
            "pv_capacity_bytes",
            "Capacity of this node's PVs by storage class and PV phase (Available is free space)",
            m.capacity.clone(),
        );
        m
    }

    /// The disks in each health state.
    pub fn set_health(&self, counts: &[(crate::health::State, i64)]) {
        for (state, count) in counts {
            let labels = HealthLabels {
                state: state.as_str().to_string(),
            };
            self.disks_health.get_or_create(&labels).set(*count);
        }
    }

    /// Creates every known label set at zero (`telemetry::at_zero`).
    fn zero_label_sets(&self) {
        let api = |verb| API_OUTCOMES.map(|outcome| ApiLabels { verb, outcome });
        at_zero(&self.api_requests, API_VERBS.into_iter().flat_map(api));
        let reloads =
            [StepOutcome::Ok, StepOutcome::Error].map(|outcome| OutcomeLabels { outcome });
        at_zero(&self.config_reloads, reloads);
        let wipes = |method: &str| {
            let method = method.to_string();
            WIPE_OUTCOMES.map(|outcome| WipeLabels {
                method: method.clone(),
                outcome,
            })
        };
        at_zero(
            &self.wipes,
            WipeMethod::every_spelling().into_iter().flat_map(wipes),
        );
        let reason = |r: UnusableReason| ReasonLabels {
            reason: r.as_str().to_string(),
        };
        at_zero(&self.disks_unusable, UNUSABLE_REASONS.map(reason));
        at_zero(
            &self.pvs,
            PV_PHASES.map(|phase| PhaseLabels {
                phase: phase.to_string(),
            }),
        );
    }

    /// The gauges of one pass: unusable entries by reason, this node's PVs by phase, and their capacity by class
    /// and phase (every configured class with at least its Available, Bound and Released series).
    pub fn publish_pass<'a>(
        &self,
        classes: impl IntoIterator<Item = &'a str>,
        unusable: &[Unusable],
        tally: &PvTally,
    ) {
        let mut reasons: BTreeMap<&str, i64> =
            UNUSABLE_REASONS.iter().map(|r| (r.as_str(), 0)).collect();
        for u in unusable {
            *reasons.entry(u.reason.as_str()).or_default() += 1;
        }
        for (reason, n) in reasons {
            let reason = reason.to_string();
            let _ = self
                .disks_unusable
                .get_or_create(&ReasonLabels { reason })
                .set(n);
        }
        let mut phases: BTreeMap<&str, i64> = PV_PHASES.iter().map(|p| (*p, 0)).collect();
        for (phase, n) in &tally.phases {
            phases.insert(phase, *n as i64);
        }
        let mut bytes: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for class in classes {
            for phase in CAPACITY_PHASES {
                bytes.insert((class, phase), 0);
            }
        }
        for ((class, phase), (n, _)) in &tally.bytes {
            bytes.insert((class, phase), *n);
        }
        for (phase, n) in phases {
            let phase = phase.to_string();
            self.pvs.get_or_create(&PhaseLabels { phase }).set(n);
        }
        // NB: cleared first so a class removed from the configuration, whose PVs are gone, stops being reported.
        self.capacity.clear();
        for ((storage_class, phase), n) in bytes {
            let labels = CapacityLabels {
                storage_class: storage_class.to_string(),
                phase: phase.to_string(),
            };
            self.capacity.get_or_create(&labels).set(n);
        }
    }

    pub fn api(&self, verb: ApiVerb, outcome: ApiOutcome) {
        self.api_requests
            .get_or_create(&ApiLabels { verb, outcome })
            .inc();
    }
}

impl crate::effects::Count for Metrics {
    fn request(&self, verb: ApiVerb, outcome: ApiOutcome) {
        self.api(verb, outcome);
    }
}

/// This node's PVs counted by phase, and their capacity by class and phase, kept between passes: a pass whose PVs
/// are the last one's pointers in the same places but for a few (a phase changed) counts only those few again.
#[derive(Default)]
pub struct PvTally {
    /// The PVs counted, in the order given, with what each adds.
    pvs: Vec<(Arc<PersistentVolume>, PvShare)>,
    /// PVs by phase.
    phases: BTreeMap<String, usize>,
    /// Bytes and PVs by class and phase (a key goes with its last PV).
    bytes: BTreeMap<(String, String), (i64, usize)>,
}

/// What one PV adds to the tally.
struct PvShare {
    class: String,
    phase: String,
    bytes: i64,
}

impl PvShare {
    fn of(pv: &PersistentVolume) -> PvShare {
        let spec = pv.spec.as_ref();
        let capacity = spec
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .and_then(|q| crate::quantity::parse_quantity(&q.0))
            .unwrap_or(0);
        PvShare {
            class: spec
                .and_then(|s| s.storage_class_name.clone())
                .unwrap_or_default(),
            phase: pv
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
            bytes: i64::try_from(capacity).unwrap_or(i64::MAX),
        }
    }
}

impl PvTally {
    /// The tally is of exactly these PVs (the same pointers, in this order).
    pub fn is_of(&self, pvs: &[Arc<PersistentVolume>]) -> bool {
        pvs.len() == self.pvs.len()
            && pvs
                .iter()
                .zip(&self.pvs)
                .all(|(a, (b, _))| Arc::ptr_eq(a, b))
    }

    /// Counts `pvs` instead: again only the places whose pointer changed, or all of them when the number changed.
    pub fn update(&mut self, pvs: &[Arc<PersistentVolume>]) {
        if pvs.len() != self.pvs.len() {
            *self = PvTally::default();
            for pv in pvs {
                let share = PvShare::of(pv);
                self.add(&share, 1);
                self.pvs.push((pv.clone(), share));
            }
            return;
        }
        for (i, pv) in pvs.iter().enumerate() {
            if Arc::ptr_eq(&self.pvs[i].0, pv) {
                continue;
            }
            let share = PvShare::of(pv);
            self.add(&share, 1);
            let (_, old) = std::mem::replace(&mut self.pvs[i], (pv.clone(), share));
            self.add(&old, -1);
        }
    }

    fn add(&mut self, share: &PvShare, sign: i64) {
        let phase = self.phases.entry(share.phase.clone()).or_default();
        *phase = phase.checked_add_signed(sign as isize).unwrap_or(0);
        if *phase == 0 {
            self.phases.remove(&share.phase);
        }
        let key = (share.class.clone(), share.phase.clone());
        let (bytes, count) = self.bytes.entry(key.clone()).or_default();
        *bytes = bytes.saturating_add(sign * share.bytes);
        *count = count.checked_add_signed(sign as isize).unwrap_or(0);
        if *count == 0 {
            self.bytes.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests;
