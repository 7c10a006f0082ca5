//! WATCH: newline-delimited events over a chunked 200 (recordings 10a, 10b), or protobuf
//! frames (a 4-byte length and a WatchEvent whose object is a whole protobuf body, Content-Type
//! `application/vnd.kubernetes.protobuf;stream=watch`) where the Accept negotiates protobuf:
//! the metadata forms of any resource, a ConfigMap's own form (recordings 20b-20d).
//!
//! - `resourceVersion=N`: every change after N, then live events; N older than the compacted
//!   revision gets one ERROR event with a 410 Expired Status, N ahead of the store an ERROR
//!   504 "Too large resource version" once waiting does not help.
//! - `resourceVersion` "" or "0" without bookmarks: synthetic ADDED events for the current
//!   state, then live events (the legacy watch).
//! - `sendInitialEvents=true` (and, as kube-apiserver defaults it, a plain watch with
//!   `allowWatchBookmarks=true`): the initial ADDED events end with a BOOKMARK annotated
//!   `k8s.io/initial-events-end`, whose resourceVersion is the list revision.
//! - With bookmarks allowed, a BOOKMARK carrying the last resourceVersion sent precedes the
//!   close at `timeoutSeconds`, and one goes out every minute.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use crate::engine::{Engine, parse_resource_version, too_large_resource_version};
use crate::http::{Body, status_response};
use crate::negotiate::{Encoding, Output, negotiate_encoded};
use crate::objects::{Call, present, selectors};
use crate::protobuf;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiResult, Cause, StatusError};
use crate::store::{Event, EventType, ReadError, StoredValue};

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// Longest watch the double keeps open, whatever `timeoutSeconds` asks.
const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// How long a watch from a resourceVersion the store has not reached waits for it.
const TOO_LARGE_WAIT: Duration = Duration::from_secs(3);

#[derive(Clone, Debug)]
enum Form {
    Full,
    Metadata(String),
}

#[derive(Debug)]
enum Start {
    /// Current state as ADDED events; `watch_list` adds the initial-events-end bookmark.
    Initial {
        watch_list: bool,
        min_revision: Option<u64>,
    },
    /// Changes after this revision.
    After(u64),
    /// Only an ERROR event.
    Error(StatusError),
}

struct Plan {
    engine: Arc<Engine>,
    def: Arc<ResourceDef>,
    version: String,
    prefix: String,
    labels: LabelSelector,
    fields: FieldSelector,
    form: Form,
    /// The client asked for `as=PartialObjectMetadataList`, which no event can be encoded as.
    list_asked: bool,
    encoding: Encoding,
    bookmarks: bool,
    start: Start,
    timeout: Duration,
}

pub async fn serve(call: &Call<'_>) -> Response<Body> {
    match plan(call) {
        Ok(plan) => stream(plan),
        Err(err) => status_response(&err, call.pretty),
    }
}

