//! Request metrics in kube-apiserver's names (`apiserver_request_total`,
//! `apiserver_request_duration_seconds`), recorded by a middleware and served on `/metrics` in
//! the Prometheus text format.

use std::sync::Mutex;

use http::Method;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::auth::RequestAttributes;

mod track;

pub(crate) use track::track;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DurationLabels {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestKindLabels {
    /// `readOnly` or `mutating`, as kube-apiserver's inflight gauges.
    pub request_kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// What the network edge counts: connections, requests in flight, watchers dropped.
#[derive(Clone, Default)]
pub struct EdgeMetrics {
    /// `apiserver_current_inflight_requests{request_kind}` (kube-apiserver's name).
    pub inflight: Family<RequestKindLabels, Gauge>,
    /// `apiserver_terminated_watchers_total{resource}`: watchers closed because they did not
    /// read (kube-apiserver's name).
    pub terminated_watchers: Family<ResourceLabels, Counter>,
    /// `svm_apiserver_open_connections`: client connections open now.
    pub open_connections: Gauge,
    /// `svm_apiserver_closed_connections_total{reason}`: connections the server closed on its
    /// own (TLS handshake timeout or failure, a watcher that stopped reading, idle).
    pub closed_connections: Family<ReasonLabels, Counter>,
}

/// kube-apiserver's request latency buckets.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

fn new_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The server's metrics registry. Other components may register more metrics into
/// [`Metrics::registry`] before the server starts.
pub struct Metrics {
    /// What `/metrics` renders; other components register theirs here.
    pub registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
    terminations: Family<RequestLabels, Counter>,
    /// The connection and in-flight metrics of the network edge.
    pub edge: EdgeMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The request and edge metrics, registered in a new registry.
    pub fn new() -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        let durations =
            Family::<DurationLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                new_histogram,
            );
        let mut registry = Registry::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, group, version, resource, subresource and HTTP response code.",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, group, version, resource and subresource.",
            durations.clone(),
        );
        let terminations = Family::<RequestLabels, Counter>::default();
        registry.register(
            "apiserver_request_terminations",
            "Number of requests which apiserver terminated in self-defense.",
            terminations.clone(),
        );
        let edge = EdgeMetrics::default();
        registry.register(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
            edge.inflight.clone(),
        );
        registry.register(
            "apiserver_terminated_watchers",
            "Counter of watchers closed due to unresponsiveness broken by resource type.",
            edge.terminated_watchers.clone(),
        );
        registry.register(
            "svm_apiserver_open_connections",
            "Client connections open now.",
            edge.open_connections.clone(),
        );
        registry.register(
            "svm_apiserver_closed_connections",
            "Connections the server closed on its own, by reason.",
            edge.closed_connections.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            durations,
            terminations,
            edge,
        }
    }

    /// Counts one request answered with `code` and observes its duration.
    pub(crate) fn record(&self, labels: DurationLabels, code: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                verb: labels.verb.clone(),
                group: labels.group.clone(),
                version: labels.version.clone(),
                resource: labels.resource.clone(),
                subresource: labels.subresource.clone(),
                code: code.to_string(),
            })
            .inc();
        self.durations.get_or_create(&labels).observe(seconds);
    }

    /// Counts one request the server answered with `code` in self-defense instead of serving
    /// it (`apiserver_request_terminations_total`, kube-apiserver's name: a request past
    /// `--request-timeout`).
    pub(crate) fn terminated(&self, labels: DurationLabels, code: u16) {
        self.terminations
            .get_or_create(&RequestLabels {
                verb: labels.verb,
                group: labels.group,
                version: labels.version,
                resource: labels.resource,
                subresource: labels.subresource,
                code: code.to_string(),
            })
            .inc();
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        match self.registry.lock() {
            Ok(registry) => {
                if encode(&mut out, &registry).is_err() {
                    out.clear();
                }
            }
            Err(_) => out.clear(),
        }
        out
    }
}

/// The request's labels, derived from its path the way kube-apiserver's RequestInfo does:
/// LIST / WATCH for collection GETs, APPLY for server-side apply.
pub(crate) fn request_labels(
    method: &Method,
    request: &RequestAttributes,
    content_type: &str,
) -> DurationLabels {
    // Only our own groups are labelled (the core group's paths are not ours).
    let attributes = request
        .resource
        .clone()
        .filter(|_| request.path.starts_with("/apis/"))
        .unwrap_or_default();
    let (group, version, resource, subresource) = (
        attributes.group.as_str(),
        attributes.version.as_str(),
        attributes.resource.as_str(),
        attributes.subresource.as_str(),
    );
    let name = Some(attributes.name.as_str()).filter(|n| !n.is_empty());
    let is_resource = !resource.is_empty();
    let verb = match *method {
        Method::GET if is_resource && name.is_none() => {
            if request.verb == "watch" {
                "WATCH"
            } else {
                "LIST"
            }
        }
        Method::PATCH if content_type.starts_with("application/apply-patch") => "APPLY",
        Method::GET
        | Method::HEAD
        | Method::POST
        | Method::PUT
        | Method::PATCH
        | Method::DELETE
        | Method::OPTIONS
        | Method::CONNECT
        | Method::TRACE => method.as_str(),
        // Extension methods would otherwise be unbounded label values.
        _ => "OTHER",
    };
    DurationLabels {
        verb: verb.to_string(),
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
        subresource: subresource.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(method: &Method, path: &str, query: Option<&str>, ct: &str) -> DurationLabels {
        request_labels(
            method,
            &RequestAttributes::from_request(method, path, query),
            ct,
        )
    }

    #[test]
    fn labels_follow_request_info() {
        let l = labels(&Method::GET, "/apis/g.io/v1/things", Some("watch=1"), "");
        assert_eq!((l.verb.as_str(), l.resource.as_str()), ("WATCH", "things"));
        let l = labels(&Method::GET, "/apis/g.io/v1/things", None, "");
        assert_eq!(l.verb, "LIST");
        let l = labels(&Method::GET, "/apis/g.io/v1/things/a/status", None, "");
        assert_eq!((l.verb.as_str(), l.subresource.as_str()), ("GET", "status"));
        let l = labels(
            &Method::PATCH,
            "/apis/g.io/v1/things/a",
            None,
            "application/apply-patch+yaml",
        );
        assert_eq!(l.verb, "APPLY");
        let l = labels(&Method::GET, "/healthz", None, "");
        assert_eq!((l.verb.as_str(), l.group.as_str()), ("GET", ""));
        let custom = Method::from_bytes(b"BREW").expect("method");
        let l = labels(&custom, "/apis/g.io/v1/things", None, "");
        assert_eq!(l.verb, "OTHER");
    }

    #[test]
    fn render_has_counter_and_histogram() {
        let metrics = Metrics::new();
        metrics.record(
            DurationLabels {
                verb: "LIST".into(),
                group: "g.io".into(),
                version: "v1".into(),
                resource: "things".into(),
                subresource: String::new(),
            },
            200,
            0.01,
        );
        let text = metrics.render();
        assert!(text.contains(
            "apiserver_request_total{verb=\"LIST\",group=\"g.io\",version=\"v1\",resource=\"things\",subresource=\"\",code=\"200\"} 1"
        ), "{text}");
        assert!(
            text.contains("apiserver_request_duration_seconds_bucket{"),
            "{text}"
        );
        assert!(text.contains("# TYPE apiserver_request_duration_seconds histogram"));
    }
}
