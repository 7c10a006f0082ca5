//! `--companion-migrator=svm-apiserver`: ours runs the cluster's migrations and yields to kube-controller-manager.

use super::*;

/// `--companion-migrator=svm-apiserver`: where kube-controller-manager's migrator is switched
/// off, ours runs the cluster's migrations — every widget re-encoded in etcd — and the moment
/// kube-controller-manager writes one's status anyway (managedFields say so), ours stops on it.
/// kube-controller-manager is the real one, started while ours runs the widgets' migration (its
/// controller switched on after all): it takes that migration and finishes it, and ours
/// writes nothing more to it. Then, with kube-controller-manager stopped, ours runs a CRD move
/// to its end.
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
    let running = eventually_async_every(
        Duration::from_secs(240),
        POLL,
        "our migrator writing a widgets migration's status",
        async || {
            widgets_migration_written_by(&client, "svm-apiserver-migrator")
                .await
                .ok_or_else(|| "no such migration".to_string())
        },
        async || {
            format!(
                "built-in migrations: {:#?}\nsvm-apiserver log:\n{}",
                builtin_migrations(&client)
                    .await
                    .iter()
                    .map(name)
                    .collect::<Vec<_>>(),
                cluster.svm.log()
            )
        },
    )
    .await;
    // ... until kube-controller-manager's controller, switched on after all, writes it too.
    let path = format!("{BUILTIN}/{}", name(&running));
    let kcm = real_kcm(&cluster);
    wait_for_yield(&cluster, &kcm).await;
    let yielded = get_json(&client, &path).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = get_json(&client, &path).await;
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
    // kube-controller-manager finishes it, and the Succeeded is its own, never ours.
    let finished = wait_for_async(Duration::from_secs(120), || async {
        let migration = get_json(&client, &path).await;
        if succeeded(&migration) {
            Ok(migration)
        } else {
            Err(format!("not Succeeded yet: {migration:#}"))
        }
    })
    .await;
    assert!(
        owns_succeeded(&finished, "kube-controller-manager")
            && !owns_succeeded(&finished, "svm-apiserver-migrator"),
        "{finished:#}"
    );
    assert_eq!(
        status_write_time(&finished, "svm-apiserver-migrator"),
        status_write_time(&yielded, "svm-apiserver-migrator"),
        "svm-apiserver wrote after kube-controller-manager: {finished}"
    );
    wait_for_migrations(
        &cluster,
        Duration::from_secs(120),
        "the widgets StorageState safe after kube-controller-manager's success",
        || storage_state(&cluster, WIDGETS).filter(is_safe),
        || crate::world::describe_state(&cluster, WIDGETS),
    );
    // From here on, no one else is around.
    drop(kcm);

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
        "--companion-migrator=svm-apiserver: the built-in migration {} left to the real \
         kube-controller-manager when it wrote the status, and finished by it; the CRD move \
         ran by us on the built-in API, 300 widgets re-encoded as v2",
        name(&running)
    );
}
