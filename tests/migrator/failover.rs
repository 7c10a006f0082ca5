//! Two replicas on one etcd: only the elected leader migrates; when it is killed mid-migration,
//! the other takes over after the lease lapses and resumes from the checkpoint.

use std::time::{Duration, Instant};

use crate::harness::{Harness, double_with_widgets, migrated, replica, sample, tail};
use crate::support::etcd::EtcdServer;
use crate::support::server::{Backend, ServerProcess};
use crate::support::wait::eventually_async_every;

const RUNNING: &str = "storage_migrator_core_migrator_running_migrations ";

async fn running(http: &reqwest::Client, server: &ServerProcess) -> f64 {
    sample(&server.scrape(http).await, RUNNING)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_a_killed_leaders_migration_from_its_checkpoint() {
    let etcd = EtcdServer::start();
    let endpoint = etcd.endpoint();
    let prefix = format!("/svm-failover-{}", uuid::Uuid::new_v4());
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 3_000, 64)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    let total: usize = double.stored_summary("configmaps").values().sum();
    double.reset_counters();
    let flags = [
        "--qps=300",
        "--burst=30",
        "--chunk-size=100",
        "--leader-elect-lease-duration=3s",
        "--leader-elect-renew-deadline=2s",
        "--leader-elect-retry-period=250ms",
    ];
    let mut a = Harness::start_on(double, Backend::EtcdShared(&endpoint, &prefix), &flags);
    let mut b = replica(&a, Backend::EtcdShared(&endpoint, &prefix), &flags);
    let b_http = b.http_client();
    a.create_migration("ha", "", "configmaps").await;
    a.wait_for("ha", Duration::from_secs(60), |m| migrated(m) >= 800)
        .await;

    // Exactly one replica is working on it.
    let a_http = a.http.clone();
    let (on_a, on_b) = (
        running(&a_http, &a.server).await,
        running(&b_http, &b).await,
    );
    assert_eq!(on_a + on_b, 1.0, "a: {on_a}, b: {on_b}");
    // Kill the leader; keep talking to the survivor.
    let (leader, survivor, survivor_http) = if on_a == 1.0 {
        (&mut a.server, &b, &b_http)
    } else {
        (&mut b, &a.server, &a_http)
    };
    leader.kill();
    let killed_at = Instant::now();

    // The survivor takes over (after the 3 s lease) and finishes.
    let get = |http: &reqwest::Client, url: String| {
        let http = http.clone();
        async move {
            http.get(url)
                .send()
                .await
                .ok()?
                .json::<serde_json::Value>()
                .await
                .ok()
        }
    };
    let url = format!(
        "{}/apis/storagemigration.k8s.io/v1/storageversionmigrations/ha",
        survivor.url
    );
    let done = eventually_async_every(
        // Counted from the kill.
        Duration::from_secs(90).saturating_sub(killed_at.elapsed()),
        Duration::from_millis(100),
        "the migration finished by the survivor after failover",
        async || {
            let m = get(survivor_http, url.clone()).await.expect("migration");
            if m.to_string().contains("\"Succeeded\"")
                && m["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Succeeded" && c["status"] == "True")
                })
            {
                Ok(m)
            } else {
                Err(format!("{m:#}"))
            }
        },
        async || tail(&survivor.log(), 40),
    )
    .await;
    assert_eq!(migrated(&done), total as i64);
    // The new leader streamed the resource again and skipped what the checkpoint (the last
    // key done) covers: at most a chunk of 100, plus what was in flight, is patched twice.
    let counters = a.double.counters();
    // (The one LIST is the first leader's preflight: the new one resumed from a checkpoint.)
    assert_eq!(counters.requests_for("watch", "configmaps"), 2);
    assert_eq!(a.double.pages_of("configmaps").len(), 1);
    let patches = counters.requests_for("patch", "configmaps");
    assert!(
        patches <= (total + 100 + 16) as u64,
        "{patches} PATCHes for {total} objects: the new leader did not resume at the checkpoint"
    );
    assert_eq!(
        a.double
            .stored_summary("configmaps")
            .get(&("v2".to_string(), None)),
        Some(&total)
    );
    assert_eq!(
        a.double.counters().writes_performed_for("configmaps"),
        total as u64
    );
}
