//! The two calls a migration makes per page and per object: a metadata-only LIST page
//! (recording 06: `as=PartialObjectMetadataList`, so 10 KiB objects cost a few hundred bytes
//! each) and the no-op write that carries only the object's identity (recording 08:
//! the apiserver re-encodes the object in its current storage version and writes only when
//! the stored bytes change; a stale resourceVersion is a 409, recording 09a). The write is a
//! server-side apply of nothing but the object's name, namespace, uid and resourceVersion
//! ([`NoOpWrite`]; the uid keeps an object deleted since the list deleted, recording 09e):
//! of the one-request no-op writes it costs kube-apiserver the least at every object size
//! (`make bench-real`'s write table, docs/performance.md).
//!
//! The reads (LIST pages, the watch-list stream) ask for protobuf first, as client-go's
//! metadata client does (recordings 20*): kube-apiserver encodes metadata in protobuf for
//! about half the CPU and bytes of JSON (`make bench-real`'s wire table), and answers in what
//! it can; every answer is read by its Content-Type. The PATCH's one-object answer is asked for
//! in JSON. `--kube-api-content-type=application/json` asks for JSON only.

use std::time::Duration;

use futures::{Stream, StreamExt};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, Method, Request};
use http_body_util::BodyExt;
use kube::core::WatchEvent;
use serde::Deserialize;

use super::client::{ClusterClient, WireFormat};
use super::error::ClusterError;
use super::resources::ResolvedResource;
use svm_registry::protobuf::{self, FrameReader, ProtobufError, meta};

/// Accept header of a metadata-only list, with plain JSON as the fallback kube-apiserver
/// would use for a resource that cannot be transformed.
const METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// The same, protobuf first: what client-go's metadata client sends.
const METADATA_LIST_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// Accept header for the PATCH answer and the events of a watch: only the metadata comes
/// back, not the whole object.
const METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
/// The same, protobuf first.
const METADATA_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
/// The longest protobuf watch frame read (kube-apiserver's own limit on a request body is
/// 3 MiB; an object's metadata is far smaller).
const MAX_FRAME_BYTES: usize = 16 << 20;

fn list_accept(client: &ClusterClient) -> &'static str {
    match client.wire_format() {
        WireFormat::Protobuf => METADATA_LIST_PROTOBUF,
        WireFormat::Json => METADATA_LIST,
    }
}

fn object_accept(client: &ClusterClient) -> &'static str {
    match client.wire_format() {
        WireFormat::Protobuf => METADATA_PROTOBUF,
        WireFormat::Json => METADATA,
    }
}

/// Whether an answer is protobuf (by its Content-Type; `;stream=watch` and the like ignored).
fn is_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(protobuf::MEDIA_TYPE))
}

/// The message of a protobuf answer of `kind`.
fn protobuf_message(body: &[u8], kind: &str, what: &str) -> Result<Vec<u8>, ClusterError> {
    let unreadable = |source| ClusterError::Protobuf {
        what: what.to_string(),
        source,
    };
    let envelope = protobuf::decode_body(body).map_err(unreadable)?;
    if envelope.kind != kind {
        return Err(ClusterError::Unexpected(format!(
            "{what}: a {} where a {kind} was expected",
            envelope.kind
        )));
    }
    Ok(envelope.raw)
}

/// An object to rewrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    /// Its namespace; `None` for a cluster-scoped resource.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid as listed: the write's other precondition. The apply creates an object that
    /// does not exist, its resourceVersion notwithstanding (recording 09e, step B5); with the
    /// uid, an object deleted since it was listed is a 409 and stays deleted.
    pub uid: String,
    /// Its resourceVersion as listed: the precondition of the no-op PATCH (an object written since
    /// answers 409, and needs no rewrite).
    pub resource_version: String,
}

impl ObjectRef {
    /// Where the object sorts among its resource's objects: `namespace/name`, or `name`
    /// (the order of the storage keys, so of paged LISTs).
    pub fn key(&self) -> String {
        self.display_name()
    }

    /// `namespace/name` or `name`, as messages name objects.
    pub fn display_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// One page of a LIST.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataPage {
    /// The page's objects, in key order.
    pub items: Vec<ObjectRef>,
    /// The token of the next page; `None` on the last page.
    pub continue_token: Option<String>,
    /// The apiserver's estimate of the objects after this page.
    pub remaining: Option<i64>,
    /// The list's resourceVersion (the snapshot the pages are read at).
    pub resource_version: String,
}

#[derive(Deserialize)]
struct ListBody {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default, deserialize_with = "crate::wire::null_as_empty")]
    items: Vec<ItemBody>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: String,
    remaining_item_count: Option<i64>,
}

