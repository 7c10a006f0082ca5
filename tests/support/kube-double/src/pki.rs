//! The double's certificates, made fresh per instance: a cluster CA (serving certificate and
//! client CA), an admin client certificate, and a separate front-proxy CA with the
//! `front-proxy-client` certificate an aggregator presents to an aggregated API server — the
//! same set kube-apiserver publishes in `extension-apiserver-authentication` (recording 14).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate and its private key, PEM encoded.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Every certificate one double instance uses.
#[derive(Clone, Debug)]
pub struct Pki {
    /// Signs the serving certificate and client certificates (`client-ca-file`).
    pub cluster_ca_pem: String,
    /// The serving certificate (127.0.0.1, ::1, localhost).
    pub serving: CertPair,
    /// CN=kubernetes-admin, O=system:masters.
    pub admin_client: CertPair,
    /// `requestheader-client-ca-file`.
    pub front_proxy_ca_pem: String,
    /// CN=front-proxy-client, signed by the front-proxy CA.
    pub front_proxy_client: CertPair,
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn leaf(
    issuer: &CertifiedIssuer<'_, KeyPair>,
    sans: Vec<String>,
    common_name: &str,
    organization: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
) -> Result<CertPair, rcgen::Error> {
    let mut params = CertificateParams::new(sans)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, org);
    }
    params.extended_key_usages = vec![usage];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok(CertPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

impl Pki {
    pub fn generate() -> Result<Self, rcgen::Error> {
        let cluster_ca =
            CertifiedIssuer::self_signed(ca_params("kube-double-ca"), KeyPair::generate()?)?;
        let serving = leaf(
            &cluster_ca,
            vec!["127.0.0.1".into(), "::1".into(), "localhost".into()],
            "kube-apiserver",
            None,
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let admin_client = leaf(
            &cluster_ca,
            Vec::new(),
            "kubernetes-admin",
            Some("system:masters"),
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let front_proxy_ca = CertifiedIssuer::self_signed(
            ca_params("kube-double-front-proxy-ca"),
            KeyPair::generate()?,
        )?;
        let front_proxy_client = leaf(
            &front_proxy_ca,
            Vec::new(),
            "front-proxy-client",
            None,
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        Ok(Self {
            cluster_ca_pem: cluster_ca.pem(),
            serving,
            admin_client,
            front_proxy_ca_pem: front_proxy_ca.pem(),
            front_proxy_client,
        })
    }

    /// A rustls server configuration with the serving certificate, offering h2 and http/1.1
    /// like kube-apiserver. Client certificates are not requested: the double trusts everyone.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.serving.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("serving certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(self.serving.key_pem.as_bytes())
            .map_err(|e| format!("serving key: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("tls config: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
