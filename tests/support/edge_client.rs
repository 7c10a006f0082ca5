//! Raw TLS clients for what reqwest does not do on purpose (stall a handshake, never finish the
//! headers, never read a response), and reading the server's metrics.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::server::ServerProcess;

/// The server's `host:port`.
pub fn addr(server: &ServerProcess) -> SocketAddr {
    server
        .url
        .trim_start_matches("https://")
        .parse()
        .expect("server address")
}

/// A rustls client trusting the server's dev CA, as the dev admin (system:masters) or anonymous,
/// offering `alpn`.
pub fn tls_config(
    server: &ServerProcess,
    admin: bool,
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&server.ca_pem()) {
        roots.add(ca.expect("CA pem")).expect("CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut config = if admin {
        let pem = server.admin_identity_pem();
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .expect("admin cert");
        let key = PrivateKeyDer::from_pem_slice(&pem).expect("admin key");
        builder.with_client_auth_cert(chain, key).expect("identity")
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to the server (HTTP/1.1 by ALPN unless the config says otherwise).
pub async fn connect(
    server: &ServerProcess,
    config: Arc<rustls::ClientConfig>,
) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr(server)).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .expect("TLS handshake")
}

/// The sum of a metric's samples in the server's `/metrics` (0 when absent).
pub async fn metric(server: &ServerProcess, name: &str) -> f64 {
    metric_where(server, name, "").await
}

/// The sum of a metric's samples whose labels contain `labels`.
pub async fn metric_where(server: &ServerProcess, name: &str, labels: &str) -> f64 {
    let text = server.scrape(&server.http_client()).await;
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
