//! Router-level tests: the whole `Router` driven with `oneshot` against the in-memory test
//! resource, checking status codes, headers and bodies against kube-apiserver's recordings.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::testing::{GROUP, HealthSwitch, PANICS, registry_with, things, things_with_storage};
use super::{AppState, router};

const V1: &str = "/apis/test.example.io/v1";
const THINGS: &str = "/apis/test.example.io/v1/things";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const DISCOVERY_ACCEPT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

fn state_with(health: Arc<HealthSwitch>) -> AppState {
    AppState::new(registry_with(things()), health)
}

/// The router and the embedded store behind its test kind (for a test that compacts it).
fn app_and_storage() -> (Router, Arc<svm_storage::embedded::EmbeddedStorage>) {
    let (store, storage) = things_with_storage();
    let state = AppState::new(registry_with(store), HealthSwitch::new(true));
    (router(state), storage)
}

fn app() -> Router {
    router(state_with(HealthSwitch::new(true)))
}

async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

fn req(method: &str, uri: &str) -> http::request::Builder {
    Request::builder().method(method).uri(uri)
}

async fn get(app: &Router, uri: &str) -> Reply {
    send(app, req("GET", uri).body(Body::empty()).expect("request")).await
}

async fn get_as(app: &Router, uri: &str, accept: &str) -> Reply {
    send(
        app,
        req("GET", uri)
            .header(header::ACCEPT, accept)
            .body(Body::empty())
            .expect("request"),
    )
    .await
}

async fn post_json(app: &Router, uri: &str, body: &str) -> Reply {
    send(
        app,
        req("POST", uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .expect("request"),
    )
    .await
}

fn thing(name: &str, size: i64) -> String {
    json!({"apiVersion": "test.example.io/v1", "kind": "Thing",
           "metadata": {"name": name}, "spec": {"size": size}})
    .to_string()
}

async fn app_with_things(names: &[&str]) -> Router {
    let app = app();
    for (i, name) in names.iter().enumerate() {
        let reply = post_json(&app, THINGS, &thing(name, i as i64 + 1)).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    }
    app
}

fn assert_plain_404(reply: &Reply) {
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.header("content-type"), "text/plain; charset=utf-8");
    assert_eq!(reply.text(), "404 page not found\n");
}

fn assert_status(reply: &Reply, code: u16, reason: Option<&str>) -> Value {
    assert_eq!(reply.status.as_u16(), code, "{}", reply.text());
    assert_eq!(reply.header("content-type"), "application/json");
    let status = reply.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], code);
    match reason {
        Some(reason) => assert_eq!(status["reason"], reason),
        None => assert!(status.get("reason").is_none()),
    }
    status
}

mod discovery;
mod endpoints;
mod negotiation;
mod registry_over_http;
mod watch;
mod writes;
