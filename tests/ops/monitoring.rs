//! deploy/monitoring: the alerts pass `promtool check rules` and fire as
//! tests/fixtures/monitoring/alerts_test.yaml expects (`promtool test rules`); the component
//! renders with deploy/ through the real kubectl's kustomize. (That every metric the dashboard
//! and the alerts name is served is checked against a real scrape in
//! tests/trigger/monitoring.rs.)

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::monitoring::{expressions, metric_names, monitoring_dir, rules_file};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// promtool (Debian `prometheus`, installed by hack/ensure-deps.sh); never skipped.
fn promtool() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("promtool"))
        .find(|p| p.is_file());
    found.expect(
        "promtool not found: run make test (hack/ensure-deps.sh installs Debian's prometheus)",
    )
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{command:?} failed:\n{text}");
    text
}

#[test]
fn the_alerts_pass_promtool_check_and_fire_as_their_unit_tests_expect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, rules_file()).expect("write rules");
    let checked = run(Command::new(promtool())
        .args(["check", "rules"])
        .arg(&rules));
    assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");
    std::fs::copy(
        repo().join("tests/fixtures/monitoring/alerts_test.yaml"),
        dir.path().join("alerts_test.yaml"),
    )
    .expect("copy");
    let tested = run(Command::new(promtool()).current_dir(dir.path()).args([
        "test",
        "rules",
        "alerts_test.yaml",
    ]));
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_dashboard_and_alert_expression_names_only_our_metrics_and_the_dashboard_covers_the_issue()
{
    let exprs = expressions();
    let names = metric_names(&exprs);
    for wanted in [
        "svm_migrator_migrations",
        "storage_migrator_core_migrator_migrated_objects",
        "storage_migrator_core_migrator_remaining_objects",
        "storage_migrator_core_migrator_request_duration_seconds_bucket",
        "storage_migrator_core_migrator_retries_total",
        "svm_trigger_storagestate_unsafe_since_timestamp_seconds",
        "svm_trigger_detection_lag_seconds_bucket",
        "svm_trigger_oldest_heartbeat_timestamp_seconds",
        "svm_leader_is_leader",
        "svm_leader_terms_total",
        "svm_migrator_apf_rejections_total",
        "svm_api_mode",
        "svm_migrations_yielded_total",
        "svm_data_plane_rollout_nodes",
        "svm_data_plane_evictions_total",
    ] {
        assert!(names.contains(wanted), "{wanted} is not used: {names:?}");
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring_dir().join("dashboard.json")).expect("read"),
    )
    .expect("JSON");
    let titles: Vec<&str> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for title in [
        "ETA",
        "Unsafe for",
        "Trigger detection lag (p50, p99)",
        "Leader",
        "Data-plane nodes by phase",
    ] {
        assert!(titles.contains(&title), "{titles:?}");
    }
    // Every panel reads the data source variable, so the dashboard imports anywhere.
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        }
    }
}

/// kubectl from `$SVM_KUBECTL` or `.venv/bin/kubectl`; never skipped when missing.
fn kubectl() -> PathBuf {
    let bin = std::env::var_os("SVM_KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/kubectl"));
    assert!(bin.exists(), "kubectl not found at {}", bin.display());
    bin
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let path = entry.expect("entry").path();
        let generated = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("crt" | "key" | "pem")
        );
        if path.is_file() && !generated {
            std::fs::copy(&path, to.join(path.file_name().expect("name"))).expect("copy");
        }
    }
}

#[test]
fn the_component_renders_with_deploy_and_the_service_monitor_finds_the_service() {
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in [
        "deploy",
        "deploy/base",
        "deploy/monitoring",
        "apiservice",
        "apiservice/project",
        "certs",
    ] {
        copy_dir(&repo().join(sub), &dir.path().join(sub));
    }
    svm_devcerts::generate(&dir.path().join("certs")).expect("certs");
    let overlay = dir.path().join("with-monitoring");
    std::fs::create_dir_all(&overlay).expect("mkdir");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../deploy]\ncomponents: [../deploy/monitoring]\n",
    )
    .expect("write");
    let rendered = run(Command::new(kubectl()).arg("kustomize").arg(&overlay));
    let objects: Vec<serde_norway::Value> = serde_norway::Deserializer::from_str(&rendered)
        .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
        .collect();
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in:\n{rendered}"))
    };
    let monitor = find("ServiceMonitor", "svm-apiserver");
    let service = find("Service", "svm-apiserver");
    assert_eq!(
        monitor["metadata"]["namespace"],
        service["metadata"]["namespace"]
    );
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("matchLabels")
    {
        assert_eq!(
            &service["metadata"]["labels"][key], value,
            "selector {key:?}"
        );
    }
    let port = monitor["spec"]["endpoints"][0]["port"]
        .as_str()
        .expect("port");
    assert!(
        service["spec"]["ports"]
            .as_sequence()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == port),
        "the Service has no port {port}"
    );
    let ca = &monitor["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"];
    let secret = find("Secret", ca["name"].as_str().expect("secret name"));
    assert!(!secret["data"][ca["key"].as_str().expect("key")].is_null());
    let rule = find("PrometheusRule", "svm-apiserver");
    let shipped: serde_norway::Value = serde_norway::from_str(&rules_file()).expect("rules");
    assert_eq!(
        rule["spec"], shipped,
        "the rendered rules are the shipped ones"
    );
    let dashboard = find("ConfigMap", "svm-apiserver-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(
        dashboard["data"]["svm-apiserver.json"]
            .as_str()
            .expect("dashboard in the ConfigMap"),
    )
    .expect("the dashboard is JSON");
    assert_eq!(json["uid"], "svm-apiserver");
    let reader = find("ClusterRole", "svm-apiserver:metrics-reader");
    assert_eq!(reader["rules"][0]["nonResourceURLs"][0], "/metrics");
}
