//! A flaky, throttling apiserver and a rejecting webhook: retriable errors are retried within
//! the shared rate limit until the migration completes; a denial is never retried, and fails
//! the migration naming the object; a deleted migration stops.

use std::time::Duration;

use kube_double::{Fault, FaultRule, KubeDouble};

use crate::harness::{
    Harness, condition, condition_field, double_with_widgets, double_with_widgets_from, migrated,
    sample,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_completes_through_5xx_429_storms_and_expired_tokens_within_the_rate_limit() {
    const OBJECTS: usize = 3_000;
    // On etcd 3.4 (recording 10a), so the migration pages and meets an expired token.
    let double = double_with_widgets_from(KubeDouble::builder().watch_list(false)).await;
    double
        .preload("widgets.example.test", Some("demo"), "w", OBJECTS, 64)
        .unwrap();
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    double.reset_counters();
    // 10 % of LISTs and PATCHes fail with a 5xx; the first 40 PATCHes are throttled with
    // Retry-After: 1, as priority-and-fairness does under load.
    let flaky_patch = double.add_fault(
        FaultRule::new(Fault::ServerError { code: 503 })
            .verb("patch")
            .fraction(0.1),
    );
    let flaky_list = double.add_fault(
        FaultRule::new(Fault::ServerError { code: 500 })
            .verb("list")
            .fraction(0.1),
    );
    let storm = double.add_fault(
        FaultRule::new(Fault::TooManyRequests {
            retry_after_seconds: 1,
        })
        .verb("patch")
        .times(40),
    );
    let (qps, burst) = (300u64, 30u64);
    let h = Harness::start(
        double,
        &[
            &format!("--qps={qps}"),
            &format!("--burst={burst}"),
            "--chunk-size=100",
            "--object-concurrency=8",
        ],
    );
    h.create_migration("flaky", "example.test", "widgets").await;

    // Compact the double's store once a few pages are done: the next page's token is then
    // too old, and kube-apiserver answers 410 with an inconsistent token to continue from.
    // Hang guards: the storm is 40 s of pauses, and its 429s carry APF's headers, so the pool
    // also runs at a lowered rate for a while after it (doubling back every 5 s).
    h.wait_for("flaky", Duration::from_secs(180), |m| migrated(m) >= 500)
        .await;
    h.double.compact();

    let m = h.wait_succeeded("flaky", Duration::from_secs(300)).await;
    // Counted once each, across the 410 and the pauses: pages keep the last key done.
    assert_eq!(migrated(&m), OBJECTS as i64);
    assert_eq!(
        m["status"]["progress"]["migratedThrough"],
        format!("demo/w-{:05}", OBJECTS - 1),
        "{m:#}"
    );
    assert_eq!(
        h.double
            .stored_summary("widgets.example.test")
            .get(&("example.test/v2".to_string(), None)),
        Some(&OBJECTS)
    );
    assert!(h.double.fault_injections(flaky_patch) > 100);
    assert!(h.double.fault_injections(flaky_list) >= 1);
    assert_eq!(h.double.fault_injections(storm), 40);
    let log = h.double.pages_of("widgets.example.test");
    let expired = log
        .iter()
        .position(|l| l.code == 410)
        .unwrap_or_else(|| panic!("no 410 in {log:#?}"));
    let resumed = log[expired + 1..]
        .iter()
        .find(|l| l.code == 200)
        .expect("a page after the 410");
    assert_eq!(
        resumed.token_revision,
        Some(-1),
        "continued from the inconsistent token, not from the start"
    );
    let counters = h.double.counters();
    assert!(
        counters.peak_requests_per_second <= qps + burst,
        "peak {} requests/s > qps {qps} + burst {burst}",
        counters.peak_requests_per_second
    );
    let metrics = h.metrics().await;
    assert!(
        sample(
            &metrics,
            "storage_migrator_core_migrator_retries_total{resource=\"widgets.example.test\",reason=\"503\"}"
        ) > 100.0,
        "{metrics}"
    );
    // Every 429 the double served was answered to a PATCH that either retried it, or had used
    // its retries (on that storm, or 503s) and left it to the migration-level retry.
    let retried = sample(
        &metrics,
        "storage_migrator_core_migrator_retries_total{resource=\"widgets.example.test\",reason=\"429\"}",
    );
    let exhausted = sample(
        &metrics,
        "svm_migrator_retries_exhausted_total{resource=\"widgets.example.test\",reason=\"429\"}",
    );
    assert!(retried > 0.0, "{metrics}");
    assert_eq!(retried + exhausted, 40.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_denial_fails_the_migration_naming_the_object() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 800, 64)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    let deny = double.add_fault(
        FaultRule::new(Fault::deny(
            "policy.example.test",
            "configmaps named cm-00420 are frozen",
        ))
        .verb("patch")
        .name("cm-00420"),
    );
    let h = Harness::start(
        double,
        &["--qps=0", "--chunk-size=100", "--object-concurrency=8"],
    );
    h.create_migration("denied", "", "configmaps").await;
    let m = h
        .wait_for("denied", Duration::from_secs(60), |m| {
            condition(m, "Failed") == Some("True")
        })
        .await;
    // The policy `Fail` (the default): the rest of the resource is migrated, then the
    // migration fails naming the object, and status.progress counts and names it.
    assert_eq!(condition_field(&m, "Failed", "reason"), "ObjectsRejected");
    let message = condition_field(&m, "Failed", "message");
    for part in [
        "migrated 800 of 801 objects (0 remaining, 1 failed)",
        "demo/cm-00420",
        "403",
        "policy.example.test",
        "frozen",
    ] {
        assert!(message.contains(part), "{part} not in {message:?}");
    }
    assert_eq!(m["status"]["progress"]["failedObjects"], 1, "{m:#}");
    assert_eq!(m["status"]["progress"]["failures"][0]["name"], "cm-00420");
    assert_eq!(condition(&m, "Running"), Some("False"));
    assert_eq!(condition(&m, "Succeeded"), None);
    // A denial is not retried.
    assert_eq!(h.double.fault_injections(deny), 1);
    // It stays failed: the pool does not pick it up again — neither at once (a Failed
    // migration taken for a pending one) nor after the pause of a migration that hit its
    // retry cap (a failure recorded as "retry later"), which lasts 5 s: watched for longer
    // than that pause plus the pool's 1 s tick plus the few hundred PATCHes a re-run would
    // take to reach the denied object again.
    const RETRY_PAUSE: Duration = Duration::from_secs(5);
    tokio::time::sleep(RETRY_PAUSE + Duration::from_secs(4)).await;
    assert_eq!(h.double.fault_injections(deny), 1);
    let log = h.server.log();
    assert!(
        !log.contains("migration paused after repeated errors"),
        "the denial was taken for a retriable error:\n{}",
        crate::harness::tail(&log, 30)
    );
    let metrics = h.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            "storage_migrator_core_migrator_running_migrations "
        ),
        0.0,
        "{metrics}"
    );
    // The rest of the resource was migrated after the denial: every object PATCHed (once:
    // the denial is not retried).
    let patches = h.double.counters().requests_for("patch", "configmaps");
    assert!(patches >= 801, "{patches} PATCHes");
    assert_eq!(h.double.counters().requests_for("watch", "configmaps"), 1);
    let events = h
        .double
        .counters()
        .requests_for("create", "events.events.k8s.io");
    assert_eq!(events, 2, "a Started and a Failed event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_migration_stops_its_work_within_a_page() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 3_000, 64)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    let h = Harness::start(double, &["--qps=200", "--burst=20", "--chunk-size=100"]);
    h.create_migration("doomed", "", "configmaps").await;
    h.wait_for("doomed", Duration::from_secs(60), |m| migrated(m) >= 300)
        .await;
    h.delete_migration("doomed").await;
    let at_delete = h.double.counters();
    let pages_at_delete = h.double.pages_of("configmaps").len() as u64;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = h.double.counters();
    let more_lists = h.double.pages_of("configmaps").len() as u64
        + later.requests_for("watch", "configmaps")
        - pages_at_delete
        - at_delete.requests_for("watch", "configmaps");
    let more_patches =
        later.requests_for("patch", "configmaps") - at_delete.requests_for("patch", "configmaps");
    assert!(more_lists <= 1, "{more_lists} more pages after the delete");
    assert!(
        more_patches <= 200,
        "{more_patches} more patches after the delete"
    );
    // Nowhere near done: it really stopped.
    assert!(later.requests_for("patch", "configmaps") < 2_000);
    assert!(h.get_migration("doomed").await.is_none());
}

