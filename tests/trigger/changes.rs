//! Scenarios of storage-version changes a running trigger must see.

use std::time::Duration;

use crate::harness::condition;
use crate::support::wait::eventually_async_every;
use crate::world::{
    TICK, WAIT, World, current, double_with_widgets, double_without_storage_version_api, hash,
    hashes, persisted,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_tracks_every_resource_and_a_single_change_is_migrated() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 300, 64)
        .unwrap();
    double
        .preload("widgets.example.test", Some("demo"), "w", 100, 64)
        .unwrap();
    let w = World::start(double, &[]).await;
    let v1 = hash("", "v1", "ConfigMap");

    // First start: every resource Unknown, then migrated and safe.
    let state = w.wait_safe("configmaps", &v1, WAIT).await;
    assert!(state["status"]["lastHeartbeatTime"].is_string());
    let history = w.history("", "configmaps").await;
    assert_eq!(hashes(&history), [v1.as_str()]);
    for name in [
        "secrets",
        "namespaces",
        "deployments.apps",
        "widgets.example.test",
        "customresourcedefinitions.apiextensions.k8s.io",
        "leases.coordination.k8s.io",
    ] {
        assert!(w.state(name).await.is_some(), "no StorageState for {name}");
    }
    // Never stored, ignored by default, or our own group: no StorageState.
    for name in [
        "tokenreviews.authentication.k8s.io",
        "subjectaccessreviews.authorization.k8s.io",
        "events.events.k8s.io",
        "storageversionmigrations.storagemigration.k8s.io",
    ] {
        assert!(
            w.state(name).await.is_none(),
            "{name} should not be tracked"
        );
    }
    let first = w.migrations_of("", "configmaps").await;
    assert_eq!(first.keys().collect::<Vec<_>>(), ["configmaps-1"]);
    assert_eq!(condition(&first["configmaps-1"], "Succeeded"), Some("True"));

    // One change: recorded, the old migration replaced, everything rewritten, safe again.
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    let v2 = hash("", "v2", "ConfigMap");
    // (That the old hash stays persisted until the migration is done is the safety
    // checker's to see: an intermediate state can be overtaken by a quick migration.)
    w.wait_safe("configmaps", &v2, WAIT).await;
    let history = w.history("", "configmaps").await;
    assert_eq!(hashes(&history), [v1.as_str(), v2.as_str()]);
    assert!(history[1].reason.contains("changed"), "{history:?}");
    let migrations = w.migrations_of("", "configmaps").await;
    assert_eq!(migrations.keys().collect::<Vec<_>>(), ["configmaps-2"]);
    w.assert_all_stored_in("configmaps", "v2");
    w.assert_never_unsafe();
}

/// Two storage-version moves of a built-in between two discovery looks (two apiserver
/// restarts in a row, no StorageVersion API): objects written under B are never taken for A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_to_b_to_a_between_two_looks_is_never_missed() {
    let double = double_without_storage_version_api().await;
    double
        .preload("configmaps", Some("demo"), "a", 100, 64)
        .unwrap();
    // An hour between polls: only the identity-lease watch can notice anything.
    let w = World::start(double, &["--discovery-interval=1h"]).await;
    let v1 = hash("", "v1", "ConfigMap");
    let v2 = hash("", "v2", "ConfigMap");
    w.wait_safe("configmaps", &v1, WAIT).await;

    // A → B (objects written in B) → A, back to back.
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    w.h.double
        .preload("configmaps", Some("demo"), "b", 50, 64)
        .unwrap();
    w.h.double.set_storage_version("configmaps", "v1").unwrap();

    // The trigger either looked while B was served (and recorded v2) or could not vouch for
    // the instance it never saw (and recorded Unknown): never "nothing happened".
    w.wait_history("", "configmaps", "aware of the B interval", |h| h.len() > 1)
        .await;
    w.wait_safe("configmaps", &v1, WAIT).await;
    let history = w.history("", "configmaps").await;
    let after_first = &hashes(&history)[1..];
    assert!(
        after_first.contains(&v2.as_str()) || after_first.contains(&"Unknown"),
        "{history:#?}"
    );
    w.wait_safe("configmaps", &v1, WAIT).await;
    w.assert_all_stored_in("configmaps", "v1");
    w.assert_never_unsafe();
}

