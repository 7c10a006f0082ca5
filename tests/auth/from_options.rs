//! `Auth::from_options`: kubeconfig flags, the extension-apiserver-authentication lookup (and
//! its failure modes), CA files, and the resulting behaviour end to end through `admit`.

use std::path::Path;

use http::Request;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::json;
use svm_devcerts::{self as devcerts, DevCertFiles};
use svm_server::auth::{Auth, AuthOptions, CaBundle, PeerCertificates, Rejection};

use crate::fake_cluster::{FakeCluster, Policy};

const SVM: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

fn write_kubeconfig(dir: &Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "svm", "user": {"token": "svm-apiserver-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "svm"}}],
        "current-context": "fake"
    });
    std::fs::write(&path, serde_json::to_string(&config).expect("json")).expect("write");
    path
}

fn published(files: &DevCertFiles) -> serde_json::Value {
    let read = |p: &Path| std::fs::read_to_string(p).expect("read");
    json!({
        "client-ca-file": read(&files.ca_cert),
        "requestheader-client-ca-file": read(&files.front_proxy_ca_cert),
        "requestheader-allowed-names": "[\"front-proxy-client\"]",
        "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
        "requestheader-group-headers": "[\"X-Remote-Group\"]",
        "requestheader-username-headers": "[\"X-Remote-User\"]"
    })
}

fn chain(path: &Path) -> PeerCertificates {
    let pem = std::fs::read(path).expect("read");
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .expect("pem");
    PeerCertificates(std::sync::Arc::new(certs))
}

fn request(target: &str, peer: Option<PeerCertificates>, headers: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::builder().uri(target);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(()).expect("request");
    if let Some(peer) = peer {
        request.extensions_mut().insert(peer);
    }
    request
}

struct Setup {
    cluster: FakeCluster,
    files: DevCertFiles,
    options: AuthOptions,
    _dir: tempfile::TempDir,
}

async fn setup(publish: bool) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = devcerts::generate(&dir.path().join("certs")).expect("certs");
    let policy = Policy {
        authentication_config: publish.then(|| published(&files)),
        ..Policy::default()
    };
    let cluster = FakeCluster::start(policy).await;
    let kubeconfig = write_kubeconfig(dir.path(), &cluster.url);
    let options = AuthOptions {
        authentication_kubeconfig: Some(kubeconfig.clone()),
        authorization_kubeconfig: Some(kubeconfig),
        ..AuthOptions::default()
    };
    Setup {
        cluster,
        files,
        options,
        _dir: dir,
    }
}

#[tokio::test]
async fn the_published_configuration_is_used_when_the_flags_leave_it_out() {
    let s = setup(true).await;
    let auth = Auth::from_options(&s.options).await.expect("auth");
    assert!(
        auth.client_cert_verifier()
            .expect("verifier")
            .offer_client_auth()
    );

    // The front proxy, as the cluster describes it, may assert a user.
    s.cluster.allow("jane", "list", "storageversionmigrations");
    let proxy = chain(&s.files.front_proxy_client_cert);
    let user = auth
        .admit(&mut request(SVM, Some(proxy), &[("X-Remote-User", "jane")]))
        .await
        .expect("admitted");
    assert_eq!(user.name, "jane");
    // The published client CA authenticates the admin certificate.
    let admin = chain(&s.files.admin_cert);
    let user = auth
        .admit(&mut request(SVM, Some(admin), &[]))
        .await
        .expect("admin");
    assert_eq!(user.name, devcerts::ADMIN_NAME);
    // Anonymous callers are refused.
    let anonymous = auth.admit(&mut request(SVM, None, &[])).await;
    assert!(matches!(anonymous, Err(Rejection::Unauthenticated)));
}

