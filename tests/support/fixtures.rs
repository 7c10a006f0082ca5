//! Objects the tests send, written once.

use serde_json::{Value, json};

/// `/apis/storagemigration.k8s.io/v1/storageversionmigrations`.
pub const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

/// A v1 StorageVersionMigration of `deployments.apps` named `name`.
pub fn svm(name: &str) -> Value {
    json!({
        "apiVersion": "storagemigration.k8s.io/v1",
        "kind": "StorageVersionMigration",
        "metadata": {"name": name},
        "spec": {"resource": {"group": "apps", "resource": "deployments"}}
    })
}
