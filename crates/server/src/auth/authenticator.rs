//! Who is calling: kube-apiserver's delegated authentication chain, in its order —
//!
//! 1. the front proxy: a client certificate from the request-header CA whose CN is allowed
//!    vouches for the user named in `X-Remote-User` / `X-Remote-Group` / `X-Remote-Extra-*`;
//! 2. a client certificate from the client CA: CN is the user, O the groups;
//! 3. a bearer token, reviewed by the cluster (TokenReview), answers cached.
//!
//! A presented credential that fails makes the request fail (401); a request with no usable
//! credential is anonymous, which the caller admits or not.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, header};
use rustls_pki_types::CertificateDer;

use super::budget::{ReviewBudget, ReviewLimits};
use super::cache::{Clock, ReviewCache, Source, key_of};
use super::metrics::AuthMetrics;
use super::user::UserInfo;
use super::webhook::{TokenVerdict, review_token};
use super::x509::{CaBundle, CaVerifier, Subject};
use crate::error::SetupError;

/// The front proxy's settings (`--requestheader-*`, or the extension-apiserver-authentication
/// ConfigMap).
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    /// The CA that issued the front proxy's client certificate (`--requestheader-client-ca-file`).
    pub client_ca: CaBundle,
    /// CNs the front proxy's certificate may have; empty allows any from `client_ca`.
    pub allowed_names: Vec<String>,
    /// Headers carrying the user name; the first present one wins.
    pub username_headers: Vec<String>,
    /// Headers carrying the groups; every value of each counts.
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes: the rest of the header name is the key.
    pub extra_headers_prefixes: Vec<String>,
}

/// The outcome of authenticating one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// The caller, named by the front proxy, a client certificate or a reviewed token.
    User(UserInfo),
    /// Nothing identified the caller, and nothing presented was wrong.
    NoCredentials,
    /// A presented credential was rejected (or could not be checked): 401.
    Failed(String),
    /// A bearer token not in the cache, while TokenReviews are at their bound: 429, try later.
    Busy,
}

/// How many TokenReview answers are remembered at most.
const TOKEN_CACHE_CAPACITY: u64 = 16_384;

/// How bearer tokens are reviewed: the cluster to ask, how long answers are kept, and how many
/// reviews a flood of unknown tokens may cost.
#[derive(Clone)]
pub(crate) struct TokenReviewConfig {
    pub client: kube::Client,
    pub success_ttl: Duration,
    pub failure_ttl: Duration,
    pub limits: TokenReviewLimits,
}

/// The cost bound of tokens not in the cache: at most `max_in_flight` TokenReviews at once,
/// and at most `burst` at a time refilled at `qps` per second. A token that finds neither is
/// answered 429 (with Retry-After); tokens already cached never wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenReviewLimits {
    /// TokenReviews in flight at once (`--authentication-token-webhook-max-inflight`).
    pub max_in_flight: usize,
    /// TokenReviews per second, refilling the bucket (`--authentication-token-webhook-qps`).
    pub qps: f64,
    /// The bucket's size: reviews allowed at once above the rate
    /// (`--authentication-token-webhook-burst`).
    pub burst: u32,
}

impl Default for TokenReviewLimits {
    fn default() -> Self {
        TokenReviewLimits {
            max_in_flight: 16,
            qps: 50.0,
            burst: 100,
        }
    }
}

impl From<TokenReviewLimits> for ReviewLimits {
    fn from(limits: TokenReviewLimits) -> Self {
        ReviewLimits {
            max_in_flight: limits.max_in_flight,
            qps: limits.qps,
            burst: limits.burst,
        }
    }
}

pub(crate) struct Authenticator {
    request_header: Option<RequestHeader>,
    client_ca: Option<CaVerifier>,
    tokens: Option<TokenReviewer>,
    metrics: AuthMetrics,
}

struct RequestHeader {
    verifier: CaVerifier,
    allowed_names: Vec<String>,
    username_headers: Vec<HeaderName>,
    group_headers: Vec<HeaderName>,
    /// Lower case, as header names are.
    extra_prefixes: Vec<String>,
}

