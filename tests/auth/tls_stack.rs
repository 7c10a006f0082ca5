//! The whole layer over real TLS: the client-certificate verifier, `PeerCertificates` from the
//! handshake, the middleware in front of a Router, the reloading serving certificate, all with
//! the development PKI of `svm_devcerts::generate`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::extract::Request;
use axum::routing::any;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use reqwest::StatusCode;
use serde_json::{Value, json};
use svm_devcerts::{self as devcerts, Ca, DevCertFiles};
use svm_server::auth::tls::{ReloadingCertResolver, server_config};
use svm_server::auth::{self, Auth, CaBundle, PeerCertificates, RequestHeaderConfig, UserInfo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::fake_cluster::{FakeCluster, Policy};

const SVM: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

/// What the handler behind the layer saw.
async fn echo(request: Request) -> Json<Value> {
    let user = request
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_default();
    let headers: Vec<String> = request.headers().keys().map(|k| k.to_string()).collect();
    Json(json!({
        "user": user.name,
        "groups": user.groups,
        "extra": user.extra,
        "headers": headers,
    }))
}

struct Server {
    url: String,
    files: DevCertFiles,
    resolver: Arc<ReloadingCertResolver>,
    cluster: FakeCluster,
    _dir: tempfile::TempDir,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = devcerts::generate(dir.path()).expect("dev certs");
    let cluster = FakeCluster::start(Policy::default()).await;
    let auth = Auth::builder()
        .client_ca(CaBundle::from_file(&files.ca_cert).expect("ca"))
        .request_header(RequestHeaderConfig {
            client_ca: CaBundle::from_file(&files.front_proxy_ca_cert).expect("front-proxy ca"),
            allowed_names: vec![devcerts::FRONT_PROXY_CLIENT_NAME.into()],
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefixes: vec!["X-Remote-Extra-".into()],
        })
        .subject_access_review(cluster.client())
        .build()
        .expect("auth");
    let auth = Arc::new(auth);
    let resolver = Arc::new(
        ReloadingCertResolver::new(&files.serving_cert, &files.serving_key).expect("serving"),
    );
    let tls = server_config(
        resolver.clone(),
        auth.client_cert_verifier().expect("verifier"),
    )
    .expect("tls");
    let app = axum::Router::new()
        .route("/", any(echo))
        .route("/{*path}", any(echo))
        .layer(auth::layer(auth));

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let acceptor = TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A refused client certificate ends the connection here.
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let peer = PeerCertificates::of(stream.get_ref().1);
                let service =
                    tower::service_fn(move |mut request: Request<hyper::body::Incoming>| {
                        request.extensions_mut().insert(peer.clone());
                        app.clone().oneshot(request.map(axum::body::Body::new))
                    });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    Server {
        url: format!("https://localhost:{}", addr.port()),
        files,
        resolver,
        cluster,
        _dir: dir,
    }
}

fn client(ca_file: &Path, identity: Option<(&Path, &Path)>) -> reqwest::Client {
    let ca = std::fs::read(ca_file).expect("ca");
    let mut builder = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("ca pem"))
        .tls_info(true);
    if let Some((cert, key)) = identity {
        let mut pem = std::fs::read(cert).expect("cert");
        pem.extend(std::fs::read(key).expect("key"));
        builder = builder.identity(reqwest::Identity::from_pem(&pem).expect("identity"));
    }
    builder.build().expect("client")
}

impl Server {
    fn admin(&self) -> reqwest::Client {
        client(
            &self.files.ca_cert,
            Some((&self.files.admin_cert, &self.files.admin_key)),
        )
    }

    fn front_proxy(&self) -> reqwest::Client {
        client(
            &self.files.ca_cert,
            Some((
                &self.files.front_proxy_client_cert,
                &self.files.front_proxy_client_key,
            )),
        )
    }

    fn anonymous(&self) -> reqwest::Client {
        client(&self.files.ca_cert, None)
    }
}

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let body = response.json().await.expect("json body");
    (status, body)
}

