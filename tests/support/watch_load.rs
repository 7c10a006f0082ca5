//! Many watchers on one server, some of which stop reading: what `watchers.rs` asserts and
//! `benches/edge.rs` measures (the bench includes this file).

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::edge_client as client;
use crate::server::ServerProcess;

pub const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
/// Reading watchers per HTTP/2 connection (the server allows 250 streams on one).
pub const STREAMS_PER_CONNECTION: usize = 100;

/// An HTTP/2 watch whose stream window is never replenished: the server can send `window`
/// bytes of it and no more (a client-go informer that stopped consuming).
pub struct Stalled {
    pub body: h2::RecvStream,
    _send: h2::client::SendRequest<bytes::Bytes>,
}

/// Opens `count` stalled watches, each on a connection of its own.
pub async fn stalled_watches(server: &ServerProcess, count: usize, window: u32) -> Vec<Stalled> {
    let config = client::tls_config(server, true, &[b"h2"]);
    let mut stalled = Vec::with_capacity(count);
    for _ in 0..count {
        stalled.push(stalled_watch(server, config.clone(), window).await);
    }
    stalled
}

async fn stalled_watch(
    server: &ServerProcess,
    config: std::sync::Arc<rustls::ClientConfig>,
    window: u32,
) -> Stalled {
    let tls = client::connect(server, config).await;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(window)
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

/// Opens `count` reading watches (`query` after `?watch=1`), [`STREAMS_PER_CONNECTION`] to an
/// HTTP/2 connection; each task counts ADDED events until `expected` arrived.
pub async fn reading_watches(
    server: &ServerProcess,
    count: usize,
    query: &str,
    expected: usize,
) -> Vec<JoinHandle<usize>> {
    let clients: Vec<reqwest::Client> = (0..count.div_ceil(STREAMS_PER_CONNECTION))
        .map(|_| {
            server
                .admin_http_client_builder()
                .http2_prior_knowledge()
                .build()
                .expect("client")
        })
        .collect();
    let mut readers = Vec::with_capacity(count);
    for i in 0..count {
        let response = clients[i / STREAMS_PER_CONNECTION]
            .get(format!("{}{SVMS}?watch=1{query}", server.url))
            .send()
            .await
            .expect("watch");
        assert_eq!(response.status(), 200);
        readers.push(tokio::spawn(read_events(response, expected)));
    }
    readers
}

/// Count the ADDED events of one watch until `expected` arrived.
async fn read_events(response: reqwest::Response, expected: usize) -> usize {
    let mut stream = response.bytes_stream();
    let mut seen = 0;
    let mut partial = Vec::new();
    while seen < expected {
        let Some(Ok(chunk)) = stream.next().await else {
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

/// Creates `count` migrations named `<prefix>-NNNN` carrying `padding` bytes of annotation,
/// one after the other, each answered 201; their latencies, sorted.
pub async fn write_padded(
    server: &ServerProcess,
    prefix: &str,
    count: usize,
    padding: usize,
) -> Vec<Duration> {
    let writer = server.http_client();
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        let object = json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": format!("{prefix}-{i:04}"), "annotations": {"padding": "p".repeat(padding)}},
            "spec": {"resource": {"group": "apps", "resource": "deployments"}}
        });
        let sent = Instant::now();
        let created = writer
            .post(format!("{}{SVMS}", server.url))
            .json(&object)
            .send()
            .await
            .expect("create");
        assert_eq!(created.status(), 201, "write {prefix}-{i}");
        latencies.push(sent.elapsed());
    }
    latencies.sort();
    latencies
}
