//! The agent's small HTTP surface: `/livez` (always 200), `/readyz` (200 once caches synced and the first pass
//! finished, 503 again once shutdown begins), `/metrics` (Prometheus text) and `/disks` (what the last pass saw).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State as Extract;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::disk::Discovery;
use crate::plan::{DiskLedger, Unpublished};
use crate::serve::{Limits, listen};

#[derive(Clone)]
pub struct HttpState {
    ready: Arc<AtomicBool>,
    registry: Arc<Registry>,
    disks: Arc<RwLock<Option<Disks>>>,
    /// A line `/readyz` adds while something optional is off (the inventory without its CRD).
    note: Arc<RwLock<Option<String>>>,
    /// Why the agent has not started yet (waiting for its state directory lock); shown first.
    waiting: Arc<RwLock<Option<String>>>,
}

impl HttpState {
    pub fn new(registry: Registry) -> HttpState {
        HttpState {
            ready: Arc::new(AtomicBool::new(false)),
            registry: Arc::new(registry),
            disks: Arc::new(RwLock::new(None)),
            note: Arc::new(RwLock::new(None)),
            waiting: Arc::new(RwLock::new(None)),
        }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn set_note(&self, note: Option<String>) {
        *self.note.write().unwrap_or_else(|e| e.into_inner()) = note;
    }

    pub fn set_waiting(&self, why: Option<String>) {
        *self.waiting.write().unwrap_or_else(|e| e.into_inner()) = why;
    }

    pub fn set_disks(&self, disks: Disks) {
        *self.disks.write().unwrap_or_else(|e| e.into_inner()) = Some(disks);
    }
}

/// What the last pass saw, as `/disks` shows it. Kept as the pass left it (shared, not copied) and put into JSON
/// only when asked: a pass over thousands of disks does not encode them for nobody.
pub struct Disks {
    pub node: String,
    pub found: Arc<Discovery>,
    pub unpublished: Vec<Unpublished>,
    pub wiping: Vec<String>,
    pub ledger: Arc<DiskLedger>,
}

impl Disks {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "node": self.node,
            "disks": self.found.disks.iter().map(|d| &**d).collect::<Vec<_>>(),
            "unusable": self.found.unusable,
            "failedClasses": self.found.failed_classes,
            "unpublished": self.unpublished,
            "wiping": self.wiping,
            "ledger": *self.ledger,
        })
    }
}

pub fn app(state: HttpState) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/disks", get(disks))
        .with_state(state)
}

async fn readyz(Extract(state): Extract<HttpState>) -> Response {
    let waiting = state
        .waiting
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(why) = waiting {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready\n{why}\n"),
        )
            .into_response();
    }
    let note = state.note.read().unwrap_or_else(|e| e.into_inner()).clone();
    let (status, text) = if state.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    };
    match note {
        Some(note) => (status, format!("{text}\n{note}\n")).into_response(),
        None => (status, text).into_response(),
    }
}

async fn metrics(Extract(state): Extract<HttpState>) -> Response {
    crate::serve::metrics_response(&state.registry)
}

async fn disks(Extract(state): Extract<HttpState>) -> Response {
    let value = match &*state.disks.read().unwrap_or_else(|e| e.into_inner()) {
        Some(disks) => disks.json(),
        None => serde_json::json!({"ready": false}),
    };
    axum::Json(value).into_response()
}

/// Serves `app` within `limits` (connection cap, timeouts, request slots: `serve::listen`) until shutdown. The cap
/// keeps the port's descriptors far below RLIMIT_NOFILE, so a flood of clients never starves discovery, wipes
/// or config reloads of descriptors.
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    limits: Limits,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let flag = state.clone();
    let stopped = async move {
        let _ = shutdown.wait_for(|s| *s).await;
        flag.set_ready(false);
    };
    listen::serve_plain(listener, limits, app(state), stopped).await;
    Ok(())
}