#[derive(Clone, Deserialize)]
struct ItemBody {
    #[serde(default)]
    metadata: ItemMeta,
}

impl ItemBody {
    fn into_ref(self) -> ObjectRef {
        ObjectRef {
            namespace: self.metadata.namespace.filter(|ns| !ns.is_empty()),
            name: self.metadata.name,
            uid: self.metadata.uid,
            resource_version: self.metadata.resource_version,
        }
    }
}

#[derive(Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ItemMeta {
    #[serde(default)]
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    resource_version: String,
}

/// One page of `resource` across all namespaces, `limit` items, from `continue_token`.
pub async fn list_metadata(
    client: &ClusterClient,
    resource: &ResolvedResource,
    limit: u32,
    continue_token: Option<&str>,
) -> Result<MetadataPage, ClusterError> {
    let query = {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("limit", &limit.to_string());
        if let Some(token) = continue_token.filter(|t| !t.is_empty()) {
            query.append_pair("continue", token);
        }
        query.finish()
    };
    let path = format!("{}?{query}", resource.collection_path());
    let answer = client
        .request(Method::GET, &path, list_accept(client), None)
        .await?;
    let what = || format!("LIST {}", resource.group_resource());
    if is_protobuf(&answer.headers) {
        let raw = protobuf_message(&answer.body, "PartialObjectMetadataList", &what())?;
        let (meta, keys) = meta::decode_partial_object_metadata_list(&raw).map_err(|source| {
            ClusterError::Protobuf {
                what: what(),
                source,
            }
        })?;
        return Ok(MetadataPage {
            items: keys.into_iter().map(object_ref).collect(),
            continue_token: meta.continue_,
            remaining: meta.remaining_item_count,
            resource_version: meta.resource_version.unwrap_or_default(),
        });
    }
    let body: ListBody =
        serde_json::from_slice(&answer.body).map_err(ClusterError::decode(what()))?;
    Ok(MetadataPage {
        items: body.items.into_iter().map(ItemBody::into_ref).collect(),
        continue_token: Some(body.metadata.continue_token).filter(|t| !t.is_empty()),
        remaining: body.metadata.remaining_item_count,
        resource_version: body.metadata.resource_version,
    })
}

fn object_ref(key: meta::ObjectKey) -> ObjectRef {
    ObjectRef {
        namespace: key.namespace,
        name: key.name,
        uid: key.uid,
        resource_version: key.resource_version,
    }
}

/// What a no-op PATCH found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touched {
    /// Written again: the stored bytes changed (a new storage version or encryption key).
    Rewritten,
    /// Nothing to write: already stored in the current encoding (same resourceVersion back).
    AlreadyCurrent,
    /// 409: changed since it was listed, so it was written in the current encoding already.
    Conflict,
    /// 404: deleted since it was listed.
    Gone,
}

#[derive(Deserialize)]
struct PatchedBody {
    #[serde(default)]
    metadata: PatchedMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PatchedMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default, deserialize_with = "crate::wire::null_as_empty")]
    managed_fields: Vec<ManagedFieldsEntry>,
}

#[derive(Deserialize)]
struct ManagedFieldsEntry {
    #[serde(default)]
    manager: String,
}

/// The manager kube-apiserver names as the owner of every field of an object that had no
/// managedFields when it was first applied to.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// What a no-op write's answer says.
struct Patched {
    resource_version: String,
    /// The object had no managedFields, and the apply gave it kube-apiserver's
    /// `before-first-apply` entry (its only one).
    first_apply_entry: bool,
}

/// How the no-op write is sent. Both carry the listed resourceVersion as the precondition (a
/// stale one is a 409), both are the RBAC verb `patch` (and the FlowSchema's), and both leave
/// the object as it was but for its resourceVersion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoOpWrite {
    /// A server-side apply (`application/apply-patch+yaml`, field manager [`FIELD_MANAGER`]) of
    /// `apiVersion`, `kind` and `metadata.{name, namespace, resourceVersion}`. It owns no field,
    /// so no managedFields entry is added, and kube-apiserver merges it into the object it
    /// holds decoded — where a merge patch makes it encode the whole object to JSON, patch it
    /// and decode it again: at 100 KiB half the CPU of the merge patch for a custom resource,
    /// a third for a ConfigMap; at 1 KiB the same within noise.
    Apply,
    /// `{"metadata":{"resourceVersion":…}}` as a JSON merge patch: for an apiserver that does not
    /// take apply patches (415 Unsupported Media Type; an aggregated API of its own making).
    MergePatch,
}

