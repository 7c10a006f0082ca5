//! Counters.

use super::*;

#[tokio::test]
async fn counters_track_requests_bytes_writes_and_list_pages() {
    let double = start_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "obj", 5, 32)
        .unwrap();
    double.reset_counters();
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    let mut bytes_in = 0;
    let mut bytes_out = 0;

    for _ in 0..3 {
        bytes_out += http.get(&format!("{base}/obj-00000")).await.body.len();
    }
    let first = http.get(&format!("{base}?limit=2")).await;
    bytes_out += first.body.len();
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let second = http.get(&format!("{base}?limit=2&continue={token}")).await;
    bytes_out += second.body.len();
    let change = json!({"data": {"payload": "changed"}});
    bytes_in += change.to_string().len();
    bytes_out += http
        .merge_patch(&format!("{base}/obj-00001"), &change)
        .await
        .body
        .len();
    bytes_in += change.to_string().len();
    bytes_out += http
        .merge_patch(&format!("{base}/obj-00001"), &change)
        .await
        .body
        .len();
    bytes_out += http.get("/apis").await.body.len();

    let c = double.counters();
    assert_eq!(c.requests_for("get", "configmaps"), 3);
    assert_eq!(c.requests_for("list", "configmaps"), 2);
    assert_eq!(c.requests_for("patch", "configmaps"), 2);
    assert_eq!(c.requests_for("get", "/apis"), 1);
    assert_eq!(c.total_requests, 8);
    assert_eq!(c.writes_performed_for("configmaps"), 1);
    assert_eq!(c.writes_skipped_for("configmaps"), 1);
    assert_eq!(c.bytes_in, bytes_in as u64);
    assert_eq!(c.bytes_out, bytes_out as u64);
    assert!(c.peak_requests_per_second >= 1 && c.peak_requests_per_second <= 8);

    let log = double.list_log();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].start_key, None);
    assert_eq!(log[0].next_continue.as_deref(), Some(token.as_str()));
    assert_eq!(log[1].continue_token.as_deref(), Some(token.as_str()));
    assert_eq!(log[1].start_key.as_deref(), Some("obj-00001"));
    assert_eq!(
        log[1].token_revision,
        log[0].resource_version.map(|r| r as i64)
    );
    assert_eq!((log[1].items, log[1].code), (2, 200));

    // The same numbers over the admin API, which does not count itself.
    let admin = http.get("/_double/counters").await.json();
    assert_eq!(admin["requests"]["get configmaps"], 3);
    assert_eq!(admin["writesSkipped"], 1);
    assert_eq!(double.counters().total_requests, 8);
}

#[tokio::test]
async fn answers_are_counted_by_status_code() {
    let double = start_with_widgets().await;
    double.reset_counters();
    let http = Http::new(&double);
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let first = http.get_accept("/apis", accept).await;
    assert_eq!(first.status, 200);
    let etag = first.header("etag").expect("etag").to_string();
    for _ in 0..3 {
        let again = http
            .send(
                "GET",
                "/apis",
                &[("Accept", accept), ("If-None-Match", &etag)],
                None,
            )
            .await;
        assert_eq!(again.status, 304);
    }
    assert_eq!(
        http.get("/api/v1/namespaces/demo/configmaps/missing")
            .await
            .status,
        404
    );
    let c = double.counters();
    assert_eq!(c.responses_for("get", "/apis", 200), 1);
    assert_eq!(c.responses_for("get", "/apis", 304), 3);
    assert_eq!(c.responses_for("get", "configmaps", 404), 1);
    assert_eq!(c.requests_for("get", "/apis"), 4);
}
