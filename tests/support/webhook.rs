//! An HTTPS server on 127.0.0.1 that PLAYS a Kubernetes admission webhook (the program a
//! ValidatingWebhookConfiguration points kube-apiserver at): it answers `admission.k8s.io/v1`
//! AdmissionReviews with a decision the test chooses, and counts what it was asked — dry runs
//! apart from real writes — so a test can say how many writes reached admission. Its serving
//! certificate comes from a CA made for the test; [`AdmissionWebhook::ca_bundle`] is the
//! `caBundle` to register.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

/// What the webhook answers for one AdmissionRequest: `None` allows it, `Some((code,
/// message))` denies it with that HTTP code in the Status (kube-apiserver answers the client
/// with it).
pub type Decide = dyn Fn(&Value) -> Option<(u16, String)> + Send + Sync;

/// What the webhook was asked.
#[derive(Debug, Default)]
pub struct Seen {
    /// AdmissionReviews with `request.dryRun: true`.
    pub dry_run: AtomicUsize,
    /// AdmissionReviews with `request.dryRun: false`: writes that would be persisted.
    pub real: AtomicUsize,
    /// Reviews it denied.
    pub denied: AtomicUsize,
    /// Every request, as kube-apiserver sent it (`request` of the review).
    pub requests: Mutex<Vec<Value>>,
}

impl Seen {
    /// (dry runs, real writes, denials) so far.
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.dry_run.load(Ordering::SeqCst),
            self.real.load(Ordering::SeqCst),
            self.denied.load(Ordering::SeqCst),
        )
    }
}

/// The running webhook; stops when dropped.
pub struct AdmissionWebhook {
    addr: SocketAddr,
    ca_pem: String,
    /// What it was asked.
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AdmissionWebhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AdmissionWebhook {
    /// Starts the webhook on a free loopback port; `decide` answers each review.
    pub async fn start(decide: Arc<Decide>) -> AdmissionWebhook {
        let ca = svm_devcerts::Ca::new("admission-webhook-test-ca").expect("a test CA");
        let serving = ca
            .issue_serving("127.0.0.1", &["127.0.0.1".into(), "localhost".into()])
            .expect("a serving certificate");
        let acceptor = acceptor(&serving);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let seen = Arc::new(Seen::default());
        let task = tokio::spawn(serve(listener, acceptor, decide, seen.clone()));
        AdmissionWebhook {
            addr,
            ca_pem: ca.cert_pem(),
            seen,
            task,
        }
    }

    /// `https://127.0.0.1:<port><path>`: the `clientConfig.url` to register.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The test CA, base64 PEM: the `clientConfig.caBundle` to register.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
}

/// A loopback URL nobody listens on (a port bound then released): where an unreachable
/// webhook "is".
pub fn closed_url(path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", crate::etcd::free_port())
}

fn acceptor(serving: &svm_devcerts::Issued) -> tokio_rustls::TlsAcceptor {
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).expect("the serving key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![serving.der.clone()], key)
        .expect("a TLS server config");
    // HTTP/1.1 only: kube-apiserver's webhook client speaks it when h2 is not offered.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    decide: Arc<Decide>,
    seen: Arc<Seen>,
) {
    while let Ok((tcp, _)) = listener.accept().await {
        let acceptor = acceptor.clone();
        let decide = decide.clone();
        let seen = seen.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |request| {
                let (decide, seen) = (decide.clone(), seen.clone());
                async move { Ok::<_, std::convert::Infallible>(review(request, &*decide, &seen).await) }
            });
            let io = hyper_util::rt::TokioIo::new(tls);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// One AdmissionReview in, its answer out (a 400 for a body that is not one).
async fn review(request: Request<Incoming>, decide: &Decide, seen: &Seen) -> Response<Full<Bytes>> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return answer(400, json!({"error": "unreadable body"})),
    };
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return answer(400, json!({"error": "not JSON"}));
    };
    let request = review["request"].clone();
    if request["dryRun"] == json!(true) {
        seen.dry_run.fetch_add(1, Ordering::SeqCst);
    } else {
        seen.real.fetch_add(1, Ordering::SeqCst);
    }
    let decision = decide(&request);
    seen.requests
        .lock()
        .expect("not poisoned")
        .push(request.clone());
    let mut response = json!({"uid": request["uid"], "allowed": decision.is_none()});
    if let Some((code, message)) = decision {
        seen.denied.fetch_add(1, Ordering::SeqCst);
        response["status"] = json!({"code": code, "message": message});
    }
    answer(
        200,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

fn answer(code: u16, body: Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// A ValidatingWebhookConfiguration named `name` that sends UPDATEs of `group`'s `resource`
/// to `webhook` (`failurePolicy: Fail`, `sideEffects: None` so dry runs reach it too).
pub fn validating_configuration(
    name: &str,
    webhook: &AdmissionWebhook,
    group: &str,
    resource: &str,
) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": format!("{name}.webhook.test"),
            "clientConfig": {"url": webhook.url("/validate"), "caBundle": webhook.ca_bundle()},
            "rules": [{
                "apiGroups": [group],
                "apiVersions": ["*"],
                "operations": ["UPDATE"],
                "resources": [resource],
            }],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    })
}
