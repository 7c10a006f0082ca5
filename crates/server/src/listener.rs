//! The HTTPS server: a hand-written accept loop (hyper-util over tokio-rustls, HTTP/1.1 and
//! HTTP/2 by ALPN) so each connection's TLS session is at hand: the peer's certificates are put
//! into every request's extensions as [`PeerCertificates`] for client-certificate
//! authentication. At most `--max-open-connections` are open at once (past that, new ones wait
//! in the listen backlog); each is served by [`super::connection`]. Shutdown stops accepting,
//! fails `/readyz`, ends watches and waits for in-flight requests up to the grace period.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Context, SetupResult as Result};
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::certs::{ensure_dev_certs, server_config, write_kubeconfig};
use super::connection::{self, ConnectionContext, ConnectionLimits};
use super::{AppState, ServeOptions, router};

pub use crate::auth::PeerCertificates;

/// A bound, not yet running server.
pub struct Serving {
    /// The address actually bound (the real port when `--secure-port 0`).
    pub local_addr: SocketAddr,
    /// The development CA, when development certificates are in use.
    pub ca_file: Option<PathBuf>,
    listener: TcpListener,
    tls: TlsAcceptor,
    state: AppState,
    grace: Duration,
    limits: ConnectionLimits,
}

/// Bind the listening socket, set up TLS (generating development certificates when none are
/// given) and write the kubeconfig.
pub async fn bind(opts: &ServeOptions, state: AppState) -> Result<Serving> {
    let (cert, key, ca_file, client) = match (&opts.tls_cert_file, &opts.tls_private_key_file) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone(), None, None),
        _ => {
            let dev = ensure_dev_certs(&opts.cert_dir)?;
            let client = Some((dev.client_cert.clone(), dev.client_key.clone()));
            (dev.serving_cert, dev.serving_key, Some(dev.ca_cert), client)
        }
    };
    let tls = match state.auth() {
        // Ask clients for certificates (front proxy, client CA) and reload the serving pair
        // when its files change (cert-manager rotations).
        Some(auth) => {
            let resolver = Arc::new(crate::auth::tls::ReloadingCertResolver::new(&cert, &key)?);
            resolver.spawn_watcher(Duration::from_secs(10));
            crate::auth::tls::server_config(resolver, auth.client_cert_verifier()?)?
        }
        None => server_config(&cert, &key)?,
    };
    let addr = SocketAddr::new(opts.bind_address, opts.secure_port);
    let state = state
        .with_max_request_body_bytes(opts.max_request_body_bytes)
        .with_inflight_limits(
            opts.max_requests_inflight,
            opts.max_mutating_requests_inflight,
        )
        .with_request_timeout(opts.request_timeout);
    let mut serving = bind_with_tls_config(addr, tls, state).await?;
    serving.grace = Duration::from_secs(opts.shutdown_grace_seconds);
    serving.ca_file = ca_file.clone();
    serving.limits = ConnectionLimits {
        tls_handshake_timeout: opts.tls_handshake_timeout,
        read_header_timeout: opts.read_header_timeout,
        idle_connection_timeout: opts.idle_connection_timeout,
        max_open_connections: fit_open_files(opts.max_open_connections),
    };
    if !opts.write_kubeconfig.as_os_str().is_empty() {
        let url = server_url(serving.local_addr);
        let client = client.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        write_kubeconfig(&opts.write_kubeconfig, &url, ca_file.as_deref(), client)?;
        tracing::info!(path = %opts.write_kubeconfig.display(), "wrote kubeconfig");
    }
    Ok(serving)
}

/// File descriptors kept for everything but client connections (etcd, the cluster client,
/// files).
const RESERVED_FILES: u64 = 256;

/// Raise the open-files limit to its hard limit (as Go programs do at start) and fit the
/// connection limit under it, so accepting never fails for lack of descriptors.
fn fit_open_files(wanted: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(err) => {
            tracing::warn!(error = %err, "could not read or raise the open-files limit");
            return wanted.max(1);
        }
    };
    let fits = usize::try_from(limit.saturating_sub(RESERVED_FILES).max(1)).unwrap_or(usize::MAX);
    if wanted > fits {
        tracing::warn!(
            wanted,
            open_files_limit = limit,
            using = fits,
            "--max-open-connections lowered to fit the open-files limit"
        );
    }
    wanted.min(fits).max(1)
}

/// Bind with a ready TLS configuration (e.g. one that verifies client certificates).
pub(crate) async fn bind_with_tls_config(
    addr: SocketAddr,
    tls: Arc<ServerConfig>,
    state: AppState,
) -> Result<Serving> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local_addr = listener.local_addr().context("reading the bound address")?;
    Ok(Serving {
        local_addr,
        ca_file: None,
        listener,
        tls: TlsAcceptor::from(tls),
        state,
        grace: Duration::from_secs(30),
        limits: ConnectionLimits::default(),
    })
}

/// `https://<addr>`, with loopback for a wildcard bind address.
fn server_url(addr: SocketAddr) -> String {
    let ip = if addr.ip().is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        addr.ip()
    };
    format!("https://{}", SocketAddr::new(ip, addr.port()))
}

