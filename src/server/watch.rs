//! Watch responses: HTTP 200, one compact `{"type":…,"object":…}` line per event, each written
//! as its own chunk, ending when the registry's stream ends, the timeout passes, the server shuts
//! down, or the client goes away (the body is dropped).

use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{StatusCode, header};
use rand::Rng;
use serde_json::{Value, json};

use super::negotiate::{MetaVersion, Target};
use super::status::NO_CACHE_PRIVATE;
use super::table::{TableWriter, partial_object_metadata};
use crate::registry::ApiError;
use crate::registry::rest::{WatchEvent, WatchEventStream};

/// kube-apiserver's `--min-request-timeout` default: watches without `timeoutSeconds` end after
/// a random time between this and twice this, so clients spread their re-watches.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// How each event's object is shown.
pub enum EventForm {
    Object,
    Table(TableWriter),
    PartialObjectMetadata(MetaVersion),
}

impl EventForm {
    pub fn for_target(target: Target, table: Option<TableWriter>) -> Self {
        match (target, table) {
            (Target::Table(_), Some(writer)) => EventForm::Table(writer),
            (Target::PartialObjectMetadata(meta), _) => EventForm::PartialObjectMetadata(meta),
            _ => EventForm::Object,
        }
    }
}

/// The effective duration of a watch.
pub fn watch_timeout(timeout_seconds: Option<u64>) -> Duration {
    match timeout_seconds {
        Some(seconds) => Duration::from_secs(seconds),
        None => {
            let jitter = rand::rng().random_range(0..MIN_REQUEST_TIMEOUT.as_secs());
            MIN_REQUEST_TIMEOUT + Duration::from_secs(jitter)
        }
    }
}

/// The framed lines of a watch, transformed into the requested form. Errors in the transform
/// (a row the resource cannot render) end the stream with an ERROR event.
pub fn frame_events(
    events: WatchEventStream,
    form: EventForm,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let mut columns_sent = false;
    let mut failed = false;
    events
        .map(move |event| {
            if failed {
                return None;
            }
            match transform(event, &form, &mut columns_sent) {
                Ok(event) => Some(line(&event)),
                Err(err) => {
                    failed = true;
                    Some(line(&WatchEvent {
                        event_type: "ERROR",
                        object: err.to_status(),
                    }))
                }
            }
        })
        .take_while(|line| futures::future::ready(line.is_some()))
        .filter_map(futures::future::ready)
}

fn transform(
    event: WatchEvent,
    form: &EventForm,
    columns_sent: &mut bool,
) -> Result<WatchEvent, ApiError> {
    // A Status (ERROR) is never transformed, as in kube-apiserver.
    if event.event_type == "ERROR" {
        return Ok(event);
    }
    let object = match form {
        EventForm::Object => return Ok(event),
        EventForm::PartialObjectMetadata(meta) => partial_object_metadata(&event.object, *meta),
        EventForm::Table(writer) if event.event_type == "BOOKMARK" => {
            // A bookmark carries only a resourceVersion: an empty Table keeps it.
            let mut table = writer.object_table(&json!({"metadata": {}}), false)?;
            table["rows"] = json!([]);
            table["metadata"] = json!({
                "resourceVersion": event.object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)
            });
            table
        }
        EventForm::Table(writer) => {
            // Only the first event's Table carries the column definitions.
            let table = writer.object_table(&event.object, !*columns_sent)?;
            *columns_sent = true;
            table
        }
    };
    Ok(WatchEvent {
        event_type: event.event_type,
        object,
    })
}

fn line(event: &WatchEvent) -> Bytes {
    let mut bytes = serde_json::to_vec(&json!({"type": event.event_type, "object": event.object}))
        .unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// The streaming response.
pub fn response(
    lines: impl Stream<Item = Bytes> + Send + 'static,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Response {
    let deadline = tokio::time::sleep(timeout);
    let until = async move {
        tokio::select! {
            () = deadline => {},
            () = shutdown => {},
        }
    };
    let body = lines
        .take_until(until)
        .map(Ok::<Bytes, std::convert::Infallible>);
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, NO_CACHE_PRIVATE),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::params::IncludeObject;
    use crate::server::testing::MemoryResource;

    fn events() -> WatchEventStream {
        let thing = |name: &str, rv: &str| {
            json!({"apiVersion": "test.example.io/v1", "kind": "Thing",
                   "metadata": {"name": name, "resourceVersion": rv}, "spec": {"size": 1}})
        };
        futures::stream::iter(vec![
            WatchEvent { event_type: "ADDED", object: thing("a", "2") },
            WatchEvent { event_type: "MODIFIED", object: thing("a", "3") },
            WatchEvent {
                event_type: "BOOKMARK",
                object: json!({"kind": "Thing", "apiVersion": "test.example.io/v1", "metadata": {"resourceVersion": "3"}}),
            },
        ])
        .boxed()
    }

    async fn lines_of(form: EventForm) -> Vec<Value> {
        frame_events(events(), form)
            .map(|bytes| {
                assert_eq!(bytes.last(), Some(&b'\n'));
                assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1);
                serde_json::from_slice::<Value>(&bytes).expect("json line")
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn plain_events_are_one_json_line_each() {
        let lines = lines_of(EventForm::Object).await;
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["type"], "ADDED");
        assert_eq!(lines[1]["object"]["metadata"]["resourceVersion"], "3");
        assert_eq!(lines[2]["type"], "BOOKMARK");
    }

    #[tokio::test]
    async fn table_watch_sends_columns_once() {
        let writer = TableWriter::new(
            MemoryResource::arc(),
            "v1",
            MetaVersion::V1,
            IncludeObject::None,
        );
        let lines = lines_of(EventForm::Table(writer)).await;
        assert_eq!(lines[0]["object"]["kind"], "Table");
        assert!(lines[0]["object"]["columnDefinitions"].is_array());
        assert!(lines[1]["object"]["columnDefinitions"].is_null());
        assert_eq!(lines[1]["object"]["rows"][0]["cells"], json!(["a", 1]));
        assert_eq!(lines[2]["object"]["rows"], json!([]));
        assert_eq!(lines[2]["object"]["metadata"]["resourceVersion"], "3");
    }

    #[tokio::test]
    async fn metadata_watch_converts_objects() {
        let lines = lines_of(EventForm::PartialObjectMetadata(MetaVersion::V1)).await;
        assert_eq!(lines[0]["object"]["kind"], "PartialObjectMetadata");
        assert!(lines[0]["object"].get("spec").is_none());
    }
}