/// The field manager of the no-op apply (it owns no field, so it is never listed in the
/// object's managedFields).
pub const FIELD_MANAGER: &str = "svm-apiserver-migrator";

impl NoOpWrite {
    /// The content type and body of the write of `object`.
    fn body(
        self,
        resource: &ResolvedResource,
        object: &ObjectRef,
    ) -> Result<(&'static str, Vec<u8>), ClusterError> {
        let (content_type, patch) = match self {
            NoOpWrite::Apply => {
                let mut metadata = serde_json::json!({
                    "name": object.name,
                    "resourceVersion": object.resource_version,
                });
                if !object.uid.is_empty() {
                    metadata["uid"] = object.uid.as_str().into();
                }
                if let Some(namespace) = &object.namespace {
                    metadata["namespace"] = namespace.as_str().into();
                }
                let api_version = if resource.group.is_empty() {
                    resource.version.clone()
                } else {
                    format!("{}/{}", resource.group, resource.version)
                };
                (
                    "application/apply-patch+yaml",
                    serde_json::json!({
                        "apiVersion": api_version,
                        "kind": resource.kind,
                        "metadata": metadata,
                    }),
                )
            }
            NoOpWrite::MergePatch => (
                "application/merge-patch+json",
                serde_json::json!({"metadata": {"resourceVersion": object.resource_version}}),
            ),
        };
        let body = serde_json::to_vec(&patch).map_err(ClusterError::encode("a patch"))?;
        Ok((content_type, body))
    }
}

/// The no-op write of one object (`dry_run`: with `?dryRun=All`): an apply, or a merge patch
/// where the apiserver does not take apply patches.
async fn no_op_patch(
    client: &ClusterClient,
    resource: &ResolvedResource,
    object: &ObjectRef,
    dry_run: bool,
) -> Result<super::client::Answer, ClusterError> {
    // Without a uid (kube-apiserver lists none such) an apply could bring back an object
    // deleted since the list; a merge patch of a missing object is a 404.
    if object.uid.is_empty() {
        return no_op_write(client, resource, object, dry_run, NoOpWrite::MergePatch).await;
    }
    match no_op_write(client, resource, object, dry_run, NoOpWrite::Apply).await {
        Err(err) if err.code() == Some(415) => {
            no_op_write(client, resource, object, dry_run, NoOpWrite::MergePatch).await
        }
        other => other,
    }
}

async fn no_op_write(
    client: &ClusterClient,
    resource: &ResolvedResource,
    object: &ObjectRef,
    dry_run: bool,
    write: NoOpWrite,
) -> Result<super::client::Answer, ClusterError> {
    let query = {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if write == NoOpWrite::Apply {
            query.append_pair("fieldManager", FIELD_MANAGER);
        }
        if dry_run {
            query.append_pair("dryRun", "All");
        }
        query.finish()
    };
    let mut path = resource.object_path(object.namespace.as_deref(), &object.name);
    if !query.is_empty() {
        path = format!("{path}?{query}");
    }
    // The answer is one object's metadata: in JSON it costs kube-apiserver next to nothing
    // more, and the protobuf-first Accept is ~100 bytes longer on every request (measured in
    // `make bench-real`'s wire table); the answer is still read by its Content-Type.
    client
        .request(
            Method::PATCH,
            &path,
            METADATA,
            Some(write.body(resource, object)?),
        )
        .await
}

/// The no-op write of one object as a server-side dry run (`dryRun=All`): the same
/// request, authorized, converted, admitted (webhooks see `dryRun: true`) and validated as the
/// real one, never persisted. `Ok` is an answer the real write would get past; the answer's
/// body is not read (a dry run's resourceVersion says nothing).
pub async fn touch_dry_run(
    client: &ClusterClient,
    resource: &ResolvedResource,
    object: &ObjectRef,
) -> Result<(), ClusterError> {
    no_op_patch(client, resource, object, true).await.map(drop)
}

/// The no-op write of one object ([`NoOpWrite`]).
pub async fn touch(
    client: &ClusterClient,
    resource: &ResolvedResource,
    object: &ObjectRef,
) -> Result<Touched, ClusterError> {
    match no_op_patch(client, resource, object, false).await {
        Ok(answer) => {
            let patched = read_patched(&answer, object)?;
            if patched.first_apply_entry {
                clear_first_apply_entry(client, resource, object, &patched.resource_version).await;
            }
            Ok(if patched.resource_version == object.resource_version {
                Touched::AlreadyCurrent
            } else {
                Touched::Rewritten
            })
        }
        Err(err) if err.is_not_found() || deleted_since_listed(&err) => Ok(Touched::Gone),
        Err(err) if err.is_conflict() => Ok(Touched::Conflict),
        Err(err) => Err(err),
    }
}

