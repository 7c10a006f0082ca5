//! Clients that send their request bodies one byte a second, over HTTP/1.1 and TLS, as an
//! authenticated user: each POSTs a StorageVersionMigration whose body would take
//! [`BODY_BYTES`] seconds, reads what the server answers while it keeps sending, and when the
//! server has answered and closed the connection, starts again — until told to stop starting.
//! Shared by the edge test (`slow_bodies.rs`) and `make bench`'s edge bench (`benches/edge.rs`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use svm_test_support::edge_client as client;
use svm_test_support::server::ServerProcess;

/// The body each client declares and never finishes in time.
pub(crate) const BODY_BYTES: usize = 1000;
/// Between two bytes of a body.
const BYTE_EVERY: Duration = Duration::from_secs(1);
/// A hang guard on one request (far above any `--request-timeout` the callers use).
const ONE_REQUEST_AT_MOST: Duration = Duration::from_secs(120);

/// A kubeconfig for the server as the user of `token` (reviewed by the cluster).
pub(crate) fn token_kubeconfig(server: &ServerProcess, path: &Path, token: &str) {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(server.ca_pem());
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: svm\n  cluster:\n    server: {}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\n\
         contexts:\n- name: svm\n  context:\n    cluster: svm\n    user: user\n\
         current-context: svm\n",
        server.url
    );
    std::fs::write(path, config).expect("kubeconfig");
}

/// How one trickled request ended.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    /// The status code the server answered (0: none).
    pub(crate) code: u16,
    /// Whether the server closed the connection after answering.
    pub(crate) closed_by_server: bool,
    /// From the request's headers to its answer.
    pub(crate) answered_after: Duration,
    /// Body bytes sent by then.
    pub(crate) sent: usize,
}

/// The clients, trickling.
pub(crate) struct Tricklers {
    keep_going: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Vec<Ended>>>,
}

impl Tricklers {
    /// Start `count` clients sending `Authorization: Bearer <token>`.
    pub(crate) async fn start(server: &ServerProcess, count: usize, token: &str) -> Tricklers {
        let keep_going = Arc::new(AtomicBool::new(true));
        let config = client::tls_config(server, false, &[b"http/1.1"]);
        let mut tasks = Vec::with_capacity(count);
        for _ in 0..count {
            let keep_going = keep_going.clone();
            let config = config.clone();
            let addr = client::addr(server);
            let request = format!(
                "POST /apis/storagemigration.k8s.io/v1/storageversionmigrations HTTP/1.1\r\n\
                 Host: {addr}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {BODY_BYTES}\r\n\r\n"
            );
            tasks.push(tokio::spawn(async move {
                let mut ended = Vec::new();
                while keep_going.load(Ordering::Relaxed) {
                    ended.push(trickle_once(addr, config.clone(), &request).await);
                }
                ended
            }));
        }
        Tricklers { keep_going, tasks }
    }

    /// Start no new request; wait until every one under way is answered (or fails): how each
    /// one ended.
    pub(crate) async fn finish(self) -> Vec<Ended> {
        self.keep_going.store(false, Ordering::Relaxed);
        let mut all = Vec::new();
        for task in self.tasks {
            all.extend(task.await.expect("a trickler"));
        }
        all
    }
}

/// One request: headers, then a byte a second until the server answers and closes, the body
/// is sent, or the hang guard.
async fn trickle_once(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
    request: &str,
) -> Ended {
    let started = Instant::now();
    let failed = |sent| Ended {
        code: 0,
        closed_by_server: false,
        answered_after: started.elapsed(),
        sent,
    };
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return failed(0);
    };
    let _ = tcp.set_nodelay(true);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let Ok(stream) = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
    else {
        return failed(0);
    };
    let (mut reader, mut writer) = tokio::io::split(stream);
    if writer.write_all(request.as_bytes()).await.is_err() || writer.flush().await.is_err() {
        return failed(0);
    }
    let asked = Instant::now();
    let mut answer = Vec::new();
    let mut answered_after = None;
    let mut sent = 0;
    let mut tick = tokio::time::interval(BYTE_EVERY);
    tick.tick().await;
    let deadline = tokio::time::sleep(ONE_REQUEST_AT_MOST);
    tokio::pin!(deadline);
    let mut buf = [0u8; 4096];
    let closed_by_server = loop {
        tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break !answer.is_empty(),
                Ok(n) => {
                    answered_after.get_or_insert_with(|| asked.elapsed());
                    answer.extend_from_slice(&buf[..n]);
                }
            },
            _ = tick.tick(), if sent < BODY_BYTES => {
                // The server may have closed already: the read above says so next.
                if writer.write_all(b" ").await.is_ok() && writer.flush().await.is_ok() {
                    sent += 1;
                }
            }
            () = &mut deadline => break false,
        }
    };
    let code = std::str::from_utf8(&answer)
        .ok()
        .and_then(|text| text.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Ended {
        code,
        closed_by_server,
        answered_after: answered_after.unwrap_or_else(|| asked.elapsed()),
        sent,
    }
}
