//! `svm-apiserver import-ksvm` on a real kube-apiserver with kube-storage-version-migrator's
//! CRDs installed (tests/fixtures/ksvm/crds.yaml, written from its published API types): three
//! StorageStates and two finished migrations carried over through the aggregator to
//! svm-apiserver, a dry run that writes nothing, and a second run that changes nothing. The
//! migrator runs all along and must leave the imported history alone.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::real_cluster::RealCluster;
use crate::world::{items, name};

const OURS_STATES: &str = "storagestates.storagemigration.k8s.io";
const OURS_MIGRATIONS: &str = "storageversionmigrations.v1alpha1.storagemigration.k8s.io";

/// Creates a KSVM object, then its status through `/status` as KSVM's controllers write it.
fn create_ksvm(cluster: &RealCluster, object: Value) {
    let kubectl = cluster.kubectl();
    let mut spec_only = object.clone();
    spec_only.as_object_mut().expect("object").remove("status");
    kubectl.ok_stdin(&["create", "-f", "-"], &spec_only.to_string());
    let kind = match object["kind"].as_str() {
        Some("StorageState") => "storagestates.migration.k8s.io",
        _ => "storageversionmigrations.migration.k8s.io",
    };
    kubectl.ok(&[
        "patch",
        kind,
        &name(&object),
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": object["status"]}).to_string(),
    ]);
}

fn ksvm_state(name: &str, group: &str, resource: &str, persisted: &[&str], current: &str) -> Value {
    json!({
        "apiVersion": "migration.k8s.io/v1alpha1",
        "kind": "StorageState",
        "metadata": {"name": name},
        "spec": {"resource": {"group": group, "resource": resource}},
        "status": {
            "persistedStorageVersionHashes": persisted,
            "currentStorageVersionHash": current,
            "lastHeartbeatTime": "2026-11-20T10:00:00Z",
        },
    })
}

fn ksvm_migration(name: &str, group: &str, resource: &str, condition: Value) -> Value {
    json!({
        "apiVersion": "migration.k8s.io/v1alpha1",
        "kind": "StorageVersionMigration",
        "metadata": {"name": name},
        "spec": {"resource": {"group": group, "version": "v1", "resource": resource}},
        "status": {"conditions": [condition]},
    })
}

fn import(cluster: &RealCluster, dry_run: bool) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_svm-apiserver"));
    command
        .arg("import-ksvm")
        .arg(format!(
            "--kubeconfig={}",
            cluster.plane.kubeconfig.display()
        ))
        .env_remove("KUBECONFIG");
    if dry_run {
        command.arg("--dry-run");
    }
    let output = command.output().expect("run import-ksvm");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "import-ksvm failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn by_name(list: Vec<Value>) -> std::collections::BTreeMap<String, Value> {
    list.into_iter().map(|o| (name(&o), o)).collect()
}

