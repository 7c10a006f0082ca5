//! Reading the Prometheus text format kube-apiserver's `/metrics` answers in: one sample line
//! at a time, for the trigger (the encryption generation) and the migrator (who else is
//! using the apiserver). Read leniently: a line that does not parse is not one of ours.
//!
//! Hand-written: the callers pick the few lines of the families they read out of thousands
//! and read only those, and no crate that reads the format fits. `prometheus-parse` (0.2)
//! splits labels at every `,` and `=` and stops a label set at the first `}` — a value with
//! either, or an escaped quote, reads wrong or drops the line — and parses a whole scrape
//! (regex, chrono) to do it; `openmetrics-parser` is LGPL-3.0, outside deny.toml's licences;
//! the `prometheus` and `prometheus-client` crates only write the format. The tests below read
//! the recorded real kube-apiserver's `/metrics` (`tests/fixtures/metrics/`) line by line.

use std::collections::BTreeMap;

/// One sample line of the Prometheus text format: its name, labels and value. `None` for
/// comments and lines that do not parse (the scrape is read leniently: a line we cannot read
/// is not one of ours).
pub fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    let line = line.trim();
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let (labels, rest) = if line[name_end..].starts_with('{') {
        let (labels, used) = parse_labels(&line[name_end + 1..])?;
        (labels, &line[name_end + 1 + used..])
    } else {
        (BTreeMap::new(), &line[name_end..])
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// `k="v",k2="v2"}` → the labels and how many bytes were read (through the `}`).
fn parse_labels(text: &str) -> Option<(BTreeMap<String, String>, usize)> {
    let mut labels = BTreeMap::new();
    let mut chars = text.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| *c == ',' || *c == ' ').is_some() {}
        let (start, c) = chars.next()?;
        if c == '}' {
            return Some((labels, start + 1));
        }
        let mut key = String::from(c);
        for (_, c) in chars.by_ref() {
            if c == '=' {
                break;
            }
            key.push(c);
        }
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()?.1 {
                '"' => break,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        }
        labels.insert(key.trim().to_string(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_read_whole_not_as_the_tail_of_another() {
        let (name, labels, value) = sample(
            "apiserver_request_total{subresource=\"status\",resource=\"pods\",verb=\"GET\"} 7",
        )
        .expect("a sample line");
        assert_eq!(name, "apiserver_request_total");
        assert_eq!(value, 7.0);
        assert_eq!(labels.get("resource").map(String::as_str), Some("pods"));
        assert_eq!(
            labels.get("subresource").map(String::as_str),
            Some("status")
        );
        assert_eq!(labels.get("group"), None);
    }

    #[test]
    fn unlabelled_samples_escapes_and_comments_read_as_the_format_says() {
        let (name, labels, value) =
            sample("process_start_time_seconds 1.79570111048e+09").expect("unlabelled");
        assert_eq!(
            (name, labels.len(), value),
            ("process_start_time_seconds", 0, 1.79570111048e9)
        );
        let (_, labels, _) = sample(r#"m{a="x\"}y",b="1\n2"} 1"#).expect("escaped");
        assert_eq!(labels.get("a").map(String::as_str), Some(r#"x"}y"#));
        assert_eq!(labels.get("b").map(String::as_str), Some("1\n2"));
        assert_eq!(sample("# TYPE m gauge"), None);
        assert_eq!(sample("m{a=\"x\"} not-a-number"), None);
        let (_, labels, _) = sample(r#"m{a="x,y=z",b="}"} 3"#).expect("commas, = and }");
        assert_eq!(labels.get("a").map(String::as_str), Some("x,y=z"));
        assert_eq!(labels.get("b").map(String::as_str), Some("}"));
        // Go's special values, as its client writes them.
        assert_eq!(sample("m +Inf").map(|s| s.2), Some(f64::INFINITY));
        assert_eq!(sample("m -Inf").map(|s| s.2), Some(f64::NEG_INFINITY));
        assert!(sample("m NaN").is_some_and(|s| s.2.is_nan()));
    }

    /// The recorded /metrics of kube-apiserver v1.36.2 (`tests/fixtures/metrics/README.md`).
    const RECORDED: [(&str, &str); 3] = [
        (
            "before",
            include_str!("../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-before.txt"),
        ),
        (
            "after",
            include_str!("../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-after.txt"),
        ),
        (
            "encryption",
            include_str!("../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-encryption.txt"),
        ),
    ];

    #[test]
    fn every_sample_line_of_the_real_kube_apiservers_metrics_reads_as_written() {
        let mut read = 0;
        for (file, text) in RECORDED {
            for line in text
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
            {
                let (name, labels, value) =
                    sample(line).unwrap_or_else(|| panic!("{file}: not read: {line}"));
                assert!(line.starts_with(name), "{file}: {line}");
                // Each label as written, and no more of them (no value here needs escaping).
                assert_eq!(labels.len(), line.matches("=\"").count(), "{file}: {line}");
                for (key, label) in &labels {
                    assert!(
                        line.contains(&format!("{key}=\"{label}\"")),
                        "{file}: {line}"
                    );
                }
                let written = line.rsplit(' ').next().expect("a value");
                assert_eq!(Some(value), written.parse().ok(), "{file}: {line}");
                read += 1;
            }
        }
        assert_eq!(read, 95 + 88 + 218, "the sample lines of the three files");
        let encryption = RECORDED[2].1;
        let find = |wanted: &str| {
            encryption
                .lines()
                .filter_map(sample)
                .find(|(name, _, _)| *name == wanted)
                .expect(wanted)
        };
        let (_, config, one) = find("apiserver_encryption_config_controller_last_config_info");
        assert_eq!(
            config.get("hash").map(String::as_str),
            Some("sha256:8a7bb23e20da60ca82682dfc3ec0040a5e91fe3dac7d66942eb3e4ed15d2eb37")
        );
        assert_eq!(one, 1.0);
        let (_, reload, at) =
            find("apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds");
        assert_eq!(reload.get("status").map(String::as_str), Some("success"));
        assert_eq!(at, 1.7959231709433486e9);
        let (_, bucket, _) = find("apiserver_storage_transformation_duration_seconds_bucket");
        assert_eq!(
            bucket.get("transformer_prefix").map(String::as_str),
            Some("k8s:enc:aescbc:v1:")
        );
        let infinite = encryption
            .lines()
            .filter_map(sample)
            .filter(|(_, labels, _)| labels.get("le").map(String::as_str) == Some("+Inf"))
            .count();
        assert_eq!(infinite, 6, "the histogram's +Inf buckets");
    }
}
