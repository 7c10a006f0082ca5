//! The metric names `deploy/monitoring` uses (the dashboard's and the alerts' PromQL), for the
//! tests that check them against promtool and against a real scrape.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

pub fn monitoring_dir() -> PathBuf {
    crate::repo_root().join("deploy/monitoring")
}

/// The PrometheusRule's `spec` (a plain Prometheus rules file: `groups:`), as YAML.
pub fn rules_file() -> String {
    let text = std::fs::read_to_string(monitoring_dir().join("prometheusrule.yaml"))
        .expect("read prometheusrule.yaml");
    let rule: serde_norway::Value =
        serde_norway::from_str(&text).expect("prometheusrule.yaml is YAML");
    serde_norway::to_string(&rule["spec"]).expect("spec to YAML")
}

/// Every PromQL expression of the alerts and the dashboard.
pub fn expressions() -> Vec<String> {
    let mut out = Vec::new();
    let rules: serde_norway::Value = serde_norway::from_str(&rules_file()).expect("rules");
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            out.push(rule["expr"].as_str().expect("expr").to_string());
        }
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring_dir().join("dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard.json is JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(target["expr"].as_str().expect("target expr").to_string());
        }
    }
    out
}

/// The metric names in PromQL: identifiers of our families (`svm_`, `storage_migrator_`,
/// `apiserver_`), as they appear in samples (`_total`, `_bucket` included).
pub fn metric_names(expressions: &[String]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for expr in expressions {
        let mut chars = expr.char_indices().peekable();
        while let Some((start, c)) = chars.next() {
            if !(c.is_ascii_alphabetic() || c == '_') {
                continue;
            }
            let mut end = start + c.len_utf8();
            while let Some(&(i, d)) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' || d == ':' {
                    end = i + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let word = &expr[start..end];
            if ["svm_", "storage_migrator_", "apiserver_"]
                .iter()
                .any(|p| word.starts_with(p))
            {
                names.insert(word.to_string());
            }
        }
    }
    names
}

/// The sample names of a Prometheus text exposition.
pub fn scraped_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}