/// The 409 an apply carrying a uid gets when no object of that name exists (recording 09e,
/// step B5: "uid mismatch: … and no existing object was found"): deleted since it was listed.
/// kube-apiserver gives it no reason of its own, so its message tells it from a stale
/// resourceVersion.
fn deleted_since_listed(err: &ClusterError) -> bool {
    matches!(err, ClusterError::Api { code: 409, message, .. }
        if message.contains("no existing object was found"))
}

/// An apply to an object without managedFields gives it one entry, `before-first-apply`
/// owning every field (seen on kube-apiserver v1.36: objects created before 1.18, or whose
/// managedFields were cleared). The migration must leave objects as it found them, so the
/// entry is cleared again (`managedFields: [{}]` clears them), under the resourceVersion the
/// apply answered: a user's write in between is a 409 and keeps the entry (harmless: it is
/// what the user's own first apply would have made). Such objects cost two writes.
async fn clear_first_apply_entry(
    client: &ClusterClient,
    resource: &ResolvedResource,
    object: &ObjectRef,
    resource_version: &str,
) {
    let path = resource.object_path(object.namespace.as_deref(), &object.name);
    let patch = serde_json::json!({
        "metadata": {"managedFields": [{}], "resourceVersion": resource_version}
    });
    let Ok(body) = serde_json::to_vec(&patch) else {
        return;
    };
    // Best effort: whatever the answer, the object is re-encoded already.
    let _ = client
        .request(
            Method::PATCH,
            &path,
            METADATA,
            Some(("application/merge-patch+json", body)),
        )
        .await;
}

/// The resourceVersion a no-op write answered with (in protobuf or JSON), and whether it gave
/// the object its first managedFields entry (JSON answers only: the write asks for JSON).
fn read_patched(
    answer: &super::client::Answer,
    object: &ObjectRef,
) -> Result<Patched, ClusterError> {
    let what = || format!("PATCH {}", object.display_name());
    if is_protobuf(&answer.headers) {
        let raw = protobuf_message(&answer.body, "PartialObjectMetadata", &what())?;
        let key = meta::decode_partial_object_metadata(&raw).map_err(|source| {
            ClusterError::Protobuf {
                what: what(),
                source,
            }
        })?;
        return Ok(Patched {
            resource_version: key.resource_version,
            first_apply_entry: false,
        });
    }
    let patched: PatchedBody =
        serde_json::from_slice(&answer.body).map_err(ClusterError::decode(what()))?;
    let entries = &patched.metadata.managed_fields;
    Ok(Patched {
        first_apply_entry: entries.len() == 1 && entries[0].manager == BEFORE_FIRST_APPLY,
        resource_version: patched.metadata.resource_version,
    })
}

/// The annotation on the BOOKMARK that ends a watch-list's initial events (recording 10b).
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A watch-list stream could not be opened this time; why. The caller pages instead, as
/// client-go's reflector falls back to LIST on any watch-list error ("making progress is
/// better than deadlocking").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamUnavailable(pub String);

/// One step of a watch-list stream's initial events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Initial {
    /// The next object (kube-apiserver sends them in key order, recording 10b).
    Object(ObjectRef),
    /// The initial-events-end bookmark: every object was sent, as of this resourceVersion
    /// (the list revision).
    End {
        /// The list's resourceVersion: the snapshot the initial events are as of.
        resource_version: String,
    },
    /// The stream cannot be finished: an ERROR event (etcd 3.4's 500, recording 10a; a 504
    /// "Too large resource version"), a broken or stalled stream, or one that ended before
    /// its bookmark. Why.
    Broken(String),
}

/// One event of a metadata watch, whichever the wire format.
#[derive(Clone, Debug, PartialEq, Eq)]
enum MetaEvent {
    Added(ObjectRef),
    Bookmark {
        resource_version: String,
        initial_events_end: bool,
    },
    /// MODIFIED or DELETED: changes after the initial events.
    Changed,
    /// An ERROR event: what it said.
    Error(String),
}

/// A metadata watch's events; an `Err` is a broken stream, and why.
type WatchEvents = std::pin::Pin<Box<dyn Stream<Item = Result<MetaEvent, String>> + Send>>;

