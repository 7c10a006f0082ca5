//! What the migrator's own priority level (deploy/base/flowcontrol.yaml) buys a cluster's other
//! clients, on the real kube-apiserver (KUBEBUILDER_ASSETS) with few seats (30): an operator's
//! ServiceAccount — in `workload-low`, where the migrator's ServiceAccount lands without the
//! FlowSchema — GETs one ConfigMap in a loop while a migration of every ConfigMap runs flat out
//! (`--qps 0`, 32 PATCHes in flight). Printed as a table, never asserted.
//!
//! `make bench` runs it; `SVM_BENCH_FAIR_SHARE_OBJECTS` sets the ConfigMap count (2000).

// A benchmark that cannot run stops with a panic: unwrap is how it says so.
#![allow(clippy::unwrap_used)]

use support::stats::percentile;
use svm_test_support as support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;
use support::control_plane::client_from;
use support::kubectl::Kubectl;
use support::real_cluster::RealCluster;

const READS: usize = 5000;

async fn reads(api: &Api<DynamicObject>, stop_when: impl Fn() -> bool) -> Vec<Duration> {
    let mut out = Vec::new();
    // At least one read, then until READS or the migration ends.
    while out.len() < READS && (out.is_empty() || !stop_when()) {
        let started = Instant::now();
        api.get("cm-00000").await.expect("the operator's GET");
        out.push(started.elapsed());
    }
    out.sort();
    out
}

fn migration_done(kubectl: &Kubectl, name: &str) -> bool {
    let out = kubectl.run(&[
        "get",
        "storageversionmigrations.storagemigration.k8s.io",
        name,
        "-o",
        "jsonpath={.status.conditions[?(@.status==\"True\")].type}",
    ]);
    out.stdout.contains("Succeeded") || out.stdout.contains("Failed")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let objects: usize = std::env::var("SVM_BENCH_FAIR_SHARE_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let Some(cluster) = RealCluster::start(
        "bench fair_share",
        &[
            "--max-requests-inflight=20",
            "--max-mutating-requests-inflight=10",
        ],
        &[
            "--controllers=migrator",
            "--qps=0",
            "--object-concurrency=32",
        ],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    kubectl.ok(&["create", "namespace", "demo"]);
    kubectl.ok(&["create", "serviceaccount", "operator", "-n", "demo"]);
    kubectl.ok(&[
        "create",
        "role",
        "read-cm",
        "-n",
        "demo",
        "--verb=get",
        "--resource=configmaps",
    ]);
    kubectl.ok(&[
        "create",
        "rolebinding",
        "operator-read-cm",
        "-n",
        "demo",
        "--role=read-cm",
        "--serviceaccount=demo:operator",
    ]);
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let admin: Api<DynamicObject> = Api::namespaced_with(
        cluster.plane.client().await,
        "demo",
        &ApiResource::from_gvk(&gvk),
    );
    for i in 0..objects {
        let cm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:05}")}, "data": {"i": i.to_string()},
        }))
        .expect("object");
        admin
            .create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let operator: Api<DynamicObject> = Api::namespaced_with(
        client_from(&cluster.plane.service_account_kubeconfig("demo", "operator")).await,
        "demo",
        &ApiResource::from_gvk(&gvk),
    );

    let idle_until = Instant::now() + Duration::from_secs(10);
    let idle = reads(&operator, || Instant::now() > idle_until).await;
    let mut rows = vec![("idle, no migration", idle, Duration::ZERO)];
    let flowcontrol = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/base/flowcontrol.yaml")
        .display()
        .to_string();
    for (label, apply, name) in [
        (
            "migration, no FlowSchema (workload-low)",
            false,
            "cm-shared",
        ),
        (
            "migration, svm-apiserver-migrator level",
            true,
            "cm-own-level",
        ),
    ] {
        if apply {
            kubectl.ok(&["apply", "-f", &flowcontrol]);
        }
        kubectl.ok_stdin(
            &["create", "-f", "-"],
            &json!({
                "apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
                "metadata": {"name": name},
                "spec": {"resource": {"group": "", "resource": "configmaps"}},
            })
            .to_string(),
        );
        let started = Instant::now();
        // Watched from another thread (kubectl is a process): the reads only look at a flag.
        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (done, kubeconfig, name) = (
                done.clone(),
                cluster.plane.kubeconfig.clone(),
                name.to_string(),
            );
            std::thread::spawn(move || {
                while !migration_done(&Kubectl::new(&kubeconfig), &name) {
                    std::thread::sleep(Duration::from_millis(200));
                }
                done.store(true, Ordering::Relaxed);
            })
        };
        let latencies = reads(&operator, || done.load(Ordering::Relaxed)).await;
        watcher.join().expect("watcher");
        rows.push((label, latencies, started.elapsed()));
    }
    println!(
        "\nAn operator's GET of one ConfigMap while {objects} ConfigMaps are migrated flat out \
         (kube-apiserver with 30 seats)\n"
    );
    println!(
        "| {:<42} | {:>5} | {:>9} | {:>9} | {:>9} | {:>11} |",
        "while", "GETs", "p50", "p99", "max", "migration"
    );
    println!(
        "|{:-<44}|{:-<7}|{:-<11}|{:-<11}|{:-<11}|{:-<13}|",
        "", "", "", "", "", ""
    );
    for (label, latencies, took) in rows {
        println!(
            "| {:<42} | {:>5} | {:>7.1}ms | {:>7.1}ms | {:>7.1}ms | {:>10} |",
            label,
            latencies.len(),
            percentile(&latencies, 0.5)
                .unwrap_or_default()
                .as_secs_f64()
                * 1000.0,
            percentile(&latencies, 0.99)
                .unwrap_or_default()
                .as_secs_f64()
                * 1000.0,
            latencies.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
            if took.is_zero() {
                "-".to_string()
            } else {
                format!("{:.1} s", took.as_secs_f64())
            },
        );
    }
}
