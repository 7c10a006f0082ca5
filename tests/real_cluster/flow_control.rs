//! API Priority and Fairness on the real kube-apiserver: with deploy/base/flowcontrol.yaml
//! applied, the migrator's reads and PATCHes are dispatched in its own priority level (read
//! from kube-apiserver's own flow-control metrics); when that level rejects (its limitResponse
//! switched to Reject on a kube-apiserver with few seats), the migrator takes the 429s as
//! backpressure — it lowers its rate (svm_migrator_apf_rejections_total,
//! svm_migrator_rate_limit_qps) and the migration still succeeds.

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::support::kubectl::Kubectl;
use crate::support::real_cluster::{RealCluster, install_flowcontrol};
use crate::world::{create_many, failed, items, name, succeeded, wait_for, wait_for_migrations};

const LEVEL: &str = "svm-apiserver-migrator";
const CONFIGMAPS: usize = 600;

/// kube-apiserver's flow-control counter `metric` for our priority level, summed.
fn level_counter(cluster: &RealCluster, metric: &str) -> f64 {
    let text = cluster.kubectl().ok(&["get", "--raw", "/metrics"]);
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| l.contains(&format!("priority_level=\"{LEVEL}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// svm-apiserver's own `/metrics` (with the admin certificate of the kubeconfig it wrote).
fn svm_metric(cluster: &RealCluster, prefix: &str) -> f64 {
    let scrape = Kubectl::new(&cluster.svm.kubeconfig).ok(&["get", "--raw", "/metrics"]);
    scrape
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// [`CONFIGMAPS`] ConfigMaps in the namespace `demo`.
async fn create_configmaps(cluster: &RealCluster) {
    cluster.kubectl().ok(&["create", "namespace", "demo"]);
    let api: Api<DynamicObject> = Api::namespaced_with(
        cluster.plane.client().await,
        "demo",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
    );
    create_many(&api, CONFIGMAPS, 8, |i| {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:04}")},
            "data": {"i": i.to_string()},
        })
    })
    .await;
}

fn migrate_configmaps(cluster: &RealCluster, migration: &str) -> Value {
    create_migration(cluster, migration);
    finished(cluster, migration)
}

fn create_migration(cluster: &RealCluster, migration: &str) {
    cluster.kubectl().ok_stdin(
        &["create", "-f", "-"],
        &json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": migration},
            "spec": {"resource": {"group": "", "resource": "configmaps"}},
        })
        .to_string(),
    );
}

