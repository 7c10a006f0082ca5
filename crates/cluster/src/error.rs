//! What can go wrong talking to the target cluster, classified the way the migrator must act
//! on it: retry (with backoff, honouring Retry-After), treat as done, or give up.

use std::time::Duration;

use serde::Deserialize;

/// A metav1.Status as the cluster answered it (only what the migrator looks at).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StatusBody {
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub metadata: StatusMeta,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StatusMeta {
    /// An Expired list's inconsistent continue token (recording 05).
    #[serde(default, rename = "continue")]
    pub continue_token: Option<String>,
}

/// What went wrong talking to the target cluster, in the classes the caller acts on (see
/// [`ClusterError::is_retriable`]).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The cluster answered with an error status.
    #[error("{code} {reason}: {message}")]
    Api {
        /// The HTTP status code.
        code: u16,
        /// The Status's `reason` (`NotFound`, `Conflict`, `Expired`, ...); empty when the answer
        /// had none.
        reason: String,
        /// The Status's `message`, else the start of the body, else a fallback naming the status.
        message: String,
        /// `Retry-After`, as 429s and some 5xx carry it.
        retry_after: Option<Duration>,
        /// The inconsistent continue token of a 410 Expired list.
        continue_token: Option<String>,
        /// A 429 from API Priority and Fairness: the UID of the priority level that rejected
        /// it (`X-Kubernetes-PF-PriorityLevel-UID`). The apiserver is saturated for the
        /// flows of that level, not only for this request.
        flow_control: Option<String>,
    },
    /// No answer: connection refused or reset, TLS failure.
    #[error("request to the cluster failed: {0}")]
    Transport(#[source] Box<kube::Error>),
    /// No answer, or no whole answer, in time.
    #[error("request to the cluster failed: {what} within {after:?}")]
    TimedOut {
        /// What did not come: `no answer`, `no whole answer`.
        what: &'static str,
        /// How long it was waited for.
        after: Duration,
    },
    /// The answer broke off while it was read.
    #[error("request to the cluster failed: reading the answer: {0}")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An answer that is not the JSON it should be.
    #[error("unreadable answer from the cluster ({what}): {source}")]
    Decode {
        /// What was being read.
        what: String,
        /// Where the JSON did not fit.
        #[source]
        source: serde_json::Error,
    },
    /// A built-in object our kind's strategy cannot take (or give) in the cluster's version.
    #[error("{what}: {source}")]
    Kind {
        /// What was being converted.
        what: String,
        /// The strategy's reason (boxed: it is large beside the other answers).
        #[source]
        source: Box<svm_registry::ApiError>,
    },
    /// An answer that reads, but is not what was asked for (another kind, an object missing).
    #[error("unexpected answer from the cluster: {0}")]
    Unexpected(String),
    /// A protobuf answer we could not read.
    #[error("unreadable protobuf answer from the cluster ({what})")]
    Protobuf {
        /// What was being read.
        what: String,
        /// Why it could not be read.
        #[source]
        source: svm_registry::protobuf::ProtobufError,
    },
    /// Building the client (kubeconfig, certificates) or a request.
    #[error("cluster client configuration ({what}): {source}")]
    Config {
        /// What was being built.
        what: String,
        /// Why it could not be.
        #[source]
        source: ConfigCause,
    },
    /// A request the access catalogue does not list: refused before it was sent (a bug, never
    /// retried).
    #[error(transparent)]
    NotCatalogued(#[from] super::access::NotCatalogued),
    /// A request body that could not be written.
    #[error("encoding {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// serde's reason.
        #[source]
        source: serde_json::Error,
    },
    /// A 401 or 403 from an apiserver that does not say it is ready: right after a start its
    /// authenticators and RBAC authorizer are not yet synced and refuse what they will allow
    /// a moment later, so the refusal is not taken as final.
    #[error("{refused} (the apiserver is not ready: {readyz})")]
    RefusedWhileNotReady {
        /// The 401 or 403 as it came.
        #[source]
        refused: Box<ClusterError>,
        /// What `/readyz` said instead of `ok`.
        readyz: String,
    },
}

