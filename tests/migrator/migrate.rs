//! Migrations that succeed: mixed encodings across a core, an apps and a custom resource;
//! encryption-key rotation; and what a user sees (Table columns, events, metrics).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use kube_double::KubeDouble;

use crate::harness::{
    Harness, condition, double_with_widgets, double_with_widgets_from, migrated, sample,
};
use crate::support::kubectl::Kubectl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_resources_with_mixed_encodings_end_in_the_new_storage_version() {
    let double = double_with_widgets().await;
    // 20 000 objects in all; in each resource some written before the storage version moved
    // (old encoding) and some after (already current).
    let plan = [
        ("configmaps", "", "v2", 4_000usize, 2_000usize),
        ("deployments.apps", "apps", "apps/v2", 3_000, 3_000),
        (
            "widgets.example.test",
            "example.test",
            "example.test/v2",
            6_000,
            2_000,
        ),
    ];
    for (resource, _, _, old, _) in plan {
        double
            .preload(resource, Some("demo"), "old", old, 64)
            .unwrap();
    }
    double.set_storage_version("configmaps", "v2").unwrap();
    double
        .set_storage_version("deployments.apps", "v2")
        .unwrap();
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    for (resource, _, _, _, new) in plan {
        double
            .preload(resource, Some("demo"), "new", new, 64)
            .unwrap();
    }
    // Namespaces come with a kube-root-ca.crt ConfigMap, as in a real cluster: count what is
    // stored rather than what was planned.
    let plan = plan.map(|(resource, group, current, _, new)| {
        let before = encodings_of(&double, resource);
        assert_eq!(before.get(current), Some(&new), "{resource}: {before:?}");
        let old = before.values().sum::<usize>() - new;
        (resource, group, current, old, new)
    });
    double.reset_counters();

    let h = Harness::start(
        double,
        &[
            "--qps=0",
            "--workers=3",
            "--object-concurrency=16",
            "--chunk-size=500",
        ],
    );
    for (resource, group, _, _, _) in plan {
        let plural = resource.split('.').next().unwrap();
        h.create_migration(&format!("migrate-{plural}"), group, plural)
            .await;
    }
    for (resource, _, current, old, new) in plan {
        let plural = resource.split('.').next().unwrap();
        let m = h
            .wait_succeeded(&format!("migrate-{plural}"), Duration::from_secs(240))
            .await;
        assert_eq!(migrated(&m), (old + new) as i64, "{m:#}");
        assert_eq!(m["status"]["progress"]["remainingObjects"], 0);
        assert_eq!(condition(&m, "Running"), Some("False"));
        assert!(
            !m["status"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .is_empty(),
            "status.resourceVersion records the list snapshot: {m:#}"
        );
        // Every object now in the current encoding ...
        let after = encodings_of(&h.double, resource);
        assert_eq!(
            after,
            BTreeMap::from([(current.to_string(), old + new)]),
            "{resource}"
        );
        // ... and only the old ones were written: the current ones cost no etcd write.
        let counters = h.double.counters();
        assert_eq!(
            counters.writes_performed_for(resource),
            old as u64,
            "{resource}"
        );
        assert_eq!(
            counters.writes_skipped_for(resource),
            new as u64,
            "{resource}"
        );
        // One watch-list stream (the double serves it, as kube-apiserver on etcd >= 3.5.13
        // does), one PATCH per object; before them, preflight's LIST of the sample and its
        // dry runs (counted apart, at most 5).
        assert_eq!(counters.requests_for("watch", resource), 1, "{resource}");
        assert_eq!(h.double.pages_of(resource).len(), 1, "{resource}");
        assert_eq!(counters.requests_for("patch", resource), (old + new) as u64);
        let dry_runs = counters.requests_for("patch-dry-run", resource);
        assert!((1..=5).contains(&dry_runs), "{dry_runs} dry runs");
        // Its checkpoint is the last key done (the namespaces sort after demo for the
        // kube-root-ca.crt ConfigMaps).
        assert!(
            m["status"]["progress"]["migratedThrough"]
                .as_str()
                .is_some_and(|key| key.contains('/')),
            "{m:#}"
        );
    }

    // Metrics under the upstream names.
    let metrics = h.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            "storage_migrator_core_migrator_migrated_objects{resource=\"widgets.example.test\"}"
        ),
        8_000.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "storage_migrator_core_migrator_migrations{resource=\"configmaps\",status=\"Succeeded\"}"
        ),
        1.0
    );
    // A PATCH per object and a stream per resource, each timed.
    assert!(
        sample(
            &metrics,
            "storage_migrator_core_migrator_request_duration_seconds_count"
        ) >= 20_003.0
    );

    // Events on the migration, in the cluster (events.k8s.io/v1, namespace default).
    let events = h
        .double
        .counters()
        .requests_for("create", "events.events.k8s.io");
    assert_eq!(events, 6, "Started and Succeeded for each of 3 migrations");
}

