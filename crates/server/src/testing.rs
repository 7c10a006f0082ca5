//! Test doubles for the HTTP layer's unit tests: a small in-memory `RestStorage` (kind `Thing`
//! in `test.example.io`, versions v1 and v1beta1, with `/status`) and a `Storage` whose health
//! can be switched off.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;

use svm_registry::rest::{
    DeleteOptions, Deleted, GetOptions, ListParams, PatchType, Subresource, WatchEvent,
    WatchEventStream, WatchParams, WriteOptions, Written,
};
use svm_registry::{
    ApiError, ApiResult, ObjectRef, Registry, ResourceInfo, RestStorage, TableColumn,
};
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

/// An in-memory resource with just enough behaviour to drive every HTTP path.
pub(crate) struct MemoryResource {
    objects: Mutex<BTreeMap<String, Value>>,
    revision: AtomicI64,
    events: broadcast::Sender<WatchEvent>,
}

impl MemoryResource {
    pub(crate) fn new() -> Self {
        Self {
            objects: Mutex::new(BTreeMap::new()),
            revision: AtomicI64::new(1),
            events: broadcast::channel(64).0,
        }
    }

    pub(crate) fn arc() -> Arc<dyn RestStorage> {
        Arc::new(Self::new())
    }

    fn next_rv(&self) -> String {
        (self.revision.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }

    fn not_found(name: &str) -> ApiError {
        ApiError::NotFound {
            group: GROUP.into(),
            resource: "things".into(),
            name: name.into(),
        }
    }

    fn in_version(version: &str, mut object: Value) -> Value {
        object["apiVersion"] = json!(format!("{GROUP}/{version}"));
        object
    }

    fn check_version(version: &str) -> ApiResult<()> {
        if INFO.versions.contains(&version) {
            Ok(())
        } else {
            Err(ApiError::Internal(format!("unexpected version {version}")))
        }
    }

    fn store(&self, name: &str, mut object: Value, dry_run: bool) -> ApiResult<Value> {
        if !dry_run {
            object["metadata"]["resourceVersion"] = json!(self.next_rv());
            let mut objects = self.objects.lock().map_err(|_| poisoned())?;
            objects.insert(name.to_string(), object.clone());
        }
        Ok(object)
    }

    fn emit(&self, event_type: &'static str, object: &Value) {
        // No receiver is fine: nobody is watching.
        let _ = self.events.send(WatchEvent {
            event_type,
            object: object.clone(),
        });
    }

    fn current(&self, name: &str) -> ApiResult<Value> {
        let objects = self.objects.lock().map_err(|_| poisoned())?;
        objects
            .get(name)
            .cloned()
            .ok_or_else(|| Self::not_found(name))
    }

    fn list_value(&self, version: &str, params: &ListParams) -> ApiResult<Value> {
        let objects = self.objects.lock().map_err(|_| poisoned())?;
        let limit = params.limit.filter(|l| *l > 0).map(|l| l as usize);
        let all: Vec<Value> = objects
            .values()
            .map(|o| Self::in_version(version, o.clone()))
            .collect();
        let shown = limit.unwrap_or(all.len()).min(all.len());
        let mut metadata =
            json!({"resourceVersion": self.revision.load(Ordering::SeqCst).to_string()});
        if shown < all.len() {
            metadata["continue"] = json!("next");
            metadata["remainingItemCount"] = json!(all.len() - shown);
        }
        Ok(json!({
            "apiVersion": format!("{GROUP}/{version}"),
            "kind": "ThingList",
            "metadata": metadata,
            "items": all[..shown].to_vec(),
        }))
    }
}

impl Default for MemoryResource {
    fn default() -> Self {
        Self::new()
    }
}

fn poisoned() -> ApiError {
    ApiError::Internal("lock poisoned".into())
}

#[async_trait]
impl RestStorage for MemoryResource {
    fn info(&self) -> &ResourceInfo {
        &INFO
    }

    fn protobuf(&self) -> Option<&'static dyn svm_registry::protobuf::ProtobufKind> {
        None
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

    fn table_row(&self, _version: &str, object: &Value) -> ApiResult<Vec<Value>> {
        Ok(vec![
            object["metadata"]["name"].clone(),
            object.pointer("/spec/size").cloned().unwrap_or(Value::Null),
        ])
    }

    async fn get(&self, version: &str, at: ObjectRef<'_>, _opts: &GetOptions) -> ApiResult<Value> {
        Self::check_version(version)?;
        let name = at.name;
        if name == "panic" {
            panic!("the test double panics on request");
        }
        Ok(Self::in_version(version, self.current(name)?))
    }

    async fn list(
        &self,
        version: &str,
        _namespace: Option<&str>,
        params: &ListParams,
    ) -> ApiResult<Value> {
        Self::check_version(version)?;
        if params.label_selector.as_deref() == Some("bad selector") {
            return Err(ApiError::BadRequest("unable to parse requirement".into()));
        }
        self.list_value(version, params)
    }