/// A JSON event as kube's client parsed it.
fn json_event(event: kube::Result<WatchEvent<ItemBody>>) -> Result<MetaEvent, String> {
    match event {
        Ok(WatchEvent::Added(item)) => Ok(MetaEvent::Added(item.into_ref())),
        Ok(WatchEvent::Bookmark(bookmark)) => Ok(MetaEvent::Bookmark {
            initial_events_end: bookmark
                .metadata
                .annotations
                .get(INITIAL_EVENTS_END)
                .is_some_and(|v| v == "true"),
            resource_version: bookmark.metadata.resource_version,
        }),
        Ok(WatchEvent::Modified(_) | WatchEvent::Deleted(_)) => Ok(MetaEvent::Changed),
        Ok(WatchEvent::Error(status)) => Ok(MetaEvent::Error(format!(
            "ERROR event {} {}: {}",
            status.code, status.reason, status.message
        ))),
        Err(err) => Err(err.to_string()),
    }
}

/// One frame of a protobuf watch: a metav1.WatchEvent around a PartialObjectMetadata (a
/// Status for ERROR).
fn protobuf_event(frame: &[u8]) -> Result<MetaEvent, ProtobufError> {
    let (event_type, object) = meta::decode_watch_event(frame)?;
    let envelope = protobuf::decode_body(&object)?;
    if event_type == "ERROR" {
        let status = meta::status_from_pb(&envelope.raw)?;
        let field = |name: &str| status.get(name).cloned().unwrap_or_default();
        return Ok(MetaEvent::Error(format!(
            "ERROR event {} {}: {}",
            field("code"),
            field("reason").as_str().unwrap_or_default(),
            field("message").as_str().unwrap_or_default()
        )));
    }
    let key = meta::decode_partial_object_metadata(&envelope.raw)?;
    Ok(match event_type.as_str() {
        "ADDED" => MetaEvent::Added(object_ref(key)),
        "BOOKMARK" => MetaEvent::Bookmark {
            initial_events_end: key
                .annotations
                .get(INITIAL_EVENTS_END)
                .is_some_and(|v| v == "true"),
            resource_version: key.resource_version,
        },
        _ => MetaEvent::Changed,
    })
}

/// The events of a protobuf watch body, frame by frame as its bytes arrive.
fn protobuf_events<E: std::fmt::Display>(
    chunks: impl Stream<Item = Result<bytes::Bytes, E>> + Send + Unpin + 'static,
) -> WatchEvents {
    let frames = futures::stream::unfold(
        (chunks, FrameReader::new(MAX_FRAME_BYTES), false),
        |(mut chunks, mut reader, over)| async move {
            if over {
                return None;
            }
            loop {
                match reader.next_frame() {
                    Ok(Some(frame)) => {
                        let event = protobuf_event(&frame).map_err(|e| e.to_string());
                        let broken = event.is_err();
                        return Some((event, (chunks, reader, broken)));
                    }
                    Ok(None) => {}
                    Err(err) => return Some((Err(err.to_string()), (chunks, reader, true))),
                }
                match chunks.next().await {
                    Some(Ok(bytes)) => reader.push(&bytes),
                    Some(Err(err)) => {
                        return Some((Err(err.to_string()), (chunks, reader, true)));
                    }
                    None if reader.pending() > 0 => {
                        let cut = format!(
                            "the stream ended inside a frame ({} bytes)",
                            reader.pending()
                        );
                        return Some((Err(cut), (chunks, reader, true)));
                    }
                    None => return None,
                }
            }
        },
    );
    Box::pin(frames)
}

/// The initial events of a watch-list stream, read one at a time as the caller is ready for
/// them: what is not read stays in the connection (TCP pushes back on the apiserver), so
/// memory is what the caller holds.
pub struct InitialEvents {
    events: WatchEvents,
    /// When the stream is given up as stalled.
    deadline: tokio::time::Instant,
    over: bool,
}

impl InitialEvents {
    fn new(events: WatchEvents, guard: Duration) -> Self {
        Self {
            events,
            deadline: tokio::time::Instant::now() + guard,
            over: false,
        }
    }

    /// The next initial event. Cancel-safe: a call dropped before it finished loses nothing.
    /// After `End` or `Broken`, always `Broken`.
    pub async fn next(&mut self) -> Initial {
        if self.over {
            return Initial::Broken("the stream is over".into());
        }
        let step = loop {
            let event = match tokio::time::timeout_at(self.deadline, self.events.next()).await {
                Ok(Some(event)) => event,
                Ok(None) => {
                    break Initial::Broken(
                        "the stream ended before its initial-events-end bookmark".into(),
                    );
                }
                Err(_) => break Initial::Broken("no initial-events-end bookmark in time".into()),
            };
            match event {
                Ok(MetaEvent::Added(object)) => return Initial::Object(object),
                Ok(MetaEvent::Bookmark {
                    resource_version,
                    initial_events_end: true,
                }) => break Initial::End { resource_version },
                // A progress bookmark, or changes after the initial events (none come before
                // the bookmark).
                Ok(MetaEvent::Bookmark { .. } | MetaEvent::Changed) => {}
                Ok(MetaEvent::Error(why)) => break Initial::Broken(why),
                Err(err) => break Initial::Broken(format!("the stream broke: {err}")),
            }
        };
        self.over = true;
        step
    }
}

