//! Encryption at rest: kube-apiserver's key for Secrets rotates from K1 (aescbc) to K2
//! (secretbox) with a restart; a migration of `secrets` leaves every Secret under K2 in etcd.
//! And key rotation as a trigger: the same rotation reloaded by kube-apiserver without a
//! restart (`--encryption-provider-config-automatic-reload`) is seen on its `/metrics` by the
//! trigger, which migrates `secrets` with no migration created by hand; without the grant to
//! read `/metrics`, it says so and starts nothing.

use std::time::{Duration, Instant};

use base64::Engine as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::support::real_cluster::RealCluster;
use crate::support::server::metric_sum;
use crate::support::wait;
use crate::world::{
    create_many, failed, is_safe, items, name, storage_state, succeeded, wait_for,
    wait_for_migrations,
};

const SECRETS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_encryption_key_is_applied_to_every_secret() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("encryption.yaml");
    std::fs::write(&config, encryption_config(&[Key::K1])).expect("encryption config");
    let flag = format!("--encryption-provider-config={}", config.display());
    let Some(mut cluster) = RealCluster::start(
        "a_rotated_encryption_key_is_applied_to_every_secret",
        &[&flag],
        // Manual migrations only: a key rotation changes no storage version hash, so no
        // trigger could see it; the user creates the migration.
        &["--qps=0", "--controllers=migrator"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    create_secrets(&cluster).await;

    // K2 first: new writes use it; K1 stays to read what is still under it.
    std::fs::write(&config, encryption_config(&[Key::K2, Key::K1])).expect("rotate");
    cluster.plane.restart_apiserver(&[&flag]);
    cluster.wait_available();
    assert_eq!(
        secrets_under(&cluster, Key::K1).await,
        SECRETS,
        "a restart alone rewrites nothing"
    );

    kubectl.ok_stdin(
        &["create", "-f", "-"],
        r#"{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration",
            "metadata":{"name":"secrets-rotate"},"spec":{"resource":{"group":"","resource":"secrets"}}}"#,
    );
    kubectl.ok(&[
        "wait",
        "svm/secrets-rotate",
        "--for=condition=Succeeded",
        "--timeout=300s",
    ]);
    let migration: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "svm", "secrets-rotate", "-o", "json"]))
            .expect("JSON");
    assert!(succeeded(&migration) && !failed(&migration), "{migration}");

    let all = cluster.plane.etcd_get_prefix("/registry/secrets/").await;
    let under_k1 = secrets_under(&cluster, Key::K1).await;
    let under_k2 = secrets_under(&cluster, Key::K2).await;
    assert_eq!(under_k1, 0, "a secret is still under K1");
    assert_eq!(under_k2, all.len(), "every stored secret is under K2");
    assert!(under_k2 >= SECRETS);
    // Still readable through the API after the rotation.
    let one = kubectl.ok(&[
        "get",
        "secret",
        "-n",
        "demo",
        "s-0007",
        "-o",
        "jsonpath={.data.password}",
    ]);
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(one.trim())
        .expect("base64");
    assert_eq!(decoded, b"hunter7");
}

/// The label the trigger puts on a migration a key rotation started.
const ROTATION_LABEL: &str = "storage.svm-apiserver.io/encryption-rotation";
/// Its old spelling, which the trigger still sets until the old names are dropped (selectors
/// on it keep working).
const OLD_ROTATION_LABEL: &str = "storagemigration.k8s.io/encryption-rotation";