#[tokio::test]
async fn an_admin_certificate_is_its_cn_and_o_and_needs_no_review() {
    let server = start().await;
    let response = server
        .admin()
        .get(format!("{}{SVM}", server.url))
        .header("X-Remote-User", "someone-else")
        .send()
        .await
        .expect("request");
    let (status, body) = json_of(response).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["user"],
        devcerts::ADMIN_NAME,
        "the headers are not the proxy's"
    );
    assert_eq!(
        body["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert_eq!(server.cluster.access_reviews(), 0);
}

#[tokio::test]
async fn the_front_proxy_asserts_a_user_that_the_cluster_then_authorizes() {
    let server = start().await;
    server
        .cluster
        .allow("jane", "list", "storageversionmigrations");
    let proxy = server.front_proxy();
    let response = proxy
        .get(format!("{}{SVM}", server.url))
        .header("X-Remote-User", "jane")
        .header("X-Remote-Group", "dev")
        .header("X-Remote-Extra-Scopes", "read")
        .header("Authorization", "Basic ignored")
        .send()
        .await
        .expect("request");
    let (status, body) = json_of(response).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["user"], "jane");
    assert_eq!(body["groups"], json!(["dev", "system:authenticated"]));
    assert_eq!(body["extra"], json!({"scopes": ["read"]}));
    let seen = body["headers"].as_array().expect("headers");
    for stripped in [
        "x-remote-user",
        "x-remote-group",
        "x-remote-extra-scopes",
        "authorization",
    ] {
        assert!(
            !seen.iter().any(|h| h == stripped),
            "{stripped} reached the handler: {seen:?}"
        );
    }
    let review = server.cluster.last_access_review();
    assert_eq!(review["spec"]["user"], "jane");
    assert_eq!(
        review["spec"]["groups"],
        json!(["dev", "system:authenticated"])
    );

    let denied = proxy
        .delete(format!("{}{SVM}/m1", server.url))
        .header("X-Remote-User", "jane")
        .send()
        .await
        .expect("request");
    let (status, body) = json_of(denied).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["kind"], "Status");
    assert_eq!(
        body["message"],
        "storageversionmigrations.storagemigration.k8s.io \"m1\" is forbidden: User \"jane\" cannot delete resource \"storageversionmigrations\" in API group \"storagemigration.k8s.io\" at the cluster scope"
    );
    assert_eq!(
        body["details"],
        json!({"name": "m1", "group": "storagemigration.k8s.io", "kind": "storageversionmigrations"})
    );
}

#[tokio::test]
async fn callers_without_credentials_get_401_except_on_health_paths() {
    let server = start().await;
    let anonymous = server.anonymous();
    let response = anonymous
        .get(format!("{}{SVM}", server.url))
        .header("X-Remote-User", "jane")
        .send()
        .await
        .expect("request");
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "a Status body"
    );
    let (status, body) = json_of(response).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["reason"], "Unauthorized");
    assert_eq!(body["message"], "Unauthorized");

    for path in ["/livez", "/readyz", "/healthz"] {
        let response = anonymous
            .get(format!("{}{path}", server.url))
            .send()
            .await
            .expect("probe");
        let (status, body) = json_of(response).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(body["user"], "system:anonymous");
    }
    assert_eq!(server.cluster.access_reviews(), 0);
}

#[tokio::test]
async fn a_certificate_from_an_unknown_ca_is_refused_in_the_handshake() {
    let server = start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let stranger = Ca::new("stranger").expect("ca");
    let forged = stranger
        .issue_client(devcerts::FRONT_PROXY_CLIENT_NAME, &[])
        .expect("cert");
    let (cert, key) = (dir.path().join("c.crt"), dir.path().join("c.key"));
    std::fs::write(&cert, forged.cert_pem).expect("write");
    std::fs::write(&key, forged.key_pem).expect("write");
    let result = client(&server.files.ca_cert, Some((&cert, &key)))
        .get(format!("{}{SVM}", server.url))
        .header("X-Remote-User", "admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await;
    assert!(result.is_err(), "served: {:?}", result.map(|r| r.status()));
}

#[tokio::test]
async fn new_connections_get_the_reloaded_serving_certificate() {
    let server = start().await;
    let served = |response: &reqwest::Response| -> Vec<u8> {
        response
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .and_then(|info| info.peer_certificate())
            .expect("peer certificate")
            .to_vec()
    };
    let before = server
        .anonymous()
        .get(format!("{}/livez", server.url))
        .send()
        .await
        .expect("request");
    let first = served(&before);
    assert_eq!(first, server.resolver.current().cert[0].as_ref());

    // Rotate: a new serving certificate from a new CA, as a Secret update would bring.
    let ca = Ca::new("rotated-ca").expect("ca");
    let rotated = ca
        .issue_serving("svm-apiserver", &devcerts::serving_names())
        .expect("cert");
    std::fs::write(&server.files.serving_key, &rotated.key_pem).expect("key");
    std::fs::write(&server.files.serving_cert, &rotated.cert_pem).expect("cert");
    assert!(server.resolver.reload().expect("reload"));

    let dir = tempfile::tempdir().expect("tempdir");
    let new_ca = dir.path().join("ca.crt");
    std::fs::write(&new_ca, ca.cert_pem()).expect("write");
    let after = client(&new_ca, None)
        .get(format!("{}/livez", server.url))
        .send()
        .await
        .expect("trusted with the new CA");
    assert_eq!(served(&after), rotated.der.as_ref());
    // The old CA no longer verifies the server.
    assert!(
        server
            .anonymous()
            .get(format!("{}/livez", server.url))
            .send()
            .await
            .is_err()
    );
}
