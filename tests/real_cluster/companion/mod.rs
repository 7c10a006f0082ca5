//! Clusters that serve storagemigration.k8s.io themselves (Kubernetes 1.37+; here 1.36 with the
//! group's v1beta1 and the StorageVersionMigrator gate switched on): companion mode, owner
//! mode's refusal, and the upgrade from owner to companion under a running server. Where a
//! migration must run, the real kube-controller-manager runs it ([`real_kcm`]: its
//! storage-version-migrator-controller and garbage collector, with its defaults — protobuf to
//! every API, ours included), and what it did is read from etcd and from managedFields; nothing
//! of kube-controller-manager is played here.

mod handover;
mod modes;
mod yielding;

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::control_plane::{ControlPlane, assets};
use crate::support::controller_manager::{
    ControllerManager, STORAGE_VERSION_MIGRATOR, STORAGE_VERSION_MIGRATOR_GATE,
};
use crate::support::real_cluster::{
    NAMESPACE, PROJECT_APISERVICE, RealCluster, Registration, SERVICE_ACCOUNT, install_rbac,
};
use crate::support::server::metric_sum;
use crate::support::server::{Backend, ServerProcess};
use crate::support::wait::{POLL, eventually_async, eventually_async_every};
use crate::world::{is_safe, items, name, storage_state, succeeded, wait_for, wait_for_migrations};

/// What switches the built-in group on in kube-apiserver 1.36.
const BUILTIN_ON: [&str; 2] = [
    "--runtime-config=storagemigration.k8s.io/v1beta1=true",
    "--feature-gates=StorageVersionMigrator=true",
];
const BUILTIN: &str = "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations";
const WIDGETS: &str = "widgets.example.test";
const DOCS: &str = "README.md#clusters-that-serve-storagemigrationk8sio-themselves";

/// A GET as the cluster admin, its JSON body.
async fn raw_get(client: &kube::Client, path: &str) -> Result<Value, String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = client
        .request_text(request)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
}

/// The real kube-controller-manager's migrator on this cluster: its
/// storage-version-migrator-controller and the garbage collector it reads objects from, with
/// the StorageVersionMigrator gate (as kube-apiserver's) and its defaults otherwise.
fn real_kcm(cluster: &RealCluster) -> ControllerManager {
    ControllerManager::start(
        &cluster.plane,
        &STORAGE_VERSION_MIGRATOR,
        &[STORAGE_VERSION_MIGRATOR_GATE],
    )
}

const WIDGETS_PREFIX: &str = "/registry/example.test/widgets/demo/";

/// etcd holds exactly `count` widgets, every one encoded as `example.test/<version>` (read
/// from etcd itself, not from a condition).
async fn assert_widgets_stored_as(cluster: &RealCluster, version: &str, count: usize) {
    let stored = cluster.plane.etcd_get_prefix(WIDGETS_PREFIX).await;
    let versions: Vec<String> = stored
        .iter()
        .map(|(_, value)| {
            serde_json::from_slice::<Value>(value)
                .map(|object| object["apiVersion"].as_str().unwrap_or("?").to_string())
                .unwrap_or_else(|_| "not JSON".to_string())
        })
        .collect();
    let wanted = format!("example.test/{version}");
    let other: Vec<&String> = versions.iter().filter(|v| **v != wanted).collect();
    assert!(
        versions.len() == count && other.is_empty(),
        "etcd holds {} widgets, {} of them not {wanted}: {:?}",
        versions.len(),
        other.len(),
        &other[..other.len().min(5)]
    );
}

/// The newest built-in migration of the widgets.
async fn newest_widgets_migration(client: &kube::Client) -> Value {
    builtin_migrations(client)
        .await
        .into_iter()
        .filter(|m| name(m).starts_with(&format!("{WIDGETS}-")))
        .max_by_key(|m| {
            m["metadata"]["creationTimestamp"]
                .as_str()
                .map(str::to_string)
        })
        .expect("a built-in migration of the widgets")
}

