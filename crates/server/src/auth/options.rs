//! The authentication and authorization flags, named and defaulted like those of every
//! aggregated API server built on k8s.io/apiserver (`DelegatingAuthenticationOptions`,
//! `DelegatingAuthorizationOptions`, `RequestHeaderAuthenticationOptions`).

use std::path::PathBuf;
use std::time::Duration;

use clap::ArgAction;

/// The authentication and authorization flags of `serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct AuthOptions {
    /// PEM CA bundle: a client certificate it issued authenticates as CN (user) and O (groups).
    /// Without it, `client-ca-file` of kube-system/extension-apiserver-authentication is used.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,

    /// PEM CA bundle of the front proxy (the aggregator): only a client certificate it issued
    /// may assert a user in the request headers. Without it, the request-header settings of
    /// kube-system/extension-apiserver-authentication are used.
    #[arg(long)]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// Common names the front proxy's certificate may have (empty: any from that CA).
    #[arg(long, value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,

    /// Request headers carrying the user name (the first present one wins).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    pub requestheader_username_headers: Vec<String>,

    /// Request headers carrying groups (every value of each).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    pub requestheader_group_headers: Vec<String>,

    /// Prefixes of request headers carrying extra user attributes.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// kubeconfig of the cluster that reviews bearer tokens (TokenReview) and holds
    /// kube-system/extension-apiserver-authentication. Default: --kubeconfig when given, else
    /// the in-cluster config when running in a pod, else none (then bearer tokens are rejected).
    #[arg(long)]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// kubeconfig of the cluster that authorizes requests (SubjectAccessReview). Default:
    /// --kubeconfig when given, else the in-cluster config when running in a pod, else none
    /// (then only system:masters and the always-allowed paths are allowed).
    #[arg(long)]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// How long TokenReview answers are cached.
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// How long rejected tokens are cached; the same as
    /// --authentication-token-webhook-cache-ttl when not given (kube-apiserver's behaviour).
    #[arg(long, value_parser = svm_registry::duration::go_duration)]
    pub authentication_token_webhook_cache_unauthorized_ttl: Option<Duration>,

    /// The most TokenReviews in flight at once; a token not in the cache that finds none free
    /// within 2s gets 429 with Retry-After.
    #[arg(long, default_value_t = 16)]
    pub authentication_token_webhook_max_inflight: usize,

    /// TokenReviews per second for tokens not in the cache (a token bucket with
    /// --authentication-token-webhook-burst): a flood of unknown tokens costs the cluster at
    /// most this many reviews; the rest get 429 with Retry-After.
    #[arg(long, default_value_t = 50.0)]
    pub authentication_token_webhook_qps: f64,

    /// TokenReviews that may be sent at once above --authentication-token-webhook-qps.
    #[arg(long, default_value_t = 100)]
    pub authentication_token_webhook_burst: u32,

    /// The most SubjectAccessReviews in flight at once; a request whose decision is not cached
    /// that finds none free within 2s is answered 500 (a failed authorization, as
    /// kube-apiserver's webhook authorizer gives) with Retry-After.
    #[arg(long, default_value_t = 16)]
    pub authorization_webhook_max_inflight: usize,

    /// SubjectAccessReviews per second for decisions not in the cache (a token bucket with
    /// --authorization-webhook-burst; upstream's delegating authorizer limits its client to
    /// the same 200/s): the rest get 500 with Retry-After.
    #[arg(long, default_value_t = 200.0)]
    pub authorization_webhook_qps: f64,

    /// SubjectAccessReviews that may be sent at once above --authorization-webhook-qps.
    #[arg(long, default_value_t = 400)]
    pub authorization_webhook_burst: u32,

    /// How long "allowed" SubjectAccessReview answers are cached.
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long "denied" SubjectAccessReview answers are cached.
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,

    /// Paths served to anyone without authorization (`/path/*` matches a prefix). Callers
    /// without credentials are admitted there too, so kubelet probes work.
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    pub authorization_always_allow_paths: Vec<String>,

    /// Admit requests without credentials as system:anonymous (then authorized like anyone).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub anonymous_auth: bool,

    /// Do not read kube-system/extension-apiserver-authentication for the CA files and
    /// request-header settings the flags leave out.
    #[arg(long)]
    pub authentication_skip_lookup: bool,

    /// Start even when kube-system/extension-apiserver-authentication cannot be read.
    #[arg(long)]
    pub authentication_tolerate_lookup_failure: bool,
}

