//! A development PKI (rcgen) for running the server locally or in a test cluster:
//!
//! | file | what |
//! |---|---|
//! | `ca.crt`, `ca.key` | the CA of the serving certificate and of client certificates (`caBundle` of the APIServices, `--client-ca-file`) |
//! | `apiserver.crt`, `apiserver.key` | the serving certificate: localhost, 127.0.0.1, ::1 and the in-cluster Service names |
//! | `admin.crt`, `admin.key` | a client certificate CN=svm-apiserver-admin, O=system:masters |
//! | `front-proxy-ca.crt`, `front-proxy-ca.key` | the front-proxy CA (`--requestheader-client-ca-file`) |
//! | `front-proxy-client.crt`, `front-proxy-client.key` | the aggregator's client certificate, CN=front-proxy-client |
//! | `etcd-ca.crt`, `etcd-ca.key` | the bundled etcd's own CA (`--trusted-ca-file` of etcd, `--etcd-cafile` here) |
//! | `etcd-server.crt`, `etcd-server.key` | etcd's serving certificate for the in-cluster etcd Service names |
//! | `etcd-client.crt`, `etcd-client.key` | svm-apiserver's client certificate for etcd (`--etcd-certfile`, `--etcd-keyfile`) |
//!
//! The etcd set has a CA of its own: etcd's `--client-cert-auth` admits any certificate its CA
//! signed, so the admin and front-proxy certificates must not come from it.
//! Private keys are written readable by the owner only.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::CertificateDer;

/// Why a development certificate could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum DevCertError {
    /// rcgen refused: generating a key, signing, or a name it cannot put in a certificate.
    #[error("{what}")]
    Certificate {
        /// What was being made.
        what: String,
        /// rcgen's reason.
        #[source]
        source: rcgen::Error,
    },
    /// A file or directory could not be written.
    #[error("{what} {}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A client certificate asked for more than one group (rcgen keeps one value per
    /// attribute type in a subject).
    #[error("a generated client certificate carries at most one organization")]
    TooManyOrganizations,
}

/// The result of making development certificates.
pub type Result<T> = std::result::Result<T, DevCertError>;

fn certificate(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> DevCertError {
    let what = what.into();
    move |source| DevCertError::Certificate { what, source }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DevCertError {
    let path = path.to_path_buf();
    move |source| DevCertError::Io { what, path, source }
}

/// The group Kubernetes allows everything (`auth::user::MASTERS_GROUP` of the server); the
/// development admin's certificate carries it.
pub const MASTERS_GROUP: &str = "system:masters";

/// The in-cluster Service the APIServices point at (deploy/): `svm-apiserver` in `svm-system`.
pub const SERVICE_NAME: &str = "svm-apiserver";
/// The namespace of that Service (and of the bundled etcd's).
pub const SERVICE_NAMESPACE: &str = "svm-system";
/// The CN kube-apiserver's front proxy (the aggregator) presents, allowed by default.
pub const FRONT_PROXY_CLIENT_NAME: &str = "front-proxy-client";
/// The development admin: in `system:masters`, so allowed everything without a
/// SubjectAccessReview.
pub const ADMIN_NAME: &str = "svm-apiserver-admin";

/// A certificate authority kept in memory, that issues serving and client certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// An issued certificate and its private key.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    pub key_pem: String,
    /// The certificate, DER: what a verifier or a TLS config takes.
    pub der: CertificateDer<'static>,
}

impl Ca {
    /// A new self-signed CA named `common_name`, valid for ten years (from yesterday).
    pub fn new(common_name: &str) -> Result<Self> {
        let key = KeyPair::generate().map_err(certificate("generating a CA key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, 10);
        let issuer =
            CertifiedIssuer::self_signed(params, key).map_err(certificate("signing the CA"))?;
        Ok(Ca { issuer })
    }

    /// The CA's certificate, PEM: the bundle that trusts what it issues.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA's private key, PEM.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// The CA's certificate, DER.
    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A client certificate: CN = user name, O = group. (rcgen's subject holds one value per
    /// attribute type, so at most one group.)
    pub fn issue_client(&self, common_name: &str, organizations: &[&str]) -> Result<Issued> {
        if organizations.len() > 1 {
            return Err(DevCertError::TooManyOrganizations);
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, organizations);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, common_name)
    }

    /// A serving certificate for DNS names and IP addresses.
    pub fn issue_serving(&self, common_name: &str, names: &[String]) -> Result<Issued> {
        let mut params = CertificateParams::new(names.to_vec())
            .map_err(certificate("serving certificate names"))?;
        params.distinguished_name = name(common_name, &[]);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, common_name)
    }

    fn issue(&self, mut params: CertificateParams, what: &str) -> Result<Issued> {
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, 2);
        let key =
            KeyPair::generate().map_err(certificate(format!("generating a key for {what}")))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(certificate(format!("signing {what}")))?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        })
    }
}

