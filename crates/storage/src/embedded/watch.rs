//! Watch streams of the embedded store.
//!
//! Every committed transaction is published once, as one [`Committed`] batch, on a bounded
//! `tokio::sync::broadcast` channel; each watch holds a receiver and filters by its prefix. A
//! writer never waits for a watcher: a watcher that falls more than the channel's capacity
//! behind loses its place, and its stream ends with [`StorageError::Unavailable`] (the client
//! watches again from the last revision it saw, replaying from history). Memory therefore stays
//! bounded by the capacity, however slow a watcher is.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use crate::{Event, Revision, StorageError, WatchItem, WatchStream};

/// The events one committed transaction produced, in op order.
#[derive(Debug)]
pub(super) struct Committed {
    pub revision: Revision,
    pub events: Vec<Event>,
}

/// Where a new watch starts: the history to replay and the live feed that continues it. The
/// store takes both under one lock, so nothing falls between them.
pub(super) struct Start {
    pub prefix: String,
    pub after: Revision,
    pub replay: Vec<Event>,
    pub live: broadcast::Receiver<Arc<Committed>>,
    /// The store revision when the feed was subscribed: the replay covers everything up to it.
    pub revision: Revision,
    /// Idle time before a `Progress` item; zero disables them.
    pub progress_interval: Duration,
    /// The feed's capacity, for the error message of a watcher that lagged.
    pub capacity: usize,
}

pub(super) fn stream(start: Start) -> WatchStream {
    let cursor = Cursor {
        deadline: next_deadline(start.progress_interval),
        pending: start.replay.into(),
        delivered_through: start.revision,
        finished: false,
        prefix: start.prefix,
        after: start.after,
        live: start.live,
        progress_interval: start.progress_interval,
        capacity: start.capacity,
    };
    futures::stream::unfold(cursor, |mut cursor| async move {
        let item = cursor.next().await?;
        Some((item, cursor))
    })
    .boxed()
}

struct Cursor {
    prefix: String,
    after: Revision,
    pending: VecDeque<Event>,
    live: broadcast::Receiver<Arc<Committed>>,
    /// Every change up to this revision has been delivered or is in `pending`.
    delivered_through: Revision,
    /// When to send the next `Progress` if nothing else is sent; `None` = never.
    deadline: Option<Instant>,
    progress_interval: Duration,
    capacity: usize,
    finished: bool,
}

fn next_deadline(interval: Duration) -> Option<Instant> {
    (!interval.is_zero()).then(|| Instant::now() + interval)
}

impl Cursor {
    async fn next(&mut self) -> Option<Result<WatchItem, StorageError>> {
        if self.finished {
            return None;
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.deadline = next_deadline(self.progress_interval);
                return Some(Ok(WatchItem::Event(event)));
            }
            let received = match self.deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, self.live.recv()).await {
                    Ok(received) => received,
                    Err(_idle) => {
                        self.deadline = next_deadline(self.progress_interval);
                        return Some(Ok(WatchItem::Progress(self.delivered_through)));
                    }
                },
                None => self.live.recv().await,
            };
            match received {
                Ok(committed) => {
                    if committed.revision <= self.delivered_through {
                        continue;
                    }
                    self.delivered_through = committed.revision;
                    if committed.revision > self.after {
                        let mine = committed
                            .events
                            .iter()
                            .filter(|e| e.kv.key.starts_with(&self.prefix));
                        self.pending.extend(mine.cloned());
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    self.finished = true;
                    return Some(Err(StorageError::unavailable(format!(
                        "watch on {:?} fell behind by {missed} revisions (more than the {} it \
                         may buffer) after revision {}; watch again from there",
                        self.prefix, self.capacity, self.delivered_through
                    ))));
                }
                // The store is gone.
                Err(RecvError::Closed) => {
                    self.finished = true;
                    return None;
                }
            }
        }
    }
}
