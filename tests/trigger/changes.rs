//! Scenarios of storage-version changes a running trigger must see.

use std::time::Duration;

use crate::harness::{condition, double_with_widgets};
use crate::world::{World, current, hashes, persisted};

const WAIT: Duration = Duration::from_secs(120);

fn hash(group: &str, version: &str, kind: &str) -> String {
    kube_double::resources::storage_version_hash(group, version, kind)
}

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
        assert!(w.state(name).await.is_none(), "{name} should not be tracked");
    }
    let first = w.migrations_of("", "configmaps").await;
    assert_eq!(first.keys().collect::<Vec<_>>(), ["configmaps-1"]);
    assert_eq!(condition(&first["configmaps-1"], "Succeeded"), Some("True"));

    // One change: recorded, the old migration replaced, everything rewritten, safe again.
    w.h.double.set_storage_version("configmaps", "v2").unwrap();
    let v2 = hash("", "v2", "ConfigMap");
    let state = w
        .wait_state("configmaps", WAIT, "current at v2", |s| current(s) == v2)
        .await;
    assert!(persisted(&state).contains(&v1.as_str()), "{state:#}");
    w.wait_safe("configmaps", &v2, WAIT).await;
    let history = w.history("", "configmaps").await;
    assert_eq!(hashes(&history), [v1.as_str(), v2.as_str()]);
    assert!(history[1].reason.contains("changed"), "{history:?}");
    let migrations = w.migrations_of("", "configmaps").await;
    assert_eq!(migrations.keys().collect::<Vec<_>>(), ["configmaps-2"]);
    let summary = w.h.double.stored_summary("configmaps");
    assert!(summary.keys().all(|(encoding, _)| encoding == "v2"), "{summary:?}");
    w.assert_never_unsafe();
}
