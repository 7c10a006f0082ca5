//! The cluster's own StorageVersionMigration API — `storagemigration.k8s.io` served by
//! kube-apiserver itself (1.30+ behind the `StorageVersionMigrator` gate, on by default from
//! 1.37) — as companion mode uses it: the trigger creates, reads and deletes its migrations
//! there, and the migrator (when kube-controller-manager's is switched off) runs them and
//! writes their status there. Objects are read into the internal form through the same
//! conversions this server serves its own versions with, so the trigger's planning and the
//! migrator's runner treat both alike.

use http::Method;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{ClusterClient, ClusterError};
use crate::watches::{self, Update};
use svm_api::GROUP;
use svm_api::migration::{KIND, MigrationStrategy, StorageVersionMigration};
use svm_registry::Strategy;

/// The built-in API in one served version (the cluster's preferred: `v1` on 1.37+, `v1beta1`
/// on 1.35–1.36, `v1alpha1` on 1.30–1.34).
#[derive(Clone, Debug)]
pub struct BuiltinMigrations {
    client: ClusterClient,
    version: String,
}

fn form_encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

impl BuiltinMigrations {
    /// The built-in API in `version`, reached through `client`.
    pub fn new(client: ClusterClient, version: &str) -> Self {
        Self {
            client,
            version: version.to_string(),
        }
    }

    /// The served version this talks in (`v1`, `v1beta1` or `v1alpha1`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `storagemigration.k8s.io/<version>`, the `apiVersion` of the objects.
    pub fn api_version(&self) -> String {
        format!("{GROUP}/{}", self.version)
    }

    fn collection(&self) -> String {
        format!("/apis/{GROUP}/{}/storageversionmigrations", self.version)
    }

    /// Names are DNS subdomains (validated by the server that created them): no escaping.
    fn object_path(&self, name: &str) -> String {
        format!("{}/{name}", self.collection())
    }

    /// A built-in object in the internal form.
    pub fn decode(&self, value: Value) -> Result<StorageVersionMigration, ClusterError> {
        MigrationStrategy
            .decode(&self.version, value)
            .map_err(|source| ClusterError::Kind {
                what: format!("a built-in {KIND}"),
                source: Box::new(source),
            })
    }

    fn encode(&self, migration: &StorageVersionMigration) -> Result<Vec<u8>, ClusterError> {
        let value = MigrationStrategy
            .encode(&self.version, migration)
            .map_err(|source| ClusterError::Kind {
                what: format!("encoding a {KIND}"),
                source: Box::new(source),
            })?;
        serde_json::to_vec(&value).map_err(ClusterError::encode(format!("a {KIND}")))
    }

    /// Every migration, or those `label_selector` selects.
    pub async fn list(
        &self,
        label_selector: Option<&str>,
    ) -> Result<Vec<StorageVersionMigration>, ClusterError> {
        let mut path = self.collection();
        if let Some(selector) = label_selector {
            path.push_str(&format!("?labelSelector={}", form_encode(selector)));
        }
        let list: Value = self.client.get_json(&path).await?;
        match list.get("items") {
            Some(Value::Array(items)) => items.iter().map(|i| self.decode(i.clone())).collect(),
            // Go encodes an empty list as null.
            _ => Ok(Vec::new()),
        }
    }

