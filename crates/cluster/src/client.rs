//! The HTTP client for the target cluster: a `kube::Client` (kubeconfig or in-cluster
//! configuration, its TLS and credentials) used for raw requests, so the migrator controls
//! every header, reads only the fields it needs and sees each status code itself.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;

use super::access;
use super::error::ClusterError;

/// One request may take this long (a page of 500 metadata items takes well under a second on
/// a healthy apiserver; the slowest legitimate answer is a large page under load).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A successful answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// What the client asks kube-apiserver to answer its reads in (`--kube-api-content-type`, as
/// kube's own components have it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WireFormat {
    /// `application/vnd.kubernetes.protobuf` first, JSON as the fallback: kube-apiserver answers
    /// metadata-only reads of built-in kinds in protobuf (cheaper to encode than JSON) and of
    /// custom resources as it can.
    #[default]
    Protobuf,
    /// JSON only.
    Json,
}

/// The target cluster's client: raw requests through a `kube::Client` that refuses any request
/// outside the access catalogue. Cheap to clone.
#[derive(Clone)]
pub struct ClusterClient {
    client: kube::Client,
    wire: WireFormat,
    /// What the client was built from, for [`ClusterClient::on_new_connection`] (shared: it is
    /// large, and every clone of the client carries it).
    config: std::sync::Arc<kube::Config>,
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClient").finish_non_exhaustive()
    }
}

impl ClusterClient {
    /// The cluster named by `kubeconfig`, else the in-cluster configuration when running in
    /// a pod, else `None` (no target cluster: the controllers do not run).
    pub async fn connect(kubeconfig: Option<&Path>) -> Result<Option<Self>, ClusterError> {
        let config = match kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                    ClusterError::config(format!("reading kubeconfig {}", path.display()))(e.into())
                })?;
                kube::Config::from_custom_kubeconfig(
                    file,
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .map_err(|e| {
                    ClusterError::config(format!("loading kubeconfig {}", path.display()))(e.into())
                })?
            }
            None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                kube::Config::incluster().map_err(|e| {
                    ClusterError::config("loading the in-cluster configuration")(e.into())
                })?
            }
            None => return Ok(None),
        };
        Self::from_config(config).map(Some)
    }

    /// A client of the cluster `config` names, with this client's timeouts (no retries of its own,
    /// no read timeout: watches stay open) and the access catalogue's guard; reads in protobuf.
    pub fn from_config(config: kube::Config) -> Result<Self, ClusterError> {
        let config = tuned(config);
        let client = kube::client::ClientBuilder::try_from(config.clone())
            .map_err(|e| ClusterError::config("building the cluster client")(e.into()))?
            .with_layer(&tower::filter::FilterLayer::new(access::catalogue_guard))
            .build();
        Ok(Self {
            client,
            wire: WireFormat::default(),
            config: std::sync::Arc::new(config),
        })
    }

    /// The same client on a connection of its own. Behind a Service (or a load balancer)
    /// in front of several kube-apiservers, one kept-alive HTTP/2 connection always reaches
    /// the same one; what differs per apiserver (its `/metrics`) is only seen by opening new
    /// connections, each balanced anew.
    pub fn on_new_connection(&self) -> Result<Self, ClusterError> {
        Self::from_config((*self.config).clone()).map(|c| c.with_wire_format(self.wire))
    }

    /// The same client, reading in `wire`.
    pub fn with_wire_format(mut self, wire: WireFormat) -> Self {
        self.wire = wire;
        self
    }

    /// What reads ask kube-apiserver to answer in.
    pub fn wire_format(&self) -> WireFormat {
        self.wire
    }

    /// The underlying `kube::Client`, for watchers and the events recorder: it carries the same
    /// catalogue guard.
    pub fn kube(&self) -> &kube::Client {
        &self.client
    }

    /// A request; any status outside 2xx becomes [`ClusterError::Api`].
    pub async fn request(
        &self,
        method: Method,
        path_and_query: &str,
        accept: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<Answer, ClusterError> {
        self.send(method, path_and_query, accept, None, body, false)
            .await
    }

    /// A GET with `If-None-Match` (aggregated discovery, recordings 02a/02b): `Ok(None)` for
    /// a 304 Not Modified, else the fresh answer with its `ETag` header.
    pub async fn get_if_none_match(
        &self,
        path: &str,
        accept: &str,
        etag: Option<&str>,
    ) -> Result<Option<Answer>, ClusterError> {
        let answer = self
            .send(Method::GET, path, accept, etag, None, true)
            .await?;
        Ok((answer.status != StatusCode::NOT_MODIFIED).then_some(answer))
    }

    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        accept: &str,
        if_none_match: Option<&str>,
        body: Option<(&'static str, Vec<u8>)>,
        not_modified_is_an_answer: bool,
    ) -> Result<Answer, ClusterError> {
        let result = self
            .send_once(
                method,
                path_and_query,
                accept,
                if_none_match,
                body,
                not_modified_is_an_answer,
            )
            .await;
        match result {
            Err(refused) if refused.is_refusal() => Err(self.judge_refusal(refused).await),
            other => other,
        }
    }

    /// A 401/403 is final only from an apiserver that says it is ready: one that has just
    /// started refuses until its authorizer has synced (seen on kube-apiserver 1.36 restarts:
    /// `cannot get path "/api/v1"` for a few seconds), and taking that for an answer would
    /// fail a migration for good.
    async fn judge_refusal(&self, refused: ClusterError) -> ClusterError {
        let readyz = match self
            .send_once(Method::GET, "/readyz", "text/plain", None, None, false)
            .await
        {
            Ok(answer) if answer.body.trim_ascii() == b"ok" => return refused,
            Ok(answer) => String::from_utf8_lossy(&answer.body).trim().to_string(),
            Err(err) => err.to_string(),
        };
        ClusterError::RefusedWhileNotReady {
            refused: Box::new(refused),
            readyz: readyz.chars().take(200).collect(),
        }
    }

    async fn send_once(
        &self,
        method: Method,
        path_and_query: &str,
        accept: &str,
        if_none_match: Option<&str>,
        body: Option<(&'static str, Vec<u8>)>,
        not_modified_is_an_answer: bool,
    ) -> Result<Answer, ClusterError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(ACCEPT, accept);
        if let Some(etag) = if_none_match {
            builder = builder.header(http::header::IF_NONE_MATCH, etag);
        }
        let body = match body {
            Some((content_type, bytes)) => {
                builder = builder.header(CONTENT_TYPE, content_type);
                kube::client::Body::from(bytes)
            }
            None => kube::client::Body::empty(),
        };
        let request = builder
            .body(body)
            .map_err(|e| ClusterError::config("building a request")(e.into()))?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.client.send(request))
            .await
            .map_err(|_| ClusterError::TimedOut {
                what: "no answer",
                after: REQUEST_TIMEOUT,
            })?
            .map_err(ClusterError::from_kube)?;
        let (parts, body) = response.into_parts();
        let body = tokio::time::timeout(REQUEST_TIMEOUT, body.collect())
            .await
            .map_err(|_| ClusterError::TimedOut {
                what: "no whole answer",
                after: REQUEST_TIMEOUT,
            })?
            .map_err(|e| ClusterError::Body(Box::new(e)))?
            .to_bytes();
        if parts.status.is_success()
            || (not_modified_is_an_answer && parts.status == StatusCode::NOT_MODIFIED)
        {
            return Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            });
        }
        Err(ClusterError::from_answer(
            parts.status,
            &parts.headers,
            &body,
        ))
    }

    /// GET a JSON document and decode it.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<T, ClusterError> {
        let answer = self
            .request(Method::GET, path, "application/json", None)
            .await?;
        serde_json::from_slice(&answer.body).map_err(ClusterError::decode(format!("GET {path}")))
    }
}

