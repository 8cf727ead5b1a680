//! Extender metrics. Every label is a small closed enum: never node, pod or PV names. Every label set exists from
//! registration on, at zero, so the first error is an increase a `[30m]` range can see.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::telemetry::at_zero;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WebhookVerb {
    Filter,
    Prioritize,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum RequestOutcome {
    Ok,
    BadRequest,
    TooLarge,
    /// Refused for want of memory budget (503): what its decoding costs would not fit beside other requests.
    OverBudget,
    NotReady,
    Deadline,
    Internal,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum NodeResult {
    Passed,
    Failed,
    Unresolvable,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WatchedKind {
    PersistentVolumes,
    PersistentVolumeClaims,
    StorageClasses,
    Nodes,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: WebhookVerb,
    pub outcome: RequestOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: WebhookVerb,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: NodeResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: WatchedKind,
}

const OUTCOMES: [RequestOutcome; 7] = [
    RequestOutcome::Ok,
    RequestOutcome::BadRequest,
    RequestOutcome::TooLarge,
    RequestOutcome::OverBudget,
    RequestOutcome::NotReady,
    RequestOutcome::Deadline,
    RequestOutcome::Internal,
];

type VerbHistograms = Family<VerbLabels, Histogram, fn() -> Histogram>;

#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: VerbHistograms,
    pub nodes: Family<ResultLabels, Counter>,
    pub cached: Family<KindLabels, Gauge>,
    pub snapshot_builds: Counter,
}

fn duration_histogram() -> Histogram {
    // 50µs .. ~1.6s: decisions should sit at the bottom, the deadline near the top.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl Metrics {
    pub fn register(reg: &mut Registry) -> Metrics {
        let m = Metrics {
            requests: Family::default(),
            duration: VerbHistograms::new_with_constructor(duration_histogram),
            nodes: Family::default(),
            cached: Family::default(),
            snapshot_builds: Counter::default(),
        };
        let verbs = [WebhookVerb::Filter, WebhookVerb::Prioritize];
        let every = |verb| OUTCOMES.map(|outcome| RequestLabels { verb, outcome });
        at_zero(&m.requests, verbs.into_iter().flat_map(every));
        at_zero(&m.duration, verbs.map(|verb| VerbLabels { verb }));
        let results = [
            NodeResult::Passed,
            NodeResult::Failed,
            NodeResult::Unresolvable,
        ];
        at_zero(&m.nodes, results.map(|result| ResultLabels { result }));
        let kinds = [
            WatchedKind::PersistentVolumes,
            WatchedKind::PersistentVolumeClaims,
            WatchedKind::StorageClasses,
            WatchedKind::Nodes,
        ];
        at_zero(&m.cached, kinds.map(|kind| KindLabels { kind }));
        let reg = reg.sub_registry_with_prefix("localpv_extender");
        reg.register(
            "requests",
            "Extender requests by verb and outcome",
            m.requests.clone(),
        );
        reg.register(
            "request_duration_seconds",
            "Time to answer an extender request",
            m.duration.clone(),
        );
        reg.register(
            "filter_nodes",
            "Nodes judged by filter, by result",
            m.nodes.clone(),
        );
        reg.register(
            "cached_objects",
            "Objects in the watch caches",
            m.cached.clone(),
        );
        reg.register(
            "snapshot_builds",
            "Snapshots rebuilt from the watch caches",
            m.snapshot_builds.clone(),
        );
        m
    }

    pub fn request(&self, verb: WebhookVerb, outcome: RequestOutcome, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels { verb, outcome })
            .inc();
        self.duration
            .get_or_create(&VerbLabels { verb })
            .observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_and_outcome_is_exported_at_zero_before_the_first_request() {
        crate::telemetry::assert_registered(
            Metrics::register,
            &[
                r#"localpv_extender_requests_total{verb="Filter",outcome="Internal"} 0"#,
                r#"localpv_extender_requests_total{verb="Prioritize",outcome="NotReady"} 0"#,
                r#"localpv_extender_filter_nodes_total{result="Unresolvable"} 0"#,
                r#"localpv_extender_request_duration_seconds_count{verb="Prioritize"} 0"#,
                r#"localpv_extender_cached_objects{kind="Nodes"} 0"#,
            ],
        );
    }
}
