use futures::StreamExt;
use serde_json::json;

use super::*;
use crate::RestStorage;
use crate::rest::WatchParams;
use crate::store::StoreEvent;

fn from(rv: &str) -> WatchParams {
    WatchParams {
        resource_version: Some(rv.to_string()),
        ..Default::default()
    }
}

async fn next_typed(events: &mut crate::store::StoreEventStream<Widget>) -> StoreEvent<Widget> {
    tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("an event arrives")
        .expect("the stream is open")
        .expect("no error")
}

#[tokio::test]
async fn typed_watch_delivers_changes_after_a_revision() {
    let store = store();
    store.create(widget("before", 1)).await.expect("before");
    let start = current_revision(&store).await;
    let mut events = store.watch(start).await.expect("watch");
    let created = store.create(widget("a", 1)).await.expect("a");
    let mut changed = created.clone();
    changed.spec.size = 2;
    let updated = store.update(changed).await.expect("update");
    store
        .delete("a", &Default::default())
        .await
        .expect("delete");
    let deleted_at = current_revision(&store).await;

    match next_typed(&mut events).await {
        StoreEvent::Added(w) => assert_eq!(w, created),
        other => panic!("expected Added, got {other:?}"),
    }
    match next_typed(&mut events).await {
        StoreEvent::Modified(w) => assert_eq!(w, updated),
        other => panic!("expected Modified, got {other:?}"),
    }
    match next_typed(&mut events).await {
        StoreEvent::Deleted(w) => {
            assert_eq!(w.spec.size, 2, "the last state");
            assert_eq!(rv(&w), deleted_at.to_string(), "at the delete's revision");
        }
        other => panic!("expected Deleted, got {other:?}"),
    }
}

#[tokio::test]
async fn rest_watch_from_a_revision_sends_only_later_events() {
    let store = store();
    let old = store.create(widget("old", 1)).await.expect("old");
    let mut events = RestStorage::watch(&store, "v1beta1", None, &from(&rv(&old)))
        .await
        .expect("watch");
    store.create(widget("new", 3)).await.expect("new");
    let event = next_event(&mut events).await;
    assert_eq!(event.event_type, "ADDED");
    assert_eq!(event.object["metadata"]["name"], "new");
    assert_eq!(event.object["apiVersion"], "test.example.io/v1beta1");
    assert_eq!(event.object["spec"]["count"], 3);
}

#[tokio::test]
async fn legacy_watch_starts_with_synthetic_added_events() {
    let store = store();
    store.create(widget("a", 1)).await.expect("a");
    store.create(widget("b", 1)).await.expect("b");
    let mut events = RestStorage::watch(&store, "v1", None, &WatchParams::default())
        .await
        .expect("watch");
    let first = next_event(&mut events).await;
    let second = next_event(&mut events).await;
    assert_eq!((first.event_type, second.event_type), ("ADDED", "ADDED"));
    assert_eq!(first.object["metadata"]["name"], "a");
    assert_eq!(second.object["metadata"]["name"], "b");
    store.create(widget("c", 1)).await.expect("c");
    let live = next_event(&mut events).await;
    assert_eq!(live.event_type, "ADDED");
    assert_eq!(live.object["metadata"]["name"], "c");
}

#[tokio::test]
async fn a_compacted_revision_is_one_error_event_then_the_end() {
    let store = store();
    let first = store.create(widget("a", 1)).await.expect("a");
    store.create(widget("b", 1)).await.expect("b");
    store.create(widget("c", 1)).await.expect("c");
    let current = current_revision(&store).await;
    store.storage.compact(current).await.expect("compact");
    let stale = (first
        .metadata
        .resource_version
        .clone()
        .expect("rv")
        .parse::<i64>()
        .expect("n")
        - 1)
    .to_string();
    let events: Vec<WatchEvent> = RestStorage::watch(&store, "v1", None, &from(&stale))
        .await
        .expect("the watch starts")
        .collect()
        .await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "ERROR");
    assert_eq!(events[0].object["code"], 410);
    assert_eq!(events[0].object["reason"], "Expired");
    // Recording 10a: "too old resource version: <requested> (<oldest kept>)".
    assert_eq!(
        events[0].object["message"],
        format!("too old resource version: {stale} ({current})")
    );
    let typed = store.watch(stale.parse().expect("n")).await;
    assert_eq!(typed.err().map(|e| e.code()), Some(410));
}

