//! kube-apiserver's request timeout (`--request-timeout`, k8s.io/apiserver's
//! `WithRequestDeadline` and `WithTimeoutForNonLongRunningRequests`): a request that is not
//! long-running (everything but watches, as for every aggregated server) must be answered
//! within the timeout, counted from when its headers were read — authentication, the
//! in-flight limit, authorization, reading the body and the handler all count. Past it the
//! client gets kube-apiserver's 504, and everything the request held is given back at once:
//! the handler's future is dropped, so its in-flight slot, its SubjectAccessReview wait and its
//! body are released.
//!
//! A client that sends its body too slowly is therefore answered by this timeout, with the 504
//! kube-apiserver gives it (kube-apiserver has no body-read timeout of its own: its
//! `http.Server` sets no `ReadTimeout`, and Go's server would close, not answer 408, on one).
//! Unlike kube-apiserver, the answer is not held back until the rest of the body arrives: over
//! HTTP/1.1 the 504 says `Connection: close` and the connection closes (see
//! [`super::delivery`]), so a trickling client holds neither a request slot nor a connection
//! past the timeout; over HTTP/2 the stream is reset after the answer.
//!
//! `?timeout=` (a Go duration, as kubectl's `--request-timeout` sends it, read by the
//! workspace's one Go-duration parser, `svm_registry::duration`) shortens the timeout of one
//! request; a longer one, 0 or a negative one leaves it as is, and one that does not parse is a
//! 400 quoting Go's error, as upstream.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header;

use super::AppState;
use super::metrics::request_labels;
use super::status::{HttpError, request_timed_out};
use crate::auth::RequestAttributes;
use svm_registry::ApiError;
use svm_registry::duration::parse_go_duration;

/// Put into the extensions of a response given in place of a request's own: the request's body
/// may be unfinished, and is not worth reading on (the client is too slow for it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Abandoned;

/// Middleware: answer within the request's timeout, or with kube-apiserver's 504.
pub(crate) async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(maximum) = state.request_timeout else {
        return next.run(request).await;
    };
    let attributes = RequestAttributes::of(&request);
    if is_long_running(&attributes) {
        return next.run(request).await;
    }
    let timeout = match requested_timeout(request.uri().query()) {
        Ok(Some(requested)) if requested < maximum => requested,
        Ok(_) => maximum,
        Err(message) => return HttpError(ApiError::BadRequest(message)).into_response(),
    };
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let labels = request_labels(request.method(), &attributes, &content_type);
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::debug!(path = %attributes.path, verb = %attributes.verb, ?timeout, "request timed out");
            state.metrics.terminated(labels, request_timed_out_code());
            let mut response = request_timed_out();
            response.extensions_mut().insert(Abandoned);
            response
        }
    }
}

fn request_timed_out_code() -> u16 {
    http::StatusCode::GATEWAY_TIMEOUT.as_u16()
}

/// What an aggregated server built on k8s.io/apiserver counts as long-running: watches (by
/// `?watch=` or the `/watch/` path prefix). They are bounded by their own `timeoutSeconds`.
fn is_long_running(attributes: &RequestAttributes) -> bool {
    attributes.verb == "watch"
}

