//! A CRD moves its storage version from v1 to v2 with 1 200 objects stored: the trigger sees
//! it, the migration rewrites every object (read back from etcd itself), the StorageState ends
//! safe on the new hash, and the CRD's `status.storedVersions` narrows to `[v2]`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::real_cluster::RealCluster;
use crate::world::{
    describe_state, failed, install_widgets, is_safe, migrations_of, storage_state,
    stored_json_objects, succeeded, wait_for_migrations,
};

/// More than two of kube-apiserver's list pages of 500, should the read fall back to pages; the
/// count is not the point here (scale is measured by `make bench-real`).
const WIDGETS: usize = 1_200;
const STATE: &str = "widgets.example.test";
const WIDGETS_PREFIX: &str = "/registry/example.test/widgets/demo/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_storage_move_rewrites_every_object_and_narrows_stored_versions() {
    let Some(cluster) = RealCluster::start(
        "a_crd_storage_move_rewrites_every_object_and_narrows_stored_versions",
        &[],
        &["--qps=0"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    let created = Instant::now();
    install_widgets(&cluster.plane, &["v1", "v2"], WIDGETS).await;
    eprintln!(
        "created {WIDGETS} widgets in {:.1} s",
        created.elapsed().as_secs_f64()
    );
    let before = wait_for_migrations(
        &cluster,
        Duration::from_secs(120),
        "the widgets StorageState safe on v1",
        || storage_state(&cluster, STATE).filter(is_safe),
        || {
            kubectl
                .run(&["get", "storagestates", STATE, "-o", "yaml"])
                .stdout
        },
    );
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v1").await,
        WIDGETS
    );

    let moved = Instant::now();
    kubectl.ok(&[
        "patch",
        "crd",
        "widgets.example.test",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},
            {"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
    ]);
    let after = wait_for_migrations(
        &cluster,
        Duration::from_secs(300),
        "the widgets StorageState safe on v2 after a migration",
        || {
            let state = storage_state(&cluster, STATE)?;
            let migrated = migrations_of(&cluster, STATE).iter().any(succeeded);
            (is_safe(&state)
                && state["status"]["currentStorageVersionHash"]
                    != before["status"]["currentStorageVersionHash"]
                && migrated)
                .then_some(state)
        },
        || describe_state(&cluster, STATE),
    );
    let took = moved.elapsed();
    let migrations = migrations_of(&cluster, STATE);
    assert!(!migrations.iter().any(failed), "{migrations:#?}");
    let migration = migrations
        .iter()
        .find(|m| succeeded(m))
        .expect("the succeeded migration");
    assert_eq!(
        migration["status"]["progress"]["migratedObjects"],
        json!(WIDGETS),
        "{migration}"
    );

    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v1").await,
        0
    );
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v2").await,
        WIDGETS
    );
    let stored_versions = kubectl.ok(&[
        "get",
        "crd",
        "widgets.example.test",
        "-o",
        "jsonpath={.status.storedVersions}",
    ]);
    assert_eq!(stored_versions.trim(), r#"["v2"]"#);
    eprintln!(
        "CRD storage move v1 -> v2: {WIDGETS} objects re-encoded, state {} -> {}, safe {:.1} s \
         after the switch (--qps 0)",
        before["status"]["currentStorageVersionHash"],
        after["status"]["currentStorageVersionHash"],
        took.as_secs_f64()
    );
}