impl Default for AuthOptions {
    fn default() -> Self {
        AuthOptions {
            client_ca_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: vec!["X-Remote-User".into()],
            requestheader_group_headers: vec!["X-Remote-Group".into()],
            requestheader_extra_headers_prefix: vec!["X-Remote-Extra-".into()],
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            authentication_token_webhook_cache_ttl: Duration::from_secs(10),
            authentication_token_webhook_cache_unauthorized_ttl: None,
            authentication_token_webhook_max_inflight: 16,
            authentication_token_webhook_qps: 50.0,
            authentication_token_webhook_burst: 100,
            authorization_webhook_max_inflight: 16,
            authorization_webhook_qps: 200.0,
            authorization_webhook_burst: 400,
            authorization_webhook_cache_authorized_ttl: Duration::from_secs(10),
            authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(10),
            authorization_always_allow_paths: vec![
                "/healthz".into(),
                "/readyz".into(),
                "/livez".into(),
            ],
            anonymous_auth: false,
            authentication_skip_lookup: false,
            authentication_tolerate_lookup_failure: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        auth: AuthOptions,
    }

    #[test]
    fn defaults_match_the_upstream_delegating_options() {
        let cli = Cli::try_parse_from(["x"]).expect("parse");
        let defaults = AuthOptions::default();
        assert_eq!(cli.auth.requestheader_username_headers, ["X-Remote-User"]);
        assert_eq!(cli.auth.requestheader_group_headers, ["X-Remote-Group"]);
        assert_eq!(
            cli.auth.requestheader_extra_headers_prefix,
            ["X-Remote-Extra-"]
        );
        assert_eq!(
            cli.auth.authorization_always_allow_paths,
            defaults.authorization_always_allow_paths
        );
        assert_eq!(
            cli.auth.authentication_token_webhook_cache_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(
            cli.auth.authorization_webhook_cache_unauthorized_ttl,
            defaults.authorization_webhook_cache_unauthorized_ttl
        );
        assert!(!cli.auth.anonymous_auth);
        assert!(cli.auth.requestheader_allowed_names.is_empty());
        assert_eq!(cli.auth.authorization_webhook_max_inflight, 16);
        assert_eq!(cli.auth.authorization_webhook_qps, 200.0);
        assert_eq!(cli.auth.authorization_webhook_burst, 400);
        assert_eq!(
            cli.auth.authorization_webhook_max_inflight,
            defaults.authorization_webhook_max_inflight
        );
    }

    #[test]
    fn flags_parse_lists_durations_and_booleans() {
        let cli = Cli::try_parse_from([
            "x",
            "--requestheader-allowed-names=front-proxy-client,aggregator",
            "--authorization-webhook-cache-authorized-ttl=5m",
            "--anonymous-auth=true",
            "--authentication-skip-lookup",
        ])
        .expect("parse");
        assert_eq!(
            cli.auth.requestheader_allowed_names,
            ["front-proxy-client", "aggregator"]
        );
        assert_eq!(
            cli.auth.authorization_webhook_cache_authorized_ttl,
            Duration::from_secs(300)
        );
        assert!(cli.auth.anonymous_auth);
        assert!(cli.auth.authentication_skip_lookup);
        assert!(Cli::try_parse_from(["x", "--anonymous-auth=maybe"]).is_err());
        assert!(Cli::try_parse_from(["x", "--authentication-token-webhook-cache-ttl=10"]).is_err());
    }
}