    async fn watch(
        &self,
        version: &str,
        _namespace: Option<&str>,
        params: &WatchParams,
    ) -> ApiResult<WatchEventStream> {
        Self::check_version(version)?;
        let version = version.to_string();
        if params.resource_version.as_deref() == Some("1") {
            let expired = ApiError::Expired {
                message: "too old resource version: 1 (5)".into(),
                continue_token: None,
            };
            let event = WatchEvent {
                event_type: "ERROR",
                object: expired.to_status(),
            };
            return Ok(futures::stream::iter(vec![event]).boxed());
        }
        let mut initial = Vec::new();
        if params.send_initial_events == Some(true) {
            let list = self.list_value(&version, &ListParams::default())?;
            for item in list["items"].as_array().cloned().unwrap_or_default() {
                initial.push(WatchEvent {
                    event_type: "ADDED",
                    object: item,
                });
            }
            if params.allow_watch_bookmarks {
                initial.push(WatchEvent {
                    event_type: "BOOKMARK",
                    object: json!({
                        "kind": "Thing",
                        "apiVersion": format!("{GROUP}/{version}"),
                        "metadata": {
                            "resourceVersion": list["metadata"]["resourceVersion"],
                            "annotations": {"k8s.io/initial-events-end": "true"},
                        },
                    }),
                });
            }
        }
        let live = BroadcastStream::new(self.events.subscribe()).filter_map(move |event| {
            let version = version.clone();
            async move {
                event.ok().map(|e| WatchEvent {
                    event_type: e.event_type,
                    object: Self::in_version(&version, e.object),
                })
            }
        });
        Ok(futures::stream::iter(initial).chain(live).boxed())
    }

    async fn create(
        &self,
        version: &str,
        _namespace: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        Self::check_version(version)?;
        let name = body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            return Err(ApiError::Invalid {
                group: GROUP.into(),
                kind: "Thing".into(),
                name: String::new(),
                causes: vec![svm_registry::FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            });
        }
        if self.current(&name).is_ok() {
            return Err(ApiError::AlreadyExists {
                group: GROUP.into(),
                resource: "things".into(),
                name,
            });
        }
        let mut warnings = Vec::new();
        let mut object = body;
        if object.get("bogus").is_some() {
            warnings.push("unknown field \"bogus\"".to_string());
            if let Some(map) = object.as_object_mut() {
                map.remove("bogus");
            }
        }
        object["metadata"]["uid"] = json!(format!("uid-{name}"));
        let stored = self.store(&name, object, opts.dry_run)?;
        if !opts.dry_run {
            self.emit("ADDED", &stored);
        }
        Ok(Written {
            object: Self::in_version(version, stored),
            created: true,
            warnings,
        })
    }

    async fn update(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        Self::check_version(version)?;
        let name = at.name;
        let old = self.current(name)?;
        let mut object = body;
        if subresource == Subresource::Status {
            let status = object.get("status").cloned().unwrap_or(Value::Null);
            object = old.clone();
            object["status"] = status;
        }
        object["metadata"]["uid"] = old["metadata"]["uid"].clone();
        let stored = self.store(name, object, opts.dry_run)?;
        self.emit("MODIFIED", &stored);
        Ok(Written {
            object: Self::in_version(version, stored),
            created: false,
            warnings: Vec::new(),
        })
    }

    async fn patch(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        _subresource: Subresource,
        patch_type: PatchType,
        patch: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        Self::check_version(version)?;
        let name = at.name;
        if patch_type != PatchType::Merge {
            return Err(ApiError::BadRequest("only merge patches here".into()));
        }
        let patch: Value = serde_json::from_slice(patch)
            .map_err(|e| ApiError::BadRequest(format!("invalid patch: {e}")))?;
        let mut object = self.current(name)?;
        json_patch::merge(&mut object, &patch);
        let stored = self.store(name, object, opts.dry_run)?;
        self.emit("MODIFIED", &stored);
        Ok(Written {
            object: Self::in_version(version, stored),
            created: false,
            warnings: Vec::new(),
        })
    }

    async fn delete(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        Self::check_version(version)?;
        let name = at.name;
        let mut object = self.current(name)?;
        let held = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if held {
            object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            let stored = self.store(name, object, opts.dry_run)?;
            return Ok(Deleted {
                object: Self::in_version(version, stored),
                gone: false,
            });
        }
        if !opts.dry_run {
            let mut objects = self.objects.lock().map_err(|_| poisoned())?;
            objects.remove(name);
        }
        self.emit("DELETED", &object);
        Ok(Deleted {
            object: Self::in_version(version, object),
            gone: true,
        })
    }

    async fn delete_collection(
        &self,
        version: &str,
        _namespace: Option<&str>,
        params: &ListParams,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let list = self.list_value(version, params)?;
        if !opts.dry_run {
            let mut objects = self.objects.lock().map_err(|_| poisoned())?;
            objects.clear();
        }
        Ok(list)
    }
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
