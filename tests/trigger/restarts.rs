//! The trigger across its own restarts and failovers: what happened while it was away is
//! recorded (or recorded as Unknown), and a restart with nothing new changes nothing.

use svm_trigger::history::Source;

use crate::harness::{migrated, replica, sample, tail};
use crate::support::server::Backend;
use crate::world::{WAIT, World, double_with_widgets, hash, hashes, persisted};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_while_the_server_is_stopped_are_found_on_return() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "a", 100, 64)
        .unwrap();
    double
        .preload("widgets.example.test", Some("demo"), "a", 100, 64)
        .unwrap();
    let mut w = World::start(double, &[]).await;
    let cm1 = hash("", "v1", "ConfigMap");
    let w1 = hash("example.test", "v1", "Widget");
    w.wait_safe("configmaps", &cm1, WAIT).await;
    w.wait_safe("widgets.example.test", &w1, WAIT).await;

    w.h.server.kill();
    // An upgrade while the trigger is away: the apiserver restarts with configmaps in v2 and
    // writes some; the CRD moves to v2 (storedVersions [v1, v2]).
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    w.h.double
        .preload("configmaps", Some("demo"), "b", 50, 64)
        .unwrap();
    w.h.double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    w.h.double
        .preload("widgets.example.test", Some("demo"), "b", 50, 64)
        .unwrap();
    w.h.server.restart();

    let cm2 = hash("", "v2", "ConfigMap");
    let w2 = hash("example.test", "v2", "Widget");
    w.wait_safe("configmaps", &cm2, WAIT).await;
    w.wait_safe("widgets.example.test", &w2, WAIT).await;
    // The apiserver restarted unseen: Unknown, then the hash it shows now.
    let history = w.history("", "configmaps").await;
    assert_eq!(
        hashes(&history),
        [cm1.as_str(), "Unknown", cm2.as_str()],
        "{history:#?}"
    );
    assert_eq!(history[1].source, Source::Unvouched);
    assert!(
        history[1].reason.contains("while the trigger was away"),
        "{history:#?}"
    );
    // A CRD says itself what may be stored: no Unknown needed.
    let history = w.history("example.test", "widgets").await;
    assert_eq!(hashes(&history), [w1.as_str(), w2.as_str()]);
    for (resource, version) in [
        ("configmaps", "v2"),
        ("widgets.example.test", "example.test/v2"),
    ] {
        w.assert_all_stored_in(resource, version);
    }
    w.assert_never_unsafe();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_the_history_intact_resumes_and_records_nothing_new() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "a", 600, 64)
        .unwrap();
    // Slow enough to be stopped mid-migration.
    let mut w = World::start(double, &["--qps=100", "--burst=10"]).await;
    let v1 = hash("", "v1", "ConfigMap");
    let v2 = hash("", "v2", "ConfigMap");
    w.wait_safe("configmaps", &v1, WAIT).await;
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    w.h.wait_for("configmaps-2", WAIT, |m| migrated(m) >= 150)
        .await;

    // Killed mid-migration; its memory is gone, the history and checkpoint are in etcd.
    w.h.server.kill();
    let history_before = w.history("", "configmaps").await;
    w.h.server.restart();
    let done = w.h.wait_succeeded("configmaps-2", WAIT).await;
    assert!(migrated(&done) >= 600, "{done:#}");
    let state = w.wait_safe("configmaps", &v2, WAIT).await;
    assert_eq!(persisted(&state), [v2.as_str()]);
    // Nothing new was recorded: same instances, a short absence.
    assert_eq!(w.history("", "configmaps").await, history_before);
    assert_eq!(hashes(&history_before), [v1.as_str(), v2.as_str()]);
    let names: Vec<String> = w
        .migrations_of("", "configmaps")
        .await
        .into_keys()
        .collect();
    assert_eq!(names, ["configmaps-2"]);
    let log = w.h.server.log();
    assert!(log.contains("trigger started"), "{}", tail(&log, 40));
    assert!(!log.contains("recording Unknown"), "{}", tail(&log, 40));
    w.assert_never_unsafe();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_fail_over_mid_migration_without_duplicates() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "a", 600, 64)
        .unwrap();
    let flags = [
        "--qps=100",
        "--burst=10",
        "--leader-elect-lease-duration=3s",
        "--leader-elect-renew-deadline=2s",
        "--leader-elect-retry-period=250ms",
    ];
    let mut w = World::start(double, &flags).await;
    let endpoint = w.etcd.endpoint();
    let prefix = w.prefix.clone();
    let mut all = crate::world::FAST.to_vec();
    all.retain(|f| !f.starts_with("--qps"));
    all.extend_from_slice(&flags);
    let mut standby = replica(&w.h, Backend::EtcdShared(&endpoint, &prefix), &all);
    let v1 = hash("", "v1", "ConfigMap");
    let v2 = hash("", "v2", "ConfigMap");
    w.wait_safe("configmaps", &v1, WAIT).await;
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    w.h.wait_for("configmaps-2", WAIT, |m| migrated(m) >= 150)
        .await;

    // Kill whichever replica leads (the one whose trigger counts looks).
    let looks = |text: &str| sample(text, "svm_trigger_looks_total");
    let standby_metrics = standby.scrape(&standby.http_client()).await;
    let first_leads = looks(&w.h.metrics().await) > 0.0;
    assert!(
        first_leads != (looks(&standby_metrics) > 0.0),
        "exactly one trigger runs"
    );
    if first_leads {
        w.h.server.kill();
    } else {
        standby.kill();
    }
    // The survivor's view (the World reads through the first server: restart it as a
    // follower if it was the one killed, so reads keep working).
    if first_leads {
        w.h.server.restart();
    }
    w.wait_safe("configmaps", &v2, WAIT).await;
    let history = w.history("", "configmaps").await;
    assert_eq!(hashes(&history), [v1.as_str(), v2.as_str()], "{history:#?}");
    let names: Vec<String> = w
        .migrations_of("", "configmaps")
        .await
        .into_keys()
        .collect();
    assert_eq!(names, ["configmaps-2"]);
    w.assert_all_stored_in("configmaps", "v2");
    w.assert_never_unsafe();
    drop(standby);
}

/// A history without the record of what was last vouched for (the last term never had every
/// apiserver instance accounted for): the absence cannot be vouched for either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_without_an_observer_record_is_unvouched() {
    let double = double_with_widgets().await;
    let mut w = World::start(double, &["--heartbeat-interval=1s"]).await;
    let v1 = hash("", "v1", "ConfigMap");
    w.wait_safe("configmaps", &v1, WAIT).await;
    w.h.server.kill();
    w.delete_observer_record().await;
    w.h.server.restart();
    let history = w
        .wait_history("", "configmaps", "Unknown", |h| h.len() == 2)
        .await;
    assert_eq!(hashes(&history), [v1.as_str(), "Unknown"]);
    assert!(history[1].reason.contains("no record"), "{history:#?}");
    w.wait_safe("configmaps", &v1, WAIT).await;
    // CRD-backed resources vouch for themselves (storedVersions).
    assert_eq!(w.history("example.test", "widgets").await.len(), 1);
    w.assert_never_unsafe();
}
