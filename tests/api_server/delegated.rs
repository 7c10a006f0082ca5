//! The authn/authz matrix with the real binary delegating to the kube-apiserver test double's
//! TokenReview and SubjectAccessReview (`--authentication-kubeconfig`,
//! `--authorization-kubeconfig`): tokens accepted or refused, SAR allow and deny, health paths
//! open, and the webhook caches visible in /metrics.

use kube_double::{AccessRule, KubeDouble, TokenUser};
use serde_json::Value;

use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

/// The value of a counter in Prometheus text (0 when absent).
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_access_reviews_are_delegated_to_the_cluster() {
    let cluster = KubeDouble::start().await.unwrap();
    cluster.add_token("alice-token", TokenUser::new("alice", &["devs"]));
    cluster.add_token("bob-token", TokenUser::new("bob", &["guests"]));
    cluster.set_access_rules(vec![
        AccessRule::allow()
            .user("alice")
            .api_group("storagemigration.k8s.io")
            .resource("storageversionmigrations"),
        AccessRule::deny().user("bob").reason("bob may not"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("cluster.kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig_yaml()).unwrap();
    let server = ServerProcess::start_with(
        Backend::Embedded,
        &[
            &format!("--authentication-kubeconfig={}", kubeconfig.display()),
            &format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--authentication-skip-lookup",
        ],
    );
    let http = server.anonymous_http_client();
    let base = &server.url;
    let get = |token: &'static str| http.get(format!("{base}{SVMS}")).bearer_auth(token).send();

    // A token TokenReview accepts, allowed by SubjectAccessReview; twice, so caches are hit.
    for _ in 0..2 {
        let resp = get("alice-token").await.unwrap();
        assert_eq!(resp.status(), 200);
    }
    // Authenticated, but SubjectAccessReview denies: 403 with a Status naming the user.
    let resp = get("bob-token").await.unwrap();
    assert_eq!(resp.status(), 403);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["reason"], "Forbidden");
    assert!(
        status["message"].as_str().unwrap().contains("bob"),
        "{status}"
    );
    // alice may list migrations but not StorageStates (no rule allows it).
    let states = http
        .get(format!(
            "{base}/apis/storagemigration.k8s.io/v1/storagestates"
        ))
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap();
    assert_eq!(states.status(), 403);
    // A token TokenReview refuses: 401.
    let resp = get("no-such-token").await.unwrap();
    assert_eq!(resp.status(), 401);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["reason"], "Unauthorized");
    // Health paths are open to everyone.
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(
            http.get(format!("{base}{path}"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }

    let metrics = server
        .http_client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        counter(&metrics, "svm_apiserver_authentication_token_cache_hits") >= 1.0,
        "{metrics}"
    );
    assert!(
        counter(&metrics, "svm_apiserver_authorization_cache_hits") >= 1.0,
        "{metrics}"
    );
    assert!(
        counter(&metrics, "svm_apiserver_authorization_cache_misses") >= 2.0,
        "{metrics}"
    );
}
