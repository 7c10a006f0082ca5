//! The serving flags (`svm-apiserver serve ...`), named like kube-apiserver's.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// kube-apiserver's default `--max-request-body-bytes`: 3 MiB.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// kube-apiserver's default `--request-timeout`.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// kube-apiserver's `--max-requests-inflight` default.
pub(crate) const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
/// kube-apiserver's `--max-mutating-requests-inflight` default.
pub(crate) const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;

/// The serving flags of `serve`: address, certificates, limits and timeouts.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeOptions {
    /// The IP address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,

    /// The port to serve HTTPS on; 0 picks a free port.
    #[arg(long, default_value_t = 8443)]
    pub secure_port: u16,

    /// PEM serving certificate (chain). Without it, a development CA and serving certificate
    /// are created in --cert-dir (or reused from there).
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Where development certificates are generated when no certificate is given.
    #[arg(long, default_value = ".dev/certs")]
    pub cert_dir: PathBuf,

    /// Write a kubeconfig pointing at this server (trusting the development CA) here at start;
    /// an empty value writes none.
    #[arg(long, default_value = ".dev/kubeconfig", value_parser = path_or_empty)]
    pub write_kubeconfig: PathBuf,

    /// The largest accepted request body; larger ones get 413.
    #[arg(long, default_value_t = DEFAULT_MAX_REQUEST_BODY_BYTES)]
    pub max_request_body_bytes: usize,

    /// How long a shutdown waits for in-flight requests before closing connections.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_seconds: u64,

    /// The most non-mutating requests served at once (long-running watches excluded); more get
    /// 429 with Retry-After. 0: no limit. As kube-apiserver's flag.
    #[arg(long, default_value_t = DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,

    /// The most mutating requests (create, update, patch, delete) served at once; more get 429
    /// with Retry-After. 0: no limit. As kube-apiserver's flag.
    #[arg(long, default_value_t = DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    pub max_mutating_requests_inflight: usize,

    /// The most client connections open at once; past it the server stops accepting until one
    /// closes (they wait in the listen backlog). Lowered to fit the open-files limit.
    #[arg(long, default_value_t = 8192)]
    pub max_open_connections: usize,

    /// How long a client may take to complete the TLS handshake (Go duration: 10s, 1m).
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub tls_handshake_timeout: Duration,

    /// How long a client may take to send a request's headers, counted from when the
    /// connection waits for them — so also how long an idle HTTP/1.1 keep-alive connection is
    /// kept (kube-apiserver: 32s).
    #[arg(long, default_value = "32s", value_parser = svm_registry::duration::go_duration)]
    pub read_header_timeout: Duration,

    /// How long an HTTP/2 connection with no request in flight is kept before it is closed
    /// with GOAWAY (kube-apiserver: 90s).
    #[arg(long, default_value = "90s", value_parser = svm_registry::duration::go_duration)]
    pub idle_connection_timeout: Duration,

    /// How long a request may take, from its headers to its answer — authentication,
    /// authorization, reading its body and serving it — before it is answered 504 Timeout and
    /// gives back its in-flight slot; watches are not limited (as kube-apiserver's flag,
    /// whose default this is; a request's `?timeout=` may shorten it). 0: no timeout.
    #[arg(long, default_value = "1m", value_parser = svm_registry::duration::go_duration)]
    pub request_timeout: Duration,
}

impl ServeOptions {
    /// Options for tests: loopback, a free port, certificates and kubeconfig under `dir`.
    pub fn for_dir(dir: &std::path::Path) -> Self {
        Self {
            bind_address: IpAddr::from([127, 0, 0, 1]),
            secure_port: 0,
            tls_cert_file: None,
            tls_private_key_file: None,
            cert_dir: dir.join("certs"),
            write_kubeconfig: dir.join("kubeconfig"),
            max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES,
            shutdown_grace_seconds: 5,
            max_requests_inflight: DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight: DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            max_open_connections: 8192,
            tls_handshake_timeout: Duration::from_secs(10),
            read_header_timeout: Duration::from_secs(32),
            idle_connection_timeout: Duration::from_secs(90),
            request_timeout: Duration::from_secs(60),
        }
    }
}

/// A path, where the empty value means "none" (clap's own path parser refuses it, which made
/// deploy/'s `--write-kubeconfig=` fail at start).
fn path_or_empty(value: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeOptions,
    }

    #[test]
    fn defaults_match_kube_apiserver_style() {
        let cli = Cli::try_parse_from(["x"]).expect("parse");
        assert_eq!(cli.serve.bind_address.to_string(), "127.0.0.1");
        assert_eq!(cli.serve.secure_port, 8443);
        assert_eq!(cli.serve.max_request_body_bytes, 3_145_728);
        assert_eq!(cli.serve.cert_dir, PathBuf::from(".dev/certs"));
        assert_eq!(cli.serve.write_kubeconfig, PathBuf::from(".dev/kubeconfig"));
        assert_eq!(cli.serve.max_requests_inflight, 400);
        assert_eq!(cli.serve.max_mutating_requests_inflight, 200);
        assert_eq!(cli.serve.tls_handshake_timeout, Duration::from_secs(10));
        assert_eq!(cli.serve.read_header_timeout, Duration::from_secs(32));
        assert_eq!(cli.serve.idle_connection_timeout, Duration::from_secs(90));
        assert_eq!(cli.serve.request_timeout, Duration::from_secs(60));
    }

    #[test]
    fn an_empty_write_kubeconfig_writes_none() {
        let cli = Cli::try_parse_from(["x", "--write-kubeconfig="]).expect("parse");
        assert_eq!(cli.serve.write_kubeconfig, PathBuf::new());
    }

    #[test]
    fn cert_and_key_come_together() {
        assert!(Cli::try_parse_from(["x", "--tls-cert-file", "a.crt"]).is_err());
        let cli = Cli::try_parse_from([
            "x",
            "--tls-cert-file",
            "a.crt",
            "--tls-private-key-file",
            "a.key",
            "--secure-port",
            "0",
        ])
        .expect("parse");
        assert_eq!(cli.serve.secure_port, 0);
    }
}
