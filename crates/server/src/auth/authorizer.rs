//! May this caller do this: kube-apiserver's delegated authorization chain, in its order —
//!
//! 1. non-resource paths in `--authorization-always-allow-paths` (health checks);
//! 2. members of `system:masters` (the aggregator's own probes among them);
//! 3. a SubjectAccessReview sent to the cluster, its answer cached: "allowed" for the
//!    authorized TTL, "denied" for the unauthorized TTL, each in a cache of its own; a
//!    decision not in the cache costs a review within the SubjectAccessReview budget
//!    ([`AccessReviewLimits`]), and one that finds the budget spent is an error.
//!
//! Without a cluster to ask, everything else is denied.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes as SarResourceAttributes, SubjectAccessReviewSpec,
};

use super::attributes::RequestAttributes;
use super::budget::{ReviewBudget, ReviewLimits};
use super::cache::{Clock, ReviewCache, Source, key_of};
use super::metrics::AuthMetrics;
use super::user::{MASTERS_GROUP, UserInfo};
use super::webhook::{AccessVerdict, review_access};

/// How many decisions are remembered at most.
const DECISION_CACHE_CAPACITY: u64 = 16_384;

/// The answer to "may this caller make this request".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// Denied, with the reason the cluster gave (possibly empty).
    Deny(String),
}

/// The cost bound of decisions not in the cache: at most `max_in_flight` SubjectAccessReviews
/// at once, and at most `burst` at a time refilled at `qps` per second (upstream's delegating
/// authorizer has its client limited to 200/s with a burst of 400, and no bound on reviews in
/// flight). A request that finds neither is answered as a failed authorization (500) with
/// `Retry-After`; decisions already cached never wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccessReviewLimits {
    /// SubjectAccessReviews in flight at once (`--authorization-webhook-max-inflight`).
    pub max_in_flight: usize,
    /// SubjectAccessReviews per second, refilling the bucket (`--authorization-webhook-qps`).
    pub qps: f64,
    /// The bucket's size: reviews allowed at once above the rate
    /// (`--authorization-webhook-burst`).
    pub burst: u32,
}

impl Default for AccessReviewLimits {
    fn default() -> Self {
        AccessReviewLimits {
            max_in_flight: 16,
            qps: 200.0,
            burst: 400,
        }
    }
}

impl From<AccessReviewLimits> for ReviewLimits {
    fn from(limits: AccessReviewLimits) -> Self {
        ReviewLimits {
            max_in_flight: limits.max_in_flight,
            qps: limits.qps,
            burst: limits.burst,
        }
    }
}

/// Why no decision could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthorizeError {
    /// The SubjectAccessReview failed (a 500, as upstream; not cached).
    Failed(String),
    /// The decision is not cached and the SubjectAccessReview budget is spent: not asked.
    Busy,
}

pub(crate) struct Authorizer {
    always_allow: AlwaysAllowPaths,
    reviewer: Option<kube::Client>,
    budget: ReviewBudget,
    /// Allowed (`Decision::Allow`) and denied answers, each kept for its own TTL.
    decisions: ReviewCache<Decision>,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    metrics: AuthMetrics,
}

impl Authorizer {
    pub(crate) fn new(
        always_allow_paths: &[String],
        reviewer: Option<kube::Client>,
        limits: AccessReviewLimits,
        authorized_ttl: Duration,
        unauthorized_ttl: Duration,
        clock: Arc<dyn Clock>,
        metrics: AuthMetrics,
    ) -> Self {
        Authorizer {
            always_allow: AlwaysAllowPaths::new(always_allow_paths),
            reviewer,
            budget: ReviewBudget::new(limits.into(), clock.clone()),
            decisions: ReviewCache::new(DECISION_CACHE_CAPACITY, clock),
            authorized_ttl,
            unauthorized_ttl,
            metrics,
        }
    }

    /// Whether `path` is served without authorization (and without credentials).
    pub(crate) fn always_allowed(&self, attributes: &RequestAttributes) -> bool {
        attributes.resource.is_none() && self.always_allow.matches(&attributes.path)
    }

    /// The decision; an error when the cluster could not be asked (a 500, as upstream).
    pub(crate) async fn authorize(
        &self,
        user: &UserInfo,
        attributes: &RequestAttributes,
    ) -> Result<Decision, AuthorizeError> {
        let decision = self.decide(user, attributes).await;
        self.metrics.authorization(match &decision {
            Ok(Decision::Allow) => "allowed",
            Ok(Decision::Deny(_)) => "denied",
            Err(AuthorizeError::Failed(_)) => "error",
            Err(AuthorizeError::Busy) => "throttled",
        });
        decision
    }