/// `validateWatchOptions` (recording 10b, step 5).
fn validate(call: &Call<'_>) -> ApiResult<()> {
    let q = &call.query;
    let mut causes = Vec::new();
    let rvm = q.get("resourceVersionMatch").filter(|m| !m.is_empty());
    if q.has("sendInitialEvents") && rvm != Some("NotOlderThan") {
        causes.push(Cause::forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if let Some(m) = rvm {
        if !q.has("sendInitialEvents") {
            causes.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if m != "NotOlderThan" {
            causes.push(Cause::not_supported(
                "resourceVersionMatch",
                &crate::status::go_quote(m),
                &["NotOlderThan"],
            ));
        }
        if q.get("continue").is_some_and(|c| !c.is_empty()) {
            causes.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(StatusError::invalid_options("ListOptions", causes))
    }
}

fn plan(call: &Call<'_>) -> ApiResult<Plan> {
    let accept = call
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let def = &call.route.def;
    let speaks = protobuf::speaks(&def.group_version(&call.route.version), &def.kind);
    let (form, list_asked, encoding) = match negotiate_encoded(accept, false, speaks) {
        Some((Output::PartialMetadata { version }, e)) => (Form::Metadata(version), false, e),
        Some((Output::PartialMetadataList { version }, e)) => (Form::Metadata(version), true, e),
        Some((_, e)) => (Form::Full, false, e),
        None => {
            return Err(StatusError::not_acceptable(
                "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            ));
        }
    };
    validate(call)?;
    let (labels, fields) = selectors(&call.query)?;
    let q = &call.query;
    let timeout = match q.get("timeoutSeconds").filter(|t| !t.is_empty()) {
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| StatusError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
        )
        .min(MAX_TIMEOUT),
        None => DEFAULT_TIMEOUT,
    };
    let bookmarks = q.flag("allowWatchBookmarks");
    let rv = q.get("resourceVersion").unwrap_or("");
    let mut send_initial = if q.has("sendInitialEvents") {
        Some(q.flag("sendInitialEvents"))
    } else {
        None
    };
    // WatchList defaulting: a watch from "" or "0" that allows bookmarks is a watch-list.
    if send_initial.is_none() && bookmarks && (rv.is_empty() || rv == "0") {
        send_initial = Some(true);
    }
    let engine = call.engine.clone();
    let start = match send_initial {
        Some(true) if !engine.options.watch_list => Start::Error(StatusError::new(
            500,
            "InternalError",
            "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled",
        )),
        Some(true) => Start::Initial {
            watch_list: true,
            min_revision: if rv.is_empty() || rv == "0" {
                None
            } else {
                Some(parse_resource_version(rv)?)
            },
        },
        Some(false) if rv.is_empty() || rv == "0" => Start::After(engine.store.revision()),
        _ if rv.is_empty() || rv == "0" => Start::Initial {
            watch_list: false,
            min_revision: None,
        },
        _ => {
            let n = parse_resource_version(rv)?;
            let compacted = engine.store.compacted_revision();
            if n < compacted {
                Start::Error(StatusError::expired(format!(
                    "too old resource version: {n} ({compacted})"
                )))
            } else {
                Start::After(n)
            }
        }
    };
    Ok(Plan {
        engine,
        def: call.route.def.clone(),
        version: call.route.version.clone(),
        prefix: call.route.prefix(),
        labels,
        fields,
        form,
        list_asked,
        encoding,
        bookmarks,
        start,
        timeout,
    })
}

/// One event on the wire, and whether it is an ERROR.
struct Wire {
    bytes: Bytes,
    error: bool,
}

fn stream(plan: Plan) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Wire>(256);
    let list_asked = plan.list_asked;
    let content_type = match plan.encoding {
        Encoding::Json => "application/json",
        Encoding::Protobuf => protobuf::WATCH_MEDIA_TYPE,
    };
    tokio::spawn(run(plan, tx));
    let frames = futures::stream::unfold(rx, move |mut rx| async move {
        let wire = rx.recv().await?;
        // kube-apiserver cannot encode a watch event's object as PartialObjectMetadataList: it
        // ends the body at the first object or bookmark with nothing written (fidelity test,
        // etcd 3.5; recording 20d step 4 in protobuf); an ERROR event's Status is written as
        // usual.
        if list_asked && !wire.error {
            return None;
        }
        Some((Ok::<_, Infallible>(Frame::data(wire.bytes)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header("Audit-Id", uuid::Uuid::new_v4().to_string())
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .unwrap_or_else(|_| Response::new(crate::http::empty()))
}

impl Plan {
    /// An event in the negotiated encoding: a JSON line, or a protobuf frame.
    fn wire(&self, event_type: &str, object: Value) -> Wire {
        let bytes = match self.encoding {
            Encoding::Json => {
                let mut out = serde_json::to_vec(&json!({"type": event_type, "object": object}))
                    .unwrap_or_default();
                out.push(b'\n');
                out
            }
            // Every object a watch sends has messages here (negotiation saw to it).
            Encoding::Protobuf => {
                protobuf::watch_frame(event_type, protobuf::encode(&object).unwrap_or_default())
            }
        };
        Wire {
            bytes: Bytes::from(bytes),
            error: event_type == "ERROR",
        }
    }

    fn error_line(&self, err: &StatusError) -> Wire {
        self.wire("ERROR", err.to_json())
    }

    fn bookmark_line(&self, rev: u64, initial_end: bool) -> Wire {
        let mut metadata = json!({"resourceVersion": rev.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (kind, api_version) = match &self.form {
            Form::Full => (self.def.kind.clone(), self.def.group_version(&self.version)),
            Form::Metadata(v) => (
                "PartialObjectMetadata".to_string(),
                format!("meta.k8s.io/{v}"),
            ),
        };
        self.wire(
            "BOOKMARK",
            json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}),
        )
    }

    /// Decodes a stored value as the object at revision `rev`.
    fn object(&self, value: &StoredValue, rev: u64) -> Option<Value> {
        let mut obj = value.decode().ok()?;
        crate::object::set_meta(&mut obj, "resourceVersion", json!(rev.to_string()));
        Some(obj)
    }

    fn selected(&self, obj: &Value) -> bool {
        let labels = crate::object::metadata(obj)
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        self.labels.matches(labels) && self.fields.matches(obj)
    }

    fn event_line(&self, kind: EventType, obj: Value) -> Wire {
        let object = match &self.form {
            Form::Full => present(&self.def, obj, &self.version),
            Form::Metadata(v) => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": format!("meta.k8s.io/{v}"),
                "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
            }),
        };
        self.wire(kind.as_str(), object)
    }

    /// The event a watcher with selectors sees for a change (the watch cache's
    /// `convertToWatchEvent`: an object that starts matching is ADDED, one that stops
    /// matching is DELETED).
    fn translate(&self, event: &Event) -> Option<Wire> {
        let new = self.object(&event.value, event.rev)?;
        let filtering = !self.labels.is_empty() || !self.fields.is_empty();
        if !filtering {
            return Some(self.event_line(event.kind, new));
        }
        let new_ok = self.selected(&new);
        match event.kind {
            EventType::Added | EventType::Deleted => {
                new_ok.then(|| self.event_line(event.kind, new))
            }
            EventType::Modified => {
                let prev = event.prev.as_ref().and_then(|p| self.object(p, event.rev));
                let prev_ok = prev.as_ref().is_some_and(|p| self.selected(p));
                match (new_ok, prev_ok) {
                    (true, true) => Some(self.event_line(EventType::Modified, new)),
                    (true, false) => Some(self.event_line(EventType::Added, new)),
                    (false, true) => prev.map(|p| self.event_line(EventType::Deleted, p)),
                    (false, false) => None,
                }
            }
        }
    }

    async fn wait_for_revision(&self, wanted: u64, deadline: Instant) -> bool {
        let mut feed = self.engine.store.subscribe_revision();
        let limit = deadline.min(Instant::now() + TOO_LARGE_WAIT);
        matches!(
            tokio::time::timeout_at(limit, feed.wait_for(|r| *r >= wanted)).await,
            Ok(Ok(_))
        )
    }
}

async fn run(plan: Plan, tx: mpsc::Sender<Wire>) {
    let gr = plan.def.group_resource();
    let store = &plan.engine.store;
    // Subscribe before reading so nothing committed in between is missed.
    let mut events = store.table(&gr).subscribe();
    let deadline = Instant::now() + plan.timeout;
    let mut last_rev = match &plan.start {
        Start::Error(err) => {
            let _ = tx.send(plan.error_line(err)).await;
            return;
        }
        Start::Initial {
            watch_list,
            min_revision,
        } => {
            if let Some(min) = min_revision
                && !plan.wait_for_revision(*min, deadline).await
            {
                let err = too_large_resource_version(*min, store.revision());
                let _ = tx.send(plan.error_line(&err)).await;
                return;
            }
            let rev = store.revision();
            let mut from: Option<String> = None;
            loop {
                let scan = match store.scan(&gr, &plan.prefix, from.as_deref(), rev, 512) {
                    Ok(scan) => scan,
                    Err(ReadError::Compacted { compacted }) => {
                        let err = StatusError::expired(format!(
                            "too old resource version: {rev} ({compacted})"
                        ));
                        let _ = tx.send(plan.error_line(&err)).await;
                        return;
                    }
                };
                for entry in &scan.entries {
                    let Some(obj) = plan.object(&entry.value, entry.mod_rev) else {
                        continue;
                    };
                    if plan.selected(&obj)
                        && tx
                            .send(plan.event_line(EventType::Added, obj))
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
                if !scan.more {
                    break;
                }
                from = scan.entries.last().map(|e| format!("{}\u{0}", e.key));
            }
            if *watch_list
                && plan.bookmarks
                && tx.send(plan.bookmark_line(rev, true)).await.is_err()
            {
                return;
            }
            rev
        }
        Start::After(after) => {
            let after = *after;
            if after > store.revision() && !plan.wait_for_revision(after, deadline).await {
                let err = too_large_resource_version(after, store.revision());
                let _ = tx.send(plan.error_line(&err)).await;
                return;
            }
            let until = store.revision();
            match store.changes_since(&gr, &plan.prefix, after, until) {
                Err(ReadError::Compacted { compacted }) => {
                    let err = StatusError::expired(format!(
                        "too old resource version: {after} ({compacted})"
                    ));
                    let _ = tx.send(plan.error_line(&err)).await;
                    return;
                }
                Ok(replay) => {
                    for event in &replay {
                        if let Some(bytes) = plan.translate(event)
                            && tx.send(bytes).await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
            until.max(after)
        }
    };

    let mut ticker =
        tokio::time::interval_at(Instant::now() + BOOKMARK_INTERVAL, BOOKMARK_INTERVAL);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                if plan.bookmarks {
                    let _ = tx.send(plan.bookmark_line(last_rev, false)).await;
                }
                return;
            }
            _ = ticker.tick() => {
                if plan.bookmarks && tx.send(plan.bookmark_line(last_rev, false)).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
            received = events.recv() => match received {
                Ok(event) => {
                    if event.rev <= last_rev || !event.key.starts_with(&plan.prefix) {
                        continue;
                    }
                    last_rev = event.rev;
                    if let Some(bytes) = plan.translate(&event)
                        && tx.send(bytes).await.is_err()
                    {
                        return;
                    }
                }
                // Too slow to keep up: close, as the watch cache does; the client re-watches
                // from its last resourceVersion.
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}
