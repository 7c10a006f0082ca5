//! Watches: storage changes decoded into typed events for controllers, and into the REST
//! watch protocol (synthetic ADDED events, the `k8s.io/initial-events-end` bookmark, selector
//! transitions, bookmarks from storage progress, ERROR events carrying a Status).

use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, future};
use k8s_openapi::Metadata;
use serde_json::{Value, json};

use super::super::error::{ApiError, ApiResult, FieldError};
use super::super::rest::{WatchEvent, WatchEventStream, WatchParams};
use super::super::strategy::Strategy;
use super::read::{ListQuery, ReadAt};
use super::selection::Selection;
use super::{Store, decode_stored, parse_resource_version, too_large};
use svm_storage::{EventKind, Revision, StorageError, WatchItem};

/// A change to the objects of a store, for controllers.
#[derive(Debug, Clone)]
pub enum StoreEvent<O> {
    Added(O),
    Modified(O),
    /// The last state, with the delete's revision as resourceVersion.
    Deleted(O),
    /// Every change up to this revision has been delivered.
    Progress(Revision),
}

/// Typed watch events; an error ends the stream.
pub(crate) type StoreEventStream<O> = BoxStream<'static, ApiResult<StoreEvent<O>>>;

/// One decoded storage change, with the state before it (for selector transitions).
#[derive(Debug)]
pub(crate) enum Change<O> {
    Put { object: O, previous: Option<O> },
    Delete { last: O },
    Progress(Revision),
}

type ChangeStream<O> = BoxStream<'static, ApiResult<Change<O>>>;

/// The annotation of the bookmark that ends a watch's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

impl<S: Strategy> Store<S> {
    /// Every change after revision `after`, in order. A compacted `after` fails with 410.
    pub async fn watch(&self, after: Revision) -> ApiResult<StoreEventStream<S::Object>> {
        let changes = self.changes(after).await?;
        Ok(changes
            .map(|change| {
                change.map(|change| match change {
                    Change::Put {
                        object,
                        previous: None,
                    } => StoreEvent::Added(object),
                    Change::Put { object, .. } => StoreEvent::Modified(object),
                    Change::Delete { last } => StoreEvent::Deleted(last),
                    Change::Progress(revision) => StoreEvent::Progress(revision),
                })
            })
            .boxed())
    }

    pub(crate) async fn changes(&self, after: Revision) -> ApiResult<ChangeStream<S::Object>> {
        let watch_error = move |err: StorageError| match err {
            StorageError::Compacted { compacted, .. } => ApiError::Expired {
                message: format!("too old resource version: {after} ({compacted})"),
                continue_token: None,
            },
            StorageError::Unavailable { .. } => ApiError::from_storage(err, "", "", ""),
            other => ApiError::from_storage(other, "", "", ""),
        };
        let items = self
            .storage
            .watch(&self.prefix, after)
            .await
            .map_err(watch_error)?;
        let changes = items.map(move |item| {
            let change = match item.map_err(watch_error)? {
                WatchItem::Progress(revision) => Change::Progress(revision),
                WatchItem::Event(event) => match event.kind {
                    EventKind::Put => Change::Put {
                        object: decode_stored(&event.kv, event.kv.mod_revision)?,
                        previous: event
                            .prev
                            .as_ref()
                            .map(|prev| decode_stored(prev, prev.mod_revision))
                            .transpose()?,
                    },
                    EventKind::Delete => Change::Delete {
                        last: decode_stored(&event.kv, event.kv.mod_revision)?,
                    },
                },
            };
            Ok(change)
        });
        Ok(end_after_error(changes.boxed()))
    }

    /// A REST watch in `version`.
    pub(crate) async fn rest_watch(
        &self,
        version: &str,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> ApiResult<WatchEventStream> {
        let selection = Selection::parse(
            self.strategy.clone(),
            params.label_selector.as_deref(),
            params.field_selector.as_deref(),
        )?
        .within(namespace.map(str::to_string));
        check_initial_events(params)?;
        let requested = match params
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty())
        {
            None => None,
            Some(rv) => Some(parse_resource_version(rv)?).filter(|rv| *rv > 0),
        };
        let encoder = EventEncoder {
            strategy: self.strategy.clone(),
            version: version.to_string(),
            selection,
            bookmarks: params.allow_watch_bookmarks,
        };
        let (initial_events, after) = match self.start(&encoder, params, requested).await? {
            Start::At { initial, after } => (initial, after),
            Start::Failed(error) => {
                return Ok(with_timeout(stream::iter([error]).boxed(), params));
            }
        };
        let live: WatchEventStream = match self.changes(after).await {
            Ok(changes) => changes
                .filter_map(move |change| {
                    let event = match change {
                        Ok(change) => encoder
                            .translate(change)
                            .unwrap_or_else(|e| Some(error_event(e))),
                        // A watcher that fell behind is dropped; the client watches again
                        // from the last resourceVersion it saw.
                        Err(ApiError::ServiceUnavailable(_)) => None,
                        Err(err) => Some(error_event(err)),
                    };
                    future::ready(event)
                })
                .boxed(),
            Err(err) => stream::iter([error_event(err)]).boxed(),
        };
        let events = stream::iter(initial_events).chain(live).boxed();
        Ok(with_timeout(end_after_error_event(events), params))
    }

