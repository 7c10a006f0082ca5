//! Bearer tokens (TokenReview) and authorization (SubjectAccessReview) against the stand-in
//! cluster, through `Auth::admit`: results, the resource attributes sent, and the caches.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request};
use serde_json::json;
use svm_server::auth::{AccessReviewLimits, Auth, ManualClock, Rejection, UserInfo};

use crate::fake_cluster::{FakeCluster, Policy};

const SVM: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

fn policy() -> Policy {
    let mut policy = Policy::default();
    // Recording 15a step 3's user.
    policy.tokens.insert(
        "sa-token".into(),
        json!({
            "username": "system:serviceaccount:default:default",
            "uid": "5f95810b-327d-4da7-8c4a-655f5f8c0586",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["JTI=13317aba"]}
        }),
    );
    policy.tokens.insert(
        "admin-token".into(),
        json!({"username": "admin", "groups": ["system:masters"]}),
    );
    policy
}

fn request(method: Method, target: &str, token: Option<&str>) -> Request<()> {
    let mut builder = Request::builder().method(method).uri(target);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    builder.body(()).expect("request")
}

struct Setup {
    cluster: FakeCluster,
    clock: Arc<ManualClock>,
    auth: Auth,
}

async fn setup(authorized_ttl: u64, unauthorized_ttl: u64) -> Setup {
    let cluster = FakeCluster::start(policy()).await;
    let clock = Arc::new(ManualClock::default());
    let auth = Auth::builder()
        .token_review(cluster.client())
        .subject_access_review(cluster.client())
        .token_cache_ttl(Duration::from_secs(10))
        .authorization_cache_ttls(
            Duration::from_secs(authorized_ttl),
            Duration::from_secs(unauthorized_ttl),
        )
        .clock(clock.clone())
        .build()
        .expect("auth");
    Setup {
        cluster,
        clock,
        auth,
    }
}

async fn admit(
    auth: &Auth,
    method: Method,
    target: &str,
    token: Option<&str>,
) -> Result<UserInfo, Rejection> {
    auth.admit(&mut request(method, target, token)).await
}

