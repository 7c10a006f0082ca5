//! Reading the Prometheus text format kube-apiserver's `/metrics` answers in: one sample line
//! at a time, for the trigger (the encryption generation) and the migrator (who else is
//! using the apiserver). Read leniently: a line that does not parse is not one of ours.

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
    }
}