    /// The migration `name` in the internal form; `None` when it does not exist.
    pub async fn get(&self, name: &str) -> Result<Option<StorageVersionMigration>, ClusterError> {
        match self.client.get_json::<Value>(&self.object_path(name)).await {
            Ok(value) => self.decode(value).map(Some),
            Err(err) if err.is_not_found() => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Creates `migration` (its status is the server's to set): a 409 AlreadyExists is an
    /// [`ClusterError::Api`] with code 409 and reason `AlreadyExists`.
    pub async fn create(
        &self,
        migration: &StorageVersionMigration,
        field_manager: &str,
    ) -> Result<StorageVersionMigration, ClusterError> {
        let mut fresh = migration.clone();
        fresh.status = Default::default();
        let path = format!(
            "{}?fieldManager={}",
            self.collection(),
            form_encode(field_manager)
        );
        let answer = self
            .client
            .request(
                Method::POST,
                &path,
                "application/json",
                Some(("application/json", self.encode(&fresh)?)),
            )
            .await?;
        self.decode_answer(&answer.body)
    }

    /// Deletes `name` if it still has `uid` (when given: a migration of that name made again
    /// since is a 409, not deleted); `Ok(false)` when it was already gone.
    pub async fn delete(&self, name: &str, uid: Option<&str>) -> Result<bool, ClusterError> {
        let body = match uid {
            Some(uid) => {
                let options = serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "preconditions": {"uid": uid},
                });
                let bytes =
                    serde_json::to_vec(&options).map_err(ClusterError::encode("DeleteOptions"))?;
                Some(("application/json", bytes))
            }
            None => None,
        };
        match self
            .client
            .request(
                Method::DELETE,
                &self.object_path(name),
                "application/json",
                body,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(err) if err.is_not_found() => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Writes `migration`'s status (`PUT …/status`, its resourceVersion the precondition:
    /// a concurrent write is a 409) as `field_manager`, which managedFields record.
    pub async fn update_status(
        &self,
        migration: &StorageVersionMigration,
        field_manager: &str,
    ) -> Result<StorageVersionMigration, ClusterError> {
        let name = migration.metadata.name.clone().unwrap_or_default();
        let path = format!(
            "{}/status?fieldManager={}",
            self.object_path(&name),
            form_encode(field_manager)
        );
        let answer = self
            .client
            .request(
                Method::PUT,
                &path,
                "application/json",
                Some(("application/json", self.encode(migration)?)),
            )
            .await?;
        self.decode_answer(&answer.body)
    }

    fn decode_answer(&self, body: &[u8]) -> Result<StorageVersionMigration, ClusterError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(ClusterError::decode(format!("a {KIND} answer")))?;
        self.decode(value)
    }

    /// Lists and watches the migrations `label_selector` selects, with the one list+watch
    /// helper; objects that do not decode are reported as a failed watch.
    pub fn watch<T: Send + 'static>(
        &self,
        label_selector: Option<&str>,
        out: mpsc::Sender<T>,
        wrap: fn(Update<DynamicObject>) -> T,
    ) -> JoinHandle<()> {
        let gvk = GroupVersionKind::gvk(GROUP, &self.version, KIND);
        let api = kube::Api::<DynamicObject>::all_with(
            self.client.kube().clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "storageversionmigrations"),
        );
        let mut config = watcher::Config::default();
        if let Some(selector) = label_selector {
            config = config.labels(selector);
        }
        watches::watch(api, config, out, wrap)
    }

    /// A watched object in the internal form.
    pub fn from_dynamic(
        &self,
        object: DynamicObject,
    ) -> Result<StorageVersionMigration, ClusterError> {
        let value = serde_json::to_value(&object)
            .map_err(ClusterError::encode(format!("a {KIND} read by a watch")))?;
        self.decode(value)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn builtin(version: &str) -> BuiltinMigrations {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        BuiltinMigrations::new(ClusterClient::from_config(config).expect("client"), version)
    }

    #[tokio::test]
    async fn a_built_in_v1beta1_object_reads_into_the_internal_form() {
        // As kube-apiserver 1.36 answers it, with kube-controller-manager's status.
        let object = json!({
            "apiVersion": "storagemigration.k8s.io/v1beta1",
            "kind": "StorageVersionMigration",
            "metadata": {
                "name": "widgets.example.test-2",
                "uid": "0b1f",
                "resourceVersion": "812",
                "labels": {"app.kubernetes.io/managed-by": "svm-apiserver-trigger"},
                "managedFields": [{
                    "manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "storagemigration.k8s.io/v1beta1",
                    "time": "2026-11-23T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {}}, "subresource": "status"
                }]
            },
            "spec": {"resource": {"group": "example.test", "resource": "widgets"}},
            "status": {
                "resourceVersion": "800",
                "conditions": [{
                    "type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-23T10:00:00Z",
                    "reason": "StorageVersionMigrationSucceeded", "message": ""
                }, {
                    "type": "AssociatedCRD", "status": "True", "lastTransitionTime": "2026-11-23T10:00:00Z",
                    "reason": "AssociatedCRD", "message": "There is an associated crd for this migration",
                    "observedGeneration": 2
                }]
            }
        });
        let migration = builtin("v1beta1").decode(object).expect("decodes");
        assert_eq!(migration.spec.resource.resource, "widgets");
        assert!(migration.condition_true("Succeeded").is_some());
        assert_eq!(migration.status.resource_version, "800");
        let managed = migration
            .metadata
            .managed_fields
            .as_ref()
            .expect("managedFields kept");
        assert_eq!(
            managed[0].manager.as_deref(),
            Some("kube-controller-manager")
        );
        assert_eq!(managed[0].subresource.as_deref(), Some("status"));
    }

    #[tokio::test]
    async fn what_is_sent_is_the_built_in_shape_of_the_version() {
        let mut migration = StorageVersionMigration::default();
        migration.metadata.name = Some("secrets-1".into());
        migration.spec.resource.resource = "secrets".into();
        for (version, api_version) in [
            ("v1", "storagemigration.k8s.io/v1"),
            ("v1beta1", "storagemigration.k8s.io/v1beta1"),
        ] {
            let body: Value =
                serde_json::from_slice(&builtin(version).encode(&migration).expect("encodes"))
                    .expect("json");
            assert_eq!(body["apiVersion"], api_version);
            assert_eq!(body["kind"], "StorageVersionMigration");
            assert_eq!(
                body["spec"]["resource"],
                json!({"group": "", "resource": "secrets"})
            );
        }
        assert_eq!(
            builtin("v1").object_path("secrets-1"),
            "/apis/storagemigration.k8s.io/v1/storageversionmigrations/secrets-1"
        );
    }
}
