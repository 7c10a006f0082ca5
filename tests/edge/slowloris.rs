//! Slow and hostile clients are contained: thousands of connections that never finish their
//! headers and hundreds of stalled TLS handshakes do not stop `kubectl get svm` from answering,
//! memory stays bounded, and the timeouts close them.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client;
use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};

const NEVER_FINISHING_HEADERS: usize = 2000;
const STALLED_HANDSHAKES: usize = 500;

/// The start of a TLS ClientHello record and nothing more.
const HALF_A_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01];

/// Raise this process's open-files limit: the test holds thousands of sockets.
fn enough_files(needed: u64) {
    let limit = rlimit::increase_nofile_limit(u64::MAX).expect("open-files limit");
    assert!(
        limit >= needed,
        "the open-files limit is {limit}, the test needs {needed}: raise the hard limit (ulimit -Hn)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_and_stalled_handshakes_do_not_stop_kubectl() {
    let _heavy = crate::HEAVY.lock().await;
    enough_files(2 * (NEVER_FINISHING_HEADERS + STALLED_HANDSHAKES) as u64 + 1000);
    // Timeouts long enough that every attacker is still held while kubectl runs.
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &["--tls-handshake-timeout=5m", "--read-header-timeout=5m"],
    );
    let pid = server.pid().expect("pid");
    let kubectl = Kubectl::new(&server.kubeconfig);
    let created = kubectl.run_with_stdin(
        &["create", "-f", "-"],
        Some(
            "apiVersion: storagemigration.k8s.io/v1\nkind: StorageVersionMigration\n\
             metadata: {name: slowloris}\nspec: {resource: {group: apps, resource: deployments}}\n",
        ),
    );
    assert!(created.ok, "{}", created.stderr);
    let rss_before = crate::rss_bytes(pid);

    let started = Instant::now();
    let addr = client::addr(&server);
    let mut stalled = Vec::with_capacity(STALLED_HANDSHAKES);
    for _ in 0..STALLED_HANDSHAKES {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(HALF_A_HELLO).await.expect("half a hello");
        stalled.push(tcp);
    }
    let config = client::tls_config(&server, false, &[b"http/1.1"]);
    let mut slow = Vec::with_capacity(NEVER_FINISHING_HEADERS);
    let handshakes = futures::future::join_all((0..NEVER_FINISHING_HEADERS).map(|_| {
        let config = config.clone();
        let server = &server;
        async move {
            let mut stream = client::connect(server, config).await;
            stream
                .write_all(b"GET /apis/storagemigration.k8s.io/v1/storageversionmigrations HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await
                .expect("partial headers");
            stream.flush().await.expect("flush");
            stream
        }
    }));
    slow.extend(handshakes.await);
    println!(
        "holding {} stalled handshakes and {} connections without their headers ({:.1}s to open)",
        stalled.len(),
        slow.len(),
        started.elapsed().as_secs_f64()
    );
    let open = client::metric(&server, "svm_apiserver_open_connections").await;
    assert!(
        open >= (NEVER_FINISHING_HEADERS + STALLED_HANDSHAKES) as f64,
        "the server holds {open} connections"
    );

    // kubectl keeps answering (timed and reported, not asserted).
    for attempt in 0..3 {
        let asked = Instant::now();
        let listed = tokio::task::block_in_place(|| kubectl.run(&["get", "svm"]));
        assert!(listed.ok, "kubectl get svm failed: {}", listed.stderr);
        assert!(listed.stdout.contains("slowloris"), "{}", listed.stdout);
        println!(
            "kubectl get svm #{attempt} answered in {:.2}s",
            asked.elapsed().as_secs_f64()
        );
    }
    let rss_held = crate::rss_bytes(pid);
    let per_connection = (rss_held.saturating_sub(rss_before))
        / (NEVER_FINISHING_HEADERS + STALLED_HANDSHAKES) as u64;
    println!(
        "server RSS {:.1} MiB before, {:.1} MiB holding them (about {} KiB a connection)",
        rss_before as f64 / f64::from(1 << 20),
        rss_held as f64 / f64::from(1 << 20),
        per_connection / 1024
    );
    // Bounded: a generous ceiling, far below what unbounded buffering would take.
    assert!(rss_held < 1 << 30, "server RSS {rss_held} bytes");
    drop(stalled);
    drop(slow);
}

/// Read until the server closes the connection; true when it did within `limit`.
async fn closed_by_server<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    limit: Duration,
) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_and_headers_are_closed_by_their_timeouts() {
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &[
            "--tls-handshake-timeout=2s",
            "--read-header-timeout=3s",
            "--idle-connection-timeout=4s",
        ],
    );
    let addr = client::addr(&server);
    let mut handshake = TcpStream::connect(addr).await.expect("connect");
    handshake
        .write_all(HALF_A_HELLO)
        .await
        .expect("half a hello");
    let mut headers =
        client::connect(&server, client::tls_config(&server, false, &[b"http/1.1"])).await;
    headers
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("partial");
    // An HTTP/2 connection that never opens a stream is idle from the start.
    let mut idle = client::connect(&server, client::tls_config(&server, false, &[b"h2"])).await;
    idle.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("preface");
    // Hang guards: far above the timeouts, so a loaded machine does not fail the test.
    let limit = Duration::from_secs(60);
    assert!(
        closed_by_server(&mut handshake, limit).await,
        "stalled handshake kept"
    );
    assert!(
        closed_by_server(&mut headers, limit).await,
        "unfinished headers kept"
    );
    assert!(
        closed_by_server(&mut idle, limit).await,
        "idle HTTP/2 connection kept"
    );
    let closed = |reason: &'static str| {
        let server = &server;
        async move {
            client::metric_where(
                server,
                "svm_apiserver_closed_connections_total",
                &format!("reason=\"{reason}\""),
            )
            .await
        }
    };
    assert!(closed("tls_handshake_timeout").await >= 1.0);
    assert!(closed("idle").await >= 1.0);
}
