//! A throw-away PKI for one recording run (files as `tests/support/control_plane.rs` names
//! them): the cluster CA, kube-apiserver's serving certificate for 127.0.0.1, the admin client
//! certificate (CN=kubernetes-admin, O=system:masters, as the earlier recordings used), a
//! front-proxy CA and client, and the service-account key pair.

use std::path::Path;

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(common_name: &str) -> Result<Ca> {
        let key = KeyPair::generate().context("a CA key")?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, key).context("signing the CA")?;
        Ok(Ca { issuer })
    }

    /// `(certificate PEM, key PEM)`.
    fn issue(&self, mut params: CertificateParams) -> Result<(String, String)> {
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().context("a key")?;
        let cert = params.signed_by(&key, &self.issuer).context("signing")?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    fn client(&self, common_name: &str, organization: Option<&str>) -> Result<(String, String)> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, organization);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        name.push(DnType::OrganizationName, organization);
    }
    name
}

/// Writes ca.crt, apiserver.{crt,key}, admin.{crt,key}, front-proxy-ca.crt,
/// front-proxy-client.{crt,key}, sa.key and sa.pub into `dir`.
pub(crate) fn generate(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).context("the PKI directory")?;
    let write = |file: &str, pem: &str| {
        std::fs::write(dir.join(file), pem).with_context(|| format!("writing {file}"))
    };
    let ca = Ca::new("kubernetes-recorder-ca")?;
    write("ca.crt", &ca.issuer.pem())?;

    let mut serving = CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "kubernetes".to_string(),
    ])
    .context("serving names")?;
    serving.distinguished_name = name("kube-apiserver", None);
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (cert, key) = ca.issue(serving)?;
    write("apiserver.crt", &cert)?;
    write("apiserver.key", &key)?;

    let (cert, key) = ca.client("kubernetes-admin", Some("system:masters"))?;
    write("admin.crt", &cert)?;
    write("admin.key", &key)?;

    let front_proxy = Ca::new("front-proxy-recorder-ca")?;
    write("front-proxy-ca.crt", &front_proxy.issuer.pem())?;
    let (cert, key) = front_proxy.client("front-proxy-client", None)?;
    write("front-proxy-client.crt", &cert)?;
    write("front-proxy-client.key", &key)?;

    // ECDSA P-256, as control_plane.rs uses.
    let service_account = KeyPair::generate().context("the service-account key")?;
    write("sa.key", &service_account.serialize_pem())?;
    write("sa.pub", &service_account.public_key_pem())?;
    Ok(())
}