/// The migration once it succeeded or failed.
fn finished(cluster: &RealCluster, migration: &str) -> Value {
    wait_for_migrations(
        cluster,
        Duration::from_secs(300),
        &format!("migration {migration} finished"),
        || {
            items(cluster, "storageversionmigrations")
                .into_iter()
                .find(|m| name(m) == migration && (succeeded(m) || failed(m)))
        },
        || {
            format!(
                "{}\nsvm-apiserver log:\n{}",
                cluster.kubectl().run(&["get", "svm", "-o", "yaml"]).stdout,
                cluster.svm.log()
            )
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_in_their_own_priority_level_and_take_its_429s_as_backpressure() {
    let Some(cluster) = RealCluster::start(
        "migrations_run_in_their_own_priority_level_and_take_its_429s_as_backpressure",
        // Few seats, so that one priority level's share is one or two of them.
        &[
            "--max-requests-inflight=20",
            "--max-mutating-requests-inflight=10",
        ],
        &[
            "--controllers=migrator",
            "--qps=100",
            "--burst=100",
            "--object-concurrency=16",
            "--chunk-size=200",
        ],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    install_flowcontrol(&cluster.plane);
    create_configmaps(&cluster).await;

    // The shipped level (queuing): every PATCH is dispatched there.
    let dispatched_before =
        level_counter(&cluster, "apiserver_flowcontrol_dispatched_requests_total");
    let started = Instant::now();
    let first = migrate_configmaps(&cluster, "configmaps-queued");
    assert!(succeeded(&first), "{first:#}");
    let dispatched = level_counter(&cluster, "apiserver_flowcontrol_dispatched_requests_total")
        - dispatched_before;
    eprintln!(
        "under the shipped FlowSchema: {CONFIGMAPS} configmaps migrated in {:.1} s, {dispatched} \
         requests dispatched in priority level {LEVEL}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        dispatched >= CONFIGMAPS as f64,
        "only {dispatched} of the migrator's requests were in {LEVEL}"
    );

    // The level rejects instead of queuing: the migrator must slow down, not fail.
    kubectl.ok(&[
        "patch",
        "prioritylevelconfiguration",
        LEVEL,
        "--type=merge",
        "-p",
        r#"{"spec":{"limited":{"nominalConcurrencyShares":1,"lendablePercent":0,"limitResponse":{"type":"Reject","queuing":null}}}}"#,
    ]);
    let started = Instant::now();
    let second = migrate_configmaps(&cluster, "configmaps-rejected");
    assert!(succeeded(&second), "{second:#}");
    let rejected = level_counter(&cluster, "apiserver_flowcontrol_rejected_requests_total");
    let apf = svm_metric(&cluster, "svm_migrator_apf_rejections_total");
    let retries = svm_metric(
        &cluster,
        "storage_migrator_core_migrator_retries_total{resource=\"configmaps\",reason=\"429\"}",
    );
    let rate = svm_metric(&cluster, "svm_migrator_rate_limit_qps");
    eprintln!(
        "level set to Reject: migrated again in {:.1} s; kube-apiserver rejected {rejected} of \
         the migrator's requests, the migrator counted {apf} APF 429s ({retries} retried), its \
         rate in force now {rate} qps",
        started.elapsed().as_secs_f64()
    );
    assert!(
        rejected > 0.0,
        "the level never rejected: the test did not load it"
    );
    assert!(apf > 0.0, "the migrator did not recognise APF's 429s");
    assert_eq!(apf, rejected, "every rejection seen as APF's");
    let all: Value = serde_json::from_str(&kubectl.ok(&["get", "configmaps", "-A", "-o", "json"]))
        .expect("JSON");
    let stored = all["items"].as_array().map_or(0, Vec::len) as i64;
    assert_eq!(
        second["status"]["progress"]["migratedObjects"].as_i64(),
        Some(stored),
        "every ConfigMap migrated despite the rejections: {second:#}"
    );
    assert!(
        cluster
            .svm
            .log()
            .contains("API Priority and Fairness rejected a request; lowering the pool's rate"),
        "the migrator did not lower its rate"
    );
}

/// `--object-concurrency auto` on the real kube-apiserver: with no priority level of its own,
/// the migrator reads who else is working from `/metrics` (in protobuf); once
/// deploy/base/flowcontrol.yaml gives it one, from API Priority and Fairness's dump of its
/// priority levels alone — with the grant deploy/base/rbac-migrator.yaml ships.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_reads_the_priority_levels_in_a_level_of_its_own_and_metrics_without_one() {
    let Some(cluster) = RealCluster::start(
        "auto_reads_the_priority_levels_in_a_level_of_its_own_and_metrics_without_one",
        &[],
        // 100 a second: each migration lasts ~6 s, longer than the longest wait between two
        // readings (4 s), so that every one is read during (not only 5 objects a second's
        // two minutes; unlimited, a migration could end between two readings).
        &["--controllers=migrator", "--qps=100", "--burst=100"],
    ) else {
        return;
    };
    create_configmaps(&cluster).await;
    let readings = |account: &str| {
        svm_metric(
            &cluster,
            &format!("svm_migrator_apiserver_readings_total{{account=\"{account}\"}}"),
        )
    };

    let first = migrate_configmaps(&cluster, "configmaps-exempt-level");
    assert!(succeeded(&first), "{first:#}");
    let (scrapes, dumps) = (readings("metrics"), readings("priority-levels"));
    eprintln!(
        "no level of its own: {scrapes} readings of /metrics, {dumps} of the priority levels"
    );
    assert!(
        scrapes >= 1.0,
        "kube-apiserver's protobuf /metrics was never read as a sample:\n{}",
        cluster.svm.log()
    );
    assert_eq!(
        dumps, 0.0,
        "a dump without our level was taken for a reading"
    );

    // Applied while the pool may still be busy: the next migration's start looks again.
    install_flowcontrol(&cluster.plane);
    create_migration(&cluster, "configmaps-own-level");
    // The first reading of the priority levels; /metrics may have been read until then (the
    // first migration's last seconds).
    let scrapes = wait_for(
        Duration::from_secs(60),
        "a reading of the priority levels",
        || (readings("priority-levels") >= 1.0).then(|| readings("metrics")),
        || cluster.svm.log(),
    );
    let second = finished(&cluster, "configmaps-own-level");
    assert!(succeeded(&second), "{second:#}");
    let (scrapes_after, dumps) = (readings("metrics"), readings("priority-levels"));
    eprintln!("in {LEVEL}: {dumps} readings of the priority levels, /metrics {scrapes_after}");
    assert_eq!(
        scrapes_after, scrapes,
        "/metrics was read after the priority levels served"
    );
}
