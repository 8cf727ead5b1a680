//! Recovery's writes against a scripted API server: Events first, then the claim and the pod with their UIDs; a
//! failed pod delete is tried again in the same pass; nothing without the Lease.

use std::time::SystemTime;

use serde_json::json;

use super::{Memory, act};
use crate::controller::tests::writer;
use crate::effects::scripted::Exchange;
use crate::recovery::{Decision, Loss, Lost, Replica, Steps};

fn lost() -> Lost {
    Lost {
        pv: "pv-a".into(),
        pv_uid: "uid-pv".into(),
        node: "node-1".into(),
        class: None,
        namespace: "db".into(),
        claim: "data-web-0".into(),
        claim_uid: Some("uid-claim".into()),
        loss: Loss::DiskFailed {
            disk: "disk-a".into(),
            reason: "FilesystemShutDown".into(),
            message: "shut down".into(),
        },
    }
}

fn steps() -> Steps {
    Steps {
        namespace: "db".into(),
        claim: "data-web-0".into(),
        claim_uid: "uid-claim".into(),
        replica: Replica {
            set: "web".into(),
            set_uid: "uid-web".into(),
            ordinal: 0,
            pod: "web-0".into(),
            pod_uid: Some("uid-pod".into()),
        },
        message: "lost".into(),
    }
}

fn event(about: &str) -> Exchange {
    Exchange::new(
        &format!("event on {about}"),
        "POST",
        "/apis/events.k8s.io/v1/namespaces/db/events",
    )
    .body("/regarding/name", json!(about))
    .body("/reason", json!("ReplicaRecovered"))
}

#[tokio::test]
async fn events_go_first_then_the_claim_and_the_pod_with_their_uids_and_a_failed_pod_delete_is_tried_again()
 {
    let ok = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
    let pv_event = Exchange::new(
        "event on pv-a",
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
    )
    .body("/regarding/name", json!("pv-a"));
    let claim = Exchange::new(
        "delete the claim",
        "DELETE",
        "/api/v1/namespaces/db/persistentvolumeclaims/data-web-0",
    )
    .body("/preconditions/uid", json!("uid-claim"))
    .answer(200, ok.clone());
    let pod = || {
        Exchange::new(
            "delete the pod",
            "DELETE",
            "/api/v1/namespaces/db/pods/web-0",
        )
        .body("/preconditions/uid", json!("uid-pod"))
    };
    let (w, verifier) = writer(
        vec![
            pv_event,
            event("data-web-0"),
            event("web-0"),
            event("web"),
            claim,
            pod().fail(500, "InternalError"),
            pod().answer(200, ok),
        ],
        true,
    );
    let mut memory = Memory::default();
    act(
        &w,
        &lost(),
        Decision::Recover(steps()),
        &mut memory,
        SystemTime::now(),
    )
    .await;
    verifier.assert_done();
    assert!(
        memory.decisions.in_flight.contains_key("uid-web"),
        "the set's replica is in flight"
    );
}

#[tokio::test]
async fn without_the_lease_a_recovery_writes_nothing() {
    let (w, verifier) = writer(vec![], false);
    let mut memory = Memory::default();
    act(
        &w,
        &lost(),
        Decision::Recover(steps()),
        &mut memory,
        SystemTime::now(),
    )
    .await;
    verifier.assert_done();
    assert!(memory.decisions.in_flight.is_empty());
}
