//! Request and response plumbing shared by the handlers: query parsing, JSON and Status
//! responses with kube-apiserver's headers, and a response body that counts bytes out.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use serde_json::Value;

use crate::engine::Engine;
use crate::status::StatusError;

pub type Body = BoxBody<Bytes, Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// The query string, decoded. Repeated keys keep every value (`dryRun` may repeat).
#[derive(Clone, Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(query: Option<&str>) -> Self {
        let pairs = query
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .filter(|(k, _)| !k.is_empty())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Self { pairs }
    }

    /// The last value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, key: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == key)
    }

    /// Go's `strconv.ParseBool` truthiness for flags like `watch` and `allowWatchBookmarks`.
    pub fn flag(&self, key: &str) -> bool {
        matches!(
            self.get(key),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True")
        )
    }

    pub fn as_map(&self) -> HashMap<String, String> {
        self.pairs.iter().cloned().collect()
    }
}

/// Whether to indent JSON: `?pretty=true`, or a curl/wget/browser User-Agent (recording 00).
pub fn wants_pretty(headers: &HeaderMap, query: &Query) -> bool {
    if let Some(p) = query.get("pretty") {
        return matches!(p, "1" | "true" | "True" | "TRUE" | "t");
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| {
            ua.starts_with("curl/") || ua.starts_with("Wget") || ua.starts_with("Mozilla/5.0")
        })
}

/// Serializes a body as kube-apiserver does: compact (or 2-space indented) JSON ending in a
/// newline for compact output.
pub fn json_bytes(value: &Value, pretty: bool) -> Vec<u8> {
    if pretty {
        serde_json::to_vec_pretty(value).unwrap_or_default()
    } else {
        let mut out = serde_json::to_vec(value).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

fn base_headers(builder: http::response::Builder) -> http::response::Builder {
    builder
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header("Audit-Id", uuid::Uuid::new_v4().to_string())
}

pub fn json_response(status: StatusCode, value: &Value, pretty: bool) -> Response<Body> {
    let body = json_bytes(value, pretty);
    base_headers(Response::builder())
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len())
        .body(full(body))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// The UIDs the double's priority-and-fairness answers name (one flow schema, one level).
pub const FLOW_SCHEMA_UID: &str = "6d9f3c52-0000-4000-8000-000000000001";
pub const PRIORITY_LEVEL_UID: &str = "6d9f3c52-0000-4000-8000-000000000002";

/// A metav1.Status error answer. Statuses without a reason (the 500 "content is not a list")
/// are indented, as kube-apiserver's fallback encoder does (recording 06, step 5).
pub fn status_response(err: &StatusError, pretty: bool) -> Response<Body> {
    let pretty = pretty || err.reason.is_none();
    let code = StatusCode::from_u16(err.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(code, &err.to_json(), pretty);
    if let Some(secs) = err.retry_after_seconds
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    if err.code == 429 {
        classified(&mut response);
    }
    response
}

/// kube-apiserver's priority-and-fairness filter names the flow schema and priority level it
/// classified the request into on every answer, its 429s included (recording 21).
fn classified(response: &mut Response<Body>) {
    let headers = response.headers_mut();
    headers.insert(
        "X-Kubernetes-PF-FlowSchema-UID",
        HeaderValue::from_static(FLOW_SCHEMA_UID),
    );
    headers.insert(
        "X-Kubernetes-PF-PriorityLevel-UID",
        HeaderValue::from_static(PRIORITY_LEVEL_UID),
    );
}

/// API Priority and Fairness rejecting a request (recording 21, step 2): its filter answers
/// before any handler, in plain text — no Status — with `Retry-After`.
pub fn apf_rejection(retry_after_seconds: u64) -> Response<Body> {
    let mut response = base_headers(Response::builder())
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::RETRY_AFTER, retry_after_seconds)
        .header("X-Content-Type-Options", "nosniff")
        .body(full("Too many requests, please try again later.\n"))
        .unwrap_or_else(|_| Response::new(empty()));
    classified(&mut response);
    response
}

/// kube-apiserver's answer for paths nothing serves (recording 09c).
pub fn plain_not_found() -> Response<Body> {
    base_headers(Response::builder())
        .status(StatusCode::NOT_FOUND)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(full("404 page not found\n"))
        .unwrap_or_else(|_| Response::new(empty()))
}

pub fn plain_text(status: StatusCode, text: &str) -> Response<Body> {
    base_headers(Response::builder())
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(text.to_string()))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// A response body that adds what it yields to the bytes-out counter.
pub struct CountingBody {
    inner: Body,
    engine: Arc<Engine>,
}

impl CountingBody {
    pub fn new(inner: Body, engine: Arc<Engine>) -> Self {
        Self { inner, engine }
    }
}

impl HttpBody for CountingBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.engine.metrics.bytes_out(data.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
