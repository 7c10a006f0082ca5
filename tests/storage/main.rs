//! The storage backends against one conformance suite of etcd semantics (each scenario on the
//! durable embedded store, the in-memory embedded store and a real etcd, each fresh), plus what
//! only the embedded store has: durability across restarts, torn-tail recovery, concurrency;
//! what only etcd has: three members, one killed at a time (`etcd_members`); and the
//! controllers' fence on both (`fence`).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use support::etcd::EtcdServer;
use svm_storage::embedded::{self, EmbeddedOptions, EmbeddedStorage};
use svm_storage::etcd::{EtcdOptions, EtcdStorage};
use svm_storage::{
    Compare, Event, EventKind, KeyValue, ListOptions, Op, Revision, Storage, StorageError, Txn,
    TxnOutcome, WatchItem, WatchStream,
};

/// Idle time before a watch sends `Progress` in these tests.
const PROGRESS: Duration = Duration::from_millis(100);
/// A watch that produces nothing for this long is hung: fail rather than wait forever.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// A fresh store and whatever must live as long as it (data dir, etcd process).
struct Backend {
    storage: Arc<dyn Storage>,
    _keep: Box<dyn std::any::Any>,
}

fn embedded_options() -> EmbeddedOptions {
    EmbeddedOptions {
        progress_interval: PROGRESS,
        ..EmbeddedOptions::default()
    }
}

async fn durable() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let storage = EmbeddedStorage::open_with(dir.path().join("data"), embedded_options())
        .await
        .unwrap();
    Backend {
        storage: Arc::new(storage),
        _keep: Box::new(dir),
    }
}

async fn in_memory() -> Backend {
    Backend {
        storage: Arc::new(EmbeddedStorage::in_memory_with(embedded_options())),
        _keep: Box::new(()),
    }
}

fn etcd_options() -> EtcdOptions {
    EtcdOptions {
        progress_interval: PROGRESS,
        request_timeout: Duration::from_secs(10),
        ..EtcdOptions::default()
    }
}

async fn etcd() -> Backend {
    let server = EtcdServer::start();
    let storage = EtcdStorage::connect(&[server.endpoint()], etcd_options())
        .await
        .unwrap();
    Backend {
        storage: Arc::new(storage),
        _keep: Box::new(server),
    }
}

/// One test per scenario and backend.
macro_rules! conformance {
    ($($scenario:ident),* $(,)?) => {
        mod on_embedded {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let backend = super::durable().await;
                    super::scenarios::$scenario(backend.storage.as_ref()).await;
                }
            )*
        }
        mod on_memory {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let backend = super::in_memory().await;
                    super::scenarios::$scenario(backend.storage.as_ref()).await;
                }
            )*
        }
        mod on_etcd {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let backend = super::etcd().await;
                    super::scenarios::$scenario(backend.storage.as_ref()).await;
                }
            )*
        }
    };
}

conformance!(
    revisions_start_at_one_and_advance_by_one,
    create_update_delete_check_their_preconditions,
    a_failed_compare_writes_nothing,
    a_transaction_commits_at_one_revision,
    invalid_transactions_are_rejected,
    list_pages_with_start_limit_and_remaining,
    list_at_a_past_revision_sees_that_revision,
    future_revisions_are_refused,
    compaction_expires_old_reads_and_watches,
    watch_replays_history_then_streams_live,
    delete_events_carry_the_previous_value,
    watch_sends_progress_when_idle,
    a_watch_ahead_of_the_store_waits_for_its_revision,
);

fn put(key: &str, value: &str) -> Op {
    Op::Put(key.into(), value.as_bytes().to_vec())
}

fn at(revision: Revision) -> ListOptions {
    ListOptions {
        revision: Some(revision),
        ..ListOptions::default()
    }
}

fn keys(items: &[KeyValue]) -> Vec<&str> {
    items.iter().map(|kv| kv.key.as_str()).collect()
}

fn text(kv: &KeyValue) -> &str {
    std::str::from_utf8(&kv.value).unwrap()
}

async fn next_item(stream: &mut WatchStream) -> Result<WatchItem, StorageError> {
    tokio::time::timeout(HANG_GUARD, stream.next())
        .await
        .expect("watch hung")
        .expect("watch ended")
}

/// The next `n` events, skipping progress items.
async fn next_events(stream: &mut WatchStream, n: usize) -> Vec<Event> {
    let mut events = Vec::new();
    while events.len() < n {
        match next_item(stream).await.unwrap() {
            WatchItem::Event(event) => events.push(event),
            WatchItem::Progress(_) => {}
        }
    }
    events
}

mod embedded_only;
mod etcd_members;
mod etcd_only;
mod fence;
mod more_scenarios;
mod scenarios;
