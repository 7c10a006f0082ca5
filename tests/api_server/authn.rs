//! `serve` installs delegated authentication: with development certificates, the dev CA's admin
//! client certificate (O=system:masters) is allowed, anonymous callers get a 401 Status except on
//! the health paths, and a client certificate from another CA is refused.

use serde_json::Value;

use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_callers_get_401_and_the_admin_certificate_is_allowed() {
    let server = ServerProcess::start(Backend::Embedded);
    let base = &server.url;

    let admin = server.http_client();
    let listed = admin.get(format!("{base}{SVMS}")).send().await.unwrap();
    assert_eq!(listed.status(), 200);

    let anonymous = server.anonymous_http_client();
    for path in [SVMS, "/apis", "/openapi/v2", "/metrics"] {
        let resp = anonymous.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        let status: Value = resp.json().await.unwrap();
        assert_eq!(status["kind"], "Status", "{path}");
        assert_eq!(status["reason"], "Unauthorized", "{path}");
        assert_eq!(status["code"], 401, "{path}");
    }
    // Writes are refused too, and change nothing.
    let create = anonymous
        .post(format!("{base}{SVMS}"))
        .header("Content-Type", "application/json")
        .body(r#"{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"anon"},"spec":{"resource":{"group":"apps","resource":"deployments"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), 401);
    let list: Value = admin
        .get(format!("{base}{SVMS}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0));

    // Probes stay open, as kubelet sends no credentials.
    for path in ["/healthz", "/livez", "/readyz"] {
        let resp = anonymous.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }

    // A client certificate signed by another CA does not get in.
    let other = tempfile::tempdir().unwrap();
    svm_devcerts::generate(other.path()).unwrap();
    let mut foreign = std::fs::read(other.path().join("admin.key")).unwrap();
    foreign.extend(std::fs::read(other.path().join("admin.crt")).unwrap());
    let ca = reqwest::Certificate::from_pem(&server.ca_pem()).unwrap();
    let intruder = reqwest::Client::builder()
        .add_root_certificate(ca)
        .identity(reqwest::Identity::from_pem(&foreign).unwrap())
        .build()
        .unwrap();
    match intruder.get(format!("{base}{SVMS}")).send().await {
        Err(_) => {} // refused in the TLS handshake
        Ok(resp) => assert_eq!(resp.status(), 401),
    }

    // The cache and decision counters are visible in /metrics.
    let metrics = admin
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("apiserver_request_total"), "{metrics}");
    assert!(metrics.contains("authentication_attempts"), "{metrics}");
    assert!(metrics.contains("authorization_cache_hits"), "{metrics}");
}
