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

use super::testing::{GROUP, HealthSwitch, MemoryResource, registry_with};
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
    AppState::new(registry_with(MemoryResource::arc()), health)
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

// ---- discovery -------------------------------------------------------------------------------

#[tokio::test]
async fn apis_serves_the_legacy_group_list_by_default() {
    let reply = get_as(&app(), "/apis", "*/*").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    assert_eq!(reply.header("cache-control"), "no-cache, private");
    assert_eq!(reply.body.last(), Some(&b'\n'));
    let list = reply.json();
    assert_eq!(list["kind"], "APIGroupList");
    assert_eq!(
        list["groups"][0]["preferredVersion"]["groupVersion"],
        "test.example.io/v1"
    );
}

#[tokio::test]
async fn aggregated_discovery_has_etag_and_answers_304() {
    let app = app();
    let reply = get_as(&app, "/apis", DISCOVERY_ACCEPT).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.header("content-type"),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(reply.header("cache-control"), "public");
    assert_eq!(reply.header("vary"), "Accept");
    let etag = reply.header("etag").to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    assert_eq!(reply.json()["kind"], "APIGroupDiscoveryList");

    let cached = send(
        &app,
        req("GET", "/apis")
            .header(header::ACCEPT, DISCOVERY_ACCEPT)
            .header(header::IF_NONE_MATCH, &etag)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    assert!(cached.body.is_empty());
    assert_eq!(cached.header("etag"), etag);

    let unquoted = send(
        &app,
        req("GET", "/apis")
            .header(header::ACCEPT, DISCOVERY_ACCEPT)
            .header(header::IF_NONE_MATCH, etag.trim_matches('"'))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(unquoted.status, StatusCode::OK);

    let beta = get_as(
        &app,
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    )
    .await;
    assert_eq!(beta.header("content-type"), "application/json");
    assert_eq!(beta.json()["kind"], "APIGroupList");
}

#[tokio::test]
async fn group_and_version_documents() {
    let app = app();
    let group = get(&app, "/apis/test.example.io").await;
    assert_eq!(group.json()["kind"], "APIGroup");
    let resources = get(&app, V1).await;
    assert_eq!(resources.status, StatusCode::OK);
    let list = resources.json();
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["resources"][1]["name"], "things/status");
}

#[tokio::test]
async fn unknown_paths_outside_our_group_get_the_plain_404() {
    let app = app();
    for uri in [
        "/apis/nosuch.group",
        "/apis/nosuch.group/v1/things/x",
        "/api",
        "/api/v1",
        "/nothing/here/at/all",
    ] {
        assert_plain_404(&get(&app, uri).await);
    }
}

/// As kube-apiserver's go-restful container: under a served group every unknown path is a
/// NotFound Status, whatever the method.
#[tokio::test]
async fn unknown_paths_under_our_group_get_a_not_found_status() {
    let app = app_with_things(&["a"]).await;
    for uri in [
        "/apis/test.example.io/v9",
        "/apis/test.example.io/v9/things",
        "/apis/test.example.io/v1/gadgets/x",
        "/apis/test.example.io/v1/things/a/scale",
        "/apis/test.example.io/v1/things/missing/unknown",
        "/apis/test.example.io/v1/things/a/status/x",
        "/apis/test.example.io/v1/things/a/status/x/y/z",
    ] {
        for method in ["GET", "PUT", "POST", "DELETE"] {
            let reply = send(&app, req(method, uri).body(Body::empty()).expect("request")).await;
            assert_status(&reply, 404, Some("NotFound"));
            assert_eq!(
                reply.json()["message"],
                "the server could not find the requested resource",
                "{method} {uri}"
            );
            assert_eq!(
                reply.json()["details"],
                serde_json::json!({}),
                "{method} {uri}"
            );
        }
    }
}

#[tokio::test]
async fn wrong_methods_are_405_statuses() {
    let app = app();
    for (method, uri) in [
        ("PUT", THINGS),
        ("POST", "/apis"),
        ("POST", V1),
        ("DELETE", "/version"),
    ] {
        let reply = send(&app, req(method, uri).body(Body::empty()).expect("request")).await;
        assert_status(&reply, 405, Some("MethodNotAllowed"));
    }
    let status_post = send(
        &app,
        req("POST", &format!("{THINGS}/a/status"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_status(&status_post, 405, Some("MethodNotAllowed"));
}

// ---- negotiation -----------------------------------------------------------------------------

#[tokio::test]
async fn get_object_in_each_encoding() {
    let app = app_with_things(&["a"]).await;
    let compact = get(&app, &format!("{THINGS}/a")).await;
    assert_eq!(compact.status, StatusCode::OK);
    assert_eq!(compact.body.last(), Some(&b'\n'));
    assert!(!compact.text().contains("\n "));
    assert_eq!(compact.json()["metadata"]["name"], "a");

    let curl = send(
        &app,
        req("GET", &format!("{THINGS}/a"))
            .header(header::USER_AGENT, "curl/8.0")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert!(curl.text().contains("\n  \"apiVersion\""));
    assert_ne!(curl.body.last(), Some(&b'\n'));

    let yaml = get_as(&app, &format!("{THINGS}/a"), "application/yaml").await;
    assert_eq!(yaml.header("content-type"), "application/yaml");
    let parsed: Value = serde_norway::from_slice(&yaml.body).expect("yaml");
    assert_eq!(parsed["spec"]["size"], 1);

    let protobuf = get_as(
        &app,
        &format!("{THINGS}/a"),
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_status(&protobuf, 406, Some("NotAcceptable"));
}

#[tokio::test]
async fn missing_object_is_a_not_found_status() {
    let reply = get(&app(), &format!("{THINGS}/nope")).await;
    let status = assert_status(&reply, 404, Some("NotFound"));
    assert_eq!(
        status["message"],
        "things.test.example.io \"nope\" not found"
    );
    assert_eq!(
        status["details"],
        json!({"name": "nope", "group": GROUP, "kind": "things"})
    );
}

#[tokio::test]
async fn metadata_forms_and_their_mismatches() {
    let app = app_with_things(&["a", "b"]).await;
    let list = get_as(
        &app,
        THINGS,
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(list.header("content-type"), "application/json");
    let list = list.json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][1]["kind"], "PartialObjectMetadata");
    assert!(list["items"][1].get("spec").is_none());

    let one = get_as(
        &app,
        &format!("{THINGS}/a"),
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(one.json()["metadata"]["name"], "a");

    let single_as_list = get_as(
        &app,
        &format!("{THINGS}/a"),
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    let status = assert_status(&single_as_list, 500, None);
    assert_eq!(status["message"], "content is not a list");

    let list_as_single = get_as(
        &app,
        THINGS,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_status(&list_as_single, 406, Some("NotAcceptable"));
}

#[tokio::test]
async fn tables_for_lists_and_objects() {
    let app = app_with_things(&["a", "b"]).await;
    let reply = get_as(&app, &format!("{THINGS}?includeObject=None&limit=1"), TABLE).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    let table = reply.json();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["columnDefinitions"][1]["name"], "Size");
    assert_eq!(table["rows"], json!([{"cells": ["a", 1], "object": null}]));
    assert_eq!(table["metadata"]["continue"], "next");
    assert_eq!(table["metadata"]["remainingItemCount"], 1);

    let one = get_as(&app, &format!("{THINGS}/b"), TABLE).await.json();
    assert_eq!(one["rows"][0]["cells"], json!(["b", 2]));
    assert_eq!(one["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        one["metadata"]["resourceVersion"],
        one["rows"][0]["object"]["metadata"]["resourceVersion"]
    );

    let bad = get_as(&app, &format!("{THINGS}?includeObject=All"), TABLE).await;
    assert_status(&bad, 422, Some("Invalid"));
}

// ---- writes ----------------------------------------------------------------------------------

#[tokio::test]
async fn create_accepts_json_and_yaml_and_answers_201() {
    let app = app();
    let reply = post_json(&app, THINGS, &thing("a", 1)).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(reply.json()["metadata"]["uid"], "uid-a");
    let yaml = send(
        &app,
        req("POST", THINGS)
            .header(header::CONTENT_TYPE, "application/yaml")
            .body(Body::from(
                "apiVersion: test.example.io/v1\nkind: Thing\nmetadata:\n  name: y\nspec:\n  size: 4\n",
            ))
            .expect("request"),
    )
    .await;
    assert_eq!(yaml.status, StatusCode::CREATED, "{}", yaml.text());
    assert_eq!(yaml.json()["spec"]["size"], 4);
    let again = post_json(&app, THINGS, &thing("a", 1)).await;
    assert_status(&again, 409, Some("AlreadyExists"));
}

#[tokio::test]
async fn create_errors_in_kube_apiserver_order() {
    let app = app();
    let unsupported = send(
        &app,
        req("POST", THINGS)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from(thing("a", 1)))
            .expect("request"),
    )
    .await;
    assert_status(&unsupported, 415, Some("UnsupportedMediaType"));

    let malformed = post_json(&app, THINGS, r#"{"apiVersion":"test.example.io/v1","#).await;
    let status = assert_status(&malformed, 400, Some("BadRequest"));
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("the object provided is unrecognized (must be of type Thing): couldn't get version/kind; json parse error: unexpected end of JSON input"),
        "{status}"
    );

    let dry_run = post_json(&app, &format!("{THINGS}?dryRun=Foo"), &thing("a", 1)).await;
    let status = assert_status(&dry_run, 422, Some("Invalid"));
    assert_eq!(status["details"]["kind"], "CreateOptions");
    assert_eq!(status["details"]["group"], "meta.k8s.io");

    let validation = post_json(
        &app,
        &format!("{THINGS}?fieldValidation=Loud"),
        &thing("a", 1),
    )
    .await;
    assert_status(&validation, 422, Some("Invalid"));

    // Nothing was created by any of these.
    let list = get(&app, THINGS).await.json();
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let state = state_with(HealthSwitch::new(true)).with_max_request_body_bytes(64);
    let app = router(state);
    let big = json!({"metadata": {"name": "big"}, "pad": "x".repeat(100)}).to_string();
    let reply = post_json(&app, THINGS, &big).await;
    let status = assert_status(&reply, 413, Some("RequestEntityTooLarge"));
    assert_eq!(status["message"], "Request entity too large: limit is 64");
    // Also without a Content-Length (a streamed body).
    let streamed = send(
        &app,
        req("POST", THINGS)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(futures::stream::iter(vec![Ok::<
                _,
                std::io::Error,
            >(
                bytes::Bytes::from(big.clone()),
            )])))
            .expect("request"),
    )
    .await;
    assert_status(&streamed, 413, Some("RequestEntityTooLarge"));
}

#[tokio::test]
async fn warnings_become_warning_headers_and_strict_duplicates_fail() {
    let app = app();
    let body = r#"{"apiVersion":"test.example.io/v1","kind":"Thing","metadata":{"name":"w"},"spec":{"size":1,"size":2},"bogus":1}"#;
    let reply = post_json(&app, THINGS, body).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let warnings: Vec<&str> = reply
        .headers
        .get_all(header::WARNING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(
        warnings,
        vec![
            r#"299 - "duplicate field \"spec.size\"""#,
            r#"299 - "unknown field \"bogus\"""#
        ]
    );
    let strict = post_json(
        &app,
        &format!("{THINGS}?fieldValidation=Strict"),
        &body.replace("\"w\"", "\"s\""),
    )
    .await;
    let status = assert_status(&strict, 400, Some("BadRequest"));
    assert_eq!(
        status["message"],
        "Thing in version \"v1\" cannot be handled as a Thing: strict decoding error: duplicate field \"spec.size\""
    );
    let ignore = post_json(
        &app,
        &format!("{THINGS}?fieldValidation=Ignore"),
        &body.replace("\"w\"", "\"i\""),
    )
    .await;
    assert_eq!(ignore.status, StatusCode::CREATED);
    assert_eq!(ignore.headers.get_all(header::WARNING).iter().count(), 1);
}

#[tokio::test]
async fn update_checks_the_name_and_serves_status() {
    let app = app_with_things(&["a"]).await;
    let mismatch = send(
        &app,
        req("PUT", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(thing("b", 3)))
            .expect("request"),
    )
    .await;
    let status = assert_status(&mismatch, 400, Some("BadRequest"));
    assert_eq!(
        status["message"],
        "the name of the object (b) does not match the name on the URL (a)"
    );
    let ok = send(
        &app,
        req("PUT", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(thing("a", 3)))
            .expect("request"),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.json()["spec"]["size"], 3);
    let status_put = send(
        &app,
        req("PUT", &format!("{THINGS}/a/status"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                r#"{"metadata":{"name":"a"},"status":{"phase":"Done"},"spec":{"size":99}}"#,
            ))
            .expect("request"),
    )
    .await;
    assert_eq!(status_put.status, StatusCode::OK, "{}", status_put.text());
    let object = status_put.json();
    assert_eq!(object["status"]["phase"], "Done");
    assert_eq!(object["spec"]["size"], 3);
    let read_status = get(&app, &format!("{THINGS}/a/status")).await;
    assert_eq!(read_status.json()["status"]["phase"], "Done");
}

#[tokio::test]
async fn patch_types_come_from_content_type() {
    let app = app_with_things(&["a"]).await;
    let merge = send(
        &app,
        req("PATCH", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/merge-patch+json")
            .body(Body::from(r#"{"spec":{"size":7}}"#))
            .expect("request"),
    )
    .await;
    assert_eq!(merge.status, StatusCode::OK);
    assert_eq!(merge.json()["spec"]["size"], 7);
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let reply = send(
            &app,
            req("PATCH", &format!("{THINGS}/a"))
                .header(header::CONTENT_TYPE, content_type)
                .body(Body::from(r#"{"spec":{"size":5}}"#))
                .expect("request"),
        )
        .await;
        let status = assert_status(&reply, 415, Some("UnsupportedMediaType"));
        assert_eq!(
            status["message"],
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
        );
    }
    let apply = send(
        &app,
        req("PATCH", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/apply-patch+yaml")
            .body(Body::from("spec:\n  size: 1\n"))
            .expect("request"),
    )
    .await;
    let status = assert_status(&apply, 422, Some("Invalid"));
    assert_eq!(status["details"]["kind"], "PatchOptions");
}

#[tokio::test]
async fn delete_answers_a_success_status_or_the_held_object() {
    let app = app_with_things(&["a"]).await;
    let held = post_json(
        &app,
        THINGS,
        r#"{"apiVersion":"test.example.io/v1","kind":"Thing","metadata":{"name":"f","finalizers":["x"]}}"#,
    )
    .await;
    assert_eq!(held.status, StatusCode::CREATED);

    let gone = send(
        &app,
        req("DELETE", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}"#,
            ))
            .expect("request"),
    )
    .await;
    assert_eq!(gone.status, StatusCode::OK);
    assert_eq!(
        gone.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "details": {"name": "a", "group": GROUP, "kind": "things", "uid": "uid-a"}})
    );

    let finalizing = send(
        &app,
        req("DELETE", &format!("{THINGS}/f"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(finalizing.status, StatusCode::OK);
    let object = finalizing.json();
    assert_eq!(object["kind"], "Thing");
    assert!(object["metadata"]["deletionTimestamp"].is_string());

    let bad_policy = send(
        &app,
        req("DELETE", &format!("{THINGS}/f?propagationPolicy=Sideways"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_status(&bad_policy, 422, Some("Invalid"));

    let missing = send(
        &app,
        req("DELETE", &format!("{THINGS}/zzz"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_status(&missing, 404, Some("NotFound"));
}

#[tokio::test]
async fn delete_collection_returns_the_deleted_list() {
    let app = app_with_things(&["a", "b"]).await;
    let reply = send(
        &app,
        req("DELETE", THINGS).body(Body::empty()).expect("request"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(get(&app, THINGS).await.json()["items"], json!([]));
}

// ---- list parameters -------------------------------------------------------------------------

#[tokio::test]
async fn list_parameters_are_validated() {
    let app = app_with_things(&["a"]).await;
    let bad_limit = get(&app, &format!("{THINGS}?limit=abc")).await;
    assert_status(&bad_limit, 400, Some("BadRequest"));
    let list_with_initial_events = get(
        &app,
        &format!("{THINGS}?allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    let status = assert_status(&list_with_initial_events, 422, Some("Invalid"));
    assert_eq!(status["details"]["kind"], "ListOptions");
    assert_eq!(
        status["details"]["causes"].as_array().map(Vec::len),
        Some(2)
    );
    let registry_error = get(&app, &format!("{THINGS}?labelSelector=bad%20selector")).await;
    assert_status(&registry_error, 400, Some("BadRequest"));
    let ok = get(&app, &format!("{THINGS}?limit=1")).await;
    assert_eq!(ok.json()["kind"], "ThingList");
}

// ---- watch -----------------------------------------------------------------------------------

/// Read `n` watch lines from a streaming response, then drop it (the client going away).
async fn watch_lines(app: &Router, uri: &str, accept: &str, n: usize) -> (Reply, Vec<Value>) {
    let response = app
        .clone()
        .oneshot(
            req("GET", uri)
                .header(header::ACCEPT, accept)
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let mut lines = Vec::new();
    let mut buffer = Vec::new();
    while lines.len() < n {
        let Some(frame) = body.frame().await else {
            break;
        };
        let data = frame.expect("frame").into_data().unwrap_or_default();
        buffer.extend_from_slice(&data);
        while let Some(pos) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=pos).collect();
            lines.push(serde_json::from_slice(&line).expect("json line"));
        }
    }
    (
        Reply {
            status,
            headers,
            body: buffer,
        },
        lines,
    )
}

#[tokio::test]
async fn watch_list_streams_initial_events_and_the_bookmark() {
    let app = app_with_things(&["a", "b"]).await;
    let (reply, lines) = watch_lines(
        &app,
        &format!("{THINGS}?watch=1&allowWatchBookmarks=true"),
        "*/*",
        3,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    assert_eq!(lines[0]["type"], "ADDED");
    assert_eq!(lines[1]["object"]["metadata"]["name"], "b");
    assert_eq!(lines[2]["type"], "BOOKMARK");
    assert_eq!(
        lines[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}

#[tokio::test]
async fn watch_errors_before_streaming_are_normal_responses() {
    let app = app();
    let reply = get(&app, &format!("{THINGS}?watch=1&sendInitialEvents=true")).await;
    let status = assert_status(&reply, 422, Some("Invalid"));
    assert_eq!(
        status["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    let yaml = get_as(&app, &format!("{THINGS}?watch=1"), "application/yaml").await;
    assert_status(&yaml, 406, Some("NotAcceptable"));
}

#[tokio::test]
async fn watch_errors_after_the_start_are_error_events() {
    let app = app();
    let (reply, lines) = watch_lines(
        &app,
        &format!("{THINGS}?watch=1&resourceVersion=1"),
        "*/*",
        2,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(lines.len(), 1, "the stream ends after the ERROR event");
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");
}

#[tokio::test]
async fn table_watch_sends_column_definitions_only_first() {
    let app = app_with_things(&["a", "b"]).await;
    let (_, lines) = watch_lines(
        &app,
        &format!("{THINGS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
        TABLE,
        2,
    )
    .await;
    assert!(lines[0]["object"]["columnDefinitions"].is_array());
    assert!(lines[1]["object"]["columnDefinitions"].is_null());
    assert_eq!(lines[1]["object"]["rows"][0]["cells"], json!(["b", 2]));
}

#[tokio::test]
async fn live_watch_events_follow_writes() {
    let app = app();
    let response = app
        .clone()
        .oneshot(
            req("GET", &format!("{THINGS}?watch=true&resourceVersion=5"))
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    let mut body = response.into_body();
    let created = post_json(&app, THINGS, &thing("live", 1)).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let frame = body.frame().await.expect("a frame").expect("data");
    let line: Value = serde_json::from_slice(&frame.into_data().unwrap_or_default()).expect("json");
    assert_eq!(line["type"], "ADDED");
    assert_eq!(line["object"]["metadata"]["name"], "live");
}

// ---- OpenAPI ---------------------------------------------------------------------------------

#[tokio::test]
async fn openapi_v2_with_etag() {
    let app = app();
    let reply = get_as(&app, "/openapi/v2", "application/json").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["swagger"], "2.0");
    let etag = reply.header("etag").to_string();
    let cached = send(
        &app,
        req("GET", "/openapi/v2")
            .header(header::IF_NONE_MATCH, &etag)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    let protobuf = get_as(
        &app,
        "/openapi/v2",
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    )
    .await;
    assert_status(&protobuf, 406, Some("NotAcceptable"));
}

#[tokio::test]
async fn openapi_v3_index_hash_and_redirect() {
    let app = app();
    let index = get(&app, "/openapi/v3").await.json();
    let url = index["paths"]["apis/test.example.io/v1"]["serverRelativeURL"]
        .as_str()
        .expect("url")
        .to_string();
    let doc = get(&app, &url).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.header("cache-control"), "public, immutable");
    assert!(!doc.header("expires").is_empty());
    assert_eq!(doc.json()["openapi"], "3.0.0");
    let hash = url.rsplit('=').next().unwrap_or_default();
    assert_eq!(doc.header("etag"), format!("\"{hash}\""));

    let plain = get(&app, "/openapi/v3/apis/test.example.io/v1").await;
    assert_eq!(plain.status, StatusCode::OK);
    assert_eq!(plain.header("cache-control"), "no-cache, private");

    let stale = get(&app, "/openapi/v3/apis/test.example.io/v1?hash=OLD").await;
    assert_eq!(stale.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(stale.header("location"), url);

    assert_plain_404(&get(&app, "/openapi/v3/apis/test.example.io/v7").await);
}

// ---- health, version, metrics, panics --------------------------------------------------------

#[tokio::test]
async fn health_endpoints_follow_storage() {
    let health = HealthSwitch::new(true);
    let state = state_with(health.clone());
    let app = router(state.clone());
    let ok = get(&app, "/readyz").await;
    assert_eq!((ok.status, ok.text().as_str()), (StatusCode::OK, "ok"));
    assert_eq!(
        get(&app, "/healthz?verbose").await.text(),
        "[+]ping ok\n[+]log ok\n[+]etcd ok\nhealthz check passed\n"
    );

    health.healthy.store(false, Ordering::SeqCst);
    let failing = get(&app, "/readyz").await;
    assert_eq!(failing.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        failing.text(),
        "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
    );
    assert_eq!(
        get(&app, "/readyz/etcd").await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        get(&app, "/readyz?exclude=etcd").await.status,
        StatusCode::OK
    );
    assert_eq!(get(&app, "/livez").await.status, StatusCode::OK);

    health.healthy.store(true, Ordering::SeqCst);
    state.begin_shutdown();
    let shutting_down = get(&app, "/readyz?verbose").await;
    assert_eq!(shutting_down.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(shutting_down.text().contains("[-]shutdown failed"));
    assert_eq!(get(&app, "/livez/ping").await.text(), "ok");
    assert_plain_404(&get(&app, "/livez/nope").await);
}

#[tokio::test]
async fn version_is_version_info() {
    let reply = get(&app(), "/version").await;
    let info = reply.json();
    assert_eq!(info["major"], env!("CARGO_PKG_VERSION_MAJOR"));
    assert_eq!(
        info["gitVersion"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    assert!(info["platform"].as_str().unwrap_or_default().contains('/'));
}

#[tokio::test]
async fn metrics_count_requests() {
    let app = app_with_things(&["a"]).await;
    get(&app, &format!("{THINGS}/nope")).await;
    let text = get(&app, "/metrics").await.text();
    assert!(text.contains(
        r#"apiserver_request_total{verb="POST",group="test.example.io",version="v1",resource="things",subresource="",code="201"} 1"#
    ), "{text}");
    assert!(text.contains(
        r#"apiserver_request_total{verb="GET",group="test.example.io",version="v1",resource="things",subresource="",code="404"} 1"#
    ), "{text}");
    assert!(
        text.contains("apiserver_request_duration_seconds_count{verb=\"POST\""),
        "{text}"
    );
    // Unknown resources do not become label values.
    get(&app, "/apis/test.example.io/v1/gadget-1").await;
    let text = get(&app, "/metrics").await.text();
    assert!(!text.contains("gadget-1"), "{text}");
    assert!(text.contains(
        r#"apiserver_request_total{verb="LIST",group="",version="",resource="",subresource="",code="404"} 1"#
    ), "{text}");
}

#[tokio::test]
async fn a_panicking_handler_is_a_500_status() {
    let app = app();
    let reply = get(&app, &format!("{THINGS}/panic")).await;
    assert_status(&reply, 500, Some("InternalError"));
    // The server keeps serving.
    assert_eq!(get(&app, V1).await.status, StatusCode::OK);
}
