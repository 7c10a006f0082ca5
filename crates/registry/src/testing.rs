//! A kind for tests of the generic machinery (`Widget` in `test.example.io`: spec + status with
//! conditions, served as v1 and v1beta1, with `/status`), with stores over the in-memory
//! embedded backend. Compiled for this crate's tests and, with the `testing` feature, for the
//! tests of the layers above (the HTTP server's), so they exercise the real registry.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::managed_fields::schema::{ListSemantics, list_type};
use crate::{ApiError, ApiResult, FieldError, ResourceInfo, Store, Strategy, TableColumn};
use svm_storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use svm_storage::{Op, Revision, Storage, Txn, TxnOutcome};

/// The test kind's API group.
pub const GROUP: &str = "test.example.io";

static INFO: ResourceInfo = ResourceInfo {
    group: GROUP,
    kind: "Widget",
    list_kind: "WidgetList",
    plural: "widgets",
    singular: "widget",
    short_names: &["wd"],
    categories: &[],
    versions: &["v1", "v1beta1"],
    storage_version: "v1",
    namespaced: false,
    has_status_subresource: true,
};

/// The internal form.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Widget {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the test asks for.
    #[serde(default)]
    pub spec: WidgetSpec,
    /// What the store reports; cleared on create, kept on main-resource updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WidgetStatus>,
}

/// `Widget`'s spec (v1's form; v1beta1 calls `size` `count`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WidgetSpec {
    /// Must not be negative (`spec.size` is validated).
    #[serde(default)]
    pub size: i64,
    /// Immutable after create; selectable as `spec.color`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    /// A set-typed list (merges by value in server-side apply and strategic merge patch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// `Widget`'s status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    /// Conditions, a map-list keyed by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WidgetCondition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One status condition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WidgetCondition {
    /// The condition's type, its key in the list.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown` (validated on status updates).
    pub status: String,
    /// A machine-readable reason, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl k8s_openapi::Resource for Widget {
    const API_VERSION: &'static str = "test.example.io/v1";
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "Widget";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "widgets";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for Widget {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// v1beta1 calls `spec.size` `spec.count`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BetaSpec {
    #[serde(default)]
    count: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    color: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
}

/// The [`Strategy`] of `Widget`: v1 and v1beta1, `/status`, immutable `spec.color`, a warning
/// for [`DEPRECATED_LABEL`].
pub struct WidgetStrategy;

/// A label whose use earns a warning: the strategy's warnings, end to end.
pub const DEPRECATED_LABEL: &str = "test.example.io/deprecated";

/// The warning for [`DEPRECATED_LABEL`] on `new`, unless `old` carries it with the same value.
fn deprecated_label_warning(new: &Widget, old: Option<&Widget>) -> Vec<String> {
    let value = |w: &Widget| {
        w.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(DEPRECATED_LABEL))
            .cloned()
    };
    match value(new) {
        Some(v) if old.and_then(value).as_ref() != Some(&v) => {
            vec![format!("metadata.labels[{DEPRECATED_LABEL}]: deprecated")]
        }
        _ => Vec::new(),
    }
}

impl WidgetStrategy {
    fn cannot_handle(version: &str, err: impl std::fmt::Display) -> ApiError {
        ApiError::BadRequest(format!(
            "Widget in version {version:?} cannot be handled as a Widget: {err}"
        ))
    }
}

impl Strategy for WidgetStrategy {
    type Object = Widget;

    fn info(&self) -> &ResourceInfo {
        &INFO
    }

    fn decode(&self, version: &str, mut value: Value) -> ApiResult<Widget> {
        if let Value::Object(map) = &mut value {
            map.shift_remove("apiVersion");
            map.shift_remove("kind");
        }
        if version == "v1beta1"
            && let Some(spec) = value.get_mut("spec")
        {
            let beta: BetaSpec = serde_json::from_value(spec.clone())
                .map_err(|e| Self::cannot_handle(version, e))?;
            *spec = serde_json::to_value(WidgetSpec {
                size: beta.count,
                color: beta.color,
                tags: beta.tags,
            })
            .map_err(|e| Self::cannot_handle(version, e))?;
        }
        serde_json::from_value(value).map_err(|e| Self::cannot_handle(version, e))
    }

