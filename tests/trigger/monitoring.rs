//! Every metric deploy/monitoring's dashboard and alerts use exists in a real `/metrics`
//! scrape of the server, with the trigger and the migrator running against the test double
//! through what the panels show: a first start (StorageStates unsafe, then safe), 429s from
//! priority and fairness (retries, APF backpressure), a request that uses up its retries, and
//! a CRD storage move (detection lag).

use std::collections::BTreeSet;
use std::time::Duration;

use kube_double::faults::{Fault, FaultRule};

use crate::support::monitoring::{expressions, metric_names, scraped_names};
use crate::support::wait::eventually_async_every;
use crate::world::{WAIT, World, double_with_widgets, hash};

/// Scrapes every 100 ms (fine enough to see a series that comes and goes) until `done` says
/// so, collecting every sample name seen.
async fn scrape_until(
    w: &World,
    seen: &mut BTreeSet<String>,
    what: &str,
    done: impl AsyncFn(&World) -> bool,
) {
    eventually_async_every(
        WAIT,
        Duration::from_millis(100),
        what,
        async || {
            seen.extend(scraped_names(&w.h.metrics().await));
            if done(w).await {
                Ok(())
            } else {
                Err(format!("not yet; {} sample names seen so far", seen.len()))
            }
        },
        async || String::new(),
    )
    .await
}

/// A DataPlaneRollout in `storage` of a DaemonSet the double does not have; its path.
async fn create_data_plane_rollout(w: &World) -> String {
    let collection = "/apis/storage.svm-apiserver.io/v1alpha1/namespaces/storage/dataplanerollouts";
    let body = serde_json::json!({
        "apiVersion": "storage.svm-apiserver.io/v1alpha1",
        "kind": "DataPlaneRollout",
        "metadata": {"name": "engines"},
        "spec": {"daemonSet": "engine"},
    });
    w.h.create(collection, &body).await;
    format!("{collection}/engines")
}

async fn all_safe(w: &World) -> bool {
    let states = w.states().await;
    !states.is_empty()
        && states.iter().all(|s| {
            let p = crate::world::persisted(s);
            p.len() == 1 && p[0] == crate::world::current(s)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_use_is_served() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 300, 64)
        .expect("preload");
    // Priority and fairness pushes back on the first PATCHes (429, Retry-After, APF headers).
    double.add_fault(
        FaultRule::new(Fault::TooManyRequests {
            retry_after_seconds: 1,
        })
        .verb("patch")
        .resource("configmaps")
        .times(3),
    );
    // One object's PATCH fails more often than a request retries (8 times): the request gives
    // up, and its migration pauses and goes on from its checkpoint.
    double.add_fault(
        FaultRule::new(Fault::ServerError { code: 503 })
            .verb("patch")
            .resource("configmaps")
            .name("cm-00007")
            .times(9),
    );
    let w = World::start(
        double,
        &[
            "--discovery-interval=500ms",
            "--qps=200",
            "--controllers=trigger,migrator,dataplane",
            "--enable-data-plane-rollouts",
            "--data-plane-resync-interval=200ms",
        ],
    )
    .await;
    let mut seen = BTreeSet::new();
    scrape_until(&w, &mut seen, "the first start settling", all_safe).await;
    // A DataPlaneRollout whose DaemonSet the cluster does not have: refused (its nodes'
    // series are written with the refusal).
    let rollout = create_data_plane_rollout(&w).await;
    scrape_until(&w, &mut seen, "the rollout refused", async |w: &World| {
        let got = w.h.http.get(w.h.url(&rollout)).send().await.expect("get");
        let body: serde_json::Value = got.json().await.expect("json");
        crate::harness::condition(&body, "Failed") == Some("True")
    })
    .await;

    // A CRD's storage move: the CRD watch sees it; its history entry has a detection lag.
    w.h.double
        .set_storage_version("widgets.example.test", "v2")
        .expect("move");
    let v2 = hash("example.test", "v2", "Widget");
    scrape_until(&w, &mut seen, "widgets safe in v2", async |w: &World| {
        w.state("widgets.example.test")
            .await
            .is_some_and(|s| crate::world::persisted(&s) == [v2.as_str()])
    })
    .await;
    seen.extend(scraped_names(&w.h.metrics().await));

    let used = metric_names(&expressions());
    let missing: Vec<&String> = used.iter().filter(|n| !seen.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "used by deploy/monitoring but never served: {missing:?}\nserved: {seen:#?}"
    );
    // The scenario really went through what the panels show.
    let last = w.h.metrics().await;
    assert!(
        crate::harness::sample(&last, "svm_migrator_apf_rejections_total") >= 3.0,
        "{last}"
    );
    assert!(
        crate::harness::sample(&last, "svm_leader_is_leader") == 1.0,
        "{last}"
    );
    assert_eq!(
        crate::harness::sample(&last, "svm_migrator_retries_exhausted_total{"),
        1.0,
        "{last}"
    );
    assert!(
        crate::harness::sample(
            &last,
            "svm_trigger_detection_lag_seconds_count{source=\"CustomResourceDefinition\"}"
        ) >= 1.0,
        "{last}"
    );
    w.assert_never_unsafe();
}
