//! kube-apiserver's max-in-flight filter (`--max-requests-inflight`,
//! `--max-mutating-requests-inflight`): at most so many non-mutating and so many mutating
//! requests are served at once; one more is answered at once with 429 and `Retry-After: 1`,
//! never queued. Long-running requests (watches) do not count, and neither do members of
//! `system:masters` (as upstream, so an administrator is never locked out). It sits between
//! authentication and authorization, where kube-apiserver's chain has it.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::Method;
use prometheus_client::metrics::gauge::Gauge;

use super::metrics::RequestKindLabels;
use super::params::Query;
use super::state::AppState;
use super::status::HttpError;
use crate::auth::{MASTERS_GROUP, UserInfo};
use svm_registry::ApiError;

/// What the client is told to wait before retrying (kube-apiserver: 1 s).
const RETRY_AFTER_SECONDS: u64 = 1;

/// Middleware: serve the request within its budget, or answer 429.
pub(crate) async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if is_long_running(&request) || is_privileged(&request) {
        return next.run(request).await;
    }
    let (budget, request_kind) = if is_mutating(request.method()) {
        (&state.inflight.mutating, "mutating")
    } else {
        (&state.inflight.read_only, "readOnly")
    };
    let Some(budget) = budget else {
        return next.run(request).await;
    };
    let Ok(_permit) = budget.clone().try_acquire_owned() else {
        tracing::debug!(path = %request.uri().path(), request_kind, "too many requests in flight");
        return HttpError(ApiError::TooManyRequests {
            message: "Too many requests, please try again later.".into(),
            retry_after_seconds: RETRY_AFTER_SECONDS,
        })
        .into_response();
    };
    let _counted = Counted::new(
        state
            .metrics
            .edge
            .inflight
            .get_or_create(&RequestKindLabels { request_kind })
            .clone(),
    );
    next.run(request).await
}

/// One request in the in-flight gauge for as long as it lives: also when its future is dropped
/// unfinished (a request past its `--request-timeout`), as its permit is.
struct Counted(Gauge);

impl Counted {
    fn new(gauge: Gauge) -> Self {
        gauge.inc();
        Counted(gauge)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// kube-apiserver's read-only verbs are get, list and watch: everything else mutates.
fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Watches hold their request for as long as they stream; they are bounded by connections,
/// not by this filter.
fn is_long_running(request: &Request) -> bool {
    request.method() == Method::GET && Query::parse(request.uri().query()).is_watch()
}

fn is_privileged(request: &Request) -> bool {
    request
        .extensions()
        .get::<UserInfo>()
        .is_some_and(|user| user.in_group(MASTERS_GROUP))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::any;
    use std::sync::Arc;
    use tower::ServiceExt;

    use crate::testing::{HealthSwitch, registry_with, things};

    /// A router whose every request waits until released, behind the limit.
    fn app(read_only: usize, mutating: usize) -> (Router, Arc<tokio::sync::Notify>) {
        let release = Arc::new(tokio::sync::Notify::new());
        let state = AppState::new(registry_with(things()), HealthSwitch::new(true))
            .with_inflight_limits(read_only, mutating);
        let wait = release.clone();
        let router = Router::new()
            .fallback(any(move || {
                let wait = wait.clone();
                async move {
                    wait.notified().await;
                    "done"
                }
            }))
            .layer(axum::middleware::from_fn_with_state(state.clone(), limit))
            .with_state(state);
        (router, release)
    }

    fn request(method: &str, uri: &str, user: Option<UserInfo>) -> Request {
        let mut request = http::Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .expect("request");
        if let Some(user) = user {
            request.extensions_mut().insert(user);
        }
        request
    }

    #[tokio::test]
    async fn requests_past_the_limit_get_429_with_retry_after_and_watches_do_not_count() {
        let (app, release) = app(2, 1);
        let held: Vec<_> = (0..2)
            .map(|_| tokio::spawn(app.clone().oneshot(request("GET", "/x", None))))
            .chain([tokio::spawn(
                app.clone().oneshot(request("POST", "/x", None)),
            )])
            .collect();
        tokio::task::yield_now().await;
        // Let the three reach the handler.
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let refused = app
            .clone()
            .oneshot(request("GET", "/x", None))
            .await
            .expect("response");
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(refused.into_body(), 1 << 16)
            .await
            .expect("body");
        let status: serde_json::Value = serde_json::from_slice(&body).expect("status");
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(
            status["message"],
            "Too many requests, please try again later."
        );
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        let mutating = app
            .clone()
            .oneshot(request("DELETE", "/x", None))
            .await
            .expect("response");
        assert_eq!(mutating.status(), 429);

        // A watch and a system:masters request pass although both budgets are spent.
        let watch = tokio::spawn(app.clone().oneshot(request("GET", "/x?watch=1", None)));
        let admin = UserInfo {
            name: "admin".into(),
            groups: vec![MASTERS_GROUP.into()],
            ..UserInfo::default()
        };
        let privileged = tokio::spawn(app.clone().oneshot(request("GET", "/x", Some(admin))));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        release.notify_waiters();
        for task in held.into_iter().chain([watch, privileged]) {
            let response = task.await.expect("task").expect("response");
            assert_eq!(response.status(), 200);
        }
        // Budgets are given back.
        let again = tokio::spawn(app.clone().oneshot(request("GET", "/x", None)));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        release.notify_waiters();
        assert_eq!(again.await.expect("task").expect("response").status(), 200);
    }

    #[tokio::test]
    async fn zero_means_no_limit() {
        let (app, release) = app(0, 0);
        let many: Vec<_> = (0..50)
            .map(|_| tokio::spawn(app.clone().oneshot(request("PUT", "/x", None))))
            .collect();
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        release.notify_waiters();
        for task in many {
            assert_eq!(task.await.expect("task").expect("response").status(), 200);
        }
    }
}