    fn encode(&self, version: &str, obj: &Widget) -> ApiResult<Value> {
        let mut value = serde_json::to_value(obj).map_err(|e| ApiError::Internal(e.to_string()))?;
        if version == "v1beta1" {
            let spec = BetaSpec {
                count: obj.spec.size,
                color: obj.spec.color.clone(),
                tags: obj.spec.tags.clone(),
            };
            value["spec"] =
                serde_json::to_value(spec).map_err(|e| ApiError::Internal(e.to_string()))?;
        }
        let mut out = serde_json::Map::new();
        out.insert("apiVersion".into(), json!(format!("{GROUP}/{version}")));
        out.insert("kind".into(), json!("Widget"));
        if let Value::Object(map) = value {
            out.extend(map);
        }
        Ok(Value::Object(out))
    }

    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        let name = self.definition_name(version);
        let size_field = if version == "v1beta1" {
            "count"
        } else {
            "size"
        };
        vec![
            (
                name.clone(),
                json!({
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                        "spec": {"$ref": format!("#/components/schemas/{name}Spec")},
                        "status": {"$ref": format!("#/components/schemas/{name}Status")},
                    },
                }),
            ),
            (
                format!("{name}Spec"),
                json!({
                    "type": "object",
                    "properties": {
                        size_field: {"type": "integer"},
                        "color": {"type": "string"},
                        "tags": list_type(json!({"type": "array", "items": {"type": "string"}}), ListSemantics::Set),
                    },
                }),
            ),
            (
                format!("{name}Status"),
                json!({
                    "type": "object",
                    "properties": {
                        "observedGeneration": {"type": "integer"},
                        "conditions": list_type(json!({"type": "array", "items": {
                            "type": "object",
                            "properties": {
                                "type": {"type": "string"},
                                "status": {"type": "string"},
                                "reason": {"type": "string"},
                            },
                        }}), ListSemantics::MapByKey("type")),
                    },
                }),
            ),
        ]
    }

    fn definition_name(&self, version: &str) -> String {
        format!("io.example.test.{version}.Widget")
    }

    fn prepare_for_create(&self, obj: &mut Widget) {
        obj.status = None;
    }

    fn prepare_for_update(&self, new: &mut Widget, old: &Widget) {
        new.status = old.status.clone();
    }

    fn prepare_for_status_update(&self, new: &mut Widget, old: &Widget) {
        new.spec = old.spec.clone();
    }

    fn validate(&self, obj: &Widget) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj.spec.size < 0 {
            errs.push(FieldError::invalid(
                "spec.size",
                &obj.spec.size.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        errs
    }

    fn validate_update(&self, new: &Widget, old: &Widget) -> Vec<FieldError> {
        let mut errs = self.validate(new);
        if new.spec.color != old.spec.color {
            errs.push(FieldError::invalid(
                "spec.color",
                new.spec.color.as_deref().unwrap_or_default(),
                "field is immutable",
            ));
        }
        errs
    }

    fn validate_status_update(&self, new: &Widget, _old: &Widget) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, condition) in new.status.iter().flat_map(|s| &s.conditions).enumerate() {
            if !["True", "False", "Unknown"].contains(&condition.status.as_str()) {
                errs.push(FieldError::not_supported(
                    format!("status.conditions[{i}].status"),
                    &condition.status,
                    &["True", "False", "Unknown"],
                ));
            }
        }
        errs
    }

    fn spec_changed(&self, new: &Widget, old: &Widget) -> bool {
        new.spec != old.spec
    }

    /// The [`DEPRECATED_LABEL`] earns a warning.
    fn warnings_on_create(&self, obj: &Widget) -> Vec<String> {
        deprecated_label_warning(obj, None)
    }

    /// The [`DEPRECATED_LABEL`], when the update adds or changes it, earns a warning.
    fn warnings_on_update(&self, new: &Widget, old: &Widget) -> Vec<String> {
        deprecated_label_warning(new, Some(old))
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        vec![TableColumn {
            name: "Name",
            type_: "string",
            format: "name",
            description: "Name",
            priority: 0,
        }]
    }

    fn table_row(&self, obj: &Widget) -> Vec<Value> {
        vec![json!(obj.metadata.name)]
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.color"]
    }

    fn field_value(&self, obj: &Widget, field: &str) -> Option<String> {
        match field {
            "spec.color" => obj.spec.color.clone(),
            _ => None,
        }
    }
}

/// The key prefix the test stores keep their objects under.
pub const ROOT: &str = "/registry-test";

/// A fresh in-memory embedded backend.
pub fn storage() -> Arc<EmbeddedStorage> {
    Arc::new(EmbeddedStorage::in_memory())
}

/// A store over a fresh in-memory backend.
pub fn store() -> Store<WidgetStrategy> {
    Store::new(WidgetStrategy, storage(), ROOT)
}

/// A store whose storage sends progress notifications quickly (watch bookmarks).
pub fn store_with_fast_progress() -> Store<WidgetStrategy> {
    let options = EmbeddedOptions {
        progress_interval: Duration::from_millis(50),
        ..EmbeddedOptions::default()
    };
    Store::new(
        WidgetStrategy,
        Arc::new(EmbeddedStorage::in_memory_with(options)),
        ROOT,
    )
}

/// A `Widget` named `name` with `spec.size` = `size`.
pub fn widget(name: &str, size: i64) -> Widget {
    Widget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: WidgetSpec {
            size,
            ..Default::default()
        },
        status: None,
    }
}

/// A `Widget` named `name` (size 1) with these labels.
pub fn labelled(name: &str, labels: &[(&str, &str)]) -> Widget {
    let mut w = widget(name, 1);
    w.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    w
}

/// A v1 request body.
pub fn body(name: &str, size: i64) -> Value {
    json!({
        "apiVersion": "test.example.io/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    })
}

/// The names of a list's items, in order.
pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items is an array")
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// A leadership term taken by `holder` under `prefix`, as leader election records a change of
/// holder (its `leader-term` record): the revision that names the term, for a
/// [`Fence`](crate::Fence) of it.
pub async fn take_term(storage: &Arc<dyn Storage>, prefix: &str, holder: &str) -> Revision {
    let put = Txn {
        compares: vec![],
        ops: vec![Op::Put(
            crate::fence::term_key(prefix),
            holder.as_bytes().to_vec(),
        )],
    };
    match storage.txn(put).await {
        Ok(TxnOutcome::Committed { revision }) => revision,
        other => panic!("taking the term: {other:?}"),
    }
}
