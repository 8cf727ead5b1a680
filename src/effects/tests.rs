//! The writer against a scripted API server, request by request: what it sends, how it reads each answer, what
//! it counts. The last tests mutate a script to show that a dropped, doubled or unguarded write is caught.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::runtime::events::EventType;
use serde_json::json;

use super::scripted::{self, Exchange, Verifier, created};
use super::{Applied, Count, Failed, Reason, Verb, WriteOutcome, Writer, exactly, reference};

const PVS: &str = "/api/v1/persistentvolumes";

#[derive(Default)]
struct Counted(Mutex<Vec<(Verb, WriteOutcome)>>);

impl Count for Counted {
    fn request(&self, verb: Verb, outcome: WriteOutcome) {
        self.0.lock().unwrap().push((verb, outcome));
    }
}

fn writer(steps: Vec<Exchange>) -> (Writer, Verifier, Arc<Counted>) {
    let (client, verifier) = scripted::client(steps);
    let counted = Arc::new(Counted::default());
    let writer = Writer::new(client, "localpv-node", "n1", counted.clone());
    (writer, verifier, counted)
}

fn pv(name: &str) -> PersistentVolume {
    localpv_test_support::objects::Pv::local(name, "n1").build()
}

fn create_step() -> Exchange {
    Exchange::new("create PV pv-1", "POST", PVS)
        .query("fieldManager=localpv-node")
        .body("/metadata/name", json!("pv-1"))
        .answer_with(|seen| (201, created(seen, "u1", "7")))
}

fn delete_step(uid: &'static str, rv: &'static str) -> Exchange {
    Exchange::new("delete PV pv-1", "DELETE", &format!("{PVS}/pv-1"))
        .body("/preconditions/uid", json!(uid))
        .body("/preconditions/resourceVersion", json!(rv))
        .answer(
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        )
}

#[tokio::test]
async fn create_posts_once_with_the_field_manager_and_returns_the_created_object() {
    let (w, verifier, counted) = writer(vec![create_step()]);
    let done = w.create(&pv("pv-1")).await;
    verifier.assert_done();
    let Ok(Applied::Done(pv)) = done else {
        panic!("{done:?}")
    };
    assert_eq!(pv.metadata.uid.as_deref(), Some("u1"));
    assert_eq!(
        *counted.0.lock().unwrap(),
        [(Verb::Create, WriteOutcome::Ok)]
    );
}

#[rstest::rstest]
#[case::exists(409, "AlreadyExists", Ok(Applied::Moot), WriteOutcome::Moot)]
#[case::namespace_gone(404, "NotFound", Ok(Applied::Moot), WriteOutcome::Moot)]
#[case::server_error(500, "InternalError", Err(Failed), WriteOutcome::Error)]
#[case::forbidden(403, "Forbidden", Err(Failed), WriteOutcome::Error)]
#[tokio::test]
async fn create_answers_are_sorted_into_done_moot_and_failed(
    #[case] code: u16,
    #[case] reason: &str,
    #[case] expected: Result<Applied<()>, Failed>,
    #[case] outcome: WriteOutcome,
) {
    let (w, verifier, counted) = writer(vec![
        Exchange::new("create", "POST", PVS).fail(code, reason),
    ]);
    let got = w.create(&pv("pv-1")).await.map(|a| match a {
        Applied::Done(_) => Applied::Done(()),
        Applied::Moot => Applied::Moot,
    });
    verifier.assert_done();
    assert_eq!(got, expected);
    assert_eq!(*counted.0.lock().unwrap(), [(Verb::Create, outcome)]);
}

