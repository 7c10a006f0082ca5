//! A namespaced kind (VolumeClaimMigration) end to end with the real kubectl: create in a
//! namespace (the namespace defaulted from the request), the same name in two namespaces,
//! `get -n`, `get -A` with the NAMESPACE column and the kind's Table, a field selector on
//! metadata.namespace, a body naming another namespace refused with a Status, validation,
//! discovery (`namespaced: true`), `kubectl explain`, delete in one namespace only; `get -w`
//! in one namespace and across all.

use serde_json::Value;

use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};

const GROUP_VERSION: &str = "storage.svm-apiserver.io/v1alpha1";

fn migration(name: &str, namespace: Option<&str>, storage: &str) -> String {
    let namespace = namespace
        .map(|ns| format!("  namespace: {ns}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: {GROUP_VERSION}\nkind: VolumeClaimMigration\nmetadata:\n  name: {name}\n{namespace}spec:\n  target:\n    apiVersion: apps/v1\n    kind: StatefulSet\n    name: web\n  templates:\n  - name: data\n    storage: {storage}\n"
    )
}

#[test]
fn kubectl_serves_a_namespaced_kind() {
    let server =
        ServerProcess::start_with(Backend::Embedded, &["--enable-volume-claim-migrations"]);
    let k = Kubectl::new(&server.kubeconfig);

    let out = k.ok_stdin(
        &["create", "-n", "team-a", "-f", "-"],
        &migration("grow", None, "100Gi"),
    );
    assert_eq!(
        out.trim(),
        "volumeclaimmigration.storage.svm-apiserver.io/grow created"
    );
    k.ok_stdin(
        &["create", "-n", "team-b", "-f", "-"],
        &migration("grow", None, "20Gi"),
    );
    k.ok_stdin(
        &["create", "-n", "team-b", "-f", "-"],
        &migration("logs", None, "5Gi"),
    );

    // The object took the request's namespace; defaults were filled in.
    let a: Value =
        serde_json::from_str(&k.ok(&["get", "vcm", "grow", "-n", "team-a", "-o", "json"]))
            .expect("json");
    assert_eq!(a["metadata"]["namespace"], "team-a");
    assert_eq!(a["spec"]["templates"][0]["storage"], "100Gi");
    assert_eq!(a["spec"]["volumeClaimUpdateStrategy"], "OnDelete");

    // One namespace, with the kind's columns.
    let table = k.ok(&["get", "volumeclaimmigrations", "-n", "team-b"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .expect("header")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        vec![
            "NAME",
            "TARGET",
            "TEMPLATES",
            "COMPATIBLE",
            "READY",
            "STATUS",
            "AGE"
        ]
    );
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert_eq!(
        &rows[0][..6],
        ["grow", "StatefulSet/web", "data=20Gi", "0", "0", "Pending"]
    );

    // All namespaces: kubectl adds the NAMESPACE column from each row's object.
    let all = k.ok(&["get", "vcm", "-A"]);
    let names: Vec<(String, String)> = all
        .lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (cells[0].to_string(), cells[1].to_string())
        })
        .collect();
    assert!(all.starts_with("NAMESPACE"), "{all}");
    assert_eq!(
        names,
        vec![
            ("team-a".to_string(), "grow".to_string()),
            ("team-b".to_string(), "grow".to_string()),
            ("team-b".to_string(), "logs".to_string()),
        ]
    );
    let selected = k.ok(&[
        "get",
        "vcm",
        "-A",
        "--field-selector",
        "metadata.namespace=team-a",
        "-o",
        "name",
    ]);
    assert_eq!(
        selected.trim(),
        "volumeclaimmigration.storage.svm-apiserver.io/grow"
    );

    // A body naming another namespace than the URL: a BadRequest Status, nothing written.
    let body = serde_json::json!({
        "apiVersion": GROUP_VERSION,
        "kind": "VolumeClaimMigration",
        "metadata": {"name": "moved", "namespace": "team-c"},
        "spec": {"target": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web"},
                 "templates": [{"name": "data", "storage": "1Gi"}]},
    });
    let url = format!(
        "{}/apis/{GROUP_VERSION}/namespaces/team-a/volumeclaimmigrations",
        server.url
    );
    let client = server.http_client();
    let (code, status): (u16, Value) =
        tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(async move {
                let response = client.post(url).json(&body).send().await.expect("post");
                (
                    response.status().as_u16(),
                    response.json().await.expect("a Status"),
                )
            });
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    assert!(!k.run(&["get", "vcm", "moved", "-n", "team-c"]).ok);
    assert!(!k.run(&["get", "vcm", "moved", "-n", "team-a"]).ok);

    // An object of a namespaced kind has no cluster-wide item path.
    let no_item = k.run(&[
        "get",
        "--raw",
        &format!("/apis/{GROUP_VERSION}/volumeclaimmigrations/grow"),
    ]);
    assert!(!no_item.ok);
    assert!(
        no_item.stderr.contains("NotFound") || no_item.stderr.contains("not find"),
        "{}",
        no_item.stderr
    );

    // Validation: a clear Status naming the fields.
    let invalid = k.run_with_stdin(
        &["create", "-n", "team-a", "-f", "-"],
        Some(&migration("bad", None, "lots").replace("apps/v1", "apps/v2")),
    );
    assert!(!invalid.ok);
    assert!(
        invalid.stderr.contains("spec.target.apiVersion"),
        "{}",
        invalid.stderr
    );
    assert!(
        invalid.stderr.contains("spec.templates[0].storage"),
        "{}",
        invalid.stderr
    );

    // Discovery says namespaced; explain reads the OpenAPI.
    let resources = k.ok(&[
        "api-resources",
        "--api-group=storage.svm-apiserver.io",
        "--no-headers",
    ]);
    let cells: Vec<&str> = resources
        .lines()
        .find(|l| l.starts_with("volumeclaimmigrations"))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        cells,
        vec![
            "volumeclaimmigrations",
            "vcm",
            GROUP_VERSION,
            "true",
            "VolumeClaimMigration"
        ],
        "{resources}"
    );
    let explained = k.ok(&["explain", "vcm.spec.volumeClaimUpdateStrategy"]);
    assert!(explained.contains("OnPodRollingUpdate"), "{explained}");

    // Delete in one namespace leaves the other's object of the same name.
    k.ok(&["delete", "vcm", "grow", "-n", "team-a"]);
    assert!(!k.run(&["get", "vcm", "grow", "-n", "team-a"]).ok);
    assert!(k.run(&["get", "vcm", "grow", "-n", "team-b"]).ok);
}

