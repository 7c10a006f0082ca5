//! Client certificates: CA bundles, verifying a presented chain against one CA bundle, and the
//! subject fields authentication reads (CN = user, O = groups).

use std::path::Path;
use std::sync::Arc;

use crate::error::{Context, SetupError, SetupResult as Result};
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

/// PEM CA certificates, from a file or from the extension-apiserver-authentication ConfigMap.
#[derive(Debug, Clone)]
pub struct CaBundle {
    /// The CA certificates, in file order; never empty.
    pub certificates: Vec<CertificateDer<'static>>,
    /// Where it came from, for messages.
    pub source: String,
}

impl CaBundle {
    /// The certificates of a PEM bundle; an error when it holds none. `source` names the bundle
    /// in messages.
    pub fn from_pem(pem: &[u8], source: impl Into<String>) -> Result<Self> {
        let source = source.into();
        let certificates = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("reading PEM certificates of {source}"))?;
        if certificates.is_empty() {
            return Err(SetupError::invalid(format!(
                "{source} holds no PEM certificate"
            )));
        }
        Ok(CaBundle {
            certificates,
            source,
        })
    }

    /// The certificates of the PEM file at `path`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_pem(&pem, path.display().to_string())
    }

    /// One bundle trusting both: this one's certificates, then `other`'s.
    pub fn joined(&self, other: &CaBundle) -> CaBundle {
        CaBundle {
            certificates: self
                .certificates
                .iter()
                .chain(&other.certificates)
                .cloned()
                .collect(),
            source: format!("{} and {}", self.source, other.source),
        }
    }

    pub(crate) fn root_store(&self) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        for cert in &self.certificates {
            roots
                .add(cert.clone())
                .with_context(|| format!("a CA certificate of {} is not usable", self.source))?;
        }
        Ok(roots)
    }
}

/// Verifies a client certificate chain against one CA bundle (signature chain, validity period,
/// the clientAuth extended key usage), the same checks the TLS handshake makes.
#[derive(Debug, Clone)]
pub(crate) struct CaVerifier {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl CaVerifier {
    pub(crate) fn new(bundle: &CaBundle) -> Result<Self> {
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(bundle.root_store()?),
            super::crypto::crypto_provider(),
        )
        .build()
        .with_context(|| format!("building a verifier for {}", bundle.source))?;
        Ok(CaVerifier { verifier })
    }

    /// Ok when the leaf (first) certificate chains to this CA through the others.
    pub(crate) fn verify(&self, chain: &[CertificateDer<'static>]) -> Result<(), String> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err("no client certificate".into());
        };
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|err| err.to_string())
    }
}

/// The subject fields of a certificate that name a Kubernetes user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
}

impl Subject {
    pub(crate) fn of(cert: &CertificateDer<'_>) -> Result<Self, String> {
        let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
            .map_err(|err| format!("unreadable client certificate: {err}"))?;
        let subject = parsed.subject();
        let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
            attr.as_str()
                .map(str::to_string)
                .map_err(|err| format!("unreadable subject attribute: {err}"))
        };
        let common_name = match subject.iter_common_name().next() {
            Some(cn) => text(cn)?,
            None => String::new(),
        };
        let organizations = subject
            .iter_organization()
            .map(text)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Subject {
            common_name,
            organizations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::devcerts::{Ca, client_cert};

    #[test]
    fn a_chain_verifies_against_its_own_ca_only() {
        let ca = Ca::new("ca-a");
        let other = Ca::new("ca-b");
        let (chain, _) = client_cert(&ca, "jane", &["dev"]);
        assert!(
            CaVerifier::new(&ca.bundle())
                .expect("verifier")
                .verify(&chain)
                .is_ok()
        );
        let wrong = CaVerifier::new(&other.bundle())
            .expect("verifier")
            .verify(&chain);
        assert!(wrong.is_err());
        assert!(
            CaVerifier::new(&ca.bundle())
                .expect("verifier")
                .verify(&[])
                .is_err()
        );
    }

    #[test]
    fn subject_names_the_user_and_groups() {
        let ca = Ca::new("ca");
        let (chain, _) = client_cert(&ca, "jane", &["dev"]);
        let subject = Subject::of(&chain[0]).expect("subject");
        assert_eq!(subject.common_name, "jane");
        assert_eq!(subject.organizations, vec!["dev"]);
        assert!(Subject::of(&CertificateDer::from(vec![1, 2, 3])).is_err());
    }

    #[test]
    fn bundles_need_at_least_one_pem_certificate() {
        assert!(CaBundle::from_pem(b"", "empty").is_err());
        assert!(CaBundle::from_pem(b"not pem", "junk").is_err());
        let ca = Ca::new("ca");
        let bundle = CaBundle::from_pem(ca.pem().as_bytes(), "ok").expect("bundle");
        assert_eq!(bundle.certificates.len(), 1);
    }
}
