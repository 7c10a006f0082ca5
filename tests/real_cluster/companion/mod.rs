//! Clusters that serve storagemigration.k8s.io themselves (Kubernetes 1.37+; here 1.36 with the
//! group's v1beta1 and the StorageVersionMigrator gate switched on): companion mode, owner
//! mode's refusal, and the upgrade from owner to companion under a running server. There is no
//! kube-controller-manager in the suite: [`Kcm`] plays its migrator by writing the built-in
//! migrations' status as it does (field manager `kube-controller-manager`, conditions only —
//! the objects themselves are not rewritten).

mod handover;
mod modes;
mod yielding;

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::control_plane::{ControlPlane, assets};
use crate::support::real_cluster::{
    NAMESPACE, PROJECT_APISERVICE, RealCluster, SERVICE_ACCOUNT, install_rbac,
};
use crate::support::server::metric_sum;
use crate::support::server::{Backend, ServerProcess};
use crate::world::{is_safe, items, name, storage_state, succeeded, wait_for};

/// What switches the built-in group on in kube-apiserver 1.36.
const BUILTIN_ON: [&str; 2] = [
    "--runtime-config=storagemigration.k8s.io/v1beta1=true",
    "--feature-gates=StorageVersionMigrator=true",
];
const BUILTIN: &str = "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations";
const TRIGGERS: &str = "app.kubernetes.io/managed-by=svm-apiserver-trigger";
const WIDGETS: &str = "widgets.example.test";
const DOCS: &str = "README.md#clusters-that-serve-storagemigrationk8sio-themselves";

async fn raw(
    client: &kube::Client,
    method: http::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let mut request = http::Request::builder().method(method).uri(path);
    let body = match body {
        Some(value) => {
            request = request.header("Content-Type", "application/merge-patch+json");
            serde_json::to_vec(&value).map_err(|e| e.to_string())?
        }
        None => Vec::new(),
    };
    let request = request.body(body).map_err(|e| e.to_string())?;
    let text = client
        .request_text(request)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
}

/// kube-controller-manager's status write on one migration, at `path` (the built-in API, or
/// ours through the aggregator while our APIService shadows it): a merge patch of `/status`
/// as field manager `kube-controller-manager`.
async fn kcm_writes(client: &kube::Client, path: &str, status: Value) -> Result<Value, String> {
    raw(
        client,
        http::Method::PATCH,
        &format!("{path}/status?fieldManager=kube-controller-manager"),
        Some(json!({ "status": status })),
    )
    .await
}

fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({
        "type": type_, "status": status, "reason": reason, "message": "",
        "lastTransitionTime": svm_apiserver::registry::now_text(),
    })
}

/// The status kube-controller-manager leaves on a migration it finished: the list snapshot
/// its resourceVersion controller records first (immutable once set), then the conditions.
fn finished_by_kcm(migration: &Value) -> Value {
    let mut status = json!({
        "conditions": [
            condition("Running", "False", "MigrationCompleted"),
            condition("Succeeded", "True", "StorageVersionMigrationSucceeded"),
        ],
    });
    if migration["status"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .is_empty()
    {
        status["resourceVersion"] = migration["metadata"]["resourceVersion"].clone();
    }
    status
}

/// Plays kube-controller-manager's migrator on the built-in API: every migration of the
/// trigger without a result is finished (status as KCM writes it). Stops when dropped.
struct Kcm {
    task: tokio::task::JoinHandle<()>,
}

impl Kcm {
    fn start(client: kube::Client) -> Kcm {
        let task = tokio::spawn(async move {
            loop {
                let list = raw(
                    &client,
                    http::Method::GET,
                    &format!("{BUILTIN}?labelSelector={}", TRIGGERS.replace('=', "%3D")),
                    None,
                )
                .await;
                // A restarting kube-apiserver answers nothing for a while: try again.
                if let Ok(list) = list {
                    for item in list["items"].as_array().into_iter().flatten() {
                        if succeeded(item) {
                            continue;
                        }
                        let path = format!("{BUILTIN}/{}", name(item));
                        let _ = kcm_writes(&client, &path, finished_by_kcm(item)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Kcm { task }
    }
}

impl Drop for Kcm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn metric(cluster: &RealCluster, name: &str, labels: &[&str]) -> f64 {
    metric_sum(&cluster.metrics().await, name, labels)
}

async fn wait_for_mode(cluster: &RealCluster, mode: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let label = format!("mode=\"{mode}\"");
    while metric(cluster, "svm_api_mode", &[&label]).await != 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "svm_api_mode{{{label}}} is not 1 within 2 min:\n{}\nsvm-apiserver log:\n{}",
            cluster.metrics().await,
            cluster.svm.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every migration in the built-in API: kube-apiserver's own store.
async fn builtin_migrations(client: &kube::Client) -> Vec<Value> {
    raw(client, http::Method::GET, BUILTIN, None)
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
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let state = storage_state(cluster, WIDGETS);
        let migrated = builtin_migrations(client)
            .await
            .iter()
            .any(|m| name(m).starts_with(&format!("{WIDGETS}-")) && succeeded(m));
        if let Some(state) = state.filter(|s| {
            is_safe(s) && s["status"]["currentStorageVersionHash"] != before && migrated
        }) {
            return state;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the widgets StorageState is not safe on a new hash within 3 min:\n{}\n{:#?}\nsvm-apiserver log:\n{}",
            cluster
                .kubectl()
                .run(&["get", "storagestates", WIDGETS, "-o", "yaml"])
                .stdout,
            builtin_migrations(client)
                .await
                .iter()
                .map(name)
                .collect::<Vec<_>>(),
            cluster.svm.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The widgets CRD (v1 stored, v2 served) and `count` widgets.
async fn install_widgets_in(cluster: &RealCluster, count: usize) {
    crate::world::install_widgets(cluster, &["v1", "v2"], count).await;
}

fn repo_file(path: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .display()
        .to_string()
}

async fn get_json(client: &kube::Client, path: &str) -> Value {
    raw(client, http::Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Retries `call` until it succeeds (a restarting kube-apiserver refuses for a while).
async fn wait_for_async<F, Fut>(limit: Duration, mut call: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, String>>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        match call().await {
            Ok(value) => return value,
            Err(err) => assert!(
                std::time::Instant::now() < deadline,
                "not within {limit:?}: {err}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