/// The client's settings. Retries are ours (the shared limiter, Retry-After, backoff with a
/// cap), so kube's own retry policy is off: it would retry 429/503 up to 15 times outside the
/// limiter. No read timeout on the connection: the trigger's watches are quiet for as long as
/// the cluster is (kube-apiserver sends a bookmark about once a minute, and a 60 s read
/// timeout raced it); every one-shot request is bounded by [`REQUEST_TIMEOUT`] instead.
fn tuned(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = None;
    config.write_timeout = Some(REQUEST_TIMEOUT);
    config.default_retry = false;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_have_no_read_timeout_and_retries_are_ours() {
        let mut config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        config.read_timeout = Some(Duration::from_secs(60));
        let config = tuned(config);
        assert_eq!(config.read_timeout, None);
        assert!(!config.default_retry);
        assert_eq!(config.write_timeout, Some(REQUEST_TIMEOUT));
    }

    #[tokio::test]
    async fn a_request_outside_the_catalogue_is_refused_and_never_leaves_the_process() {
        // Port 9 on loopback: nothing is sent anyway, the guard answers first.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = ClusterClient::from_config(config).expect("client");
        let err = client
            .request(
                Method::DELETE,
                "/api/v1/namespaces/demo/secrets/s",
                "application/json",
                None,
            )
            .await
            .expect_err("refused");
        assert!(matches!(err, ClusterError::NotCatalogued(_)), "{err:?}");
        assert!(!err.is_retriable());
    }
}
