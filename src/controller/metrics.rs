//! The controller's own metrics: whether this replica holds the Lease, each write by kind and outcome (a write
//! dropped because the Lease was no longer held counts as `NotLeader`), and how long each kind of pass takes.
//! Every label is a small closed enum, and every label set exists from registration on, at zero.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::telemetry::at_zero;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WriteKind {
    DeletePv,
    DeleteLocalDisk,
    WarnClaim,
    DeleteClaim,
    ExplainPod,
    /// Recovery of a lost replica (issue 37): its pod, and the Events about it (claim, pod, set, PV).
    DeletePod,
    RecoveryEvent,
    /// A claim's `status.healthStatus` while its disk is Degraded or Failed.
    ClaimHealth,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WriteVerdict {
    Applied,
    /// 404 or 409: someone else (or an earlier pass) already did it, or the precondition no longer holds.
    AlreadyDone,
    Failed,
    /// Not sent: the Lease was not held when the write came up.
    NotLeader,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ControllerWork {
    Cleanup,
    Explain,
    Recovery,
}

/// What recovery decided for one lost volume in one pass.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum RecoveryVerdict {
    Recovered,
    DryRun,
    Held,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: RecoveryVerdict,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub write: WriteKind,
    pub outcome: WriteVerdict,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkLabels {
    pub work: ControllerWork,
}

type PassHistograms = Family<WorkLabels, Histogram, fn() -> Histogram>;

#[derive(Clone)]
pub struct Metrics {
    pub leader: Gauge,
    pub writes: Family<WriteLabels, Counter>,
    pub pass: PassHistograms,
    /// Lost volumes by what recovery decided, once per volume and decision.
    pub recoveries: Family<VerdictLabels, Counter>,
}

fn pass_histogram() -> Histogram {
    // 0.5 ms .. ~2 min: a pass over a small cluster sits at the bottom, one over 50,000 PVs well below a second.
    Histogram::new(exponential_buckets(0.000_5, 4.0, 10))
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            leader: Gauge::default(),
            writes: Family::default(),
            pass: PassHistograms::new_with_constructor(pass_histogram),
            recoveries: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("localpv_controller");
        r.register(
            "leader",
            "1 while this replica holds the localpv-cleanup Lease",
            m.leader.clone(),
        );
        r.register(
            "writes",
            "API writes of the Lease holder by kind and outcome",
            m.writes.clone(),
        );
        r.register(
            "pass_duration_seconds",
            "Time to plan one clean-up or explanation pass (off the async workers)",
            m.pass.clone(),
        );
        r.register(
            "recoveries",
            "Lost local volumes of StatefulSet replicas by what recovery decided (once per volume and decision)",
            m.recoveries.clone(),
        );
        let writes = [
            WriteKind::DeletePv,
            WriteKind::DeleteLocalDisk,
            WriteKind::WarnClaim,
            WriteKind::DeleteClaim,
            WriteKind::ExplainPod,
            WriteKind::DeletePod,
            WriteKind::RecoveryEvent,
            WriteKind::ClaimHealth,
        ];
        let outcomes = [
            WriteVerdict::Applied,
            WriteVerdict::AlreadyDone,
            WriteVerdict::Failed,
            WriteVerdict::NotLeader,
        ];
        let every = |write| outcomes.map(|outcome| WriteLabels { write, outcome });
        at_zero(&m.writes, writes.into_iter().flat_map(every));
        at_zero(
            &m.pass,
            [
                ControllerWork::Cleanup,
                ControllerWork::Explain,
                ControllerWork::Recovery,
            ]
            .map(|work| WorkLabels { work }),
        );
        at_zero(
            &m.recoveries,
            [
                RecoveryVerdict::Recovered,
                RecoveryVerdict::DryRun,
                RecoveryVerdict::Held,
            ]
            .map(|verdict| VerdictLabels { verdict }),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_and_outcome_is_exported_at_zero_before_the_first_pass() {
        crate::telemetry::assert_registered(
            Metrics::register,
            &[
                r#"localpv_controller_writes_total{write="DeletePv",outcome="NotLeader"} 0"#,
                r#"localpv_controller_writes_total{write="ExplainPod",outcome="Applied"} 0"#,
                r#"localpv_controller_pass_duration_seconds_count{work="Cleanup"} 0"#,
                "localpv_controller_leader 0",
                r#"localpv_controller_recoveries_total{verdict="Recovered"} 0"#,
                r#"localpv_controller_writes_total{write="DeletePod",outcome="Applied"} 0"#,
            ],
        );
    }
}
