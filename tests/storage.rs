//! The storage backends against one conformance suite of etcd semantics (each scenario on the
//! durable embedded store, the in-memory embedded store and a real etcd, each fresh), plus what
//! only the embedded store has: durability across restarts, torn-tail recovery, concurrency.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use support::etcd::EtcdServer;
use svm_apiserver::storage::embedded::{self, EmbeddedOptions, EmbeddedStorage};
use svm_apiserver::storage::etcd::{EtcdOptions, EtcdStorage};
use svm_apiserver::storage::{
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

mod scenarios {
    pub use super::more_scenarios::*;
    use super::*;

    pub async fn revisions_start_at_one_and_advance_by_one(s: &dyn Storage) {
        assert_eq!(s.current_revision().await.unwrap(), 1);
        assert_eq!(s.create("/r/a", b"1".to_vec()).await.unwrap(), 2);
        assert_eq!(s.create("/r/b", b"1".to_vec()).await.unwrap(), 3);
        let a = s.get("/r/a").await.unwrap().unwrap();
        assert_eq!((a.create_revision, a.mod_revision), (2, 2));
        assert_eq!(s.update("/r/a", b"2".to_vec(), 2).await.unwrap(), 4);
        let a = s.get("/r/a").await.unwrap().unwrap();
        assert_eq!((a.create_revision, a.mod_revision), (2, 4));
        assert_eq!(text(&a), "2");
        assert_eq!(s.current_revision().await.unwrap(), 4);
        assert_eq!(s.get("/r/missing").await.unwrap(), None);
        // A re-created key starts a new life.
        assert_eq!(s.delete("/r/a", 4).await.unwrap(), 5);
        assert_eq!(s.create("/r/a", b"3".to_vec()).await.unwrap(), 6);
        let a = s.get("/r/a").await.unwrap().unwrap();
        assert_eq!((a.create_revision, a.mod_revision), (6, 6));
    }

    pub async fn create_update_delete_check_their_preconditions(s: &dyn Storage) {
        let created = s.create("/p/a", b"1".to_vec()).await.unwrap();
        assert!(matches!(
            s.create("/p/a", b"2".to_vec()).await,
            Err(StorageError::AlreadyExists { key }) if key == "/p/a"
        ));
        assert!(matches!(
            s.update("/p/a", b"2".to_vec(), created + 10).await,
            Err(StorageError::Conflict { key, expected, actual: Some(actual) })
                if key == "/p/a" && expected == created + 10 && actual == created
        ));
        assert!(matches!(
            s.update("/p/missing", b"2".to_vec(), created).await,
            Err(StorageError::NotFound { key }) if key == "/p/missing"
        ));
        assert!(matches!(
            s.delete("/p/a", created + 10).await,
            Err(StorageError::Conflict { actual: Some(actual), .. }) if actual == created
        ));
        assert!(matches!(
            s.delete("/p/missing", created).await,
            Err(StorageError::NotFound { .. })
        ));
        // None of the failures wrote anything.
        assert_eq!(s.current_revision().await.unwrap(), created);
        assert_eq!(text(&s.get("/p/a").await.unwrap().unwrap()), "1");

        let updated = s.update("/p/a", b"2".to_vec(), created).await.unwrap();
        assert_eq!(updated, created + 1);
        assert!(matches!(
            s.update("/p/a", b"3".to_vec(), created).await,
            Err(StorageError::Conflict { actual: Some(actual), .. }) if actual == updated
        ));
        let deleted = s.delete("/p/a", updated).await.unwrap();
        assert_eq!(deleted, updated + 1);
        assert_eq!(s.get("/p/a").await.unwrap(), None);
        assert!(matches!(
            s.delete("/p/a", updated).await,
            Err(StorageError::NotFound { .. })
        ));
    }

    pub async fn a_failed_compare_writes_nothing(s: &dyn Storage) {
        let b = s.create("/t/b", b"1".to_vec()).await.unwrap();
        let outcome = s
            .txn(Txn {
                compares: vec![
                    Compare::Absent("/t/a".into()),
                    Compare::ModRevision("/t/b".into(), b + 5),
                ],
                ops: vec![
                    put("/t/a", "1"),
                    put("/t/c", "1"),
                    Op::Delete("/t/b".into()),
                ],
            })
            .await
            .unwrap();
        assert_eq!(
            outcome,
            TxnOutcome::Failed {
                index: 1,
                current: Some(b)
            }
        );
        let outcome = s
            .txn(Txn {
                compares: vec![Compare::ModRevision("/t/zzz".into(), 2)],
                ops: vec![put("/t/a", "1")],
            })
            .await
            .unwrap();
        assert_eq!(
            outcome,
            TxnOutcome::Failed {
                index: 0,
                current: None
            }
        );
        let outcome = s
            .txn(Txn {
                compares: vec![Compare::Absent("/t/b".into())],
                ops: vec![put("/t/a", "1")],
            })
            .await
            .unwrap();
        assert_eq!(
            outcome,
            TxnOutcome::Failed {
                index: 0,
                current: Some(b)
            }
        );
        assert_eq!(s.current_revision().await.unwrap(), b);
        let all = s.list("/t/", ListOptions::default()).await.unwrap();
        assert_eq!(keys(&all.items), vec!["/t/b"]);
    }

    pub async fn a_transaction_commits_at_one_revision(s: &dyn Storage) {
        let b = s.create("/t/b", b"1".to_vec()).await.unwrap();
        let outcome = s
            .txn(Txn {
                compares: vec![
                    Compare::Absent("/t/a".into()),
                    Compare::ModRevision("/t/b".into(), b),
                ],
                ops: vec![
                    put("/t/a", "1"),
                    put("/t/c", "1"),
                    Op::Delete("/t/b".into()),
                ],
            })
            .await
            .unwrap();
        assert_eq!(outcome, TxnOutcome::Committed { revision: b + 1 });
        let all = s.list("/t/", ListOptions::default()).await.unwrap();
        assert_eq!(keys(&all.items), vec!["/t/a", "/t/c"]);
        assert!(all.items.iter().all(|kv| kv.mod_revision == b + 1));
        assert_eq!(all.revision, b + 1);

        // Passing compares without ops, or ops that change nothing, do not advance the revision.
        let noop = s
            .txn(Txn {
                compares: vec![Compare::Absent("/t/b".into())],
                ops: vec![],
            })
            .await
            .unwrap();
        assert_eq!(noop, TxnOutcome::Committed { revision: b + 1 });
        let noop = s
            .txn(Txn {
                compares: vec![],
                ops: vec![Op::Delete("/t/b".into())],
            })
            .await
            .unwrap();
        assert_eq!(noop, TxnOutcome::Committed { revision: b + 1 });
        assert_eq!(s.current_revision().await.unwrap(), b + 1);
    }

    pub async fn invalid_transactions_are_rejected(s: &dyn Storage) {
        let twice = s
            .txn(Txn {
                compares: vec![],
                ops: vec![put("/t/a", "1"), put("/t/a", "2")],
            })
            .await;
        assert!(
            matches!(twice, Err(StorageError::Io(ref e)) if e.kind() == std::io::ErrorKind::InvalidInput)
        );
        let empty_key = s
            .txn(Txn {
                compares: vec![],
                ops: vec![put("", "1")],
            })
            .await;
        assert!(matches!(empty_key, Err(StorageError::Io(_))));
        assert_eq!(s.current_revision().await.unwrap(), 1);
        assert_eq!(s.get("/t/a").await.unwrap(), None);
    }

    pub async fn list_pages_with_start_limit_and_remaining(s: &dyn Storage) {
        for key in ["/l/e", "/l/a", "/l/c", "/l/b", "/l/d", "/k/x", "/m/x", "/l"] {
            s.create(key, key.as_bytes().to_vec()).await.unwrap();
        }
        let all = s.list("/l/", ListOptions::default()).await.unwrap();
        assert_eq!(
            keys(&all.items),
            vec!["/l/a", "/l/b", "/l/c", "/l/d", "/l/e"]
        );
        assert_eq!((all.remaining, all.more()), (0, false));
        assert_eq!(all.revision, 9);

        let first = s
            .list(
                "/l/",
                ListOptions {
                    limit: Some(2),
                    ..ListOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(keys(&first.items), vec!["/l/a", "/l/b"]);
        assert_eq!((first.remaining, first.more()), (3, true));

        // The next page starts just after the last key, at the first page's revision.
        let second = s
            .list(
                "/l/",
                ListOptions {
                    start: Some("/l/b\0".into()),
                    limit: Some(2),
                    revision: Some(first.revision),
                },
            )
            .await
            .unwrap();
        assert_eq!(keys(&second.items), vec!["/l/c", "/l/d"]);
        assert_eq!(second.remaining, 1);
        assert_eq!(second.revision, first.revision);

        let last = s
            .list(
                "/l/",
                ListOptions {
                    start: Some("/l/d\0".into()),
                    limit: Some(2),
                    revision: Some(first.revision),
                },
            )
            .await
            .unwrap();
        assert_eq!(keys(&last.items), vec!["/l/e"]);
        assert_eq!((last.remaining, last.more()), (0, false));

        // A start key is inclusive; one before the prefix is clamped to it.
        let from_c = s
            .list(
                "/l/",
                ListOptions {
                    start: Some("/l/c".into()),
                    ..ListOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(keys(&from_c.items), vec!["/l/c", "/l/d", "/l/e"]);
        let from_before = s
            .list(
                "/l/",
                ListOptions {
                    start: Some("/a".into()),
                    limit: Some(1),
                    ..ListOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(keys(&from_before.items), vec!["/l/a"]);
        assert_eq!(from_before.remaining, 4);

        // A limit of zero returns nothing and counts everything.
        let count = s
            .list(
                "/l/",
                ListOptions {
                    limit: Some(0),
                    ..ListOptions::default()
                },
            )
            .await
            .unwrap();
        assert!(count.items.is_empty());
        assert_eq!(count.remaining, 5);

        let none = s.list("/nothing/", ListOptions::default()).await.unwrap();
        assert!(none.items.is_empty());
        assert_eq!((none.remaining, none.revision), (0, 9));
    }

    pub async fn list_at_a_past_revision_sees_that_revision(s: &dyn Storage) {
        let a = s.create("/h/a", b"a1".to_vec()).await.unwrap(); // 2
        let b = s.create("/h/b", b"b1".to_vec()).await.unwrap(); // 3
        let a2 = s.update("/h/a", b"a2".to_vec(), a).await.unwrap(); // 4
        s.delete("/h/b", b).await.unwrap(); // 5
        s.create("/h/c", b"c1".to_vec()).await.unwrap(); // 6

        let at3 = s.list("/h/", at(3)).await.unwrap();
        assert_eq!(at3.revision, 3);
        assert_eq!(keys(&at3.items), vec!["/h/a", "/h/b"]);
        assert_eq!(text(&at3.items[0]), "a1");
        assert_eq!(at3.items[0].mod_revision, a);

        let at5 = s.list("/h/", at(5)).await.unwrap();
        assert_eq!(keys(&at5.items), vec!["/h/a"]);
        assert_eq!(text(&at5.items[0]), "a2");
        assert_eq!(at5.items[0].mod_revision, a2);

        let paged = s
            .list(
                "/h/",
                ListOptions {
                    limit: Some(1),
                    revision: Some(3),
                    ..ListOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(keys(&paged.items), vec!["/h/a"]);
        assert_eq!(paged.remaining, 1);

        let now = s.list("/h/", ListOptions::default()).await.unwrap();
        assert_eq!(now.revision, 6);
        assert_eq!(keys(&now.items), vec!["/h/a", "/h/c"]);
    }

    pub async fn future_revisions_are_refused(s: &dyn Storage) {
        let current = s.create("/f/a", b"1".to_vec()).await.unwrap();
        assert!(matches!(
            s.list("/f/", at(current + 1)).await,
            Err(StorageError::FutureRevision { requested, current: c })
                if requested == current + 1 && c == current
        ));
        assert!(matches!(
            s.compact(current + 5).await,
            Err(StorageError::FutureRevision { .. })
        ));
        assert_eq!(s.list("/f/", at(current)).await.unwrap().items.len(), 1);
    }

    pub async fn compaction_expires_old_reads_and_watches(s: &dyn Storage) {
        let a = s.create("/c/a", b"1".to_vec()).await.unwrap(); // 2
        let a = s.update("/c/a", b"2".to_vec(), a).await.unwrap(); // 3
        s.create("/c/b", b"1".to_vec()).await.unwrap(); // 4
        let a = s.update("/c/a", b"3".to_vec(), a).await.unwrap(); // 5
        s.compact(4).await.unwrap();

        assert!(matches!(
            s.list("/c/", at(3)).await,
            Err(StorageError::Compacted {
                requested: 3,
                compacted: 4
            })
        ));
        let at4 = s.list("/c/", at(4)).await.unwrap();
        assert_eq!(keys(&at4.items), vec!["/c/a", "/c/b"]);
        assert_eq!(text(&at4.items[0]), "2");

        // A watch needs every revision after `after`: from 4 on is still there, 3 is not.
        match s.watch("/c/", 2).await {
            Err(StorageError::Compacted { compacted: 4, .. }) => {}
            Err(other) => panic!("expected Compacted, got {other:?}"),
            Ok(mut stream) => match next_item(&mut stream).await {
                Err(StorageError::Compacted { compacted: 4, .. }) => {}
                other => panic!("expected Compacted, got {other:?}"),
            },
        }
        let mut stream = s.watch("/c/", 3).await.unwrap();
        let events = next_events(&mut stream, 2).await;
        assert_eq!(
            events.iter().map(|e| e.kv.mod_revision).collect::<Vec<_>>(),
            vec![4, a]
        );
        assert_eq!(text(events[1].prev.as_ref().unwrap()), "2");

        assert!(matches!(
            s.compact(4).await,
            Err(StorageError::Compacted { .. })
        ));
        assert!(matches!(
            s.compact(3).await,
            Err(StorageError::Compacted { .. })
        ));
        s.compact(5).await.unwrap();
        assert!(matches!(
            s.list("/c/", at(4)).await,
            Err(StorageError::Compacted {
                requested: 4,
                compacted: 5
            })
        ));
        // Compaction keeps the current state whole.
        let now = s.list("/c/", ListOptions::default()).await.unwrap();
        assert_eq!(keys(&now.items), vec!["/c/a", "/c/b"]);
        assert_eq!(text(&now.items[0]), "3");
    }

    pub async fn watch_replays_history_then_streams_live(s: &dyn Storage) {
        let a = s.create("/w/a", b"a1".to_vec()).await.unwrap(); // 2
        s.create("/x/other", b"x".to_vec()).await.unwrap(); // 3
        let a2 = s.update("/w/a", b"a2".to_vec(), a).await.unwrap(); // 4
        s.create("/w/b", b"b1".to_vec()).await.unwrap(); // 5

        let mut stream = s.watch("/w/", a).await.unwrap();
        let replayed = next_events(&mut stream, 2).await;
        assert_eq!(replayed[0].kind, EventKind::Put);
        assert_eq!(replayed[0].kv.key, "/w/a");
        assert_eq!(replayed[0].kv.mod_revision, a2);
        assert_eq!(replayed[0].kv.create_revision, a);
        assert_eq!(text(&replayed[0].kv), "a2");
        let prev = replayed[0].prev.as_ref().unwrap();
        assert_eq!((text(prev), prev.mod_revision), ("a1", a));
        assert_eq!(replayed[1].kv.key, "/w/b");
        assert_eq!(replayed[1].prev, None);

        // Live: a multi-op transaction's events come in op order, other prefixes not at all.
        s.create("/x/other2", b"x".to_vec()).await.unwrap(); // 6
        let live = s
            .txn(Txn {
                compares: vec![],
                ops: vec![put("/w/z", "z1"), put("/x/y", "y"), put("/w/c", "c1")],
            })
            .await
            .unwrap();
        assert_eq!(live, TxnOutcome::Committed { revision: 7 });
        let a3 = s.update("/w/a", b"a3".to_vec(), a2).await.unwrap(); // 8
        let events = next_events(&mut stream, 3).await;
        let seen: Vec<(&str, Revision)> = events
            .iter()
            .map(|e| (e.kv.key.as_str(), e.kv.mod_revision))
            .collect();
        assert_eq!(seen, vec![("/w/z", 7), ("/w/c", 7), ("/w/a", a3)]);
        assert_eq!(text(events[2].prev.as_ref().unwrap()), "a2");

        // A second watch from the same point replays the same history.
        let mut again = s.watch("/w/", a).await.unwrap();
        let all = next_events(&mut again, 5).await;
        assert_eq!(
            all.iter().map(|e| e.kv.mod_revision).collect::<Vec<_>>(),
            vec![4, 5, 7, 7, 8]
        );
    }

    pub async fn delete_events_carry_the_previous_value(s: &dyn Storage) {
        let a = s.create("/d/a", b"a1".to_vec()).await.unwrap();
        let a2 = s.update("/d/a", b"a2".to_vec(), a).await.unwrap();
        let mut live = s.watch("/d/", a2).await.unwrap();
        let deleted = s.delete("/d/a", a2).await.unwrap();
        for stream in [&mut live, &mut s.watch("/d/", a2).await.unwrap()] {
            let event = next_events(stream, 1).await.remove(0);
            assert_eq!(event.kind, EventKind::Delete);
            assert_eq!(event.kv.key, "/d/a");
            assert_eq!(event.kv.mod_revision, deleted);
            assert_eq!(text(&event.kv), "a2");
            let prev = event.prev.unwrap();
            assert_eq!(
                (text(&prev), prev.mod_revision, prev.create_revision),
                ("a2", a2, a)
            );
        }
    }

    pub async fn watch_sends_progress_when_idle(s: &dyn Storage) {
        let current = s.create("/i/a", b"1".to_vec()).await.unwrap();
        let mut stream = s.watch("/i/", current).await.unwrap();
        match next_item(&mut stream).await.unwrap() {
            WatchItem::Progress(revision) => assert_eq!(revision, current),
            other => panic!("expected a progress item, got {other:?}"),
        }
        // Writes elsewhere advance the progress revision without events.
        let elsewhere = s.create("/j/a", b"1".to_vec()).await.unwrap();
        loop {
            match next_item(&mut stream).await.unwrap() {
                WatchItem::Progress(revision) if revision >= elsewhere => break,
                WatchItem::Progress(revision) => assert!(revision >= current),
                WatchItem::Event(event) => panic!("unexpected event {event:?}"),
            }
        }
        // An event still arrives when one happens.
        let b = s.create("/i/b", b"1".to_vec()).await.unwrap();
        let event = next_events(&mut stream, 1).await.remove(0);
        assert_eq!((event.kv.key.as_str(), event.kv.mod_revision), ("/i/b", b));
    }
}

mod more_scenarios {
    use super::*;

    pub async fn a_watch_ahead_of_the_store_waits_for_its_revision(s: &dyn Storage) {
        let current = s.current_revision().await.unwrap();
        let mut stream = s.watch("/a/", current + 2).await.unwrap();
        for key in ["/a/1", "/a/2", "/a/3"] {
            s.create(key, b"1".to_vec()).await.unwrap();
        }
        let event = next_events(&mut stream, 1).await.remove(0);
        assert_eq!(
            (event.kv.key.as_str(), event.kv.mod_revision),
            ("/a/3", current + 3)
        );
    }
}

mod embedded_only {
    use super::*;

    async fn open(dir: &std::path::Path) -> EmbeddedStorage {
        EmbeddedStorage::open_with(dir, embedded_options())
            .await
            .unwrap()
    }

    fn log_file(dir: &std::path::Path) -> std::path::PathBuf {
        dir.join("wal.log")
    }

    #[tokio::test]
    async fn data_and_revisions_survive_a_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        {
            let s = open(&dir).await;
            let a = s.create("/s/a", b"a1".to_vec()).await.unwrap(); // 2
            s.create("/s/b", b"b1".to_vec()).await.unwrap(); // 3
            let a = s.update("/s/a", b"a2".to_vec(), a).await.unwrap(); // 4
            s.compact(3).await.unwrap();
            s.create("/s/c", b"c1".to_vec()).await.unwrap(); // 5
            s.delete("/s/a", a).await.unwrap(); // 6
        }
        let s = open(&dir).await;
        assert_eq!(s.current_revision().await.unwrap(), 6);
        let now = s.list("/s/", ListOptions::default()).await.unwrap();
        assert_eq!(keys(&now.items), vec!["/s/b", "/s/c"]);
        assert_eq!(
            (now.items[0].create_revision, now.items[0].mod_revision),
            (3, 3)
        );
        let at4 = s.list("/s/", at(4)).await.unwrap();
        assert_eq!(keys(&at4.items), vec!["/s/a", "/s/b"]);
        assert_eq!(text(&at4.items[0]), "a2");
        assert!(matches!(
            s.list("/s/", at(2)).await,
            Err(StorageError::Compacted {
                requested: 2,
                compacted: 3
            })
        ));
        assert!(matches!(
            s.compact(3).await,
            Err(StorageError::Compacted { .. })
        ));
        let mut stream = s.watch("/s/", 3).await.unwrap();
        let replayed = next_events(&mut stream, 3).await;
        assert_eq!(
            replayed
                .iter()
                .map(|e| e.kv.mod_revision)
                .collect::<Vec<_>>(),
            vec![4, 5, 6]
        );
        assert_eq!(text(replayed[2].prev.as_ref().unwrap()), "a2");
        assert_eq!(s.create("/s/d", b"d1".to_vec()).await.unwrap(), 7);
        drop(stream);
        drop(s);

        // And once more, after a compaction that rewrote the log and a write on top of it.
        let s = open(&dir).await;
        s.compact(7).await.unwrap();
        s.create("/s/e", b"e1".to_vec()).await.unwrap(); // 8
        drop(s);
        let s = open(&dir).await;
        assert_eq!(s.current_revision().await.unwrap(), 8);
        let now = s.list("/s/", ListOptions::default()).await.unwrap();
        assert_eq!(keys(&now.items), vec!["/s/b", "/s/c", "/s/d", "/s/e"]);
        assert!(matches!(
            s.list("/s/", at(6)).await,
            Err(StorageError::Compacted { compacted: 7, .. })
        ));
    }

    #[tokio::test]
    async fn a_data_directory_is_used_by_one_store_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let first = open(&dir).await;
        first.create("/l/a", b"1".to_vec()).await.unwrap();
        match EmbeddedStorage::open(&dir).await {
            Err(StorageError::Unavailable(message)) => assert!(message.contains("in use")),
            Err(other) => panic!("expected Unavailable, got {other:?}"),
            Ok(_) => panic!("opened a data directory twice"),
        }
        drop(first);
        let second = open(&dir).await;
        assert_eq!(second.current_revision().await.unwrap(), 2);
    }

    #[tokio::test]
    async fn a_torn_last_record_is_cut_off_and_the_store_opens() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        {
            let s = open(&dir).await;
            s.create("/t/a", b"a".to_vec()).await.unwrap(); // 2
            s.create("/t/b", b"b".to_vec()).await.unwrap(); // 3
        }
        // A crash in the middle of appending revision 3: its record is half written.
        let path = log_file(&dir);
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        let s = open(&dir).await;
        assert_eq!(s.current_revision().await.unwrap(), 2);
        assert_eq!(s.get("/t/b").await.unwrap(), None);
        assert_eq!(text(&s.get("/t/a").await.unwrap().unwrap()), "a");
        // Writing goes on after the cut, and the result reads back whole.
        assert_eq!(s.create("/t/c", b"c".to_vec()).await.unwrap(), 3);
        drop(s);

        // A file extended with zeros before its data reached the disk looks the same.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, &[0u8; 100]).unwrap();
        drop(file);
        let s = open(&dir).await;
        assert_eq!(s.current_revision().await.unwrap(), 3);
        let all = s.list("/t/", ListOptions::default()).await.unwrap();
        assert_eq!(keys(&all.items), vec!["/t/a", "/t/c"]);
    }

    /// A store holding `/t/k0`..`/t/k9` (`/t/k<i>` at revision i + 2), closed; its log's bytes and the
    /// byte offset where each frame starts (the header's first).
    async fn ten_records(dir: &std::path::Path) -> (Vec<u8>, Vec<usize>) {
        {
            let s = open(dir).await;
            for i in 0..10 {
                s.create(&format!("/t/k{i}"), format!("value-{i}").into_bytes())
                    .await
                    .unwrap();
            }
        }
        let bytes = std::fs::read(log_file(dir)).unwrap();
        let mut starts = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            starts.push(at);
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            at += 8 + len;
        }
        assert_eq!(starts.len(), 11, "a header and ten transactions");
        (bytes, starts)
    }

    /// Opening fails with Corrupt naming the log file and the byte offset; nothing is changed.
    async fn assert_refused_at(dir: &std::path::Path, offset: usize) {
        let before = std::fs::read(log_file(dir)).unwrap();
        match EmbeddedStorage::open(dir).await {
            Err(StorageError::Corrupt(message)) => {
                assert!(
                    message.contains(&format!(
                        "{} is damaged at byte {offset} ",
                        log_file(dir).display()
                    )),
                    "{message}"
                );
                assert!(message.contains("store recover --data-dir"), "{message}");
            }
            Err(other) => panic!("expected Corrupt, got {other:?}"),
            Ok(_) => panic!("a damaged log opened"),
        }
        assert_eq!(
            std::fs::read(log_file(dir)).unwrap(),
            before,
            "the open changed the log"
        );
    }

    /// Keys under `/t/` and the store revision.
    async fn contents(dir: &std::path::Path) -> (Vec<String>, Revision) {
        let s = open(dir).await;
        let all = s.list("/t/", ListOptions::default()).await.unwrap();
        (
            all.items.iter().map(|kv| kv.key.clone()).collect(),
            s.current_revision().await.unwrap(),
        )
    }

    fn names(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("/t/k{i}")).collect()
    }

    #[tokio::test]
    async fn a_bad_length_field_mid_log_refuses_with_its_offset_and_recover_keeps_the_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let (mut bytes, starts) = ten_records(&dir).await;
        // The 5th transaction's length points past the end of the file: once taken for a
        // torn tail, which silently dropped it and the five committed records after it.
        bytes[starts[5]..starts[5] + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(log_file(&dir), &bytes).unwrap();
        assert_refused_at(&dir, starts[5]).await;

        let verification = embedded::verify(&dir).unwrap();
        let damage = verification.damage.clone().expect("damage");
        assert_eq!((damage.offset, damage.torn), (starts[5] as u64, false));
        assert_eq!(damage.intact_after, 5);
        assert_eq!(damage.revisions_after, Some((7, 11)));
        assert_eq!(verification.revision, Some(5));

        let recovery = embedded::recover(&dir).unwrap();
        assert_eq!(recovery.revision, 5);
        assert_eq!(recovery.kept_records, 5);
        let copy = recovery
            .damaged_copy
            .clone()
            .expect("the damaged log is kept");
        assert_eq!(std::fs::read(&copy).unwrap(), bytes);
        let text = recovery.to_string();
        assert!(
            text.contains("LOST: the damaged record and the 5 intact records after it"),
            "{text}"
        );
        assert_eq!(contents(&dir).await, (names(0..4), 5));
    }

    #[tokio::test]
    async fn a_damaged_header_refuses_at_byte_zero_and_recover_rebuilds_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let (mut bytes, starts) = ten_records(&dir).await;
        // Inside the header's payload (its revisions).
        bytes[starts[0] + 8 + 14] ^= 0x55;
        std::fs::write(log_file(&dir), &bytes).unwrap();
        assert_refused_at(&dir, 0).await;
        let recovery = embedded::recover(&dir).unwrap();
        assert!(recovery.header_rebuilt);
        assert_eq!(recovery.revision, 11);
        assert_eq!(contents(&dir).await, (names(0..10), 11));
        // The rebuilt header says revision 1 (the one before the first transaction), so the
        // history of every transaction is still there.
        let s = open(&dir).await;
        let at5 = s.list("/t/", at(5)).await.unwrap();
        assert_eq!(keys(&at5.items), names(0..4));
    }

    #[tokio::test]
    async fn a_bad_checksum_mid_log_refuses_and_a_damaged_last_record_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let (bytes, starts) = ten_records(&dir).await;
        let mut middle = bytes.clone();
        middle[starts[3] + 4] ^= 0x01;
        std::fs::write(log_file(&dir), &middle).unwrap();
        assert_refused_at(&dir, starts[3]).await;
        let recovery = embedded::recover(&dir).unwrap();
        assert_eq!(recovery.damage.as_ref().map(|d| d.intact_after), Some(7));
        assert_eq!(contents(&dir).await, (names(0..2), 3));

        // The same damage on the last record: a torn final record, cut on open.
        let mut last = bytes.clone();
        last[starts[10] + 4] ^= 0x01;
        std::fs::write(log_file(&dir), &last).unwrap();
        let verification = embedded::verify(&dir).unwrap();
        assert!(verification.damage.as_ref().is_some_and(|d| d.torn));
        assert_eq!(contents(&dir).await, (names(0..9), 10));
        assert_eq!(
            std::fs::metadata(log_file(&dir)).unwrap().len(),
            starts[10] as u64
        );
    }

    #[tokio::test]
    async fn an_empty_log_is_refused_never_taken_for_a_new_store() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        ten_records(&dir).await;
        std::fs::write(log_file(&dir), b"").unwrap();
        assert_refused_at(&dir, 0).await;
        assert!(matches!(
            embedded::recover(&dir),
            Err(StorageError::Corrupt(message)) if message.contains("nothing to keep")
        ));
        assert_eq!(std::fs::metadata(log_file(&dir)).unwrap().len(), 0);
    }

    #[tokio::test]
    async fn store_verify_and_recover_on_the_command_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let (mut bytes, starts) = ten_records(&dir).await;
        let run = |command: &str| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_svm-apiserver"))
                .args(["store", command, "--data-dir"])
                .arg(&dir)
                .output()
                .expect("run svm-apiserver store");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).to_string(),
            )
        };
        let (code, text) = run("verify");
        assert_eq!(code, Some(0), "{text}");
        assert!(
            text.contains("11 readable records") && text.contains("intact"),
            "{text}"
        );
        bytes[starts[8] + 10] ^= 0xff;
        std::fs::write(log_file(&dir), &bytes).unwrap();
        let (code, text) = run("verify");
        assert_eq!(code, Some(1), "{text}");
        assert!(
            text.contains(&format!("DAMAGED at byte {}", starts[8]))
                && text.contains("the damaged record and the 2 intact records after it"),
            "{text}"
        );
        let (code, text) = run("recover");
        assert_eq!(code, Some(0), "{text}");
        assert!(
            text.contains("kept 8 records")
                && text.contains("LOST: the damaged record and the 2 intact"),
            "{text}"
        );
        let (code, text) = run("verify");
        assert_eq!(code, Some(0), "{text}");
        assert_eq!(contents(&dir).await, (names(0..7), 8));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writers_get_distinct_increasing_revisions() {
        const WRITERS: usize = 8;
        const EACH: usize = 40;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let s = Arc::new(open(&dir).await);
        let mut watch = s.watch("/cw/", 1).await.unwrap();
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut revisions = Vec::new();
                    for i in 0..EACH {
                        let key = format!("/cw/{w}/{i:03}");
                        revisions.push((key.clone(), s.create(&key, vec![w as u8]).await.unwrap()));
                    }
                    revisions
                })
            })
            .collect();
        let mut written = Vec::new();
        for task in tasks {
            let revisions = task.await.unwrap();
            // Each writer's own writes are strictly increasing.
            assert!(revisions.windows(2).all(|p| p[0].1 < p[1].1));
            written.extend(revisions);
        }
        let mut revisions: Vec<Revision> = written.iter().map(|(_, r)| *r).collect();
        revisions.sort_unstable();
        let expected: Vec<Revision> = (2..2 + (WRITERS * EACH) as Revision).collect();
        assert_eq!(revisions, expected, "distinct and gap-free");

        let all = s.list("/cw/", ListOptions::default()).await.unwrap();
        assert_eq!(all.items.len(), WRITERS * EACH);
        for (key, revision) in &written {
            let kv = all.items.iter().find(|kv| &kv.key == key).unwrap();
            assert_eq!(kv.mod_revision, *revision);
        }
        // The watch saw every write once, in revision order.
        let events = next_events(&mut watch, WRITERS * EACH).await;
        let watched: Vec<Revision> = events.iter().map(|e| e.kv.mod_revision).collect();
        assert_eq!(watched, expected);
        drop(watch);
        drop(all);

        drop(s);
        let reopened = open(&dir).await;
        assert_eq!(
            reopened.current_revision().await.unwrap(),
            1 + (WRITERS * EACH) as Revision
        );
        let all = reopened.list("/cw/", ListOptions::default()).await.unwrap();
        assert_eq!(all.items.len(), WRITERS * EACH);
    }

    #[tokio::test]
    async fn a_watcher_too_far_behind_is_ended_with_an_error() {
        let s = EmbeddedStorage::in_memory_with(EmbeddedOptions {
            watch_buffer: 4,
            ..embedded_options()
        });
        let mut stream = s.watch("/lag/", 1).await.unwrap();
        for i in 0..10 {
            s.create(&format!("/lag/{i}"), vec![]).await.unwrap();
        }
        // The writers never waited; the watcher that did not read is told it lost its place.
        match next_item(&mut stream).await {
            Err(StorageError::Unavailable(message)) => assert!(message.contains("fell behind")),
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert!(stream.next().await.is_none());
        // Watching again from history catches up.
        let events = next_events(&mut s.watch("/lag/", 1).await.unwrap(), 10).await;
        assert_eq!(events.last().unwrap().kv.mod_revision, 11);
    }

    #[tokio::test]
    async fn dropping_the_store_ends_its_watches() {
        // Dropping the store ends its watches instead of leaving them hanging.
        let s = EmbeddedStorage::in_memory_with(embedded_options());
        let mut stream = s.watch("/", 1).await.unwrap();
        drop(s);
        loop {
            match tokio::time::timeout(HANG_GUARD, stream.next())
                .await
                .expect("hung")
            {
                None => break,
                Some(Ok(WatchItem::Progress(_))) => {}
                Some(other) => panic!("unexpected {other:?}"),
            }
        }
    }
}

