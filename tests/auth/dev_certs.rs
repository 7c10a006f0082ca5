//! Development certificates add their CA to the cluster's client CA, never replace it: the real
//! binary, started without `--tls-cert-file` against a cluster that publishes
//! kube-system/extension-apiserver-authentication, accepts client certificates of the dev CA
//! (the written kubeconfig's admin), of the cluster's client CA (a Prometheus scraping
//! `/metrics` with a certificate the cluster issued) and of its front-proxy CA (the
//! aggregator), and refuses any other in the TLS handshake.

use serde_json::json;
use svm_devcerts::Ca;
use svm_test_support::server::{Backend, ServerProcess};

use crate::fake_cluster::{FakeCluster, Policy};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

/// A client trusting the server's dev CA, presenting `identity` (PEM key and certificate).
fn client_with(server: &ServerProcess, cert_pem: &str, key_pem: &str) -> reqwest::Client {
    let identity = format!("{key_pem}{cert_pem}");
    server
        .http_client_builder()
        .identity(reqwest::Identity::from_pem(identity.as_bytes()).expect("identity"))
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_certificates_trust_the_dev_ca_beside_the_clusters_client_and_front_proxy_cas() {
    let cluster_ca = Ca::new("cluster-ca").expect("cluster CA");
    let front_proxy_ca = Ca::new("cluster-front-proxy-ca").expect("front-proxy CA");
    let cluster = FakeCluster::start(Policy {
        authentication_config: Some(json!({
            "client-ca-file": cluster_ca.cert_pem(),
            "requestheader-client-ca-file": front_proxy_ca.cert_pem(),
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
            "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
            "requestheader-group-headers": "[\"X-Remote-Group\"]",
            "requestheader-username-headers": "[\"X-Remote-User\"]"
        })),
        ..Policy::default()
    })
    .await;
    cluster.allow("prometheus", "get", "/metrics");
    cluster.allow("alice", "list", "storageversionmigrations");
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = dir.path().join("cluster.kubeconfig");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": cluster.url}}],
        "users": [{"name": "svm", "user": {"token": "svm-apiserver-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "svm"}}],
        "current-context": "fake"
    });
    std::fs::write(&kubeconfig, config.to_string()).expect("kubeconfig");
    // No --tls-cert-file: development certificates, and the cluster's settings read at start.
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &[
            &format!("--authentication-kubeconfig={}", kubeconfig.display()),
            &format!("--authorization-kubeconfig={}", kubeconfig.display()),
        ],
    );

    // The dev admin of the written kubeconfig (the dev CA, O=system:masters).
    let dev_admin = server.http_client();
    let response = dev_admin
        .get(format!("{}{SVMS}", server.url))
        .send()
        .await
        .expect("the dev admin's certificate is accepted");
    assert_eq!(response.status(), 200);

    // A certificate the cluster's client CA issued: a Prometheus scraping /metrics.
    let prometheus = cluster_ca
        .issue_client("prometheus", &["monitoring"])
        .expect("cluster client cert");
    let response = client_with(&server, &prometheus.cert_pem, &prometheus.key_pem)
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .expect("the cluster's client certificate is accepted in the handshake");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("metrics");
    assert!(text.contains("apiserver_request_total"), "{text}");
    let review = cluster.last_access_review();
    assert_eq!(review["spec"]["user"], "prometheus", "{review}");
    assert_eq!(
        review["spec"]["groups"],
        json!(["monitoring", "system:authenticated"]),
        "{review}"
    );

    // The aggregator, with the cluster's front-proxy certificate, names the user.
    let front_proxy = front_proxy_ca
        .issue_client("front-proxy-client", &[])
        .expect("front-proxy cert");
    let response = client_with(&server, &front_proxy.cert_pem, &front_proxy.key_pem)
        .get(format!("{}{SVMS}", server.url))
        .header("X-Remote-User", "alice")
        .send()
        .await
        .expect("the front proxy's certificate is accepted");
    assert_eq!(response.status(), 200);
    assert_eq!(cluster.last_access_review()["spec"]["user"], "alice");

    // Any other CA is refused in the handshake.
    let stranger = Ca::new("stranger").expect("CA");
    let forged = stranger
        .issue_client("admin", &["system:masters"])
        .expect("cert");
    let refused = client_with(&server, &forged.cert_pem, &forged.key_pem)
        .get(format!("{}{SVMS}", server.url))
        .send()
        .await;
    assert!(refused.is_err(), "a stranger's certificate: {refused:?}");
}
