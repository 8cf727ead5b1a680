//! A scripted API server for shell tests: a tower service behind a real `kube::Client` that expects requests in
//! a given order, checks each (method, path, query, body) and answers it. No cluster, no socket.
//!
//! ```text
//!  code under test ──> kube::Client ──> Scripted service: next Exchange? ── matches ──> its answer
//!                                                        └─ no / wrong ─> 500 + a problem recorded
//!  test ──> Verifier::problems(): requests that did not match, steps that never came
//! ```
//!
//! A request nobody expected, a request that fails its step's check and a step the code never reached are all
//! problems, so a test fails when a write is dropped, doubled or sent without its precondition. A mismatch is
//! answered 500, which the writer treats as a retryable failure: the code under test keeps running and the test
//! reads every problem at the end instead of a panic inside the client's worker task.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use kube::Client;
use serde_json::{Value, json};

/// One request as the API server received it.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

impl Received {
    /// `METHOD /path?query`, for problems and logs.
    pub fn line(&self) -> String {
        match self.query.is_empty() {
            true => format!("{} {}", self.method, self.path),
            false => format!("{} {}?{}", self.method, self.path, self.query),
        }
    }

    /// The body's value at a JSON pointer (`/metadata/name`), `Null` when absent.
    pub fn at(&self, pointer: &str) -> &Value {
        self.body.pointer(pointer).unwrap_or(&Value::Null)
    }
}

type Expectation = Box<dyn Fn(&Received) -> Result<(), String> + Send>;
type Reply = Box<dyn Fn(&Received) -> (u16, Value) + Send>;

/// One expected request and its answer.
pub struct Exchange {
    what: String,
    method: String,
    path: String,
    checks: Vec<Expectation>,
    answer: Reply,
}

impl Exchange {
    /// A request `method path` (path without the query), answered 200 with the request's own body until
    /// [`Exchange::answer`] says otherwise.
    pub fn new(what: &str, method: &str, path: &str) -> Exchange {
        Exchange {
            what: what.to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            checks: Vec::new(),
            answer: Box::new(|seen| (200, seen.body.clone())),
        }
    }

    /// The request must pass `check` (an `Err` says what is wrong).
    pub fn check(
        mut self,
        check: impl Fn(&Received) -> Result<(), String> + Send + 'static,
    ) -> Exchange {
        self.checks.push(Box::new(check));
        self
    }

    /// The body must hold `value` at the JSON pointer.
    pub fn body(self, pointer: &'static str, value: Value) -> Exchange {
        self.check(move |seen| match seen.at(pointer) == &value {
            true => Ok(()),
            false => Err(format!(
                "{pointer} is {}, expected {value}",
                seen.at(pointer)
            )),
        })
    }

    /// The query string must contain `pair` (`fieldManager=localpv-node`).
    pub fn query(self, pair: &'static str) -> Exchange {
        self.check(move |seen| match seen.query.split('&').any(|p| p == pair) {
            true => Ok(()),
            false => Err(format!("query {:?} lacks {pair}", seen.query)),
        })
    }

    /// Reply with `status` and `body`.
    pub fn answer(mut self, status: u16, body: Value) -> Exchange {
        self.answer = Box::new(move |_| (status, body.clone()));
        self
    }

    /// Reply computed from the request (echo it with a UID, say).
    pub fn answer_with(
        mut self,
        answer: impl Fn(&Received) -> (u16, Value) + Send + 'static,
    ) -> Exchange {
        self.answer = Box::new(answer);
        self
    }

    /// Reply with a `Status` failure, as the API server does (`404 NotFound`, `409 Conflict`...).
    pub fn fail(self, code: u16, reason: &str) -> Exchange {
        let body = status(code, reason);
        self.answer(code, body)
    }
}

/// A `meta/v1 Status` failure body.
pub fn status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("scripted {reason}"),
        "reason": reason,
        "code": code,
    })
}

/// The request body with server-set fields added, as a create answers.
pub fn created(seen: &Received, uid: &str, resource_version: &str) -> Value {
    let mut body = seen.body.clone();
    body["metadata"]["uid"] = json!(uid);
    body["metadata"]["resourceVersion"] = json!(resource_version);
    body
}

#[derive(Default)]
struct Script {
    steps: VecDeque<Exchange>,
    seen: Vec<Received>,
    problems: Vec<String>,
}

/// Reads what the scripted server saw once the code under test is done.
#[derive(Clone)]
pub struct Verifier {
    state: Arc<Mutex<Script>>,
}

impl Verifier {
    /// Every request received, in order.
    pub fn seen(&self) -> Vec<Received> {
        self.lock().seen.clone()
    }

    /// What went against the script: unexpected or failing requests, then steps never reached.
    pub fn problems(&self) -> Vec<String> {
        let state = self.lock();
        let mut out = state.problems.clone();
        out.extend(
            state
                .steps
                .iter()
                .map(|s| format!("expected {} ({} {}) never came", s.what, s.method, s.path)),
        );
        out
    }

    /// Panics listing every problem and the requests seen.
    #[track_caller]
    pub fn assert_done(&self) {
        let problems = self.problems();
        if !problems.is_empty() {
            let seen: Vec<String> = self.seen().iter().map(Received::line).collect();
            panic!(
                "the API server script was not followed:\n  {}\nrequests seen:\n  {}",
                problems.join("\n  "),
                seen.join("\n  ")
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A client whose API server follows `steps` in order.
pub fn client(steps: Vec<Exchange>) -> (Client, Verifier) {
    let state = Arc::new(Mutex::new(Script {
        steps: steps.into(),
        ..Script::default()
    }));
    let verifier = Verifier {
        state: state.clone(),
    };
    let client = serve(move |seen| answer(&state, seen));
    (client, verifier)
}

/// A client whose every request is answered by `answer` (status and JSON body).
pub fn serve(answer: impl Fn(Received) -> (u16, Value) + Send + Sync + 'static) -> Client {
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let answer = answer.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let seen = Received {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: parts.uri.query().unwrap_or_default().to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (code, body) = answer(seen);
            let response = Response::builder()
                .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap_or_default();
            Ok::<_, Infallible>(response)
        }
    });
    Client::new(service, "default")
}

fn answer(state: &Mutex<Script>, seen: Received) -> (u16, Value) {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.seen.push(seen.clone());
    let Some(step) = state.steps.pop_front() else {
        state
            .problems
            .push(format!("unexpected request {}", seen.line()));
        return (500, status(500, "Unexpected"));
    };
    let mut wrong = Vec::new();
    if step.method != seen.method || step.path != seen.path {
        wrong.push(format!("got {}", seen.line()));
    }
    wrong.extend(step.checks.iter().filter_map(|c| c(&seen).err()));
    if wrong.is_empty() {
        return (step.answer)(&seen);
    }
    state.problems.push(format!(
        "expected {} ({} {}): {}",
        step.what,
        step.method,
        step.path,
        wrong.join("; ")
    ));
    (500, status(500, "ScriptMismatch"))
}
