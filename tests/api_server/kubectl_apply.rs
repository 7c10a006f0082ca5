//! kubectl 1.37's server-side apply against the server (and its client-side apply, which
//! must keep working beside it): create, re-apply, conflict, `--force-conflicts`,
//! `kubectl diff`, `get --show-managed-fields`, and the move from client-side to
//! server-side apply.

use serde_json::Value;

use crate::support::etcd::EtcdServer;
use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};

fn migration(name: &str, team: &str, resource: &str) -> String {
    format!(
        "apiVersion: storagemigration.k8s.io/v1\nkind: StorageVersionMigration\nmetadata:\n  name: {name}\n  labels:\n    team: {team}\nspec:\n  resource:\n    group: apps\n    resource: {resource}\n"
    )
}

fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn get_json(k: &Kubectl, name: &str, extra: &[&str]) -> Value {
    let mut args = vec!["get", "svm", name, "-o", "json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&k.ok(&args)).expect("kubectl get -o json")
}

#[test]
fn kubectl_server_side_apply_on_etcd() {
    let etcd = EtcdServer::start();
    let server = ServerProcess::start(Backend::Etcd(&etcd.endpoint()));
    let k = Kubectl::new(&server.kubeconfig);
    let file = server.dir().join("ssa.yaml");
    let path = file.to_str().expect("path");

    // Create, then re-apply: same resourceVersion, one Apply entry for "kubectl".
    std::fs::write(&file, migration("ssa", "a", "deployments")).expect("write");
    let out = k.ok(&["apply", "--server-side", "-f", path]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/ssa serverside-applied"
    );
    let first = get_json(&k, "ssa", &["--show-managed-fields"]);
    assert_eq!(managers(&first), vec![("kubectl".into(), "Apply".into())]);
    k.ok(&["apply", "--server-side", "-f", path]);
    let second = get_json(&k, "ssa", &["--show-managed-fields"]);
    assert_eq!(
        second["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    // managedFields are hidden unless asked for, as kubectl does with kube-apiserver.
    let plain = k.ok(&["get", "svm", "ssa", "-o", "yaml"]);
    assert!(!plain.contains("managedFields"), "{plain}");
    let shown = k.ok(&["get", "svm", "ssa", "-o", "yaml", "--show-managed-fields"]);
    assert!(shown.contains("managedFields:"), "{shown}");
    assert!(shown.contains("manager: kubectl"), "{shown}");
    assert!(shown.contains("f:team: {}"), "{shown}");

    // kubectl diff: a dry-run apply; exit 1 with a diff when something would change.
    std::fs::write(&file, migration("ssa", "b", "deployments")).expect("write");
    let diff = k.run(&[
        "diff",
        "--server-side",
        "--field-manager=kubectl",
        "-f",
        path,
    ]);
    assert!(!diff.ok, "a difference exits 1");
    assert!(diff.stdout.contains("-    team: a"), "{}", diff.stdout);
    assert!(diff.stdout.contains("+    team: b"), "{}", diff.stdout);
    let client_diff = k.run(&["diff", "-f", path]);
    assert!(
        client_diff.stdout.contains("+    team: b"),
        "{}",
        client_diff.stdout
    );
    let unchanged = get_json(&k, "ssa", &[]);
    assert_eq!(
        unchanged["metadata"]["labels"]["team"], "a",
        "diff wrote nothing"
    );

    // Another manager changing kubectl's field: a conflict, then forced.
    let out = k.run(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        path,
    ]);
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl\": .metadata.labels.team"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--force-conflicts"), "{}", out.stderr);
    let out = k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        path,
    ]);
    assert!(out.contains("serverside-applied"), "{out}");
    let forced = get_json(&k, "ssa", &["--show-managed-fields"]);
    assert_eq!(forced["metadata"]["labels"]["team"], "b");
    let entries = forced["metadata"]["managedFields"]
        .as_array()
        .expect("entries");
    let kubectl_fields = &entries
        .iter()
        .find(|e| e["manager"] == "kubectl")
        .expect("kubectl keeps the spec")["fieldsV1"];
    assert!(kubectl_fields["f:metadata"].is_null(), "{kubectl_fields}");
    // An immutable field through apply: kubectl owns it (a conflict); forced, a 422.
    std::fs::write(&file, migration("ssa", "b", "statefulsets")).expect("write");
    let out = k.run(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        path,
    ]);
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("conflict with \"kubectl\": .spec.resource.resource"),
        "{}",
        out.stderr
    );
    let out = k.run(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        path,
    ]);
    assert!(!out.ok);
    assert!(out.stderr.contains("field is immutable"), "{}", out.stderr);
}

#[test]
fn kubectl_client_side_apply_then_server_side() {
    let server = ServerProcess::start(Backend::Embedded);
    let k = Kubectl::new(&server.kubeconfig);
    let file = server.dir().join("csa.yaml");
    let path = file.to_str().expect("path");
    std::fs::write(&file, migration("csa", "a", "deployments")).expect("write");
    let out = k.ok(&["apply", "-f", path]);
    assert!(out.contains("created"), "{out}");
    std::fs::write(
        &file,
        migration("csa", "a", "deployments").replace("team: a", "team: a\n    tier: x"),
    )
    .expect("write");
    let out = k.ok(&["apply", "-f", path]);
    assert!(out.contains("configured"), "{out}");
    let object = get_json(&k, "csa", &["--show-managed-fields"]);
    assert_eq!(object["metadata"]["labels"]["tier"], "x");
    assert!(
        object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    assert_eq!(
        managers(&object),
        vec![("kubectl-client-side-apply".into(), "Update".into())]
    );
    // Moving to server-side apply: kubectl hands the client-side entry over to "kubectl",
    // and the last-applied annotation to "kubectl-last-applied" (as with kube-apiserver).
    k.ok(&["apply", "--server-side", "-f", path]);
    let moved = get_json(&k, "csa", &["--show-managed-fields"]);
    let mut moved_managers = managers(&moved);
    moved_managers.sort();
    assert_eq!(
        moved_managers,
        vec![
            ("kubectl".into(), "Apply".into()),
            ("kubectl-last-applied".into(), "Apply".into())
        ]
    );
    // Dropping a label server-side removes it; client-side apply still works afterwards.
    std::fs::write(&file, migration("csa", "a", "deployments")).expect("write");
    k.ok(&["apply", "--server-side", "-f", path]);
    let dropped = get_json(&k, "csa", &[]);
    assert!(dropped["metadata"]["labels"]["tier"].is_null(), "{dropped}");
    std::fs::write(&file, migration("csa", "c", "deployments")).expect("write");
    let out = k.ok(&["apply", "-f", path]);
    assert!(out.contains("configured"), "{out}");
    assert_eq!(get_json(&k, "csa", &[])["metadata"]["labels"]["team"], "c");
}