/// Opens a watch-list stream (`sendInitialEvents`, recording 10b) of the metadata of every
/// object of `resource`: one request instead of a LIST per page, served from kube-apiserver's
/// watch cache, read as it arrives ([`InitialEvents`]). Retriable answers to the request
/// itself (429, 5xx) are errors for the caller's retry loop; anything else that refuses it is
/// [`StreamUnavailable`].
pub async fn open_metadata_stream(
    client: &ClusterClient,
    resource: &ResolvedResource,
    timeout: Duration,
) -> Result<Result<InitialEvents, StreamUnavailable>, ClusterError> {
    let query = {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("watch", "1")
            .append_pair("allowWatchBookmarks", "true")
            .append_pair("sendInitialEvents", "true")
            .append_pair("resourceVersionMatch", "NotOlderThan")
            .append_pair("timeoutSeconds", &timeout.as_secs().max(1).to_string());
        query.finish()
    };
    let path = format!("{}?{query}", resource.collection_path());
    let request = Request::builder()
        .method(Method::GET)
        .uri(&path)
        .header(ACCEPT, object_accept(client))
        .body(Vec::new())
        .map_err(|e| ClusterError::config("building a request")(e.into()))?;
    // The server ends the stream at timeoutSeconds; the guard only catches one that stalls.
    let guard = timeout + Duration::from_secs(30);
    let opened = tokio::time::timeout(guard, open_events(client, request));
    match opened.await {
        Ok(Ok(events)) => Ok(Ok(InitialEvents::new(events, guard))),
        Ok(Err(err)) => match err {
            // Ours to retry (429, 5xx) or a bug (not catalogued).
            err @ ClusterError::Api { .. } if err.is_retriable() => Err(err),
            refused @ ClusterError::NotCatalogued(_) => Err(refused),
            other => Ok(Err(StreamUnavailable(other.to_string()))),
        },
        Err(_) => Ok(Err(StreamUnavailable(format!(
            "no answer to the watch-list request within {guard:?}"
        )))),
    }
}

