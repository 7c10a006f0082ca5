//! Three widgets among 1 000 that a validating admission webhook refuses, on the real
//! kube-apiserver. The webhook is `support::webhook::AdmissionWebhook`, an HTTPS server on
//! 127.0.0.1 that plays the admission webhook (kube-apiserver calls it through a
//! ValidatingWebhookConfiguration with its caBundle; its objectSelector sends it only the three
//! widgets labelled `svm-test/refuse=yes`, and it denies each with a 403).
//!
//! A CRD storage move v1 → v2 makes the trigger migrate the widgets. Under the default policy
//! (`Fail`) the migration ends Failed naming the three; under `Skip` (the StorageState's
//! `storage.svm-apiserver.io/on-object-failure` annotation, copied onto the trigger's
//! migration; here set under its old spelling, `storagemigration.k8s.io/on-object-failure`,
//! which is still read and earns kubectl a warning) it ends Succeeded with `ObjectsSkipped`
//! naming them, and the StorageState stays
//! unsafe — the three are still v1 in etcd. Read with kubectl at v1beta1 and v1, mid-run and at
//! the end, the condition messages carry the counts of `status.progress`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::crashes::{move_storage_to, stored_versions};
use crate::support::real_cluster::RealCluster;
use crate::support::webhook::{AdmissionWebhook, validating_configuration};
use crate::world::{
    describe_state, failed, install_widgets, is_safe, migrations_of, storage_state,
    stored_json_objects, succeeded, true_conditions, wait_for, wait_for_migrations,
};