fn resource_versions(cluster: &RealCluster) -> Vec<(String, String)> {
    items(cluster, OURS_STATES)
        .into_iter()
        .chain(items(cluster, OURS_MIGRATIONS))
        .map(|o| {
            (
                format!("{}/{}", o["kind"].as_str().unwrap_or(""), name(&o)),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn a_ksvm_state_is_imported_once_with_every_hash_and_its_history() {
    let Some(cluster) = RealCluster::start(
        "a_ksvm_state_is_imported_once_with_every_hash_and_its_history",
        &[],
        &["--controllers=migrator"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ksvm/crds.yaml");
    kubectl.ok(&["apply", "-f", &crds.display().to_string()]);
    crate::world::wait_established(
        &kubectl,
        &[
            "crd/storagestates.migration.k8s.io",
            "crd/storageversionmigrations.migration.k8s.io",
        ],
    );
    // KSVM's state: Secrets mid-rotation (unsafe), Deployments safe, a CRD never vouched for.
    create_ksvm(
        &cluster,
        ksvm_state(
            "secrets",
            "",
            "secrets",
            &["cmVkMQ==", "Ymx1ZTI="],
            "Ymx1ZTI=",
        ),
    );
    create_ksvm(
        &cluster,
        ksvm_state(
            "deployments.apps",
            "apps",
            "deployments",
            &["Ze4w4VDB3Ck="],
            "Ze4w4VDB3Ck=",
        ),
    );
    create_ksvm(
        &cluster,
        ksvm_state(
            "widgets.example.com",
            "example.com",
            "widgets",
            &["Unknown"],
            "d2lkZ2V0cw==",
        ),
    );
    create_ksvm(
        &cluster,
        ksvm_migration(
            "deployments-upgrade",
            "apps",
            "deployments",
            json!({
                "type": "Succeeded", "status": "True", "lastUpdateTime": "2026-11-01T10:00:00Z",
            }),
        ),
    );
    create_ksvm(
        &cluster,
        ksvm_migration(
            "secrets-rotate",
            "",
            "secrets",
            json!({
                "type": "Failed", "status": "True", "lastUpdateTime": "2026-11-02T11:00:00Z",
                "reason": "MigrationFailed", "message": "admission webhook \"deny.example.com\" denied the request",
            }),
        ),
    );

    // The dry run prints the plan and writes nothing.
    let plan = import(&cluster, true);
    eprintln!("import-ksvm --dry-run:\n{plan}");
    for line in [
        "3 StorageStates, 2 StorageVersionMigrations from migration.k8s.io/v1alpha1 (dry run: nothing is written)",
        "storagestate/deployments.apps: create (persisted Ze4w4VDB3Ck=, current Ze4w4VDB3Ck=)",
        "storagestate/secrets: create (persisted cmVkMQ==,Ymx1ZTI=, current Ymx1ZTI=)",
        "storagestate/widgets.example.com: create (persisted Unknown,d2lkZ2V0cw==, current d2lkZ2V0cw==)",
        "storageversionmigration/deployments-upgrade: create (deployments.apps, history, Succeeded)",
        "storageversionmigration/secrets-rotate: create (secrets, history, Failed)",
    ] {
        assert!(
            plan.lines().any(|l| l == line),
            "missing {line:?} in:\n{plan}"
        );
    }
    assert!(
        items(&cluster, OURS_STATES).is_empty(),
        "the dry run wrote StorageStates"
    );
    assert!(
        items(&cluster, OURS_MIGRATIONS).is_empty(),
        "the dry run wrote migrations"
    );

    let applied = import(&cluster, false);
    eprintln!("import-ksvm:\n{applied}");
    assert!(applied.contains("imported: 5 objects written"), "{applied}");

    // Through the aggregator, as a user sees them.
    let states = by_name(items(&cluster, OURS_STATES));
    let hashes = |n: &str| states[n]["status"]["persistedStorageVersionHashes"].clone();
    assert_eq!(states.len(), 3, "{states:#?}");
    assert_eq!(hashes("secrets"), json!(["cmVkMQ==", "Ymx1ZTI="]));
    assert_eq!(hashes("deployments.apps"), json!(["Ze4w4VDB3Ck="]));
    assert_eq!(
        hashes("widgets.example.com"),
        json!(["Unknown", "d2lkZ2V0cw=="])
    );
    assert_eq!(
        states["secrets"]["status"]["currentStorageVersionHash"],
        "Ymx1ZTI="
    );
    assert_eq!(
        states["secrets"]["spec"]["resource"],
        json!({"group": "", "resource": "secrets"})
    );
    assert_eq!(
        states["secrets"]["status"]["lastHeartbeatTime"],
        "2026-11-20T10:00:00Z"
    );

    // The migrator runs here: give it time to (wrongly) pick the history up, then check it
    // did not.
    std::thread::sleep(Duration::from_secs(3));
    let migrations = by_name(items(&cluster, OURS_MIGRATIONS));
    assert_eq!(migrations.len(), 2, "{migrations:#?}");
    let done = &migrations["deployments-upgrade"];
    assert_eq!(
        done["status"]["conditions"],
        json!([{"type": "Succeeded", "status": "True", "lastUpdateTime": "2026-11-01T10:00:00Z"}]),
        "{done:#}"
    );
    assert_eq!(
        done["spec"]["resource"],
        json!({"group": "apps", "version": "v1", "resource": "deployments"})
    );
    let failed = &migrations["secrets-rotate"];
    assert_eq!(failed["status"]["conditions"][0]["type"], "Failed");
    assert_eq!(
        failed["status"]["conditions"][0]["message"],
        "admission webhook \"deny.example.com\" denied the request"
    );
    assert_eq!(
        failed["status"]["conditions"].as_array().map(Vec::len),
        Some(1),
        "{failed:#}"
    );
    assert!(
        failed["status"]["progress"].is_null(),
        "the migrator ran imported history: {failed:#}"
    );
    assert_eq!(
        done["metadata"]["annotations"]["storage.svm-apiserver.io/imported-history"],
        "true"
    );
    let table = kubectl.ok(&["get", "storageversionmigrations.storagemigration.k8s.io"]);
    eprintln!("kubectl get svm after the import:\n{table}");

    // Again: nothing changes.
    let before = resource_versions(&cluster);
    let again = import(&cluster, false);
    eprintln!("import-ksvm, second run:\n{again}");
    assert!(
        again.contains("nothing to import: everything is here already"),
        "{again}"
    );
    assert_eq!(
        again
            .lines()
            .filter(|l| l.ends_with(")") && l.contains(": unchanged ("))
            .count(),
        5,
        "{again}"
    );
    assert_eq!(
        resource_versions(&cluster),
        before,
        "the second run wrote something"
    );
}