/// The same for a custom resource: the CRD watch sees every storage version, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_flipping_a_to_b_to_a_records_each_move_and_narrows_stored_versions() {
    let double = double_with_widgets().await;
    double
        .preload("widgets.example.test", Some("demo"), "a", 100, 64)
        .unwrap();
    let w = World::start(double, &["--discovery-interval=1h"]).await;
    let v1 = hash("example.test", "v1", "Widget");
    let v2 = hash("example.test", "v2", "Widget");
    w.wait_safe("widgets.example.test", &v1, WAIT).await;

    w.h.double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    w.h.double
        .preload("widgets.example.test", Some("demo"), "b", 50, 64)
        .unwrap();
    w.h.double
        .set_storage_version("widgets.example.test", "v1")
        .unwrap();
    w.wait_history("example.test", "widgets", "v2 recorded", |h| {
        h.iter().any(|e| e.hash == v2)
    })
    .await;
    w.wait_safe("widgets.example.test", &v1, WAIT).await;
    let history = w.history("example.test", "widgets").await;
    // Each move as it came, or — when both events landed between two passes — v2 read from
    // the CRD's status.storedVersions: either way v2 is recorded and migrated away from.
    let moves = [v1.as_str(), v2.as_str(), v1.as_str()];
    let coalesced = [v1.as_str(), v2.as_str()];
    let seen = hashes(&history);
    assert!(seen == moves || seen == coalesced, "{history:#?}");
    assert!(
        history
            .iter()
            .all(|e| e.source == svm_trigger::history::Source::CustomResourceDefinition)
    );
    w.assert_all_stored_in("widgets.example.test", "example.test/v1");
    // storedVersions narrowed to the storage version once the migration succeeded.
    eventually_async_every(
        WAIT,
        TICK,
        "the widgets CRD's storedVersions narrowed to [\"v1\"]",
        async || {
            let crd =
                w.h.double
                    .get(
                        "customresourcedefinitions.apiextensions.k8s.io",
                        None,
                        "widgets.example.test",
                    )
                    .unwrap();
            if crd["status"]["storedVersions"] == serde_json::json!(["v1"]) {
                Ok(())
            } else {
                Err(format!(
                    "storedVersions: {}",
                    crd["status"]["storedVersions"]
                ))
            }
        },
        async || String::new(),
    )
    .await;
    w.assert_never_unsafe();
}

/// A downgrade is a change like any other: B → A keeps B persisted until A's migration is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_migrates_back() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "a", 200, 64)
        .unwrap();
    let w = World::start(double, &[]).await;
    let v1 = hash("", "v1", "ConfigMap");
    let v2 = hash("", "v2", "ConfigMap");
    w.wait_safe("configmaps", &v1, WAIT).await;
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    w.wait_safe("configmaps", &v2, WAIT).await;
    w.h.double
        .preload("configmaps", Some("demo"), "b", 100, 64)
        .unwrap();
    w.h.double.set_storage_version("configmaps", "v1").unwrap();
    w.wait_history("", "configmaps", "the downgrade", |h| h.len() == 3)
        .await;
    w.wait_safe("configmaps", &v1, WAIT).await;
    let history = w.history("", "configmaps").await;
    assert_eq!(hashes(&history), [v1.as_str(), v2.as_str(), v1.as_str()]);
    w.assert_all_stored_in("configmaps", "v1");
    assert_eq!(
        w.migrations_of("", "configmaps")
            .await
            .keys()
            .collect::<Vec<_>>(),
        ["configmaps-3"]
    );
    w.assert_never_unsafe();
}

/// HA rolling upgrade: while apiservers disagree, every hash is recorded with its apiserver,
/// current is Unknown and no migration runs; once they agree, one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiservers_disagreeing_then_agreeing() {
    let double = double_with_widgets().await;
    let second = double.add_apiserver("vm2").unwrap();
    let first = double.first_apiserver().to_string();
    double
        .preload("configmaps", Some("demo"), "a", 100, 64)
        .unwrap();
    let w = World::start(double, &[]).await;
    let v1 = hash("", "v1", "ConfigMap");
    let v2 = hash("", "v2", "ConfigMap");
    w.wait_safe("configmaps", &v1, WAIT).await;

    // The second apiserver is upgraded first, and serves some writes.
    w.h.double
        .set_apiserver_storage_version(&second, "configmaps", "v2")
        .unwrap();
    let state = w
        .wait_state("configmaps", WAIT, "Unknown (disagreement)", |s| {
            current(s) == "Unknown"
        })
        .await;
    let mut both = persisted(&state);
    both.sort();
    let mut expected = vec![v1.as_str(), v2.as_str()];
    expected.sort();
    assert_eq!(both, expected);
    let history = w.history("", "configmaps").await;
    let disagreement: Vec<(&str, Option<&str>)> = history[1..]
        .iter()
        .map(|e| (e.hash.as_str(), e.apiserver.as_deref()))
        .collect();
    assert!(
        disagreement.contains(&(v1.as_str(), Some(first.as_str()))),
        "{history:#?}"
    );
    assert!(
        disagreement.contains(&(v2.as_str(), Some(second.as_str()))),
        "{history:#?}"
    );
    w.h.double.serve_from(&second).unwrap();
    w.h.double
        .preload("configmaps", Some("demo"), "b", 50, 64)
        .unwrap();
    w.h.double.serve_from(&first).unwrap();
    w.h.double
        .preload("configmaps", Some("demo"), "c", 50, 64)
        .unwrap();
    // Nothing starts while they disagree (a few polls' worth).
    for _ in 0..20 {
        let running: Vec<_> = w
            .migrations_of("", "configmaps")
            .await
            .into_values()
            .filter(|m| condition(m, "Succeeded") != Some("True"))
            .collect();
        assert!(
            running.is_empty(),
            "a migration while apiservers disagree: {running:#?}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    // The first catches up: they agree on v2.
    w.h.double
        .set_apiserver_storage_version(&first, "configmaps", "v2")
        .unwrap();
    w.wait_safe("configmaps", &v2, WAIT).await;
    let last = w.history("", "configmaps").await;
    assert_eq!(last.last().map(|e| e.hash.as_str()), Some(v2.as_str()));
    assert!(last.last().unwrap().reason.contains("agree"), "{last:#?}");
    w.assert_all_stored_in("configmaps", "v2");
    w.assert_never_unsafe();
}
