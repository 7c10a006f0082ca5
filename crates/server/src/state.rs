//! What every handler and filter shares: the served kinds, the store, the metrics, the
//! limits, and the shutdown flag.

use std::sync::Arc;

use tokio::sync::Semaphore;

use svm_registry::Registry;
use svm_storage::Storage;

use crate::metrics::Metrics;
use crate::{discovery, openapi, options, version};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The served kinds: what every API handler looks a request's resource up in.
    pub registry: Arc<Registry>,
    /// Probed by `/readyz` and `/healthz`.
    pub storage: Arc<dyn Storage>,
    /// The request metrics and the registry `/metrics` serves.
    pub metrics: Arc<Metrics>,
    pub(crate) discovery: Arc<discovery::Discovery>,
    pub(crate) openapi: Arc<openapi::OpenApi>,
    pub(crate) max_request_body_bytes: usize,
    pub(crate) inflight: InflightLimits,
    /// `--request-timeout`; `None` is no timeout.
    pub(crate) request_timeout: Option<std::time::Duration>,
    pub(crate) shutdown: Shutdown,
    /// Delegated authentication and authorization; `None` serves everyone (unit tests only:
    /// `svm-apiserver serve` always installs it).
    pub(crate) auth: Option<Arc<crate::auth::Auth>>,
}

impl AppState {
    /// State serving `registry`, with discovery and OpenAPI built from it, kube-apiserver's default
    /// limits, and no authentication (see [`AppState::with_auth`]).
    pub fn new(registry: Registry, storage: Arc<dyn Storage>) -> Self {
        let discovery = discovery::Discovery::build(&registry);
        let openapi = openapi::OpenApi::build(&registry, &version::git_version());
        Self {
            registry: Arc::new(registry),
            storage,
            metrics: Arc::new(Metrics::new()),
            discovery: Arc::new(discovery),
            openapi: Arc::new(openapi),
            max_request_body_bytes: options::DEFAULT_MAX_REQUEST_BODY_BYTES,
            inflight: InflightLimits::new(
                options::DEFAULT_MAX_REQUESTS_INFLIGHT,
                options::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            ),
            request_timeout: Some(options::DEFAULT_REQUEST_TIMEOUT),
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
pub(crate) struct Shutdown(Arc<tokio::sync::watch::Sender<bool>>);

impl Shutdown {
    pub(crate) fn new() -> Self {
        Shutdown(Arc::new(tokio::sync::watch::channel(false).0))
    }

    pub(crate) fn begin(&self) {
        self.0.send_replace(true);
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.0.borrow()
    }

    pub(crate) async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // An error means the sender is gone, which only happens with the state itself.
        let _ = rx.wait_for(|down| *down).await;
    }
}

/// The two request budgets; `None` is no limit (a flag of 0).
#[derive(Clone, Debug, Default)]
pub struct InflightLimits {
    pub(crate) read_only: Option<Arc<Semaphore>>,
    pub(crate) mutating: Option<Arc<Semaphore>>,
}

impl InflightLimits {
    /// Budgets of `read_only` non-mutating and `mutating` mutating requests; 0 is no limit.
    pub fn new(read_only: usize, mutating: usize) -> Self {
        let budget = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        InflightLimits {
            read_only: budget(read_only),
            mutating: budget(mutating),
        }
    }
}