/// The bundled etcd's Service (deploy/base/etcd.yaml): `svm-etcd` in `svm-system`.
pub const ETCD_SERVICE_NAME: &str = "svm-etcd";
/// The CN of svm-apiserver's etcd client certificate.
pub const ETCD_CLIENT_NAME: &str = "svm-apiserver";

/// The names the bundled etcd's serving certificate is valid for: its headless Service, each
/// member's stable name under it, and loopback (etcd's own health checks).
pub fn etcd_serving_names() -> Vec<String> {
    let svc = format!("{ETCD_SERVICE_NAME}.{SERVICE_NAMESPACE}");
    vec![
        "localhost".into(),
        "127.0.0.1".into(),
        ETCD_SERVICE_NAME.into(),
        svc.clone(),
        format!("{svc}.svc"),
        format!("{svc}.svc.cluster.local"),
        format!("*.{svc}.svc"),
        format!("*.{svc}.svc.cluster.local"),
    ]
}

/// The names the development serving certificate is valid for.
pub fn serving_names() -> Vec<String> {
    let svc = format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}");
    vec![
        "localhost".into(),
        "127.0.0.1".into(),
        "::1".into(),
        SERVICE_NAME.into(),
        svc.clone(),
        format!("{svc}.svc"),
        format!("{svc}.svc.cluster.local"),
    ]
}

/// The files [`generate`] writes.
#[derive(Debug, Clone)]
pub struct DevCertFiles {
    /// `ca.crt`: the CA of the serving and admin certificates.
    pub ca_cert: PathBuf,
    /// `ca.key`: its private key.
    pub ca_key: PathBuf,
    /// `apiserver.crt`: the serving certificate.
    pub serving_cert: PathBuf,
    /// `apiserver.key`: its private key.
    pub serving_key: PathBuf,
    /// `admin.crt`: the development admin's client certificate (in `system:masters`).
    pub admin_cert: PathBuf,
    /// `admin.key`: its private key.
    pub admin_key: PathBuf,
    /// `front-proxy-ca.crt`: the front-proxy CA (`--requestheader-client-ca-file`).
    pub front_proxy_ca_cert: PathBuf,
    /// `front-proxy-ca.key`: its private key.
    pub front_proxy_ca_key: PathBuf,
    /// `front-proxy-client.crt`: the aggregator's client certificate, CN=front-proxy-client.
    pub front_proxy_client_cert: PathBuf,
    /// `front-proxy-client.key`: its private key.
    pub front_proxy_client_key: PathBuf,
}

impl DevCertFiles {
    /// The paths of the set in `dir`; touches nothing on disk.
    pub fn in_dir(dir: &Path) -> Self {
        DevCertFiles {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            front_proxy_ca_cert: dir.join("front-proxy-ca.crt"),
            front_proxy_ca_key: dir.join("front-proxy-ca.key"),
            front_proxy_client_cert: dir.join("front-proxy-client.crt"),
            front_proxy_client_key: dir.join("front-proxy-client.key"),
        }
    }

    fn all(&self) -> [&PathBuf; 10] {
        [
            &self.ca_cert,
            &self.ca_key,
            &self.serving_cert,
            &self.serving_key,
            &self.admin_cert,
            &self.admin_key,
            &self.front_proxy_ca_cert,
            &self.front_proxy_ca_key,
            &self.front_proxy_client_cert,
            &self.front_proxy_client_key,
        ]
    }
}

/// The etcd files [`generate`] writes.
#[derive(Debug, Clone)]
pub struct EtcdCertFiles {
    /// `etcd-ca.crt`: etcd's own CA (`--trusted-ca-file` of etcd, `--etcd-cafile` here).
    pub ca_cert: PathBuf,
    /// `etcd-ca.key`: its private key.
    pub ca_key: PathBuf,
    /// `etcd-server.crt`: etcd's serving certificate.
    pub server_cert: PathBuf,
    /// `etcd-server.key`: its private key.
    pub server_key: PathBuf,
    /// `etcd-client.crt`: svm-apiserver's client certificate for etcd (`--etcd-certfile`).
    pub client_cert: PathBuf,
    /// `etcd-client.key`: its private key (`--etcd-keyfile`).
    pub client_key: PathBuf,
}