/// After a CRD's storage version moves, kube-apiserver rebuilds the resource's storage and its
/// watch cache fills in the background: a watch-list sent meanwhile is answered 429 "storage is
/// (re)initializing", a Status with Retry-After 1 and APF's headers (recording 21, step 1).
/// The migrator pages from etcd meanwhile and asks again after the Retry-After; the stream it
/// then gets skips what the pages did. No APF rejection is counted, no object is PATCHed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_watch_cache_fills_the_migrator_pages_then_streams_the_rest() {
    const OBJECTS: usize = 3_000;
    let double = double_with_widgets().await;
    double
        .preload("widgets.example.test", Some("demo"), "w", OBJECTS, 64)
        .unwrap();
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    let filling = double.add_fault(
        FaultRule::new(Fault::StorageInitializing)
            .verb("watch")
            .resource("widgets.example.test")
            .times(2),
    );
    let h = Harness::start(
        double,
        &[
            "--qps=300",
            "--burst=30",
            "--chunk-size=100",
            "--object-concurrency=8",
        ],
    );
    h.create_migration("filling", "example.test", "widgets")
        .await;
    let m = h.wait_succeeded("filling", Duration::from_secs(120)).await;
    assert_eq!(migrated(&m), OBJECTS as i64);
    assert_eq!(h.double.fault_injections(filling), 2);
    // Two refusals, each followed by at least a second of pages of 100 (at most 300 PATCHes
    // a second here), before the stream; preflight's sample is one more LIST of 100.
    let pages = h
        .double
        .pages_of("widgets.example.test")
        .into_iter()
        .filter(|p| p.limit == Some(100) && p.code == 200)
        .count();
    assert!(pages >= 3, "{pages} LISTs of 100, preflight's included");
    let counters = h.double.counters();
    assert_eq!(
        counters.requests.get("patch widgets.example.test"),
        Some(&(OBJECTS as u64)),
        "every object PATCHed once: {:?}",
        counters.requests
    );
    let metrics = h.metrics().await;
    let widgets = "resource=\"widgets.example.test\"";
    assert_eq!(
        sample(&metrics, "svm_migrator_apf_rejections_total"),
        0.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            &format!("storage_migrator_core_migrator_reads_total{{{widgets},mode=\"stream\"}}")
        ),
        1.0,
        "{metrics}"
    );
}