/// Key rotation as a trigger, twice: K1 → K2 while svm-apiserver runs, then K2 → K3 while it
/// is down (the history is what it compares with on its return). kube-apiserver reloads its
/// configuration each time with no restart; no migration is created by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_reloaded_without_a_restart_migrates_every_secret() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("encryption.yaml");
    std::fs::write(&config, encryption_config(&[Key::K1])).expect("encryption config");
    let flag = format!("--encryption-provider-config={}", config.display());
    let Some(mut cluster) = RealCluster::start(
        "a_key_rotation_reloaded_without_a_restart_migrates_every_secret",
        &[&flag, "--encryption-provider-config-automatic-reload=true"],
        // The trigger as shipped (--encryption-resources=secrets), read every 2 s so that the
        // figures below show kube-apiserver's reload delay rather than our poll.
        &["--qps=0", "--encryption-poll-interval=2s"],
    ) else {
        return;
    };
    create_secrets(&cluster).await;
    first_start_is_a_baseline(&cluster).await;

    // K2 first: new writes use it; K1 stays to read what is still under it. No restart.
    let written = Instant::now();
    std::fs::write(&config, encryption_config(&[Key::K2, Key::K1])).expect("rotate");
    let first = rotation_migrated(&cluster, Key::K2, written, &[]).await;
    let history = applied_history(&cluster, 1).await;
    let rotation = &history[1];
    assert_eq!(rotation["encryption"]["kind"], "Rotation");
    assert_ne!(
        rotation["encryption"]["generation"]["configHash"],
        rotation["encryption"]["previous"]["configHash"]
    );
    assert_eq!(rotation["source"], "ApiserverMetrics");
    // svm_trigger_detection_lag_seconds: from kube-apiserver's own reload time to the entry.
    let metrics = cluster.metrics().await;
    let source = ["source=\"ApiserverMetrics\""];
    let lags = metric_sum(&metrics, "svm_trigger_detection_lag_seconds_count", &source);
    let lag = metric_sum(&metrics, "svm_trigger_detection_lag_seconds_sum", &source);
    assert!(lags >= 1.0, "no detection lag observed for the rotation");
    eprintln!(
        "key rotation reloaded without a restart (aescbc K1 -> secretbox K2, {SECRETS} secrets): \
         {first}; detection lag (kube-apiserver's reload -> history entry) {:.1} s; history \
         entry: {}",
        lag / lags,
        serde_json::to_string(rotation).unwrap_or_default()
    );

    // K3 while svm-apiserver is down: kube-apiserver applies it before svm-apiserver returns.
    cluster.svm.kill();
    let written = Instant::now();
    let k3 = encryption_config(&[Key::K3, Key::K2, Key::K1]);
    std::fs::write(&config, &k3).expect("rotate while down");
    wait_for(
        Duration::from_secs(180),
        "kube-apiserver applying K3",
        || {
            applied_config(&cluster)
                .contains(&config_hash(&k3))
                .then_some(())
        },
        || applied_config(&cluster),
    );
    cluster.restart_svm();
    let second = rotation_migrated(
        &cluster,
        Key::K3,
        written,
        std::slice::from_ref(&first.migration),
    )
    .await;
    let history = applied_history(&cluster, 2).await;
    assert!(
        history[3]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("encryption key rotation")),
        "{history:#?}"
    );
    eprintln!("key rotation while svm-apiserver was down (K2 -> aesgcm K3): {second}");
}

