//! The HTTP layer: TLS accept loop, router, content negotiation, per-verb handlers, discovery,
//! OpenAPI, Table, watch framing, health, metrics and the metav1.Status mapping. Generic over
//! `RestStorage`: nothing here knows a kind.

pub mod auth;
mod body;
mod certs;
mod connection;
mod delivery;
mod discovery;
pub mod error;
mod handlers;
mod health;
mod inflight;
mod listener;
mod metrics;
mod negotiate;
mod nonresource;
mod openapi;
mod options;
mod params;
mod request_info;
mod state;
mod status;
mod table;
mod timeout;
mod version;
mod watch;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use axum::Router;
use axum::routing::{any, get};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

pub use certs::{DevCerts, ensure_dev_certs, write_kubeconfig};
pub use connection::{ConnectionControl, ConnectionLimits};
pub use listener::{PeerCertificates, Serving, bind, serve};
pub use metrics::Metrics;
pub use options::{DEFAULT_MAX_REQUEST_BODY_BYTES, ServeOptions};
pub use state::{AppState, InflightLimits};
pub use status::{HttpError, status_response};

use svm_registry::ApiError;

/// The complete application: every route, with metrics, tracing and panic recovery.
pub fn router(state: AppState) -> Router {
    let routes = Router::new()
        .merge(resource_routes())
        .merge(nonresource_routes())
        .fallback(nonresource::not_found);
    handler_chain(routes, state)
}

/// The routes of the served kinds' objects: collections, items and their subresources.
fn resource_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/apis/{group}/{version}/{resource}",
            any(handlers::collection),
        )
        .route(
            "/apis/{group}/{version}/{resource}/{name}",
            any(handlers::item),
        )
        .route(
            "/apis/{group}/{version}/{resource}/{name}/{subresource}",
            any(handlers::item),
        )
        // Namespaced kinds; `namespaces` is matched before a `{resource}` of that name.
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}",
            any(handlers::collection),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}",
            any(handlers::item),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}",
            any(handlers::item),
        )
}

/// Every other route: discovery, OpenAPI, version, metrics and health.
fn nonresource_routes() -> Router<AppState> {
    Router::new()
        .route("/api", any(nonresource::core_api))
        .route("/api/", any(nonresource::core_api))
        .route("/apis", any(nonresource::apis))
        .route("/apis/", any(nonresource::apis))
        .route("/apis/{group}", any(nonresource::api_group))
        .route("/apis/{group}/", any(nonresource::api_group))
        .route("/apis/{group}/{version}", any(nonresource::api_resources))
        .route("/apis/{group}/{version}/", any(nonresource::api_resources))
        .route("/openapi/v2", any(nonresource::openapi_v2))
        .route("/openapi/v3", any(nonresource::openapi_v3_index))
        .route("/openapi/v3/", any(nonresource::openapi_v3_index))
        .route("/openapi/v3/{*path}", any(nonresource::openapi_v3_doc))
        .route("/version", any(nonresource::version))
        .route("/version/", any(nonresource::version))
        .route("/metrics", any(nonresource::metrics))
        .route("/{endpoint}", get(health::endpoint))
        .route("/{endpoint}/{check}", get(health::single_check))
}

/// `routes` inside the handler chain.
///
/// Outermost first, as kube-apiserver's handler chain: metrics and tracing see every answer;
/// the body of every request is accounted for (delivery); the request timeout around
/// everything a request may wait on (authentication, the in-flight limit, authorization,
/// its body, the handler); authentication, then the in-flight limit, then authorization (the
/// limit spares the SubjectAccessReview of a request it refuses). Panics are caught around
/// all of it as the last line of defence: nothing in these layers is meant to panic.
fn handler_chain(routes: Router<AppState>, state: AppState) -> Router {
    let limit = axum::middleware::from_fn_with_state(state.clone(), inflight::limit);
    let routes = match state.auth() {
        Some(auth) => routes
            .layer(crate::auth::authorization_layer(auth.clone()))
            .layer(limit)
            .layer(crate::auth::authentication_layer(auth.clone())),
        None => routes.layer(limit),
    };
    routes
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            timeout::limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            delivery::deliver,
        ))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(axum::middleware::from_fn(status::speak_protobuf))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(axum::middleware::from_fn(request_info::resolve))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// A panicking handler becomes a 500 Status, never a dropped connection or server.
fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    let detail = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    tracing::error!(panic = %detail, "handler panicked");
    axum::response::IntoResponse::into_response(HttpError(ApiError::Internal(
        "the server panicked while handling the request".into(),
    )))
}
