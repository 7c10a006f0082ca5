//! etcd watch streams as `WatchStream`s.
//!
//! One etcd watch (its own gRPC stream) per `Storage::watch`, from `after + 1` with previous
//! values. Its responses become items: events in order (a delete carries the previous value at
//! the delete's revision), a progress notification — which etcd sends only once the watcher has
//! caught up, so every change up to its header revision has been delivered — becomes
//! `Progress`, and a cancellation with a compact revision becomes `Compacted`. When nothing has
//! been sent for the progress interval, the stream asks etcd for a progress notification.
//! Dropping the stream closes the etcd watch.

use std::collections::VecDeque;
use std::time::Duration;

use etcd_client::{EventType, WatchClient, WatchOptions, WatchResponse, WatchResponseStream};
use futures::StreamExt;
use tokio::time::Instant;

use crate::{Event, EventKind, KeyValue, Result, Revision, StorageError, WatchItem, WatchStream};

pub(super) fn stream(
    watch: etcd_client::WatchStream,
    start: Revision,
    progress: Duration,
) -> WatchStream {
    let (requests, responses) = watch.split();
    let cursor = Cursor {
        requests,
        responses,
        start,
        pending: VecDeque::new(),
        progress,
        deadline: next_deadline(progress),
        finished: false,
    };
    futures::stream::unfold(cursor, |mut cursor| async move {
        let item = cursor.next().await?;
        Some((item, cursor))
    })
    .boxed()
}

struct Cursor {
    /// Kept open for progress requests; dropping it ends the etcd watch.
    requests: etcd_client::WatchRequestSender,
    responses: WatchResponseStream,
    /// The revision the watch started from (`after + 1`).
    start: Revision,
    pending: VecDeque<Result<WatchItem>>,
    progress: Duration,
    /// When to ask etcd for progress if nothing was sent; `None` = never.
    deadline: Option<Instant>,
    finished: bool,
}

fn next_deadline(interval: Duration) -> Option<Instant> {
    (!interval.is_zero()).then(|| Instant::now() + interval)
}

impl Cursor {
    async fn next(&mut self) -> Option<Result<WatchItem>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                self.deadline = next_deadline(self.progress);
                if item.is_err() {
                    // An error ends the watch.
                    self.pending.clear();
                    self.finished = true;
                }
                return Some(item);
            }
            if self.finished {
                return None;
            }
            let received = match self.deadline {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, self.responses.next()).await {
                        Ok(received) => received,
                        Err(_idle) => {
                            self.deadline = next_deadline(self.progress);
                            if let Err(e) = self.requests.request_progress().await {
                                self.fail(format!("requesting watch progress: {e}"));
                            }
                            continue;
                        }
                    }
                }
                None => self.responses.next().await,
            };
            match received {
                Some(Ok(response)) => self.absorb(response),
                Some(Err(e)) => self.fail(format!("watch failed: {e}")),
                None => self.fail("etcd closed the watch".into()),
            }
        }
    }

    fn fail(&mut self, message: String) {
        self.pending
            .push_back(Err(StorageError::unavailable(format!("etcd: {message}"))));
    }

    fn absorb(&mut self, response: WatchResponse) {
        if response.compact_revision() > 0 {
            self.pending.push_back(Err(StorageError::Compacted {
                requested: self.start,
                compacted: response.compact_revision(),
            }));
            return;
        }
        if response.canceled() {
            let reason = response.cancel_reason().to_string();
            self.fail(format!("watch cancelled: {reason}"));
            return;
        }
        if response.created() {
            return;
        }
        if response.events().is_empty() {
            if let Some(header) = response.header() {
                self.pending
                    .push_back(Ok(WatchItem::Progress(header.revision())));
            }
            return;
        }
        for event in response.events() {
            self.pending.push_back(convert(event).map(WatchItem::Event));
        }
    }
}

fn convert(event: &etcd_client::Event) -> Result<Event> {
    let kv = event
        .kv()
        .ok_or_else(|| StorageError::unavailable("etcd sent an event without a key"))?;
    let prev = event.prev_kv().map(super::kv::key_value).transpose()?;
    Ok(match event.event_type() {
        EventType::Put => Event {
            kind: EventKind::Put,
            kv: super::kv::key_value(kv)?,
            prev,
        },
        EventType::Delete => {
            // etcd's delete event has the key and the delete's revision but no value; the
            // contract wants the value it had.
            let key = super::kv::key_value(kv)?.key;
            let deleted = KeyValue {
                key,
                value: prev.as_ref().map(|p| p.value.clone()).unwrap_or_default(),
                create_revision: prev.as_ref().map_or(0, |p| p.create_revision),
                mod_revision: kv.mod_revision(),
            };
            Event {
                kind: EventKind::Delete,
                kv: deleted,
                prev,
            }
        }
    })
}

/// The compacted revision etcd reports when a watch on `key` starts at `from` (which the caller
/// knows is compacted away); `None` if it does not say within `limit`.
pub(super) async fn compacted_revision(
    mut client: WatchClient,
    key: &str,
    from: Revision,
    limit: Duration,
) -> Option<Revision> {
    let probe = async {
        let options = WatchOptions::new().with_start_revision(from);
        let (_requests, mut responses) = client.watch(key, Some(options)).await.ok()?.split();
        while let Some(Ok(response)) = responses.next().await {
            if response.compact_revision() > 0 {
                return Some(response.compact_revision());
            }
            if response.canceled() {
                return None;
            }
        }
        None
    };
    tokio::time::timeout(limit, probe).await.ok().flatten()
}
