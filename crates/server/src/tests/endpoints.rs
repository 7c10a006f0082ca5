//! OpenAPI, health, /version, /metrics, and a panicking handler.

use super::*;

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
    // The test kind's table row panics for this one name.
    let app = app_with_things(&[PANICS]).await;
    let reply = get_as(&app, &format!("{THINGS}/{PANICS}"), TABLE).await;
    assert_status(&reply, 500, Some("InternalError"));
    // The server keeps serving.
    assert_eq!(get(&app, V1).await.status, StatusCode::OK);
}