#[tokio::test]
async fn a_reviewed_token_authenticates_and_its_answer_is_cached_for_the_ttl() {
    let s = setup(10, 10).await;
    s.cluster.allow(
        "system:serviceaccount:default:default",
        "list",
        "storageversionmigrations",
    );

    let user = admit(&s.auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("admitted");
    assert_eq!(user.name, "system:serviceaccount:default:default");
    assert_eq!(user.uid, "5f95810b-327d-4da7-8c4a-655f5f8c0586");
    assert_eq!(
        user.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );
    assert_eq!(
        user.extra["authentication.kubernetes.io/credential-id"],
        ["JTI=13317aba"]
    );
    assert_eq!(s.cluster.token_reviews(), 1);

    s.clock.advance(Duration::from_secs(9));
    admit(&s.auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("admitted");
    assert_eq!(s.cluster.token_reviews(), 1, "answered from the cache");
    assert_eq!(s.auth.metrics().token_cache.hits.get(), 1);

    s.clock.advance(Duration::from_secs(1));
    admit(&s.auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("admitted");
    assert_eq!(s.cluster.token_reviews(), 2, "expired: reviewed again");
    assert_eq!(s.auth.metrics().token_cache.misses.get(), 2);
}

#[tokio::test]
async fn rejected_tokens_and_an_unreachable_reviewer_are_401() {
    let s = setup(10, 10).await;
    let rejected = admit(&s.auth, Method::GET, SVM, Some("not-a-valid-token")).await;
    assert!(
        matches!(rejected, Err(Rejection::Unauthenticated)),
        "{rejected:?}"
    );

    let fresh = setup(10, 10).await;
    fresh.cluster.set_failing(true);
    let down = admit(&fresh.auth, Method::GET, SVM, Some("sa-token")).await;
    assert!(matches!(down, Err(Rejection::Unauthenticated)), "{down:?}");
    fresh.cluster.set_failing(false);
    fresh.cluster.allow(
        "system:serviceaccount:default:default",
        "list",
        "storageversionmigrations",
    );
    // A failed review is not cached: the next request is reviewed and admitted.
    admit(&fresh.auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("admitted");
    assert_eq!(fresh.cluster.token_reviews(), 2);
}

#[tokio::test]
async fn the_access_review_carries_the_request_attributes_and_identity() {
    let s = setup(10, 10).await;
    let denied = admit(
        &s.auth,
        Method::PUT,
        "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations/m1/status",
        Some("sa-token"),
    )
    .await;
    let Err(rejection) = denied else {
        panic!("allowed: {denied:?}");
    };
    let status = rejection.to_status();
    assert_eq!(status["code"], 403);
    assert_eq!(
        status["message"],
        "storageversionmigrations.storagemigration.k8s.io \"m1\" is forbidden: User \"system:serviceaccount:default:default\" cannot update resource \"storageversionmigrations/status\" in API group \"storagemigration.k8s.io\" at the cluster scope"
    );
    let review = s.cluster.last_access_review();
    assert_eq!(review["apiVersion"], "authorization.k8s.io/v1");
    assert_eq!(review["kind"], "SubjectAccessReview");
    assert_eq!(
        review["spec"],
        json!({
            "user": "system:serviceaccount:default:default",
            "uid": "5f95810b-327d-4da7-8c4a-655f5f8c0586",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["JTI=13317aba"]},
            "resourceAttributes": {
                "verb": "update",
                "group": "storagemigration.k8s.io",
                "version": "v1beta1",
                "resource": "storageversionmigrations",
                "subresource": "status",
                "name": "m1"
            }
        })
    );

    // A discovery path is a non-resource review.
    let _ = admit(
        &s.auth,
        Method::GET,
        "/apis/storagemigration.k8s.io",
        Some("sa-token"),
    )
    .await;
    assert_eq!(
        s.cluster.last_access_review()["spec"]["nonResourceAttributes"],
        json!({"path": "/apis/storagemigration.k8s.io", "verb": "get"})
    );
}

#[tokio::test]
async fn masters_and_health_paths_need_no_review_and_anonymous_is_401_elsewhere() {
    let s = setup(10, 10).await;
    let admin = admit(&s.auth, Method::DELETE, SVM, Some("admin-token"))
        .await
        .expect("admin");
    assert!(admin.groups.iter().any(|g| g == "system:masters"));
    let probe = admit(&s.auth, Method::GET, "/readyz", None)
        .await
        .expect("probe");
    assert_eq!(probe.name, "system:anonymous");
    assert_eq!(s.cluster.access_reviews(), 0);

    let anonymous = admit(&s.auth, Method::GET, SVM, None).await;
    let Err(rejection) = anonymous else {
        panic!("{anonymous:?}");
    };
    assert_eq!(rejection.to_status()["code"], 401);
    // Bad credentials fail even on an always-allowed path.
    assert!(
        admit(&s.auth, Method::GET, "/readyz", Some("nope"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn allowed_and_denied_answers_expire_on_their_own_ttls() {
    // Allowed answers live 10 s, denied ones 30 s.
    let s = setup(10, 30).await;
    let sa = "system:serviceaccount:default:default";
    s.cluster.allow(sa, "list", "storageversionmigrations");
    let storage_states = "/apis/storagemigration.k8s.io/v1/storagestates";

    admit(&s.auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("allowed");
    assert!(
        admit(&s.auth, Method::GET, storage_states, Some("sa-token"))
            .await
            .is_err()
    );
    assert_eq!(s.cluster.access_reviews(), 2);

    // Both cached.
    admit(&s.auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("allowed");
    assert!(
        admit(&s.auth, Method::GET, storage_states, Some("sa-token"))
            .await
            .is_err()
    );
    assert_eq!(s.cluster.access_reviews(), 2);
    assert_eq!(s.auth.metrics().authorization_cache.hits.get(), 2);

    // The policy changes both ways; the cached answers still stand until they expire.
    s.cluster.revoke_all();
    s.cluster.allow(sa, "list", "storagestates");
    s.clock.advance(Duration::from_secs(10));
    let denied_now = admit(&s.auth, Method::GET, SVM, Some("sa-token")).await;
    assert!(
        denied_now.is_err(),
        "allowed answer expired: asked again and denied"
    );
    assert!(
        admit(&s.auth, Method::GET, storage_states, Some("sa-token"))
            .await
            .is_err(),
        "the denied answer is still cached"
    );
    assert_eq!(s.cluster.access_reviews(), 3);

    s.clock.advance(Duration::from_secs(20));
    admit(&s.auth, Method::GET, storage_states, Some("sa-token"))
        .await
        .expect("denied answer expired: asked again and allowed");
    assert_eq!(s.cluster.access_reviews(), 4);
}

#[tokio::test]
async fn an_unreachable_authorizer_is_a_500_and_is_not_cached() {
    let s = setup(10, 10).await;
    s.cluster.allow(
        "system:serviceaccount:default:default",
        "list",
        "storageversionmigrations",
    );
    // The token's answer is cached now, so below only the access review meets the outage.
    admit(&s.auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("allowed");
    s.cluster.set_failing(true);
    let result = admit(&s.auth, Method::POST, SVM, Some("sa-token")).await;
    let Err(rejection) = result else {
        panic!("{result:?}");
    };
    let status = rejection.to_status();
    assert_eq!(status["code"], 500, "{status}");
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(s.cluster.token_reviews(), 1);

    let reviews = s.cluster.access_reviews();
    assert!(
        admit(&s.auth, Method::POST, SVM, Some("sa-token"))
            .await
            .is_err()
    );
    assert_eq!(
        s.cluster.access_reviews(),
        reviews + 1,
        "the failure was not cached"
    );
    s.cluster.set_failing(false);
    s.cluster.allow(
        "system:serviceaccount:default:default",
        "create",
        "storageversionmigrations",
    );
    admit(&s.auth, Method::POST, SVM, Some("sa-token"))
        .await
        .expect("recovered");
}

#[tokio::test]
async fn decisions_past_the_access_review_budget_are_a_500_with_retry_after_and_cached_ones_pass() {
    let cluster = FakeCluster::start(policy()).await;
    let clock = Arc::new(ManualClock::default());
    let auth = Auth::builder()
        .token_review(cluster.client())
        .subject_access_review(cluster.client())
        // Two reviews, then one a second.
        .access_review_limits(AccessReviewLimits {
            max_in_flight: 4,
            qps: 1.0,
            burst: 2,
        })
        .clock(clock.clone())
        .build()
        .expect("auth");
    let user = "system:serviceaccount:default:default";
    for verb in ["list", "create", "get"] {
        cluster.allow(user, verb, "storageversionmigrations");
    }
    admit(&auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("list: the first review");
    admit(&auth, Method::POST, SVM, Some("sa-token"))
        .await
        .expect("create: the second review");
    assert_eq!(cluster.access_reviews(), 2);

    // A third decision not in the cache finds the bucket empty: not asked, a 500 as a failed
    // authorization, with Retry-After.
    let result = admit(&auth, Method::GET, &format!("{SVM}/m1"), Some("sa-token")).await;
    let Err(rejection) = result else {
        panic!("{result:?}");
    };
    assert!(
        matches!(rejection, Rejection::TooManyAccessReviews),
        "{rejection:?}"
    );
    let status = rejection.to_status();
    assert_eq!(status["code"], 500, "{status}");
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(
        status["message"],
        "Internal error occurred: too many SubjectAccessReviews in flight, please try again later"
    );
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    let response = axum::response::IntoResponse::into_response(rejection);
    assert_eq!(response.status(), 500);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(cluster.access_reviews(), 2, "the cluster was not asked");
    assert_eq!(auth.metrics().access_reviews_throttled.get(), 1);

    // Cached decisions never wait for the budget.
    admit(&auth, Method::GET, SVM, Some("sa-token"))
        .await
        .expect("list: cached");
    // A second later the bucket has one review again.
    clock.advance(Duration::from_secs(1));
    admit(&auth, Method::GET, &format!("{SVM}/m1"), Some("sa-token"))
        .await
        .expect("get: reviewed");
    assert_eq!(cluster.access_reviews(), 3);
}
