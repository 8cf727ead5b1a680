//! The controller's writes against a scripted API server: each is sent only while the Lease is held, with its
//! precondition, and counted by kind and outcome.

use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use serde_json::json;

use super::metrics::{Metrics, WriteKind, WriteLabels, WriteVerdict};
use super::{LeaderWriter, Leadership};
use crate::cleanup::CleanupAction;
use crate::effects::scripted::{self, Exchange, Verifier};
use crate::effects::{self, Uncounted};
use crate::plan::PvRef;

pub(super) fn writer(steps: Vec<Exchange>, held: bool) -> (LeaderWriter, Verifier) {
    let (client, verifier) = scripted::client(steps);
    let held_until = held.then(|| Instant::now() + Duration::from_secs(60));
    let writer = LeaderWriter {
        effects: effects::Writer::new(
            client,
            "localpv-cleanup",
            "r1",
            std::sync::Arc::new(Uncounted),
        ),
        metrics: Metrics::register(&mut Registry::default()),
        lease: Leadership {
            held_until: tokio::sync::watch::channel(held_until).1,
        },
    };
    (writer, verifier)
}

fn delete_pv() -> CleanupAction {
    CleanupAction::DeletePv(PvRef {
        name: "pv-1".into(),
        uid: "u1".into(),
        resource_version: "7".into(),
    })
}

fn delete_step() -> Exchange {
    Exchange::new("delete PV pv-1", "DELETE", "/api/v1/persistentvolumes/pv-1")
        .body("/preconditions/uid", json!("u1"))
        .body("/preconditions/resourceVersion", json!("7"))
}

fn counted(w: &LeaderWriter, outcome: WriteVerdict) -> u64 {
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
    assert_eq!(counted(&w, WriteVerdict::NotLeader), 1);
}

#[tokio::test]
async fn with_the_lease_the_delete_is_sent_once_with_uid_and_resource_version() {
    let ok = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
    let (w, verifier) = writer(vec![delete_step().answer(200, ok)], true);
    w.apply(delete_pv()).await;
    verifier.assert_done();
    assert_eq!(counted(&w, WriteVerdict::Applied), 1);
}

#[tokio::test]
async fn a_pv_changed_since_the_plan_is_already_done_not_a_failure() {
    let (w, verifier) = writer(vec![delete_step().fail(409, "Conflict")], true);
    w.apply(delete_pv()).await;
    verifier.assert_done();
    assert_eq!(counted(&w, WriteVerdict::AlreadyDone), 1);
    assert_eq!(counted(&w, WriteVerdict::Failed), 0);
}

/// The Lease as the API server holds it: `holder`, renewed `ago` seconds before now, for 15 s, at resourceVersion 5.
fn lease(holder: &str, ago: i64) -> serde_json::Value {
    let renewed =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(ago);
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "localpv-cleanup", "namespace": "ns", "resourceVersion": "5"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": 1,
                    "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/localpv-cleanup";

async fn elect(steps: Vec<Exchange>) -> bool {
    let (client, verifier) = scripted::client(steps);
    let elector = super::lease::Elector::new(
        client,
        "ns",
        "localpv-cleanup",
        "r1",
        Duration::from_secs(15),
    );
    let leader = elector
        .try_acquire_or_renew()
        .await
        .expect("no transport error");
    verifier.assert_done();
    leader
}

#[tokio::test]
async fn a_replica_takes_a_missing_lease_renews_its_own_and_follows_a_live_one_without_writing() {
    let get = || Exchange::new("read the Lease", "GET", LEASE_PATH);
    let create = Exchange::new(
        "create the Lease",
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
    )
    .body("/spec/holderIdentity", json!("r1"));
    assert!(elect(vec![get().fail(404, "NotFound"), create]).await);
    let renew = Exchange::new("renew", "PUT", LEASE_PATH)
        .body("/metadata/resourceVersion", json!("5"))
        .body("/spec/holderIdentity", json!("r1"))
        .body("/spec/leaseTransitions", json!(1));
    assert!(elect(vec![get().answer(200, lease("r1", 3)), renew]).await);
    assert!(
        !elect(vec![get().answer(200, lease("r2", 3))]).await,
        "r2's live Lease: no write"
    );
}

#[tokio::test]
async fn two_replicas_racing_for_an_expired_lease_never_both_lead() {
    // r1 and r2 both read r3's expired Lease at resourceVersion 5 and both try to take it: the API server accepts
    // the first write and answers the second with 409, so exactly one leads.
    let get = || Exchange::new("read the Lease", "GET", LEASE_PATH).answer(200, lease("r3", 60));
    let take = |code: u16| {
        let step = Exchange::new("take over", "PUT", LEASE_PATH)
            .body("/metadata/resourceVersion", json!("5"))
            .body("/spec/leaseTransitions", json!(2));
        match code {
            200 => step,
            _ => step.fail(code, "Conflict"),
        }
    };
    let first = elect(vec![get(), take(200)]).await;
    let second = elect(vec![get(), take(409)]).await;
    assert!(first && !second, "first {first}, second {second}");
}
