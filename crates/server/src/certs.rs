//! Serving certificates: a development CA with a serving certificate for 127.0.0.1/localhost and
//! an admin client certificate (rcgen), created in the cert dir when absent and reused when
//! present; the rustls server configuration; and the kubeconfig written for clients.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Context, SetupError, SetupResult as Result};
use base64::Engine;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;

/// Files of the development PKI in a cert dir.
#[derive(Debug, Clone)]
pub struct DevCerts {
    /// The development CA's certificate: what clients trust.
    pub ca_cert: PathBuf,
    /// The serving certificate, for 127.0.0.1 and localhost.
    pub serving_cert: PathBuf,
    /// The serving certificate's private key.
    pub serving_key: PathBuf,
    /// CN=svm-apiserver-admin, O=system:masters, for kubeconfigs of a server that checks client
    /// certificates.
    pub client_cert: PathBuf,
    /// The admin client certificate's private key.
    pub client_key: PathBuf,
}

/// The development PKI in `dir` (the one generator, `svm_devcerts::generate`, which also makes the
/// front-proxy pair): created unless complete, reused otherwise.
pub fn ensure_dev_certs(dir: &Path) -> Result<DevCerts> {
    let files = svm_devcerts::generate(dir).context("generating the development PKI")?;
    Ok(DevCerts {
        ca_cert: files.ca_cert,
        serving_cert: files.serving_cert,
        serving_key: files.serving_key,
        client_cert: files.admin_cert,
        client_key: files.admin_key,
    })
}

fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(contents)
        .with_context(|| format!("writing {}", path.display()))
}

/// A rustls server config for the PEM chain and key, offering HTTP/2 and HTTP/1.1 via ALPN and
/// not asking for client certificates.
pub(crate) fn server_config(cert_file: &Path, key_file: &Path) -> Result<Arc<ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .with_context(|| format!("reading {}", cert_file.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing {}", cert_file.display()))?;
    if chain.is_empty() {
        return Err(SetupError::invalid(format!(
            "no certificate in {}",
            cert_file.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .with_context(|| format!("reading the private key {}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the serving certificate and key do not fit together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Write a kubeconfig for `server_url`, trusting `ca_file` when given and authenticating with
/// the client certificate pair when given.
pub fn write_kubeconfig(
    path: &Path,
    server_url: &str,
    ca_file: Option<&Path>,
    client: Option<(&Path, &Path)>,
) -> Result<()> {
    let encode = |file: &Path| -> Result<String> {
        let bytes = fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let mut cluster = json!({"server": server_url});
    if let Some(ca) = ca_file {
        cluster["certificate-authority-data"] = json!(encode(ca)?);
    }
    let mut user = json!({});
    if let Some((cert, key)) = client {
        user["client-certificate-data"] = json!(encode(cert)?);
        user["client-key-data"] = json!(encode(key)?);
    }
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "svm-apiserver", "cluster": cluster}],
        "users": [{"name": "svm-apiserver-admin", "user": user}],
        "contexts": [{"name": "svm-apiserver", "context": {"cluster": "svm-apiserver", "user": "svm-apiserver-admin"}}],
        "current-context": "svm-apiserver",
        "preferences": {},
    });
    let text = serde_norway::to_string(&config).context("encoding the kubeconfig")?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    // Write aside and rename, so a reader never sees a half-written file.
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    write_file(&partial, text.as_bytes(), true)?;
    fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_certs_are_created_once_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = ensure_dev_certs(dir.path()).expect("create");
        let ca = fs::read(&first.ca_cert).expect("ca");
        let second = ensure_dev_certs(dir.path()).expect("reuse");
        assert_eq!(fs::read(&second.ca_cert).expect("ca"), ca);
        server_config(&first.serving_cert, &first.serving_key).expect("usable by rustls");
    }

    #[test]
    fn kubeconfig_embeds_the_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = ensure_dev_certs(dir.path()).expect("create");
        let path = dir.path().join("sub").join("kubeconfig");
        write_kubeconfig(&path, "https://127.0.0.1:1234", Some(&certs.ca_cert), None)
            .expect("write");
        let config: serde_json::Value =
            serde_norway::from_str(&fs::read_to_string(&path).expect("read")).expect("yaml");
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:1234"
        );
        let ca = config["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .expect("ca data");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .expect("base64");
        assert_eq!(decoded, fs::read(&certs.ca_cert).expect("ca"));
        assert_eq!(config["current-context"], "svm-apiserver");
    }

    #[test]
    fn mismatched_files_are_a_clear_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = ensure_dev_certs(dir.path()).expect("create");
        let err = server_config(&certs.serving_cert, &certs.client_key).unwrap_err();
        assert!(format!("{err:#}").contains("do not fit"), "{err:#}");
        let missing = server_config(&dir.path().join("nope.crt"), &certs.serving_key).unwrap_err();
        assert!(format!("{missing:#}").contains("nope.crt"));
    }
}