/// Bind and serve until `shutdown` completes, then drain.
pub async fn serve(
    opts: ServeOptions,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let serving = bind(&opts, state).await?;
    serving.run(shutdown).await
}

impl Serving {
    /// `https://<address>:<port>` of the bound listener (loopback for a wildcard address).
    pub fn url(&self) -> String {
        server_url(self.local_addr)
    }

    /// Accept connections until `shutdown` completes, then drain in-flight requests.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        tracing::info!(
            address = %self.local_addr,
            max_open_connections = self.limits.max_open_connections,
            "serving HTTPS"
        );
        let slots = u32::try_from(self.limits.max_open_connections).unwrap_or(u32::MAX);
        let connections = Arc::new(Semaphore::new(slots as usize));
        let context = Arc::new(ConnectionContext::new(
            self.tls.clone(),
            router(self.state.clone()),
            self.limits.clone(),
            self.state.metrics.edge.clone(),
        ));
        tokio::pin!(shutdown);
        loop {
            // A free slot first: at the limit, connections wait in the kernel's backlog.
            let permit = tokio::select! {
                permit = connections.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = &mut shutdown => break,
            };
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        tokio::spawn(connection::serve(tcp, peer, context.clone(), permit));
                    }
                    Err(err) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                () = &mut shutdown => break,
            }
        }
        tracing::info!("shutting down: draining in-flight requests");
        self.state.begin_shutdown();
        drop(self.listener);
        context.closing.cancel();
        tokio::select! {
            // Every slot back: every connection closed.
            _ = connections.acquire_many(slots) => tracing::info!("all connections closed"),
            () = tokio::time::sleep(self.grace) => {
                tracing::warn!(grace = ?self.grace, "grace period over, closing remaining connections");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{HealthSwitch, registry_with, things};

    fn client(ca_file: &std::path::Path) -> reqwest::Client {
        let ca = std::fs::read(ca_file).expect("ca");
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("pem"))
            .build()
            .expect("client")
    }

    /// `serve` over real TLS with development certificates: HTTP/2 by ALPN, the kubeconfig,
    /// and a shutdown that ends an open watch and returns.
    #[tokio::test]
    async fn serves_https_and_drains_on_shutdown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = ServeOptions::for_dir(dir.path());
        let state = AppState::new(registry_with(things()), HealthSwitch::new(true));
        let serving = bind(&opts, state).await.expect("bind");
        let url = serving.url();
        assert_ne!(serving.local_addr.port(), 0);
        let ca_file = serving.ca_file.clone().expect("dev CA");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serving.run(async move {
            let _ = stopped.await;
        }));

        let kubeconfig: serde_json::Value = serde_norway::from_str(
            &std::fs::read_to_string(&opts.write_kubeconfig).expect("kubeconfig"),
        )
        .expect("yaml");
        assert_eq!(kubeconfig["clusters"][0]["cluster"]["server"], url.as_str());

        let client = client(&ca_file);
        let discovery = client
            .get(format!("{url}/apis/test.example.io/v1"))
            .send()
            .await
            .expect("request");
        assert_eq!(discovery.status(), reqwest::StatusCode::OK);
        assert_eq!(discovery.version(), reqwest::Version::HTTP_2);
        let body: serde_json::Value = discovery.json().await.expect("json");
        assert_eq!(body["kind"], "APIResourceList");

        // The serving certificate also names localhost.
        let port = url.rsplit(':').next().unwrap_or_default();
        let by_name = client
            .get(format!("https://localhost:{port}/healthz"))
            .send()
            .await
            .expect("localhost");
        assert_eq!(by_name.text().await.expect("text"), "ok");

        let created = client
            .post(format!("{url}/apis/test.example.io/v1/things"))
            .header("content-type", "application/json")
            .body(r#"{"apiVersion":"test.example.io/v1","kind":"Thing","metadata":{"name":"a"}}"#)
            .send()
            .await
            .expect("create");
        assert_eq!(created.status(), reqwest::StatusCode::CREATED);

        let mut watch = client
            .get(format!(
                "{url}/apis/test.example.io/v1/things?watch=1&allowWatchBookmarks=true"
            ))
            .send()
            .await
            .expect("watch");
        assert_eq!(watch.status(), reqwest::StatusCode::OK);
        let mut received = Vec::new();
        while !received.ends_with(b"\"true\"}}}}\n") {
            let chunk = watch.chunk().await.expect("chunk").expect("open stream");
            received.extend_from_slice(&chunk);
        }
        let text = String::from_utf8(received).expect("utf8");
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.starts_with(r#"{"type":"ADDED""#));

        stop.send(()).expect("server running");
        // The open watch ends (the stream completes) and the server returns.
        let rest = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(chunk) = watch.chunk().await.transpose() {
                chunk.expect("clean end");
            }
        })
        .await;
        assert!(rest.is_ok(), "the watch did not end on shutdown");
        let result = tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("server returned")
            .expect("no panic");
        assert!(result.is_ok());
    }
}
