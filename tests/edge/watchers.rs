//! Watchers that stop reading are dropped without holding anyone up: with 1 000 watchers, 100 of
//! which stop reading (HTTP/2 streams that never grant flow-control window, as a client-go
//! informer that stopped consuming), every write succeeds, every reading watcher sees every
//! event, and the stalled ones are dropped and later reset.

use std::time::{Duration, Instant};

use crate::client;
use crate::support::server::{Backend, ServerProcess};
use crate::support::wait::eventually_async;
use crate::watch_load::{reading_watches, stalled_watches, write_padded};

const READERS: usize = 900;
const NON_READERS: usize = 100;
/// Enough events of [`PADDING`] bytes to fill a stalled watcher's 64 KiB buffer several times.
const WRITES: usize = 40;
/// Each object carries this much annotation, so a watcher's buffer fills within the writes.
const PADDING: usize = 8 << 10;
/// The stream window a non-reader grants, and never gives back.
const STALLED_WINDOW: u32 = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_that_stop_reading_are_dropped_and_hold_up_no_one() {
    let _heavy = crate::HEAVY.lock().await;
    let server = ServerProcess::start(Backend::Embedded);

    let mut non_readers = stalled_watches(&server, NON_READERS, STALLED_WINDOW).await;
    let readers = reading_watches(&server, READERS, "", WRITES).await;
    let watching = client::metric_where(&server, "apiserver_request_total", "verb=\"WATCH\"").await;
    println!(
        "{} watchers open ({watching} watch requests counted so far)",
        READERS + NON_READERS
    );

    // Writes go on, each acknowledged.
    let started = Instant::now();
    let latencies = write_padded(&server, "w", WRITES, PADDING).await;
    println!(
        "{WRITES} writes in {:.1}s (p50 {:?}, p99 {:?})",
        started.elapsed().as_secs_f64(),
        latencies[WRITES / 2],
        latencies[WRITES * 99 / 100]
    );

    // Every reading watcher sees every write (hang guard only).
    let all = futures::future::join_all(readers);
    let counts = tokio::time::timeout(Duration::from_secs(600), all)
        .await
        .expect("readers finished");
    let short: Vec<usize> = counts
        .into_iter()
        .map(|c| c.expect("reader"))
        .filter(|c| *c != WRITES)
        .collect();
    assert!(
        short.is_empty(),
        "{} readers missed events: {short:?}",
        short.len()
    );

    // The non-readers were dropped as unresponsive.
    let terminated = eventually_async(
        Duration::from_secs(120),
        &format!("apiserver_terminated_watchers_total reaching the {NON_READERS} non-readers"),
        async || {
            let terminated = client::metric(&server, "apiserver_terminated_watchers_total").await;
            if terminated >= NON_READERS as f64 {
                Ok(terminated)
            } else {
                Err(format!("{terminated}"))
            }
        },
    )
    .await;
    assert_eq!(
        terminated, NON_READERS as f64,
        "watchers dropped for not reading"
    );
    // One that reads again gets what the server had handed to HTTP/2 (the event that was
    // being sent), then the stream's reset.
    let mut stalled = non_readers.pop().expect("a non-reader");
    let mut got = 0;
    let end = loop {
        match stalled.body.data().await {
            Some(Ok(data)) => {
                got += data.len();
                let _ = stalled.body.flow_control().release_capacity(data.len());
            }
            other => break other,
        }
    };
    assert!(
        got <= PADDING + 2 * STALLED_WINDOW as usize,
        "{got} bytes arrived: more than one event"
    );
    assert!(
        matches!(&end, Some(Err(err)) if err.is_reset()),
        "the stream ends in RST_STREAM, not {end:?}"
    );
    let still = client::metric(&server, "svm_apiserver_open_connections").await;
    println!("{still} connections still open after the drop");
    drop(non_readers);
}
