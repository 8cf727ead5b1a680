//! The HTTP face of the extender: `fn app(state) -> Router`.
//!
//! ```text
//!  POST filter/prioritize ─> body (capped: 413) ─> ready? (503) ─> decode (400; over a count limit: 413)
//!    ─> charge its decoded cost to the memory budget (503) ─> verbs::* ─> encode (warm buffer)
//!    on the request's task; on blocking threads: decoding a body over 256 KiB, deciding one over it or heavy
//!    (verbs::light); the whole raced against the deadline (Error answer)
//!  GET /livez (always 200)   GET /readyz (caches synced and not shutting down)   GET /metrics
//! ```
//!
//! Each request reads the current snapshot once. A large request is decoded and decided on blocking threads so it
//! never stalls the runtime; a small one (every `NodeNames` request) on its own task unless its pod names so many
//! claims that the decision is heavy, since each hop to another thread waits for a core on a loaded machine and was
//! the whole of its latency tail. Failures become responses in exactly one place (`Reject::into_response`), and
//! are logged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use prometheus_client::registry::Registry;
use tracing::{debug, warn};

// The state's cache type, for callers that build an `AppState`.
pub use super::cache::Cache;
use super::metrics::{Metrics, NodeResult, RequestOutcome, ResultLabels, WebhookVerb};
use super::model::Strategy;
use super::verbs;
use super::wire::{DecodeError, DecodeLimits, ExtenderArgs, ExtenderFilterResult};
use crate::serve::guard::{Charge, Refusal};
use crate::serve::warm::WARM;

/// Longest a request waits for the watch to catch up with objects the scheduler already knows.
const LAG_WAIT: Duration = Duration::from_secs(1);
/// Bodies up to this size are decoded on the request's task, and decided there too when the decision is light
/// (`verbs::light`): 5,000 node names are about 40 KiB and take about a millisecond; a `Nodes` body of 30 nodes
/// is already larger.
const INLINE_BODY: usize = 256 << 10;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub filter_path: String,
    pub prioritize_path: String,
    pub body_limit: usize,
    /// Counts a request may hold once decoded (`--max-nodes`...): more get 413.
    pub decode: DecodeLimits,
    pub deadline: Duration,
    pub strategy: Strategy,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            filter_path: "/filter".into(),
            prioritize_path: "/prioritize".into(),
            body_limit: 64 << 20,
            decode: DecodeLimits::default(),
            deadline: Duration::from_secs(4),
            strategy: Strategy::Binpack,
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub cache: Arc<Cache>,
    pub config: Arc<ServerConfig>,
    pub metrics: Metrics,
    pub registry: Arc<Registry>,
}

impl AppState {
    /// State with its own registry; the wiring uses the same shape with the process-wide one.
    pub fn new(cache: Arc<Cache>, config: ServerConfig) -> AppState {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        AppState {
            cache,
            config: Arc::new(config),
            metrics,
            registry: Arc::new(registry),
        }
    }
}

pub fn app(state: AppState) -> Router {
    let limit = state.config.body_limit;
    Router::new()
        .route(&state.config.filter_path, verb(WebhookVerb::Filter))
        .route(&state.config.prioritize_path, verb(WebhookVerb::Prioritize))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.cache.is_ready() {
        "ok".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced or shutting down",
        )
            .into_response()
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    crate::serve::metrics_response(&state.registry)
}

/// The guard's handle on the memory budget; absent when the app is served without `serve::listen::guarded` (unit
/// tests calling the router directly), and then nothing is charged.
type MaybeCharge = Option<Extension<Charge>>;

/// The route of one verb.
fn verb(verb: WebhookVerb) -> MethodRouter<AppState> {
    post(
        move |State(state): State<AppState>,
              charge: MaybeCharge,
              body: Result<Bytes, BytesRejection>| { handle(state, verb, charge, body) },
    )
}

/// Why a request got no decision.
#[derive(Debug, thiserror::Error)]
enum Reject {
    #[error("failed to read the request body: {0}")]
    Body(BytesRejection),
    #[error("failed to decode ExtenderArgs: {0}")]
    Malformed(serde_json::Error),
    #[error("failed to decode ExtenderArgs: {0}")]
    TooMany(DecodeError),
    #[error(transparent)]
    Budget(Refusal),
    #[error("failed to decide: extender caches have not synced yet")]
    NotReady,
    #[error("failed to decide within {0:?}")]
    Deadline(Duration),
    #[error("failed to decide: {0}")]
    Internal(String),
}

impl Reject {
    fn outcome(&self) -> RequestOutcome {
        match self {
            Reject::Body(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                RequestOutcome::TooLarge
            }
            Reject::Body(_) | Reject::Malformed(_) => RequestOutcome::BadRequest,
            Reject::TooMany(_) => RequestOutcome::TooLarge,
            Reject::Budget(_) => RequestOutcome::OverBudget,
            Reject::NotReady => RequestOutcome::NotReady,
            Reject::Deadline(_) => RequestOutcome::Deadline,
            Reject::Internal(_) => RequestOutcome::Internal,
        }
    }

