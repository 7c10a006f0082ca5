//! etcd over TLS, with kube-apiserver's flags: `--etcd-cafile` (the CA etcd's serving
//! certificate must chain to), `--etcd-certfile` and `--etcd-keyfile` (the client certificate
//! an etcd run with `--client-cert-auth` requires).
//!
//! The files are read and checked at start, and every endpoint gets one TLS handshake of our
//! own before the gRPC client takes over: the gRPC client retries a failing handshake until its
//! timeout and then reports only "transport error", while the handshake tells exactly what is
//! wrong (an unknown CA, a certificate for another name, a client certificate etcd refused),
//! which the error then names along with the file to fix.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::io::AsyncReadExt;

/// The three flags' files, as given.
#[derive(Debug, Clone, Default)]
pub struct EtcdTlsFiles {
    /// `--etcd-cafile`: the CA etcd's serving certificate must chain to.
    pub ca: Option<PathBuf>,
    /// `--etcd-certfile`: our client certificate (chain), PEM.
    pub cert: Option<PathBuf>,
    /// `--etcd-keyfile`: the client certificate's private key, PEM.
    pub key: Option<PathBuf>,
}

/// What is wrong with the files.
#[derive(Debug, thiserror::Error)]
pub enum EtcdTlsError {
    /// A file could not be read.
    #[error("{flag} {}: {source}", path.display())]
    Read {
        /// The flag that named the file.
        flag: &'static str,
        /// The file as given.
        path: PathBuf,
        /// Why the read failed.
        #[source]
        source: std::io::Error,
    },
    /// A file was read but does not hold what its flag needs (no PEM certificate, an unusable
    /// key).
    #[error("{flag} {}: {what}", path.display())]
    Invalid {
        /// The flag that named the file.
        flag: &'static str,
        /// The file as given.
        path: PathBuf,
        /// What is wrong with its contents.
        what: String,
    },
    /// One of `--etcd-certfile` and `--etcd-keyfile` is given without the other; holds the
    /// missing flag.
    #[error("--etcd-certfile and --etcd-keyfile come together: {0} is missing")]
    Incomplete(&'static str),
    /// A client certificate is given without a CA to check etcd's serving certificate against.
    #[error(
        "--etcd-certfile and --etcd-keyfile need --etcd-cafile (the CA that signed etcd's serving certificate)"
    )]
    NoCa,
    /// The key in `--etcd-keyfile` is not the private key of the certificate in
    /// `--etcd-certfile`.
    #[error(
        "the key in --etcd-keyfile {} does not belong to the certificate in --etcd-certfile {}",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// `--etcd-certfile` as given.
        cert: PathBuf,
        /// `--etcd-keyfile` as given.
        key: PathBuf,
    },
}

/// Loaded and checked TLS material for the etcd client.
#[derive(Clone)]
pub struct EtcdTls {
    pub(super) files: EtcdTlsFiles,
    pub(super) ca_pem: Vec<u8>,
    /// Client certificate chain and key, PEM.
    pub(super) identity: Option<(Vec<u8>, Vec<u8>)>,
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl EtcdTlsFiles {
    /// `None` when no flag is given (plain `http://` endpoints).
    pub fn load(&self) -> Result<Option<EtcdTls>, EtcdTlsError> {
        let ca_path = match (&self.ca, &self.cert, &self.key) {
            (None, None, None) => return Ok(None),
            (_, Some(_), None) => return Err(EtcdTlsError::Incomplete("--etcd-keyfile")),
            (_, None, Some(_)) => return Err(EtcdTlsError::Incomplete("--etcd-certfile")),
            (None, _, _) => return Err(EtcdTlsError::NoCa),
            (Some(ca), _, _) => ca,
        };
        let ca_pem = read("--etcd-cafile", ca_path)?;
        let cas = certificates("--etcd-cafile", ca_path, &ca_pem)?;
        let mut roots = RootCertStore::empty();
        for ca in cas {
            roots
                .add(ca)
                .map_err(|err| invalid("--etcd-cafile", ca_path, err))?;
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|err| invalid("--etcd-cafile", ca_path, err))?
            .with_root_certificates(roots);
        let (mut config, identity) = match (&self.cert, &self.key) {
            (Some(cert_path), Some(key_path)) => {
                let cert_pem = read("--etcd-certfile", cert_path)?;
                let key_pem = read("--etcd-keyfile", key_path)?;
                let chain = certificates("--etcd-certfile", cert_path, &cert_pem)?;
                let key = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|err| invalid("--etcd-keyfile", key_path, err))?;
                let mismatch = || EtcdTlsError::KeyMismatch {
                    cert: cert_path.clone(),
                    key: key_path.clone(),
                };
                rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider())
                    .map_err(|_| mismatch())?;
                let config = builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|_| mismatch())?;
                (config, Some((cert_pem, key_pem)))
            }
            _ => (builder.with_no_client_auth(), None),
        };
        // etcd serves gRPC over HTTP/2 only.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Some(EtcdTls {
            files: self.clone(),
            ca_pem,
            identity,
            config: Arc::new(config),
        }))
    }
}

