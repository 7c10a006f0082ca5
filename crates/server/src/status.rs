//! The one place where an [`ApiError`] becomes an HTTP response (a metav1.Status body), plus the
//! few non-Status answers kube-apiserver gives (the plain-text "404 page not found").
//!
//! A Status is written as compact JSON where it is made; [`speak_protobuf`], around every
//! route, writes it again in protobuf when the request's `Accept` prefers that (client-go's
//! typed clients, kube-controller-manager), as kube-apiserver negotiates its errors.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::negotiate::{self, Encoding, Endpoint, Protobuf};
use svm_registry::ApiError;
use svm_registry::protobuf::meta;

/// `Cache-Control` kube-apiserver sets on every API response that is not cacheable discovery.
pub(crate) const NO_CACHE_PRIVATE: &str = "no-cache, private";

/// An [`ApiError`] on its way out: rendered with `ApiError::to_status()` as compact JSON, the way
/// kube-apiserver writes a failure Status.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl From<ApiError> for HttpError {
    fn from(err: ApiError) -> Self {
        HttpError(err)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let code = self.0.code();
        let mut response = status_response(code, &self.0.to_status());
        let retry_after = match &self.0 {
            ApiError::TooManyRequests {
                retry_after_seconds,
                ..
            } => Some(*retry_after_seconds),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A Status body with its HTTP code (also used for the few Status shapes `ApiError` does not
/// model, e.g. a Success Status or a reason-less 500).
pub fn status_response(code: u16, status: &Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = serde_json::to_vec(status).unwrap_or_default();
    body.push(b'\n');
    let mut response = (
        code,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, NO_CACHE_PRIVATE),
        ],
        body,
    )
        .into_response();
    response.extensions_mut().insert(StatusBody(status.clone()));
    response
}

/// The Status a response carries, for [`speak_protobuf`] to write again.
#[derive(Clone, Debug)]
struct StatusBody(Value);

/// Middleware: a Status answer in protobuf where the request's `Accept` negotiates protobuf
/// for a plain object (kube-apiserver's `ErrorNegotiated`: the `as=` forms do not apply to
/// errors, so client-go's metadata client, which asks for PartialObjectMetadataList in
/// protobuf then plain JSON, gets JSON).
pub(crate) async fn speak_protobuf(request: Request, next: Next) -> Response {
    let wants_protobuf =
        negotiate::negotiate(request.headers(), None, Endpoint::Plain, Protobuf::Spoken)
            .is_ok_and(|n| n.encoding == Encoding::Protobuf);
    let response = next.run(request).await;
    if !wants_protobuf {
        return response;
    }
    let Some(StatusBody(status)) = response.extensions().get::<StatusBody>().cloned() else {
        return response;
    };
    match meta::status_body(&status) {
        Ok(body) => {
            let (mut parts, _) = response.into_parts();
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(negotiate::PROTOBUF),
            );
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(body))
        }
        Err(err) => {
            tracing::warn!(error = %err, "a Status that protobuf cannot carry; answered in JSON");
            response
        }
    }
}

/// kube-apiserver's answer to a request not done within its timeout (`apierrors.NewTimeoutError`
/// written by its timeout filter): a Status without `kind` and `apiVersion` and with empty
/// `details`, JSON-encoded by Go's encoder (so a trailing newline) under the content type Go's
/// server sniffs for it, `text/plain` — exactly what kube-apiserver v1.36.2 answered a body
/// trickled past `--request-timeout=3s`, over HTTP/1.1 and HTTP/2. Never protobuf. kubectl
/// shows it as "the server was unable to return a response in the time allotted".
pub(crate) fn request_timed_out() -> Response {
    let status = json!({
        "metadata": {},
        "status": "Failure",
        "message": "Timeout: request did not complete within the allotted timeout",
        "reason": "Timeout",
        "details": {},
        "code": 504
    });
    let mut body = serde_json::to_vec(&status).unwrap_or_default();
    body.push(b'\n');
    (
        StatusCode::GATEWAY_TIMEOUT,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, NO_CACHE_PRIVATE),
        ],
        body,
    )
        .into_response()
}

/// kube-apiserver's answer for a path outside every served API group (an unknown group, or no
/// API path at all): Go's `http.NotFound`, plain text, not a Status (recording 09c, step 5).
pub(crate) fn page_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, NO_CACHE_PRIVATE),
        ],
        "404 page not found\n",
    )
        .into_response()
}

