//! `make bench`: API latency of the real server over HTTPS, on etcd and on the embedded store.
//! Prints a table; asserts nothing about time.

// A benchmark that cannot run stops with a panic: unwrap is how it says so.
#![allow(clippy::unwrap_used)]

use support::stats::percentile;
use svm_test_support as support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use support::etcd::EtcdServer;
use support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
const OBJECTS: usize = 1000;

fn svm(name: &str) -> Value {
    json!({
        "apiVersion": "storagemigration.k8s.io/v1",
        "kind": "StorageVersionMigration",
        "metadata": {"name": name, "labels": {"bench": "yes"}},
        "spec": {"resource": {"group": "apps", "resource": "deployments"}}
    })
}

struct Row {
    backend: &'static str,
    operation: String,
    samples: Vec<Duration>,
}

async fn bench_backend(backend: &'static str, server: &ServerProcess) -> Vec<Row> {
    let client = server.http_client();
    let base = &server.url;
    let mut rows = Vec::new();

    // Watch event latency: a watcher open throughout; each create's event is timed from just
    // before the POST to the event's arrival.
    let resp = client
        .get(format!("{base}{SVMS}?watch=1&resourceVersion=0"))
        .send()
        .await
        .unwrap();
    let mut watch = resp.bytes_stream();
    let mut buf = Vec::new();

    let mut create = Vec::with_capacity(OBJECTS);
    let mut watch_latency = Vec::with_capacity(OBJECTS);
    for i in 0..OBJECTS {
        let started = Instant::now();
        let r = client
            .post(format!("{base}{SVMS}"))
            .json(&svm(&format!("bench-{i:05}")))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            201,
            "create failed: {}",
            r.text().await.unwrap_or_default()
        );
        create.push(started.elapsed());
        // Wait for this object's ADDED event.
        'event: loop {
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let event: Value = serde_json::from_slice(&line).unwrap();
                if event["object"]["metadata"]["name"] == format!("bench-{i:05}") {
                    watch_latency.push(started.elapsed());
                    break 'event;
                }
            }
            match watch.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                other => panic!("watch ended: {other:?}"),
            }
        }
    }
    rows.push(Row {
        backend,
        operation: "create".into(),
        samples: create,
    });
    rows.push(Row {
        backend,
        operation: "watch event (create -> event)".into(),
        samples: watch_latency,
    });

    let mut get = Vec::with_capacity(OBJECTS);
    for i in 0..OBJECTS {
        let started = Instant::now();
        let r = client
            .get(format!("{base}{SVMS}/bench-{i:05}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
        get.push(started.elapsed());
    }
    rows.push(Row {
        backend,
        operation: "get".into(),
        samples: get,
    });

    // Server-side apply by a second manager: one that writes (a new label), then the same
    // again (a no-op: merge, compare, no write).
    for (operation, round) in [("apply (writes)", "1"), ("apply (no-op)", "1")] {
        let mut samples = Vec::with_capacity(OBJECTS);
        for i in 0..OBJECTS {
            let name = format!("bench-{i:05}");
            let body = json!({
                "apiVersion": "storagemigration.k8s.io/v1",
                "kind": "StorageVersionMigration",
                "metadata": {"name": name, "labels": {"round": round}},
            });
            let started = Instant::now();
            let r = client
                .patch(format!("{base}{SVMS}/{name}?fieldManager=bench"))
                .header("Content-Type", "application/apply-patch+yaml")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(
                r.status(),
                200,
                "apply failed: {}",
                r.text().await.unwrap_or_default()
            );
            r.bytes().await.unwrap();
            samples.push(started.elapsed());
        }
        rows.push(Row {
            backend,
            operation: operation.into(),
            samples,
        });
    }

    let mut list = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let r = client.get(format!("{base}{SVMS}")).send().await.unwrap();
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["items"].as_array().map(Vec::len), Some(OBJECTS));
        list.push(started.elapsed());
    }
    rows.push(Row {
        backend,
        operation: format!("list ({OBJECTS} objects)"),
        samples: list,
    });

    let mut paged = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let mut token = String::new();
        loop {
            let r = client
                .get(format!("{base}{SVMS}?limit=100&continue={token}"))
                .send()
                .await
                .unwrap();
            let body: Value = r.json().await.unwrap();
            match body["metadata"]["continue"].as_str() {
                Some(t) if !t.is_empty() => token = t.to_string(),
                _ => break,
            }
        }
        paged.push(started.elapsed());
    }
    rows.push(Row {
        backend,
        operation: format!("list ({OBJECTS} objects, pages of 100)"),
        samples: paged,
    });
    rows
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut rows = Vec::new();
    {
        let server = ServerProcess::start(Backend::Embedded);
        rows.extend(bench_backend("embedded", &server).await);
    }
    {
        let etcd = EtcdServer::start();
        let server = ServerProcess::start(Backend::Etcd(&etcd.endpoint()));
        rows.extend(bench_backend("etcd 3.4", &server).await);
    }
    println!();
    println!("| store | operation | samples | p50 | p99 |");
    println!("|---|---|---:|---:|---:|");
    for mut row in rows {
        row.samples.sort();
        println!(
            "| {} | {} | {} | {:.2} ms | {:.2} ms |",
            row.backend,
            row.operation,
            row.samples.len(),
            percentile(&row.samples, 0.50)
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3,
            percentile(&row.samples, 0.99)
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3,
        );
    }
}
