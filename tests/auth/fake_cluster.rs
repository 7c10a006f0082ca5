//! A stand-in for kube-apiserver's review endpoints, answering like recordings 15a and 15b:
//! 201 Created with the review echoed back and `status` filled in. It counts and records the
//! reviews it receives and can be made to fail.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde_json::{Value, json};

/// Who may do what: `(user, verb, resource)` triples are allowed, the rest denied;
/// system:masters is allowed everything (as RBAC's short-circuit in recording 15b).
#[derive(Default)]
pub(crate) struct Policy {
    pub tokens: HashMap<String, Value>,
    pub allowed: Vec<(String, String, String)>,
    /// `data` of kube-system/extension-apiserver-authentication; `None` answers 404.
    pub authentication_config: Option<Value>,
}

#[derive(Default)]
pub(crate) struct Calls {
    pub token_reviews: AtomicUsize,
    pub access_reviews: AtomicUsize,
    pub last_access_review: Mutex<Option<Value>>,
}

struct Shared {
    policy: Mutex<Policy>,
    calls: Calls,
    failing: AtomicBool,
}

pub(crate) struct FakeCluster {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeCluster {
    pub(crate) async fn start(policy: Policy) -> FakeCluster {
        let shared = Arc::new(Shared {
            policy: Mutex::new(policy),
            calls: Calls::default(),
            failing: AtomicBool::new(false),
        });
        let app = axum::Router::new()
            .route(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                post(token_review),
            )
            .route(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                post(access_review),
            )
            .route(
                "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
                get(authentication_config_map),
            )
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        FakeCluster { url, shared, task }
    }

    /// A review client for this cluster (plain HTTP on loopback), configured as the server's.
    pub(crate) fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("url"));
        svm_server::auth::review_client(config).expect("client")
    }

    pub(crate) fn token_reviews(&self) -> usize {
        self.shared.calls.token_reviews.load(Ordering::SeqCst)
    }

    pub(crate) fn access_reviews(&self) -> usize {
        self.shared.calls.access_reviews.load(Ordering::SeqCst)
    }

    pub(crate) fn last_access_review(&self) -> Value {
        self.shared
            .calls
            .last_access_review
            .lock()
            .expect("lock")
            .clone()
            .expect("a SubjectAccessReview was sent")
    }

    /// Answer every review with a 503 Status (or stop doing so).
    pub(crate) fn set_failing(&self, failing: bool) {
        self.shared.failing.store(failing, Ordering::SeqCst);
    }

    pub(crate) fn allow(&self, user: &str, verb: &str, resource: &str) {
        self.shared.policy.lock().expect("lock").allowed.push((
            user.into(),
            verb.into(),
            resource.into(),
        ));
    }

    pub(crate) fn revoke_all(&self) {
        self.shared.policy.lock().expect("lock").allowed.clear();
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn unavailable() -> (StatusCode, Json<Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server is currently unable to handle the request",
            "reason": "ServiceUnavailable", "code": 503
        })),
    )
}

async fn token_review(
    State(shared): State<Arc<Shared>>,
    Json(mut review): Json<Value>,
) -> (StatusCode, Json<Value>) {
    shared.calls.token_reviews.fetch_add(1, Ordering::SeqCst);
    if shared.failing.load(Ordering::SeqCst) {
        return unavailable();
    }
    let token = review["spec"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let user = shared
        .policy
        .lock()
        .expect("lock")
        .tokens
        .get(&token)
        .cloned();
    review["status"] = match user {
        Some(user) => json!({
            "authenticated": true,
            "user": user,
            "audiences": ["https://kubernetes.default.svc.cluster.local"]
        }),
        // Recording 15a step 1: no `authenticated`, an empty user and the error.
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    (StatusCode::CREATED, Json(review))
}

async fn access_review(
    State(shared): State<Arc<Shared>>,
    Json(mut review): Json<Value>,
) -> (StatusCode, Json<Value>) {
    shared.calls.access_reviews.fetch_add(1, Ordering::SeqCst);
    *shared.calls.last_access_review.lock().expect("lock") = Some(review.clone());
    if shared.failing.load(Ordering::SeqCst) {
        return unavailable();
    }
    let spec = &review["spec"];
    let user = spec["user"].as_str().unwrap_or_default();
    let masters = spec["groups"]
        .as_array()
        .is_some_and(|g| g.iter().any(|g| g == "system:masters"));
    let (verb, resource) = match (&spec["resourceAttributes"], &spec["nonResourceAttributes"]) {
        (Value::Object(r), _) => (r.get("verb"), r.get("resource")),
        (_, Value::Object(n)) => (n.get("verb"), n.get("path")),
        _ => (None, None),
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let wanted = (user.to_string(), text(verb), text(resource));
    let allowed = masters
        || shared
            .policy
            .lock()
            .expect("lock")
            .allowed
            .contains(&wanted);
    review["status"] = if allowed && !masters {
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"test\""})
    } else if allowed {
        json!({"allowed": true})
    } else {
        // Recording 15b step 1: RBAC never actively denies.
        json!({"allowed": false})
    };
    (StatusCode::CREATED, Json(review))
}

/// Recording 14's ConfigMap, with the data the test gives.
async fn authentication_config_map(State(shared): State<Arc<Shared>>) -> (StatusCode, Json<Value>) {
    if shared.failing.load(Ordering::SeqCst) {
        return unavailable();
    }
    let data = shared
        .policy
        .lock()
        .expect("lock")
        .authentication_config
        .clone();
    match data {
        Some(data) => (
            StatusCode::OK,
            Json(json!({
                "kind": "ConfigMap",
                "apiVersion": "v1",
                "metadata": {
                    "name": "extension-apiserver-authentication",
                    "namespace": "kube-system",
                    "uid": "735e3206-346d-4502-8ae8-f74b349f101f",
                    "resourceVersion": "32"
                },
                "data": data
            })),
        ),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "configmaps \"extension-apiserver-authentication\" not found",
                "reason": "NotFound",
                "details": {"name": "extension-apiserver-authentication", "kind": "configmaps"},
                "code": 404
            })),
        ),
    }
}