/// kube-apiserver's answer for an unknown path under a group it serves (an unknown version,
/// resource or subresource, or anything deeper): go-restful's 404 as a NotFound Status, "the
/// server could not find the requested resource", with empty details (checked against
/// kube-apiserver v1.36.2 for each kind of path).
pub(crate) fn unknown_path() -> Response {
    HttpError(ApiError::UnknownPath).into_response()
}

/// The 404 for `path`: a Status under a served API group, plain text elsewhere.
pub(crate) fn not_found(served_group: impl Fn(&str) -> bool, path: &str) -> Response {
    let group = path
        .strip_prefix("/apis/")
        .and_then(|rest| rest.split('/').next())
        .filter(|group| !group.is_empty());
    match group {
        Some(group) if served_group(group) => unknown_path(),
        _ => page_not_found(),
    }
}

/// 405 for a method the path does not support.
pub(crate) fn method_not_allowed() -> HttpError {
    HttpError(ApiError::MethodNotAllowed(
        "the server does not allow this method on the requested resource".into(),
    ))
}

/// The Success Status kube-apiserver returns for a delete whose object is gone.
pub(crate) fn delete_success(group: &str, plural: &str, name: &str, uid: Option<&str>) -> Value {
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(name));
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(plural));
    if let Some(uid) = uid {
        details.insert("uid".into(), json!(uid));
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// The 500 kube-apiserver answers when a single object is requested as a
/// PartialObjectMetadataList: a Status without a reason (recording 06, step 5).
pub(crate) fn content_is_not_a_list() -> Response {
    let mut status = ApiError::Internal(String::new()).to_status();
    if let Some(map) = status.as_object_mut() {
        map.remove("reason");
        map.insert("message".into(), json!("content is not a list"));
    }
    status_response(500, &status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body_of(response: Response) -> Vec<u8> {
        response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec()
    }

    #[tokio::test]
    async fn api_error_becomes_a_compact_status_with_trailing_newline() {
        let response = HttpError(ApiError::NotFound {
            group: "storagemigration.k8s.io".into(),
            resource: "storageversionmigrations".into(),
            name: "x".into(),
        })
        .into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(response.headers()[header::CACHE_CONTROL], NO_CACHE_PRIVATE);
        let body = body_of(response).await;
        assert_eq!(body.last(), Some(&b'\n'));
        let text = String::from_utf8(body).expect("utf8");
        // Struct order, as kube-apiserver writes it.
        assert!(text.starts_with(r#"{"kind":"Status","apiVersion":"v1","metadata":{}"#));
        let status: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["details"]["kind"], "storageversionmigrations");
    }

    #[tokio::test]
    async fn too_many_requests_sets_retry_after() {
        let response = HttpError(ApiError::TooManyRequests {
            message: "slow down".into(),
            retry_after_seconds: 3,
        })
        .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    }

    #[tokio::test]
    async fn plain_404_matches_go_http_not_found() {
        let response = page_not_found();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        assert_eq!(body_of(response).await, b"404 page not found\n");
    }

    #[tokio::test]
    async fn unknown_paths_under_a_served_group_are_a_not_found_status() {
        let served = |group: &str| group == "g.io";
        for path in [
            "/apis/g.io/v9",
            "/apis/g.io/v1/unknown",
            "/apis/g.io/v1/things/a/unknown",
            "/apis/g.io/v1/things/a/status/x",
            "/apis/g.io/v1/things/a/status/x/y/z",
        ] {
            let response = not_found(served, path);
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
            // Byte for byte what kube-apiserver v1.36.2 sends (compact, newline-terminated).
            assert_eq!(
                body_of(response).await,
                b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the server could not find the requested resource\",\"reason\":\"NotFound\",\"details\":{},\"code\":404}\n",
                "{path}"
            );
        }
        for path in [
            "/apis/other.io/v1/things",
            "/apis/",
            "/apis//x",
            "/nope",
            "/api/v1/x",
        ] {
            let response = not_found(served, path);
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "text/plain; charset=utf-8",
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn not_a_list_is_a_reasonless_500() {
        let response = content_is_not_a_list();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let status: Value = serde_json::from_slice(&body_of(response).await).expect("json");
        assert_eq!(status["message"], "content is not a list");
        assert!(status.get("reason").is_none());
        assert_eq!(status["code"], 500);
    }

    #[test]
    fn delete_success_names_plural_and_uid() {
        let status = delete_success("g.io", "things", "a", Some("u-1"));
        assert_eq!(status["status"], "Success");
        assert_eq!(
            status["details"],
            json!({"name": "a", "group": "g.io", "kind": "things", "uid": "u-1"})
        );
    }
}
