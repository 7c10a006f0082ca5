//! The delegated reviews: TokenReview (authentication.k8s.io/v1) and SubjectAccessReview
//! (authorization.k8s.io/v1) sent to the cluster's kube-apiserver with a `kube` client
//! (recordings 15a and 15b: both answer 201 with the review echoed back and `status` filled in).

use std::path::Path;
use std::time::Duration;

use crate::error::{Context, SetupResult as Result};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

use super::user::UserInfo;

/// How long one review may take before the request fails (upstream's webhook timeout).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for the cluster named by `kubeconfig`, or the in-cluster one when none is given
/// and this runs in a pod; `None` otherwise (delegation is then off, as upstream allows).
pub async fn cluster_client(kubeconfig: Option<&Path>) -> Result<Option<kube::Client>> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            kube::Config::incluster().context("loading the in-cluster configuration")?
        }
        None => return Ok(None),
    };
    review_client(config).map(Some)
}

/// A client for reviews: each call bounded by a timeout, and not retried — a request waits on
/// its review, so a failing cluster fails that request at once (401 or 500); failures are
/// never cached, so the next request asks again. (kube's default policy would retry a 429/503
/// up to 15 times with growing delays.)
pub fn review_client(mut config: kube::Config) -> Result<kube::Client> {
    config.connect_timeout = Some(REVIEW_TIMEOUT);
    config.read_timeout = Some(REVIEW_TIMEOUT);
    config.write_timeout = Some(REVIEW_TIMEOUT);
    config.default_retry = false;
    kube::Client::try_from(config).context("building the cluster client")
}

/// What a TokenReview said about a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenVerdict {
    Authenticated(UserInfo),
    /// `status.error`, or a generic message when the review gave none.
    Rejected(String),
}

pub(crate) async fn review_token(
    client: &kube::Client,
    token: &str,
) -> Result<TokenVerdict, String> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|err| format!("TokenReview failed: {err}"))?;
    let status = reviewed.status.unwrap_or_default();
    let user = status.user.unwrap_or_default();
    match (status.authenticated, user.username) {
        (Some(true), Some(name)) if !name.is_empty() => Ok(TokenVerdict::Authenticated(UserInfo {
            name,
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default().into_iter().collect(),
        })),
        _ => Ok(TokenVerdict::Rejected(
            status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "token not authenticated".into()),
        )),
    }
}

/// What a SubjectAccessReview decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AccessVerdict {
    pub allowed: bool,
    /// `status.reason`, else `status.evaluationError`; may be empty.
    pub reason: String,
}

pub(crate) async fn review_access(
    client: &kube::Client,
    spec: &SubjectAccessReviewSpec,
) -> Result<AccessVerdict, String> {
    let review = SubjectAccessReview {
        spec: spec.clone(),
        ..SubjectAccessReview::default()
    };
    let reviewed = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|err| format!("SubjectAccessReview failed: {err}"))?;
    let status = reviewed.status.unwrap_or_default();
    let reason = status
        .reason
        .filter(|r| !r.is_empty())
        .or(status.evaluation_error)
        .unwrap_or_default();
    Ok(AccessVerdict {
        // An explicit denial wins even over a (contradictory) allowed.
        allowed: status.allowed && status.denied != Some(true),
        reason,
    })
}
