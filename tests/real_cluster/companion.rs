//! Clusters that serve storagemigration.k8s.io themselves (Kubernetes 1.37+; here 1.36 with the
//! group's v1beta1 and the StorageVersionMigrator gate switched on): companion mode, owner
//! mode's refusal, and the upgrade from owner to companion under a running server. There is no
//! kube-controller-manager in the suite: [`Kcm`] plays its migrator by writing the built-in
//! migrations' status as it does (field manager `kube-controller-manager`, conditions only —
//! the objects themselves are not rewritten).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::control_plane::{ControlPlane, assets};
use crate::support::real_cluster::{
    NAMESPACE, PROJECT_APISERVICE, RealCluster, SERVICE_ACCOUNT, install_rbac,
};
use crate::support::server::{Backend, ServerProcess};
use crate::world::{is_safe, items, metric_sum, name, storage_state, succeeded, wait_for};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn companion_mode_migrates_through_the_clusters_own_api() {
    let Some(cluster) = RealCluster::start_companion(
        "companion_mode_migrates_through_the_clusters_own_api",
        &BUILTIN_ON,
        &["--qps=50"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    let client = cluster.plane.client().await;
    wait_for_mode(&cluster, "companion").await;

    // No clash: the group's APIServices are all kube-apiserver's own; ours is the project
    // group's, Available.
    let apiservices: Value =
        serde_json::from_str(&kubectl.ok(&["get", "apiservices", "-o", "json"])).expect("json");
    let group: Vec<&Value> = apiservices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["spec"]["group"] == "storagemigration.k8s.io")
        .collect();
    assert_eq!(group.len(), 1, "{group:#?}");
    assert_eq!(name(group[0]), "v1beta1.storagemigration.k8s.io");
    assert!(group[0]["spec"]["service"].is_null(), "{}", group[0]);
    let project = kubectl.ok(&["get", "apiservice", PROJECT_APISERVICE, "-o", "json"]);
    assert!(project.contains("\"svm-apiserver\""), "{project}");

    // `kubectl get storagestates` reaches ours, in the project group.
    let resources = kubectl.ok(&["api-resources", "--api-group=storage.svm-apiserver.io"]);
    assert!(
        resources
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "storagestates",
                    "ss",
                    "storage.svm-apiserver.io/v1alpha1",
                    "false",
                    "StorageState"
                ]),
        "{resources}"
    );

    // The first start: the trigger's migrations are the cluster's, and their success (played
    // by kube-controller-manager here) makes every StorageState safe.
    let kcm = Kcm::start(client.clone());
    install_widgets_in(&cluster, 50).await;
    let states = wait_for(
        Duration::from_secs(300),
        "every StorageState safe through built-in migrations",
        || {
            let states = items(&cluster, "storagestates");
            let widgets = states.iter().any(|s| name(s) == WIDGETS);
            (widgets && states.iter().all(is_safe)).then_some(states)
        },
        || {
            format!(
                "{}\nsvm-apiserver log:\n{}",
                cluster.kubectl().run(&["get", "storagestates"]).stdout,
                cluster.svm.log()
            )
        },
    );
    let state_names: Vec<String> = states.iter().map(name).collect();
    assert!(
        state_names.contains(&"storageversionmigrations.storagemigration.k8s.io".to_string()),
        "the cluster's own migrations are a tracked built-in resource here: {state_names:?}"
    );
    assert!(
        !state_names
            .iter()
            .any(|n| n.ends_with(".storage.svm-apiserver.io")),
        "our own group is never tracked: {state_names:?}"
    );
    let migrations = builtin_migrations(&client).await;
    let ours: Vec<&Value> = migrations
        .iter()
        .filter(|m| {
            m["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "svm-apiserver-trigger"
        })
        .collect();
    assert!(
        ours.len() >= states.len(),
        "{} migrations for {} states",
        ours.len(),
        states.len()
    );
    let widgets = ours
        .iter()
        .find(|m| name(m).starts_with(&format!("{WIDGETS}-")))
        .expect("a built-in migration of the widgets");
    assert_eq!(
        widgets["spec"]["resource"],
        json!({"group": "example.test", "resource": "widgets"})
    );
    assert!(
        widgets["metadata"]["annotations"]["storagemigration.k8s.io/storage-version-hash"]
            .is_string()
    );
    let who = managers(widgets);
    assert!(
        who.contains(&("svm-apiserver-trigger".into(), String::new())),
        "{who:?}"
    );
    assert!(
        who.contains(&("kube-controller-manager".into(), "status".into())),
        "{who:?}"
    );
    // Nothing was written to svm-apiserver's own copy of the group, and its migrator stayed
    // idle (kube-controller-manager runs the migrations).
    let prefix = cluster.svm.etcd_prefix().expect("on etcd").to_string();
    let own = cluster
        .plane
        .etcd_get_prefix(&format!("{prefix}/storageversionmigrations/"))
        .await;
    assert!(own.is_empty(), "{} migrations in our store", own.len());
    let metrics = cluster.metrics().await;
    assert_eq!(
        metric_sum(&metrics, "storage_migrator_core_migrator_reads_total", &[]),
        0.0,
        "{metrics}"
    );

    // A CRD storage move: seen, a built-in migration created, its success narrows the state.
    let before = storage_state(&cluster, WIDGETS).expect("widgets state");
    let before_hash = before["status"]["currentStorageVersionHash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    move_widgets_storage_to_v2(&cluster);
    let after = widgets_safe_after_a_builtin_migration(&cluster, &client, &before_hash).await;
    assert_eq!(stored_versions(&cluster), r#"["v2"]"#);
    eprintln!(
        "companion mode on kube-apiserver 1.36 with storagemigration.k8s.io/v1beta1 on: {} \
         StorageStates safe through {} built-in migrations; the CRD move {} -> {} narrowed \
         through a built-in migration",
        states.len(),
        ours.len(),
        before_hash,
        after["status"]["currentStorageVersionHash"]
    );
    drop(kcm);
}

/// The widgets CRD (v1 stored, v2 served) and `count` widgets.
async fn install_widgets_in(cluster: &RealCluster, count: usize) {
    crate::world::install_widgets(cluster, &["v1", "v2"], count).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_mode_refuses_to_run_over_the_clusters_own_apiservice() {
    let test = "owner_mode_refuses_to_run_over_the_clusters_own_apiservice";
    let Some(assets) = assets(test) else {
        return;
    };
    let plane = ControlPlane::start(&assets, &BUILTIN_ON);
    install_rbac(&plane);
    let kubeconfig = plane.service_account_kubeconfig(NAMESPACE, SERVICE_ACCOUNT);
    let kubectl = plane.kubectl();
    let local = || {
        kubectl.ok(&[
            "get",
            "apiservice",
            "v1beta1.storagemigration.k8s.io",
            "-o",
            "json",
        ])
    };
    let before: Value = serde_json::from_str(&local()).expect("json");
    assert!(before["spec"]["service"].is_null(), "{before}");

    let etcd = plane.etcd.endpoint();
    let flag = format!("--kubeconfig={}", kubeconfig.display());
    let (status, log) = ServerProcess::run_to_exit(
        Backend::Etcd(&etcd),
        &[&flag, "--api-mode=owner"],
        Duration::from_secs(90),
    );
    let status = status.unwrap_or_else(|| panic!("still running after 90 s; log:\n{log}"));
    assert!(!status.success(), "{status}; log:\n{log}");
    for needle in [
        "--api-mode=owner refuses to run",
        "v1beta1",
        "--api-mode=companion",
        DOCS,
    ] {
        assert!(log.contains(needle), "{needle:?} not in the log:\n{log}");
    }
    // Nothing of the cluster's changed.
    let after: Value = serde_json::from_str(&local()).expect("json");
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    // deploy/ applied over kube-apiserver's own APIService (kubectl apply takes it over until
    // kube-apiserver's next start): still refused, naming the take-over.
    kubectl.ok(&["apply", "-f", &repo_file("apiservice/v1beta1.yaml")]);
    let (status, log) = ServerProcess::run_to_exit(
        Backend::Etcd(&etcd),
        &[&flag, "--api-mode=owner"],
        Duration::from_secs(90),
    );
    assert!(
        status.is_some_and(|s| !s.success()),
        "{status:?}; log:\n{log}"
    );
    assert!(log.contains("automanaged"), "{log}");
    // The documented repair: delete it; kube-apiserver answers for itself at once.
    kubectl.ok(&["delete", "apiservice", "v1beta1.storagemigration.k8s.io"]);
    let served = wait_for(
        Duration::from_secs(60),
        "kube-apiserver serving its own v1beta1 again",
        || {
            let out = kubectl.run(&["get", "--raw", "/apis/storagemigration.k8s.io/v1beta1"]);
            (out.ok && out.stdout.contains("storageversionmigrations")).then_some(out.stdout)
        },
        String::new,
    );
    assert!(served.contains("\"storageVersionHash\""), "{served}");
}

fn repo_file(path: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .display()
        .to_string()
}

/// The upgrade: svm-apiserver owns the group (deploy/), then the cluster starts serving it
/// (kube-apiserver restarted with the group on, as an upgrade to 1.37 does). Our APIServices
/// shadow the cluster's, so kube-controller-manager's migrator reaches our migrations through
/// them: the guard sees its status write on a migration ours is running, stops ours and says
/// so; the trigger follows the other migrator's success. Then the documented path — our
/// APIServices of the group deleted, the project group kept, kube-apiserver restarted — and
/// the server (auto) moves to companion mode by itself, with its StorageStates and history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_to_a_cluster_that_serves_the_group_hands_over_without_two_migrators() {
    let Some(mut cluster) = RealCluster::start(
        "the_upgrade_to_a_cluster_that_serves_the_group_hands_over_without_two_migrators",
        &[],
        // Slow enough that the widgets' migration is still running when the cluster upgrades.
        &["--api-mode=auto", "--qps=4", "--burst=4", "--chunk-size=10"],
    ) else {
        return;
    };
    let client = cluster.plane.client().await;
    wait_for_mode(&cluster, "owner").await;
    install_widgets_in(&cluster, 400).await;
    let migration = wait_for(
        Duration::from_secs(240),
        "the widgets' migration running in svm-apiserver",
        || {
            items(&cluster, "storageversionmigrations")
                .into_iter()
                .find(|m| {
                    name(m).starts_with(&format!("{WIDGETS}-"))
                        && m["status"]["progress"]["migratedObjects"]
                            .as_i64()
                            .unwrap_or(0)
                            > 0
                })
        },
        || crate::world::describe_state(&cluster, WIDGETS),
    );
    let migration_name = name(&migration);
    let prefix = cluster.svm.etcd_prefix().expect("on etcd").to_string();
    let history_before = cluster
        .plane
        .etcd_get_prefix(&format!("{prefix}/hashhistory/"))
        .await;
    let state_before = storage_state(&cluster, WIDGETS).expect("widgets state");

    // The upgrade: kube-apiserver restarts serving the group itself. Ours shadow it.
    cluster.plane.restart_apiserver(&BUILTIN_ON);
    let local = cluster.kubectl().ok(&[
        "get",
        "apiservice",
        "v1beta1.storagemigration.k8s.io",
        "-o",
        "jsonpath={.spec.service.name}",
    ]);
    assert_eq!(
        local.trim(),
        "svm-apiserver",
        "ours still routes the version"
    );
    let client = {
        drop(client);
        cluster.plane.client().await
    };

    // kube-controller-manager's migrator, through our APIService, takes the running migration
    // (as its typed client writes status: no `progress`, which its Go type lacks).
    let path =
        format!("/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations/{migration_name}");
    let theirs = wait_for_async(Duration::from_secs(120), || {
        kcm_writes(
            &client,
            &path,
            json!({
                "progress": null,
                "conditions": [condition("Running", "True", "StorageVersionMigrationInProgress")],
            }),
        )
    })
    .await;
    assert_eq!(theirs["metadata"]["name"], migration_name.as_str());

    // Ours notices, stops, and says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while metric(
        &cluster,
        "svm_migrations_yielded_total",
        &["manager=\"kube-controller-manager\""],
    )
    .await
        < 1.0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no yield within 2 min; svm-apiserver log:\n{}",
            cluster.svm.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = cluster.svm.log();
    assert!(
        log.contains("another migrator works on this migration"),
        "{log}"
    );
    assert!(log.contains(DOCS), "{log}");
    let yielded_at = get_json(&client, &path).await;
    // From now on svm-apiserver's migrator writes nothing to it: after a while its status is
    // still what kube-controller-manager left (no progress of ours comes back).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = get_json(&client, &path).await;
    assert_eq!(
        later["metadata"]["resourceVersion"],
        yielded_at["metadata"]["resourceVersion"]
    );
    assert!(later["status"]["progress"].is_null(), "{later}");
    // kube-controller-manager finishes it; the trigger follows that success.
    kcm_writes(&client, &path, finished_by_kcm(&later))
        .await
        .expect("KCM's success");
    wait_for(
        Duration::from_secs(120),
        "the widgets StorageState safe after kube-controller-manager's success",
        || storage_state(&cluster, WIDGETS).filter(is_safe),
        || crate::world::describe_state(&cluster, WIDGETS),
    );

    // The documented path: our APIServices of the group go, the project group's stays. The
    // server sees it at once and moves to companion mode.
    cluster.register_as_companion();
    wait_for_mode(&cluster, "companion").await;
    assert!(cluster.svm.log().contains("the API mode changed"));
    // ... and kube-apiserver registers its own APIService on its next start.
    cluster.plane.restart_apiserver(&BUILTIN_ON);
    cluster.wait_available();
    let registered = cluster.kubectl().ok(&[
        "get",
        "apiservice",
        "v1beta1.storagemigration.k8s.io",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(
        registered.contains("kube-aggregator.kubernetes.io/automanaged"),
        "{registered}"
    );
    wait_for_mode(&cluster, "companion").await;
    let client = cluster.plane.client().await;

    // StorageStates and the history came through: the same objects, the same entries.
    let state_after = storage_state(&cluster, WIDGETS).expect("widgets state");
    assert_eq!(
        state_after["apiVersion"],
        "storage.svm-apiserver.io/v1alpha1"
    );
    assert_eq!(
        state_after["metadata"]["uid"],
        state_before["metadata"]["uid"]
    );
    let history_after = cluster
        .plane
        .etcd_get_prefix(&format!("{prefix}/hashhistory/"))
        .await;
    for (key, value) in &history_before {
        assert!(
            history_after.iter().any(|(k, v)| k == key && v == value),
            "history entry {key} changed or went"
        );
    }

    // From now on the trigger's migrations are the cluster's.
    let kcm = Kcm::start(client.clone());
    let before_hash = state_after["status"]["currentStorageVersionHash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    move_widgets_storage_to_v2(&cluster);
    let moved = widgets_safe_after_a_builtin_migration(&cluster, &client, &before_hash).await;
    assert_eq!(stored_versions(&cluster), r#"["v2"]"#);
    eprintln!(
        "upgrade under a running server: migration {migration_name} left to \
         kube-controller-manager when it wrote the status, the state narrowed on its success; \
         after the documented switch, companion mode with {} history entries kept, the CRD move \
         {before_hash} -> {} narrowed through a built-in migration",
        history_before.len(),
        moved["status"]["currentStorageVersionHash"]
    );
    drop(kcm);
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

/// `--companion-migrator=svm-apiserver`: where kube-controller-manager's migrator is switched
/// off, ours runs the cluster's migrations — every widget re-encoded in etcd — and the moment
/// kube-controller-manager writes one's status anyway (managedFields say so), ours stops on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_migrator_runs_the_clusters_migrations_and_yields_to_kube_controller_manager() {
    let Some(cluster) = RealCluster::start_companion(
        "our_migrator_runs_the_clusters_migrations_and_yields_to_kube_controller_manager",
        &BUILTIN_ON,
        &[
            "--companion-migrator=svm-apiserver",
            "--qps=10",
            "--burst=10",
            "--chunk-size=10",
        ],
    ) else {
        return;
    };
    let client = cluster.plane.client().await;
    wait_for_mode(&cluster, "companion").await;
    install_widgets_in(&cluster, 300).await;

    // The widgets' first migration, run by us on the built-in API...
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    let running = loop {
        if let Some(found) = widgets_migration_written_by(&client, "svm-apiserver-migrator").await {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "our migrator never wrote a widgets migration's status:\n{:#?}\nsvm-apiserver log:\n{}",
            builtin_migrations(&client)
                .await
                .iter()
                .map(name)
                .collect::<Vec<_>>(),
            cluster.svm.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // ... until kube-controller-manager's controller, switched on after all, writes it too.
    let path = format!("{BUILTIN}/{}", name(&running));
    kcm_writes(
        &client,
        &path,
        json!({"conditions": [condition("Running", "True", "StorageVersionMigrationInProgress")]}),
    )
    .await
    .expect("KCM's write");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while metric(
        &cluster,
        "svm_migrations_yielded_total",
        &["manager=\"kube-controller-manager\""],
    )
    .await
        < 1.0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no yield within 2 min; svm-apiserver log:\n{}",
            cluster.svm.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let yielded = get_json(&client, &path).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = get_json(&client, &path).await;
    assert!(!succeeded(&later), "ours must not finish it: {later}");
    assert_eq!(
        status_write_time(&later, "svm-apiserver-migrator"),
        status_write_time(&yielded, "svm-apiserver-migrator"),
        "svm-apiserver wrote after kube-controller-manager: {later}"
    );
    let log = cluster.svm.log();
    assert!(
        log.contains("another migrator works on this migration"),
        "{log}"
    );
    kcm_writes(&client, &path, finished_by_kcm(&later))
        .await
        .expect("KCM's success");
    wait_for(
        Duration::from_secs(120),
        "the widgets StorageState safe after kube-controller-manager's success",
        || storage_state(&cluster, WIDGETS).filter(is_safe),
        || crate::world::describe_state(&cluster, WIDGETS),
    );

    // A storage move with no one else around: ours runs the built-in migration to the end.
    let before = storage_state(&cluster, WIDGETS).expect("widgets state");
    let before_hash = before["status"]["currentStorageVersionHash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    move_widgets_storage_to_v2(&cluster);
    widgets_safe_after_a_builtin_migration(&cluster, &client, &before_hash).await;
    let widgets_prefix = "/registry/example.test/widgets/demo/";
    assert_eq!(
        crate::world::stored_json_objects(&cluster, widgets_prefix, "example.test/v1").await,
        0
    );
    assert_eq!(
        crate::world::stored_json_objects(&cluster, widgets_prefix, "example.test/v2").await,
        300
    );
    assert_eq!(stored_versions(&cluster), r#"["v2"]"#);
    let done = builtin_migrations(&client)
        .await
        .into_iter()
        .filter(|m| name(m).starts_with(&format!("{WIDGETS}-")) && succeeded(m))
        .max_by_key(|m| {
            m["metadata"]["creationTimestamp"]
                .as_str()
                .map(str::to_string)
        })
        .expect("the move's migration");
    let who = managers(&done);
    assert!(
        who.contains(&("svm-apiserver-migrator".into(), "status".into()))
            && !who.iter().any(|(m, _)| m == "kube-controller-manager"),
        "{who:?}"
    );
    eprintln!(
        "--companion-migrator=svm-apiserver: the built-in migration {} left to \
         kube-controller-manager when it wrote the status; the CRD move ran by us on the \
         built-in API, 300 widgets re-encoded as v2",
        name(&running)
    );
}

/// Entering companion mode, the unfinished migrations of our own store move: a user's is
/// carried over to the cluster's API (same name, labels, resource), the trigger's are dropped
/// and created anew on the cluster's API for the newest history entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_migrations_of_our_store_move_to_the_clusters_api() {
    let Some(mut cluster) = RealCluster::start(
        "unfinished_migrations_of_our_store_move_to_the_clusters_api",
        &[],
        // No migrator: everything stays unfinished in our store.
        &["--api-mode=auto", "--controllers=trigger"],
    ) else {
        return;
    };
    wait_for_mode(&cluster, "owner").await;
    let kubectl = cluster.kubectl();
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        r#"{"apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
            "metadata": {"name": "rotate-secrets", "labels": {"team": "storage"}},
            "spec": {"resource": {"group": "", "resource": "secrets"}}}"#,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !in_our_store(&cluster)
        .await
        .iter()
        .any(|n| n.starts_with("secrets-"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no trigger migration in our store; log:\n{}",
            cluster.svm.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    cluster.plane.restart_apiserver(&BUILTIN_ON);
    cluster.register_as_companion();
    wait_for_mode(&cluster, "companion").await;
    let client = cluster.plane.client().await;
    let moved = wait_for_async(Duration::from_secs(120), || async {
        let found = builtin_migrations(&client)
            .await
            .into_iter()
            .find(|m| name(m) == "rotate-secrets");
        found.ok_or_else(|| "not carried over yet".to_string())
    })
    .await;
    assert_eq!(moved["metadata"]["labels"]["team"], "storage");
    assert_eq!(
        moved["metadata"]["annotations"]["storage.svm-apiserver.io/carried-over-from"],
        "svm-apiserver"
    );
    assert_eq!(
        moved["spec"]["resource"],
        json!({"group": "", "resource": "secrets"})
    );
    // Our store keeps nothing unfinished (here: nothing at all; nothing ever finished).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !in_our_store(&cluster).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "left in our store: {:?}",
            in_our_store(&cluster).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The trigger's own are on the cluster's API now.
    let triggers = wait_for_async(Duration::from_secs(120), || async {
        let found: Vec<Value> = builtin_migrations(&client)
            .await
            .into_iter()
            .filter(|m| name(m).starts_with("secrets-"))
            .collect();
        if found.is_empty() {
            Err("no trigger migration of secrets on the built-in API yet".to_string())
        } else {
            Ok(json!(found))
        }
    })
    .await;
    assert!(
        triggers[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"]
            == "svm-apiserver-trigger",
        "{triggers}"
    );
    assert!(
        cluster.svm.log().contains("carried"),
        "{}",
        cluster.svm.log()
    );
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