impl EtcdTls {
    /// One TLS handshake with the etcd at `endpoint` (`https://host:port`), then a short read:
    /// etcd speaks first on HTTP/2 (its SETTINGS), or sends the alert that refuses our client
    /// certificate (in TLS 1.3 that comes only after the handshake). `Err` says what is wrong
    /// and which file to look at.
    pub(super) async fn probe(&self, endpoint: &str, timeout: Duration) -> Result<(), String> {
        let Some(authority) = endpoint.strip_prefix("https://") else {
            return Err(format!(
                "{endpoint}: --etcd-cafile is given, so etcd is reached over TLS: write the endpoint as https://host:port"
            ));
        };
        let authority = authority.trim_end_matches('/');
        let host = host_of(authority);
        let name = ServerName::try_from(host.to_string())
            .map_err(|err| format!("{endpoint}: {host:?} is not a host name: {err}"))?;
        let handshake = async {
            let tcp = tokio::net::TcpStream::connect(authority)
                .await
                .map_err(|err| Failure::Connect(err.to_string()))?;
            let connector = tokio_rustls::TlsConnector::from(self.config.clone());
            let mut tls = connector.connect(name, tcp).await.map_err(Failure::Tls)?;
            let mut first = [0u8; 1];
            match tokio::time::timeout(Duration::from_secs(2), tls.read(&mut first)).await {
                Ok(Ok(_)) | Err(_) => Ok(()),
                Ok(Err(err)) => Err(Failure::Tls(err)),
            }
        };
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(failure)) => Err(format!("{endpoint}: {}", self.explain(failure))),
            Err(_) => Err(format!(
                "{endpoint}: no TLS handshake within {timeout:?} (is it etcd's client port?)"
            )),
        }
    }

    fn explain(&self, failure: Failure) -> String {
        let err = match failure {
            Failure::Connect(err) => return format!("cannot connect: {err}"),
            Failure::Tls(err) => err,
        };
        let file = |path: &Option<PathBuf>| {
            path.as_deref()
                .map_or_else(|| "(none)".to_string(), |p| p.display().to_string())
        };
        let ca = file(&self.files.ca);
        let cert = file(&self.files.cert);
        let rustls_error = err
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .cloned();
        match rustls_error {
            Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer))
            | Some(rustls::Error::InvalidCertificate(CertificateError::BadSignature)) => format!(
                "etcd's serving certificate is not signed by the CA in --etcd-cafile {ca} ({err})"
            ),
            Some(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => format!(
                "etcd's serving certificate is not valid for the name in --etcd-servers ({err})"
            ),
            Some(rustls::Error::InvalidCertificate(_)) => {
                format!("etcd's serving certificate is not acceptable ({err})")
            }
            // Without a certificate of ours, any refusal is for the lack of one (Go's etcd
            // answers bad_certificate, TLS 1.3 says certificate_required).
            Some(rustls::Error::AlertReceived(_)) if self.identity.is_none() => format!(
                "etcd requires a client certificate: give --etcd-certfile and --etcd-keyfile ({err})"
            ),
            Some(rustls::Error::AlertReceived(_)) => format!(
                "etcd refused the client certificate in --etcd-certfile {cert} (is it signed by \
                 the CA etcd trusts, --trusted-ca-file?) ({err})"
            ),
            _ => format!("TLS with etcd failed: {err}"),
        }
    }
}