struct TokenReviewer {
    client: kube::Client,
    /// Keyed by sha256 of the token: tokens themselves are not kept.
    cache: ReviewCache<TokenVerdict>,
    success_ttl: Duration,
    failure_ttl: Duration,
    budget: ReviewBudget,
}

/// Why a token got no verdict.
#[derive(Debug)]
enum ReviewError {
    /// The review was not made: no capacity.
    Busy,
    /// The review call failed (not cached).
    Failed(String),
}

impl Authenticator {
    pub(crate) fn new(
        request_header: Option<&RequestHeaderConfig>,
        client_ca: Option<&CaBundle>,
        token_review: Option<TokenReviewConfig>,
        clock: Arc<dyn Clock>,
        metrics: AuthMetrics,
    ) -> crate::error::SetupResult<Self> {
        let request_header = request_header.map(RequestHeader::new).transpose()?;
        let client_ca = client_ca.map(CaVerifier::new).transpose()?;
        let tokens = token_review.map(|config| TokenReviewer {
            client: config.client,
            cache: ReviewCache::new(TOKEN_CACHE_CAPACITY, clock.clone()),
            success_ttl: config.success_ttl,
            failure_ttl: config.failure_ttl,
            budget: ReviewBudget::new(config.limits.into(), clock.clone()),
        });
        Ok(Authenticator {
            request_header,
            client_ca,
            tokens,
            metrics,
        })
    }

    pub(crate) async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer_certificates: &[CertificateDer<'static>],
    ) -> Authentication {
        let outcome = self.identify(headers, peer_certificates).await;
        self.metrics.authentication(match &outcome {
            Authentication::User(_) => "success",
            Authentication::NoCredentials => "anonymous",
            Authentication::Failed(_) => "failure",
            Authentication::Busy => "throttled",
        });
        outcome
    }

    async fn identify(
        &self,
        headers: &HeaderMap,
        peer_certificates: &[CertificateDer<'static>],
    ) -> Authentication {
        let mut failures = Vec::new();
        if !peer_certificates.is_empty() {
            if let Some(front_proxy) = &self.request_header {
                match front_proxy.authenticate(headers, peer_certificates) {
                    Ok(Some(user)) => return Authentication::User(user.with_authenticated_group()),
                    Ok(None) => {}
                    Err(err) => failures.push(err),
                }
            }
            if let Some(client_ca) = &self.client_ca {
                match client_certificate_user(client_ca, peer_certificates) {
                    Ok(user) => return Authentication::User(user.with_authenticated_group()),
                    Err(err) => failures.push(err),
                }
            }
        }
        match bearer_token(headers) {
            None => {}
            Some(Err(err)) => failures.push(err),
            Some(Ok(token)) => match &self.tokens {
                Some(reviewer) => match reviewer.review(token, &self.metrics).await {
                    Ok(TokenVerdict::Authenticated(user)) => {
                        return Authentication::User(user.with_authenticated_group());
                    }
                    Ok(TokenVerdict::Rejected(err)) | Err(ReviewError::Failed(err)) => {
                        failures.push(err)
                    }
                    // Nothing else presented succeeded either (those come first): try later.
                    Err(ReviewError::Busy) => return Authentication::Busy,
                },
                None => failures.push(
                    "bearer tokens cannot be checked: no cluster to send a TokenReview to".into(),
                ),
            },
        }
        if failures.is_empty() {
            Authentication::NoCredentials
        } else {
            Authentication::Failed(failures.join("; "))
        }
    }

    /// Remove what asserted an identity, so nothing behind this layer can act on it again:
    /// the front-proxy headers and the Authorization header.
    pub(crate) fn strip_credentials(&self, headers: &mut HeaderMap) {
        headers.remove(header::AUTHORIZATION);
        let Some(front_proxy) = &self.request_header else {
            return;
        };
        for name in front_proxy
            .username_headers
            .iter()
            .chain(&front_proxy.group_headers)
        {
            headers.remove(name);
        }
        let extra: Vec<HeaderName> = headers
            .keys()
            .filter(|name| front_proxy.extra_key(name).is_some())
            .cloned()
            .collect();
        for name in extra {
            headers.remove(name);
        }
    }
}

impl RequestHeader {
    fn new(config: &RequestHeaderConfig) -> crate::error::SetupResult<Self> {
        let names = |list: &[String], what: &str| -> crate::error::SetupResult<Vec<HeaderName>> {
            list.iter()
                .map(|h| h.trim())
                .filter(|h| !h.is_empty())
                .map(|h| {
                    HeaderName::try_from(h).map_err(|_| {
                        SetupError::invalid(format!("{what} {h:?} is not a valid header name"))
                    })
                })
                .collect()
        };
        Ok(RequestHeader {
            verifier: CaVerifier::new(&config.client_ca)?,
            allowed_names: config.allowed_names.clone(),
            username_headers: names(&config.username_headers, "username header")?,
            group_headers: names(&config.group_headers, "group header")?,
            extra_prefixes: config
                .extra_headers_prefixes
                .iter()
                .map(|p| p.trim().to_ascii_lowercase())
                .filter(|p| !p.is_empty())
                .collect(),
        })
    }

