//! The controller's writes against a scripted API server: each is sent only while the Lease is held, with its
//! precondition, and counted by kind and outcome.

use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use serde_json::json;

use super::metrics::{Metrics, Outcome, WriteKind, WriteLabels};
use super::{Leadership, Writer};
use crate::cleanup::Action;
use crate::effects::scripted::{self, Step, Verifier};
use crate::effects::{self, Uncounted};
use crate::plan::PvRef;

fn writer(steps: Vec<Step>, held: bool) -> (Writer, Verifier) {
    let (client, verifier) = scripted::client(steps);
    let held_until = held.then(|| Instant::now() + Duration::from_secs(60));
    let writer = Writer {
        effects: effects::Writer::new(
            client,
            "localpv-cleanup",
            "r1",
            std::sync::Arc::new(Uncounted),
        ),
        metrics: Metrics::register(&mut Registry::default()),
        lease: Leadership { held_until },
    };
    (writer, verifier)
}

fn delete_pv() -> Action {
    Action::DeletePv(PvRef {
        name: "pv-1".into(),
        uid: "u1".into(),
        resource_version: "7".into(),
    })
}

fn delete_step() -> Step {
    Step::new("delete PV pv-1", "DELETE", "/api/v1/persistentvolumes/pv-1")
        .body("/preconditions/uid", json!("u1"))
        .body("/preconditions/resourceVersion", json!("7"))
}

fn counted(w: &Writer, outcome: Outcome) -> u64 {
    let labels = WriteLabels {
        write: WriteKind::DeletePv,
        outcome,
    };
    w.metrics.writes.get_or_create(&labels).get()
}

#[tokio::test]
async fn without_the_lease_a_planned_delete_is_not_sent_and_is_counted_as_dropped() {
    let (w, verifier) = writer(vec![], false);
    w.apply(delete_pv()).await;
    verifier.assert_done();
    assert_eq!(counted(&w, Outcome::NotLeader), 1);
}

#[tokio::test]
async fn with_the_lease_the_delete_is_sent_once_with_uid_and_resource_version() {
    let ok = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
    let (w, verifier) = writer(vec![delete_step().answer(200, ok)], true);
    w.apply(delete_pv()).await;
    verifier.assert_done();
    assert_eq!(counted(&w, Outcome::Applied), 1);
}

#[tokio::test]
async fn a_pv_changed_since_the_plan_is_already_done_not_a_failure() {
    let (w, verifier) = writer(vec![delete_step().fail(409, "Conflict")], true);
    w.apply(delete_pv()).await;
    verifier.assert_done();
    assert_eq!(counted(&w, Outcome::AlreadyDone), 1);
    assert_eq!(counted(&w, Outcome::Failed), 0);
}
