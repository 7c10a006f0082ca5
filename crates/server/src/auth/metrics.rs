//! Counters of the authentication and authorization layer, for the server's `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Hit and miss counters of one cache.
#[derive(Debug, Clone, Default)]
pub struct CacheCounters {
    /// Answers found in the cache.
    pub hits: Counter,
    /// Lookups that had to ask the cluster.
    pub misses: Counter,
}

impl CacheCounters {
    pub(crate) fn record(&self, hit: bool) {
        if hit {
            self.hits.inc();
        } else {
            self.misses.inc();
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub decision: &'static str,
}

/// Cache hits and misses of the TokenReview and SubjectAccessReview caches, plus the outcome of
/// every authentication and authorization. Cheap to clone (counters are shared).
#[derive(Debug, Clone, Default)]
pub struct AuthMetrics {
    /// The TokenReview cache.
    pub token_cache: CacheCounters,
    /// The SubjectAccessReview cache.
    pub authorization_cache: CacheCounters,
    /// TokenReviews sent to the cluster.
    pub token_reviews: Counter,
    /// Requests with a new token answered 429 because TokenReviews were at their bound.
    pub token_reviews_throttled: Counter,
    /// SubjectAccessReviews sent to the cluster.
    pub access_reviews: Counter,
    /// Requests whose decision was not cached turned away (500 with Retry-After) because
    /// SubjectAccessReviews were at their bound.
    pub access_reviews_throttled: Counter,
    /// `result`: success, anonymous (no credentials presented), failure (a presented credential
    /// was rejected or could not be checked: 401).
    pub authentications: Family<ResultLabels, Counter>,
    /// `decision`: allowed, denied, error (the SubjectAccessReview call failed), throttled
    /// (the SubjectAccessReview budget was spent).
    pub authorizations: Family<DecisionLabels, Counter>,
}

impl AuthMetrics {
    /// Counters at zero, not yet registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register every counter (names carry the `svm_apiserver_` prefix).
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("svm_apiserver");
        registry.register(
            "authentication_token_cache_hits",
            "TokenReview results answered from the cache",
            self.token_cache.hits.clone(),
        );
        registry.register(
            "authentication_token_cache_misses",
            "Bearer tokens not in the cache (sent to TokenReview)",
            self.token_cache.misses.clone(),
        );
        registry.register(
            "authentication_token_reviews",
            "TokenReviews sent to the cluster",
            self.token_reviews.clone(),
        );
        registry.register(
            "authentication_token_reviews_throttled",
            "Requests with a token not in the cache turned away (429) because TokenReviews were at their bound",
            self.token_reviews_throttled.clone(),
        );
        registry.register(
            "authorization_access_reviews",
            "SubjectAccessReviews sent to the cluster",
            self.access_reviews.clone(),
        );
        registry.register(
            "authorization_access_reviews_throttled",
            "Requests whose decision was not cached turned away (500 with Retry-After) because SubjectAccessReviews were at their bound",
            self.access_reviews_throttled.clone(),
        );
        registry.register(
            "authorization_cache_hits",
            "SubjectAccessReview decisions answered from the cache",
            self.authorization_cache.hits.clone(),
        );
        registry.register(
            "authorization_cache_misses",
            "Authorization decisions not in the cache (sent as a SubjectAccessReview)",
            self.authorization_cache.misses.clone(),
        );
        registry.register(
            "authentication_attempts",
            "Request authentications by result",
            self.authentications.clone(),
        );
        registry.register(
            "authorization_decisions",
            "Request authorizations by decision",
            self.authorizations.clone(),
        );
    }

    pub(crate) fn authentication(&self, result: &'static str) {
        self.authentications
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    pub(crate) fn authorization(&self, decision: &'static str) {
        self.authorizations
            .get_or_create(&DecisionLabels { decision })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_counters_appear_in_the_text_exposition() {
        let metrics = AuthMetrics::new();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.token_cache.hits.inc();
        metrics.authorization("denied");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains("svm_apiserver_authentication_token_cache_hits_total 1"),
            "{text}"
        );
        assert!(
            text.contains("svm_apiserver_authorization_decisions_total{decision=\"denied\"} 1"),
            "{text}"
        );
        assert!(text.contains("svm_apiserver_authorization_cache_misses_total 0"));
    }
}