    async fn decide(
        &self,
        user: &UserInfo,
        attributes: &RequestAttributes,
    ) -> Result<Decision, AuthorizeError> {
        if self.always_allowed(attributes) || user.in_group(MASTERS_GROUP) {
            return Ok(Decision::Allow);
        }
        let Some(client) = &self.reviewer else {
            return Ok(Decision::Deny(String::new()));
        };
        let spec = review_spec(user, attributes);
        // The serialized spec is the key: every field of it can change the answer.
        let key =
            serde_json::to_vec(&spec).map_err(|err| AuthorizeError::Failed(err.to_string()))?;
        let review = async {
            let Some(_slot) = self.budget.admit().await else {
                return Err(AuthorizeError::Busy);
            };
            self.metrics.access_reviews.inc();
            let AccessVerdict { allowed, reason } = review_access(client, &spec)
                .await
                .map_err(AuthorizeError::Failed)?;
            Ok(if allowed {
                Decision::Allow
            } else {
                Decision::Deny(reason)
            })
        };
        let ttl = |decision: &Decision| match decision {
            Decision::Allow => self.authorized_ttl,
            Decision::Deny(_) => self.unauthorized_ttl,
        };
        match self
            .decisions
            .get_or_review(key_of(&key), review, ttl)
            .await
        {
            Ok((decision, source)) => {
                self.metrics
                    .authorization_cache
                    .record(source == Source::Cache);
                Ok(decision)
            }
            Err(err) => {
                self.metrics.authorization_cache.record(false);
                if let AuthorizeError::Busy = err.as_ref() {
                    self.metrics.access_reviews_throttled.inc();
                }
                Err(err.as_ref().clone())
            }
        }
    }
}

/// The SubjectAccessReview spec kube-apiserver's webhook authorizer sends for a request.
pub(crate) fn review_spec(
    user: &UserInfo,
    attributes: &RequestAttributes,
) -> SubjectAccessReviewSpec {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let (resource_attributes, non_resource_attributes) = match &attributes.resource {
        Some(r) => (
            Some(SarResourceAttributes {
                namespace: non_empty(&r.namespace),
                verb: non_empty(&attributes.verb),
                group: non_empty(&r.group),
                version: non_empty(&r.version),
                resource: non_empty(&r.resource),
                subresource: non_empty(&r.subresource),
                name: non_empty(&r.name),
                ..SarResourceAttributes::default()
            }),
            None,
        ),
        None => (
            None,
            Some(NonResourceAttributes {
                path: non_empty(&attributes.path),
                verb: non_empty(&attributes.verb),
            }),
        ),
    };
    SubjectAccessReviewSpec {
        user: non_empty(&user.name),
        uid: non_empty(&user.uid),
        groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
        resource_attributes,
        non_resource_attributes,
    }
}

/// Exact paths, and prefixes written `/prefix/*`.
#[derive(Debug, Clone)]
struct AlwaysAllowPaths {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl AlwaysAllowPaths {
    fn new(paths: &[String]) -> Self {
        let mut exact = Vec::new();
        let mut prefixes = Vec::new();
        for path in paths.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
            match path.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix.to_string()),
                None => exact.push(path.to_string()),
            }
        }
        AlwaysAllowPaths { exact, prefixes }
    }

    fn matches(&self, path: &str) -> bool {
        self.exact.iter().any(|p| p == path) || self.prefixes.iter().any(|p| path.starts_with(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn attrs(method: Method, path: &str) -> RequestAttributes {
        RequestAttributes::from_request(&method, path, None)
    }

    fn jane() -> UserInfo {
        UserInfo {
            name: "jane".into(),
            groups: vec!["system:authenticated".into()],
            ..UserInfo::default()
        }
    }

    #[tokio::test]
    async fn without_a_cluster_only_health_paths_and_masters_are_allowed() {
        let authorizer = Authorizer::new(
            &["/healthz".into(), "/livez".into(), "/debug/*".into()],
            None,
            AccessReviewLimits::default(),
            Duration::from_secs(10),
            Duration::from_secs(10),
            Arc::new(crate::auth::cache::SystemClock),
            AuthMetrics::new(),
        );
        let list = attrs(
            Method::GET,
            "/apis/storagemigration.k8s.io/v1/storagestates",
        );
        assert_eq!(
            authorizer.authorize(&jane(), &list).await,
            Ok(Decision::Deny(String::new()))
        );
        let health = attrs(Method::GET, "/healthz");
        assert_eq!(
            authorizer.authorize(&jane(), &health).await,
            Ok(Decision::Allow)
        );
        let debug = attrs(Method::GET, "/debug/pprof");
        assert_eq!(
            authorizer.authorize(&jane(), &debug).await,
            Ok(Decision::Allow)
        );
        assert!(!authorizer.always_allowed(&attrs(Method::GET, "/healthzz")));
        let mut admin = jane();
        admin.groups.push(MASTERS_GROUP.into());
        assert_eq!(
            authorizer.authorize(&admin, &list).await,
            Ok(Decision::Allow)
        );
    }

    #[test]
    fn review_spec_carries_the_request_attributes() {
        let mut user = jane();
        user.uid = "u1".into();
        user.extra.insert("scopes".into(), vec!["a".into()]);
        let spec = review_spec(
            &user,
            &attrs(
                Method::PUT,
                "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations/m1/status",
            ),
        );
        let json = serde_json::to_value(&spec).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "user": "jane",
                "uid": "u1",
                "groups": ["system:authenticated"],
                "extra": {"scopes": ["a"]},
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
        let spec = review_spec(&jane(), &attrs(Method::GET, "/openapi/v2"));
        assert_eq!(
            serde_json::to_value(&spec).expect("json")["nonResourceAttributes"],
            serde_json::json!({"path": "/openapi/v2", "verb": "get"})
        );
    }
}
