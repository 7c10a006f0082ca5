//! Every response reaches its client: requests the server rejects without reading their body
//! (70 KiB to 3 MiB of it) still get their status, over HTTP/1.1 keep-alive and over HTTP/2,
//! while the machine is busy; an HTTP/1.1 connection stays usable after an unread body, and one
//! that must close says `Connection: close` and closes cleanly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::{Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client;
use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
/// Bodies above this get 413 (the flag the server runs with here).
const LIMIT: usize = 1 << 20;
const REQUESTS_PER_PROTOCOL: usize = 1000;

/// One kind of rejected request and the status it must get.
#[derive(Clone, Copy, Debug)]
enum Rejection {
    /// An unknown subresource: 404 Status, body never read.
    UnknownPath,
    /// No credentials: 401, body never read.
    Anonymous,
    /// A content type the server does not decode: 415, body never read.
    MediaType,
    /// A method the collection does not allow: 405, body never read.
    Method,
    /// A body that is not JSON: read, then 400.
    Malformed,
}

const KINDS: [Rejection; 5] = [
    Rejection::UnknownPath,
    Rejection::Anonymous,
    Rejection::MediaType,
    Rejection::Method,
    Rejection::Malformed,
];

impl Rejection {
    fn expected(self, size: usize) -> StatusCode {
        match self {
            Rejection::Anonymous => StatusCode::UNAUTHORIZED,
            Rejection::UnknownPath => StatusCode::NOT_FOUND,
            // The content type and method are judged before the size.
            Rejection::MediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Rejection::Method => StatusCode::METHOD_NOT_ALLOWED,
            Rejection::Malformed if size > LIMIT => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::Malformed => StatusCode::BAD_REQUEST,
        }
    }
}

/// Spins both cores until dropped.
struct Burner {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Burner {
    fn start() -> Burner {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                    x
                })
            })
            .collect();
        Burner { stop, threads }
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