/// The positive `?timeout=` of the request, `None` without one (or with one of 0 or less, which
/// upstream reads as "the server's"); an error message for one that does not parse.
fn requested_timeout(query: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(value) = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(key, _)| key == "timeout")
        .map(|(_, value)| value.into_owned())
        .filter(|value| !value.is_empty())
    else {
        return Ok(None);
    };
    let nanos = parse_go_duration(&value)
        .map_err(|err| format!("invalid timeout specified in the request URL - {err}"))?;
    Ok(u64::try_from(nanos)
        .ok()
        .filter(|n| *n > 0)
        .map(Duration::from_nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::any;
    use tower::ServiceExt;

    use crate::testing::HealthSwitch;
    use svm_registry::Registry;

    #[test]
    fn the_requested_timeout_only_shortens() {
        assert_eq!(requested_timeout(None), Ok(None));
        assert_eq!(requested_timeout(Some("limit=5")), Ok(None));
        assert_eq!(
            requested_timeout(Some("timeout=250ms")),
            Ok(Some(Duration::from_millis(250)))
        );
        assert_eq!(requested_timeout(Some("timeout=0s")), Ok(None));
        assert_eq!(requested_timeout(Some("timeout=-5s")), Ok(None));
        assert_eq!(requested_timeout(Some("timeout=")), Ok(None));
        assert_eq!(
            requested_timeout(Some("timeout=abc")),
            Err(
                "invalid timeout specified in the request URL - time: invalid duration \"abc\""
                    .into()
            )
        );
    }

    /// A router whose every request sleeps `handler_takes` behind the limit.
    fn app(timeout: Option<Duration>, handler_takes: Duration) -> (Router, AppState) {
        let mut state =
            AppState::new(Registry::new(), HealthSwitch::new(true)).with_inflight_limits(1, 1);
        state = match timeout {
            Some(timeout) => state.with_request_timeout(timeout),
            None => state.with_request_timeout(Duration::ZERO),
        };
        let router = Router::new()
            .fallback(any(move || async move {
                tokio::time::sleep(handler_takes).await;
                "done"
            }))
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                crate::inflight::limit,
            ))
            .layer(axum::middleware::from_fn_with_state(state.clone(), limit))
            .layer(axum::middleware::from_fn(crate::request_info::resolve))
            .with_state(state.clone());
        (router, state)
    }

    async fn call(app: &Router, method: &str, uri: &str) -> (u16, http::HeaderMap, String) {
        let response = app
            .clone()
            .oneshot(
                http::Request::builder()
                    .method(method)
                    .uri(uri)
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("response");
        let code = response.status().as_u16();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("body");
        (code, headers, String::from_utf8_lossy(&body).into_owned())
    }

    const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_timeout_gets_kube_apiservers_504_and_its_slot_back() {
        let (app, state) = app(Some(Duration::from_secs(3)), Duration::from_secs(3600));
        let (code, headers, body) = call(&app, "POST", SVMS).await;
        assert_eq!(code, 504);
        // As kube-apiserver v1.36.2 answered a body trickled past --request-timeout=3s.
        assert_eq!(
            body,
            "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"Timeout: request did not complete within the allotted timeout\",\"reason\":\"Timeout\",\"details\":{},\"code\":504}\n"
        );
        assert_eq!(headers[header::CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache, private");
        assert_eq!(headers[header::CONTENT_LENGTH], "152");
        // The slot was given back (the budget is 1): the next request times out too, not 429.
        let (code, _, _) = call(&app, "POST", SVMS).await;
        assert_eq!(code, 504);
        let rendered = state.metrics.render();
        assert!(
            rendered.contains("apiserver_current_inflight_requests{request_kind=\"mutating\"} 0"),
            "{rendered}"
        );
        assert!(
            rendered.contains("apiserver_request_terminations_total{verb=\"POST\",group=\"storagemigration.k8s.io\",version=\"v1\",resource=\"storageversionmigrations\",subresource=\"\",code=\"504\"} 2"),
            "{rendered}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_timeout_parameter_wins_and_a_bad_one_is_400() {
        let (app, _) = app(Some(Duration::from_secs(60)), Duration::from_secs(10));
        assert_eq!(call(&app, "GET", SVMS).await.0, 200);
        assert_eq!(
            call(&app, "GET", &format!("{SVMS}?timeout=5s")).await.0,
            504
        );
        assert_eq!(
            call(&app, "GET", &format!("{SVMS}?timeout=5m")).await.0,
            200
        );
        let (code, _, body) = call(&app, "GET", &format!("{SVMS}?timeout=10")).await;
        assert_eq!(code, 400);
        let status: serde_json::Value = serde_json::from_str(&body).expect("status");
        assert_eq!(status["reason"], "BadRequest");
        assert_eq!(
            status["message"],
            "invalid timeout specified in the request URL - time: missing unit in duration \"10\""
        );
    }

    #[tokio::test(start_paused = true)]
    async fn watches_and_a_zero_timeout_are_not_limited() {
        let (app, _) = app(Some(Duration::from_secs(1)), Duration::from_secs(10));
        assert_eq!(call(&app, "GET", &format!("{SVMS}?watch=1")).await.0, 200);
        // A watch ignores `?timeout=`, even one that does not parse (as upstream).
        assert_eq!(
            call(&app, "GET", &format!("{SVMS}?watch=1&timeout=abc"))
                .await
                .0,
            200
        );
        let (unlimited, _) = self::app(None, Duration::from_secs(3600));
        assert_eq!(call(&unlimited, "GET", SVMS).await.0, 200);
    }
}
