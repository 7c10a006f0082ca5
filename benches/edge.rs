//! `make bench`: what watchers cost. 1 000 watchers on the real server (release build, embedded
//! store), 100 of which never read (HTTP/2 streams that never grant window): the server's RSS
//! per watcher and the write latency, next to the same writes with no watcher. Prints a table;
//! asserts nothing about time.

// A benchmark that cannot run stops with a panic: unwrap is how it says so.
#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/edge/client.rs"]
#[allow(dead_code)]
mod client;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
const READERS: usize = 900;
const NON_READERS: usize = 100;
const STREAMS_PER_CONNECTION: usize = 100;
const WRITES: usize = 200;
const PADDING: usize = 1 << 10;

fn rss(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(idx).copied().unwrap_or_default()
}

async fn write_all(server: &ServerProcess, prefix: &str) -> Vec<Duration> {
    let client = server.http_client();
    let mut latencies = Vec::with_capacity(WRITES);
    for i in 0..WRITES {
        let object = json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": format!("{prefix}-{i:04}"), "annotations": {"padding": "p".repeat(PADDING)}},
            "spec": {"resource": {"group": "apps", "resource": "deployments"}}
        });
        let started = Instant::now();
        let response = client
            .post(format!("{}{SVMS}", server.url))
            .json(&object)
            .send()
            .await
            .expect("create");
        assert_eq!(response.status(), 201);
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

async fn count_events(response: reqwest::Response, expected: usize) -> usize {
    let mut stream = response.bytes_stream();
    let mut seen = 0;
    while seen < expected {
        match stream.next().await {
            Some(Ok(chunk)) => seen += chunk.iter().filter(|b| **b == b'\n').count(),
            _ => break,
        }
    }
    seen
}

async fn stalled(
    server: &ServerProcess,
    config: std::sync::Arc<rustls::ClientConfig>,
) -> h2::RecvStream {
    let tls = client::connect(server, config).await;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(1024)
        .handshake::<_, bytes::Bytes>(tls)
        .await
        .expect("h2");
    tokio::spawn(connection);
    let request = http::Request::get(format!("{}{SVMS}?watch=1", server.url))
        .body(())
        .expect("request");
    let mut send = send.ready().await.expect("ready");
    let (response, _) = send.send_request(request, true).expect("send");
    response.await.expect("response").into_body()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = ServerProcess::start(Backend::Embedded);
    let pid = server.pid().expect("pid");
    let quiet = write_all(&server, "quiet").await;
    let idle_rss = rss(pid, "VmRSS:");

    let config = client::tls_config(&server, true, &[b"h2"]);
    let mut non_readers = Vec::new();
    for _ in 0..NON_READERS {
        non_readers.push(stalled(&server, config.clone()).await);
    }
    let clients: Vec<reqwest::Client> = (0..READERS.div_ceil(STREAMS_PER_CONNECTION))
        .map(|_| {
            server
                .admin_http_client_builder()
                .http2_prior_knowledge()
                .build()
                .expect("client")
        })
        .collect();
    let mut readers = Vec::new();
    for i in 0..READERS {
        let response = clients[i / STREAMS_PER_CONNECTION]
            .get(format!("{}{SVMS}?watch=1&resourceVersion=0", server.url))
            .send()
            .await
            .expect("watch");
        readers.push(tokio::spawn(count_events(response, 2 * WRITES)));
    }
    // Let every watcher take its initial events.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let watching_rss = rss(pid, "VmRSS:");
    let started = Instant::now();
    let busy = write_all(&server, "busy").await;
    let writes_took = started.elapsed();
    let delivered =
        tokio::time::timeout(Duration::from_secs(600), futures::future::join_all(readers))
            .await
            .map(|counts| {
                counts
                    .into_iter()
                    .filter_map(Result::ok)
                    .filter(|c| *c >= 2 * WRITES)
                    .count()
            })
            .unwrap_or(0);
    let all_delivered = started.elapsed();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let terminated = client::metric(&server, "apiserver_terminated_watchers_total").await;
    let peak = rss(pid, "VmHWM:");
    drop(non_readers);

    let per_watcher = watching_rss.saturating_sub(idle_rss) / (READERS + NON_READERS) as u64;
    println!();
    println!(
        "## Watchers (release build, embedded store, {WRITES} writes of ~{} KiB objects)",
        PADDING >> 10
    );
    println!();
    println!("| watchers | write p50 | write p99 | RSS | RSS per watcher |");
    println!("|---|---|---|---|---|");
    println!(
        "| 0 | {:.1} ms | {:.1} ms | {:.1} MiB | — |",
        percentile(&quiet, 0.5).as_secs_f64() * 1e3,
        percentile(&quiet, 0.99).as_secs_f64() * 1e3,
        idle_rss as f64 / f64::from(1 << 20)
    );
    println!(
        "| {} ({} never read) | {:.1} ms | {:.1} ms | {:.1} MiB (peak {:.1}) | {:.1} KiB |",
        READERS + NON_READERS,
        NON_READERS,
        percentile(&busy, 0.5).as_secs_f64() * 1e3,
        percentile(&busy, 0.99).as_secs_f64() * 1e3,
        watching_rss as f64 / f64::from(1 << 20),
        peak as f64 / f64::from(1 << 20),
        per_watcher as f64 / 1024.0
    );
    println!();
    println!(
        "writes took {:.1}s; every event at all {delivered}/{READERS} readers after {:.1}s; {terminated} non-readers dropped",
        writes_took.as_secs_f64(),
        all_delivered.as_secs_f64()
    );
}
