//! `make bench` (migration table): the real server migrating N objects of 10 KiB in the
//! kube-apiserver test double (in this process), unthrottled (`--qps=0`), reading the
//! resource as one watch-list stream and in metadata-only pages, against the
//! out-of-tree migrator's full-object strategy (LIST full pages, then GET + PUT each object)
//! on the same double. Figures come from the double's counters and /proc; nothing is asserted.
//!
//! `SVM_BENCH_MIGRATE_SIZES` (default `10000,100000`) picks the sizes; 10^6 objects of 10 KiB
//! need about 12 GB of memory in the double (which compacts every 10 s).
//! `SVM_BENCH_MIGRATE_GET_PUT=0` leaves out the full-object strategy (the slow one) to compare
//! the stream with the pages alone.

// A benchmark that cannot run stops with a panic: unwrap is how it says so.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube_double::KubeDouble;
use serde_json::{Value, json};
use support::server::{Backend, ServerProcess};

const PAYLOAD: usize = 10 * 1024;
const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
const WIDGETS: &str = "/apis/example.test/v1/widgets";

struct Row {
    strategy: &'static str,
    objects: usize,
    seconds: f64,
    requests: u64,
    bytes: u64,
    writes: u64,
    peak_rss_kib: Option<u64>,
}

async fn prepared_double(objects: usize) -> KubeDouble {
    // Compacting as kube-apiserver does (--etcd-compaction-interval), only more often: the
    // double keeps every revision in memory until compacted, and a migration rewrites every
    // object, so 10^6 objects of 10 KiB would need twice their size (over 24 GB) without it.
    // Continue tokens live one to two intervals: ten seconds outlast any page here.
    let double = support::doubles::with_widgets(
        KubeDouble::builder().compaction_interval(Duration::from_secs(10)),
        "bench",
    )
    .await;
    double
        .preload("widgets.example.test", Some("bench"), "w", objects, PAYLOAD)
        .expect("preload");
    double
        .set_storage_version("widgets.example.test", "v2")
        .expect("storage version");
    double.reset_counters();
    double
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn row(
    strategy: &'static str,
    double: &KubeDouble,
    objects: usize,
    seconds: f64,
    rss: Option<u64>,
) -> Row {
    let counters = double.counters();
    // Only the migration's own traffic: LISTs, PATCH/GET/PUT of widgets (discovery and
    // events are a handful of requests either way).
    Row {
        strategy,
        objects,
        seconds,
        requests: counters.total_requests,
        bytes: counters.bytes_in + counters.bytes_out,
        writes: counters.writes_performed,
        peak_rss_kib: rss,
    }
}

/// How our server reads the resource.
#[derive(Clone, Copy)]
enum Read {
    /// One watch-list stream (the double serves it, as kube-apiserver on etcd >= 3.5.13).
    Stream,
    /// Metadata-only LIST pages of 500 (`--watch-list-max-objects=0`).
    Pages,
}

async fn ours(objects: usize, read: Read) -> Row {
    let double = prepared_double(objects).await;
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = dir.path().join("cluster.kubeconfig");
    std::fs::write(&kubeconfig, double.kubeconfig_yaml()).expect("kubeconfig");
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &[
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--controllers=migrator",
            "--qps=0",
            "--object-concurrency=16",
            &format!(
                "--watch-list-max-objects={}",
                match read {
                    Read::Stream => objects,
                    Read::Pages => 0,
                }
            ),
        ],
    );
    let http = server.http_client();
    let started = Instant::now();
    let resp = http
        .post(format!("{}{SVMS}", server.url))
        .json(&json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": "bench"},
            "spec": {"resource": {"group": "example.test", "resource": "widgets"}},
        }))
        .send()
        .await
        .expect("create");
    assert_eq!(resp.status(), 201);
    loop {
        let m: Value = http
            .get(format!("{}{SVMS}/bench", server.url))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        let done = m["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                (c["type"] == "Succeeded" || c["type"] == "Failed") && c["status"] == "True"
            })
        });
        if done {
            assert!(m.to_string().contains("\"Succeeded\""), "{m:#}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let rss = server.pid().and_then(peak_rss_kib);
    row(
        match read {
            Read::Stream => "watch-list + no-op PATCH (ours)",
            Read::Pages => "metadata LIST + no-op PATCH (ours)",
        },
        &double,
        objects,
        seconds,
        rss,
    )
}

/// The out-of-tree kube-storage-version-migrator's way: full-object LIST pages, then for each
/// object a GET and a PUT of the whole object (16 at a time, as ours).
async fn get_put(objects: usize) -> Row {
    let double = prepared_double(objects).await;
    let admin = double.admin_client();
    let identity =
        reqwest::Identity::from_pem(format!("{}{}", admin.key_pem, admin.cert_pem).as_bytes())
            .expect("identity");
    let http = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(double.ca_pem().as_bytes()).expect("ca"),
        )
        .identity(identity)
        .build()
        .expect("client");
    let base = double.url();
    let started = Instant::now();
    let mut token: Option<String> = None;
    loop {
        let url = match &token {
            Some(t) => format!("{base}{WIDGETS}?limit=500&continue={t}"),
            None => format!("{base}{WIDGETS}?limit=500"),
        };
        let page: Value = http
            .get(url)
            .send()
            .await
            .expect("list")
            .json()
            .await
            .expect("json");
        let items = page["items"].as_array().cloned().unwrap_or_default();
        futures::stream::iter(items)
            .for_each_concurrent(16, |item| {
                let http = &http;
                let base = &base;
                async move {
                    let ns = item["metadata"]["namespace"].as_str().unwrap_or_default();
                    let name = item["metadata"]["name"].as_str().unwrap_or_default();
                    let url = format!("{base}/apis/example.test/v1/namespaces/{ns}/widgets/{name}");
                    let current: Value = http
                        .get(&url)
                        .send()
                        .await
                        .expect("get")
                        .json()
                        .await
                        .expect("json");
                    let resp = http.put(&url).json(&current).send().await.expect("put");
                    assert!(resp.status().is_success() || resp.status() == 409);
                }
            })
            .await;
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => break,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    row(
        "full LIST + GET + PUT (out-of-tree)",
        &double,
        objects,
        seconds,
        None,
    )
}

fn print(rows: &[Row]) {
    println!();
    println!(
        "Migration of N widgets of 10 KiB from example.test/v1 to v2 (unthrottled, 16 objects in flight)"
    );
    println!(
        "| {:<37} | {:>9} | {:>9} | {:>10} | {:>12} | {:>14} | {:>10} | {:>14} |",
        "strategy",
        "objects",
        "seconds",
        "objects/s",
        "requests/obj",
        "bytes/obj",
        "writes",
        "server peak RSS"
    );
    println!("|{}|", ["-"; 8].map(|_| "-------------").join("|"));
    for r in rows {
        let n = r.objects as f64;
        println!(
            "| {:<37} | {:>9} | {:>9.1} | {:>10.0} | {:>12.3} | {:>14.0} | {:>10} | {:>14} |",
            r.strategy,
            r.objects,
            r.seconds,
            n / r.seconds,
            r.requests as f64 / n,
            r.bytes as f64 / n,
            r.writes,
            r.peak_rss_kib.map_or_else(
                || "—".to_string(),
                |k| format!("{:.1} MiB", k as f64 / 1024.0)
            ),
        );
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let sizes: Vec<usize> = std::env::var("SVM_BENCH_MIGRATE_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let get_put_too = std::env::var("SVM_BENCH_MIGRATE_GET_PUT").map_or(true, |v| v != "0");
    let mut rows = Vec::new();
    for n in sizes {
        rows.push(ours(n, Read::Stream).await);
        rows.push(ours(n, Read::Pages).await);
        if get_put_too {
            rows.push(get_put(n).await);
        }
        print(&rows);
    }
}
