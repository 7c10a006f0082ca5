//! Crash and resume: the server is SIGKILLed mid-migration three times, at random pages, and
//! restarted; each time it resumes from its last checkpoint (never from the first page), and
//! the migration completes with every object rewritten exactly once.

use std::time::Duration;

use rand::Rng;

use crate::harness::{Harness, double_with_widgets, migrated, tail};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_three_times_it_resumes_from_the_checkpoint_and_completes() {
    const OBJECTS: usize = 5_000;
    const CHUNK: usize = 100;
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", OBJECTS, 64)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    // Every namespace also holds its kube-root-ca.crt ConfigMap, as in a real cluster.
    let total: usize = double.stored_summary("configmaps").values().sum();
    assert!(total > OBJECTS);
    double.reset_counters();
    // Throttled, so there is time to kill it between pages.
    let mut h = Harness::start(
        double,
        &[
            "--qps=500",
            "--burst=50",
            "--chunk-size=100",
            "--object-concurrency=8",
        ],
    );
    h.create_migration("crashy", "", "configmaps").await;

    let mut rng = rand::rng();
    let windows = [(400, 1_300), (1_800, 2_800), (3_200, 4_200)];
    for (round, (low, high)) in windows.into_iter().enumerate() {
        let threshold: i64 = rng.random_range(low..high);
        h.wait_for("crashy", Duration::from_secs(120), |m| {
            migrated(m) >= threshold
        })
        .await;
        h.server.kill();
        let before = h.double.list_log();
        h.server.restart();
        let m = h
            .wait_for("crashy", Duration::from_secs(60), |m| migrated(m) >= 0)
            .await;
        assert!(
            migrated(&m) >= threshold - CHUNK as i64,
            "round {round}: the checkpoint survived the crash: {m:#}"
        );
        // The first LIST after the restart carries a continue token handed out by one of the
        // last two pages before the kill (the checkpoint is written after a page is done).
        let after = wait_for_list_after(&h, before.len()).await;
        let token = after
            .continue_token
            .clone()
            .unwrap_or_else(|| panic!("round {round}: restarted from the first page: {after:?}"));
        let recent: Vec<Option<String>> = before
            .iter()
            .rev()
            .take(2)
            .map(|l| l.next_continue.clone())
            .collect();
        assert!(
            recent.contains(&Some(token.clone())),
            "round {round}: resumed at {token}, not at the checkpoint ({recent:?})\n{}",
            tail(&h.server.log(), 40)
        );
    }

    let m = h.wait_succeeded("crashy", Duration::from_secs(180)).await;
    assert_eq!(migrated(&m), total as i64, "{m:#}");
    let summary = h.double.stored_summary("configmaps");
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert_eq!(summary.get(&("v2".to_string(), None)), Some(&total));
    let counters = h.double.counters();
    // Each old object was written once; re-done pages cost only skipped (no-op) writes.
    assert_eq!(counters.writes_performed_for("configmaps"), total as u64);
    assert!(counters.requests_for("patch", "configmaps") <= (total + 3 * CHUNK) as u64);
    // Pages: 51, plus at most one re-done page per crash.
    let pages = total.div_ceil(CHUNK) as u64;
    let lists = counters.requests_for("list", "configmaps");
    assert!(
        (pages..=pages + 3).contains(&lists),
        "{lists} LIST requests for {pages} pages"
    );
}

/// Waits for the double to log a LIST after the first `seen` ones.
async fn wait_for_list_after(h: &Harness, seen: usize) -> kube_double::ListRecord {
    for _ in 0..600 {
        if let Some(record) = h.double.list_log().get(seen) {
            return record.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no LIST after the restart\n{}", tail(&h.server.log(), 40));
}
