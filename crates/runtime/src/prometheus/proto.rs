//! Reading kube-apiserver's `/metrics` in Prometheus's protobuf exposition format (length-
//! delimited `io.prometheus.client.MetricFamily` messages), by the migrator's neighbours
//! (every 1–4 s while it has no priority level of its own) and the trigger's encryption
//! generation (every `--encryption-poll-interval`): kube-apiserver answers it for half the CPU
//! of the text format and a fifth of the bytes (`make bench-real` with the `metrics` run:
//! 10–12 ms and 374 KB against 23–24 ms and 1.7 MB per reading on an idle envtest
//! kube-apiserver), and makes less garbage for its collector while it is busy with the
//! migration. A server that answers text (no protobuf) is read as text.
//!
//! The messages are the Prometheus client library's (`prometheus-client`'s
//! `prometheus_protobuf` feature: prost code generated from Prometheus's `metrics.proto`), not
//! declared here. Each family is first read for its name alone ([`FamilyName`]), so the
//! families not asked for (histograms, mostly) are skipped without being decoded.

use std::collections::BTreeMap;

use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::{
    Metric, MetricFamily,
};
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
        let name = FamilyName::decode(message).ok()?.name;
        if !families.contains(&name.as_str()) {
            continue;
        }
        let family = MetricFamily::decode(message).ok()?;
        for metric in family.metric {
            let Some(value) = value(&metric) else {
                continue;
            };
            let labels = metric
                .label
                .into_iter()
                .map(|l| (l.name, l.value))
                .collect();
            out.push((name.clone(), labels, value));
        }
    }
    Some(out)
}

/// A `MetricFamily` read for its name alone (field 1; prost skips the others undecoded): the
/// one message declared here, because decoding a whole family only to find it is not ours is
/// what this reader avoids.
#[derive(Clone, PartialEq, Message)]
struct FamilyName {
    #[prost(string, tag = "1")]
    name: String,
}

/// The value of a gauge, counter or untyped sample; `None` for the other kinds.
fn value(metric: &Metric) -> Option<f64> {
    (metric.gauge.as_ref().map(|g| g.value))
        .or_else(|| metric.counter.as_ref().map(|c| c.value))
        .or_else(|| metric.untyped.as_ref().map(|u| u.value))
}

/// Builders of a delimited protobuf `/metrics` body, for the tests that read one.
#[cfg(any(test, feature = "testing"))]
pub mod build {
    use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::{
        Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType,
    };
    use prost::Message;

    /// One family, length-delimited as on the wire.
    pub fn family(name: &str, metrics: Vec<Metric>) -> Vec<u8> {
        let kind = if metrics.iter().any(|m| m.counter.is_some()) {
            MetricType::Counter
        } else {
            MetricType::Gauge
        };
        MetricFamily {
            name: name.into(),
            r#type: kind.into(),
            metric: metrics,
            ..MetricFamily::default()
        }
        .encode_length_delimited_to_vec()
    }

    fn labelled(labels: &[(&str, &str)]) -> Metric {
        Metric {
            label: labels
                .iter()
                .map(|(n, v)| LabelPair {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Metric::default()
        }
    }

    /// A gauge sample with `labels`.
    pub fn gauge(labels: &[(&str, &str)], value: f64) -> Metric {
        Metric {
            gauge: Some(Gauge { value }),
            ..labelled(labels)
        }
    }

    /// A counter sample with `labels`.
    pub fn counter(labels: &[(&str, &str)], value: f64) -> Metric {
        Metric {
            counter: Some(Counter {
                value,
                ..Counter::default()
            }),
            ..labelled(labels)
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

    /// The two expositions kube-apiserver v1.36.2 answered one after the other
    /// (`tests/fixtures/metrics/README.md`).
    const RECORDED_TEXT: &str =
        include_str!("../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-encryption.txt");
    const RECORDED_PROTOBUF: &[u8] =
        include_bytes!("../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-encryption.pb");

    #[test]
    fn the_real_kube_apiservers_protobuf_says_what_its_text_says() {
        // The trigger's families and the migrator's, as they ask for them.
        let families = [
            "apiserver_encryption_config_controller_last_config_info",
            "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds",
            "apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds",
            "apiserver_flowcontrol_current_executing_requests",
            "apiserver_flowcontrol_current_inqueue_requests",
            "apiserver_request_total",
            "process_start_time_seconds",
            "apiserver_storage_transformation_operations_total",
        ];
        let decoded = samples(RECORDED_PROTOBUF, &families).expect("delimited protobuf");
        let text: Vec<Series> = RECORDED_TEXT
            .lines()
            .filter_map(crate::prometheus::text::sample)
            .filter(|(name, _, _)| families.contains(name))
            .map(|(name, labels, value)| (name.to_string(), labels, value))
            .collect();
        assert_eq!(decoded.len(), 49);
        assert_eq!(decoded, text);
        // A histogram is not a value: asked for, it gives no sample (the text's `_bucket`,
        // `_sum` and `_count` lines are other names).
        let histogram = "apiserver_storage_transformation_duration_seconds";
        assert_eq!(samples(RECORDED_PROTOBUF, &[histogram]), Some(Vec::new()));
        // Cut anywhere inside, the body is refused, never misread.
        for cut in [
            1,
            100,
            RECORDED_PROTOBUF.len() / 2,
            RECORDED_PROTOBUF.len() - 1,
        ] {
            assert_eq!(
                samples(&RECORDED_PROTOBUF[..cut], &families),
                None,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn the_content_type_names_the_delimited_format() {
        assert!(is_protobuf(
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
        ));
        assert!(!is_protobuf("text/plain; version=0.0.4; charset=utf-8"));
    }
}
