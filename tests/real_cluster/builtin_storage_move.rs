//! A built-in resource's storage version moves with a kube-apiserver restart, as an upgrade
//! moves it: kube-apiserver 1.36 emulating 1.33 stores VolumeAttributesClasses as
//! `storage.k8s.io/v1beta1`; restarted as itself it stores them as `v1`. The trigger sees the
//! restart through the identity lease (discovery is polled only hourly here), records the new
//! hash, migrates, and every object ends in v1 in etcd.

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::support::real_cluster::RealCluster;
use crate::world::{
    create_many, describe_state, failed, is_safe, migrations_of, storage_state, succeeded,
    wait_for_migrations,
};

const CLASSES: usize = 200;
const STATE: &str = "volumeattributesclasses.storage.k8s.io";
/// kube-apiserver as a 1.33 would be: VolumeAttributesClass is beta there, served and stored
/// in v1beta1 when that version and the gate are on.
const AS_1_33: [&str; 3] = [
    "--emulated-version=1.33",
    "--runtime-config=storage.k8s.io/v1beta1=true",
    "--feature-gates=VolumeAttributesClass=true",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_moves_a_built_in_storage_version_is_seen_and_migrated() {
    let Some(mut cluster) = RealCluster::start(
        "an_upgrade_that_moves_a_built_in_storage_version_is_seen_and_migrated",
        &AS_1_33,
        &["--qps=0", "--discovery-interval=1h"],
    ) else {
        return;
    };
    let client = cluster.plane.client().await;
    let api: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "storage.k8s.io",
            "v1beta1",
            "VolumeAttributesClass",
        )),
    );
    create_many(&api, CLASSES, 16, |i| {
        json!({
            "apiVersion": "storage.k8s.io/v1beta1",
            "kind": "VolumeAttributesClass",
            "metadata": {"name": format!("class-{i:04}")},
            "driverName": "test.csi.example.com",
            "parameters": {"iops": i.to_string()},
        })
    })
    .await;
    let kubectl = cluster.kubectl();
    let before = wait_for_migrations(
        &cluster,
        Duration::from_secs(180),
        "the VolumeAttributesClass StorageState safe as 1.33",
        || storage_state(&cluster, STATE).filter(is_safe),
        || {
            format!(
                "{}\n{}\n{}",
                kubectl
                    .run(&["get", "storagestates", STATE, "-o", "yaml"])
                    .stdout,
                kubectl.run(&["get", "svm", "-o", "yaml"]).stdout,
                cluster.svm.log()
            )
        },
    );
    assert_eq!(stored_as(&cluster, "storage.k8s.io/v1beta1").await, CLASSES);

    let upgraded = Instant::now();
    cluster.plane.restart_apiserver(&[]);
    cluster.wait_available();
    let after = wait_for_migrations(
        &cluster,
        Duration::from_secs(180),
        "the StorageState safe on the new hash after a migration",
        || {
            let state = storage_state(&cluster, STATE)?;
            let moved = state["status"]["currentStorageVersionHash"]
                != before["status"]["currentStorageVersionHash"];
            let migrated = migrations_of(&cluster, STATE)
                .iter()
                .any(|m| succeeded(m) && m["metadata"]["name"] != json!(format!("{STATE}-1")));
            (moved && migrated && is_safe(&state)).then_some(state)
        },
        || describe_state(&cluster, STATE),
    );
    let took = upgraded.elapsed();
    assert!(!migrations_of(&cluster, STATE).iter().any(failed));
    assert_eq!(stored_as(&cluster, "storage.k8s.io/v1beta1").await, 0);
    assert_eq!(stored_as(&cluster, "storage.k8s.io/v1").await, CLASSES);

    // The history holds the move, with the apiserver that encodes it.
    let history = history(&cluster).await;
    let newest = history.last().expect("a history entry");
    assert_eq!(newest["hash"], after["status"]["currentStorageVersionHash"]);
    assert!(
        newest["apiserver"]
            .as_str()
            .is_some_and(|a| a.starts_with("apiserver-")),
        "{newest}"
    );
    eprintln!(
        "built-in storage move (VolumeAttributesClass v1beta1 -> v1) across a restart: {} -> {}, \
         {CLASSES} objects re-encoded, safe {:.1} s after the restart began; history: {}",
        before["status"]["currentStorageVersionHash"],
        after["status"]["currentStorageVersionHash"],
        took.as_secs_f64(),
        serde_json::to_string(&history).unwrap_or_default()
    );
}

/// How many VolumeAttributesClasses etcd holds encoded as `api_version` (built-ins are
/// protobuf: the apiVersion is a length-prefixed string in the envelope's TypeMeta).
async fn stored_as(cluster: &RealCluster, api_version: &str) -> usize {
    let mut field = vec![0x0a, api_version.len() as u8];
    field.extend_from_slice(api_version.as_bytes());
    cluster
        .plane
        .etcd_get_prefix("/registry/volumeattributesclasses/")
        .await
        .iter()
        .filter(|(_, value)| value.windows(field.len()).any(|w| w == field.as_slice()))
        .count()
}

async fn history(cluster: &RealCluster) -> Vec<Value> {
    let prefix = format!(
        "{}/hashhistory/storage.k8s.io/volumeattributesclasses/",
        cluster.svm.etcd_prefix().expect("svm-apiserver on etcd")
    );
    cluster
        .plane
        .etcd_get_prefix(&prefix)
        .await
        .iter()
        .map(|(_, value)| serde_json::from_slice(value).expect("a JSON history entry"))
        .collect()
}
