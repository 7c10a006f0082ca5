//! TLS for the server: the client-certificate verifier (either CA, or no certificate at all),
//! a serving certificate that is reloaded when its files change, and the rustls configuration
//! that puts them together.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::error::{Context, SetupError, SetupResult as Result};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use super::crypto::crypto_provider;
use super::x509::CaBundle;

/// The certificates the client presented in the TLS handshake, leaf first (empty when it sent
/// none). The accept loop puts one into every request's extensions; the authenticator reads it.
#[derive(Debug, Clone, Default)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

impl PeerCertificates {
    /// The peer certificates of an accepted TLS connection.
    pub fn of(connection: &rustls::ServerConnection) -> Self {
        let certificates = connection
            .peer_certificates()
            .map(|certs| certs.iter().map(|c| c.clone().into_owned()).collect())
            .unwrap_or_default();
        PeerCertificates(Arc::new(certificates))
    }
}

/// A verifier that accepts a client certificate issued by any of `cas` and also clients that
/// send none (they may authenticate with a bearer token, or be anonymous); with no CA at all,
/// client certificates are not requested. The authenticator checks again, per CA, which one
/// issued a presented certificate: the handshake only proves it came from one of them.
pub fn client_cert_verifier(cas: &[&CaBundle]) -> Result<Arc<dyn ClientCertVerifier>> {
    if cas.is_empty() {
        return Ok(WebPkiClientVerifier::no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    for bundle in cas {
        for cert in bundle.root_store()?.roots {
            roots.roots.push(cert);
        }
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto_provider())
        .allow_unauthenticated()
        .build()
        .context("building the client certificate verifier")
}

/// Read a PEM certificate chain and its private key into a rustls identity, checking that the
/// key belongs to the leaf certificate.
pub fn load_certified_key(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey> {
    let cert_pem =
        std::fs::read(cert_file).with_context(|| format!("reading {}", cert_file.display()))?;
    let key_pem =
        std::fs::read(key_file).with_context(|| format!("reading {}", key_file.display()))?;
    certified_key_from_pem(&cert_pem, &key_pem)
        .with_context(|| format!("loading {} and {}", cert_file.display(), key_file.display()))
}

fn certified_key_from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("reading the certificate PEM")?;
    if chain.is_empty() {
        return Err(SetupError::invalid(
            "no certificate in the certificate file",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("reading the private key PEM")?;
    let certified = CertifiedKey::from_der(chain, key, &crypto_provider())
        .context("the private key does not fit the certificate")?;
    Ok(certified)
}

/// The serving certificate, swapped in place when its files change: new handshakes use the new
/// certificate, established connections keep theirs. A change that does not load (half-written
/// files, a key that does not match) keeps the previous certificate.
#[derive(Debug)]
pub struct ReloadingCertResolver {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    /// sha256 of the certificate and key files as last seen (loaded or not), so an unchanged or
    /// still-broken pair is not parsed again on every tick.
    fingerprint: [u8; 32],
}

impl ReloadingCertResolver {
    /// Load the pair; an error here is fatal (the server cannot start without a certificate).
    pub fn new(cert_file: &Path, key_file: &Path) -> Result<Self> {
        let (cert_pem, key_pem) = read_pair(cert_file, key_file)?;
        let key = certified_key_from_pem(&cert_pem, &key_pem).with_context(|| {
            format!("loading {} and {}", cert_file.display(), key_file.display())
        })?;
        Ok(ReloadingCertResolver {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            current: RwLock::new(Loaded {
                key: Arc::new(key),
                fingerprint: fingerprint(&cert_pem, &key_pem),
            }),
        })
    }

    /// The certificate new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.read().key.clone()
    }

    /// Re-read the files: `Ok(true)` when a new certificate is now served, `Ok(false)` when the
    /// files are unchanged, an error (and the old certificate still served) when they changed
    /// but do not load.
    pub fn reload(&self) -> Result<bool> {
        let (cert_pem, key_pem) = read_pair(&self.cert_file, &self.key_file)?;
        let seen = fingerprint(&cert_pem, &key_pem);
        if seen == self.read().fingerprint {
            return Ok(false);
        }
        let loaded = certified_key_from_pem(&cert_pem, &key_pem);
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        current.fingerprint = seen;
        let key = loaded.with_context(|| {
            format!(
                "reloading {} and {} (still serving the previous certificate)",
                self.cert_file.display(),
                self.key_file.display()
            )
        })?;
        current.key = Arc::new(key);
        Ok(true)
    }

    /// Check the files every `interval` until the returned task is aborted (or the runtime
    /// stops). Kubernetes updates a mounted Secret by swapping a symlink, so files are compared
    /// by content rather than by modification time.
    pub fn spawn_watcher(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let resolver = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let checked = Arc::clone(&resolver);
                match tokio::task::spawn_blocking(move || checked.reload()).await {
                    Ok(Ok(true)) => tracing::info!(
                        cert = %resolver.cert_file.display(),
                        "serving certificate reloaded"
                    ),
                    Ok(Ok(false)) => {}
                    Ok(Err(err)) => {
                        tracing::warn!(error = %format!("{err:#}"), "serving certificate not reloaded")
                    }
                    Err(err) => tracing::warn!(error = %err, "serving certificate check failed"),
                }
            }
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        // Writers replace whole values, so a poisoned lock still holds a usable certificate.
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn read_pair(cert_file: &Path, key_file: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    let cert =
        std::fs::read(cert_file).with_context(|| format!("reading {}", cert_file.display()))?;
    let key = std::fs::read(key_file).with_context(|| format!("reading {}", key_file.display()))?;
    Ok((cert, key))
}

fn fingerprint(cert_pem: &[u8], key_pem: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update((cert_pem.len() as u64).to_be_bytes());
    hash.update(cert_pem);
    hash.update(key_pem);
    hash.finalize().into()
}

/// The server's rustls configuration: HTTP/2 and HTTP/1.1 by ALPN, the (reloading) serving
/// certificate, and the client-certificate verifier.
pub fn server_config(
    certificate: Arc<dyn ResolvesServerCert>,
    client_verifier: Arc<dyn ClientCertVerifier>,
) -> Result<Arc<ServerConfig>> {
    let mut config = ServerConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_client_cert_verifier(client_verifier)
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use svm_devcerts::Ca;

    fn write_pair(dir: &Path, ca: &Ca, cn: &str) -> (PathBuf, PathBuf, CertificateDer<'static>) {
        let issued = ca
            .issue_serving(cn, &["localhost".to_string()])
            .expect("serving cert");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &issued.cert_pem).expect("write cert");
        std::fs::write(&key, &issued.key_pem).expect("write key");
        (cert, key, issued.der)
    }

    #[test]
    fn reload_swaps_only_a_changed_and_valid_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("ca").expect("ca");
        let (cert, key, first) = write_pair(dir.path(), &ca, "first");
        let resolver = ReloadingCertResolver::new(&cert, &key).expect("load");
        assert_eq!(resolver.current().cert[0], first);
        assert!(!resolver.reload().expect("unchanged"));

        let (_, _, second) = write_pair(dir.path(), &ca, "second");
        assert!(resolver.reload().expect("changed"));
        assert_eq!(resolver.current().cert[0], second);

        // A new certificate with the old key (half of a rotation): rejected, old one kept.
        let third = ca
            .issue_serving("third", &["localhost".to_string()])
            .expect("cert");
        std::fs::write(&cert, &third.cert_pem).expect("write");
        assert!(resolver.reload().is_err());
        assert_eq!(resolver.current().cert[0], second);
        // Garbage: rejected too.
        std::fs::write(&key, "not a key").expect("write");
        assert!(resolver.reload().is_err());
        assert_eq!(resolver.current().cert[0], second);
        // The rotation completes: served.
        std::fs::write(&key, &third.key_pem).expect("write");
        assert!(resolver.reload().expect("completed"));
        assert_eq!(resolver.current().cert[0], third.der);
    }

    #[tokio::test]
    async fn the_watcher_picks_up_rotated_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("ca").expect("ca");
        let (cert, key, first) = write_pair(dir.path(), &ca, "first");
        let resolver = Arc::new(ReloadingCertResolver::new(&cert, &key).expect("load"));
        let watcher = resolver.spawn_watcher(Duration::from_millis(20));
        let (_, _, second) = write_pair(dir.path(), &ca, "second");
        assert_ne!(first, second);
        // Wait for the swap; the deadline only keeps a broken watcher from hanging the run.
        let swapped = tokio::time::timeout(Duration::from_secs(60), async {
            while resolver.current().cert[0] != second {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        watcher.abort();
        assert!(swapped.is_ok(), "the rotated certificate was never served");
    }

    #[test]
    fn a_missing_or_mismatched_pair_does_not_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("ca").expect("ca");
        let (cert, key, _) = write_pair(dir.path(), &ca, "a");
        assert!(ReloadingCertResolver::new(&cert, &dir.path().join("missing")).is_err());
        let other = ca.issue_serving("b", &["localhost".into()]).expect("b");
        std::fs::write(&key, other.key_pem).expect("write");
        let err = ReloadingCertResolver::new(&cert, &key).expect_err("mismatch");
        assert!(format!("{err:#}").contains("does not fit"), "{err:#}");
    }

    #[test]
    fn verifier_without_cas_does_not_ask_for_certificates() {
        let verifier = client_cert_verifier(&[]).expect("verifier");
        assert!(!verifier.offer_client_auth());
        let ca = crate::auth::devcerts::Ca::new("ca");
        let bundle = ca.bundle();
        let verifier = client_cert_verifier(&[&bundle]).expect("verifier");
        assert!(verifier.offer_client_auth());
        assert!(!verifier.client_auth_mandatory());
    }
}
