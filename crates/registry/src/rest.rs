//! The type-erased REST surface the HTTP layer calls: JSON in, JSON out, one served version per
//! call. `Store<S>` implements it for every kind; the server knows nothing type-specific.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;

use super::error::ApiResult;
use super::object_ref::ObjectRef;
use super::strategy::{ResourceInfo, TableColumn};

/// `fieldValidation` (metav1.CreateOptions / UpdateOptions / PatchOptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown fields are dropped without a warning.
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
    /// `fieldValidation`: what to do with fields the schema does not know.
    pub field_validation: FieldValidation,
    /// `fieldManager`: who the write is recorded for in managedFields; `None` falls back to the
    /// User-Agent.
    pub field_manager: Option<String>,
    /// `force=true` on a server-side apply: take ownership of conflicting fields.
    pub force: bool,
    /// The request's User-Agent: names the manager of a write without `fieldManager`.
    pub user_agent: Option<String>,
}

/// Options of a get (metav1.GetOptions).
#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    /// `resourceVersion` query parameter ("" / "0" / a revision).
    pub resource_version: Option<String>,
}

/// Query parameters of a list or a delete-collection (metav1.ListOptions).
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    /// `labelSelector`, unparsed.
    pub label_selector: Option<String>,
    /// `fieldSelector`, unparsed.
    pub field_selector: Option<String>,
    /// `limit`: the page size; `None`, zero or negative = everything in one page.
    pub limit: Option<i64>,
    /// `continue`: the token of the previous page's metav1.ListMeta.
    pub continue_token: Option<String>,
    /// `resourceVersion` ("" / "0" / a revision): which state to read, per
    /// `resourceVersionMatch`.
    pub resource_version: Option<String>,
    /// `NotOlderThan` or `Exact`.
    pub resource_version_match: Option<String>,
}

/// Query parameters of a watch (metav1.ListOptions with `watch=true`), as the server validated
/// and defaulted them.
#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    /// `labelSelector`, unparsed.
    pub label_selector: Option<String>,
    /// `fieldSelector`, unparsed.
    pub field_selector: Option<String>,
    /// `resourceVersion`: events after this revision; "" or "0" start from the current state.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`: only `NotOlderThan`, with `sendInitialEvents`.
    pub resource_version_match: Option<String>,
    /// `allowWatchBookmarks`: send BOOKMARK events.
    pub allow_watch_bookmarks: bool,
    /// `sendInitialEvents`: start with an ADDED event per existing object (a watch-list); `None`
    /// keeps the legacy default (initial events only from "" or "0").
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`: end the stream after this long; `None`: no end here (the server applies
    /// its default).
    pub timeout_seconds: Option<u64>,
}

/// metav1.Preconditions.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// The object's uid must be this one.
    pub uid: Option<String>,
    /// The object's resourceVersion must be this one.
    pub resource_version: Option<String>,
}

/// metav1.DeleteOptions (from the body and/or the query).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// The object must still match these, or the delete is a 409.
    pub preconditions: Preconditions,
    /// `dryRun=All`: check everything, remove nothing.
    pub dry_run: bool,
    /// `Orphan`, `Background`, `Foreground`.
    pub propagation_policy: Option<String>,
    /// `gracePeriodSeconds`: parsed and validated, otherwise unused (no kind here deletes
    /// gracefully).
    pub grace_period_seconds: Option<i64>,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself.
    Main,
    /// `/status`.
    Status,
}

/// A PATCH body's format, from its Content-Type.
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
    /// The object in the watch's version, or a metav1.Status for `ERROR`.
    pub object: Value,
}

/// The events of one watch; it ends on a timeout, an `ERROR` event, or when the client goes.
pub type WatchEventStream = BoxStream<'static, WatchEvent>;

/// One served resource, type-erased: what the HTTP layer calls, in JSON of a served version.
/// A version the resource does not serve is a 404 ([`crate::ApiError::UnknownPath`]).
#[async_trait]
pub trait RestStorage: Send + Sync + 'static {
    /// Names, scope and versions of the resource (discovery's facts).
    fn info(&self) -> &ResourceInfo;

    /// The kind's protobuf messages (see `Strategy::protobuf`).
    fn protobuf(&self) -> Option<&'static dyn super::protobuf::ProtobufKind>;

    /// OpenAPI definitions of the kind in `version` (see `Strategy::openapi_definitions`).
    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)>;
    /// The OpenAPI definition name of the kind itself in `version` (see
    /// `Strategy::definition_name`).
    fn definition_name(&self, version: &str) -> String;

    /// The columns of its Table (`kubectl get`), Name first.
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

    /// Replace the object at `at` with `body` (a PUT), or only its status for
    /// [`Subresource::Status`]. The body's resourceVersion must be the stored one (409 when stale,
    /// 422 when missing); a body without a name takes the URL's, one naming another is a 400.
    async fn update(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written>;

    /// Patch the object at `at` (or its status) with a patch of `patch_type`; an apply patch is
    /// a server-side apply, which may create the object.
    async fn patch(
        &self,
        version: &str,
        at: ObjectRef<'_>,
        subresource: Subresource,
        patch_type: PatchType,
        patch: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written>;

    /// Delete the object at `at`: gone at once, or marked with `deletionTimestamp` while
    /// finalizers hold it.
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
