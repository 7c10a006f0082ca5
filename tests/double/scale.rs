//! At the migrator's scale.

use super::*;

#[tokio::test]
async fn twenty_thousand_objects_page_and_migrate() {
    let double = start_with_widgets().await;
    double
        .preload("widgets.example.test", Some("demo"), "w", 20_000, 64)
        .unwrap();
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    double.reset_counters();
    let http = Http::new(&double);

    // A storage migration's pass: metadata-only pages of 500; the first page's objects get
    // the migrator's patch (only their resourceVersion), which re-encodes them into v2.
    let mut token: Option<String> = None;
    let mut seen = 0usize;
    let mut expected_remaining = 20_000usize;
    loop {
        let path = match &token {
            Some(t) => format!("{WIDGETS}?limit=500&continue={t}"),
            None => format!("{WIDGETS}?limit=500"),
        };
        let first_page = token.is_none();
        let page = http.get_accept(&path, METADATA_LIST).await.json();
        let items = page["items"].as_array().unwrap();
        seen += items.len();
        expected_remaining -= items.len();
        for item in items.iter().filter(|_| first_page) {
            let name = item["metadata"]["name"].as_str().unwrap();
            let rv = item["metadata"]["resourceVersion"].as_str().unwrap();
            let r = http
                .merge_patch(
                    &format!("{WIDGETS}/{name}"),
                    &json!({"metadata": {"resourceVersion": rv}}),
                )
                .await;
            assert_eq!(r.status, 200);
        }
        match page["metadata"]["continue"].as_str() {
            Some(t) => {
                assert_eq!(page["metadata"]["remainingItemCount"], expected_remaining);
                token = Some(t.to_string());
            }
            None => break,
        }
    }
    assert_eq!(seen, 20_000);
    let counters = double.counters();
    assert_eq!(counters.requests_for("list", "widgets.example.test"), 40);
    assert_eq!(counters.writes_performed_for("widgets.example.test"), 500);
    let summary = double.stored_summary("widgets.example.test");
    assert_eq!(
        summary.get(&("example.test/v2".to_string(), None)),
        Some(&500)
    );
    assert_eq!(
        summary.get(&("example.test/v1".to_string(), None)),
        Some(&19_500)
    );

    // The page log shows where each page started (what a crash-resume test checks).
    let log = double.list_log();
    assert_eq!(log.len(), 40);
    assert_eq!(log[1].start_key.as_deref(), Some("w-00499"));
    assert!(log.iter().all(|l| l.metadata_only && l.items == 500));
}
