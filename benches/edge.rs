//! `make bench`: what watchers cost. 1 000 watchers on the real server (release build, embedded
//! store), 100 of which never read (HTTP/2 streams that never grant window): the server's RSS
//! per watcher and the write latency, next to the same writes with no watcher. Prints a table;
//! asserts nothing about time.

// A benchmark that cannot run stops with a panic: unwrap is how it says so.
#![allow(clippy::unwrap_used)]

use support::stats::percentile;
use svm_test_support as support;

use svm_test_support::{edge_client as client, watch_load};

use std::time::{Duration, Instant};

use support::server::{Backend, ServerProcess};
use watch_load::{reading_watches, stalled_watches, write_padded};

const READERS: usize = 900;
const NON_READERS: usize = 100;
const WRITES: usize = 200;
const PADDING: usize = 1 << 10;
/// The stream window a non-reader grants, and never gives back.
const STALLED_WINDOW: u32 = 1024;

fn rss(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = ServerProcess::start(Backend::Embedded);
    let pid = server.pid().expect("pid");
    let quiet = write_padded(&server, "quiet", WRITES, PADDING).await;
    let idle_rss = rss(pid, "VmRSS:");

    let non_readers = stalled_watches(&server, NON_READERS, STALLED_WINDOW).await;
    // From resourceVersion 0: the quiet writes arrive first, then the busy ones.
    let readers = reading_watches(&server, READERS, "&resourceVersion=0", 2 * WRITES).await;
    // Let every watcher take its initial events.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let watching_rss = rss(pid, "VmRSS:");
    let started = Instant::now();
    let busy = write_padded(&server, "busy", WRITES, PADDING).await;
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
        percentile(&quiet, 0.5).unwrap_or_default().as_secs_f64() * 1e3,
        percentile(&quiet, 0.99).unwrap_or_default().as_secs_f64() * 1e3,
        idle_rss as f64 / f64::from(1 << 20)
    );
    println!(
        "| {} ({} never read) | {:.1} ms | {:.1} ms | {:.1} MiB (peak {:.1}) | {:.1} KiB |",
        READERS + NON_READERS,
        NON_READERS,
        percentile(&busy, 0.5).unwrap_or_default().as_secs_f64() * 1e3,
        percentile(&busy, 0.99).unwrap_or_default().as_secs_f64() * 1e3,
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
