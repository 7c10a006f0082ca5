//! The HTTP layer's unit tests run on the real registry: a test kind (`Thing` in
//! `test.example.io`, versions v1 and v1beta1, with `/status`) whose store is the generic
//! `Store` over the in-memory embedded backend, so what the router is tested against is what
//! serves the real kinds. Besides it, a `Storage` whose health can be switched off (for the
//! health endpoints).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use svm_registry::{
    ApiError, ApiResult, FieldError, Registry, ResourceInfo, RestStorage, Store, Strategy,
    TableColumn,
};
use svm_storage::embedded::EmbeddedStorage;
use svm_storage::{self as storage, ListOptions, ListResult, Revision, Storage, Txn, TxnOutcome};

pub(crate) const GROUP: &str = "test.example.io";

static INFO: ResourceInfo = ResourceInfo {
    group: GROUP,
    kind: "Thing",
    list_kind: "ThingList",
    plural: "things",
    singular: "thing",
    short_names: &["th"],
    categories: &["all"],
    versions: &["v1", "v1beta1"],
    storage_version: "v1",
    namespaced: false,
    has_status_subresource: true,
};

/// A `Thing`: a size, and a free-form status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Thing {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: ThingSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct ThingSpec {
    #[serde(default)]
    size: i64,
}

impl k8s_openapi::Resource for Thing {
    const API_VERSION: &'static str = "test.example.io/v1";
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "Thing";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "things";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for Thing {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The name whose table row panics: how the tests reach the router's panic guard.
pub(crate) const PANICS: &str = "panic";

/// `Thing`'s strategy: the same shape in both versions, `spec.size` at least 0.
pub(crate) struct ThingStrategy;

impl Strategy for ThingStrategy {
    type Object = Thing;

    fn info(&self) -> &ResourceInfo {
        &INFO
    }

    fn decode(&self, version: &str, mut value: Value) -> ApiResult<Thing> {
        if let Value::Object(map) = &mut value {
            map.shift_remove("apiVersion");
            map.shift_remove("kind");
        }
        serde_json::from_value(value).map_err(|e| {
            ApiError::BadRequest(format!(
                "Thing in version {version:?} cannot be handled as a Thing: {e}"
            ))
        })
    }

    fn encode(&self, version: &str, obj: &Thing) -> ApiResult<Value> {
        let body = serde_json::to_value(obj).map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut out = serde_json::Map::new();
        out.insert("kind".into(), json!("Thing"));
        out.insert("apiVersion".into(), json!(format!("{GROUP}/{version}")));
        if let Value::Object(fields) = body {
            out.extend(fields);
        }
        Ok(Value::Object(out))
    }

    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        let name = self.definition_name(version);
        vec![
            (
                name.clone(),
                json!({
                    "description": "A thing.",
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                        "spec": {"$ref": format!("#/components/schemas/{name}Spec")},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                    "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "Thing", "version": version}],
                }),
            ),
            (
                format!("{name}Spec"),
                json!({"type": "object", "properties": {"size": {"type": "integer", "description": "How big."}}}),
            ),
        ]
    }

    fn definition_name(&self, version: &str) -> String {
        format!("io.example.test.{version}.Thing")
    }

    fn prepare_for_create(&self, obj: &mut Thing) {
        obj.status = None;
    }

    fn prepare_for_update(&self, new: &mut Thing, old: &Thing) {
        new.status = old.status.clone();
    }

    fn prepare_for_status_update(&self, new: &mut Thing, old: &Thing) {
        new.spec = old.spec.clone();
    }

    fn validate(&self, obj: &Thing) -> Vec<FieldError> {
        if obj.spec.size < 0 {
            return vec![FieldError::invalid(
                "spec.size",
                &obj.spec.size.to_string(),
                "must be greater than or equal to 0",
            )];
        }
        Vec::new()
    }

    fn validate_update(&self, new: &Thing, _old: &Thing) -> Vec<FieldError> {
        self.validate(new)
    }

    fn validate_status_update(&self, _new: &Thing, _old: &Thing) -> Vec<FieldError> {
        Vec::new()
    }

    fn spec_changed(&self, new: &Thing, old: &Thing) -> bool {
        new.spec != old.spec
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        vec![
            TableColumn {
                name: "Name",
                type_: "string",
                format: "name",
                description: "Name of the thing.",
                priority: 0,
            },
            TableColumn {
                name: "Size",
                type_: "integer",
                format: "",
                description: "How big.",
                priority: 0,
            },
        ]
    }

    fn table_row(&self, obj: &Thing) -> Vec<Value> {
        let name = obj.metadata.name.clone().unwrap_or_default();
        assert!(name != PANICS, "the test kind panics on request");
        vec![json!(name), json!(obj.spec.size)]
    }
}

/// The test kind's store, over a fresh in-memory embedded backend (returned too, for tests
/// that compact it).
pub(crate) fn things_with_storage() -> (Arc<Store<ThingStrategy>>, Arc<EmbeddedStorage>) {
    let storage = Arc::new(EmbeddedStorage::in_memory());
    let store = Arc::new(Store::new(ThingStrategy, storage.clone(), "/server-test"));
    (store, storage)
}

/// The test kind, served by the real registry over a fresh in-memory backend.
pub(crate) fn things() -> Arc<dyn RestStorage> {
    things_with_storage().0
}

/// A `Storage` that only answers `health`, switchable for /readyz tests.
pub(crate) struct HealthSwitch {
    pub healthy: AtomicBool,
}

impl HealthSwitch {
    pub(crate) fn new(healthy: bool) -> Arc<Self> {
        Arc::new(Self {
            healthy: AtomicBool::new(healthy),
        })
    }
}

fn unused<T>() -> storage::Result<T> {
    Err(storage::StorageError::unavailable("not used by HTTP tests"))
}

#[async_trait]
impl Storage for HealthSwitch {
    async fn current_revision(&self) -> storage::Result<Revision> {
        unused()
    }
    async fn get(&self, _key: &str) -> storage::Result<Option<storage::KeyValue>> {
        unused()
    }
    async fn list(&self, _prefix: &str, _opts: ListOptions) -> storage::Result<ListResult> {
        unused()
    }
    async fn txn(&self, _txn: Txn) -> storage::Result<TxnOutcome> {
        unused()
    }
    async fn watch(
        &self,
        _prefix: &str,
        _after: Revision,
    ) -> storage::Result<storage::WatchStream> {
        unused()
    }
    async fn compact(&self, _revision: Revision) -> storage::Result<()> {
        unused()
    }
    async fn health(&self) -> storage::Result<()> {
        if self.healthy.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(storage::StorageError::unavailable("etcd is unreachable"))
        }
    }
}

/// A registry with the one test resource.
pub(crate) fn registry_with(resource: Arc<dyn RestStorage>) -> Registry {
    let mut registry = Registry::new();
    registry.register(resource);
    registry
}