    /// `Ok(None)` when the proxy's certificate is fine but no user header is set (other
    /// authenticators get their turn).
    fn authenticate(
        &self,
        headers: &HeaderMap,
        chain: &[CertificateDer<'static>],
    ) -> Result<Option<UserInfo>, String> {
        self.verifier
            .verify(chain)
            .map_err(|err| format!("front-proxy certificate not verified: {err}"))?;
        if !self.allowed_names.is_empty() {
            let subject = Subject::of(&chain[0])?;
            if !self.allowed_names.contains(&subject.common_name) {
                return Err(format!(
                    "front-proxy certificate CN {:?} is not one of the allowed names {:?}",
                    subject.common_name, self.allowed_names
                ));
            }
        }
        let Some(name) = self
            .username_headers
            .iter()
            .flat_map(|h| headers.get_all(h))
            .map(header_text)
            .find(|v| !v.is_empty())
        else {
            return Ok(None);
        };
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h))
            .map(header_text)
            .filter(|v| !v.is_empty())
            .collect();
        let mut user = UserInfo {
            name,
            groups,
            ..UserInfo::default()
        };
        for (header_name, value) in headers {
            if let Some(key) = self.extra_key(header_name) {
                let value = header_text(value);
                if !value.is_empty() {
                    user.extra.entry(key).or_default().push(value);
                }
            }
        }
        Ok(Some(user))
    }

    /// The extra key a header carries: the rest after a prefix, %-unescaped (header names
    /// cannot carry every character a key may have).
    fn extra_key(&self, header_name: &HeaderName) -> Option<String> {
        let name = header_name.as_str();
        self.extra_prefixes.iter().find_map(|prefix| {
            let key = name.strip_prefix(prefix.as_str())?;
            (!key.is_empty()).then(|| path_unescape(key).unwrap_or_else(|| key.to_string()))
        })
    }
}

impl TokenReviewer {
    /// The cached verdict, or one TokenReview for every concurrent request with this token,
    /// when the budget allows one.
    async fn review(
        &self,
        token: &str,
        metrics: &AuthMetrics,
    ) -> Result<TokenVerdict, ReviewError> {
        let review = async {
            let Some(_slot) = self.budget.admit().await else {
                return Err(ReviewError::Busy);
            };
            metrics.token_reviews.inc();
            review_token(&self.client, token)
                .await
                .map_err(ReviewError::Failed)
        };
        let ttl = |verdict: &TokenVerdict| match verdict {
            TokenVerdict::Authenticated(_) => self.success_ttl,
            TokenVerdict::Rejected(_) => self.failure_ttl,
        };
        match self
            .cache
            .get_or_review(key_of(token.as_bytes()), review, ttl)
            .await
        {
            Ok((verdict, source)) => {
                metrics.token_cache.record(source == Source::Cache);
                Ok(verdict)
            }
            Err(err) => {
                metrics.token_cache.record(false);
                Err(match err.as_ref() {
                    ReviewError::Busy => {
                        metrics.token_reviews_throttled.inc();
                        ReviewError::Busy
                    }
                    ReviewError::Failed(message) => ReviewError::Failed(message.clone()),
                })
            }
        }
    }
}

