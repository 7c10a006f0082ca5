//! Handing over: the upgrade to a cluster that serves the group under a running server, and our unfinished migrations moving to the cluster's API.

use super::*;

/// Widgets in the upgrade test.
const HANDOVER_WIDGETS: usize = 400;

/// The upgrade: svm-apiserver owns the group (deploy/), then the cluster starts serving it
/// (kube-apiserver restarted with the group on, as an upgrade to 1.37 does) and the real
/// kube-controller-manager comes up with the StorageVersionMigrator gate. Our APIServices
/// shadow the cluster's, so kube-controller-manager's migrator reaches our migrations through
/// them (protobuf, its default): the guard sees its status write on the migration ours is
/// running, stops ours and says so; kube-controller-manager runs it to its end and the trigger
/// follows that success. Then the documented path — our APIServices of the group deleted, the
/// project group kept, kube-apiserver restarted — and the server (auto) moves to companion mode
/// by itself, with its StorageStates and history; from then on the same kube-controller-manager
/// runs the trigger's migrations on the cluster's API (a CRD move: every widget re-encoded in
/// etcd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_to_a_cluster_that_serves_the_group_hands_over_without_two_migrators() {
    let Some(assets) =
        assets("the_upgrade_to_a_cluster_that_serves_the_group_hands_over_without_two_migrators")
    else {
        return;
    };
    let mut cluster =
        RealCluster::start_registered_after(&assets, &[], Registration::Owner, |plane| {
            let ignored = builtin_resources(plane);
            // The widgets exist before the server starts: its first start's migration of them
            // has all of them to do (one made with the CRD, before them, would find none).
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(crate::world::install_widgets(
                    plane,
                    &["v1", "v2"],
                    HANDOVER_WIDGETS,
                ))
            });
            vec![
                "--api-mode=auto".into(),
                // Slow enough that the widgets' migration is still running when the cluster
                // upgrades ...
                "--qps=4".into(),
                "--burst=4".into(),
                "--chunk-size=10".into(),
                // ... and only theirs: at 4 requests a second the first start's migrations of
                // every built-in resource took over two minutes before the widgets' began.
                format!("--trigger-ignore-resources={ignored}"),
            ]
        });
    let client = cluster.plane.client().await;
    wait_for_mode(&cluster, "owner").await;
    let migration = wait_for_migrations(
        &cluster,
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

    // kube-controller-manager, upgraded with the cluster, reaches our migrations through our
    // APIService and takes the running one.
    let kcm = real_kcm(&cluster);
    let path =
        format!("/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations/{migration_name}");

    // Ours notices, stops, and says so.
    wait_for_yield(&cluster, &kcm).await;
    let log = cluster.svm.log();
    assert!(
        log.contains("another migrator works on this migration"),
        "{log}"
    );
    assert!(log.contains(DOCS), "{log}");
    let yielded_at = get_json(&client, &path).await;
    // kube-controller-manager runs it to its end (its status written through our /status).
    let finished = wait_for_async(Duration::from_secs(180), || async {
        let migration = get_json(&client, &path).await;
        if succeeded(&migration) {
            Ok(migration)
        } else {
            Err(format!(
                "not Succeeded yet: {migration:#}\nkube-controller-manager's errors:\n{}",
                kcm.errors().join("\n")
            ))
        }
    })
    .await;
    assert!(
        owns_succeeded(&finished, "kube-controller-manager")
            && !owns_succeeded(&finished, "svm-apiserver-migrator"),
        "{finished:#}"
    );
    // From the yield on, svm-apiserver's migrator writes nothing to it: after a while its
    // status is still what kube-controller-manager left.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = get_json(&client, &path).await;
    // kube-controller-manager may write again after its Succeeded (seen under load: three
    // more writes within 10 s), and such a write may take over fields another manager owned
    // (that manager's entry shrinks or goes, its time unchanged); nobody else may write.
    let others_writes = written_since(&finished, &later, "kube-controller-manager");
    assert!(
        others_writes.is_empty(),
        "written after kube-controller-manager's success by another manager: {others_writes:#?}\n\
         managedFields then {:#}\nlater {:#}",
        finished["metadata"]["managedFields"],
        later["metadata"]["managedFields"]
    );
    // Its typed client has no `progress`, so its status writes leave ours as our migrator
    // last checkpointed it before the yield (docs/api.md: a write without progress keeps
    // it), and no checkpoint of ours comes after.
    assert!(
        later["status"]["progress"]["migratedObjects"]
            .as_i64()
            .unwrap_or(0)
            > 0,
        "{later}"
    );
    assert_eq!(
        later["status"]["progress"], yielded_at["status"]["progress"],
        "{later}"
    );
    assert_eq!(
        status_write_time(&later, "svm-apiserver-migrator"),
        status_write_time(&yielded_at, "svm-apiserver-migrator"),
        "svm-apiserver wrote after kube-controller-manager: {later}"
    );
    wait_for_migrations(
        &cluster,
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

    // From now on the trigger's migrations are the cluster's, and kube-controller-manager runs
    // them there.
    let before_hash = state_after["status"]["currentStorageVersionHash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    move_widgets_storage_to_v2(&cluster);
    let switched = std::time::Instant::now();
    let moved = widgets_safe_after_a_builtin_migration(&cluster, &client, &before_hash).await;
    let switched = switched.elapsed();
    assert_widgets_stored_as(&cluster, "v2", HANDOVER_WIDGETS).await;
    assert_migrated_by_kcm(&newest_widgets_migration(&client).await);
    assert_eq!(stored_versions(&cluster), r#"["v2"]"#);
    eprintln!(
        "upgrade under a running server: migration {migration_name} left to the real \
         kube-controller-manager when it wrote the status through our API, and finished by it; \
         the state narrowed on its success; after the documented switch, companion mode with {} history entries kept, the CRD move \
         {before_hash} -> {} run by kube-controller-manager on the cluster's API ({HANDOVER_WIDGETS} widgets \
         re-encoded in etcd), safe {:.1} s after the switch",
        history_before.len(),
        moved["status"]["currentStorageVersionHash"],
        switched.as_secs_f64()
    );
    drop(kcm);
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
    eventually_async_every(
        Duration::from_secs(120),
        POLL,
        "a trigger migration of secrets in our store",
        async || {
            let ours = in_our_store(&cluster).await;
            if ours.iter().any(|n| n.starts_with("secrets-")) {
                Ok(())
            } else {
                Err(format!("{ours:?}"))
            }
        },
        async || format!("log:\n{}", cluster.svm.log()),
    )
    .await;

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
    eventually_async(
        Duration::from_secs(60),
        "nothing left in our store",
        async || {
            let ours = in_our_store(&cluster).await;
            if ours.is_empty() {
                Ok(())
            } else {
                Err(format!("{ours:?}"))
            }
        },
    )
    .await;
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

/// The managedFields entries of `later`, of every manager but `except`, that record a write
/// made since `then`: an entry `then` had no entry for (same manager, operation and
/// subresource), or one with another time. An entry that shrank or went while keeping its time
/// is another manager taking fields over, not a write by its own manager.
fn written_since(then: &Value, later: &Value, except: &str) -> Vec<Value> {
    let entries = |object: &Value| -> Vec<Value> {
        object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry["manager"] != except)
            .cloned()
            .collect()
    };
    let same_writer = |a: &Value, b: &Value| {
        ["manager", "operation", "subresource"]
            .iter()
            .all(|key| a[key] == b[key])
    };
    let before = entries(then);
    entries(later)
        .into_iter()
        .filter(|entry| {
            !before
                .iter()
                .any(|old| same_writer(old, entry) && old["time"] == entry["time"])
        })
        .collect()
}

#[test]
fn a_write_shows_as_a_new_or_newer_entry_and_a_takeover_does_not() {
    let entry = |manager: &str, time: &str, fields: Value| {
        json!({"manager": manager, "operation": "Update", "subresource": "status",
                           "time": time, "fieldsV1": fields})
    };
    let object = |entries: Vec<Value>| json!({"metadata": {"managedFields": entries}});
    let then = object(vec![
        entry("ours", "t1", json!({"f:a": {}, "f:b": {}})),
        entry("kcm", "t2", json!({"f:c": {}})),
    ]);
    let taken_over = object(vec![
        entry("ours", "t1", json!({"f:a": {}})),
        entry("kcm", "t3", json!({"f:b": {}, "f:c": {}})),
    ]);
    assert!(written_since(&then, &taken_over, "kcm").is_empty());
    let rewritten = object(vec![entry("ours", "t4", json!({"f:a": {}}))]);
    assert_eq!(written_since(&then, &rewritten, "kcm").len(), 1);
    let newcomer = object(vec![
        entry("ours", "t1", json!({"f:a": {}})),
        entry("trigger", "t1", json!({"f:d": {}})),
    ]);
    assert_eq!(
        written_since(&then, &newcomer, "kcm")[0]["manager"],
        "trigger"
    );
}

/// Every resource kube-apiserver serves now (`resource.group`, as `--trigger-ignore-resources`
/// takes them; the flag's default, the events, among them).
fn builtin_resources(plane: &ControlPlane) -> String {
    let served = plane.kubectl().ok(&["api-resources", "-o", "name"]);
    let names: Vec<&str> = served.lines().map(str::trim).collect();
    assert!(names.contains(&"events.events.k8s.io"), "{served}");
    names.join(",")
}
