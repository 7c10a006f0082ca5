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
mod status;
mod table;
mod timeout;
mod watch;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, get};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

pub use certs::{DevCerts, ensure_dev_certs, write_kubeconfig};
pub use connection::{ConnectionControl, ConnectionLimits};
pub use inflight::InflightLimits;
pub use listener::{PeerCertificates, Serving, bind, serve};
pub use metrics::Metrics;
pub use options::ServeOptions;
pub use status::{HttpError, status_response};

use svm_registry::{ApiError, Registry};
use svm_storage::Storage;

/// kube-apiserver's default `--max-request-body-bytes`: 3 MiB.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The served kinds: what every API handler looks a request's resource up in.
    pub registry: Arc<Registry>,
    /// Probed by `/readyz` and `/healthz`.
    pub storage: Arc<dyn Storage>,
    /// The request metrics and the registry `/metrics` serves.
    pub metrics: Arc<Metrics>,
    discovery: Arc<discovery::Discovery>,
    openapi: Arc<openapi::OpenApi>,
    max_request_body_bytes: usize,
    inflight: InflightLimits,
    /// `--request-timeout`; `None` is no timeout.
    request_timeout: Option<std::time::Duration>,
    shutdown: Shutdown,
    /// Delegated authentication and authorization; `None` serves everyone (unit tests only:
    /// `svm-apiserver serve` always installs it).
    auth: Option<Arc<crate::auth::Auth>>,
}

impl AppState {
    /// State serving `registry`, with discovery and OpenAPI built from it, kube-apiserver's default
    /// limits, and no authentication (see [`AppState::with_auth`]).
    pub fn new(registry: Registry, storage: Arc<dyn Storage>) -> Self {
        let discovery = discovery::Discovery::build(&registry);
        let openapi = openapi::OpenApi::build(&registry, &nonresource::git_version());
        Self {
            registry: Arc::new(registry),
            storage,
            metrics: Arc::new(Metrics::new()),
            discovery: Arc::new(discovery),
            openapi: Arc::new(openapi),
            max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES,
            inflight: InflightLimits::new(
                options::DEFAULT_MAX_REQUESTS_INFLIGHT,
                options::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            ),
            request_timeout: Some(timeout::DEFAULT_REQUEST_TIMEOUT),
            shutdown: Shutdown::new(),
            auth: None,
        }
    }

    /// Authenticate and authorize every request (and ask TLS clients for certificates).
    pub fn with_auth(mut self, auth: Arc<crate::auth::Auth>) -> Self {
        if let Ok(mut registry) = self.metrics.registry.lock() {
            auth.metrics().register(&mut registry);
        }
        self.auth = Some(auth);
        self
    }

    /// The authentication and authorization installed, if any.
    pub fn auth(&self) -> Option<&Arc<crate::auth::Auth>> {
        self.auth.as_ref()
    }

    /// `--max-request-body-bytes`: larger bodies get 413.
    pub fn with_max_request_body_bytes(mut self, limit: usize) -> Self {
        self.max_request_body_bytes = limit;
        self
    }

    /// `--max-requests-inflight`, `--max-mutating-requests-inflight` (0: no limit).
    pub fn with_inflight_limits(mut self, read_only: usize, mutating: usize) -> Self {
        self.inflight = InflightLimits::new(read_only, mutating);
        self
    }

    /// `--request-timeout`: requests other than watches not answered within it get
    /// kube-apiserver's 504 and give back what they held (0: no timeout).
    pub fn with_request_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.request_timeout = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// Use a metrics registry shared with other components.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Marks the server as shutting down: `/readyz` fails and open watches end.
    pub fn begin_shutdown(&self) {
        self.shutdown.begin();
    }
}

/// A one-way "we are shutting down" flag that async code can wait on.
#[derive(Clone)]
struct Shutdown(Arc<tokio::sync::watch::Sender<bool>>);

impl Shutdown {
    fn new() -> Self {
        Shutdown(Arc::new(tokio::sync::watch::channel(false).0))
    }

    fn begin(&self) {
        self.0.send_replace(true);
    }

    fn is_shutting_down(&self) -> bool {
        *self.0.borrow()
    }

    async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // An error means the sender is gone, which only happens with the state itself.
        let _ = rx.wait_for(|down| *down).await;
    }
}

/// The complete application: every route, with metrics, tracing and panic recovery.
pub fn router(state: AppState) -> Router {
    let routes = Router::new()
        .route("/api", any(nonresource::core_api))
        .route("/api/", any(nonresource::core_api))
        .route("/apis", any(nonresource::apis))
        .route("/apis/", any(nonresource::apis))
        .route("/apis/{group}", any(nonresource::api_group))
        .route("/apis/{group}/", any(nonresource::api_group))
        .route("/apis/{group}/{version}", any(nonresource::api_resources))
        .route("/apis/{group}/{version}/", any(nonresource::api_resources))
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
        .route("/openapi/v2", any(nonresource::openapi_v2))
        .route("/openapi/v3", any(nonresource::openapi_v3_index))
        .route("/openapi/v3/", any(nonresource::openapi_v3_index))
        .route("/openapi/v3/{*path}", any(nonresource::openapi_v3_doc))
        .route("/version", any(nonresource::version))
        .route("/version/", any(nonresource::version))
        .route("/metrics", any(nonresource::metrics))
        .route("/{endpoint}", get(health::endpoint))
        .route("/{endpoint}/{check}", get(health::single_check))
        .fallback(nonresource::not_found);
    // Outermost first, as kube-apiserver's handler chain: metrics and tracing see every answer;
    // the body of every request is accounted for (delivery); the request timeout around
    // everything a request may wait on (authentication, the in-flight limit, authorization,
    // its body, the handler); authentication, then the in-flight limit, then authorization (the
    // limit spares the SubjectAccessReview of a request it refuses). Panics are caught around
    // all of it as the last line of defence: nothing in these layers is meant to panic.
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
