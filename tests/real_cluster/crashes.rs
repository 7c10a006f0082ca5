//! Crashes mid-migration on the real thing: svm-apiserver killed with SIGKILL, kube-apiserver
//! killed with SIGKILL, and etcd restarted, each while a CRD storage move is being migrated.
//! Each time the migration resumes and ends Succeeded, every object is re-encoded in etcd, the
//! StorageState ends safe and `status.storedVersions` narrows.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::real_cluster::RealCluster;
use crate::world::{
    failed, install_widgets, is_safe, migrations_of, name, storage_state, stored_json_objects,
    succeeded, wait_for_migrations,
};

/// Three checkpoints a migration, the crash after the first: 10 s of migration left to crash
/// into at `--qps=40`, however slow the machine (the limit is the server's, not the CPU's).
const WIDGETS: usize = 600;
const STATE: &str = "widgets.example.test";
const WIDGETS_PREFIX: &str = "/registry/example.test/widgets/demo/";

#[derive(Clone, Copy, Debug)]
enum Crash {
    Svm,
    KubeApiserver,
    Etcd,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_survive_sigkill_of_either_server_and_an_etcd_restart() {
    let Some(mut cluster) = RealCluster::start(
        "migrations_survive_sigkill_of_either_server_and_an_etcd_restart",
        &[],
        // Slow enough to be caught mid-way, with a checkpoint every 200 objects.
        &["--qps=40", "--burst=10", "--chunk-size=200"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    install_widgets(&cluster.plane, &["v1", "v2", "v3"], WIDGETS).await;
    wait_for_migrations(
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

    for (index, (crash, to)) in [(Crash::Svm, 1), (Crash::KubeApiserver, 2), (Crash::Etcd, 0)]
        .into_iter()
        .enumerate()
    {
        let before: Vec<String> = migrations_of(&cluster, STATE).iter().map(name).collect();
        let new = |m: &Value| !before.contains(&name(m));
        move_storage_to(&cluster, to);
        let version = format!("v{}", to + 1);
        let migration = wait_for_migrations(
            &cluster,
            Duration::from_secs(120),
            "a migration of the move with a checkpoint",
            || {
                migrations_of(&cluster, STATE)
                    .into_iter()
                    .find(|m| new(m) && progress(m) > 0 && !succeeded(m))
            },
            || kubectl.run(&["get", "svm"]).stdout,
        );
        let at = progress(&migration);
        match crash {
            Crash::Svm => cluster.restart_svm(),
            Crash::KubeApiserver => {
                cluster.plane.kill_apiserver();
                cluster.plane.start_apiserver_again();
                cluster.wait_available();
            }
            Crash::Etcd => {
                cluster.plane.etcd.restart();
                cluster.wait_available();
            }
        }
        let state = wait_for_migrations(
            &cluster,
            Duration::from_secs(300),
            "the move migrated after the crash",
            || {
                let state = storage_state(&cluster, STATE)?;
                let done = migrations_of(&cluster, STATE)
                    .iter()
                    .any(|m| new(m) && succeeded(m));
                let narrowed = stored_versions(&cluster) == json!([version]);
                (done && narrowed && is_safe(&state)).then_some(state)
            },
            || {
                format!(
                    "{}\n{}\nsvm-apiserver log:\n{}",
                    kubectl
                        .run(&["get", "storagestates", STATE, "-o", "yaml"])
                        .stdout,
                    kubectl.run(&["get", "svm"]).stdout,
                    cluster.svm.log()
                )
            },
        );
        let all = migrations_of(&cluster, STATE);
        assert!(!all.iter().any(failed), "{all:#?}");
        let done: Vec<String> = all
            .iter()
            .filter(|m| new(m) && succeeded(m))
            .map(name)
            .collect();
        assert_eq!(
            done.len(),
            1,
            "one migration of move {index} succeeded: {done:?}"
        );
        assert_eq!(
            stored_json_objects(&cluster, WIDGETS_PREFIX, &format!("example.test/{version}")).await,
            WIDGETS,
            "every widget re-encoded in {version} after a crash of {crash:?}"
        );
        eprintln!(
            "{crash:?} killed at {at} of {WIDGETS} objects: the migration resumed and succeeded; \
             state current {}",
            state["status"]["currentStorageVersionHash"]
        );
    }
}

/// The CRD's storage version becomes `versions[to]`.
pub(crate) fn move_storage_to(cluster: &RealCluster, to: usize) {
    let ops: Vec<Value> = (0..3)
        .map(|i| json!({"op": "replace", "path": format!("/spec/versions/{i}/storage"), "value": i == to}))
        .collect();
    cluster.kubectl().ok(&[
        "patch",
        "crd",
        "widgets.example.test",
        "--type=json",
        "-p",
        &Value::Array(ops).to_string(),
    ]);
}

pub(crate) fn stored_versions(cluster: &RealCluster) -> Value {
    let out = cluster.kubectl().ok(&[
        "get",
        "crd",
        "widgets.example.test",
        "-o",
        "jsonpath={.status.storedVersions}",
    ]);
    serde_json::from_str(out.trim()).unwrap_or(Value::Null)
}

pub(crate) fn progress(migration: &Value) -> i64 {
    migration["status"]["progress"]["migratedObjects"]
        .as_i64()
        .unwrap_or(0)
}
