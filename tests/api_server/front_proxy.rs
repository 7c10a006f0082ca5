//! As kube-aggregator connects: kubectl talks to a front proxy, which forwards to the server
//! over HTTPS with its front-proxy client certificate and `X-Remote-User`/`X-Remote-Group`.
//! The same headers from a caller without that certificate are ignored (401).

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::Value;

use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

#[derive(Clone)]
struct Proxy {
    upstream: String,
    client: reqwest::Client,
}

/// Forward one request upstream as the aggregator would, with the caller's identity in headers.
async fn forward(State(proxy): State<Proxy>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let body = axum::body::to_bytes(body, 8 << 20)
        .await
        .unwrap_or_default();
    let mut upstream = proxy
        .client
        .request(parts.method.clone(), format!("{}{path}", proxy.upstream))
        .header("X-Remote-User", "aggregated-jane")
        .header("X-Remote-Group", "system:masters")
        .body(body);
    for name in ["accept", "content-type"] {
        if let Some(value) = parts.headers.get(name) {
            upstream = upstream.header(name, value.clone());
        }
    }
    match upstream.send().await {
        Ok(resp) => {
            let mut out = Response::builder().status(resp.status().as_u16());
            if let Some(ct) = resp.headers().get("content-type") {
                out = out.header("content-type", ct.clone());
            }
            let bytes = resp.bytes().await.unwrap_or_default();
            out.body(Body::from(bytes)).expect("response")
        }
        Err(err) => Response::builder()
            .status(502)
            .body(Body::from(err.to_string()))
            .expect("response"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_through_a_front_proxy_lists_migrations() {
    // The front proxy's own PKI: its CA is the server's requestheader CA.
    let proxy_pki = tempfile::tempdir().unwrap();
    let files = svm_devcerts::generate(proxy_pki.path()).unwrap();
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &[
            &format!(
                "--requestheader-client-ca-file={}",
                files.front_proxy_ca_cert.display()
            ),
            "--requestheader-allowed-names=front-proxy-client",
        ],
    );

    let mut identity = std::fs::read(&files.front_proxy_client_key).unwrap();
    identity.extend(std::fs::read(&files.front_proxy_client_cert).unwrap());
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&server.ca_pem()).unwrap())
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .build()
        .unwrap();
    let proxy = Proxy {
        upstream: server.url.clone(),
        client,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });

    let kubeconfig = server.dir().join("proxy.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: nobody\nusers:\n- name: nobody\n  user: {{}}\ncurrent-context: proxy\n"
        ),
    )
    .unwrap();
    let k = Kubectl::new(&kubeconfig);
    let manifest = r#"{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"through-proxy"},"spec":{"resource":{"group":"apps","resource":"deployments"}}}"#;
    let created = tokio::task::spawn_blocking(move || {
        let out = k.ok_stdin(&["create", "-f", "-"], manifest);
        let listed = k.ok(&["get", "storageversionmigrations", "-o", "name"]);
        (out, listed)
    })
    .await
    .unwrap();
    assert_eq!(
        created.0.trim(),
        "storageversionmigration.storagemigration.k8s.io/through-proxy created"
    );
    assert_eq!(
        created.1.trim(),
        "storageversionmigration.storagemigration.k8s.io/through-proxy"
    );

    // The same identity headers without the front-proxy certificate are not trusted.
    let anonymous = server.anonymous_http_client();
    let resp = anonymous
        .get(format!("{}{SVMS}", server.url))
        .header("X-Remote-User", "mallory")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["reason"], "Unauthorized");
    serving.abort();
}