/// Stored objects of `resource` by encoding (ignoring keys).
fn encodings_of(double: &kube_double::KubeDouble, resource: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for ((encoding, _key), n) in double.stored_summary(resource) {
        *out.entry(encoding).or_default() += n;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_leaves_every_secret_under_the_new_key() {
    // A cluster on etcd 3.4: the watch-list gets the 500 ERROR event (recording 10a) and the
    // migration pages instead.
    let double = double_with_widgets_from(KubeDouble::builder().watch_list(false)).await;
    double.set_encryption_key("secrets", Some("k1")).unwrap();
    double
        .preload("secrets", Some("demo"), "s", 1_200, 256)
        .unwrap();
    double.set_encryption_key("secrets", Some("k2")).unwrap();
    double
        .preload("secrets", Some("demo"), "t", 300, 256)
        .unwrap();
    assert_eq!(
        double.stored_summary("secrets"),
        BTreeMap::from([
            (("v1".to_string(), Some("k1".to_string())), 1_200),
            (("v1".to_string(), Some("k2".to_string())), 300)
        ])
    );
    double.reset_counters();
    let h = Harness::start(double, &["--qps=0", "--chunk-size=250"]);
    h.create_migration("rotate-secrets", "", "secrets").await;
    let m = h
        .wait_succeeded("rotate-secrets", Duration::from_secs(120))
        .await;
    assert_eq!(migrated(&m), 1_500);
    assert_eq!(
        h.double.stored_summary("secrets"),
        BTreeMap::from([(("v1".to_string(), Some("k2".to_string())), 1_500)])
    );
    assert_eq!(h.double.counters().writes_performed_for("secrets"), 1_200);
    assert_eq!(h.double.counters().requests_for("watch", "secrets"), 1);
    // Six pages, and preflight's LIST of the sample.
    assert_eq!(h.double.pages_of("secrets").len(), 7);
    assert!(
        h.double
            .list_log_of("secrets")
            .iter()
            .all(|l| l.metadata_only)
    );

    // What `kubectl get` shows: the Table columns with the counts.
    let kubectl = Kubectl::new(&h.server.kubeconfig);
    let out = kubectl.ok(&["get", "storageversionmigrations"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "RESOURCE", "STATUS", "MIGRATED", "REMAINING", "AGE"]
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..5],
        ["rotate-secrets", "secrets", "Succeeded", "1500", "0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_the_cluster_does_not_serve_fails_with_a_reason() {
    let double = double_with_widgets().await;
    let h = Harness::start(double, &[]);
    h.create_migration("nothing", "example.test", "gadgets")
        .await;
    h.create_migration("no-group", "nowhere.test", "things")
        .await;
    for name in ["nothing", "no-group"] {
        let m = h
            .wait_for(name, Duration::from_secs(30), |m| {
                condition(m, "Failed") == Some("True")
            })
            .await;
        let failed = m["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Failed")
            .unwrap();
        assert_eq!(failed["reason"], "ResourceNotMigratable");
        let message = failed["message"].as_str().unwrap();
        assert!(message.contains("does not serve"), "{message}");
        assert_eq!(condition(&m, "Succeeded"), None);
    }
    // A resource that cannot be patched (tokenreviews: create only) is refused too.
    h.create_migration("reviews", "authentication.k8s.io", "tokenreviews")
        .await;
    let m = h
        .wait_for("reviews", Duration::from_secs(30), |m| {
            condition(m, "Failed") == Some("True")
        })
        .await;
    assert!(m.to_string().contains("does not support list"), "{m:#}");
    let _: &Value = &m;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_is_streamed_as_metadata_unless_larger_than_the_stream_limit() {
    const OBJECTS: usize = 1_200;
    const PAYLOAD: usize = 10 * 1024;
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "big", OBJECTS, PAYLOAD)
        .unwrap();
    double
        .preload("secrets", Some("demo"), "big", OBJECTS, PAYLOAD)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    double.set_encryption_key("secrets", Some("k2")).unwrap();
    let configmaps: usize = double.stored_summary("configmaps").values().sum();
    double.reset_counters();
    let h = Harness::start(
        double,
        &[
            "--qps=0",
            "--workers=1",
            "--chunk-size=250",
            "--watch-list-max-objects=1250",
        ],
    );

    // Under the limit: one stream, and neither it nor the PATCH answers carry the 10 KiB
    // bodies (metadata only: a few hundred bytes an object, both ways).
    h.create_migration("streamed", "", "configmaps").await;
    let m = h.wait_succeeded("streamed", Duration::from_secs(120)).await;
    assert_eq!(migrated(&m), configmaps as i64);
    let counters = h.double.counters();
    assert_eq!(counters.requests_for("watch", "configmaps"), 1);
    // Only preflight's LIST of the sample.
    assert_eq!(h.double.pages_of("configmaps").len(), 1);
    let per_object = counters.bytes_out / configmaps as u64;
    assert!(per_object < 2_048, "{per_object} bytes out per object");

    // Over it: paged instead, after the stream is abandoned at the limit.
    h.double
        .preload("secrets", Some("demo"), "more", 100, 64)
        .unwrap();
    let secrets: usize = h.double.stored_summary("secrets").values().sum();
    assert!(secrets > 1_250);
    h.create_migration("paged", "", "secrets").await;
    let m = h.wait_succeeded("paged", Duration::from_secs(120)).await;
    assert_eq!(migrated(&m), secrets as i64);
    let counters = h.double.counters();
    assert_eq!(counters.requests_for("watch", "secrets"), 1);
    assert_eq!(
        h.double.pages_of("secrets").len(),
        secrets.div_ceil(250) + 1,
        "the pages and preflight's LIST"
    );
    assert_eq!(
        h.double.stored_summary("secrets"),
        BTreeMap::from([(("v1".to_string(), Some("k2".to_string())), secrets)])
    );
    assert!(h.server.log().contains("more than 1250 objects"));
}

/// A user deletes objects while their migration runs, after the list that named them: they
/// stay deleted. kube-apiserver (and the double, as it) creates an applied object that does
/// not exist, its resourceVersion notwithstanding (recording 09e, step B5); the no-op write
/// carries the listed uid, so each is a 409 "uid mismatch" and the object is passed as gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_deleted_during_their_migration_stay_deleted() {
    const OBJECTS: usize = 1_000;
    const DELETED: std::ops::Range<usize> = 900..1_000;
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", OBJECTS, 64)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    let h = Harness::start(double, &["--qps=200", "--burst=10", "--chunk-size=100"]);
    h.create_migration("deletes", "", "configmaps").await;
    h.wait_for("deletes", Duration::from_secs(60), |m| migrated(m) >= 100)
        .await;
    let stored = |h: &Harness| -> usize { h.double.stored_summary("configmaps").values().sum() };
    let stored_before = stored(&h);
    // The last objects in key order: listed (the stream's or the pages' snapshot), not yet
    // written at 200 a second.
    for i in DELETED {
        h.double
            .delete("configmaps", Some("demo"), &format!("cm-{i:05}"))
            .unwrap();
    }
    let done = h
        .wait_for("deletes", Duration::from_secs(60), |m| {
            condition(m, "Succeeded") == Some("True")
        })
        .await;
    assert_eq!(condition(&done, "Failed"), None, "{:#}", done["status"]);
    let written = h.double.counters().requests_for("patch", "configmaps");
    assert!(
        written >= OBJECTS as u64,
        "the deleted objects were written to as well ({written} writes): the test raced nothing"
    );
    for i in DELETED {
        let name = format!("cm-{i:05}");
        let found = h.double.get("configmaps", Some("demo"), &name);
        assert_eq!(
            found.as_ref().map_err(|e| e.code),
            Err(404),
            "{name} was brought back: {found:?}"
        );
    }
    assert_eq!(stored(&h), stored_before - DELETED.len());
}
