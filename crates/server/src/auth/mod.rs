//! Authentication and authorization, delegated to the cluster's kube-apiserver the way every
//! aggregated API server does it (k8s.io/apiserver's "delegating" authn/authz), plus the TLS
//! pieces they rest on.
//!
//! How the server plugs it in:
//!
//! ```text
//! let auth = Arc::new(auth::Auth::from_options(&cli.auth).await?);       // AuthOptions flattened in the CLI
//! auth.metrics().register(&mut metrics_registry);                         // prometheus-client Registry
//! let certificate = Arc::new(auth::tls::ReloadingCertResolver::new(&cert_file, &key_file)?);
//! let _watcher = certificate.spawn_watcher(Duration::from_secs(10));
//! let tls = auth::tls::server_config(certificate, auth.client_cert_verifier()?)?;
//! // accept loop: request.extensions_mut().insert(auth::PeerCertificates::of(tls_connection));
//! let app = router.layer(auth::layer(auth.clone()));                      // UserInfo in extensions
//! // or, with a step between them (the server's inflight limit, as kube-apiserver's chain):
//! // router.layer(auth::authorization_layer(a.clone())).layer(limit).layer(auth::authentication_layer(a))
//! ```

mod attributes;
mod authenticator;
mod authorizer;
mod budget;
mod cache;
mod crypto;
#[cfg(test)]
pub(crate) mod devcerts;
pub(crate) mod lookup;
mod metrics;
mod middleware;
mod options;
pub mod tls;
mod user;
mod webhook;
mod x509;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Context, SetupError, SetupResult as Result};
use rustls::server::danger::ClientCertVerifier;

pub use attributes::{RequestAttributes, ResourceAttributes};
pub use authenticator::{Authentication, RequestHeaderConfig, TokenReviewLimits};
pub use authorizer::{AccessReviewLimits, Decision};
pub use cache::{Clock, ManualClock, SystemClock};
pub use metrics::{AuthMetrics, CacheCounters};
pub use middleware::{
    AuthLayer, AuthService, Rejection, authentication_layer, authorization_layer, layer,
};
pub use options::AuthOptions;
pub use tls::PeerCertificates;
pub use user::{
    ANONYMOUS_USER, AUTHENTICATED_GROUP, MASTERS_GROUP, UNAUTHENTICATED_GROUP, UserInfo,
};
pub use webhook::{cluster_client, review_client};
pub use x509::CaBundle;

use authenticator::Authenticator;
use authorizer::{AuthorizeError, Authorizer};
use lookup::ClusterAuthentication;

/// The configured authentication and authorization of the server.
pub struct Auth {
    authenticator: Authenticator,
    authorizer: Authorizer,
    /// The CAs whose client certificates the TLS handshake accepts.
    client_cas: Vec<CaBundle>,
    anonymous: bool,
    metrics: AuthMetrics,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field(
                "client_cas",
                &self
                    .client_cas
                    .iter()
                    .map(|c| &c.source)
                    .collect::<Vec<_>>(),
            )
            .field("anonymous", &self.anonymous)
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// Build from the flags: load the CA files, read what the flags leave out from
    /// kube-system/extension-apiserver-authentication (unless told not to), and connect the
    /// TokenReview and SubjectAccessReview clients (kubeconfig flags, else in-cluster, else
    /// none: then bearer tokens fail and only system:masters and always-allowed paths pass).
    pub async fn from_options(opts: &AuthOptions) -> Result<Self> {
        Self::from_options_with(opts, None).await
    }

    /// As [`Auth::from_options`], also trusting `also_trusted` for client certificates, beside
    /// the client CA the flags or the cluster give (never instead of it): development
    /// certificates add their CA this way, so the written kubeconfig's admin certificate works
    /// and a certificate the cluster's client CA issued still does.
    pub async fn from_options_with(
        opts: &AuthOptions,
        also_trusted: Option<CaBundle>,
    ) -> Result<Self> {
        let authn_client = cluster_client(opts.authentication_kubeconfig.as_deref())
            .await
            .context("--authentication-kubeconfig")?;
        let authz_client = cluster_client(opts.authorization_kubeconfig.as_deref())
            .await
            .context("--authorization-kubeconfig")?;
        let (client_ca, request_header) =
            client_certificate_settings(opts, authn_client.as_ref()).await?;
        if authn_client.is_none() {
            tracing::warn!("no cluster for TokenReview: bearer tokens will be rejected");
        }
        if authz_client.is_none() {
            tracing::warn!(
                "no cluster for SubjectAccessReview: only system:masters and the always-allowed paths are authorized"
            );
        }
        let mut builder = Auth::builder_from(opts);
        if let Some(ca) = client_ca {
            builder = builder.client_ca(ca);
        }
        if let Some(ca) = also_trusted {
            builder = builder.also_trust_client_ca(ca);
        }
        if let Some(rh) = request_header {
            builder = builder.request_header(rh);
        }
        if let Some(client) = authn_client {
            builder = builder.token_review(client);
        }
        if let Some(client) = authz_client {
            builder = builder.subject_access_review(client);
        }
        builder.build()
    }

