//! The store behind the real HTTP router: what kubectl and client libraries see.

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use std::sync::Arc;

use serde_json::Value;
use svm_registry::testing::{ROOT, WidgetStrategy, body, names, storage};
use svm_registry::{Registry, Store};

use crate::{AppState, router};

const WIDGETS: &str = "/apis/test.example.io/v1/widgets";

fn app() -> Router {
    let storage = storage();
    let store = Store::new(WidgetStrategy, storage.clone(), ROOT);
    let mut registry = Registry::new();
    registry.register(Arc::new(store));
    router(AppState::new(registry, storage))
}

async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &str,
) -> (StatusCode, Vec<String>, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .collect();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // Watch bodies are one JSON document per line.
    let value = if text.lines().count() > 1 {
        Value::Array(
            text.lines()
                .map(|l| serde_json::from_str(l).expect("json line"))
                .collect(),
        )
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, warnings, value)
}

#[tokio::test]
async fn create_get_list_patch_delete_over_http() {
    let app = app();
    let (status, warnings, created) = call(
        &app,
        "POST",
        WIDGETS,
        "application/json",
        r#"{"apiVersion":"test.example.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"size":1,"shape":"x"}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(warnings, vec![r#"299 - "unknown field \"spec.shape\"""#]);
    assert_eq!(created["metadata"]["generation"], 1);

    let (status, _, list) = call(&app, "GET", &format!("{WIDGETS}?limit=1"), "", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(names(&list), vec!["a"]);

    let (status, _, patched) = call(
        &app,
        "PATCH",
        &format!("{WIDGETS}/a/status"),
        "application/strategic-merge-patch+json",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["status"]["conditions"][0]["type"], "Ready");

    let (status, _, stale) = call(
        &app,
        "PATCH",
        &format!("{WIDGETS}/a"),
        "application/merge-patch+json",
        r#"{"metadata":{"resourceVersion":"1"},"spec":{"size":2}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(stale["reason"], "Conflict");
    assert_eq!(
        stale["details"],
        json!({"name": "a", "group": "test.example.io", "kind": "widgets"})
    );

    let (status, _, deleted) = call(&app, "DELETE", &format!("{WIDGETS}/a"), "", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(deleted["status"], "Success");
    assert_eq!(deleted["details"]["uid"], created["metadata"]["uid"]);
    let (status, _, missing) = call(&app, "GET", &format!("{WIDGETS}/a"), "", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        missing["message"],
        "widgets.test.example.io \"a\" not found"
    );
}

#[tokio::test]
async fn invalid_objects_are_422_and_strict_unknown_fields_400_over_http() {
    let app = app();
    let (status, _, invalid) = call(
        &app,
        "POST",
        WIDGETS,
        "application/json",
        r#"{"apiVersion":"test.example.io/v1","kind":"Widget","metadata":{"name":"Bad_Name!"}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(invalid["details"]["causes"][0]["field"], "metadata.name");
    let (status, _, strict) = call(
        &app,
        "POST",
        &format!("{WIDGETS}?fieldValidation=Strict"),
        "application/json",
        r#"{"apiVersion":"test.example.io/v1","kind":"Widget","metadata":{"name":"s"},"spec":{"shape":"x"}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        strict["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.shape\""
    );
}

#[tokio::test]
async fn watch_list_over_http_ends_with_the_bookmark_and_the_timeout() {
    let app = app();
    for name in ["a", "b"] {
        let (status, _, _) = call(
            &app,
            "POST",
            WIDGETS,
            "application/json",
            &body(name, 1).to_string(),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    // A plain watch with bookmarks becomes a watch-list request (recording 10b, step 2).
    let (status, _, events) = call(
        &app,
        "GET",
        &format!("{WIDGETS}?watch=1&allowWatchBookmarks=true&timeoutSeconds=1"),
        "",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let types: Vec<&str> = events
        .as_array()
        .expect("lines")
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(&types[..3], &["ADDED", "ADDED", "BOOKMARK"]);
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}