/// A Status answer, in JSON or (where the request preferred it) protobuf; empty when it is
/// neither.
fn status_body(body: &[u8]) -> StatusBody {
    use svm_registry::protobuf::{self, meta};
    let protobuf_status = protobuf::decode_body(body)
        .ok()
        .filter(|envelope| envelope.kind == "Status")
        .and_then(|envelope| meta::status_from_pb(&envelope.raw).ok());
    match protobuf_status {
        Some(value) => serde_json::from_value(value).unwrap_or_default(),
        None => serde_json::from_slice(body).unwrap_or_default(),
    }
}

/// Why a client or a request could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigCause {
    /// A kubeconfig that does not read or load.
    #[error(transparent)]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// The in-cluster configuration (a pod's service account) that does not load.
    #[error(transparent)]
    InCluster(#[from] kube::config::InClusterError),
    /// kube's client builder refused the configuration.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A request that http could not build.
    #[error(transparent)]
    Request(#[from] http::Error),
}

impl ClusterError {
    /// A failure to build `what`.
    pub fn config(what: impl Into<String>) -> impl FnOnce(ConfigCause) -> ClusterError {
        let what = what.into();
        move |source| ClusterError::Config { what, source }
    }

    /// An answer of `what` that is not the JSON it should be.
    pub fn decode(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> ClusterError {
        let what = what.into();
        move |source| ClusterError::Decode { what, source }
    }

    /// A request body (`what`) that could not be written.
    pub fn encode(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> ClusterError {
        let what = what.into();
        move |source| ClusterError::Encode { what, source }
    }

    /// A failure of the kube client's stack: an error status the client decoded is
    /// [`ClusterError::Api`], a refusal by the catalogue guard a configuration error (never
    /// retried), anything else a transport failure.
    pub fn from_kube(err: kube::Error) -> Self {
        if let kube::Error::Api(status) = err {
            return ClusterError::Api {
                code: status.code,
                reason: status.reason,
                message: status.message,
                retry_after: None,
                continue_token: None,
                flow_control: None,
            };
        }
        if let kube::Error::Service(inner) = &err
            && let Some(refused) = inner.downcast_ref::<super::access::NotCatalogued>()
        {
            return ClusterError::NotCatalogued(refused.clone());
        }
        ClusterError::Transport(Box::new(err))
    }

    /// The [`ClusterError::Api`] for an answer of `code` with `body` (a metav1.Status in JSON or
    /// protobuf, or anything): the Status's reason and message, else up to 512 characters of the
    /// body, else `fallback` (the status's reason phrase, as callers pass it).
    pub fn from_status(
        code: u16,
        body: &[u8],
        retry_after: Option<Duration>,
        fallback: &str,
    ) -> Self {
        let status = status_body(body);
        let message = if status.message.is_empty() {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                fallback.to_string()
            } else {
                text.chars().take(512).collect()
            }
        } else {
            status.message
        };
        ClusterError::Api {
            code,
            reason: status.reason,
            message,
            retry_after,
            continue_token: status.metadata.continue_token.filter(|t| !t.is_empty()),
            flow_control: None,
        }
    }

    /// The error an answer that is not a success says: its Status (or its text), its
    /// `Retry-After`, and whether API Priority and Fairness rejected it.
    pub fn from_answer(status: http::StatusCode, headers: &http::HeaderMap, body: &[u8]) -> Self {
        let retry_after = parse_retry_after(headers.get(http::header::RETRY_AFTER));
        let fallback = status.canonical_reason().unwrap_or("error");
        ClusterError::from_status(status.as_u16(), body, retry_after, fallback)
            .with_flow_control(headers)
    }

    /// Marks a 429 as API Priority and Fairness's: one its filter wrote (plain text, no Status
    /// — recording 21, step 2) on an answer that carries APF's headers. kube-apiserver sets
    /// `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID` on every
    /// response it classified, so the headers alone do not tell: the watch cache's "storage
    /// is (re)initializing" carries them too (step 1), as a Status.
    pub fn with_flow_control(mut self, headers: &http::HeaderMap) -> Self {
        if let ClusterError::Api {
            code: 429,
            reason,
            flow_control,
            ..
        } = &mut self
            && reason.is_empty()
        {
            *flow_control = headers
                .get(PRIORITY_LEVEL_UID_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
        }
        self
    }

    /// A 429 a resource's handler answered with a metav1.Status: this request, not the
    /// apiserver, is refused for now — kube-apiserver's watch cache for the resource still
    /// filling after its storage was rebuilt ("storage is (re)initializing", recording 21
    /// step 1), an eviction a disruption budget holds back. The apiserver's own 429s —
    /// API Priority and Fairness, max-in-flight — come from its filters, before any
    /// handler, in plain text (step 2).
    pub fn is_refused_for_now(&self) -> bool {
        matches!(self, ClusterError::Api { code: 429, reason, .. } if !reason.is_empty())
    }

    /// The priority level of an APF rejection (see [`ClusterError::with_flow_control`]).
    pub fn flow_control(&self) -> Option<&str> {
        match self {
            ClusterError::Api { flow_control, .. } => flow_control.as_deref(),
            _ => None,
        }
    }

    /// The HTTP status code of an [`ClusterError::Api`] answer; `None` for every other error.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClusterError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Worth another try later: throttling (429), server-side trouble (5xx), timeouts (408,
    /// 504) and anything that never got an answer. Everything else (400, 403, 405, 422, an
    /// admission webhook's denial) would fail the same way again.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClusterError::Api { code, .. } => *code == 429 || *code == 408 || *code >= 500,
            ClusterError::Transport(_)
            | ClusterError::TimedOut { .. }
            | ClusterError::Body(_)
            | ClusterError::RefusedWhileNotReady { .. } => true,
            ClusterError::Decode { .. }
            | ClusterError::Unexpected(_)
            | ClusterError::Kind { .. }
            | ClusterError::Protobuf { .. }
            | ClusterError::Config { .. }
            | ClusterError::NotCatalogued(_)
            | ClusterError::Encode { .. } => false,
        }
    }

    /// The answer's `Retry-After`, when it had one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClusterError::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409 Conflict (a stale resourceVersion, or AlreadyExists).
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 401 Unauthorized or 403 Forbidden.
    pub fn is_refusal(&self) -> bool {
        matches!(self.code(), Some(401 | 403))
    }

    /// 410 Gone / Expired: a continue token or resourceVersion too old to serve.
    pub fn is_expired(&self) -> bool {
        self.code() == Some(410)
    }
}

/// The header naming the APF priority level a request was classified into.
pub(crate) const PRIORITY_LEVEL_UID_HEADER: &str = "x-kubernetes-pf-prioritylevel-uid";

/// `Retry-After` in seconds (the form kube-apiserver sends); HTTP dates are not used by it.
pub(crate) fn parse_retry_after(value: Option<&http::HeaderValue>) -> Option<Duration> {
    let seconds: u64 = value?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_the_kube_client_decoded_keeps_its_code() {
        let forbidden =
            kube::core::Status::failure("watch is forbidden", "Forbidden").with_code(403);
        let err = ClusterError::from_kube(kube::Error::Api(forbidden.boxed()));
        assert_eq!(err.code(), Some(403));
        assert!(!err.is_retriable());
        assert!(err.to_string().contains("watch is forbidden"), "{err}");
        let throttled = kube::core::Status::failure("slow down", "TooManyRequests").with_code(429);
        assert!(ClusterError::from_kube(kube::Error::Api(throttled.boxed())).is_retriable());
    }

    #[test]
    fn classifies_codes() {
        let err = |code| ClusterError::from_status(code, b"", None, "x");
        for code in [429, 500, 502, 503, 504, 408] {
            assert!(err(code).is_retriable(), "{code}");
        }
        for code in [400, 403, 404, 405, 409, 410, 422] {
            assert!(!err(code).is_retriable(), "{code}");
        }
        let timed_out = ClusterError::TimedOut {
            what: "no answer",
            after: Duration::from_secs(60),
        };
        assert!(timed_out.is_retriable());
    }

    /// The headers both 429s of recording 21 carry (kube-apiserver classified both).
    fn recorded_429_headers(content_type: &str, retry_after: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        for (name, value) in [
            ("Content-Type", content_type),
            ("Retry-After", retry_after),
            (
                "X-Kubernetes-Pf-Flowschema-Uid",
                "cd5d7118-ef29-4485-a918-f158ab8491f2",
            ),
            (
                "X-Kubernetes-Pf-Prioritylevel-Uid",
                "68dcab8e-e2b2-4935-b560-16a161cf0ff2",
            ),
        ] {
            headers.insert(name, value.parse().expect("a header value"));
        }
        headers
    }

    #[test]
    fn apfs_429_is_flow_control_and_a_filling_caches_is_not() {
        // Recording 21, step 2: the filter's rejection, plain text.
        let rejected = ClusterError::from_answer(
            http::StatusCode::TOO_MANY_REQUESTS,
            &recorded_429_headers("text/plain; charset=utf-8", "2"),
            b"Too many requests, please try again later.\n",
        );
        assert_eq!(
            rejected.flow_control(),
            Some("68dcab8e-e2b2-4935-b560-16a161cf0ff2")
        );
        assert_eq!(rejected.retry_after(), Some(Duration::from_secs(2)));
        assert!(!rejected.is_refused_for_now());
        assert!(rejected.is_retriable());
        // Step 1: the watch cache still filling, a Status with the same headers.
        let filling = ClusterError::from_answer(
            http::StatusCode::TOO_MANY_REQUESTS,
            &recorded_429_headers("application/json", "1"),
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}"#,
        );
        assert_eq!(filling.flow_control(), None);
        assert_eq!(filling.retry_after(), Some(Duration::from_secs(1)));
        assert!(filling.is_refused_for_now());
        assert!(filling.is_retriable());
        // Without APF's headers (max-in-flight, a proxy) a 429 is nobody's level; another
        // code never is.
        let plain = ClusterError::from_answer(
            http::StatusCode::TOO_MANY_REQUESTS,
            &http::HeaderMap::new(),
            b"Too many requests, please try again later.\n",
        );
        assert_eq!(plain.flow_control(), None);
        assert!(!plain.is_refused_for_now());
        let unavailable = ClusterError::from_answer(
            http::StatusCode::SERVICE_UNAVAILABLE,
            &recorded_429_headers("text/plain; charset=utf-8", "1"),
            b"",
        );
        assert_eq!(unavailable.flow_control(), None);
        assert!(!unavailable.is_refused_for_now());
    }

    #[test]
    fn reads_the_expired_token_and_message() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{"continue":"abc"},"status":"Failure","message":"too old","reason":"Expired","code":410}"#;
        let err = ClusterError::from_status(410, body, None, "x");
        match err {
            ClusterError::Api {
                code,
                reason,
                message,
                continue_token,
                ..
            } => {
                assert_eq!(
                    (
                        code,
                        reason.as_str(),
                        message.as_str(),
                        continue_token.as_deref()
                    ),
                    (410, "Expired", "too old", Some("abc"))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_non_status_body_becomes_the_message() {
        let err = ClusterError::from_status(502, b"bad gateway\n", None, "x");
        assert_eq!(err.to_string(), "502 : bad gateway");
    }

    #[test]
    fn retry_after_in_seconds() {
        let v = http::HeaderValue::from_static("3");
        assert_eq!(parse_retry_after(Some(&v)), Some(Duration::from_secs(3)));
        let bad = http::HeaderValue::from_static("soon");
        assert_eq!(parse_retry_after(Some(&bad)), None);
        assert_eq!(parse_retry_after(None), None);
    }
}
