//! Companion mode on a cluster that serves the group, and owner mode refusing to run there.

use super::*;

/// Widgets in the companion-mode test (each re-encoded by kube-controller-manager's migration
/// of the CRD move).
const WIDGETS_N: usize = 200;

/// Companion mode end to end, with the real kube-controller-manager running the migrations:
/// no APIService clash, `kubectl get storagestates` in the project group, the first start's
/// migrations created on the cluster's API and run by kube-controller-manager (every
/// StorageState safe on its success), nothing in our own store and our migrator idle; then a
/// CRD move whose StorageState is safe only with every widget re-encoded in etcd.
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

    // The first start: the trigger's migrations are the cluster's, run by the real
    // kube-controller-manager (started once the widgets exist, so that its garbage collector's
    // first discovery already has them), and their success makes every StorageState safe.
    install_widgets_in(&cluster, WIDGETS_N).await;
    let kcm = real_kcm(&cluster);
    let first_start = std::time::Instant::now();
    let states = wait_for_migrations(
        &cluster,
        Duration::from_secs(300),
        "every StorageState safe through built-in migrations",
        || {
            let states = items(&cluster, "storagestates");
            let widgets = states.iter().any(|s| name(s) == WIDGETS);
            (widgets && states.iter().all(is_safe)).then_some(states)
        },
        || {
            format!(
                "{}\nsvm-apiserver log:\n{}\nkube-controller-manager's errors:\n{}",
                cluster.kubectl().run(&["get", "storagestates"]).stdout,
                cluster.svm.log(),
                kcm.errors().join("\n")
            )
        },
    );
    let first_start = first_start.elapsed();
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
        widgets["metadata"]["annotations"]["storage.svm-apiserver.io/storage-version-hash"]
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

    // A CRD storage move: seen, a built-in migration created and run by kube-controller-manager;
    // the state is safe on the new hash only once etcd holds every widget re-encoded.
    let before = storage_state(&cluster, WIDGETS).expect("widgets state");
    let before_hash = before["status"]["currentStorageVersionHash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let moved = std::time::Instant::now();
    move_widgets_storage_to_v2(&cluster);
    let after = widgets_safe_after_a_builtin_migration(&cluster, &client, &before_hash).await;
    let moved = moved.elapsed();
    assert_widgets_stored_as(&cluster, "v2", WIDGETS_N).await;
    let migration = newest_widgets_migration(&client).await;
    assert_migrated_by_kcm(&migration);
    assert_eq!(stored_versions(&cluster), r#"["v2"]"#);
    eprintln!(
        "companion mode on kube-apiserver 1.36 with storagemigration.k8s.io/v1beta1 on and the \
         real kube-controller-manager: {} StorageStates safe through {} built-in migrations \
         {:.1} s after it started; the CRD move {} -> {}: {WIDGETS_N} widgets re-encoded in \
         etcd by its migration {}, safe {:.1} s after the switch",
        states.len(),
        ours.len(),
        first_start.as_secs_f64(),
        before_hash,
        after["status"]["currentStorageVersionHash"],
        name(&migration),
        moved.as_secs_f64()
    );
    drop(kcm);
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