/// Send a watch request and read its events by the answer's Content-Type: protobuf frames, or
/// JSON lines as kube's client reads them.
async fn open_events(
    client: &ClusterClient,
    request: Request<Vec<u8>>,
) -> Result<WatchEvents, ClusterError> {
    if client.wire_format() == WireFormat::Json {
        let events = client
            .kube()
            .request_events::<ItemBody>(request)
            .await
            .map_err(ClusterError::from_kube)?;
        return Ok(Box::pin(events.map(json_event)));
    }
    let (parts, body) = request.into_parts();
    let request = Request::from_parts(parts, kube::client::Body::from(body));
    let response = client
        .kube()
        .send(request)
        .await
        .map_err(ClusterError::from_kube)?;
    let (parts, body) = response.into_parts();
    if !parts.status.is_success() {
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        // Its Retry-After too: the watch cache still filling says when to come back.
        return Err(ClusterError::from_answer(
            parts.status,
            &parts.headers,
            &body,
        ));
    }
    if is_protobuf(&parts.headers) {
        return Ok(protobuf_events(body.into_data_stream()));
    }
    // JSON lines, as kube reads them.
    let lines = body
        .into_data_stream()
        .map(|chunk| chunk.map_err(std::io::Error::other));
    let reader = tokio_util::io::StreamReader::new(lines);
    let lines = tokio_util::codec::FramedRead::new(
        reader,
        tokio_util::codec::LinesCodec::new_with_max_length(MAX_FRAME_BYTES),
    );
    Ok(Box::pin(lines.map(|line| {
        let line = line.map_err(|e| e.to_string())?;
        json_event(serde_json::from_str(&line).map_err(kube::Error::SerdeError))
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Watch events as kube-apiserver writes them (recordings 10a, 10b), parsed as kube does.
    fn events(lines: &[&str]) -> WatchEvents {
        let parsed: Vec<Result<MetaEvent, String>> = lines
            .iter()
            .map(|line| json_event(serde_json::from_str(line).map_err(kube::Error::SerdeError)))
            .collect();
        Box::pin(futures::stream::iter(parsed))
    }

    const ADDED_A: &str = r#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"b","namespace":"demo","uid":"uid-b","resourceVersion":"12"}}}"#;
    const ADDED_B: &str = r#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"demo","uid":"uid-a","resourceVersion":"11"}}}"#;
    const PLAIN_BOOKMARK: &str = r#"{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"13"}}}"#;
    const END_BOOKMARK: &str = r#"{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"20","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
    const ETCD_34_ERROR: &str = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled","reason":"InternalError","code":500}}"#;

    fn object(name: &str, rv: &str) -> ObjectRef {
        ObjectRef {
            namespace: Some("demo".into()),
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: rv.into(),
        }
    }

    fn resource(group: &str, version: &str, kind: &str, namespaced: bool) -> ResolvedResource {
        ResolvedResource {
            group: group.into(),
            version: version.into(),
            resource: "things".into(),
            kind: kind.into(),
            namespaced,
        }
    }

    #[test]
    fn the_no_op_apply_names_only_the_object_and_its_listed_uid_and_resource_version() {
        let widgets = resource("example.test", "v2", "Widget", true);
        let (content_type, body) = NoOpWrite::Apply
            .body(&widgets, &object("w", "42"))
            .expect("body");
        assert_eq!(content_type, "application/apply-patch+yaml");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({"apiVersion": "example.test/v2", "kind": "Widget",
                "metadata": {"name": "w", "namespace": "demo", "uid": "uid-w",
                    "resourceVersion": "42"}})
        );
        // The core group's apiVersion is the version alone; a cluster-scoped object has no
        // namespace; an object listed without a uid, none.
        let nodes = resource("", "v1", "Node", false);
        let node = ObjectRef {
            namespace: None,
            name: "n".into(),
            uid: String::new(),
            resource_version: "7".into(),
        };
        let (_, body) = NoOpWrite::Apply.body(&nodes, &node).expect("body");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body["apiVersion"], "v1");
        assert_eq!(
            body["metadata"],
            serde_json::json!({"name": "n", "resourceVersion": "7"})
        );
        let (content_type, body) = NoOpWrite::MergePatch.body(&nodes, &node).expect("body");
        assert_eq!(content_type, "application/merge-patch+json");
        assert_eq!(body, br#"{"metadata":{"resourceVersion":"7"}}"#);
    }

    #[test]
    fn an_answer_with_only_the_before_first_apply_entry_is_an_object_that_had_none() {
        let answer = |managed: &str| {
            super::super::client::Answer {
            status: http::StatusCode::OK,
            headers: HeaderMap::new(),
            body: format!(
                r#"{{"kind":"PartialObjectMetadata","metadata":{{"name":"w","resourceVersion":"9","managedFields":{managed}}}}}"#
            )
            .into(),
        }
        };
        let read = |managed: &str| read_patched(&answer(managed), &object("w", "8")).expect("read");
        let first = read(r#"[{"manager":"before-first-apply","operation":"Update"}]"#);
        assert!(first.first_apply_entry);
        assert_eq!(first.resource_version, "9");
        assert!(!read(r#"[{"manager":"kubectl","operation":"Update"}]"#).first_apply_entry);
        assert!(!read("null").first_apply_entry);
        assert!(
            !read(r#"[{"manager":"before-first-apply"},{"manager":"kubectl"}]"#).first_apply_entry,
            "an object that had managedFields keeps its own"
        );
    }

    /// Every step of `lines` read as [`InitialEvents`], up to and with the first end.
    async fn read_all(lines: &[&str]) -> Vec<Initial> {
        let mut initial = InitialEvents::new(events(lines), Duration::from_secs(60));
        let mut got = Vec::new();
        loop {
            let step = initial.next().await;
            let last = !matches!(step, Initial::Object(_));
            got.push(step);
            if last {
                return got;
            }
        }
    }

    #[tokio::test]
    async fn the_initial_events_end_at_the_annotated_bookmark() {
        let got = read_all(&[ADDED_A, PLAIN_BOOKMARK, ADDED_B, END_BOOKMARK, ADDED_A]).await;
        assert_eq!(
            got,
            [
                Initial::Object(object("b", "12")),
                Initial::Object(object("a", "11")),
                Initial::End {
                    resource_version: "20".into()
                },
            ]
        );
    }

    #[tokio::test]
    async fn an_error_event_or_a_cut_stream_break_it_and_it_stays_over() {
        let refused = read_all(&[ETCD_34_ERROR]).await;
        assert!(
            matches!(&refused[..], [Initial::Broken(why)] if why.contains("500 InternalError") && why.contains("RequestWatchProgress")),
            "{refused:?}"
        );
        let cut = read_all(&[ADDED_A, ADDED_B]).await;
        assert!(
            matches!(&cut[2], Initial::Broken(why) if why.contains("before its initial-events-end bookmark")),
            "{cut:?}"
        );
        let broken = read_all(&[ADDED_A, "{\"type\":"]).await;
        assert!(
            matches!(&broken[1], Initial::Broken(why) if why.starts_with("the stream broke")),
            "{broken:?}"
        );
        let mut initial =
            InitialEvents::new(events(&[END_BOOKMARK, ADDED_A]), Duration::from_secs(60));
        assert!(matches!(initial.next().await, Initial::End { .. }));
        assert!(matches!(initial.next().await, Initial::Broken(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_is_broken_at_its_deadline() {
        let stalled = futures::stream::pending::<Result<MetaEvent, String>>();
        let mut initial = InitialEvents::new(Box::pin(stalled), Duration::from_secs(5));
        assert!(matches!(initial.next().await, Initial::Broken(why) if why.contains("in time")));
    }

    /// A protobuf watch frame as kube-apiserver writes it: a WatchEvent whose object is a whole
    /// body (magic, envelope) of a PartialObjectMetadata or, for ERROR, a Status.
    fn protobuf_frame(event_type: &str, object: serde_json::Value) -> Vec<u8> {
        let body = if event_type == "ERROR" {
            meta::status_body(&object).expect("a Status")
        } else {
            let raw = meta::meta_message(&object)
                .expect("a meta.k8s.io kind")
                .expect("encodes");
            protobuf::encode_body("meta.k8s.io/v1", "PartialObjectMetadata", raw)
        };
        protobuf::frame(&meta::watch_event(event_type, body))
    }

    fn line_object(line: &str) -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(line).expect("json")["object"].clone()
    }

    /// The same stream as JSON lines and as protobuf frames, cut into chunks of every size:
    /// the same steps.
    #[tokio::test]
    async fn protobuf_frames_read_as_json_lines_do() {
        let lines = [ADDED_A, PLAIN_BOOKMARK, ADDED_B, END_BOOKMARK];
        let types = ["ADDED", "BOOKMARK", "ADDED", "BOOKMARK"];
        let stream: Vec<u8> = lines
            .iter()
            .zip(types)
            .flat_map(|(line, event_type)| protobuf_frame(event_type, line_object(line)))
            .collect();
        let expected = read_all(&lines).await;
        for chunk in [1, 3, 7, 64, stream.len()] {
            let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = stream
                .chunks(chunk)
                .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
                .collect();
            let events = protobuf_events(futures::stream::iter(chunks));
            let mut initial = InitialEvents::new(events, Duration::from_secs(60));
            let mut got = Vec::new();
            loop {
                let step = initial.next().await;
                let last = !matches!(step, Initial::Object(_));
                got.push(step);
                if last {
                    break;
                }
            }
            assert_eq!(got, expected, "chunks of {chunk}");
        }
        // Cut inside the second frame: one object, then broken.
        let first_len = protobuf_frame("ADDED", line_object(ADDED_A)).len();
        let cut = vec![Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(
            &stream[..first_len + 5],
        ))];
        let mut initial = InitialEvents::new(
            protobuf_events(futures::stream::iter(cut)),
            Duration::from_secs(60),
        );
        assert!(matches!(initial.next().await, Initial::Object(_)));
        let broken = initial.next().await;
        assert!(
            matches!(&broken, Initial::Broken(why) if why.contains("inside a frame")),
            "{broken:?}"
        );
    }

    #[test]
    fn a_protobuf_error_event_and_a_bad_frame() {
        let error = protobuf_frame("ERROR", line_object(ETCD_34_ERROR));
        let event = protobuf_event(&error[4..]).expect("decodes");
        assert!(
            matches!(&event, MetaEvent::Error(why) if why.contains("500 InternalError") && why.contains("RequestWatchProgress")),
            "{event:?}"
        );
        assert!(protobuf_event(&[0x0a, 0x09, b'A']).is_err());
    }

    #[test]
    fn keys_sort_as_storage_keys_do() {
        let mut refs = [
            object("b", "1"),
            object("a", "1"),
            ObjectRef {
                namespace: Some("dem".into()),
                name: "z".into(),
                uid: String::new(),
                resource_version: "1".into(),
            },
        ];
        refs.sort_by_cached_key(ObjectRef::key);
        let keys: Vec<String> = refs.iter().map(ObjectRef::key).collect();
        assert_eq!(keys, ["dem/z", "demo/a", "demo/b"]);
    }
}
