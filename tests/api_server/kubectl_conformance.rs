//! kubectl 1.37 against the server directly, with the kubeconfig the server writes: every step
//! asserts on what kubectl prints.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::support::etcd::EtcdServer;
use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};

const MIGRATION: &str = r#"apiVersion: storagemigration.k8s.io/v1
kind: StorageVersionMigration
metadata:
  name: secrets-migration
  labels:
    team: storage
spec:
  resource:
    group: ""
    resource: secrets
"#;

const APPLIED: &str = r#"apiVersion: storagemigration.k8s.io/v1
kind: StorageVersionMigration
metadata:
  name: deployments-migration
  annotations:
    owner: platform
spec:
  resource:
    group: apps
    resource: deployments
"#;

#[test]
fn kubectl_conformance_on_the_embedded_store() {
    let server = ServerProcess::start(Backend::Embedded);
    conformance(&server);
}

#[test]
fn kubectl_conformance_on_etcd() {
    let etcd = EtcdServer::start();
    let server = ServerProcess::start(Backend::Etcd(&etcd.endpoint()));
    conformance(&server);
}

fn conformance(server: &ServerProcess) {
    let k = Kubectl::new(&server.kubeconfig);
    let dir = server.dir();

    // Discovery.
    let resources = k.ok(&["api-resources", "--api-group=storagemigration.k8s.io"]);
    let svm_row = resources
        .lines()
        .find(|l| l.starts_with("storageversionmigrations"))
        .unwrap_or_else(|| panic!("no storageversionmigrations row in:\n{resources}"));
    let cols: Vec<&str> = svm_row.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "storageversionmigrations",
            "svm",
            "storagemigration.k8s.io/v1",
            "false",
            "StorageVersionMigration"
        ],
        "{resources}"
    );
    assert!(
        resources
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "storagestates",
                    "ss",
                    "storagemigration.k8s.io/v1",
                    "false",
                    "StorageState"
                ]),
        "{resources}"
    );
    let versions = k.ok(&["api-versions"]);
    for v in ["v1", "v1beta1", "v1alpha1"] {
        assert!(
            versions
                .lines()
                .any(|l| l == format!("storagemigration.k8s.io/{v}")),
            "{versions}"
        );
    }

    // create -f, then get as a table, YAML and JSON.
    let file = dir.join("migration.yaml");
    std::fs::write(&file, MIGRATION).unwrap();
    let out = k.ok(&["create", "-f", file.to_str().unwrap()]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/secrets-migration created"
    );
    let table = k.ok(&["get", "storageversionmigrations"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[0], "NAME", "{table}");
    for col in ["RESOURCE", "STATUS", "AGE"] {
        assert!(header.contains(&col), "missing column {col} in {table}");
    }
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "secrets-migration", "{table}");
    assert!(row.contains(&"secrets"), "{table}");
    // The short name works too.
    assert!(k.ok(&["get", "svm"]).contains("secrets-migration"));

    let yaml = k.ok(&["get", "svm", "secrets-migration", "-o", "yaml"]);
    assert!(
        yaml.contains("apiVersion: storagemigration.k8s.io/v1\n"),
        "{yaml}"
    );
    assert!(yaml.contains("kind: StorageVersionMigration\n"), "{yaml}");
    assert!(yaml.contains("resource: secrets"), "{yaml}");
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "svm", "secrets-migration", "-o", "json"])).unwrap();
    assert_eq!(json["spec"]["resource"]["resource"], "secrets");
    assert_eq!(json["metadata"]["labels"]["team"], "storage");
    assert!(
        json["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36)
    );
    let rv: u64 = json["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv > 0);
    // Older versions serve the same object in their own shape.
    let alpha: serde_json::Value = serde_json::from_str(&k.ok(&[
        "get",
        "storageversionmigrations.v1alpha1.storagemigration.k8s.io",
        "secrets-migration",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(alpha["apiVersion"], "storagemigration.k8s.io/v1alpha1");
    assert_eq!(alpha["spec"]["resource"]["resource"], "secrets");

    // describe
    let described = k.ok(&["describe", "svm", "secrets-migration"]);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("Name:") && l.ends_with("secrets-migration")),
        "{described}"
    );
    assert!(described.contains("team=storage"), "{described}");

    // Client-side apply twice: created, then unchanged.
    let applied = dir.join("applied.yaml");
    std::fs::write(&applied, APPLIED).unwrap();
    let out = k.ok(&["apply", "-f", applied.to_str().unwrap()]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/deployments-migration created"
    );
    let out = k.ok(&["apply", "-f", applied.to_str().unwrap()]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/deployments-migration unchanged"
    );
    // A changed annotation is configured through a strategic merge patch.
    std::fs::write(
        &applied,
        APPLIED.replace("owner: platform", "owner: storage"),
    )
    .unwrap();
    let out = k.ok(&["apply", "-f", applied.to_str().unwrap()]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/deployments-migration configured"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "svm",
            "deployments-migration",
            "-o",
            "jsonpath={.metadata.annotations.owner}"
        ]),
        "storage"
    );

    // patch --type=merge and --type=json
    let out = k.ok(&[
        "patch",
        "svm",
        "secrets-migration",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"patched":"merge"}}}"#,
    ]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/secrets-migration patched"
    );
    let out = k.ok(&[
        "patch",
        "svm",
        "secrets-migration",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/annotations","value":{"patched":"json"}}]"#,
    ]);
    assert!(out.contains("patched"), "{out}");
    let labels = k.ok(&[
        "get",
        "svm",
        "secrets-migration",
        "-o",
        "jsonpath={.metadata.labels.patched} {.metadata.annotations.patched}",
    ]);
    assert_eq!(labels, "merge json");
    // spec is immutable: the server refuses, kubectl shows the 422.
    let refused = k.run(&[
        "patch",
        "svm",
        "secrets-migration",
        "--type=merge",
        "-p",
        r#"{"spec":{"resource":{"resource":"configmaps"}}}"#,
    ]);
    assert!(!refused.ok);
    assert!(refused.stderr.contains("is invalid"), "{}", refused.stderr);
    assert!(refused.stderr.contains("immutable"), "{}", refused.stderr);

    // edit through an editor script that adds a label.
    let editor = dir.join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/^  labels:$/  labels:\\n    edited: \"yes\"/' \"$1\"\n",
    )
    .unwrap();
    make_executable(&editor);
    let mut cmd = k.command(&["edit", "svm", "secrets-migration"]);
    cmd.env("KUBE_EDITOR", &editor).env("EDITOR", &editor);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "edit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "storageversionmigration.storagemigration.k8s.io/secrets-migration edited"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "svm",
            "secrets-migration",
            "-o",
            "jsonpath={.metadata.labels.edited}"
        ]),
        "yes"
    );

    // label and annotate
    let out = k.ok(&["label", "svm", "secrets-migration", "stage=one"]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/secrets-migration labeled"
    );
    let out = k.ok(&["annotate", "svm", "secrets-migration", "note=hello"]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io/secrets-migration annotated"
    );
    assert!(
        k.ok(&["get", "svm", "-l", "stage=one", "-o", "name"])
            .contains("secrets-migration")
    );
    assert!(
        !k.ok(&["get", "svm", "-l", "stage=two", "-o", "name"])
            .contains("secrets-migration")
    );

    // get -w sees a later change: a header, the current state, then the update.
    let mut watch = k
        .command(&[
            "get",
            "svm",
            "secrets-migration",
            "-w",
            "--output-watch-events",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let header = lines.next().unwrap().unwrap();
    assert!(
        header.starts_with("EVENT") && header.contains("NAME"),
        "{header}"
    );
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.starts_with("ADDED") && first.contains("secrets-migration"),
        "{first}"
    );
    k.ok(&[
        "label",
        "svm",
        "secrets-migration",
        "stage=two",
        "--overwrite",
    ]);
    let second = lines.next().unwrap().unwrap();
    assert!(
        second.starts_with("MODIFIED") && second.contains("secrets-migration"),
        "{second}"
    );
    let _ = watch.kill();
    let _ = watch.wait();

    // wait --for=condition=Succeeded, the condition set through /status.
    let waiter = k
        .command(&[
            "wait",
            "svm/secrets-migration",
            "--for=condition=Succeeded",
            "--timeout=60s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let now = svm_registry::now_text();
    let status = format!(
        r#"{{"status":{{"conditions":[{{"type":"Succeeded","status":"True","lastTransitionTime":"{now}","reason":"Completed","message":"done"}}]}}}}"#
    );
    k.ok(&[
        "patch",
        "svm",
        "secrets-migration",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ]);
    let out = waiter.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "storageversionmigration.storagemigration.k8s.io/secrets-migration condition met"
    );
    // The table shows the condition.
    let table = k.ok(&["get", "svm", "secrets-migration"]);
    assert!(
        table.lines().nth(1).unwrap().contains("Succeeded"),
        "{table}"
    );

    // explain (OpenAPI v3)
    let explained = k.ok(&["explain", "storageversionmigrations.spec"]);
    assert!(
        explained.contains("KIND:       StorageVersionMigration"),
        "{explained}"
    );
    assert!(explained.contains("FIELD: spec"), "{explained}");
    assert!(explained.contains("resource"), "{explained}");
    let explained = k.ok(&["explain", "storagestates.status"]);
    assert!(
        explained.contains("currentStorageVersionHash"),
        "{explained}"
    );

    // get --raw of every discovery and OpenAPI document.
    for path in [
        "/apis",
        "/apis/storagemigration.k8s.io",
        "/apis/storagemigration.k8s.io/v1",
        "/apis/storagemigration.k8s.io/v1beta1",
        "/apis/storagemigration.k8s.io/v1alpha1",
        "/openapi/v2",
        "/openapi/v3",
        "/openapi/v3/apis/storagemigration.k8s.io/v1",
    ] {
        let body: serde_json::Value = serde_json::from_str(&k.ok(&["get", "--raw", path]))
            .unwrap_or_else(|e| panic!("{path}: not JSON: {e}"));
        assert!(body.is_object(), "{path}");
    }
    let group: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/apis/storagemigration.k8s.io"])).unwrap();
    assert_eq!(group["preferredVersion"]["version"], "v1");

    // StorageState: the name must match spec.resource.
    let state = r#"{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageState","metadata":{"name":"deployments.apps"},"spec":{"resource":{"group":"apps","resource":"deployments"}}}"#;
    let out = k.ok_stdin(&["create", "-f", "-"], state);
    assert!(
        out.contains("storagestate.storagemigration.k8s.io/deployments.apps created"),
        "{out}"
    );
    let wrong = state.replace("deployments.apps", "wrong-name");
    let refused = k.run_with_stdin(&["create", "-f", "-"], Some(&wrong));
    assert!(
        !refused.ok && refused.stderr.contains("is invalid"),
        "{}",
        refused.stderr
    );

    // delete
    let out = k.ok(&["delete", "svm", "secrets-migration"]);
    assert_eq!(
        out.trim(),
        "storageversionmigration.storagemigration.k8s.io \"secrets-migration\" deleted"
    );
    let missing = k.run(&["get", "svm", "secrets-migration"]);
    assert!(!missing.ok);
    assert!(
        missing.stderr.contains("NotFound") || missing.stderr.contains("not found"),
        "{}",
        missing.stderr
    );
}

fn make_executable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = std::fs::metadata(path).unwrap().permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(path, perms).unwrap();
}
