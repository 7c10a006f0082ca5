//! DataPlaneRollout (alpha) as the group's other kinds are served, with the real kubectl: only
//! with `--enable-data-plane-rollouts`; create from YAML with the defaults filled in, the
//! short name and the kind's Table, `kubectl explain`, a server-side apply that pauses it (and
//! the field manager it leaves), `spec.daemonSet` immutable, a field selector on it, and bad
//! input refused with the field named and nothing stored.

use serde_json::Value;

use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};

const ROLLOUT: &str = r#"apiVersion: storage.svm-apiserver.io/v1alpha1
kind: DataPlaneRollout
metadata:
  name: engines
spec:
  daemonSet: engine
  nodes: [node-1, node-2]
  replicaGuards:
  - name: replicas
    resource: {group: longhorn.io, version: v1beta2, resource: replicas}
    nodeField: spec.nodeID
    volumeField: spec.volumeName
    healthy: {field: status.currentState, value: running}
"#;

#[test]
fn kubectl_serves_data_plane_rollouts_only_when_enabled() {
    let off = ServerProcess::start_with(Backend::Embedded, &[]);
    let out = Kubectl::new(&off.kubeconfig).run(&["get", "dataplanerollouts", "-A"]);
    assert!(!out.ok, "served without the flag: {}", out.stdout);
    assert!(
        out.stderr
            .contains("the server doesn't have a resource type"),
        "{}",
        out.stderr
    );
    drop(off);

    let server = ServerProcess::start_with(Backend::Embedded, &["--enable-data-plane-rollouts"]);
    let k = Kubectl::new(&server.kubeconfig);
    let created = k.ok_stdin(&["create", "-n", "storage", "-f", "-"], ROLLOUT);
    assert_eq!(
        created.trim(),
        "dataplanerollout.storage.svm-apiserver.io/engines created"
    );
    let stored: Value =
        serde_json::from_str(&k.ok(&["get", "dpr", "engines", "-n", "storage", "-o", "json"]))
            .expect("json");
    assert_eq!(stored["spec"]["maxUnavailable"], 1);
    assert_eq!(stored["spec"]["waitLimit"], "10m");
    assert_eq!(
        stored["spec"]["nodes"],
        serde_json::json!(["node-1", "node-2"])
    );

    let table = k.ok(&["get", "dpr", "-n", "storage"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .expect("header")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "DAEMONSET", "UPGRADED", "REVISION", "STATUS", "AGE"]
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("row")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..3], ["engines", "engine", "0/0"], "{table}");

    let explained = k.ok(&["explain", "dpr.spec.replicaGuards.minHealthyElsewhere"]);
    assert!(
        explained.contains("Healthy replicas each affected volume must keep on other nodes"),
        "{explained}"
    );

    // Server-side apply pauses it; the applier owns spec.paused.
    let paused = format!("{ROLLOUT}  paused: true\n");
    k.ok_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=ops",
            "-n",
            "storage",
            "-f",
            "-",
        ],
        &paused,
    );
    let applied: Value = serde_json::from_str(&k.ok(&[
        "get",
        "dpr",
        "engines",
        "-n",
        "storage",
        "-o",
        "json",
        "--show-managed-fields",
    ]))
    .expect("json");
    assert_eq!(applied["spec"]["paused"], true);
    let managers: Vec<&str> = applied["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"ops"), "{managers:?}");

    let by_daemon_set = k.ok(&[
        "get",
        "dpr",
        "-A",
        "--field-selector=spec.daemonSet=engine",
        "-o",
        "name",
    ]);
    assert_eq!(
        by_daemon_set.trim(),
        "dataplanerollout.storage.svm-apiserver.io/engines"
    );
    refusals(&k);
}

/// Each bad rollout is refused naming the field, and nothing is stored; `spec.daemonSet`
/// cannot change.
fn refusals(k: &Kubectl) {
    let renamed = k.run(&[
        "patch",
        "dpr",
        "engines",
        "-n",
        "storage",
        "--type=merge",
        "-p",
        r#"{"spec":{"daemonSet":"other"}}"#,
    ]);
    assert!(
        !renamed.ok && renamed.stderr.contains("spec.daemonSet"),
        "{}",
        renamed.stderr
    );
    let cases = [
        ("waitLimit: soon", "spec.waitLimit"),
        ("maxUnavailable: 0", "spec.maxUnavailable"),
        ("nodes: [node-1, node-1]", "spec.nodes"),
    ];
    for (line, field) in cases {
        let bad = ROLLOUT.replace("name: engines", "name: bad").replace(
            "  daemonSet: engine\n",
            &format!("  daemonSet: engine\n  {line}\n"),
        );
        let bad = bad.replace(
            "  nodes: [node-1, node-2]\n",
            if line.starts_with("nodes") {
                ""
            } else {
                "  nodes: [node-1, node-2]\n"
            },
        );
        let out = k.run_with_stdin(&["create", "-n", "storage", "-f", "-"], Some(&bad));
        assert!(!out.ok, "{line}: accepted");
        assert!(out.stderr.contains(field), "{line}: {}", out.stderr);
    }
    let unguarded = ROLLOUT
        .replace("    nodeField: spec.nodeID\n", "")
        .replace("name: engines", "name: bad");
    let out = k.run_with_stdin(&["create", "-n", "storage", "-f", "-"], Some(&unguarded));
    assert!(
        !out.ok && out.stderr.contains("nodeField"),
        "{}",
        out.stderr
    );
    let names = k.ok(&["get", "dpr", "-n", "storage", "-o", "name"]);
    assert_eq!(
        names.trim(),
        "dataplanerollout.storage.svm-apiserver.io/engines"
    );
}