/// Where `get /metrics` is not granted — the rule taken out of deploy/base's ClusterRole, on
/// the real RBAC authorizer — the trigger says so once (a Warning Event, a log line,
/// `svm_trigger_encryption_observed 0`) and a rotation kube-apiserver applies starts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_metrics_grant_a_rotation_is_told_once_and_starts_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("encryption.yaml");
    std::fs::write(&config, encryption_config(&[Key::K1])).expect("encryption config");
    let flag = format!("--encryption-provider-config={}", config.display());
    let Some(cluster) = RealCluster::start(
        "without_the_metrics_grant_a_rotation_is_told_once_and_starts_nothing",
        &[&flag, "--encryption-provider-config-automatic-reload=true"],
        &["--qps=0", "--encryption-poll-interval=1s"],
    ) else {
        return;
    };
    let kubectl = cluster.plane.kubectl();
    let role: Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "clusterrole",
        "svm-apiserver:trigger",
        "-o",
        "json",
    ]))
    .expect("JSON");
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["nonResourceURLs"].is_null())
        .cloned()
        .collect();
    kubectl.ok(&[
        "patch",
        "clusterrole",
        "svm-apiserver:trigger",
        "--type=merge",
        "-p",
        &json!({"rules": rules}).to_string(),
    ]);

    let forbidden = wait_metric(&cluster, "result=\"forbidden\"", 1.0).await;
    let events = wait_for_migrations(
        &cluster,
        Duration::from_secs(60),
        "the EncryptionNotObserved event",
        || Some(not_observed_events(&cluster)).filter(|e| !e.is_empty()),
        || describe_rotation(&cluster),
    );
    let observed = metric_sum(
        &cluster.metrics().await,
        "svm_trigger_encryption_observed",
        &[],
    );
    assert_eq!(observed, 0.0);

    // A rotation kube-apiserver applies, then three more refused reads: nothing starts.
    let k2 = encryption_config(&[Key::K2, Key::K1]);
    std::fs::write(&config, &k2).expect("rotate");
    wait_for(
        Duration::from_secs(180),
        "kube-apiserver applying K2",
        || {
            applied_config(&cluster)
                .contains(&config_hash(&k2))
                .then_some(())
        },
        || applied_config(&cluster),
    );
    let after = wait_metric(&cluster, "result=\"forbidden\"", forbidden + 3.0).await;
    assert!(
        rotation_migrations(&cluster).is_empty(),
        "{}",
        describe_rotation(&cluster)
    );
    assert_eq!(
        not_observed_events(&cluster).len(),
        events.len(),
        "one Event per outage"
    );
    let told = cluster
        .svm
        .log()
        .matches("reading kube-apiserver's /metrics is forbidden")
        .count();
    assert_eq!(told, 1, "one log line, not one per poll");
    let note = events[0]["note"].as_str().unwrap_or_default().to_string();
    assert!(note.contains("/metrics"), "{note}");
    eprintln!(
        "without get /metrics: {after} refused reads, 1 log line, {} Event ({:?}), \
         svm_trigger_encryption_observed {observed}, no migration after kube-apiserver applied K2",
        events.len(),
        note
    );
}

/// The EncryptionNotObserved Events (events.k8s.io, where kube's recorder writes them).
fn not_observed_events(cluster: &RealCluster) -> Vec<Value> {
    let out =
        cluster
            .plane
            .kubectl()
            .ok(&["get", "events.events.k8s.io", "-n", "default", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "EncryptionNotObserved")
        .cloned()
        .collect()
}

/// Waits until svm-apiserver's `svm_trigger_encryption_scrapes_total{<label>}` reaches `at_least`.
async fn wait_metric(cluster: &RealCluster, label: &str, at_least: f64) -> f64 {
    let metric = "svm_trigger_encryption_scrapes_total";
    wait::eventually_async_every(
        Duration::from_secs(120),
        wait::POLL,
        &format!("{metric}{{{label}}} at {at_least} or more"),
        async || {
            let value = metric_sum(&cluster.metrics().await, metric, &[label]);
            if value >= at_least {
                Ok(value)
            } else {
                Err(format!("{value}"))
            }
        },
        async || cluster.svm.log(),
    )
    .await
}

/// 300 Secrets in `demo`, all under K1.
async fn create_secrets(cluster: &RealCluster) {
    cluster.kubectl().ok(&["create", "namespace", "demo"]);
    let client = cluster.plane.client().await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client,
        "demo",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret")),
    );
    create_many(&api, SECRETS, 16, |i| {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": format!("s-{i:04}")},
            "stringData": {"password": format!("hunter{i}")},
        })
    })
    .await;
    assert_eq!(secrets_under(cluster, Key::K1).await, SECRETS);
}

