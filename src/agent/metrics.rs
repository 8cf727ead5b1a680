//! Node agent metrics. Labels are small closed sets (phases, verbs, outcomes, reasons): never object names.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ApiVerb {
    Create,
    Delete,
    Patch,
    Event,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ApiOutcome {
    Ok,
    /// `AlreadyExists`, `NotFound`, or a failed precondition: the step was already done or is moot.
    Moot,
    Error,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
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
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WipeLabels {
    pub method: String,
    pub outcome: Outcome,
}

#[derive(Clone)]
pub struct Metrics {
    pub discovery_passes: Counter,
    pub discovery_seconds: Histogram,
    pub disks_found: Gauge,
    pub disks_unusable: Family<ReasonLabels, Gauge>,
    pub pvs: Family<PhaseLabels, Gauge>,
    pub api_requests: Family<ApiLabels, Counter>,
    pub config_reloads: Family<OutcomeLabels, Counter>,
    pub wipes: Family<WipeLabels, Counter>,
    pub wipes_running: Gauge,
    pub wipe_bytes: Counter,
    pub wipe_entries: Counter,
}

impl Metrics {
    pub fn register(reg: &mut Registry) -> Metrics {
        let m = Metrics {
            discovery_passes: Counter::default(),
            discovery_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            disks_found: Gauge::default(),
            disks_unusable: Family::default(),
            pvs: Family::default(),
            api_requests: Family::default(),
            config_reloads: Family::default(),
            wipes: Family::default(),
            wipes_running: Gauge::default(),
            wipe_bytes: Counter::default(),
            wipe_entries: Counter::default(),
        };
        let r = reg.sub_registry_with_prefix("localpv_node");
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
        m
    }

    pub fn api(&self, verb: ApiVerb, outcome: ApiOutcome) {
        self.api_requests
            .get_or_create(&ApiLabels { verb, outcome })
            .inc();
    }
}