    /// What the flags set directly: anonymous access, always-allowed paths, the webhook
    /// caches and the TokenReview and SubjectAccessReview budgets.
    fn builder_from(opts: &AuthOptions) -> AuthBuilder {
        Auth::builder()
            .anonymous(opts.anonymous_auth)
            .always_allow_paths(opts.authorization_always_allow_paths.clone())
            .token_cache_ttl(opts.authentication_token_webhook_cache_ttl)
            .token_failure_ttl(
                opts.authentication_token_webhook_cache_unauthorized_ttl
                    .unwrap_or(opts.authentication_token_webhook_cache_ttl),
            )
            .token_review_limits(TokenReviewLimits {
                max_in_flight: opts.authentication_token_webhook_max_inflight,
                qps: opts.authentication_token_webhook_qps,
                burst: opts.authentication_token_webhook_burst,
            })
            .authorization_cache_ttls(
                opts.authorization_webhook_cache_authorized_ttl,
                opts.authorization_webhook_cache_unauthorized_ttl,
            )
            .access_review_limits(AccessReviewLimits {
                max_in_flight: opts.authorization_webhook_max_inflight,
                qps: opts.authorization_webhook_qps,
                burst: opts.authorization_webhook_burst,
            })
    }

    /// Explicit configuration (tests, embedding); the flags go through [`Auth::from_options`].
    pub fn builder() -> AuthBuilder {
        AuthBuilder::default()
    }

    /// The rustls verifier for the server's TLS configuration: client certificates of the
    /// client CA or the front-proxy CA, or none.
    pub fn client_cert_verifier(&self) -> Result<Arc<dyn ClientCertVerifier>> {
        let cas: Vec<&CaBundle> = self.client_cas.iter().collect();
        tls::client_cert_verifier(&cas)
    }

    /// The counters of authentication and authorization, for registering into `/metrics`.
    pub fn metrics(&self) -> &AuthMetrics {
        &self.metrics
    }

    /// Authenticate and authorize one request: the caller, or why it is turned away. Strips the
    /// credential headers of an admitted request.
    pub async fn admit<B>(&self, request: &mut http::Request<B>) -> Result<UserInfo, Rejection> {
        let user = self.authenticate(request).await?;
        self.authorize(&user, request).await?;
        Ok(user)
    }

    /// Who is calling (anonymous where allowed), or a 401. Strips the credential headers, so
    /// nothing behind this step can act on them again.
    pub async fn authenticate<B>(
        &self,
        request: &mut http::Request<B>,
    ) -> Result<UserInfo, Rejection> {
        let peer = request
            .extensions()
            .get::<PeerCertificates>()
            .map(|p| p.0.clone())
            .unwrap_or_default();
        let user = match self
            .authenticator
            .authenticate(request.headers(), &peer)
            .await
        {
            Authentication::User(user) => user,
            Authentication::NoCredentials
                if self.anonymous
                    || self
                        .authorizer
                        .always_allowed(&RequestAttributes::of(request)) =>
            {
                UserInfo::anonymous()
            }
            Authentication::NoCredentials => return Err(Rejection::Unauthenticated),
            Authentication::Busy => return Err(Rejection::TooManyTokenReviews),
            Authentication::Failed(reason) => {
                tracing::debug!(%reason, path = %request.uri().path(), "unable to authenticate the request");
                return Err(Rejection::Unauthenticated);
            }
        };
        self.authenticator.strip_credentials(request.headers_mut());
        Ok(user)
    }

