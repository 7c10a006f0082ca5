//! Watch responses: HTTP 200, one compact `{"type":…,"object":…}` line per event (JSON), or one
//! length-prefixed metav1.WatchEvent frame per event (protobuf, `;stream=watch`), each written
//! as its own chunk, ending when the registry's stream ends, the timeout passes, the server shuts
//! down, or the client goes away (the body is dropped).
//!
//! Between the storage watch and the response sits a bounded buffer ([`WATCH_BUFFER_BYTES`]),
//! filled by a task of its own: a client that stops reading fills it (once its HTTP/2 stream
//! window, or over HTTP/1.1 the kernel's socket buffers, are full), and if no line can be added
//! for [`UNRESPONSIVE_GRACE`] the watcher is dropped (as kube-apiserver's cacheWatcher is): its
//! storage watch ends, the buffer is freed, an HTTP/1.1 connection is closed, and an HTTP/2
//! stream is reset when the client next reads. A client that reads, however slowly, frees room
//! and is never dropped. Writers and other watchers never wait for it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{StatusCode, header};
use rand::Rng;
use serde_json::{Value, json};

use super::negotiate::{MetaVersion, Target, protobuf_body};
use super::status::NO_CACHE_PRIVATE;
use super::table::{TableWriter, partial_object_metadata};
use svm_registry::ApiError;
use svm_registry::protobuf::{self, ProtobufKind, meta};
use svm_registry::rest::{WatchEvent, WatchEventStream};

/// kube-apiserver's `--min-request-timeout` default: watches without `timeoutSeconds` end after
/// a random time between this and twice this, so clients spread their re-watches.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// How each event's object is shown.
pub(crate) enum EventForm {
    Object,
    Table(TableWriter),
    PartialObjectMetadata(MetaVersion),
}

impl EventForm {
    pub(crate) fn for_target(target: Target, table: Option<TableWriter>) -> Self {
        match (target, table) {
            (Target::Table(_), Some(writer)) => EventForm::Table(writer),
            (Target::PartialObjectMetadata(meta), _) => EventForm::PartialObjectMetadata(meta),
            _ => EventForm::Object,
        }
    }
}

/// How the events are written on the wire.
#[derive(Clone, Copy)]
pub(crate) enum Framing {
    /// A compact JSON line per event.
    JsonLines,
    /// A 4-byte length and a metav1.WatchEvent message per event; the object is a whole
    /// protobuf body, written with the kind's messages (or as a `meta.k8s.io` form).
    Protobuf(Option<&'static dyn ProtobufKind>),
}

impl Framing {
    /// The response's Content-Type.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Framing::JsonLines => "application/json",
            Framing::Protobuf(_) => protobuf::WATCH_MEDIA_TYPE,
        }
    }

    /// One event on the wire.
    fn frame(self, event: &WatchEvent) -> Result<Bytes, ApiError> {
        match self {
            Framing::JsonLines => Ok(line(event)),
            Framing::Protobuf(kind) => {
                let body = protobuf_body(&event.object, kind).map_err(|err| {
                    ApiError::Internal(format!("encoding a watch event as protobuf: {err}"))
                })?;
                let message = meta::watch_event(event.event_type, body);
                Ok(Bytes::from(protobuf::frame(&message)))
            }
        }
    }
}

/// The effective duration of a watch.
pub(crate) fn watch_timeout(timeout_seconds: Option<u64>) -> Duration {
    match timeout_seconds {
        Some(seconds) => Duration::from_secs(seconds),
        None => {
            let jitter = rand::rng().random_range(0..MIN_REQUEST_TIMEOUT.as_secs());
            MIN_REQUEST_TIMEOUT + Duration::from_secs(jitter)
        }
    }
}