/// `kubectl get -w` on a namespaced kind: within one namespace it sees only that namespace's
/// changes; across all namespaces (`-A`) it sees every one, with its namespace.
#[test]
fn kubectl_watches_a_namespaced_kind_in_one_namespace_and_in_all() {
    let server =
        ServerProcess::start_with(Backend::Embedded, &["--enable-volume-claim-migrations"]);
    let k = Kubectl::new(&server.kubeconfig);
    for (namespace, name) in [("team-a", "grow"), ("team-b", "logs")] {
        k.ok_stdin(
            &["create", "-n", namespace, "-f", "-"],
            &migration(name, None, "10Gi"),
        );
    }
    let mut one = watch(&k, &["-n", "team-a"]);
    let mut all = watch(&k, &["-A"]);
    assert!(one.next_line().starts_with("EVENT"));
    assert!(one.next_line().starts_with("ADDED"));
    let header = all.next_line();
    assert!(header.contains("NAMESPACE"), "{header}");
    let mut listed = vec![all.next_line(), all.next_line()];
    listed.sort();
    assert!(
        listed[0].contains("team-a") && listed[0].contains("grow"),
        "{listed:?}"
    );
    assert!(
        listed[1].contains("team-b") && listed[1].contains("logs"),
        "{listed:?}"
    );

    // A change in team-b first: the team-a watch must not see it, so its next line is
    // the team-a change that follows.
    k.ok(&["label", "vcm", "logs", "-n", "team-b", "step=1"]);
    k.ok(&["label", "vcm", "grow", "-n", "team-a", "step=2"]);
    let seen = one.next_line();
    assert!(
        seen.starts_with("MODIFIED") && seen.contains("grow"),
        "{seen}"
    );
    let first = all.next_line();
    assert!(
        first.starts_with("MODIFIED") && first.contains("team-b"),
        "{first}"
    );
    let second = all.next_line();
    assert!(
        second.starts_with("MODIFIED") && second.contains("team-a"),
        "{second}"
    );
}

/// A running `kubectl get vcm -w --output-watch-events`, read line by line.
struct Watch {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Watch {
    /// The next line; the request timeout ends the watch (and fails here) rather than hang.
    fn next_line(&mut self) -> String {
        self.lines
            .next()
            .expect("kubectl ended its watch before the expected event")
            .expect("a line")
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn watch(k: &Kubectl, scope: &[&str]) -> Watch {
    use std::io::BufRead;
    let mut args = vec![
        "get",
        "vcm",
        "-w",
        "--output-watch-events",
        "--request-timeout=120s",
    ];
    args.extend_from_slice(scope);
    let mut child = k
        .command(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl starts");
    let stdout = child.stdout.take().expect("stdout");
    Watch {
        child,
        lines: std::io::BufReader::new(stdout).lines(),
    }
}