mod etcd_only {
    use super::*;

    #[tokio::test]
    async fn connecting_to_nothing_is_unavailable() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = EtcdOptions {
            dial_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(3),
            ..etcd_options()
        };
        match EtcdStorage::connect(&[format!("http://127.0.0.1:{port}")], options).await {
            Err(StorageError::Unavailable(_)) => {}
            Err(other) => panic!("expected Unavailable, got {other:?}"),
            Ok(_) => panic!("connected to nothing"),
        }
        assert!(matches!(
            EtcdStorage::connect(&[], etcd_options()).await,
            Err(StorageError::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn losing_etcd_makes_requests_and_watches_unavailable() {
        let mut server = EtcdServer::start();
        let options = EtcdOptions {
            dial_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(3),
            ..etcd_options()
        };
        let s = EtcdStorage::connect(&[server.endpoint()], options)
            .await
            .unwrap();
        let revision = s.create("/u/a", b"1".to_vec()).await.unwrap();
        let mut stream = s.watch("/u/", revision).await.unwrap();
        s.health().await.unwrap();
        server.kill();

        assert!(matches!(
            s.health().await,
            Err(StorageError::Unavailable(_))
        ));
        assert!(matches!(
            s.get("/u/a").await,
            Err(StorageError::Unavailable(_))
        ));
        assert!(matches!(
            s.create("/u/b", b"1".to_vec()).await,
            Err(StorageError::Unavailable(_))
        ));
        // The watch ends with an error rather than going silent.
        loop {
            match next_item(&mut stream).await {
                Ok(WatchItem::Progress(_)) => {}
                Ok(WatchItem::Event(event)) => panic!("unexpected event {event:?}"),
                Err(StorageError::Unavailable(_)) => break,
                Err(other) => panic!("expected Unavailable, got {other:?}"),
            }
        }
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn a_list_larger_than_grpc_default_limits_is_read_whole() {
        let backend = etcd().await;
        let s = backend.storage.as_ref();
        // etcd takes at most 1.5 MiB per request; six 1 MiB values make a 6 MiB response.
        let value = vec![b'x'; 1 << 20];
        for i in 0..6 {
            s.create(&format!("/big/{i}"), value.clone()).await.unwrap();
        }
        let all = s.list("/big/", ListOptions::default()).await.unwrap();
        assert_eq!(all.items.len(), 6);
        assert!(all.items.iter().all(|kv| kv.value == value));
        // A value over etcd's request limit (1.5 MiB), or even over its gRPC limit (2 MiB), is
        // refused as invalid input, not as "unavailable".
        for size in [(3 << 20) / 2 + 1000, 3 << 20] {
            match s.create("/big/huge", vec![b'x'; size]).await {
                Err(StorageError::Io(e)) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{size}: {e}")
                }
                other => panic!("{size} bytes: expected InvalidInput, got {other:?}"),
            }
        }
        assert_eq!(s.get("/big/huge").await.unwrap(), None);
    }

    #[tokio::test]
    async fn values_and_keys_round_trip_unchanged() {
        let backend = etcd().await;
        let s = backend.storage.as_ref();
        let value: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let key = "/bytes/ключ with spaces/\u{1F980}";
        let revision = s.create(key, value.clone()).await.unwrap();
        let kv = s.get(key).await.unwrap().unwrap();
        assert_eq!(
            (kv.key.as_str(), kv.value, kv.mod_revision),
            (key, value, revision)
        );
    }
}