enum Failure {
    Connect(String),
    Tls(std::io::Error),
}

/// `host` of `host:port` or `[v6]:port`.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, EtcdTlsError> {
    std::fs::read(path).map_err(|source| EtcdTlsError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

fn invalid(flag: &'static str, path: &Path, what: impl std::fmt::Display) -> EtcdTlsError {
    EtcdTlsError::Invalid {
        flag,
        path: path.to_path_buf(),
        what: what.to_string(),
    }
}

fn certificates(
    flag: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, EtcdTlsError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| invalid(flag, path, format!("not a PEM certificate: {err}")))?;
    if certificates.is_empty() {
        return Err(invalid(flag, path, "no PEM certificate in the file"));
    }
    Ok(certificates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use svm_devcerts::Ca;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("dir");
            let ca = Ca::new("etcd-ca").expect("ca");
            let client = ca.issue_client("svm-apiserver", &[]).expect("client");
            let other = ca.issue_client("other", &[]).expect("other");
            for (name, text) in [
                ("ca.crt", ca.cert_pem()),
                ("client.crt", client.cert_pem),
                ("client.key", client.key_pem),
                ("other.key", other.key_pem),
                ("garbage.crt", "not a certificate".to_string()),
            ] {
                std::fs::write(dir.path().join(name), text).expect("write");
            }
            Files { dir }
        }

        fn path(&self, name: &str) -> Option<PathBuf> {
            Some(self.dir.path().join(name))
        }
    }

    fn load(ca: Option<PathBuf>, cert: Option<PathBuf>, key: Option<PathBuf>) -> String {
        match (EtcdTlsFiles { ca, cert, key }).load() {
            Ok(_) => "ok".into(),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn good_files_load_and_bad_ones_are_named() {
        let f = Files::new();
        assert_eq!(load(None, None, None), "ok");
        assert_eq!(load(f.path("ca.crt"), None, None), "ok");
        assert_eq!(
            load(f.path("ca.crt"), f.path("client.crt"), f.path("client.key")),
            "ok"
        );
        let missing = load(f.path("nope.crt"), None, None);
        assert!(missing.starts_with("--etcd-cafile "), "{missing}");
        assert!(missing.contains("nope.crt"), "{missing}");
        let garbage = load(f.path("garbage.crt"), None, None);
        assert!(garbage.contains("--etcd-cafile"), "{garbage}");
        assert!(garbage.contains("no PEM certificate"), "{garbage}");
        let mismatch = load(f.path("ca.crt"), f.path("client.crt"), f.path("other.key"));
        assert!(mismatch.contains("does not belong"), "{mismatch}");
        assert!(mismatch.contains("other.key"), "{mismatch}");
        assert!(load(f.path("ca.crt"), f.path("client.crt"), None).contains("--etcd-keyfile"));
        assert!(load(None, f.path("client.crt"), f.path("client.key")).contains("--etcd-cafile"));
        let no_key_file = load(f.path("ca.crt"), f.path("client.crt"), f.path("gone.key"));
        assert!(no_key_file.starts_with("--etcd-keyfile"), "{no_key_file}");
    }

    #[test]
    fn hosts_of_authorities() {
        assert_eq!(host_of("127.0.0.1:2379"), "127.0.0.1");
        assert_eq!(host_of("etcd.svc:2379"), "etcd.svc");
        assert_eq!(host_of("[::1]:2379"), "::1");
    }
}