async fn send_all(server: &ServerProcess, http2: bool, seed: u64) -> (usize, Vec<String>) {
    let builder = |admin: bool| {
        let builder = if admin {
            server.admin_http_client_builder()
        } else {
            server.http_client_builder()
        };
        let builder = builder.pool_max_idle_per_host(8);
        if http2 {
            builder.http2_prior_knowledge()
        } else {
            builder.http1_only()
        }
        .build()
        .expect("client")
    };
    let admin = builder(true);
    let anonymous = builder(false);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Log-uniform sizes between 70 KiB and 3 MiB.
    let (low, high) = ((70u64 << 10) as f64, (3u64 << 20) as f64);
    let requests: Vec<(Rejection, usize)> = (0..REQUESTS_PER_PROTOCOL)
        .map(|i| {
            let size = (low * (high / low).powf(rng.random::<f64>())) as usize;
            (KINDS[i % KINDS.len()], size)
        })
        .collect();
    let bytes: usize = requests.iter().map(|(_, size)| size).sum();
    let base = server.url.clone();
    let failures: Vec<String> = futures::stream::iter(requests)
        .map(|(kind, size)| {
            let (client, method, path, content_type) = match kind {
                Rejection::UnknownPath => (
                    &admin,
                    Method::POST,
                    format!("{SVMS}/x/unknown"),
                    "application/json",
                ),
                Rejection::Anonymous => (
                    &anonymous,
                    Method::POST,
                    SVMS.to_string(),
                    "application/json",
                ),
                Rejection::MediaType => (&admin, Method::POST, SVMS.to_string(), "text/plain"),
                Rejection::Method => (&admin, Method::PUT, SVMS.to_string(), "application/json"),
                Rejection::Malformed => {
                    (&admin, Method::POST, SVMS.to_string(), "application/json")
                }
            };
            let request = client
                .request(method, format!("{base}{path}"))
                .header("content-type", content_type)
                .body(vec![b'{'; size]);
            async move {
                match request.send().await {
                    Ok(response) if response.status() == kind.expected(size) => {
                        // The body of the answer arrives too.
                        match response.bytes().await {
                            Ok(_) => None,
                            Err(err) => Some(format!("{kind:?} {size}: body: {err:?}")),
                        }
                    }
                    Ok(response) => Some(format!(
                        "{kind:?} {size}: {} instead of {}",
                        response.status(),
                        kind.expected(size)
                    )),
                    Err(err) => Some(format!("{kind:?} {size}: {err:?}")),
                }
            }
        })
        .buffer_unordered(8)
        .filter_map(futures::future::ready)
        .collect()
        .await;
    (bytes, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_requests_with_big_bodies_all_get_their_status_on_a_busy_machine() {
    let _heavy = crate::HEAVY.lock().await;
    let seed = crate::seed("big rejected bodies");
    let limit = LIMIT.to_string();
    let server =
        ServerProcess::start_with(Backend::Embedded, &["--max-request-body-bytes", &limit]);
    let _burner = Burner::start();
    for http2 in [false, true] {
        let started = Instant::now();
        let (bytes, failures) = send_all(&server, http2, seed).await;
        println!(
            "{} rejected requests over {}: {:.0} MiB of bodies in {:.1}s, {} without their status",
            REQUESTS_PER_PROTOCOL,
            if http2 {
                "HTTP/2"
            } else {
                "HTTP/1.1 keep-alive"
            },
            bytes as f64 / (1 << 20) as f64,
            started.elapsed().as_secs_f64(),
            failures.len()
        );
        assert!(
            failures.is_empty(),
            "{} of {REQUESTS_PER_PROTOCOL} requests did not get their status, e.g.:\n{}",
            failures.len(),
            failures
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // The server is fine afterwards.
    let ready = server
        .http_client()
        .get(format!("{}/readyz", server.url))
        .send()
        .await;
    assert_eq!(ready.expect("readyz").status(), 200);
}

/// Read one HTTP/1.1 response (head and a Content-Length body) from `stream`.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.expect("read head");
        assert_eq!(
            n,
            1,
            "connection closed inside the response head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).expect("head").to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().expect("length"))
        .expect("content-length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.expect("body");
    (head, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_body_keeps_the_connection_and_a_too_long_one_closes_it_cleanly() {
    let limit = LIMIT.to_string();
    let server =
        ServerProcess::start_with(Backend::Embedded, &["--max-request-body-bytes", &limit]);
    let config = client::tls_config(&server, true, &[b"http/1.1"]);
    let mut stream = client::connect(&server, config.clone()).await;
    // A 200 KiB body to a path that never reads it, then a second request on the connection.
    let body = vec![b'x'; 200 << 10];
    let head = format!(
        "POST {SVMS}/x/unknown HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&body).await.expect("body");
    let (head, status) = read_response(&mut stream).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    assert!(String::from_utf8_lossy(&status).contains("\"reason\":\"NotFound\""));
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("second request");
    let (head, body) = read_response(&mut stream).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(body, b"ok");

    // A body declared past the limit: 413, Connection: close, and a clean end (no reset) while
    // the client is still sending.
    let mut stream = client::connect(&server, config).await;
    let declared = 3 * LIMIT;
    let head = format!(
        "POST {SVMS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    let (mut reader, mut writer) = tokio::io::split(stream);
    let sender = tokio::spawn(async move {
        // Keep sending the body; the server may stop reading at any point.
        let chunk = vec![b'{'; 64 << 10];
        for _ in 0..(declared / chunk.len()) {
            if writer.write_all(&chunk).await.is_err() {
                break;
            }
        }
        writer
    });
    let (head, status) = read_response(&mut reader).await;
    assert!(head.starts_with("http/1.1 413"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(String::from_utf8_lossy(&status).contains("RequestEntityTooLarge"));
    let mut rest = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(60), reader.read_to_end(&mut rest)).await;
    let end = end.expect("the server closes the connection");
    assert!(end.is_ok(), "a clean end (close_notify), not {end:?}");
    assert!(rest.is_empty());
    let _ = sender.await;
}