    /// Whether `user` may make this request: Ok, or a 403 (500 when the cluster could not be
    /// asked, or the SubjectAccessReview budget is spent).
    pub fn authorize<'a, B>(
        &'a self,
        user: &'a UserInfo,
        request: &http::Request<B>,
    ) -> impl Future<Output = Result<(), Rejection>> + Send + 'a {
        // Read from the request now: the future does not hold it.
        let attributes = RequestAttributes::of(request);
        async move {
            match self.authorizer.authorize(user, &attributes).await {
                Ok(Decision::Allow) => Ok(()),
                Ok(Decision::Deny(reason)) => Err(Rejection::forbidden(user, &attributes, &reason)),
                Err(AuthorizeError::Failed(err)) => {
                    tracing::warn!(error = %err, "authorization failed");
                    Err(Rejection::AuthorizationError(err))
                }
                Err(AuthorizeError::Busy) => {
                    tracing::debug!(user = %user.name, path = %attributes.path, "SubjectAccessReviews at their bound");
                    Err(Rejection::TooManyAccessReviews)
                }
            }
        }
    }
}

/// The client CA and the front proxy's settings: from the CA files given, and what they
/// leave out from kube-system/extension-apiserver-authentication (as kube's delegated
/// authentication does), unless `--authentication-skip-lookup`.
async fn client_certificate_settings(
    opts: &AuthOptions,
    authn_client: Option<&kube::Client>,
) -> Result<(Option<CaBundle>, Option<RequestHeaderConfig>)> {
    let mut client_ca = opts
        .client_ca_file
        .as_deref()
        .map(CaBundle::from_file)
        .transpose()
        .context("--client-ca-file")?;
    let mut request_header = match &opts.requestheader_client_ca_file {
        None => None,
        Some(file) => Some(RequestHeaderConfig {
            client_ca: CaBundle::from_file(file).context("--requestheader-client-ca-file")?,
            allowed_names: opts.requestheader_allowed_names.clone(),
            username_headers: opts.requestheader_username_headers.clone(),
            group_headers: opts.requestheader_group_headers.clone(),
            extra_headers_prefixes: opts.requestheader_extra_headers_prefix.clone(),
        }),
    };
    let complete = client_ca.is_some() && request_header.is_some();
    if opts.authentication_skip_lookup || complete {
        return Ok((client_ca, request_header));
    }
    let Some(client) = authn_client else {
        tracing::warn!(
            "no --authentication-kubeconfig and not in a cluster: {}/{} not read, client \
             certificates are trusted only from the CA files given",
            lookup::NAMESPACE,
            lookup::NAME
        );
        return Ok((client_ca, request_header));
    };
    match ClusterAuthentication::fetch(client).await {
        Ok(published) => {
            client_ca = client_ca.or(published.client_ca);
            request_header = request_header.or(published.request_header);
        }
        Err(err) if opts.authentication_tolerate_lookup_failure => tracing::warn!(
            error = %format!("{err:#}"),
            "starting without the cluster's authentication settings"
        ),
        Err(err) => {
            return Err(SetupError::failed(
                "reading the cluster's authentication settings (--authentication-skip-lookup \
                 to not read them, --authentication-tolerate-lookup-failure to start anyway)",
                err,
            ));
        }
    }
    Ok((client_ca, request_header))
}

/// Builds an [`Auth`]; defaults are the flags' defaults.
pub struct AuthBuilder {
    client_ca: Option<CaBundle>,
    also_trusted: Vec<CaBundle>,
    request_header: Option<RequestHeaderConfig>,
    token_review: Option<kube::Client>,
    access_review: Option<kube::Client>,
    token_ttl: Duration,
    token_failure_ttl: Duration,
    token_review_limits: TokenReviewLimits,
    access_review_limits: AccessReviewLimits,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    always_allow_paths: Vec<String>,
    anonymous: bool,
    clock: Arc<dyn Clock>,
    metrics: AuthMetrics,
}

impl Default for AuthBuilder {
    fn default() -> Self {
        let defaults = AuthOptions::default();
        AuthBuilder {
            client_ca: None,
            also_trusted: Vec::new(),
            request_header: None,
            token_review: None,
            access_review: None,
            token_ttl: defaults.authentication_token_webhook_cache_ttl,
            token_failure_ttl: defaults.authentication_token_webhook_cache_ttl,
            token_review_limits: TokenReviewLimits::default(),
            access_review_limits: AccessReviewLimits::default(),
            authorized_ttl: defaults.authorization_webhook_cache_authorized_ttl,
            unauthorized_ttl: defaults.authorization_webhook_cache_unauthorized_ttl,
            always_allow_paths: defaults.authorization_always_allow_paths,
            anonymous: defaults.anonymous_auth,
            clock: Arc::new(SystemClock),
            metrics: AuthMetrics::new(),
        }
    }
}