    /// Where a watch starts: its initial events (asked for with `sendInitialEvents`, or the
    /// legacy default of a watch from "" or "0") and the revision live events follow. A state
    /// the store has not reached yet is an ERROR event, as upstream's watch cache answers.
    async fn start(
        &self,
        encoder: &EventEncoder<S>,
        params: &WatchParams,
        requested: Option<Revision>,
    ) -> ApiResult<Start> {
        if !params.send_initial_events.unwrap_or(requested.is_none()) {
            let after = match requested {
                Some(revision) => revision,
                None => self
                    .storage
                    .current_revision()
                    .await
                    .map_err(|e| self.storage_error(e, ""))?,
            };
            return Ok(Start::At {
                initial: Vec::new(),
                after,
            });
        }
        let page = self
            .list_page(ListQuery {
                namespace: encoder.selection.namespace().map(str::to_string),
                selection: encoder.selection.clone(),
                limit: None,
                continue_token: None,
                read_at: ReadAt::Current,
            })
            .await?;
        if let Some(minimum) = requested.filter(|m| *m > page.revision) {
            return Ok(Start::Failed(error_event(too_large(
                minimum,
                page.revision,
            ))));
        }
        let mut events = Vec::with_capacity(page.items.len() + 1);
        for object in &page.items {
            events.push(WatchEvent {
                event_type: "ADDED",
                object: encoder.object(object)?,
            });
        }
        if params.send_initial_events == Some(true) && params.allow_watch_bookmarks {
            events.push(encoder.bookmark(page.revision, true));
        }
        Ok(Start::At {
            initial: events,
            after: page.revision,
        })
    }
}

/// How a REST watch starts.
enum Start {
    /// With these initial events, then live events after this revision.
    At {
        initial: Vec<WatchEvent>,
        after: Revision,
    },
    /// With this ERROR event only.
    Failed(WatchEvent),
}

/// `sendInitialEvents` needs `resourceVersionMatch=NotOlderThan` (422 otherwise, recording
/// 10b). Bookmarks are not required: without them the initial events just have no end marker.
fn check_initial_events(params: &WatchParams) -> ApiResult<()> {
    if params.send_initial_events.is_some()
        && params.resource_version_match.as_deref() != Some("NotOlderThan")
    {
        return Err(ApiError::Invalid {
            group: "meta.k8s.io".into(),
            kind: "ListOptions".into(),
            name: String::new(),
            causes: vec![FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        });
    }
    Ok(())
}

/// End a stream after its first error (the error itself is delivered).
fn end_after_error<T: Send + 'static>(
    items: BoxStream<'static, ApiResult<T>>,
) -> BoxStream<'static, ApiResult<T>> {
    items
        .scan(false, |ended, item| {
            if *ended {
                return future::ready(None);
            }
            *ended = item.is_err();
            future::ready(Some(item))
        })
        .boxed()
}

/// End a watch after its first ERROR event.
fn end_after_error_event(events: WatchEventStream) -> WatchEventStream {
    events
        .scan(false, |ended, event| {
            if *ended {
                return future::ready(None);
            }
            *ended = event.event_type == "ERROR";
            future::ready(Some(event))
        })
        .boxed()
}

fn with_timeout(events: WatchEventStream, params: &WatchParams) -> WatchEventStream {
    match params.timeout_seconds {
        Some(seconds) => events
            .take_until(tokio::time::sleep(Duration::from_secs(seconds)))
            .boxed(),
        None => events,
    }
}

fn error_event(err: ApiError) -> WatchEvent {
    WatchEvent {
        event_type: "ERROR",
        object: err.to_status(),
    }
}

/// Turns changes into watch events of one version, filtered by the selection.
struct EventEncoder<S: Strategy> {
    strategy: std::sync::Arc<S>,
    version: String,
    selection: Selection<S>,
    bookmarks: bool,
}

impl<S: Strategy> EventEncoder<S> {
    fn object(&self, obj: &S::Object) -> ApiResult<Value> {
        self.strategy.encode(&self.version, obj)
    }

    fn bookmark(&self, revision: Revision, initial_events_end: bool) -> WatchEvent {
        let info = self.strategy.info();
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
        }
        WatchEvent {
            event_type: "BOOKMARK",
            object: json!({
                "kind": info.kind,
                "apiVersion": format!("{}/{}", info.group, self.version),
                "metadata": metadata,
            }),
        }
    }

    /// The event a change means to this watcher: an object that starts matching is ADDED,
    /// one that stops matching DELETED (its last matching state at the change's revision).
    fn translate(&self, change: Change<S::Object>) -> ApiResult<Option<WatchEvent>> {
        let event = |event_type, object: &S::Object| -> ApiResult<Option<WatchEvent>> {
            Ok(Some(WatchEvent {
                event_type,
                object: self.object(object)?,
            }))
        };
        match change {
            Change::Progress(revision) if self.bookmarks => {
                Ok(Some(self.bookmark(revision, false)))
            }
            Change::Progress(_) => Ok(None),
            Change::Delete { last } if self.selection.matches(&last) => event("DELETED", &last),
            Change::Delete { .. } => Ok(None),
            Change::Put { object, previous } => {
                let now = self.selection.matches(&object);
                let before = previous.as_ref().map(|p| self.selection.matches(p));
                match (now, before) {
                    (true, Some(true)) => event("MODIFIED", &object),
                    (true, _) => event("ADDED", &object),
                    (false, Some(true)) => {
                        let mut last = previous.unwrap_or_else(|| object.clone());
                        last.metadata_mut().resource_version =
                            object.metadata().resource_version.clone();
                        event("DELETED", &last)
                    }
                    (false, _) => Ok(None),
                }
            }
        }
    }
}
