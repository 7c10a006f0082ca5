//! The string-format checks of k8s.io/apimachinery (`pkg/api/validate/content`,
//! `pkg/util/validation`), with upstream's error texts: DNS-1123 subdomains, qualified names
//! (label keys), label values.

const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MAX: usize = 253;

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_MAX: usize = 63;

const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX: usize = 63;

/// `RegexError`: the message, examples and the regex.
fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{re}')");
    }
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{re}')",
        examples.join("or ")
    )
}

fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} bytes")
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1123_label(label: &str) -> bool {
    let (Some(first), Some(last)) = (label.chars().next(), label.chars().last()) else {
        return false;
    };
    is_lower_alnum(first)
        && is_lower_alnum(last)
        && label.chars().all(|c| is_lower_alnum(c) || c == '-')
}

/// RFC 1123 label (`IsDNS1123Label`): namespaces, resource names such as `deployments`.
pub fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !matches_dns1123_label(value) {
        errs.push("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_string());
    }
    errs
}

/// RFC 1123 subdomain (`IsDNS1123Subdomain`): object names, label-key prefixes.
pub fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !value.split('.').all(matches_dns1123_label) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn matches_label_name(name: &str) -> bool {
    let (Some(first), Some(last)) = (name.chars().next(), name.chars().last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A qualified name / label key (`IsLabelKey`): `[prefix/]name`.
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_KEY_MAX {
        errs.push(format!("name part {}", max_len_error(LABEL_KEY_MAX)));
    }
    if !matches_label_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label value (`IsLabelValue`): empty, or a label name of at most 63 bytes.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !matches_label_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain_message_is_upstreams() {
        // Recording 16a, metadata.name "Bad_Name!".
        assert_eq!(
            dns1123_subdomain_errors("Bad_Name!"),
            vec!["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string()]
        );
    }

    #[test]
    fn subdomains() {
        for ok in ["a", "a-b", "a.b.c", "0abc", "x".repeat(253).as_str()] {
            assert!(dns1123_subdomain_errors(ok).is_empty(), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a_b", "a.-b"] {
            assert_eq!(dns1123_subdomain_errors(bad).len(), 1, "{bad}");
        }
        assert_eq!(
            dns1123_subdomain_errors(&"x".repeat(254)),
            vec![max_len_error(253)]
        );
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "a",
            "A_b.c-D",
            "example.com/Key",
            "k8s.io/initial-events-end",
        ] {
            assert!(qualified_name_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            qualified_name_errors("/a"),
            vec!["prefix part must be non-empty"]
        );
        assert!(
            qualified_name_errors("Bad.Prefix/a")[0]
                .starts_with("prefix part a lowercase RFC 1123")
        );
        assert!(qualified_name_errors("a/b/c")[0].starts_with("a valid label key must consist"));
        let empty_name = qualified_name_errors("example.com/");
        assert_eq!(empty_name[0], "name part must be non-empty");
        assert!(qualified_name_errors("-a")[0].starts_with("name part must consist"));
        assert_eq!(
            qualified_name_errors(&"a".repeat(64))[0],
            "name part must be no more than 63 bytes"
        );
    }

    #[test]
    fn dns1123_labels() {
        assert!(dns1123_label_errors("deployments").is_empty());
        assert!(dns1123_label_errors("a-1").is_empty());
        assert!(!dns1123_label_errors("Deployments").is_empty());
        assert!(!dns1123_label_errors("-x").is_empty());
        assert!(!dns1123_label_errors("").is_empty());
        assert!(!dns1123_label_errors("a.b").is_empty());
        assert!(!dns1123_label_errors(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "a.b_c-D", &"v".repeat(63)] {
            assert!(label_value_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(label_value_errors("-a").len(), 1);
        assert_eq!(label_value_errors("a b").len(), 1);
        assert_eq!(label_value_errors(&"v".repeat(64)), vec![max_len_error(63)]);
    }
}
