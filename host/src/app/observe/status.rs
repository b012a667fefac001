//! The status endpoint (`--status-addr`), on axum: `/metrics` (OpenMetrics
//! text), `/health/live`, `/health/ready` (JSON saying why), and `/health`
//! (plain text, kept for existing probes). Exact paths; `GET` and `HEAD`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;

use super::Metrics;
use crate::plugin::PluginCell;

#[derive(Clone)]
struct Status {
    metrics: Arc<Metrics>,
    cell: PluginCell,
    stall_after: Duration,
}

/// Serves the endpoint on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    cell: PluginCell,
    stall_after: Duration,
) {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/health", get(health_text))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "try /metrics, /health/live or /health/ready\n",
            )
        })
        .with_state(Status {
            metrics,
            cell,
            stall_after,
        });
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the status endpoint stopped");
    }
}

/// Prometheus text (0.0.4), or OpenMetrics when the scraper asks for it.
async fn metrics_text(State(status): State<Status>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    if openmetrics {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            status.metrics.render_openmetrics(),
        )
            .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            status.metrics.render_prometheus(),
        )
            .into_response()
    }
}

/// The process and its runtime answer.
async fn live() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "live" }))
}

/// Ready: joined the group, database and brokers answering, plugin loaded, no
/// partition with records waiting stalled longer than `--stall-after`.
async fn ready(State(status): State<Status>) -> Response {
    let reasons = status.metrics.not_ready(status.stall_after);
    let plugin = status.cell.current().digest().to_string();
    let code = if reasons.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::json!({
        "ready": reasons.is_empty(),
        "reasons": reasons,
        "plugin": plugin,
    });
    (code, Json(body)).into_response()
}

async fn health_text(State(status): State<Status>) -> Response {
    let reasons = status.metrics.not_ready(status.stall_after);
    let digest = status.cell.current().digest().to_string();
    if reasons.is_empty() {
        (StatusCode::OK, format!("ok plugin={digest}\n")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {} plugin={digest}\n", reasons.join(", ")),
        )
            .into_response()
    }
}