fn client_certificate_user(
    client_ca: &CaVerifier,
    chain: &[CertificateDer<'static>],
) -> Result<UserInfo, String> {
    client_ca
        .verify(chain)
        .map_err(|err| format!("client certificate not verified: {err}"))?;
    let subject = Subject::of(&chain[0])?;
    if subject.common_name.is_empty() {
        return Err("client certificate has no common name".into());
    }
    Ok(UserInfo {
        name: subject.common_name,
        groups: subject.organizations,
        ..UserInfo::default()
    })
}

/// The token of an `Authorization: Bearer <token>` header; `None` without one (another scheme
/// is not a credential this server reads), an error for an empty token.
fn bearer_token(headers: &HeaderMap) -> Option<Result<&str, String>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    match parts.next() {
        Some(token) if !token.is_empty() => Some(Ok(token)),
        _ => Some(Err("invalid bearer token".into())),
    }
}

fn header_text(value: &http::HeaderValue) -> String {
    String::from_utf8_lossy(value.as_bytes()).trim().to_string()
}

/// `%XX` unescaping of a path segment; `None` when an escape is malformed.
fn path_unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::devcerts::{Ca, client_cert};
    use crate::auth::user::AUTHENTICATED_GROUP;

    struct Pki {
        client_ca: Ca,
        front_proxy_ca: Ca,
    }

    fn pki() -> Pki {
        Pki {
            client_ca: Ca::new("client-ca"),
            front_proxy_ca: Ca::new("front-proxy-ca"),
        }
    }

    fn request_header(pki: &Pki, allowed: &[&str]) -> RequestHeaderConfig {
        RequestHeaderConfig {
            client_ca: pki.front_proxy_ca.bundle(),
            allowed_names: allowed.iter().map(|s| s.to_string()).collect(),
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefixes: vec!["X-Remote-Extra-".into()],
        }
    }

    fn authenticator(pki: &Pki, allowed: &[&str]) -> Authenticator {
        Authenticator::new(
            Some(&request_header(pki, allowed)),
            Some(&pki.client_ca.bundle()),
            None,
            Arc::new(crate::auth::cache::SystemClock),
            AuthMetrics::new(),
        )
        .expect("authenticator")
    }

    fn proxy_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().expect("value"));
        headers.append("x-remote-group", "dev".parse().expect("value"));
        headers.append("x-remote-group", "ops".parse().expect("value"));
        headers.insert(
            "x-remote-extra-acme.com%2fproject",
            "p1".parse().expect("value"),
        );
        headers.append("x-remote-extra-scopes", "a".parse().expect("value"));
        headers.append("x-remote-extra-scopes", "b".parse().expect("value"));
        headers
    }

    #[tokio::test]
    async fn front_proxy_headers_are_honoured_with_an_allowed_front_proxy_certificate() {
        let pki = pki();
        let auth = authenticator(&pki, &["front-proxy-client"]);
        let (proxy, _) = client_cert(&pki.front_proxy_ca, "front-proxy-client", &[]);
        let Authentication::User(user) = auth.authenticate(&proxy_headers(), &proxy).await else {
            panic!("not authenticated");
        };
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, vec!["dev", "ops", AUTHENTICATED_GROUP]);
        assert_eq!(user.extra["acme.com/project"], vec!["p1"]);
        assert_eq!(user.extra["scopes"], vec!["a", "b"]);
    }

    #[tokio::test]
    async fn front_proxy_headers_are_ignored_without_a_trusted_allowed_proxy() {
        let pki = pki();
        let auth = authenticator(&pki, &["front-proxy-client"]);

        // A client-CA certificate with the proxy headers: the certificate's own user, not
        // the asserted one.
        let (client, _) = client_cert(&pki.client_ca, "bob", &["team"]);
        let outcome = auth.authenticate(&proxy_headers(), &client).await;
        let Authentication::User(user) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(user.name, "bob");
        assert_eq!(user.groups, vec!["team", AUTHENTICATED_GROUP]);

        // The front-proxy CA but a CN that is not allowed: 401.
        let (other, _) = client_cert(&pki.front_proxy_ca, "someone-else", &[]);
        let outcome = auth.authenticate(&proxy_headers(), &other).await;
        let Authentication::Failed(reason) = outcome else {
            panic!("{outcome:?}");
        };
        assert!(reason.contains("not one of the allowed names"), "{reason}");

        // No certificate at all: the headers alone are nothing.
        assert_eq!(
            auth.authenticate(&proxy_headers(), &[]).await,
            Authentication::NoCredentials
        );
    }

    #[tokio::test]
    async fn any_front_proxy_cn_is_allowed_when_the_list_is_empty() {
        let pki = pki();
        let auth = authenticator(&pki, &[]);
        let (other, _) = client_cert(&pki.front_proxy_ca, "aggregator", &[]);
        let outcome = auth.authenticate(&proxy_headers(), &other).await;
        assert!(matches!(outcome, Authentication::User(u) if u.name == "alice"));
    }

    #[tokio::test]
    async fn certificates_of_an_unknown_ca_are_rejected() {
        let pki = pki();
        let auth = authenticator(&pki, &["front-proxy-client"]);
        let stranger = Ca::new("stranger");
        let (forged, _) = client_cert(&stranger, "front-proxy-client", &["system:masters"]);
        let outcome = auth.authenticate(&proxy_headers(), &forged).await;
        let Authentication::Failed(reason) = outcome else {
            panic!("{outcome:?}");
        };
        assert!(
            reason.contains("front-proxy certificate not verified"),
            "{reason}"
        );
        assert!(
            reason.contains("client certificate not verified"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn a_proxy_certificate_without_user_header_falls_through() {
        let pki = pki();
        let auth = authenticator(&pki, &["front-proxy-client"]);
        let (proxy, _) = client_cert(&pki.front_proxy_ca, "front-proxy-client", &[]);
        // The client CA does not know the proxy's certificate: that is a failure, as upstream.
        let outcome = auth.authenticate(&HeaderMap::new(), &proxy).await;
        assert!(matches!(outcome, Authentication::Failed(_)), "{outcome:?}");

        // Without a client CA nothing else has an opinion: anonymous.
        let only_proxy = Authenticator::new(
            Some(&request_header(&pki, &[])),
            None,
            None,
            Arc::new(crate::auth::cache::SystemClock),
            AuthMetrics::new(),
        )
        .expect("authenticator");
        assert_eq!(
            only_proxy.authenticate(&HeaderMap::new(), &proxy).await,
            Authentication::NoCredentials
        );
    }

    #[tokio::test]
    async fn bearer_tokens_without_a_reviewer_fail_and_other_schemes_are_ignored() {
        let pki = pki();
        let auth = authenticator(&pki, &[]);
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "Bearer abc".parse().expect("value"));
        assert!(matches!(
            auth.authenticate(&headers, &[]).await,
            Authentication::Failed(_)
        ));
        headers.insert(header::AUTHORIZATION, "Bearer ".parse().expect("value"));
        let outcome = auth.authenticate(&headers, &[]).await;
        assert_eq!(
            outcome,
            Authentication::Failed("invalid bearer token".into())
        );
        headers.insert(header::AUTHORIZATION, "Basic YTpi".parse().expect("value"));
        assert_eq!(
            auth.authenticate(&headers, &[]).await,
            Authentication::NoCredentials
        );
    }

    #[test]
    fn strip_removes_every_identity_header() {
        let pki = pki();
        let auth = authenticator(&pki, &[]);
        let mut headers = proxy_headers();
        headers.insert(header::AUTHORIZATION, "Bearer x".parse().expect("value"));
        headers.insert(header::ACCEPT, "application/json".parse().expect("value"));
        auth.strip_credentials(&mut headers);
        let left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, vec!["accept"]);
    }

    #[test]
    fn unescaping_extra_keys() {
        assert_eq!(path_unescape("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(path_unescape("plain+x").as_deref(), Some("plain+x"));
        assert_eq!(path_unescape("bad%2"), None);
        assert_eq!(path_unescape("bad%zz"), None);
    }
}
