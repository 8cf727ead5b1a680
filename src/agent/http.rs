//! The agent's small HTTP surface: `/livez` (always 200), `/readyz` (200 once caches synced and the first pass
//! finished, 503 again once shutdown begins), `/metrics` (Prometheus text) and `/disks` (what the last pass saw).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use axum::Router;
use axum::extract::State as Extract;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

#[derive(Clone)]
pub struct State {
    ready: Arc<AtomicBool>,
    registry: Arc<Registry>,
    disks: Arc<RwLock<serde_json::Value>>,
}

impl State {
    pub fn new(registry: Registry) -> State {
        State {
            ready: Arc::new(AtomicBool::new(false)),
            registry: Arc::new(registry),
            disks: Arc::new(RwLock::new(serde_json::json!({"ready": false}))),
        }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn set_disks(&self, value: serde_json::Value) {
        *self.disks.write().unwrap_or_else(|e| e.into_inner()) = value;
    }
}

pub fn app(state: State) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/disks", get(disks))
        .with_state(state)
}

async fn readyz(Extract(state): Extract<State>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        "ok".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

async fn metrics(Extract(state): Extract<State>) -> Response {
    crate::serve::metrics_response(&state.registry)
}

async fn disks(Extract(state): Extract<State>) -> Response {
    let value = state
        .disks
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    axum::Json(value).into_response()
}

pub async fn serve(
    listener: TcpListener,
    state: State,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let flag = state.clone();
    axum::serve(listener, app(state))
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
            flag.set_ready(false);
        })
        .await
        .context("HTTP server failed")
}