/// The framed events of a watch, transformed into the requested form. Errors in the transform
/// (a row the resource cannot render) or in the encoding end the stream with an ERROR event.
pub(crate) fn frame_events(
    events: WatchEventStream,
    form: EventForm,
    framing: Framing,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let mut columns_sent = false;
    let mut failed = false;
    events
        .map(move |event| {
            if failed {
                return None;
            }
            let framed =
                transform(event, &form, &mut columns_sent).and_then(|event| framing.frame(&event));
            match framed {
                Ok(bytes) => Some(bytes),
                Err(err) => {
                    failed = true;
                    let error = WatchEvent {
                        event_type: "ERROR",
                        object: err.to_status(),
                    };
                    // A Status always has a message in either framing.
                    Some(framing.frame(&error).unwrap_or_else(|_| line(&error)))
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

/// How much framed output one watcher may have waiting for its client.
pub(crate) const WATCH_BUFFER_BYTES: usize = 64 << 10;
/// How long a full buffer may stay full before the watcher is dropped as unresponsive.
pub(crate) const UNRESPONSIVE_GRACE: Duration = Duration::from_secs(5);

/// Called once when a watcher is dropped for not reading (to count it, to close its
/// connection).
pub(crate) type OnUnresponsive = Box<dyn FnOnce() + Send>;

/// The streaming response: `lines` are pumped into the bounded buffer by a task of their own
/// until they end, `timeout` passes, `shutdown` completes, or the client goes away.
pub(crate) fn response(
    lines: impl Stream<Item = Bytes> + Send + 'static,
    content_type: &'static str,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_unresponsive: OnUnresponsive,
) -> Response {
    response_with(
        lines,
        content_type,
        timeout,
        shutdown,
        Bounds {
            bytes: WATCH_BUFFER_BYTES,
            grace: UNRESPONSIVE_GRACE,
        },
        on_unresponsive,
    )
}

/// The buffer's bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub bytes: usize,
    pub grace: Duration,
}

pub(crate) fn response_with(
    lines: impl Stream<Item = Bytes> + Send + 'static,
    content_type: &'static str,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    bounds: Bounds,
    on_unresponsive: OnUnresponsive,
) -> Response {
    let buffer = Arc::new(Buffer::default());
    let gone = tokio_util::sync::CancellationToken::new();
    tokio::spawn(pump(
        lines,
        buffer.clone(),
        Ends {
            deadline: tokio::time::sleep(timeout),
            shutdown,
            gone: gone.clone(),
        },
        bounds,
        on_unresponsive,
    ));
    let reader = Reader {
        buffer,
        _gone: gone.drop_guard(),
    };
    let body = futures::stream::unfold(reader, |reader| async move {
        let next = reader.buffer.next().await?;
        Some((next, reader))
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, NO_CACHE_PRIVATE),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// What ends a watch besides its lines.
struct Ends<S> {
    deadline: tokio::time::Sleep,
    shutdown: S,
    /// Cancelled when the response body is dropped (the client went away).
    gone: tokio_util::sync::CancellationToken,
}

/// The response body's side: dropping it tells the pump the client is gone.
struct Reader {
    buffer: Arc<Buffer>,
    _gone: tokio_util::sync::DropGuard,
}

async fn pump<S: std::future::Future<Output = ()>>(
    lines: impl Stream<Item = Bytes>,
    buffer: Arc<Buffer>,
    ends: Ends<S>,
    bounds: Bounds,
    on_unresponsive: OnUnresponsive,
) {
    let Ends {
        deadline,
        shutdown,
        gone,
    } = ends;
    tokio::pin!(lines, deadline, shutdown);
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            () = &mut deadline => None,
            () = &mut shutdown => None,
            () = gone.cancelled() => return,
        };
        let Some(line) = line else {
            buffer.end(Ending::Finished);
            return;
        };
        tokio::select! {
            pushed = buffer.push(line, bounds) => if !pushed {
                buffer.end(Ending::Unresponsive);
                on_unresponsive();
                return;
            },
            () = gone.cancelled() => return,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Finished,
    Unresponsive,
}

/// The framed lines waiting for the client, at most [`Bounds::bytes`] of them (one line is
/// always taken, however long).
#[derive(Default)]
struct Buffer {
    state: Mutex<Queue>,
    /// The reader waits here for a line or the end.
    readable: tokio::sync::Notify,
    /// The pump waits here for room.
    writable: tokio::sync::Notify,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Bytes>,
    bytes: usize,
    ended: Option<Ending>,
}

impl Buffer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Every update is a single push or pop: a panic cannot leave it half done.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queue `line`, waiting up to the grace period for room; false when there was none.
    async fn push(&self, line: Bytes, bounds: Bounds) -> bool {
        let room = async {
            loop {
                let wait = self.writable.notified();
                {
                    let mut queue = self.lock();
                    if queue.lines.is_empty() || queue.bytes + line.len() <= bounds.bytes {
                        queue.bytes += line.len();
                        queue.lines.push_back(line.clone());
                        break;
                    }
                }
                wait.await;
            }
        };
        let pushed = tokio::time::timeout(bounds.grace, room).await.is_ok();
        if pushed {
            self.readable.notify_one();
        }
        pushed
    }

    /// No more lines: the reader ends after the queued ones (or at once, dropping them, for an
    /// unresponsive watcher).
    fn end(&self, ending: Ending) {
        {
            let mut queue = self.lock();
            if ending == Ending::Unresponsive {
                queue.lines.clear();
                queue.bytes = 0;
            }
            queue.ended = Some(ending);
        }
        self.readable.notify_one();
    }

    /// The next line for the client; `None` at a clean end.
    async fn next(&self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            let wait = self.readable.notified();
            {
                let mut queue = self.lock();
                if let Some(line) = queue.lines.pop_front() {
                    queue.bytes -= line.len();
                    drop(queue);
                    self.writable.notify_one();
                    return Some(Ok(line));
                }
                match queue.ended {
                    Some(Ending::Finished) => return None,
                    Some(Ending::Unresponsive) => {
                        return Some(Err(std::io::Error::other(
                            "watcher dropped: it did not read its events",
                        )));
                    }
                    None => {}
                }
            }
            wait.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::IncludeObject;
    use crate::testing::things;

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
        frame_events(events(), form, Framing::JsonLines)
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
        let writer = TableWriter::new(things(), "v1", MetaVersion::V1, IncludeObject::None);
        let lines = lines_of(EventForm::Table(writer)).await;
        assert_eq!(lines[0]["object"]["kind"], "Table");
        assert!(lines[0]["object"]["columnDefinitions"].is_array());
        assert!(lines[1]["object"]["columnDefinitions"].is_null());
        assert_eq!(lines[1]["object"]["rows"][0]["cells"], json!(["a", 1]));
        assert_eq!(lines[2]["object"]["rows"], json!([]));
        assert_eq!(lines[2]["object"]["metadata"]["resourceVersion"], "3");
    }

    fn line(n: usize) -> Bytes {
        Bytes::from(format!("{{\"n\":{n:05}}}\n"))
    }

    /// A reader that keeps up gets every line, in order, and a clean end.
    #[tokio::test]
    async fn a_reading_client_gets_every_line_through_a_small_buffer() {
        let lines = futures::stream::iter((0..500).map(line));
        let bounds = Bounds {
            bytes: 64,
            grace: Duration::from_secs(30),
        };
        let response = response_with(
            lines,
            "application/json",
            Duration::from_secs(60),
            std::future::pending(),
            bounds,
            Box::new(|| panic!("a reading client is never dropped")),
        );
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("clean end");
        let expected: Vec<u8> = (0..500).flat_map(|n| line(n).to_vec()).collect();
        assert_eq!(body.to_vec(), expected);
    }

    /// A client that never reads is dropped once its buffer stays full for the grace period:
    /// its source stops being read, and the body ends in an error.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_dropped() {
        let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = pulled.clone();
        let lines = futures::stream::iter(0..).map(move |n| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            line(n)
        });
        let (dropped, was_dropped) = tokio::sync::oneshot::channel();
        let response = response_with(
            lines,
            "application/json",
            Duration::from_secs(3600),
            std::future::pending(),
            Bounds {
                bytes: 100,
                grace: Duration::from_secs(5),
            },
            Box::new(move || {
                let _ = dropped.send(());
            }),
        );
        tokio::time::timeout(Duration::from_secs(6), was_dropped)
            .await
            .expect("dropped within the grace period")
            .expect("callback");
        // 100 bytes hold 8 lines of 12; one more was taken from the source and waited.
        let taken = pulled.load(std::sync::atomic::Ordering::SeqCst);
        assert!(taken <= 10, "{taken} lines pulled from the source");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        assert!(body.is_err(), "the body ends in an error, not cleanly");
    }

    #[tokio::test(start_paused = true)]
    async fn the_watch_ends_cleanly_at_its_timeout() {
        let response = response(
            futures::stream::pending(),
            "application/json",
            Duration::from_secs(10),
            std::future::pending(),
            Box::new(|| panic!("not unresponsive")),
        );
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("clean end");
        assert!(body.is_empty());
    }

    #[tokio::test]
    async fn metadata_watch_converts_objects() {
        let lines = lines_of(EventForm::PartialObjectMetadata(MetaVersion::V1)).await;
        assert_eq!(lines[0]["object"]["kind"], "PartialObjectMetadata");
        assert!(lines[0]["object"].get("spec").is_none());
    }
}
