//! Small pieces both long-running components (`localpv node`, `localpv extender`) share: the shutdown signal, the
//! Prometheus text response, and the bounded HTTP server (`listen`, `guard`, `conns`, `limits`) that keeps a
//! flood of clients from taking the process down or starving its real work, with its warm buffers (`warm`).

pub mod conns;
pub mod guard;
pub mod limits;
pub mod listen;
pub mod warm;

pub use limits::{LimitArgs, Limits};

use anyhow::Context;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;

/// Resolves on the first SIGTERM or SIGINT.
pub async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term =
        signal(SignalKind::terminate()).context("failed to install the SIGTERM handler")?;
    let mut int =
        signal(SignalKind::interrupt()).context("failed to install the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// `registry` in the OpenMetrics text format.
pub fn metrics_response(registry: &Registry) -> Response {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to encode metrics",
        )
            .into_response(),
    }
}