/// The managedFields entry of `manager` on `/status` owns the `Succeeded` condition.
fn owns_succeeded(migration: &Value, manager: &str) -> bool {
    migration["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == manager && e["subresource"] == "status")
        .any(|e| !e["fieldsV1"]["f:status"]["f:conditions"][r#"k:{"type":"Succeeded"}"#].is_null())
}

/// A migration kube-controller-manager ran to its end: Succeeded, that condition written by
/// kube-controller-manager, and no status write of ours on it.
fn assert_migrated_by_kcm(migration: &Value) {
    assert!(succeeded(migration), "{migration:#}");
    assert!(
        owns_succeeded(migration, "kube-controller-manager"),
        "{migration:#}"
    );
    let who = managers(migration);
    assert!(
        !who.iter()
            .any(|(m, sub)| m.starts_with("svm-apiserver") && sub == "status"),
        "{who:?}"
    );
}

async fn metric(cluster: &RealCluster, name: &str, labels: &[&str]) -> f64 {
    metric_sum(&cluster.metrics().await, name, labels)
}

async fn wait_for_mode(cluster: &RealCluster, mode: &str) {
    let label = format!("mode=\"{mode}\"");
    eventually_async_every(
        Duration::from_secs(120),
        POLL,
        &format!("svm_api_mode{{{label}}} at 1"),
        async || {
            let metrics = cluster.metrics().await;
            if metric_sum(&metrics, "svm_api_mode", &[&label]) == 1.0 {
                Ok(())
            } else {
                Err(metrics)
            }
        },
        async || format!("svm-apiserver log:\n{}", cluster.svm.log()),
    )
    .await
}

/// Until ours has yielded a migration to kube-controller-manager (it saw kube-controller-manager
/// write the migration's status).
async fn wait_for_yield(cluster: &RealCluster, kcm: &ControllerManager) {
    eventually_async_every(
        Duration::from_secs(120),
        POLL,
        "a yield: svm_migrations_yielded_total{manager=\"kube-controller-manager\"} at 1 or more",
        async || {
            let yielded = metric(
                cluster,
                "svm_migrations_yielded_total",
                &["manager=\"kube-controller-manager\""],
            )
            .await;
            if yielded >= 1.0 {
                Ok(())
            } else {
                Err(format!("{yielded}"))
            }
        },
        async || {
            format!(
                "svm-apiserver log:\n{}\nkube-controller-manager's errors:\n{}",
                cluster.svm.log(),
                kcm.errors().join("\n")
            )
        },
    )
    .await
}

/// Every migration in the built-in API: kube-apiserver's own store.
async fn builtin_migrations(client: &kube::Client) -> Vec<Value> {
    raw_get(client, BUILTIN)
        .await
        .map(|list| list["items"].as_array().cloned().unwrap_or_default())
        .unwrap_or_default()
}

fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|entry| {
            (
                entry["manager"].as_str().unwrap_or_default().to_string(),
                entry["subresource"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

fn stored_versions(cluster: &RealCluster) -> String {
    cluster
        .kubectl()
        .ok(&[
            "get",
            "crd",
            WIDGETS,
            "-o",
            "jsonpath={.status.storedVersions}",
        ])
        .trim()
        .to_string()
}

fn move_widgets_storage_to_v2(cluster: &RealCluster) {
    cluster.kubectl().ok(&[
        "patch",
        "crd",
        WIDGETS,
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},
            {"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
    ]);
}

/// Waits until the widgets StorageState is safe on a hash other than `before` and its newest
/// built-in migration succeeded; returns the state.
async fn widgets_safe_after_a_builtin_migration(
    cluster: &RealCluster,
    client: &kube::Client,
    before: &str,
) -> Value {
    eventually_async_every(
        Duration::from_secs(180),
        POLL,
        &format!(
            "the widgets StorageState safe on a hash other than {before}, its built-in \
             migration Succeeded"
        ),
        async || {
            let state = storage_state(cluster, WIDGETS);
            let migrations = builtin_migrations(client).await;
            let migrated = migrations
                .iter()
                .any(|m| name(m).starts_with(&format!("{WIDGETS}-")) && succeeded(m));
            match state {
                Some(state)
                    if is_safe(&state)
                        && state["status"]["currentStorageVersionHash"] != before
                        && migrated =>
                {
                    Ok(state)
                }
                state => Err(format!(
                    "status {}; built-in migrations {:?}",
                    state.map_or(Value::Null, |s| s["status"].clone()),
                    migrations
                        .iter()
                        .map(|m| (name(m), succeeded(m)))
                        .collect::<Vec<_>>()
                )),
            }
        },
        async || crate::world::describe_state(cluster, WIDGETS),
    )
    .await
}

/// The widgets CRD (v1 stored, v2 served) and `count` widgets.
async fn install_widgets_in(cluster: &RealCluster, count: usize) {
    crate::world::install_widgets(&cluster.plane, &["v1", "v2"], count).await;
}

fn repo_file(path: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .display()
        .to_string()
}

async fn get_json(client: &kube::Client, path: &str) -> Value {
    raw_get(client, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Retries `call` until it succeeds (a restarting kube-apiserver refuses for a while).
async fn wait_for_async(
    limit: Duration,
    call: impl AsyncFnMut() -> Result<Value, String>,
) -> Value {
    eventually_async(limit, "an answer", call).await
}

/// The newest built-in migration of the widgets, once it shows `manager` writing its status.
async fn widgets_migration_written_by(client: &kube::Client, manager: &str) -> Option<Value> {
    builtin_migrations(client)
        .await
        .into_iter()
        .filter(|m| name(m).starts_with(&format!("{WIDGETS}-")))
        .filter(|m| !succeeded(m))
        .find(|m| managers(m).contains(&(manager.to_string(), "status".to_string())))
}

fn status_write_time(object: &Value, manager: &str) -> Value {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager && e["subresource"] == "status")
        .map(|e| e["time"].clone())
        .unwrap_or(Value::Null)
}

/// The names of the migrations in svm-apiserver's own store (its etcd prefix).
async fn in_our_store(cluster: &RealCluster) -> Vec<String> {
    let prefix = cluster.svm.etcd_prefix().expect("on etcd").to_string();
    cluster
        .plane
        .etcd_get_prefix(&format!("{prefix}/storageversionmigrations/"))
        .await
        .into_iter()
        .map(|(key, _)| key.rsplit('/').next().unwrap_or_default().to_string())
        .collect()
}
