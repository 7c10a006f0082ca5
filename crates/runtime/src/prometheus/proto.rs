//! Reading kube-apiserver's `/metrics` in Prometheus's protobuf exposition format (length-
//! delimited `io.prometheus.client.MetricFamily` messages), by the migrator's neighbours
//! (every 1–4 s while it has no priority level of its own) and the trigger's encryption
//! generation (every `--encryption-poll-interval`): kube-apiserver answers it for half the CPU
//! of the text format and a fifth of the bytes (`make bench-real` with the `metrics` run:
//! 10–12 ms and 374 KB against 23–24 ms and 1.7 MB per reading on an idle envtest
//! kube-apiserver), and makes less garbage for its collector while it is busy with the
//! migration. A server that answers text (no protobuf) is read as text.
//!
//! Only what a gauge, counter or untyped sample needs is declared; prost skips the rest
//! (help, summaries, histograms) without decoding it.

use std::collections::BTreeMap;

use prost::Message;

/// What the migrator asks `/metrics` for: protobuf first, the text format as Prometheus asks.
pub const ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3";

/// Whether an answer's `Content-Type` is the delimited protobuf format.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.starts_with("application/vnd.google.protobuf")
        && content_type.contains("io.prometheus.client.MetricFamily")
        && content_type.contains("encoding=delimited")
}

/// One sample: the family's name, the labels, the value.
pub type Series = (String, BTreeMap<String, String>, f64);

/// The samples of the families named in `families` (gauges, counters, untyped) of a delimited
/// protobuf body; `None` when the body is not that format (a length past its end, a message
/// that does not decode).
pub fn samples(mut body: &[u8], families: &[&str]) -> Option<Vec<Series>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let len = usize::try_from(prost::encoding::decode_varint(&mut body).ok()?).ok()?;
        let message = body.get(..len)?;
        body = &body[len..];
        // The name first: most families are not ours, and are not decoded further.
        let name = FamilyName::decode(message).ok()?.name.unwrap_or_default();
        if !families.contains(&name.as_str()) {
            continue;
        }
        let family = MetricFamily::decode(message).ok()?;
        for metric in family.metric {
            let Some(value) = metric.value() else {
                continue;
            };
            let labels = metric
                .label
                .into_iter()
                .map(|l| (l.name.unwrap_or_default(), l.value.unwrap_or_default()))
                .collect();
            out.push((name.clone(), labels, value));
        }
    }
    Some(out)
}

/// A `MetricFamily` read for its name alone.
#[derive(Clone, PartialEq, Message)]
struct FamilyName {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
}

/// `io.prometheus.client.MetricFamily`, as far as we read it.
#[derive(Clone, PartialEq, Message)]
pub struct MetricFamily {
    /// The family's name.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// Its samples.
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

/// `io.prometheus.client.Metric`: one sample.
#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    /// Its labels.
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    /// Its value, of a gauge.
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Value>,
    /// Its value, of a counter.
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Value>,
    /// Its value, of an untyped sample.
    #[prost(message, optional, tag = "5")]
    pub untyped: Option<Value>,
}

impl Metric {
    fn value(&self) -> Option<f64> {
        [&self.gauge, &self.counter, &self.untyped]
            .into_iter()
            .find_map(|v| v.as_ref().and_then(|v| v.value))
    }
}

/// `io.prometheus.client.LabelPair`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    /// The label's name.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// Its value.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// `Gauge`, `Counter` and `Untyped` alike: the value is field 1.
#[derive(Clone, PartialEq, Message)]
pub struct Value {
    /// The value.
    #[prost(double, optional, tag = "1")]
    pub value: Option<f64>,
}

/// Builders of a delimited protobuf `/metrics` body, for the tests that read one.
#[cfg(any(test, feature = "testing"))]
pub mod build {
    use super::{LabelPair, Message, Metric, MetricFamily, Value};

    /// One family, length-delimited as on the wire.
    pub fn family(name: &str, metrics: Vec<Metric>) -> Vec<u8> {
        MetricFamily {
            name: Some(name.into()),
            metric: metrics,
        }
        .encode_length_delimited_to_vec()
    }

    /// A gauge sample with `labels`.
    pub fn gauge(labels: &[(&str, &str)], value: f64) -> Metric {
        Metric {
            label: labels
                .iter()
                .map(|(n, v)| LabelPair {
                    name: Some((*n).into()),
                    value: Some((*v).into()),
                })
                .collect(),
            gauge: Some(Value { value: Some(value) }),
            ..Metric::default()
        }
    }

    /// A counter sample with `labels`.
    pub fn counter(labels: &[(&str, &str)], value: f64) -> Metric {
        Metric {
            gauge: None,
            counter: Some(Value { value: Some(value) }),
            ..gauge(labels, 0.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::build::{counter, family, gauge};
    use super::*;

    #[test]
    fn the_families_asked_for_are_read_and_the_rest_skipped() {
        let mut body = family("not_ours", vec![gauge(&[("a", "b")], 9.0)]);
        body.extend(family(
            "apiserver_flowcontrol_current_executing_requests",
            vec![
                gauge(&[("priority_level", "exempt")], 2.0),
                gauge(&[("priority_level", "workload-low")], 1.0),
            ],
        ));
        body.extend(family(
            "apiserver_request_total",
            vec![counter(&[("verb", "GET")], 7.0)],
        ));
        let read = samples(
            &body,
            &[
                "apiserver_flowcontrol_current_executing_requests",
                "apiserver_request_total",
            ],
        )
        .expect("decodes");
        let series = |name: &str, labels: &[(&str, &str)], value: f64| -> Series {
            let labels = labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect();
            (name.to_string(), labels, value)
        };
        let executing = "apiserver_flowcontrol_current_executing_requests";
        assert_eq!(
            read,
            [
                series(executing, &[("priority_level", "exempt")], 2.0),
                series(executing, &[("priority_level", "workload-low")], 1.0),
                series("apiserver_request_total", &[("verb", "GET")], 7.0),
            ]
        );
    }

    #[test]
    fn a_body_that_is_not_delimited_protobuf_is_refused_not_misread() {
        // Text, and a length prefix past the end.
        assert!(samples(b"# HELP x y\nx 1\n", &["x"]).is_none());
        let mut cut = family("x", vec![gauge(&[], 1.0)]);
        cut.truncate(cut.len() - 2);
        assert!(samples(&cut, &["x"]).is_none());
        assert_eq!(samples(b"", &["x"]).map(|s| s.len()), Some(0));
    }

    #[test]
    fn the_content_type_names_the_delimited_format() {
        assert!(is_protobuf(
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
        ));
        assert!(!is_protobuf("text/plain; version=0.0.4; charset=utf-8"));
    }
}
