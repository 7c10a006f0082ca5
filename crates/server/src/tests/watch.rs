//! List parameters and watches (initial events, errors before and after the start, Tables, live events).

use super::*;

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
    // A watch from a compacted revision: the store finds out only after the 200 went out.
    let (app, storage) = app_and_storage();
    for name in ["a", "b", "c"] {
        assert_eq!(
            post_json(&app, THINGS, &thing(name, 1)).await.status,
            StatusCode::CREATED
        );
    }
    use svm_storage::Storage as _;
    let current = storage.current_revision().await.expect("revision");
    storage.compact(current).await.expect("compact");
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
    let app = app_with_things(&["before"]).await;
    let list = get(&app, THINGS).await.json();
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list rv")
        .to_owned();
    let response = app
        .clone()
        .oneshot(
            req(
                "GET",
                &format!("{THINGS}?watch=true&resourceVersion={from}"),
            )
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
