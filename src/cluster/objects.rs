//! The two calls a migration makes per page and per object: a metadata-only LIST page
//! (recording 06: `as=PartialObjectMetadataList`, so 10 KiB objects cost a few hundred bytes
//! each) and the no-op merge PATCH that carries only `metadata.resourceVersion` (recording 08:
//! the apiserver re-encodes the object in its current storage version and writes only when
//! the stored bytes change; a stale resourceVersion is a 409, recording 09a).

use std::time::Duration;

use futures::StreamExt;
use http::header::ACCEPT;
use http::{Method, Request};
use kube::core::WatchEvent;
use serde::Deserialize;

use super::client::ClusterClient;
use super::error::ClusterError;
use super::resources::ResolvedResource;

/// Accept header of a metadata-only list, with plain JSON as the fallback kube-apiserver
/// would use for a resource that cannot be transformed.
const METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// Accept header for the PATCH answer: only the metadata comes back, not the whole object.
const METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// An object to rewrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub namespace: Option<String>,
    pub name: String,
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
    #[serde(default, deserialize_with = "crate::cluster::wire::null_as_empty")]
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
        .request(Method::GET, &path, METADATA_LIST, None)
        .await?;
    let body: ListBody = serde_json::from_slice(&answer.body)
        .map_err(|e| ClusterError::Decode(format!("LIST {}: {e}", resource.group_resource())))?;
    Ok(MetadataPage {
        items: body.items.into_iter().map(ItemBody::into_ref).collect(),
        continue_token: Some(body.metadata.continue_token).filter(|t| !t.is_empty()),
        remaining: body.metadata.remaining_item_count,
        resource_version: body.metadata.resource_version,
    })
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
    metadata: ItemMeta,
}

/// The no-op merge PATCH of one object.
pub async fn touch(
    client: &ClusterClient,
    resource: &ResolvedResource,
    object: &ObjectRef,
) -> Result<Touched, ClusterError> {
    let path = resource.object_path(object.namespace.as_deref(), &object.name);
    let patch = serde_json::json!({"metadata": {"resourceVersion": object.resource_version}});
    let body = serde_json::to_vec(&patch)
        .map_err(|e| ClusterError::Decode(format!("encoding a patch: {e}")))?;
    match client
        .request(
            Method::PATCH,
            &path,
            METADATA,
            Some(("application/merge-patch+json", body)),
        )
        .await
    {
        Ok(answer) => {
            let patched: PatchedBody = serde_json::from_slice(&answer.body).map_err(|e| {
                ClusterError::Decode(format!("PATCH {}: {e}", object.display_name()))
            })?;
            Ok(
                if patched.metadata.resource_version == object.resource_version {
                    Touched::AlreadyCurrent
                } else {
                    Touched::Rewritten
                },
            )
        }
        Err(err) if err.is_conflict() => Ok(Touched::Conflict),
        Err(err) if err.is_not_found() => Ok(Touched::Gone),
        Err(err) => Err(err),
    }
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
    End { resource_version: String },
    /// The stream cannot be finished: an ERROR event (etcd 3.4's 500, recording 10a; a 504
    /// "Too large resource version"), a broken or stalled stream, or one that ended before
    /// its bookmark. Why.
    Broken(String),
}

type WatchEvents =
    std::pin::Pin<Box<dyn futures::Stream<Item = kube::Result<WatchEvent<ItemBody>>> + Send>>;

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
                Ok(WatchEvent::Added(item)) => return Initial::Object(item.into_ref()),
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    if bookmark
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .is_some_and(|v| v == "true")
                    {
                        break Initial::End {
                            resource_version: bookmark.metadata.resource_version,
                        };
                    }
                }
                // Changes after the initial events; none come before the bookmark.
                Ok(WatchEvent::Modified(_) | WatchEvent::Deleted(_)) => {}
                Ok(WatchEvent::Error(status)) => {
                    break Initial::Broken(format!(
                        "ERROR event {} {}: {}",
                        status.code, status.reason, status.message
                    ));
                }
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
        .header(ACCEPT, METADATA)
        .body(Vec::new())
        .map_err(|e| ClusterError::Config(format!("building a request: {e}")))?;
    // The server ends the stream at timeoutSeconds; the guard only catches one that stalls.
    let guard = timeout + Duration::from_secs(30);
    let opened = tokio::time::timeout(guard, client.kube().request_events::<ItemBody>(request));
    match opened.await {
        Ok(Ok(events)) => Ok(Ok(InitialEvents::new(Box::pin(events), guard))),
        Ok(Err(err)) => match ClusterError::from_kube(err) {
            // Ours to retry (429, 5xx) or a bug (not catalogued).
            err @ ClusterError::Api { .. } if err.is_retriable() => Err(err),
            refused @ ClusterError::Config(_) => Err(refused),
            other => Ok(Err(StreamUnavailable(other.to_string()))),
        },
        Err(_) => Ok(Err(StreamUnavailable(format!(
            "no answer to the watch-list request within {guard:?}"
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Watch events as kube-apiserver writes them (recordings 10a, 10b), parsed as kube does.
    fn events(
        lines: &[&str],
    ) -> futures::stream::Iter<std::vec::IntoIter<kube::Result<WatchEvent<ItemBody>>>> {
        let parsed: Vec<kube::Result<WatchEvent<ItemBody>>> = lines
            .iter()
            .map(|line| serde_json::from_str(line).map_err(kube::Error::SerdeError))
            .collect();
        futures::stream::iter(parsed)
    }

    const ADDED_A: &str = r#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"b","namespace":"demo","resourceVersion":"12"}}}"#;
    const ADDED_B: &str = r#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"demo","resourceVersion":"11"}}}"#;
    const PLAIN_BOOKMARK: &str = r#"{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"13"}}}"#;
    const END_BOOKMARK: &str = r#"{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"20","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
    const ETCD_34_ERROR: &str = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled","reason":"InternalError","code":500}}"#;

    fn object(name: &str, rv: &str) -> ObjectRef {
        ObjectRef {
            namespace: Some("demo".into()),
            name: name.into(),
            resource_version: rv.into(),
        }
    }

    /// Every step of `lines` read as [`InitialEvents`], up to and with the first end.
    async fn read_all(lines: &[&str]) -> Vec<Initial> {
        let mut initial = InitialEvents::new(Box::pin(events(lines)), Duration::from_secs(60));
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
        let mut initial = InitialEvents::new(
            Box::pin(events(&[END_BOOKMARK, ADDED_A])),
            Duration::from_secs(60),
        );
        assert!(matches!(initial.next().await, Initial::End { .. }));
        assert!(matches!(initial.next().await, Initial::Broken(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_is_broken_at_its_deadline() {
        let stalled = futures::stream::pending::<kube::Result<WatchEvent<ItemBody>>>();
        let mut initial = InitialEvents::new(Box::pin(stalled), Duration::from_secs(5));
        assert!(matches!(initial.next().await, Initial::Broken(why) if why.contains("in time")));
    }

    #[test]
    fn keys_sort_as_storage_keys_do() {
        let mut refs = [
            object("b", "1"),
            object("a", "1"),
            ObjectRef {
                namespace: Some("dem".into()),
                name: "z".into(),
                resource_version: "1".into(),
            },
        ];
        refs.sort_by_cached_key(ObjectRef::key);
        let keys: Vec<String> = refs.iter().map(ObjectRef::key).collect();
        assert_eq!(keys, ["dem/z", "demo/a", "demo/b"]);
    }
}
