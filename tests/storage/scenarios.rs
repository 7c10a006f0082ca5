//! What every Storage must do, run against the embedded store (durable and in memory) and etcd.

pub(crate) use super::more_scenarios::*;
use super::*;

pub(crate) async fn revisions_start_at_one_and_advance_by_one(s: &dyn Storage) {
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

pub(crate) async fn create_update_delete_check_their_preconditions(s: &dyn Storage) {
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

pub(crate) async fn a_failed_compare_writes_nothing(s: &dyn Storage) {
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

pub(crate) async fn a_transaction_commits_at_one_revision(s: &dyn Storage) {
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

pub(crate) async fn invalid_transactions_are_rejected(s: &dyn Storage) {
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

pub(crate) async fn list_pages_with_start_limit_and_remaining(s: &dyn Storage) {
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

pub(crate) async fn list_at_a_past_revision_sees_that_revision(s: &dyn Storage) {
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

pub(crate) async fn future_revisions_are_refused(s: &dyn Storage) {
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

pub(crate) async fn compaction_expires_old_reads_and_watches(s: &dyn Storage) {
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

pub(crate) async fn watch_replays_history_then_streams_live(s: &dyn Storage) {
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

pub(crate) async fn delete_events_carry_the_previous_value(s: &dyn Storage) {
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

pub(crate) async fn watch_sends_progress_when_idle(s: &dyn Storage) {
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