/// The first start: the generation seen is a baseline, not a rotation — no migration of its
/// own, nothing re-encrypted.
async fn first_start_is_a_baseline(cluster: &RealCluster) {
    wait_for_migrations(
        cluster,
        Duration::from_secs(300),
        "secrets safe after the first start, with the encryption baseline recorded",
        || {
            let safe = storage_state(cluster, "secrets").is_some_and(|s| is_safe(&s));
            (safe
                && cluster
                    .svm
                    .log()
                    .contains("encryption generation first recorded"))
            .then_some(())
        },
        || describe_rotation(cluster),
    );
    let baseline = secrets_history(cluster).await;
    let kinds: Vec<&str> = baseline
        .iter()
        .filter_map(|e| e["encryption"]["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["Baseline"], "{baseline:#?}");
    assert!(
        rotation_migrations(cluster).is_empty(),
        "the baseline started a migration"
    );
    assert_eq!(secrets_under(cluster, Key::K1).await, SECRETS);
}

/// What one rotation took, from the write of the file.
struct Rotated {
    migration: String,
    /// kube-apiserver's own reload time.
    reloaded: Option<Duration>,
    /// The rotation's migration seen created.
    noticed: Duration,
    /// Every secret under the new key.
    migrated: Duration,
}

impl std::fmt::Display for Rotated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reloaded = self.reloaded.map_or("(unread)".to_string(), |d| {
            format!("{:.1} s", d.as_secs_f64())
        });
        write!(
            f,
            "kube-apiserver applied it {reloaded} after the file was written; migration {} \
             created {:.1} s after the write (rotation noticed); every secret under the new \
             key {:.1} s after the write ({:.1} s after the migration was created)",
            self.migration,
            self.noticed.as_secs_f64(),
            self.migrated.as_secs_f64(),
            (self.migrated - self.noticed).as_secs_f64()
        )
    }
}

/// Waits for the trigger's rotation migration (not one of `earlier`) to succeed, then checks
/// that every stored secret is under `key` and says how long each step took.
async fn rotation_migrated(
    cluster: &RealCluster,
    key: Key,
    written: Instant,
    earlier: &[String],
) -> Rotated {
    let created = wait_for_migrations(
        cluster,
        Duration::from_secs(180),
        "a migration of secrets started by the rotation",
        || {
            rotation_migrations(cluster)
                .into_iter()
                .find(|m| !earlier.contains(&name(m)))
        },
        || describe_rotation(cluster),
    );
    let noticed = written.elapsed();
    let migration = name(&created);
    assert_eq!(
        created["metadata"]["labels"][OLD_ROTATION_LABEL], "true",
        "the old rotation label, still set: {created}"
    );
    let reloaded = reload_delay(cluster, written);
    let done = wait_for_migrations(
        cluster,
        Duration::from_secs(300),
        "the rotation's migration finished",
        || {
            items(cluster, "storageversionmigrations")
                .into_iter()
                .find(|m| name(m) == migration && (succeeded(m) || failed(m)))
        },
        || describe_rotation(cluster),
    );
    let migrated = written.elapsed();
    assert!(succeeded(&done) && !failed(&done), "{done}");
    assert!(
        done["metadata"]["annotations"]["storage.svm-apiserver.io/trigger-reason"]
            .as_str()
            .is_some_and(|r| r.contains("encryption key rotation")),
        "{done}"
    );
    let all = cluster.plane.etcd_get_prefix("/registry/secrets/").await;
    let under_new = secrets_under(cluster, key).await;
    assert_eq!(
        under_new,
        all.len(),
        "every stored secret is under the new key"
    );
    assert!(under_new >= SECRETS);
    assert!(is_safe(
        &storage_state(cluster, "secrets").expect("the StorageState")
    ));
    Rotated {
        migration,
        reloaded,
        noticed,
        migrated,
    }
}

/// kube-apiserver's `apiserver_encryption_config_controller_last_config_info` lines.
fn applied_config(cluster: &RealCluster) -> String {
    let metrics = cluster.plane.kubectl().ok(&["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_encryption_config_controller_last_config_info"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `sha256:<hex>` of a configuration file's bytes, as kube-apiserver labels it.
fn config_hash(config: &str) -> String {
    use sha2::Digest as _;
    format!("sha256:{:x}", sha2::Sha256::digest(config.as_bytes()))
}

/// The history of `secrets` once it records `rotations` rotations as applied (the trigger's
/// next pass after each migration's success): a baseline, then rotation and applied each time.
async fn applied_history(cluster: &RealCluster, rotations: usize) -> Vec<Value> {
    let mut want = vec!["Baseline"];
    for _ in 0..rotations {
        want.extend(["Rotation", "Applied"]);
    }
    wait::eventually_async_every(
        Duration::from_secs(60),
        wait::POLL,
        "the rotation recorded as applied",
        async || {
            let history: Vec<Value> = secrets_history(cluster)
                .await
                .into_iter()
                .filter(|e| e["encryption"].is_object())
                .collect();
            let kinds: Vec<&str> = history
                .iter()
                .filter_map(|e| e["encryption"]["kind"].as_str())
                .collect();
            if kinds == want {
                Ok(history)
            } else {
                Err(format!("history {history:#?}"))
            }
        },
        async || describe_rotation(cluster),
    )
    .await
}

/// The trigger's migrations started by a key rotation.
fn rotation_migrations(cluster: &RealCluster) -> Vec<Value> {
    items(cluster, "storageversionmigrations")
        .into_iter()
        .filter(|m| m["metadata"]["labels"][ROTATION_LABEL] == "true")
        .collect()
}

/// The hash history of `secrets`, from svm-apiserver's etcd (values are JSON).
async fn secrets_history(cluster: &RealCluster) -> Vec<Value> {
    let prefix = format!(
        "{}/hashhistory/core/secrets/",
        cluster.svm.etcd_prefix().expect("svm-apiserver on etcd")
    );
    cluster
        .plane
        .etcd_get_prefix(&prefix)
        .await
        .iter()
        .map(|(_, value)| serde_json::from_slice(value).expect("a JSON history entry"))
        .collect()
}

/// How long after `written` kube-apiserver says it reloaded its encryption configuration (its
/// own `…_automatic_reload_last_timestamp_seconds{status="success"}`).
fn reload_delay(cluster: &RealCluster, written: Instant) -> Option<Duration> {
    let metrics = cluster.plane.kubectl().ok(&["get", "--raw", "/metrics"]);
    let reloaded_at: f64 = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds",
            ) && l.contains(r#"status="success""#)
        })?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    let written_at = now - written.elapsed().as_secs_f64();
    Some(Duration::from_secs_f64((reloaded_at - written_at).max(0.0)))
}

fn describe_rotation(cluster: &RealCluster) -> String {
    let kubectl = cluster.kubectl();
    format!(
        "{}\n{}\nkube-apiserver applies: {}\nmay svm-apiserver get /metrics: {}\nsvm-apiserver log:\n{}",
        kubectl
            .run(&["get", "storagestate", "secrets", "-o", "yaml"])
            .stdout,
        kubectl.run(&["get", "svm", "-o", "yaml"]).stdout,
        applied_config(cluster),
        cluster
            .plane
            .kubectl()
            .run(&[
                "auth",
                "can-i",
                "get",
                "/metrics",
                "--as=system:serviceaccount:svm-system:svm-apiserver",
            ])
            .stdout,
        cluster.svm.log()
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Key {
    K1,
    K2,
    K3,
}

impl Key {
    /// How etcd values under this key begin.
    fn prefix(self) -> &'static [u8] {
        match self {
            Key::K1 => b"k8s:enc:aescbc:v1:key1:",
            Key::K2 => b"k8s:enc:secretbox:v1:key2:",
            Key::K3 => b"k8s:enc:aesgcm:v1:key3:",
        }
    }

    /// The provider entry (32-byte keys, base64).
    fn provider(self) -> serde_json::Value {
        match self {
            Key::K1 => json!({"aescbc": {"keys": [
                {"name": "key1", "secret": "MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE="}
            ]}}),
            Key::K2 => json!({"secretbox": {"keys": [
                {"name": "key2", "secret": "MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI="}
            ]}}),
            Key::K3 => json!({"aesgcm": {"keys": [
                {"name": "key3", "secret": "MzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzM="}
            ]}}),
        }
    }
}

/// An EncryptionConfiguration for Secrets with `keys` in order (the first encrypts writes),
/// plus `identity` last so nothing becomes unreadable. (JSON is YAML.)
fn encryption_config(keys: &[Key]) -> String {
    let mut providers: Vec<serde_json::Value> = keys.iter().map(|k| k.provider()).collect();
    providers.push(json!({"identity": {}}));
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"], "providers": providers}],
    })
    .to_string()
}

async fn secrets_under(cluster: &RealCluster, key: Key) -> usize {
    cluster
        .plane
        .etcd_get_prefix("/registry/secrets/")
        .await
        .iter()
        .filter(|(_, value)| value.starts_with(key.prefix()))
        .count()
}