#[tokio::test]
async fn an_also_trusted_ca_is_added_to_the_published_client_ca_not_put_in_its_place() {
    let s = setup(true).await;
    let dev_dir = tempfile::tempdir().expect("tempdir");
    let dev = devcerts::generate(dev_dir.path()).expect("dev certs");
    let dev_ca = CaBundle::from_file(&dev.ca_cert).expect("dev CA");
    let auth = Auth::from_options_with(&s.options, Some(dev_ca))
        .await
        .expect("auth");
    // The cluster's client CA still authenticates its certificates...
    let cluster_admin = auth
        .admit(&mut request(SVM, Some(chain(&s.files.admin_cert)), &[]))
        .await
        .expect("the cluster's certificate");
    assert_eq!(cluster_admin.name, devcerts::ADMIN_NAME);
    // ...and the added CA its own.
    let dev_admin = auth
        .admit(&mut request(SVM, Some(chain(&dev.admin_cert)), &[]))
        .await
        .expect("the added CA's certificate");
    assert_eq!(dev_admin.name, devcerts::ADMIN_NAME);
    // The front proxy is the cluster's, as without it.
    s.cluster.allow("jane", "list", "storageversionmigrations");
    let proxy = chain(&s.files.front_proxy_client_cert);
    let user = auth
        .admit(&mut request(SVM, Some(proxy), &[("X-Remote-User", "jane")]))
        .await
        .expect("front proxy");
    assert_eq!(user.name, "jane");
    // The added CA's front-proxy certificate is no front proxy (its CA is not the cluster's).
    let dev_proxy = chain(&dev.front_proxy_client_cert);
    let result = auth
        .admit(&mut request(
            SVM,
            Some(dev_proxy),
            &[("X-Remote-User", "jane")],
        ))
        .await;
    assert!(
        matches!(result, Err(Rejection::Unauthenticated)),
        "{result:?}"
    );
}

#[tokio::test]
async fn skip_lookup_trusts_only_the_flags() {
    let mut s = setup(true).await;
    s.options.authentication_skip_lookup = true;
    s.options.client_ca_file = Some(s.files.ca_cert.clone());
    let auth = Auth::from_options(&s.options).await.expect("auth");
    // No front proxy configured: its certificate is not a client certificate of the CA.
    let proxy = chain(&s.files.front_proxy_client_cert);
    let result = auth
        .admit(&mut request(SVM, Some(proxy), &[("X-Remote-User", "jane")]))
        .await;
    assert!(
        matches!(result, Err(Rejection::Unauthenticated)),
        "{result:?}"
    );
    let admin = chain(&s.files.admin_cert);
    auth.admit(&mut request(SVM, Some(admin), &[]))
        .await
        .expect("admin");
}

#[tokio::test]
async fn a_missing_config_map_publishes_nothing_and_a_failing_lookup_stops_startup() {
    let s = setup(false).await;
    let auth = Auth::from_options(&s.options)
        .await
        .expect("404 is not an error");
    assert!(
        !auth
            .client_cert_verifier()
            .expect("verifier")
            .offer_client_auth()
    );

    let mut s = setup(true).await;
    s.cluster.set_failing(true);
    let err = Auth::from_options(&s.options)
        .await
        .expect_err("lookup failed");
    assert!(
        format!("{err:#}").contains("--authentication-tolerate-lookup-failure"),
        "{err:#}"
    );
    s.options.authentication_tolerate_lookup_failure = true;
    Auth::from_options(&s.options).await.expect("tolerated");
}

#[tokio::test]
async fn bad_flags_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = AuthOptions {
        client_ca_file: Some(dir.path().join("nope.crt")),
        authentication_skip_lookup: true,
        ..AuthOptions::default()
    };
    let err = Auth::from_options(&missing)
        .await
        .expect_err("missing file");
    assert!(format!("{err:#}").contains("--client-ca-file"), "{err:#}");

    std::fs::write(dir.path().join("junk.crt"), "junk").expect("write");
    let junk = AuthOptions {
        requestheader_client_ca_file: Some(dir.path().join("junk.crt")),
        authentication_skip_lookup: true,
        ..AuthOptions::default()
    };
    let err = Auth::from_options(&junk).await.expect_err("junk");
    assert!(
        format!("{err:#}").contains("--requestheader-client-ca-file"),
        "{err:#}"
    );

    let bad_kubeconfig = AuthOptions {
        authentication_kubeconfig: Some(dir.path().join("junk.crt")),
        ..AuthOptions::default()
    };
    let err = Auth::from_options(&bad_kubeconfig)
        .await
        .expect_err("kubeconfig");
    assert!(
        format!("{err:#}").contains("--authentication-kubeconfig"),
        "{err:#}"
    );

    let bad_header = AuthOptions {
        requestheader_client_ca_file: Some(
            devcerts::generate(&dir.path().join("certs"))
                .expect("certs")
                .front_proxy_ca_cert,
        ),
        requestheader_username_headers: vec!["X Remote User".into()],
        authentication_skip_lookup: true,
        ..AuthOptions::default()
    };
    let err = Auth::from_options(&bad_header)
        .await
        .expect_err("header name");
    assert!(
        format!("{err:#}").contains("not a valid header name"),
        "{err:#}"
    );
}
