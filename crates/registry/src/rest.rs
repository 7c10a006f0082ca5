//! The type-erased REST surface the HTTP layer calls: JSON in, JSON out, one served version per
//! call. `Store<S>` implements it for every kind; the server knows nothing type-specific.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;

use super::error::ApiResult;
use super::store::ObjectRef;
use super::strategy::{ResourceInfo, TableColumn};

/// `fieldValidation` (metav1.CreateOptions / UpdateOptions / PatchOptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    /// kube-apiserver's default: unknown fields are dropped with a `Warning: 299` header each.
    #[default]
    Warn,
    /// Unknown (or duplicate) fields are a 400 BadRequest.
    Strict,
}

/// Options of create / update / patch.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: run everything but the write.
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    pub field_manager: Option<String>,
    /// `force=true` on a server-side apply: take ownership of conflicting fields.
    pub force: bool,
    /// The request's User-Agent: names the manager of a write without `fieldManager`.
    pub user_agent: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    /// `resourceVersion` query parameter ("" / "0" / a revision).
    pub resource_version: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<i64>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    /// `NotOlderThan` or `Exact`.
    pub resource_version_match: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout_seconds: Option<u64>,
}

/// metav1.Preconditions.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// metav1.DeleteOptions (from the body and/or the query).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub preconditions: Preconditions,
    pub dry_run: bool,
    /// `Orphan`, `Background`, `Foreground`.
    pub propagation_policy: Option<String>,
    pub grace_period_seconds: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself.
    Main,
    /// `/status`.
    Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

/// The result of a write.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored (or as it would be, for dry-run), in the requested version.
    pub object: Value,
    /// `true` for a create (HTTP 201), `false` for an update (200).
    pub created: bool,
    /// Texts for `Warning: 299 - "<text>"` headers (unknown fields under Warn, ...).
    pub warnings: Vec<String>,
}

/// The result of a delete.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// The object: its last state when gone, or with deletionTimestamp set while finalizers
    /// remain.
    pub object: Value,
    /// `false` while finalizers hold the object (kube-apiserver answers 202 then... see the
    /// server for the exact code mapping).
    pub gone: bool,
}

/// One watch event, ready to be framed as `{"type":…,"object":…}`.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    pub event_type: &'static str,
    pub object: Value,
}

pub type WatchEventStream = BoxStream<'static, WatchEvent>;

#[async_trait]
pub trait RestStorage: Send + Sync + 'static {
    fn info(&self) -> &ResourceInfo;

    /// The kind's protobuf messages (see `Strategy::protobuf`).
    fn protobuf(&self) -> Option<&'static dyn super::protobuf::ProtobufKind>;

    /// OpenAPI definitions of the kind in `version` (see `Strategy::openapi_definitions`).
    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)>;
    fn definition_name(&self, version: &str) -> String;

    fn table_columns(&self) -> Vec<TableColumn>;
    /// A table row for an object already encoded in `version`.
    fn table_row(&self, version: &str, object: &Value) -> ApiResult<Vec<Value>>;

    /// The object at `at`: a name, with the request's namespace for a namespaced kind.
    async fn get(&self, version: &str, at: ObjectRef<'_>, opts: &GetOptions) -> ApiResult<Value>;

    /// A `<Kind>List` with `metadata.resourceVersion`, `continue`, `remainingItemCount`: of
    /// one namespace, or (`None`, or any cluster-scoped kind) of all objects.
    async fn list(
        &self,
        version: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> ApiResult<Value>;

    /// A stream of watch events. Errors before the stream starts (bad parameters) are returned
    /// here; errors after (e.g. compaction) arrive as an `ERROR` event carrying a Status and
    /// end the stream.
    async fn watch(
        &self,
        version: &str,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> ApiResult<WatchEventStream>;

    /// Create in the request's namespace: an object of a namespaced kind without one gets it,
    /// one naming another is a 400.
    async fn create(
        &self,
        version: &str,
        namespace: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written>;

    async fn update(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written>;

    async fn patch(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        patch_type: PatchType,
        patch: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written>;

    async fn delete(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted>;

    /// Delete every object the selectors match; returns the `<Kind>List` of what was deleted.
    async fn delete_collection(
        &self,
        version: &str,
        namespace: Option<&str>,
        params: &ListParams,
        opts: &DeleteOptions,
    ) -> ApiResult<Value>;
}
