//! Reading the cluster's state the way a user would: kubectl through the aggregator.

use serde_json::Value;

use crate::support::control_plane::ControlPlane;
use crate::support::real_cluster::RealCluster;

/// `kubectl get <what> -o json`'s items.
pub(crate) fn items(cluster: &RealCluster, what: &str) -> Vec<Value> {
    let out = cluster.kubectl().ok(&["get", what, "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("kubectl printed JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The condition types whose status is "True".
pub(crate) fn true_conditions(migration: &Value) -> Vec<String> {
    migration["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str().map(str::to_string))
        .collect()
}

pub(crate) fn name(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A StorageState is safe when its persisted hashes are exactly `[current]`.
pub(crate) fn is_safe(state: &Value) -> bool {
    let status = &state["status"];
    let current = status["currentStorageVersionHash"].as_str().unwrap_or("");
    !current.is_empty()
        && current != "Unknown"
        && status["persistedStorageVersionHashes"] == serde_json::json!([current])
}

pub(crate) use crate::support::wait::eventually as wait_for;

/// A wait on the cluster's migrations: `check` tried until it gives a value, failing only once
/// no migration, StorageState or count has moved for `limit` ([`cluster_progress`]), with
/// `describe()` (which may hold a log or ages, so it is not what tells progress).
pub(crate) fn wait_for_migrations<T>(
    cluster: &RealCluster,
    limit: std::time::Duration,
    what: &str,
    check: impl FnMut() -> Option<T>,
    describe: impl Fn() -> String,
) -> T {
    crate::support::wait::eventually_watching(
        limit,
        what,
        check,
        || cluster_progress(cluster),
        describe,
    )
}

/// What moves while the cluster works on migrations: which there are, their true conditions
/// and counts, and every StorageState's hashes. No times or ages: two looks differ only if
/// something moved. A kubectl that fails (an apiserver restarting) is seen as its error.
pub(crate) fn cluster_progress(cluster: &RealCluster) -> String {
    let kubectl = cluster.kubectl();
    let list = |what: &str, line: &dyn Fn(&Value) -> String| {
        let out = kubectl.run(&["get", what, "-o", "json"]);
        let Ok(list) = serde_json::from_str::<Value>(&out.stdout) else {
            return format!("{what}: {}", out.stderr.trim());
        };
        let items = list["items"].as_array().cloned().unwrap_or_default();
        items.iter().map(line).collect::<Vec<_>>().join("\n")
    };
    let migrations = list("storageversionmigrations", &|m| {
        let progress = &m["status"]["progress"];
        format!(
            "{} {:?} migrated={} failed={}",
            name(m),
            true_conditions(m),
            progress["migratedObjects"],
            progress["failedObjects"]
        )
    });
    let states = list("storagestates", &|s| {
        let status = &s["status"];
        format!(
            "{} {} {}",
            name(s),
            status["currentStorageVersionHash"],
            status["persistedStorageVersionHashes"]
        )
    });
    format!("{migrations}\n{states}")
}

/// Create `count` objects from `make(i)` through `api`, `parallel` at a time.
pub(crate) async fn create_many(
    api: &kube::Api<kube::api::DynamicObject>,
    count: usize,
    parallel: usize,
    make: impl Fn(usize) -> Value,
) {
    use futures::StreamExt;
    let params = kube::api::PostParams::default();
    let results: Vec<_> = futures::stream::iter((0..count).map(|i| {
        let object: kube::api::DynamicObject =
            serde_json::from_value(make(i)).expect("a valid object");
        let params = params.clone();
        async move { api.create(&params, &object).await }
    }))
    .buffer_unordered(parallel)
    .collect()
    .await;
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} creates failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
}

/// The StorageState of `name`, once it exists.
pub(crate) fn storage_state(cluster: &RealCluster, name: &str) -> Option<Value> {
    let out = cluster
        .kubectl()
        .run(&["get", "storagestate", name, "-o", "json"]);
    if !out.ok {
        assert!(out.stderr.contains("NotFound"), "{}", out.stderr);
        return None;
    }
    Some(serde_json::from_str(&out.stdout).expect("kubectl printed JSON"))
}

/// The migrations of one resource (`resource.group`), by name.
pub(crate) fn migrations_of(cluster: &RealCluster, state: &str) -> Vec<Value> {
    items(cluster, "storageversionmigrations")
        .into_iter()
        .filter(|m| name(m).starts_with(&format!("{state}-")))
        .collect()
}

pub(crate) fn succeeded(migration: &Value) -> bool {
    true_conditions(migration).iter().any(|c| c == "Succeeded")
}

pub(crate) fn failed(migration: &Value) -> bool {
    true_conditions(migration).iter().any(|c| c == "Failed")
}

/// What a failed wait on a resource prints: its StorageState, the migrations, the server's log.
pub(crate) fn describe_state(cluster: &RealCluster, state: &str) -> String {
    let kubectl = cluster.kubectl();
    format!(
        "{}\n{}\nsvm-apiserver log:\n{}",
        kubectl
            .run(&["get", "storagestates", state, "-o", "yaml"])
            .stdout,
        kubectl.run(&["get", "svm"]).stdout,
        cluster.svm.log()
    )
}

/// How many objects under `prefix` etcd holds encoded as `api_version`: a custom resource is
/// stored as JSON with the apiVersion of its storage version.
pub(crate) async fn stored_json_objects(
    cluster: &RealCluster,
    prefix: &str,
    api_version: &str,
) -> usize {
    cluster
        .plane
        .etcd_get_prefix(prefix)
        .await
        .iter()
        .filter(|(_, value)| {
            serde_json::from_slice::<Value>(value)
                .is_ok_and(|object| object["apiVersion"] == api_version)
        })
        .count()
}

/// The widgets CRD (`example.test`, namespaced, stored in the first of `versions`) and `count`
/// widgets in namespace `demo`, created in v1.
pub(crate) async fn install_widgets(plane: &ControlPlane, versions: &[&str], count: usize) {
    let kubectl = plane.kubectl();
    kubectl.ok(&["create", "namespace", "demo"]);
    let crd = kube_double::crd::manifest("example.test", "widgets", "Widget", versions);
    kubectl.ok_stdin(&["apply", "-f", "-"], &crd.to_string());
    wait_established(&kubectl, &["crd/widgets.example.test"]);
    let gvk = kube::api::GroupVersionKind::gvk("example.test", "v1", "Widget");
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        plane.client().await,
        "demo",
        &kube::api::ApiResource::from_gvk(&gvk),
    );
    create_many(&api, count, 32, |i| {
        serde_json::json!({
            "apiVersion": "example.test/v1",
            "kind": "Widget",
            "metadata": {"name": format!("w-{i:05}")},
            "spec": {"size": i},
        })
    })
    .await;
}

/// A namespace, once kube-controller-manager's service-account controller made the `default`
/// ServiceAccount its pods need (the ServiceAccount admission refuses pods without it); the
/// wait fails once nothing moved for `limit`.
pub(crate) async fn namespace_for_pods(
    client: &kube::Client,
    kubectl: &crate::support::kubectl::Kubectl,
    ns: &str,
    limit: std::time::Duration,
) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    kubectl.ok(&["create", "namespace", ns]);
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), ns);
    crate::support::wait::eventually_async_every(
        limit,
        std::time::Duration::from_millis(100),
        &format!("ServiceAccount {ns}/default from kube-controller-manager"),
        async || match accounts.get_opt("default").await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
        async || String::new(),
    )
    .await;
}

/// Waits until every CRD named (`crd/<plural>.<group>`) is Established.
pub(crate) fn wait_established(kubectl: &crate::support::kubectl::Kubectl, crds: &[&str]) {
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend_from_slice(crds);
    kubectl.ok(&args);
}

/// kube-controller-manager running `controllers` (with `flags`) beside `plane`, its start-up
/// time printed.
pub(crate) fn start_controller_manager(
    plane: &ControlPlane,
    controllers: &[&str],
    flags: &[&str],
) -> crate::support::controller_manager::ControllerManager {
    let started = std::time::Instant::now();
    let kcm =
        crate::support::controller_manager::ControllerManager::start(plane, controllers, flags);
    println!(
        "kube-controller-manager ({}) serving /healthz after {:.1} s",
        controllers.join(","),
        started.elapsed().as_secs_f64()
    );
    kcm
}

/// Who made an object: the field managers of its labels, which only its creator sets (a
/// controller of kube-controller-manager's: `kube-controller-manager`).
pub(crate) fn creator(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    let managers: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:metadata/f:labels").is_some())
        })
        .filter_map(|entry| entry.manager.clone())
        .collect();
    managers.join(",")
}
