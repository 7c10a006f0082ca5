//! What a kind supplies to the generic store: the k8s.io/apiserver `RESTCreateStrategy` /
//! `RESTUpdateStrategy` / `TableConvertor` idea, in Rust. The store does everything generic
//! (metadata, resourceVersion, uid, timestamps, generation, preconditions, dry-run, selectors,
//! paging, watch); the strategy does only what differs by kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::error::{ApiResult, FieldError};

/// Static facts about a served resource: what discovery and OpenAPI publish.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group, e.g. `storagemigration.k8s.io`.
    pub group: &'static str,
    /// Kind, e.g. `StorageVersionMigration`.
    pub kind: &'static str,
    /// Kind of its list, e.g. `StorageVersionMigrationList`.
    pub list_kind: &'static str,
    /// Resource name in URLs and keys, e.g. `storageversionmigrations`.
    pub plural: &'static str,
    /// Singular resource name, e.g. `storageversionmigration`.
    pub singular: &'static str,
    /// Discovery's `shortNames` (kubectl aliases); empty for none.
    pub short_names: &'static [&'static str],
    /// Discovery's `categories` (e.g. `all`); empty for none.
    pub categories: &'static [&'static str],
    /// Served versions, preferred first (kube-apiserver's order: v1, v1beta1, v1alpha1).
    pub versions: &'static [&'static str],
    /// The version whose `<group>/<version>/<kind>` the storageVersionHash is computed from.
    pub storage_version: &'static str,
    /// Whether objects live in a namespace (`metadata.namespace`) or are cluster-scoped.
    pub namespaced: bool,
    /// Whether `/status` is served, with its own update rules.
    pub has_status_subresource: bool,
}

/// A column of `kubectl get` output (metav1.TableColumnDefinition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    /// Column name, e.g. `Name`.
    pub name: &'static str,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean`, `date`.
    pub type_: &'static str,
    /// OpenAPI format, e.g. `name` for the Name column; empty when none.
    pub format: &'static str,
    /// What the column shows (the column's `description`).
    pub description: &'static str,
    /// 0 = shown by default; >0 = only with `-o wide`.
    pub priority: i32,
}

/// How strategic-merge-patch treats one list field (the Go struct tags `patchStrategy` and
/// `patchMergeKey`), read from the kind's OpenAPI schema (see
/// `managed_fields::schema::list_type`, the one place list semantics are written). Lists
/// without one are replaced whole, as upstream does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListMerge {
    /// `patchStrategy:"merge" patchMergeKey:"<key>"`: items matched by this key are merged.
    ByKey(String),
    /// `patchStrategy:"merge"` on a list of scalars: set union (e.g. finalizers).
    Set,
}

/// Per-kind behaviour over the internal (hub) form `Object`.
pub trait Strategy: Send + Sync + 'static {
    /// The internal form, stored as JSON in the store.
    type Object: Clone
        + Default
        + Serialize
        + DeserializeOwned
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + std::fmt::Debug
        + Send
        + Sync
        + 'static;

    /// Static facts about the kind: names, scope, versions.
    fn info(&self) -> &ResourceInfo;

    /// Convert an object of a served version (apiVersion/kind already checked by the store)
    /// into the internal form. A body that does not fit the version's shape is `BadRequest`.
    fn decode(&self, version: &str, value: Value) -> ApiResult<Self::Object>;

    /// Convert the internal form into a served version, with apiVersion and kind set.
    /// Round trips are lossless: decode(v, encode(v, x)) == x for every version v.
    fn encode(&self, version: &str, obj: &Self::Object) -> ApiResult<Value>;

    /// OpenAPI definitions for this kind in `version`, keyed by definition name (e.g.
    /// `io.k8s.api.storagemigration.v1.StorageVersionMigration`), with `$ref`s written as
    /// `#/components/schemas/<name>` (the server rewrites them to `#/definitions/` for v2).
    /// The first entry's name is given by [`Strategy::definition_name`]. They are also the
    /// kind's typed schema: field validation, strategic merge patch's list rules and
    /// server-side apply all read them (list semantics written with
    /// `managed_fields::schema::list_type`).
    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)>;

    /// The definition name of the kind itself in `version`.
    fn definition_name(&self, version: &str) -> String;

    /// Clear what a client may not set on create (status), set defaults.
    fn prepare_for_create(&self, obj: &mut Self::Object);

    /// On an update of the main resource: keep the old status.
    fn prepare_for_update(&self, new: &mut Self::Object, old: &Self::Object);

    /// On an update of `/status`: keep the old spec.
    fn prepare_for_status_update(&self, new: &mut Self::Object, old: &Self::Object);

    /// Kind-specific validation on create (names, spec). The store validates generic metadata.
    fn validate(&self, obj: &Self::Object) -> Vec<FieldError>;

    /// Kind-specific validation on update (e.g. `spec` immutable).
    fn validate_update(&self, new: &Self::Object, old: &Self::Object) -> Vec<FieldError>;

    /// Validation of a `/status` update.
    fn validate_status_update(&self, new: &Self::Object, old: &Self::Object) -> Vec<FieldError>;

    /// Whether the spec differs (drives metadata.generation).
    fn spec_changed(&self, new: &Self::Object, old: &Self::Object) -> bool;

    /// Warnings a create earns (upstream's `WarningsOnCreate`), for `obj` as it will be stored
    /// (prepared and valid). Each becomes a `Warning: 299` header of the REST answer; the
    /// controllers' own writes drop them.
    fn warnings_on_create(&self, _obj: &Self::Object) -> Vec<String> {
        Vec::new()
    }

    /// Warnings an update of the main resource earns (upstream's `WarningsOnUpdate`), for
    /// `new` as it will be stored, `old` as it is. A `/status` update earns none: it keeps the
    /// stored metadata and spec.
    fn warnings_on_update(&self, _new: &Self::Object, _old: &Self::Object) -> Vec<String> {
        Vec::new()
    }

    /// Table columns, starting with Name (format `name`).
    fn table_columns(&self) -> Vec<TableColumn>;

    /// One table row, a cell per column.
    fn table_row(&self, obj: &Self::Object) -> Vec<Value>;

    /// Fields that field selectors may name beyond `metadata.name` and `metadata.namespace`
    /// (which the store handles), e.g. `spec.resource.group`. A selector naming any other field
    /// is a 400, as upstream.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// The value of one of [`Strategy::selectable_fields`] for field selectors. `None` reads
    /// as the empty string, as in upstream's field sets.
    fn field_value(&self, _obj: &Self::Object, _field: &str) -> Option<String> {
        None
    }

    /// The kind's protobuf messages, for `application/vnd.kubernetes.protobuf` bodies and
    /// answers, if it has any. A kind without them is served as kube-apiserver serves a
    /// custom resource: JSON and YAML only, while its PartialObjectMetadata forms, Statuses and
    /// DeleteOptions still speak protobuf (they are `meta.k8s.io` messages).
    fn protobuf(&self) -> Option<&'static dyn super::protobuf::ProtobufKind> {
        None
    }
}