#[tokio::test]
async fn send_initial_events_ends_with_the_initial_events_end_bookmark() {
    let store = store();
    store.create(widget("a", 1)).await.expect("a");
    store.create(widget("b", 1)).await.expect("b");
    let list_rv = current_revision(&store).await;
    let params = WatchParams {
        send_initial_events: Some(true),
        resource_version_match: Some("NotOlderThan".into()),
        allow_watch_bookmarks: true,
        ..Default::default()
    };
    let mut events = RestStorage::watch(&store, "v1", None, &params)
        .await
        .expect("watch");
    assert_eq!(next_event(&mut events).await.event_type, "ADDED");
    assert_eq!(next_event(&mut events).await.event_type, "ADDED");
    let bookmark = next_event(&mut events).await;
    assert_eq!(bookmark.event_type, "BOOKMARK");
    assert_eq!(
        bookmark.object,
        json!({
            "kind": "Widget",
            "apiVersion": "test.example.io/v1",
            "metadata": {
                "resourceVersion": list_rv.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        })
    );
    store.create(widget("c", 1)).await.expect("c");
    let live = next_event(&mut events).await;
    assert_eq!(live.event_type, "ADDED");
    assert_eq!(live.object["metadata"]["name"], "c");
}

#[tokio::test]
async fn initial_events_without_bookmarks_have_no_end_marker() {
    let store = store();
    store.create(widget("a", 1)).await.expect("a");
    let params = WatchParams {
        send_initial_events: Some(true),
        resource_version_match: Some("NotOlderThan".into()),
        ..Default::default()
    };
    let mut events = RestStorage::watch(&store, "v1", None, &params)
        .await
        .expect("watch");
    assert_eq!(next_event(&mut events).await.event_type, "ADDED");
    store.create(widget("b", 1)).await.expect("b");
    let live = next_event(&mut events).await;
    assert_eq!(
        (live.event_type, live.object["metadata"]["name"].clone()),
        ("ADDED", json!("b"))
    );
}

#[tokio::test]
async fn send_initial_events_requires_not_older_than() {
    let store = store();
    let params = WatchParams {
        send_initial_events: Some(true),
        allow_watch_bookmarks: true,
        ..Default::default()
    };
    let err = RestStorage::watch(&store, "v1", None, &params)
        .await
        .err()
        .expect("422");
    assert_eq!(err.code(), 422);
    assert_eq!(
        err.to_string(),
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
}

#[tokio::test]
async fn selectors_turn_transitions_into_added_and_deleted() {
    let store = store();
    let start = current_revision(&store).await.to_string();
    let params = WatchParams {
        resource_version: Some(start),
        label_selector: Some("app=x".into()),
        ..Default::default()
    };
    let mut events = RestStorage::watch(&store, "v1", None, &params)
        .await
        .expect("watch");
    let plain = store
        .create(labelled("a", &[("app", "y")]))
        .await
        .expect("not matching");
    let mut matching = plain.clone();
    matching.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
    let matching = store.update(matching).await.expect("starts matching");
    let mut resized = matching.clone();
    resized.spec.size = 9;
    let resized = store.update(resized).await.expect("still matching");
    let mut unmatched = resized.clone();
    unmatched.metadata.labels = None;
    let unmatched = store.update(unmatched).await.expect("stops matching");
    store
        .delete("a", &Default::default())
        .await
        .expect("deleted while not matching");
    store
        .create(labelled("b", &[("app", "x")]))
        .await
        .expect("b matches");

    let added = next_event(&mut events).await;
    assert_eq!(added.event_type, "ADDED");
    assert_eq!(rv_of(&added.object), rv(&matching));
    let modified = next_event(&mut events).await;
    assert_eq!(modified.event_type, "MODIFIED");
    assert_eq!(modified.object["spec"]["size"], 9);
    let deleted = next_event(&mut events).await;
    assert_eq!(deleted.event_type, "DELETED");
    assert_eq!(
        deleted.object["metadata"]["labels"]["app"], "x",
        "the last matching state"
    );
    assert_eq!(
        rv_of(&deleted.object),
        rv(&unmatched),
        "at the change's revision"
    );
    let next = next_event(&mut events).await;
    assert_eq!(
        (next.event_type, next.object["metadata"]["name"].clone()),
        ("ADDED", json!("b"))
    );
}

#[tokio::test]
async fn bookmarks_follow_storage_progress_when_allowed() {
    let store = store_with_fast_progress();
    let created = store.create(widget("a", 1)).await.expect("a");
    let params = WatchParams {
        resource_version: Some(rv(&created)),
        allow_watch_bookmarks: true,
        ..Default::default()
    };
    let mut events = RestStorage::watch(&store, "v1", None, &params)
        .await
        .expect("watch");
    let bookmark = next_event(&mut events).await;
    assert_eq!(bookmark.event_type, "BOOKMARK");
    assert_eq!(
        bookmark.object,
        json!({"kind": "Widget", "apiVersion": "test.example.io/v1", "metadata": {"resourceVersion": rv(&created)}})
    );
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream() {
    let store = store();
    let params = WatchParams {
        timeout_seconds: Some(1),
        ..Default::default()
    };
    let events = RestStorage::watch(&store, "v1", None, &params)
        .await
        .expect("watch");
    let collected: Vec<WatchEvent> =
        tokio::time::timeout(Duration::from_secs(30), events.collect())
            .await
            .expect("the stream ends by itself");
    assert!(collected.is_empty());
}

#[tokio::test]
async fn watch_parameters_are_checked() {
    let store = store();
    let bad_rv = RestStorage::watch(&store, "v1", None, &from("abc"))
        .await
        .err()
        .expect("400");
    assert_eq!(bad_rv.code(), 400);
    let bad_selector = RestStorage::watch(
        &store,
        "v1",
        None,
        &WatchParams {
            label_selector: Some("a in".into()),
            ..Default::default()
        },
    )
    .await
    .err()
    .expect("400");
    assert_eq!(bad_selector.code(), 400);
}
