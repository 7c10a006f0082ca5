//! Preflight on the real kube-apiserver: a migration whose every write the cluster would refuse
//! stops before its first write, with a Failed condition (reason `PreflightFailed`) and a
//! Warning Event that name the refusal and what to fix. Two refusals every write would meet:
//! a validating admission webhook that denies the migrator's no-op PATCH (played by
//! [`AdmissionWebhook`], an HTTPS server on 127.0.0.1 that counts dry runs apart from real
//! writes), and a CRD whose conversion webhook cannot be reached.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::real_cluster::RealCluster;
use crate::support::webhook::{AdmissionWebhook, closed_url, validating_configuration};
use crate::world::{failed, install_widgets, stored_json_objects, succeeded, wait_for};

const WIDGETS: usize = 50;
const WIDGETS_PREFIX: &str = "/registry/example.test/widgets/demo/";
const WEBHOOK: &str = "frozen-widgets";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_denies_every_write_stops_the_migration_at_preflight() {
    let Some(cluster) = RealCluster::start(
        "a_webhook_that_denies_every_write_stops_the_migration_at_preflight",
        &[],
        // Manual migrations only: nothing changes a storage version here.
        &["--qps=0", "--controllers=migrator"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    install_widgets(&cluster.plane, &["v1"], WIDGETS).await;
    // Denies every UPDATE of a widget, with a 403 as many policy webhooks answer (the cluster
    // would refuse the real writes the same way).
    let webhook = AdmissionWebhook::start(Arc::new(|_request: &Value| {
        Some((403, "widgets are frozen for the test".to_string()))
    }))
    .await;
    let configuration = validating_configuration(WEBHOOK, &webhook, "example.test", "widgets");
    kubectl.ok_stdin(&["apply", "-f", "-"], &configuration.to_string());
    wait_until_the_webhook_denies(&cluster, &webhook);
    let before = resource_versions(&cluster);
    let (dry_before, real_before, _) = webhook.seen.counts();

    let started = Instant::now();
    let migration = create_and_wait_failed(&cluster, "widgets-frozen");
    let took = started.elapsed();
    let (dry, real, denied) = webhook.seen.counts();
    let message = failed_message(&migration, "PreflightFailed");
    let webhook_name = format!("{WEBHOOK}.webhook.test");
    for part in [
        "demo/w-00000",
        "403",
        &format!("admission webhook \"{webhook_name}\""),
        "Nothing was written",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    assert_eq!(real, real_before, "a real write reached the webhook");
    assert_eq!(real, 0);
    let dry_runs = dry - dry_before;
    assert!((1..=5).contains(&dry_runs), "{dry_runs} dry runs");
    assert_eq!(resource_versions(&cluster), before, "an object was written");
    let event = warning_event(&cluster, &webhook_name);
    eprintln!(
        "preflight, admission webhook: migration Failed (PreflightFailed) {:.1} s after it was \
         created; the webhook saw {dry_runs} dry runs of the migrator's PATCH (of {dry} dry \
         runs, {denied} denials in all) and {real} real writes; {WIDGETS} widgets unchanged\n  \
         condition: {message}\n  event: {event}",
        took.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_conversion_webhook_stops_the_migration_at_preflight() {
    let Some(cluster) = RealCluster::start(
        "an_unreachable_conversion_webhook_stops_the_migration_at_preflight",
        &[],
        &["--qps=0", "--controllers=migrator"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    install_widgets(&cluster.plane, &["v1", "v2"], WIDGETS).await;
    let before = cluster.plane.etcd_get_prefix(WIDGETS_PREFIX).await;
    // v2 becomes the storage version and conversions go to a webhook nobody serves: every
    // widget is stored in v1, so reading one in v2 (and rewriting it) needs the webhook.
    let url = closed_url("/convert");
    let patch = json!([
        {"op": "replace", "path": "/spec/versions/0/storage", "value": false},
        {"op": "replace", "path": "/spec/versions/1/storage", "value": true},
        {"op": "replace", "path": "/spec/conversion", "value": {
            "strategy": "Webhook",
            "webhook": {"clientConfig": {"url": url}, "conversionReviewVersions": ["v1"]},
        }},
    ]);
    kubectl.ok(&[
        "patch",
        "crd",
        "widgets.example.test",
        "--type=json",
        "-p",
        &patch.to_string(),
    ]);

    let started = Instant::now();
    let migration = create_and_wait_failed(&cluster, "widgets-unconvertible");
    let took = started.elapsed();
    let message = failed_message(&migration, "PreflightFailed");
    for part in [
        "conversion webhook",
        "widgets.example.test",
        "spec.conversion.webhook",
        "Nothing was written",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    let in_v1 = stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v1").await;
    let in_v2 = stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v2").await;
    assert_eq!((in_v1, in_v2), (WIDGETS, 0), "a widget was rewritten");
    // Byte for byte what etcd held before: nothing written.
    let after = cluster.plane.etcd_get_prefix(WIDGETS_PREFIX).await;
    assert!(after == before, "etcd's widgets changed");
    let event = warning_event(&cluster, "conversion webhook");
    eprintln!(
        "preflight, conversion webhook unreachable ({url}): migration Failed (PreflightFailed) \
         {:.1} s after it was created (the 500s retried with backoff first); etcd holds \
         {in_v1} widgets in v1, {in_v2} in v2, all {} values byte for byte as before\n  \
         condition: {message}\n  event: {event}",
        took.as_secs_f64(),
        after.len()
    );
}

/// A webhook configuration takes effect once kube-apiserver's informer has it: wait until a
/// server-side dry run (kubectl's) is denied.
fn wait_until_the_webhook_denies(cluster: &RealCluster, webhook: &AdmissionWebhook) {
    let kubectl = cluster.kubectl();
    wait_for(
        Duration::from_secs(60),
        "the webhook denying a dry-run PATCH",
        || {
            let out = kubectl.run(&[
                "patch",
                "widget",
                "-n",
                "demo",
                "w-00001",
                "--type=merge",
                "-p",
                "{}",
                "--dry-run=server",
            ]);
            out.stderr.contains("denied the request").then_some(())
        },
        || format!("webhook saw {:?}", webhook.seen.counts()),
    );
}

fn create_and_wait_failed(cluster: &RealCluster, name: &str) -> Value {
    let kubectl = cluster.kubectl();
    let manifest = json!({
        "apiVersion": "storagemigration.k8s.io/v1",
        "kind": "StorageVersionMigration",
        "metadata": {"name": name},
        "spec": {"resource": {"group": "example.test", "resource": "widgets"}},
    });
    kubectl.ok_stdin(&["create", "-f", "-"], &manifest.to_string());
    kubectl.ok(&[
        "wait",
        &format!("svm/{name}"),
        "--for=condition=Failed",
        "--timeout=180s",
    ]);
    let migration: Value =
        serde_json::from_str(&kubectl.ok(&["get", "svm", name, "-o", "json"])).expect("JSON");
    assert!(
        failed(&migration) && !succeeded(&migration),
        "{migration:#}"
    );
    assert_eq!(
        migration["status"]["progress"]["migratedObjects"]
            .as_i64()
            .unwrap_or(0),
        0,
        "{migration:#}"
    );
    migration
}

/// The Failed condition's message, after checking its reason.
fn failed_message(migration: &Value, reason: &str) -> String {
    let condition = migration["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(condition["reason"], reason, "{migration:#}");
    condition["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The PreflightFailed Warning Event (in `default`, as for any cluster-scoped object) whose
/// note says `naming`.
fn warning_event(cluster: &RealCluster, naming: &str) -> String {
    let kubectl = cluster.kubectl();
    wait_for(
        Duration::from_secs(30),
        "the PreflightFailed Warning Event",
        || {
            let out = kubectl.ok(&[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                "reason=PreflightFailed",
                "-o",
                "json",
            ]);
            let list: Value = serde_json::from_str(&out).ok()?;
            list["items"].as_array()?.iter().find_map(|event| {
                let note = event["message"].as_str()?;
                (event["type"] == "Warning" && note.contains(naming)).then(|| note.to_string())
            })
        },
        || kubectl.run(&["get", "events", "-A"]).stdout,
    )
}

/// Each widget's resourceVersion, by name.
fn resource_versions(cluster: &RealCluster) -> Vec<(String, String)> {
    let out = cluster.kubectl().ok(&[
        "get",
        "widgets",
        "-n",
        "demo",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion}{\"\\n\"}{end}",
    ]);
    out.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, rv)| (name.to_string(), rv.to_string()))
        .collect()
}
