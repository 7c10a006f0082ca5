//! The development PKI (`svm-devcerts`) in the server's unit tests: an in-memory CA whose
//! bundle the server's verifiers take, and the checks that what `svm-devcerts` writes is what
//! the server's TLS stack and authenticators accept.

use rustls_pki_types::CertificateDer;

use crate::auth::x509::CaBundle;

pub(crate) struct Ca(pub svm_devcerts::Ca);

impl Ca {
    pub(crate) fn new(cn: &str) -> Self {
        Ca(svm_devcerts::Ca::new(cn).expect("CA"))
    }

    pub(crate) fn pem(&self) -> String {
        self.0.cert_pem()
    }

    pub(crate) fn bundle(&self) -> CaBundle {
        CaBundle::from_pem(self.pem().as_bytes(), "test CA").expect("bundle")
    }
}

/// A client certificate chain (leaf only) and its key PEM.
pub(crate) fn client_cert(
    ca: &Ca,
    cn: &str,
    orgs: &[&str],
) -> (Vec<CertificateDer<'static>>, String) {
    let issued = ca.0.issue_client(cn, orgs).expect("client cert");
    (vec![issued.der], issued.key_pem)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use crate::auth::x509::{CaBundle, CaVerifier, Subject};
    use svm_devcerts::*;

    #[test]
    fn generate_writes_a_consistent_pki_and_keeps_a_complete_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = generate(dir.path()).expect("generate");
        let ca = CaBundle::from_file(&files.ca_cert).expect("ca");
        let front_proxy_ca = CaBundle::from_file(&files.front_proxy_ca_cert).expect("fp ca");

        let load = |path: &Path| CaBundle::from_file(path).expect("cert").certificates;
        let admin = load(&files.admin_cert);
        let client = load(&files.front_proxy_client_cert);
        assert!(CaVerifier::new(&ca).expect("v").verify(&admin).is_ok());
        assert!(
            CaVerifier::new(&front_proxy_ca)
                .expect("v")
                .verify(&client)
                .is_ok()
        );
        assert!(CaVerifier::new(&ca).expect("v").verify(&client).is_err());
        assert_eq!(
            Subject::of(&client[0]).expect("subject").common_name,
            FRONT_PROXY_CLIENT_NAME
        );
        assert_eq!(
            Subject::of(&admin[0]).expect("subject").organizations,
            vec!["system:masters"]
        );
        // The serving pair loads as a TLS identity.
        crate::auth::tls::load_certified_key(&files.serving_cert, &files.serving_key)
            .expect("serving key pair");

        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&files.serving_key)
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        let before = fs::read(&files.ca_cert).expect("read");
        generate(dir.path()).expect("again");
        assert_eq!(fs::read(&files.ca_cert).expect("read"), before, "kept");

        // The etcd set: its own CA, which does not sign the admin certificate.
        let etcd = EtcdCertFiles::in_dir(dir.path());
        let etcd_ca = CaBundle::from_file(&etcd.ca_cert).expect("etcd ca");
        let etcd_verifier = CaVerifier::new(&etcd_ca).expect("v");
        assert!(etcd_verifier.verify(&load(&etcd.client_cert)).is_ok());
        assert!(etcd_verifier.verify(&admin).is_err());
        crate::auth::tls::load_certified_key(&etcd.server_cert, &etcd.server_key)
            .expect("etcd serving pair");
        let etcd_before = fs::read(&etcd.ca_cert).expect("read");

        fs::remove_file(&files.admin_key).expect("remove");
        generate(dir.path()).expect("regenerate");
        assert_ne!(fs::read(&files.ca_cert).expect("read"), before, "replaced");
        assert!(files.admin_key.is_file());
        assert_eq!(
            fs::read(&etcd.ca_cert).expect("read"),
            etcd_before,
            "a complete etcd set is kept"
        );
    }
}
