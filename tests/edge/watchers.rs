//! Watchers that stop reading are dropped without holding anyone up: with 1 000 watchers, 100 of
//! which stop reading (HTTP/2 streams that never grant flow-control window, as a client-go
//! informer that stopped consuming), every write succeeds, every reading watcher sees every
//! event, and the stalled ones are dropped and later reset.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use crate::client;
use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
const READERS: usize = 900;
const NON_READERS: usize = 100;
/// Reading watchers per HTTP/2 connection (the server allows 250 streams on one).
const STREAMS_PER_CONNECTION: usize = 100;
/// Enough events of [`PADDING`] bytes to fill a stalled watcher's 64 KiB buffer several times.
const WRITES: usize = 40;
/// Each object carries this much annotation, so a watcher's buffer fills within the writes.
const PADDING: usize = 8 << 10;
/// The stream window a non-reader grants, and never gives back.
const STALLED_WINDOW: u32 = 1024;

/// An HTTP/2 watch whose stream window is never replenished: the server can send
/// [`STALLED_WINDOW`] bytes of it and no more.
struct Stalled {
    body: h2::RecvStream,
    _send: h2::client::SendRequest<bytes::Bytes>,
}

async fn stalled_watch(
    server: &ServerProcess,
    config: std::sync::Arc<rustls::ClientConfig>,
) -> Stalled {
    let tls = client::connect(server, config).await;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STALLED_WINDOW)
        .handshake::<_, bytes::Bytes>(tls)
        .await
        .expect("h2 handshake");
    tokio::spawn(connection);
    let request = http::Request::get(format!("{}{SVMS}?watch=1", server.url))
        .body(())
        .expect("request");
    let mut send = send.ready().await.expect("ready");
    let (response, _) = send.send_request(request, true).expect("send");
    let response = response.await.expect("response");
    assert_eq!(response.status(), 200);
    Stalled {
        body: response.into_body(),
        _send: send,
    }
}

/// Count the ADDED events of one watch until `expected` arrived.
async fn read_events(response: reqwest::Response, expected: usize) -> usize {
    let mut stream = response.bytes_stream();
    let mut seen = 0;
    let mut partial = Vec::new();
    while seen < expected {
        let Some(chunk) = stream.next().await else {
            break;
        };
        let Ok(chunk) = chunk else {
            break;
        };
        partial.extend_from_slice(&chunk);
        while let Some(end) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            if line.starts_with(b"{\"type\":\"ADDED\"") {
                seen += 1;
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_that_stop_reading_are_dropped_and_hold_up_no_one() {
    let _heavy = crate::HEAVY.lock().await;
    let server = ServerProcess::start(Backend::Embedded);
    let base = server.url.clone();

    // The non-readers, each on a connection of its own.
    let config = client::tls_config(&server, true, &[b"h2"]);
    let mut non_readers = Vec::with_capacity(NON_READERS);
    for _ in 0..NON_READERS {
        non_readers.push(stalled_watch(&server, config.clone()).await);
    }

    // The readers: HTTP/2 streams, each counting its events.
    let clients: Vec<reqwest::Client> = (0..READERS.div_ceil(STREAMS_PER_CONNECTION))
        .map(|_| {
            server
                .admin_http_client_builder()
                .http2_prior_knowledge()
                .build()
                .expect("client")
        })
        .collect();
    let mut readers = Vec::with_capacity(READERS);
    for i in 0..READERS {
        let client = &clients[i / STREAMS_PER_CONNECTION];
        let response = client
            .get(format!("{base}{SVMS}?watch=1"))
            .send()
            .await
            .expect("watch");
        assert_eq!(response.status(), 200);
        readers.push(tokio::spawn(read_events(response, WRITES)));
    }
    let watching = client::metric_where(&server, "apiserver_request_total", "verb=\"WATCH\"").await;
    println!(
        "{} watchers open ({watching} watch requests counted so far)",
        READERS + NON_READERS
    );

    // Writes go on, each acknowledged.
    let writer = server.http_client();
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(WRITES);
    for i in 0..WRITES {
        let object = json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": format!("w{i:04}"), "annotations": {"padding": "p".repeat(PADDING)}},
            "spec": {"resource": {"group": "apps", "resource": "deployments"}}
        });
        let sent = Instant::now();
        let created = writer
            .post(format!("{base}{SVMS}"))
            .json(&object)
            .send()
            .await
            .expect("create");
        assert_eq!(created.status(), 201, "write {i}");
        latencies.push(sent.elapsed());
    }
    latencies.sort();
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
    let deadline = Instant::now() + Duration::from_secs(120);
    let terminated = loop {
        let terminated = client::metric(&server, "apiserver_terminated_watchers_total").await;
        if terminated >= NON_READERS as f64 || Instant::now() > deadline {
            break terminated;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
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