const WIDGETS: usize = 1_000;
const STATE: &str = "widgets.example.test";
const WIDGETS_PREFIX: &str = "/registry/example.test/widgets/demo/";
const REFUSED: [&str; 3] = ["w-00250", "w-00500", "w-00750"];
const WEBHOOK: &str = "refuse-three";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_widgets_a_webhook_refuses_are_named_and_the_policy_holds() {
    let Some(cluster) = RealCluster::start(
        "three_widgets_a_webhook_refuses_are_named_and_the_policy_holds",
        &[],
        // Slow enough to be read mid-run: a checkpoint every 100 objects, 100 PATCHes a second.
        &["--qps=100", "--burst=10", "--chunk-size=100"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    install_widgets(&cluster.plane, &["v1", "v2", "v3"], WIDGETS).await;
    wait_for_migrations(
        &cluster,
        Duration::from_secs(300),
        "the widgets StorageState safe on v1",
        || storage_state(&cluster, STATE).filter(is_safe),
        || describe_state(&cluster, STATE),
    );
    let webhook = refuse_three(&cluster).await;

    // The default policy, Fail.
    let started = Instant::now();
    // The migration of the first start (safe on v1) is not the one to watch.
    let before = uids(&cluster);
    move_storage_to(&cluster, 1);
    let first = watch_to_the_end(&cluster, &before).await;
    let took_fail = started.elapsed();
    assert!(failed(&first), "{first:#}");
    assert_eq!(condition(&first, "Failed")["reason"], "ObjectsRejected");
    let message = condition(&first, "Failed")["message"]
        .as_str()
        .unwrap_or("");
    assert!(
        message.starts_with("migrated 997 of 1000 objects (0 remaining, 3 failed): the cluster refused 3 objects: demo/w-00250 (403: admission webhook \"refuse-three.webhook.test\" denied the request: widgets labelled svm-test/refuse are frozen)"),
        "{message}"
    );
    assert_named(&first);
    let first_name = first["metadata"]["name"].as_str().unwrap_or_default();
    for version in ["v1alpha1", "v1beta1", "v1"] {
        let seen = read_at(&cluster, version, first_name);
        assert_eq!(condition(&seen, "Failed")["message"], message, "{version}");
        assert_named(&seen);
    }
    assert!(!is_safe(&storage_state(&cluster, STATE).unwrap()));

    // Skip, set once on the StorageState under the old spelling (still read, with a warning
    // through the aggregator): the trigger's next migration carries it, under the new name.
    let annotated = kubectl.run(&[
        "annotate",
        "storagestate",
        STATE,
        "storagemigration.k8s.io/on-object-failure=Skip",
    ]);
    assert!(annotated.ok, "{}", annotated.stderr);
    assert!(
        annotated.stderr.contains(
            "Warning: metadata.annotations[storagemigration.k8s.io/on-object-failure]: deprecated"
        ) && annotated
            .stderr
            .contains("use \"storage.svm-apiserver.io/on-object-failure\" instead"),
        "{}",
        annotated.stderr
    );
    let name = first["metadata"]["name"].as_str().unwrap().to_string();
    // Taken before the delete: the trigger creates the next one at once.
    let before = uids(&cluster);
    kubectl.ok(&["delete", "svm", &name]);
    let restarted = Instant::now();
    let second = watch_to_the_end(&cluster, &before).await;
    let took_skip = restarted.elapsed();
    assert!(succeeded(&second), "{second:#}");
    assert_eq!(
        second["metadata"]["annotations"]["storage.svm-apiserver.io/on-object-failure"],
        "Skip"
    );
    let done = condition(&second, "Succeeded");
    assert_eq!(done["reason"], "MigrationSucceededWithSkips");
    assert_eq!(
        done["message"],
        "migrated 997 of 1000 objects (0 remaining, 3 failed)"
    );
    assert!(true_conditions(&second).contains(&"ObjectsSkipped".to_string()));
    let skipped = condition(&second, "ObjectsSkipped")["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    for part in [
        "3 objects of widgets.example.test were not migrated (storage.svm-apiserver.io/on-object-failure: Skip)",
        "demo/w-00250 (403: admission webhook \"refuse-three.webhook.test\" denied",
        "demo/w-00500",
        "demo/w-00750",
    ] {
        assert!(skipped.contains(part), "{part:?} not in {skipped:?}");
    }
    assert_named(&second);
    // At the end, every served version says the same.
    for version in ["v1alpha1", "v1beta1", "v1"] {
        let seen = read_at(&cluster, version, &name);
        assert_eq!(
            condition(&seen, "Succeeded")["message"],
            "migrated 997 of 1000 objects (0 remaining, 3 failed)",
            "{version}"
        );
        assert_eq!(
            condition(&seen, "ObjectsSkipped")["message"].as_str(),
            Some(skipped.as_str()),
            "{version}"
        );
        assert_named(&seen);
    }
    // kubectl wait, get -o wide and describe show it.
    kubectl.ok(&[
        "wait",
        &format!("svm/{name}"),
        "--for=condition=ObjectsSkipped",
        "--timeout=10s",
    ]);
    let wide = kubectl.ok(&["get", "svm", &name, "-o", "wide"]);
    assert!(
        wide.contains("migrated 997 of 1000 objects (0 remaining, 3 failed)"),
        "{wide}"
    );
    let described = kubectl.ok(&["describe", "svm", &name]);
    assert!(
        described.contains("ObjectsSkipped") && described.contains("demo/w-00750"),
        "{described}"
    );
    // A Warning Event names them.
    let events = kubectl.ok(&["get", "events.events.k8s.io", "-n", "default", "-o", "json"]);
    let events: Value = serde_json::from_str(&events).unwrap();
    assert!(
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["reason"] == "ObjectsSkipped"
                && e["type"] == "Warning"
                && e["note"].as_str().unwrap_or("").contains("demo/w-00500")),
        "{events:#}"
    );

    // Not safe: the three are still stored as v1, the CRD still lists v1.
    let state = storage_state(&cluster, STATE).unwrap();
    assert!(!is_safe(&state), "{state:#}");
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v1").await,
        3
    );
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v2").await,
        WIDGETS - 3
    );
    assert_eq!(stored_versions(&cluster), json!(["v1", "v2"]));
    let (dry, real, denied) = webhook.seen.counts();
    eprintln!(
        "3 of {WIDGETS} widgets refused by a validating webhook: Fail -> Failed naming 3 in \
         {:.1} s; Skip -> Succeeded with 3 skipped in {:.1} s, StorageState unsafe \
         (persisted {}), 3 widgets still v1 in etcd; the webhook saw {real} writes and \
         {dry} dry runs, denied {denied}",
        took_fail.as_secs_f64(),
        took_skip.as_secs_f64(),
        state["status"]["persistedStorageVersionHashes"]
    );
}

/// Labels the three, and registers the webhook for them; returns once kube-apiserver sends
/// them to it (a write of one is denied).
async fn refuse_three(cluster: &RealCluster) -> AdmissionWebhook {
    let kubectl = cluster.kubectl();
    let mut label = vec!["label", "widgets", "-n", "demo"];
    label.extend(REFUSED);
    label.push("svm-test/refuse=yes");
    kubectl.ok(&label);
    let webhook = AdmissionWebhook::start(Arc::new(|_request: &Value| {
        Some((
            403,
            "widgets labelled svm-test/refuse are frozen".to_string(),
        ))
    }))
    .await;
    let mut configuration = validating_configuration(WEBHOOK, &webhook, "example.test", "widgets");
    configuration["webhooks"][0]["objectSelector"] =
        json!({"matchLabels": {"svm-test/refuse": "yes"}});
    kubectl.ok_stdin(&["apply", "-f", "-"], &configuration.to_string());
    let mut probe = 0;
    wait_for(
        Duration::from_secs(60),
        "kube-apiserver sending the labelled widgets to the webhook",
        || {
            probe += 1;
            let out = kubectl.run(&[
                "annotate",
                "widget",
                "-n",
                "demo",
                REFUSED[0],
                &format!("svm-test/probe={probe}"),
                "--overwrite",
            ]);
            (!out.ok && out.stderr.contains("denied the request")).then_some(())
        },
        || "the webhook never denied a write".to_string(),
    );
    webhook
}