#[rstest::rstest]
#[case::deleted(None, Ok(Applied::Done(())))]
#[case::gone(Some((404, "NotFound")), Ok(Applied::Moot))]
#[case::changed_since_planned(Some((409, "Conflict")), Ok(Applied::Moot))]
#[case::unavailable(Some((503, "ServiceUnavailable")), Err(Failed))]
#[tokio::test]
async fn delete_is_guarded_by_uid_and_resource_version(
    #[case] failure: Option<(u16, &str)>,
    #[case] expected: Result<Applied<()>, Failed>,
) {
    let step = delete_step("u1", "7");
    let step = match failure {
        Some((code, reason)) => step.fail(code, reason),
        None => step,
    };
    let (w, verifier, _) = writer(vec![step]);
    let got = w
        .delete::<PersistentVolume>(None, "pv-1", Some(exactly("u1", Some("7"))))
        .await;
    verifier.assert_done();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn a_namespaced_delete_goes_to_the_objects_namespace() {
    let path = "/api/v1/namespaces/web/persistentvolumeclaims/data";
    let step = Exchange::new("delete claim", "DELETE", path)
        .body("/preconditions/uid", json!("c1"))
        .answer(
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        );
    let (w, verifier, _) = writer(vec![step]);
    let got = w
        .delete::<PersistentVolumeClaim>(Some("web"), "data", Some(exactly("c1", None)))
        .await;
    verifier.assert_done();
    assert_eq!(got, Ok(Applied::Done(())));
}

#[tokio::test]
async fn merge_patch_sends_the_patch_as_a_merge_patch_with_the_field_manager() {
    let patch = json!({"metadata": {"uid": "u1", "annotations": {"a": "b"}}});
    let step = Exchange::new("patch PV", "PATCH", &format!("{PVS}/pv-1"))
        .query("fieldManager=localpv-node")
        .check(|seen| {
            match seen.body == json!({"metadata": {"uid": "u1", "annotations": {"a": "b"}}}) {
                true => Ok(()),
                false => Err(format!("body {}", seen.body)),
            }
        })
        .answer(
            200,
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"}}),
        );
    let (w, verifier, counted) = writer(vec![step]);
    let got = w
        .merge_patch::<PersistentVolume>(None, "pv-1", &patch)
        .await;
    verifier.assert_done();
    assert!(matches!(got, Ok(Applied::Done(_))), "{got:?}");
    assert_eq!(
        *counted.0.lock().unwrap(),
        [(Verb::Patch, WriteOutcome::Ok)]
    );
}

#[tokio::test]
async fn apply_is_a_server_side_apply_forced_only_when_asked() {
    let path = format!("{PVS}/pv-1");
    let steps = vec![
        Exchange::new("apply", "PATCH", &path)
            .query("fieldManager=other")
            .check(|s| match s.query.contains("force=true") {
                true => Err("forced".into()),
                false => Ok(()),
            })
            .fail(409, "Conflict"),
        Exchange::new("forced apply", "PATCH", &path)
            .query("fieldManager=other")
            .query("force=true"),
    ];
    let (w, verifier, _) = writer(steps);
    let w = w.with_field_manager("other");
    assert_eq!(w.apply(&pv("pv-1"), false).await, Ok(Applied::Moot));
    assert!(w.apply(&pv("pv-1"), true).await.is_ok_and(|a| a.is_done()));
    verifier.assert_done();
}

#[tokio::test]
async fn an_event_names_its_object_reason_and_action_and_lands_in_the_objects_namespace() {
    let long = "x".repeat(1500);
    let steps = vec![
        Exchange::new(
            "event on a PV",
            "POST",
            "/apis/events.k8s.io/v1/namespaces/default/events",
        )
        .body("/reason", json!("WipeCompleted"))
        .body("/action", json!("WipeCompleted"))
        .body("/type", json!("Normal"))
        .body("/regarding/kind", json!("PersistentVolume"))
        .body("/regarding/name", json!("pv-1"))
        .body("/regarding/uid", json!("u1"))
        .body("/reportingController", json!("localpv-node"))
        .body("/reportingInstance", json!("n1"))
        .check(|s| match s.at("/note").as_str().map(str::len) {
            Some(1000) => Ok(()),
            other => Err(format!("note of {other:?} chars")),
        }),
        Exchange::new(
            "event on a claim",
            "POST",
            "/apis/events.k8s.io/v1/namespaces/web/events",
        )
        .body("/reason", json!("NoLocalVolume"))
        .body("/action", json!("Explain"))
        .body("/type", json!("Warning"))
        .body("/regarding/namespace", json!("web"))
        .body("/regarding/uid", json!(null)),
    ];
    let (w, verifier, counted) = writer(steps);
    let on_pv = reference::<PersistentVolume>(None, "pv-1", Some("u1"));
    let on_claim = reference::<PersistentVolumeClaim>(Some("web"), "data", Some(""));
    let first = w.event(&on_pv, EventType::Normal, Reason::WipeCompleted, &long);
    assert_eq!(first.await, Ok(()));
    let second = w.event(
        &on_claim,
        EventType::Warning,
        Reason::NoLocalVolume,
        "no fit",
    );
    assert_eq!(second.await, Ok(()));
    verifier.assert_done();
    assert_eq!(counted.0.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_failed_event_is_returned_and_counted() {
    let path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let (w, verifier, counted) = writer(vec![
        Exchange::new("event", "POST", path).fail(500, "InternalError"),
    ]);
    let on_pv = reference::<PersistentVolume>(None, "pv-1", None);
    let got = w
        .event(&on_pv, EventType::Warning, Reason::WipeFailed, "boom")
        .await;
    verifier.assert_done();
    assert_eq!(got, Err(Failed));
    assert_eq!(
        *counted.0.lock().unwrap(),
        [(Verb::Event, WriteOutcome::Error)]
    );
}

/// Create, then delete with the created object's UID and resourceVersion: the sequence the mutation tests break.
async fn create_then_delete(steps: Vec<Exchange>) -> Vec<String> {
    let (w, verifier, _) = writer(steps);
    if let Ok(Applied::Done(pv)) = w.create(&pv("pv-1")).await {
        let uid = pv.metadata.uid.unwrap_or_default();
        let rv = pv.metadata.resource_version;
        let pre = exactly(&uid, rv.as_deref());
        let _ = w.delete::<PersistentVolume>(None, "pv-1", Some(pre)).await;
    }
    verifier.problems()
}

#[tokio::test]
async fn the_script_followed_exactly_has_no_problem() {
    let problems = create_then_delete(vec![create_step(), delete_step("u1", "7")]).await;
    assert_eq!(problems, Vec::<String>::new());
}

#[tokio::test]
async fn a_dropped_write_is_caught() {
    // The script expects a second delete the code never sends: as if the code had dropped it.
    let steps = vec![
        create_step(),
        delete_step("u1", "7"),
        delete_step("u1", "7"),
    ];
    let problems = create_then_delete(steps).await;
    assert_eq!(
        problems,
        ["expected delete PV pv-1 (DELETE /api/v1/persistentvolumes/pv-1) never came"]
    );
}

#[tokio::test]
async fn a_doubled_write_is_caught() {
    // The script leaves the delete out: the one the code sends is one too many, as a doubled write would be.
    let problems = create_then_delete(vec![create_step()]).await;
    assert_eq!(
        problems,
        ["unexpected request DELETE /api/v1/persistentvolumes/pv-1"]
    );
}

#[tokio::test]
async fn a_write_without_its_precondition_is_caught() {
    // The script wants the delete guarded by another resourceVersion than the code holds: the check that
    // catches a delete sent without (or with a stale) precondition.
    let problems = create_then_delete(vec![create_step(), delete_step("u1", "8")]).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("/preconditions/resourceVersion is \"7\", expected \"8\""),
        "{problems:?}"
    );
}