impl EtcdCertFiles {
    /// The paths of the etcd set in `dir`; touches nothing on disk.
    pub fn in_dir(dir: &Path) -> Self {
        EtcdCertFiles {
            ca_cert: dir.join("etcd-ca.crt"),
            ca_key: dir.join("etcd-ca.key"),
            server_cert: dir.join("etcd-server.crt"),
            server_key: dir.join("etcd-server.key"),
            client_cert: dir.join("etcd-client.crt"),
            client_key: dir.join("etcd-client.key"),
        }
    }

    fn all(&self) -> [&PathBuf; 6] {
        [
            &self.ca_cert,
            &self.ca_key,
            &self.server_cert,
            &self.server_key,
            &self.client_cert,
            &self.client_key,
        ]
    }
}

/// Write the etcd set into `dir`, keeping a complete one (as [`generate`] does).
pub fn generate_etcd(dir: &Path) -> Result<EtcdCertFiles> {
    let files = EtcdCertFiles::in_dir(dir);
    if files.all().iter().all(|p| p.is_file()) {
        return Ok(files);
    }
    fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let ca = Ca::new("svm-etcd-ca")?;
    let server = ca.issue_serving(ETCD_SERVICE_NAME, &etcd_serving_names())?;
    let client = ca.issue_client(ETCD_CLIENT_NAME, &[])?;
    write(&files.ca_cert, &ca.cert_pem(), false)?;
    write(&files.ca_key, &ca.key_pem(), true)?;
    write(&files.server_cert, &server.cert_pem, false)?;
    write(&files.server_key, &server.key_pem, true)?;
    write(&files.client_cert, &client.cert_pem, false)?;
    write(&files.client_key, &client.key_pem, true)?;
    Ok(files)
}

/// Write the development PKI into `dir` (created if needed), and the etcd set
/// ([`generate_etcd`]). A complete set already there is kept as it is (so a cluster that
/// trusts it keeps working); an incomplete one is replaced entirely (each set on its own).
/// Delete the files to start over.
pub fn generate(dir: &Path) -> Result<DevCertFiles> {
    let files = DevCertFiles::in_dir(dir);
    generate_etcd(dir)?;
    if files.all().iter().all(|p| p.is_file()) {
        return Ok(files);
    }
    fs::create_dir_all(dir).map_err(io("creating", dir))?;

    let ca = Ca::new("svm-apiserver-ca")?;
    let serving = ca.issue_serving(SERVICE_NAME, &serving_names())?;
    let admin = ca.issue_client(ADMIN_NAME, &[MASTERS_GROUP])?;
    let front_proxy_ca = Ca::new("svm-apiserver-front-proxy-ca")?;
    let front_proxy_client = front_proxy_ca.issue_client(FRONT_PROXY_CLIENT_NAME, &[])?;

    write(&files.ca_cert, &ca.cert_pem(), false)?;
    write(&files.ca_key, &ca.key_pem(), true)?;
    write(&files.serving_cert, &serving.cert_pem, false)?;
    write(&files.serving_key, &serving.key_pem, true)?;
    write(&files.admin_cert, &admin.cert_pem, false)?;
    write(&files.admin_key, &admin.key_pem, true)?;
    write(
        &files.front_proxy_ca_cert,
        &front_proxy_ca.cert_pem(),
        false,
    )?;
    write(&files.front_proxy_ca_key, &front_proxy_ca.key_pem(), true)?;
    write(
        &files.front_proxy_client_cert,
        &front_proxy_client.cert_pem,
        false,
    )?;
    write(
        &files.front_proxy_client_key,
        &front_proxy_client.key_pem,
        true,
    )?;
    Ok(files)
}

fn name(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for org in organizations {
        dn.push(DnType::OrganizationName, *org);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

/// Valid from yesterday (tolerates clock skew) for `years`.
fn set_validity(params: &mut CertificateParams, years: i32) {
    let start = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24))
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    // Day 28 at most, so the end date exists in every month (and in February of any year).
    let (y, m, d) = (
        i32::from(start.year()),
        start.month() as u8,
        start.day().min(28) as u8,
    );
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after = rcgen::date_time_ymd(y + years, m, d);
}

/// Write a file; private keys with mode 0600 from the start (never world-readable, even briefly).
fn write(path: &Path, contents: &str, private: bool) -> Result<()> {
    use std::io::Write;
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    let mut file = options.open(path).map_err(io("writing", path))?;
    file.write_all(contents.as_bytes())
        .map_err(io("writing", path))?;
    // `mode` applies only to a new file: tighten one that was already there too.
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
            .map_err(io("restricting", path))?;
    }
    Ok(())
}
