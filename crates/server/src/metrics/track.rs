//! The request-metrics filter: counts and times every request, by what it names when that
//! is served (unknown paths must not mint new series).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::{DurationLabels, Metrics, request_labels};
use crate::auth::RequestAttributes;
use crate::state::AppState;

/// Middleware: counts and times every request.
pub(crate) async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let attributes = RequestAttributes::of(&request);
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut labels = request_labels(request.method(), &attributes, &content_type);
    if !serves(&state, &labels) {
        // Keep label values bounded: unknown paths must not mint new series.
        labels.group.clear();
        labels.version.clear();
        labels.resource.clear();
        labels.subresource.clear();
    }
    let started = Instant::now();
    let response = next.run(request).await;
    record_with(&state.metrics, labels, response.status().as_u16(), started);
    response
}

/// Whether the labels name a served resource (and, if any, a served subresource).
fn serves(state: &AppState, labels: &DurationLabels) -> bool {
    state
        .registry
        .get(&labels.group, &labels.resource)
        .is_some_and(|r| {
            r.info().versions.contains(&labels.version.as_str())
                && (labels.subresource.is_empty()
                    || (labels.subresource == "status" && r.info().has_status_subresource))
        })
}

fn record_with(metrics: &Arc<Metrics>, labels: DurationLabels, code: u16, started: Instant) {
    metrics.record(labels, code, started.elapsed().as_secs_f64());
}
