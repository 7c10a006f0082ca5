//! Encryption at rest: kube-apiserver's key for Secrets rotates from K1 (aescbc) to K2
//! (secretbox) with a restart; a migration of `secrets` leaves every Secret under K2 in etcd.

use base64::Engine as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use crate::support::real_cluster::RealCluster;
use crate::world::{create_many, failed, succeeded};

const SECRETS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_encryption_key_is_applied_to_every_secret() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("encryption.yaml");
    std::fs::write(&config, encryption_config(&[Key::K1])).expect("encryption config");
    let flag = format!("--encryption-provider-config={}", config.display());
    let Some(mut cluster) = RealCluster::start(
        "a_rotated_encryption_key_is_applied_to_every_secret",
        &[&flag],
        // Manual migrations only: a key rotation changes no storage version hash, so no
        // trigger could see it; the user creates the migration.
        &["--qps=0", "--controllers=migrator"],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    kubectl.ok(&["create", "namespace", "demo"]);
    let client = cluster.plane.client().await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client,
        "demo",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret")),
    );
    create_many(&api, SECRETS, 16, |i| {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": format!("s-{i:04}")},
            "stringData": {"password": format!("hunter{i}")},
        })
    })
    .await;
    assert_eq!(secrets_under(&cluster, Key::K1).await, SECRETS);

    // K2 first: new writes use it; K1 stays to read what is still under it.
    std::fs::write(&config, encryption_config(&[Key::K2, Key::K1])).expect("rotate");
    cluster.plane.restart_apiserver(&[&flag]);
    cluster.wait_available();
    assert_eq!(
        secrets_under(&cluster, Key::K1).await,
        SECRETS,
        "a restart alone rewrites nothing"
    );

    kubectl.ok_stdin(
        &["create", "-f", "-"],
        r#"{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration",
            "metadata":{"name":"secrets-rotate"},"spec":{"resource":{"group":"","resource":"secrets"}}}"#,
    );
    kubectl.ok(&[
        "wait",
        "svm/secrets-rotate",
        "--for=condition=Succeeded",
        "--timeout=300s",
    ]);
    let migration: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "svm", "secrets-rotate", "-o", "json"]))
            .expect("JSON");
    assert!(succeeded(&migration) && !failed(&migration), "{migration}");

    let all = cluster.plane.etcd_get_prefix("/registry/secrets/").await;
    let under_k1 = secrets_under(&cluster, Key::K1).await;
    let under_k2 = secrets_under(&cluster, Key::K2).await;
    assert_eq!(under_k1, 0, "a secret is still under K1");
    assert_eq!(under_k2, all.len(), "every stored secret is under K2");
    assert!(under_k2 >= SECRETS);
    // Still readable through the API after the rotation.
    let one = kubectl.ok(&[
        "get",
        "secret",
        "-n",
        "demo",
        "s-0007",
        "-o",
        "jsonpath={.data.password}",
    ]);
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(one.trim())
        .expect("base64");
    assert_eq!(decoded, b"hunter7");
}

#[derive(Clone, Copy, PartialEq)]
enum Key {
    K1,
    K2,
}

impl Key {
    /// How etcd values under this key begin.
    fn prefix(self) -> &'static [u8] {
        match self {
            Key::K1 => b"k8s:enc:aescbc:v1:key1:",
            Key::K2 => b"k8s:enc:secretbox:v1:key2:",
        }
    }

    /// The provider entry (32-byte keys, base64).
    fn provider(self) -> serde_json::Value {
        match self {
            Key::K1 => json!({"aescbc": {"keys": [
                {"name": "key1", "secret": "MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE="}
            ]}}),
            Key::K2 => json!({"secretbox": {"keys": [
                {"name": "key2", "secret": "MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI="}
            ]}}),
        }
    }
}

/// An EncryptionConfiguration for Secrets with `keys` in order (the first encrypts writes),
/// plus `identity` last so nothing becomes unreadable. (JSON is YAML.)
fn encryption_config(keys: &[Key]) -> String {
    let mut providers: Vec<serde_json::Value> = keys.iter().map(|k| k.provider()).collect();
    providers.push(json!({"identity": {}}));
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"], "providers": providers}],
    })
    .to_string()
}

async fn secrets_under(cluster: &RealCluster, key: Key) -> usize {
    cluster
        .plane
        .etcd_get_prefix("/registry/secrets/")
        .await
        .iter()
        .filter(|(_, value)| value.starts_with(key.prefix()))
        .count()
}