/// The uids of the widgets' migrations now.
fn uids(cluster: &RealCluster) -> Vec<Value> {
    migrations_of(cluster, STATE)
        .iter()
        .map(|m| m["metadata"]["uid"].clone())
        .collect()
}

/// Waits for the trigger's next migration of the widgets (one whose uid is not in `before`)
/// to end, checking on the way — as kubectl reads it at v1beta1 and v1 — that
/// its Running message is the counts of its progress, at least once mid-run.
async fn watch_to_the_end(cluster: &RealCluster, before: &[Value]) -> Value {
    let kubectl = cluster.kubectl();
    let current = || {
        migrations_of(cluster, STATE)
            .into_iter()
            .find(|m| !before.contains(&m["metadata"]["uid"]))
    };
    let mut mid_run = Vec::new();
    let finished = wait_for_migrations(
        cluster,
        Duration::from_secs(300),
        "the widgets' migration ended",
        || {
            let migration = current()?;
            if succeeded(&migration) || failed(&migration) {
                return Some(migration);
            }
            let name = migration["metadata"]["name"].as_str()?.to_string();
            for version in ["v1beta1", "v1"] {
                let read = kubectl.run(&[
                    "get",
                    &format!("storageversionmigrations.{version}.storagemigration.k8s.io"),
                    &name,
                    "-o",
                    "json",
                ]);
                let Ok(seen) = serde_json::from_str::<Value>(&read.stdout) else {
                    continue;
                };
                let running = condition(&seen, "Running");
                let progress = &seen["status"]["progress"];
                if running["status"] == "True" && progress["migratedObjects"].as_i64() > Some(0) {
                    assert_eq!(
                        running["message"],
                        expected_message(progress),
                        "{version}: {seen:#}"
                    );
                    assert_eq!(
                        seen["apiVersion"],
                        format!("storagemigration.k8s.io/{version}")
                    );
                    mid_run.push((version, running["message"].clone()));
                }
            }
            None
        },
        || describe_state(cluster, STATE),
    );
    for version in ["v1beta1", "v1"] {
        assert!(
            mid_run.iter().any(|(v, _)| *v == version),
            "never read mid-run at {version}: {mid_run:?}\n{finished:#}"
        );
    }
    eprintln!(
        "mid-run Running messages read: {} (first {:?}, last {:?})",
        mid_run.len(),
        mid_run.first().map(|(_, m)| m),
        mid_run.last().map(|(_, m)| m)
    );
    finished
}

/// The migration `name` as kubectl reads it at `version`.
fn read_at(cluster: &RealCluster, version: &str, name: &str) -> Value {
    let out = cluster.kubectl().ok(&[
        "get",
        &format!("storageversionmigrations.{version}.storagemigration.k8s.io"),
        name,
        "-o",
        "json",
    ]);
    let seen: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        seen["apiVersion"],
        format!("storagemigration.k8s.io/{version}")
    );
    seen
}

/// The Running message `status.progress` makes (the migrator's `progress_message`).
fn expected_message(progress: &Value) -> String {
    let migrated = progress["migratedObjects"].as_i64().unwrap_or(0);
    let failed = progress["failedObjects"].as_i64().unwrap_or(0);
    match progress["remainingObjects"].as_i64() {
        Some(remaining) => format!(
            "migrated {migrated} of {} objects ({remaining} remaining, {failed} failed)",
            migrated + remaining + failed
        ),
        None => format!(
            "migrated {migrated} objects so far ({failed} failed; remaining not known until the listing ends)"
        ),
    }
}

fn condition<'a>(migration: &'a Value, type_: &str) -> &'a Value {
    migration["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .unwrap_or(&Value::Null)
}

/// status.progress counts the three and names them, with the webhook's answer, in v1beta1
/// and v1 alike.
fn assert_named(migration: &Value) {
    let progress = &migration["status"]["progress"];
    assert_eq!(progress["failedObjects"], 3, "{migration:#}");
    assert_eq!(progress["migratedObjects"], 997, "{migration:#}");
    let mut names: Vec<&str> = progress["failures"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["name"].as_str().unwrap_or(""))
        .collect();
    names.sort_unstable();
    assert_eq!(names, REFUSED, "{migration:#}");
    for failure in progress["failures"].as_array().into_iter().flatten() {
        assert_eq!(failure["namespace"], "demo");
        assert_eq!(failure["code"], 403);
        // The webhook's answer sets no reason, so kube-apiserver's Status has none.
        assert_eq!(failure["reason"], Value::Null);
        assert!(
            failure["message"]
                .as_str()
                .unwrap_or("")
                .contains("admission webhook \"refuse-three.webhook.test\" denied the request"),
            "{failure}"
        );
    }
}
