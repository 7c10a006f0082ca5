//! Owner mode with Kubernetes' own migrator: the real kube-controller-manager's
//! storage-version-migrator-controller runs a StorageVersionMigration served by svm-apiserver.
//! kube-apiserver has the StorageVersionMigrator gate on but does not serve the group (no
//! runtime-config for it): svm-apiserver serves it through the aggregator as `deploy/` installs
//! it, API only (`--controllers=`: it migrates nothing itself). kube-controller-manager runs with
//! its defaults, so it speaks protobuf to our API as it does to any built-in group.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::controller_manager::{STORAGE_VERSION_MIGRATOR, STORAGE_VERSION_MIGRATOR_GATE};
use crate::support::real_cluster::RealCluster;
use crate::support::wait::{POLL, eventually_async_every};
use crate::world::{failed, install_widgets, stored_json_objects, succeeded, wait_for};

const WIDGETS: usize = 500;
const WIDGETS_PREFIX: &str = "/registry/example.test/widgets/demo/";
const MIGRATION: &str = "widgets-to-v2";

/// A CRD storage move (v1 to v2, 500 widgets) migrated by kube-controller-manager through our
/// API: the StorageVersionMigration is created in v1beta1 through the aggregator, its status
/// (the list snapshot's resourceVersion, Running, Succeeded) is written by
/// kube-controller-manager through our `/status` — managedFields name it, and no manager of
/// ours — and etcd then holds every widget encoded as v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_controller_managers_migrator_runs_a_migration_served_by_us() {
    let Some(cluster) = RealCluster::start(
        "kube_controller_managers_migrator_runs_a_migration_served_by_us",
        &[STORAGE_VERSION_MIGRATOR_GATE],
        &["--controllers="],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    let discovery = kubectl.ok(&[
        "get",
        "apiservice",
        "v1beta1.storagemigration.k8s.io",
        "-o",
        "jsonpath={.spec.service.name}",
    ]);
    assert_eq!(discovery.trim(), "svm-apiserver", "the group is ours");
    install_widgets(&cluster.plane, &["v1", "v2"], WIDGETS).await;
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v1").await,
        WIDGETS
    );
    kubectl.ok(&[
        "patch",
        "crd",
        "widgets.example.test",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},
            {"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
    ]);

    let kcm = crate::world::start_controller_manager(
        &cluster.plane,
        &STORAGE_VERSION_MIGRATOR,
        &[STORAGE_VERSION_MIGRATOR_GATE],
    );
    let created = Instant::now();
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &format!(
            r#"{{"apiVersion": "storagemigration.k8s.io/v1beta1", "kind": "StorageVersionMigration",
                "metadata": {{"name": "{MIGRATION}"}},
                "spec": {{"resource": {{"group": "example.test", "resource": "widgets"}}}}}}"#
        ),
    );
    let path =
        format!("/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations/{MIGRATION}");
    let get = || -> Value {
        serde_json::from_str(&kubectl.ok(&["get", "--raw", &path])).expect("a migration")
    };
    // A hang guard: with JSON it takes seconds.
    let done = eventually_async_every(
        Duration::from_secs(180),
        POLL,
        "kube-controller-manager's Succeeded on our migration",
        async || {
            let migration = get();
            assert!(
                !failed(&migration),
                "{migration:#}\nkube-controller-manager log:\n{}",
                kcm.log()
            );
            if succeeded(&migration) {
                Ok(migration)
            } else {
                Err(format!("{migration:#}"))
            }
        },
        async || {
            format!(
                "our answers of 4xx/5xx:\n{}\nkube-controller-manager's errors:\n{}\n\
                 svm-apiserver log:\n{}",
                refused(&cluster.metrics().await).join("\n"),
                kcm.errors().join("\n"),
                cluster.svm.log()
            )
        },
    )
    .await;
    let took = created.elapsed();

    // The status is kube-controller-manager's, written through our /status.
    let status_managers: Vec<String> = done["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["subresource"] == "status")
        .map(|entry| entry["manager"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        !status_managers.is_empty()
            && status_managers
                .iter()
                .all(|m| m == "kube-controller-manager"),
        "status managers {status_managers:?}: {done:#}"
    );
    assert!(
        done["status"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty()),
        "{done:#}"
    );

    // Every widget re-encoded in the new storage version, read from etcd itself.
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v1").await,
        0
    );
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v2").await,
        WIDGETS
    );
    // Its migration runner narrows the CRD's storedVersions once the migration is terminal.
    let stored_versions = wait_for(
        Duration::from_secs(60),
        "kube-controller-manager narrowing the CRD's storedVersions to [v2]",
        || {
            let out = kubectl.ok(&[
                "get",
                "crd",
                "widgets.example.test",
                "-o",
                "jsonpath={.status.storedVersions}",
            ]);
            (out.trim() == r#"["v2"]"#).then(|| out.trim().to_string())
        },
        || {
            kubectl
                .run(&["get", "crd", "widgets.example.test", "-o", "yaml"])
                .stdout
        },
    );
    let content_type = kcm
        .flags()
        .iter()
        .find_map(|f| f.strip_prefix("--kube-api-content-type="))
        .unwrap_or("its default, protobuf")
        .to_string();
    let conditions: Vec<String> = done["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}",
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or("")
            )
        })
        .collect();
    eprintln!(
        "kube-controller-manager's storage-version-migrator-controller on our API (content \
         type {content_type}): {WIDGETS} widgets re-encoded v1 -> v2 in etcd, Succeeded {:.1} s after \
         the migration was created; status written by {status_managers:?} ({}); the CRD's \
         storedVersions narrowed to {}; our 4xx/5xx answers: {:?}",
        took.as_secs_f64(),
        conditions.join(", "),
        stored_versions,
        refused(&cluster.metrics().await)
    );
}

/// Our `apiserver_request_total` samples of a 4xx or 5xx answer: which requests we refused.
fn refused(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("code=\"4") || l.contains("code=\"5"))
        .map(str::to_string)
        .collect()
}
