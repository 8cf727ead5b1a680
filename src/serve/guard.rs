//! Per-request bounds, as one axum middleware in front of every route: how many requests run at once, how large a
//! body may be, how much body memory all requests hold together, and how long a body may take to arrive.
//!
//! ```text
//!  request ─> probe (/livez, /readyz)? ──────────────────────────────────────────────> handler
//!         └─> slot (max_requests, else 503) ─> Content-Length ≤ body_limit (else 413)
//!               ─> reserve bytes from the budget as they arrive (else 503) ─> whole body within body_timeout
//!               (else 408) ─> handler (reservation held until the response is built)
//!                                    └─ Charge (request extension): the handler reserves from the same budget
//!                                       what decoding the body costs beyond its bytes (else 503)
//! ```
//!
//! Refusals are answered here, in one place, with a reason a human can act on, and logged.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use super::limits::Limits;
use super::warm::WARM;

/// The shared counters behind the middleware.
#[derive(Clone)]
pub struct RequestBounds {
    limits: Arc<Limits>,
    slots: Arc<Semaphore>,
    /// One permit per byte of request body held in memory.
    budget: Arc<Semaphore>,
}

/// Why a request was refused before its handler ran.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("failed to admit the request: {0} requests are already in flight")]
    Busy(usize),
    #[error("failed to read the request body: {got} bytes exceed the limit of {limit}")]
    TooLarge { got: u64, limit: usize },
    #[error(
        "failed to admit the request body: {want} more bytes would exceed the {budget}-byte budget of request \
         bodies held at once (--http-body-budget, env LOCALPV_HTTP_BODY_BUDGET)"
    )]
    OverBudget { want: u64, budget: usize },
    #[error(
        "failed to admit the decoded request: {want} more bytes would exceed the {budget}-byte budget of request \
         bodies held at once (--http-body-budget, env LOCALPV_HTTP_BODY_BUDGET)"
    )]
    DecodedOverBudget { want: u64, budget: usize },
    #[error("failed to read the request body within {0:?}")]
    SlowBody(std::time::Duration),
    #[error("failed to read the request body: {0}")]
    Body(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = match self {
            Refusal::Busy(_) | Refusal::OverBudget { .. } | Refusal::DecodedOverBudget { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Refusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::SlowBody(_) => StatusCode::REQUEST_TIMEOUT,
            Refusal::Body(_) => StatusCode::BAD_REQUEST,
        };
        match status {
            StatusCode::SERVICE_UNAVAILABLE => debug!(error = %self, "request refused"),
            _ => warn!(error = %self, "request refused"),
        }
        let mut response = (status, self.to_string()).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}

/// A request's share of the memory budget beyond its body, handed to the handler as a request extension: a body's
/// bytes are charged as they arrive, but what decoding them builds can be many times more (a `String` per
/// four-byte name), so the handler charges that too, from the same budget, before it uses it.
#[derive(Clone)]
pub struct Charge(RequestBounds);

impl Charge {
    /// Reserves `bytes` more until the returned permit is dropped; 503 (`DecodedOverBudget`) when the budget has
    /// not that much left.
    pub fn reserve(&self, bytes: usize) -> Result<Option<OwnedSemaphorePermit>, Refusal> {
        let want = bytes as u64;
        self.0
            .reserve(want)
            .map_err(|_| Refusal::DecodedOverBudget {
                want,
                budget: self.0.limits.body_budget,
            })
    }
}

/// Paths that are always answered: kubelet's probes must not fail because the server is busy.
const PROBES: [&str; 2] = ["/livez", "/readyz"];

impl RequestBounds {
    pub fn new(limits: Limits) -> RequestBounds {
        RequestBounds {
            slots: Arc::new(Semaphore::new(limits.max_requests.max(1))),
            budget: Arc::new(Semaphore::new(
                limits.body_budget.min(Semaphore::MAX_PERMITS),
            )),
            limits: Arc::new(limits),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn reserve(&self, bytes: u64) -> Result<Option<OwnedSemaphorePermit>, Refusal> {
        if bytes == 0 {
            return Ok(None);
        }
        let over = || Refusal::OverBudget {
            want: bytes,
            budget: self.limits.body_budget,
        };
        let n = u32::try_from(bytes).map_err(|_| over())?;
        self.budget
            .clone()
            .try_acquire_many_owned(n)
            .map(Some)
            .map_err(|_| over())
    }

    /// Reads the whole body within the limits; the permits stay reserved for as long as the caller holds them.
    async fn read_body(
        &self,
        body: Body,
        declared: Option<u64>,
    ) -> Result<(Bytes, Vec<OwnedSemaphorePermit>), Refusal> {
        let limit = self.limits.body_limit;
        if let Some(len) = declared.filter(|&len| len > limit as u64) {
            return Err(Refusal::TooLarge { got: len, limit });
        }
        let mut held: Vec<OwnedSemaphorePermit> =
            self.reserve(declared.unwrap_or(0))?.into_iter().collect();
        let mut reserved = declared.unwrap_or(0);
        let mut stream = body.into_data_stream();
        let mut data = WARM.take(declared.unwrap_or(0) as usize);
        let read = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| Refusal::Body(e.to_string()))?;
                let total = (data.len() + chunk.len()) as u64;
                if total > limit as u64 {
                    return Err(Refusal::TooLarge { got: total, limit });
                }
                if total > reserved {
                    held.extend(self.reserve(total - reserved)?);
                    reserved = total;
                }
                data.extend_from_slice(&chunk);
            }
            Ok(())
        };
        match tokio::time::timeout(self.limits.body_timeout, read).await {
            Ok(Ok(())) => Ok((WARM.bytes(data), held)),
            Ok(Err(refusal)) => Err(refusal),
            Err(_) => Err(Refusal::SlowBody(self.limits.body_timeout)),
        }
    }
}

/// The middleware: `Router::layer(middleware::from_fn_with_state(guard, serve::guard::limit))`.
pub async fn limit(State(guard): State<RequestBounds>, request: Request, next: Next) -> Response {
    if PROBES.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let Ok(_slot) = guard.slots.clone().try_acquire_owned() else {
        return Refusal::Busy(guard.limits.max_requests).into_response();
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (mut parts, body) = request.into_parts();
    let (bytes, _held) = match guard.read_body(body, declared).await {
        Ok(read) => read,
        Err(refusal) => return refusal.into_response(),
    };
    parts.extensions.insert(Charge(guard.clone()));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