    fn into_response(self, verb: WebhookVerb) -> Response {
        warn!(?verb, error = %self, "extender request rejected");
        let message = self.to_string();
        match self {
            Reject::Body(r) => (r.status(), message).into_response(),
            Reject::Malformed(_) => (StatusCode::BAD_REQUEST, message).into_response(),
            Reject::TooMany(_) => (StatusCode::PAYLOAD_TOO_LARGE, message).into_response(),
            // 503 with Retry-After, as the guard answers a body over the same budget.
            Reject::Budget(refusal) => refusal.into_response(),
            Reject::NotReady => (StatusCode::SERVICE_UNAVAILABLE, message).into_response(),
            // A filter Error is reported by the scheduler on the pod; prioritize has no such field, and the
            // scheduler ignores failed prioritize calls.
            Reject::Deadline(_) | Reject::Internal(_) if verb == WebhookVerb::Filter => {
                axum::Json(ExtenderFilterResult::error(message, true)).into_response()
            }
            Reject::Deadline(_) | Reject::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, message).into_response()
            }
        }
    }
}

async fn handle(
    state: AppState,
    verb: WebhookVerb,
    charge: MaybeCharge,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let charge = charge.map(|Extension(c)| c);
    let result = decide(&state, verb, charge, body).await;
    let elapsed = started.elapsed().as_secs_f64();
    match result {
        Ok(json) => {
            state.metrics.request(verb, RequestOutcome::Ok, elapsed);
            debug!(?verb, seconds = elapsed, "extender request answered");
            ([(header::CONTENT_TYPE, "application/json")], json).into_response()
        }
        Err(reject) => {
            state.metrics.request(verb, reject.outcome(), elapsed);
            reject.into_response(verb)
        }
    }
}

async fn decide(
    state: &AppState,
    verb: WebhookVerb,
    charge: Option<Charge>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, Reject> {
    let body = body.map_err(Reject::Body)?;
    if !state.cache.is_ready() {
        return Err(Reject::NotReady);
    }
    let deadline = state.config.deadline;
    let strategy = state.config.strategy;
    let metrics = state.metrics.clone();
    let inline = body.len() <= INLINE_BODY;
    let limits = state.config.decode;
    let reserve = move |bytes: usize| match &charge {
        Some(charge) => charge.reserve(bytes).map_err(Reject::Budget),
        None => Ok(None),
    };
    let work = async move {
        // What decoding may allocate is charged before it does; once decoded, the charge becomes what the request
        // holds until its answer is encoded (label maps a decision may build and the answer included). Each charge
        // is held by the closure doing the work, so a request past its deadline keeps it until that work ends.
        let decoding = reserve(ExtenderArgs::decode_bound(body.len(), &limits))?;
        let args = off_runtime(inline, "decode", move || {
            let decoded = ExtenderArgs::decode_within(body, &limits);
            // NB: released before the second charge, which could otherwise fail for the sake of the first.
            drop(decoding);
            decoded.map_err(|e| match e {
                DecodeError::Malformed(e) => Reject::Malformed(e),
                too_many => Reject::TooMany(too_many),
            })
        })
        .await?;
        let deciding = reserve(args.cost_bytes())?;
        // Wait out watch lag for at most a quarter of the deadline, leaving the rest for the decision.
        let until = tokio::time::Instant::now() + (deadline / 4).min(LAG_WAIT);
        let snapshot = state.cache.load_knowing(&args, until).await;
        off_runtime(inline && verbs::light(&args), "decision", move || {
            let _deciding = deciding;
            let encoded = match verb {
                WebhookVerb::Filter => {
                    let (result, counts) = verbs::filter(args, &snapshot);
                    for (result, n) in [
                        (NodeResult::Passed, counts.passed),
                        (NodeResult::Failed, counts.failed),
                        (NodeResult::Unresolvable, counts.unresolvable),
                    ] {
                        metrics
                            .nodes
                            .get_or_create(&ResultLabels { result })
                            .inc_by(n as u64);
                    }
                    // A `Nodes` answer echoes up to the whole request: a warm buffer spares its page faults.
                    let mut out = WARM.take(result.json_size_hint());
                    result.write_json(&mut out).map(|()| WARM.bytes(out))
                }
                WebhookVerb::Prioritize => {
                    serde_json::to_vec(&verbs::prioritize(&args, &snapshot, strategy))
                        .map(Bytes::from)
                }
            };
            encoded.map_err(|e| Reject::Internal(e.to_string()))
        })
        .await
    };
    let started = tokio::time::Instant::now();
    match tokio::time::timeout(deadline, work).await {
        // NB: work done on this task cannot be cut short; past the deadline it is as late as work that was.
        Ok(_) if started.elapsed() >= deadline => Err(Reject::Deadline(deadline)),
        Ok(result) => result,
        Err(_) => Err(Reject::Deadline(deadline)),
    }
}

/// Runs `work` on this task when the request is small (a thread hop would cost more than the work, and under load
/// each hop waits for a core), else on a blocking thread so a large request never stalls the runtime.
async fn off_runtime<T: Send + 'static>(
    inline: bool,
    what: &str,
    work: impl FnOnce() -> Result<T, Reject> + Send + 'static,
) -> Result<T, Reject> {
    if inline {
        return work();
    }
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(join) => Err(Reject::Internal(format!("{what} task failed: {join}"))),
    }
}