impl AuthBuilder {
    /// Accept client certificates this CA issued: CN is the user, O the groups.
    pub fn client_ca(mut self, ca: CaBundle) -> Self {
        self.client_ca = Some(ca);
        self
    }

    /// Also accept client certificates this CA issued, beside those of
    /// [`AuthBuilder::client_ca`] (whichever is called first).
    pub fn also_trust_client_ca(mut self, ca: CaBundle) -> Self {
        self.also_trusted.push(ca);
        self
    }

    /// Trust a front proxy with these settings to name the user in request headers.
    pub fn request_header(mut self, config: RequestHeaderConfig) -> Self {
        self.request_header = Some(config);
        self
    }

    /// Review bearer tokens with this cluster.
    pub fn token_review(mut self, client: kube::Client) -> Self {
        self.token_review = Some(client);
        self
    }

    /// Authorize with SubjectAccessReviews sent to this cluster.
    pub fn subject_access_review(mut self, client: kube::Client) -> Self {
        self.access_review = Some(client);
        self
    }

    /// Keep TokenReview answers for `ttl`, rejected ones too unless
    /// [`AuthBuilder::token_failure_ttl`] is called after it.
    pub fn token_cache_ttl(mut self, ttl: Duration) -> Self {
        self.token_ttl = ttl;
        self.token_failure_ttl = ttl;
        self
    }

    /// Keep rejected tokens for `failure` instead of the TTL of accepted ones.
    pub fn token_failure_ttl(mut self, failure: Duration) -> Self {
        self.token_failure_ttl = failure;
        self
    }

    /// What tokens not in the cache may cost in TokenReviews.
    pub fn token_review_limits(mut self, limits: TokenReviewLimits) -> Self {
        self.token_review_limits = limits;
        self
    }

    /// What decisions not in the cache may cost in SubjectAccessReviews.
    pub fn access_review_limits(mut self, limits: AccessReviewLimits) -> Self {
        self.access_review_limits = limits;
        self
    }

    /// Keep "allowed" SubjectAccessReview answers for `authorized`, "denied" ones for
    /// `unauthorized`.
    pub fn authorization_cache_ttls(
        mut self,
        authorized: Duration,
        unauthorized: Duration,
    ) -> Self {
        self.authorized_ttl = authorized;
        self.unauthorized_ttl = unauthorized;
        self
    }

    /// Non-resource paths allowed to anyone (`/path/*` matches a prefix), as
    /// `--authorization-always-allow-paths`.
    pub fn always_allow_paths(mut self, paths: Vec<String>) -> Self {
        self.always_allow_paths = paths;
        self
    }

    /// Admit callers without credentials as `system:anonymous` (`--anonymous-auth`).
    pub fn anonymous(mut self, enabled: bool) -> Self {
        self.anonymous = enabled;
        self
    }

    /// Read cache expiry from this clock (tests use a [`ManualClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Count into these metrics (e.g. ones already registered).
    pub fn metrics(mut self, metrics: AuthMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The configured [`Auth`]; fails when a CA bundle cannot verify certificates or a request
    /// header name is not a valid header name.
    pub fn build(mut self) -> Result<Auth> {
        for ca in std::mem::take(&mut self.also_trusted) {
            self.client_ca = Some(match self.client_ca.take() {
                Some(client_ca) => client_ca.joined(&ca),
                None => ca,
            });
        }
        let authenticator = Authenticator::new(
            self.request_header.as_ref(),
            self.client_ca.as_ref(),
            self.token_review
                .map(|client| authenticator::TokenReviewConfig {
                    client,
                    success_ttl: self.token_ttl,
                    failure_ttl: self.token_failure_ttl,
                    limits: self.token_review_limits,
                }),
            self.clock.clone(),
            self.metrics.clone(),
        )?;
        let authorizer = Authorizer::new(
            &self.always_allow_paths,
            self.access_review,
            self.access_review_limits,
            self.authorized_ttl,
            self.unauthorized_ttl,
            self.clock.clone(),
            self.metrics.clone(),
        );
        let client_cas = self
            .client_ca
            .into_iter()
            .chain(self.request_header.map(|rh| rh.client_ca))
            .collect();
        Ok(Auth {
            authenticator,
            authorizer,
            client_cas,
            anonymous: self.anonymous,
            metrics: self.metrics,
        })
    }
}
