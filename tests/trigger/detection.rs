//! How the trigger notices: which watch or poll sees what, what an idle cluster costs, and
//! the fallback when the identity-lease watch is not allowed.

use std::time::Duration;

use kube_double::faults::{Fault, FaultRule};

use crate::harness::sample;
use crate::support::wait::eventually_async_every;
use crate::world::{
    WAIT, World, current, double_with_widgets, double_without_storage_version_api, hash, persisted,
};

/// Waits (polling every 100 ms, as the scenarios are quick) until every StorageState is safe.
async fn all_safe(w: &World) {
    eventually_async_every(
        WAIT,
        Duration::from_millis(100),
        "every StorageState safe",
        async || {
            let items = w.states().await;
            let unsafe_: Vec<&str> = items
                .iter()
                .filter(|s| {
                    let p = persisted(s);
                    p.len() != 1 || p[0] != current(s)
                })
                .filter_map(|s| s["metadata"]["name"].as_str())
                .collect();
            if !items.is_empty() && unsafe_.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} StorageStates, not safe: {unsafe_:?}",
                    items.len()
                ))
            }
        },
        async || String::new(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_costs_only_304s() {
    let double = double_with_widgets().await;
    let w = World::start(double, &["--discovery-interval=500ms"]).await;
    all_safe(&w).await;
    // Let the last migrations' events pass: wait for a second with nothing but polls.
    let only_polls = |c: &kube_double::CountersSnapshot| {
        c.requests_for("get", "/api") + c.requests_for("get", "/apis") == c.total_requests
    };
    // Each try is itself a second of watching: no pause between tries.
    eventually_async_every(
        WAIT,
        Duration::ZERO,
        "a quiet second (only discovery polls)",
        async || {
            w.h.double.reset_counters();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let counters = w.h.double.counters();
            if only_polls(&counters) {
                Ok(())
            } else {
                Err(format!("{:#?}", counters.requests))
            }
        },
        async || String::new(),
    )
    .await;
    w.h.double.reset_counters();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let c = w.h.double.counters();
    let polls = c.responses_for("get", "/api", 304) + c.responses_for("get", "/apis", 304);
    assert!(polls >= 12, "{:#?}", c.responses);
    // Every request of the window a discovery poll, every answer a 304. (Requests and answers
    // are counted apart: a poll in flight at the reset is answered inside the window, so the
    // two totals may differ by the polls that straddle its edges.)
    assert_eq!(
        c.total_requests,
        c.requests_for("get", "/api") + c.requests_for("get", "/apis"),
        "only polls: {:#?}",
        c.requests
    );
    let answers: u64 = c.responses.values().sum();
    assert_eq!(answers, polls, "only 304s: {:#?}", c.responses);
    let metrics = w.h.metrics().await;
    assert!(
        sample(
            &metrics,
            "svm_trigger_discovery_requests_total{result=\"not_modified\"}"
        ) >= polls as f64
    );
}

/// With an hour between polls, a CRD's storage move and a built-in's (an apiserver restart)
/// are still seen: by the CRD watch and the identity-lease watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_see_moves_without_waiting_for_a_poll() {
    let double = double_without_storage_version_api().await;
    double.create_crd(kube_double::crd::widgets()).unwrap();
    let w = World::start(double, &["--discovery-interval=1h"]).await;
    all_safe(&w).await;
    w.h.double.reset_counters();
    w.h.double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    w.wait_safe(
        "widgets.example.test",
        &hash("example.test", "v2", "Widget"),
        WAIT,
    )
    .await;
    // The CRD watch alone: no poll, no look (only the migrator resolving its resource).
    let c = w.h.double.counters();
    assert_eq!(c.requests_for("get", "/apis"), 0, "{:#?}", c.requests);
    assert_eq!(c.requests_for("get", "/api/v1"), 0, "{:#?}", c.requests);

    w.h.double
        .set_storage_version("deployments.apps", "v2")
        .unwrap();
    w.wait_safe("deployments.apps", &hash("apps", "v2", "Deployment"), WAIT)
        .await;
    // The lease watch made it look (every group's legacy document), with no poll.
    let c = w.h.double.counters();
    assert!(c.requests_for("get", "/api/v1") >= 1, "{:#?}", c.requests);
    assert_eq!(c.requests_for("get", "/apis"), 0, "{:#?}", c.requests);
    w.assert_never_unsafe();
}

/// Without the identity-lease watch (RBAC refuses it), nothing vouches that no apiserver
/// restarted between polls: every poll is a full look, and a move is found by the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lease_watch_every_poll_is_a_look() {
    let double = double_without_storage_version_api().await;
    double
        .preload("configmaps", Some("demo"), "a", 50, 64)
        .unwrap();
    double.add_fault(
        FaultRule::new(Fault::Forbidden)
            .resource("leases.coordination.k8s.io")
            .namespace("kube-system"),
    );
    let w = World::start(double, &["--discovery-interval=1s"]).await;
    w.wait_safe("configmaps", &hash("", "v1", "ConfigMap"), WAIT)
        .await;
    w.h.double.reset_counters();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = w.h.double.counters();
    assert!(
        c.requests_for("get", "/api/v1") >= 2,
        "a look per poll: {:#?}",
        c.requests
    );
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    w.wait_safe("configmaps", &hash("", "v2", "ConfigMap"), WAIT)
        .await;
    let log = w.h.server.log();
    assert!(
        log.contains("identity lease watch"),
        "{}",
        crate::harness::tail(&log, 30)
    );
    w.assert_never_unsafe();
}

/// `--controllers=migrator`: manual migrations only, as in-tree Kubernetes runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrator_alone_runs_manual_migrations_and_tracks_nothing() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "a", 50, 64)
        .unwrap();
    let w = World::start(double, &["--controllers=migrator"]).await;
    w.h.create_migration("manual", "", "configmaps").await;
    w.h.wait_succeeded("manual", WAIT).await;
    assert!(w.states().await.is_empty());
    assert_eq!(w.migrations().await.len(), 1);
    assert_eq!(w.history("", "configmaps").await, []);
}

/// A deleted CRD takes its StorageState (and the trigger's migrations) with it; the history
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_crd_takes_its_storage_state_along() {
    let double = double_with_widgets().await;
    let w = World::start(double, &[]).await;
    let v1 = hash("example.test", "v1", "Widget");
    w.wait_safe("widgets.example.test", &v1, WAIT).await;
    w.h.double
        .delete(
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            "widgets.example.test",
        )
        .unwrap();
    w.wait_state_gone("widgets.example.test", WAIT).await;
    assert!(w.migrations_of("example.test", "widgets").await.is_empty());
    assert_eq!(w.history("example.test", "widgets").await.len(), 1);
}
