use crate::ObjectRef;
use serde_json::json;

use super::*;
use crate::RestStorage;
use crate::rest::{DeleteOptions, ListParams, Preconditions};

fn with_finalizer(name: &str) -> Widget {
    let mut w = widget(name, 1);
    w.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    w
}

#[tokio::test]
async fn delete_without_finalizers_removes_and_returns_the_last_state() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    let deletion = store
        .delete("a", &Preconditions::default())
        .await
        .expect("deleted");
    assert!(deletion.gone);
    assert_eq!(deletion.object, created);
    assert_eq!(store.get("a").await.expect("get"), None);
    let err = store
        .delete("a", &Preconditions::default())
        .await
        .expect_err("gone");
    assert_eq!(err.code(), 404);
}

#[tokio::test]
async fn preconditions_are_checked_with_upstream_texts() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    let err = store
        .delete(
            "a",
            &Preconditions {
                uid: Some("other".into()),
                resource_version: None,
            },
        )
        .await
        .expect_err("uid");
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.to_string(),
        format!(
            "Operation cannot be fulfilled on Widget.test.example.io \"a\": the UID in the precondition (other) does not match the UID in record ({}). The object might have been deleted and then recreated",
            created.metadata.uid.clone().unwrap_or_default()
        )
    );
    let err = store
        .delete(
            "a",
            &Preconditions {
                uid: None,
                resource_version: Some("1".into()),
            },
        )
        .await
        .expect_err("rv");
    assert!(err.to_string().contains(&format!(
        "the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({})",
        rv(&created)
    )));
    assert!(store.get("a").await.expect("get").is_some());
    store
        .delete(
            "a",
            &Preconditions {
                uid: created.metadata.uid.clone(),
                resource_version: Some(rv(&created)),
            },
        )
        .await
        .expect("matching preconditions");
}

#[tokio::test]
async fn finalizers_hold_the_object_until_the_last_one_is_removed() {
    let store = store();
    let created = store.create(with_finalizer("a")).await.expect("created");
    let first = store
        .delete("a", &Preconditions::default())
        .await
        .expect("marked");
    assert!(!first.gone);
    let marked = first.object;
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(marked.metadata.generation, Some(2));
    assert_ne!(rv(&marked), rv(&created));

    // Deleting again changes nothing.
    let before = current_revision(&store).await;
    let again = store
        .delete("a", &Preconditions::default())
        .await
        .expect("again");
    assert!(!again.gone);
    assert_eq!(again.object, marked);
    assert_eq!(current_revision(&store).await, before);

    // No new finalizers while deleting.
    let mut more = marked.clone();
    more.metadata.finalizers = Some(vec!["example.com/hold".into(), "example.com/new".into()]);
    let err = store.update(more).await.expect_err("new finalizer");
    assert_eq!(invalid_fields(&err), vec!["metadata.finalizers"]);

    // Other updates still work, and keep the deletion timestamp.
    let mut relabel = marked.clone();
    relabel.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    relabel.metadata.deletion_timestamp = None;
    let relabelled = store.update(relabel).await.expect("relabel");
    assert_eq!(
        relabelled.metadata.deletion_timestamp,
        marked.metadata.deletion_timestamp
    );

    // Removing the last finalizer deletes the object.
    let mut release = relabelled.clone();
    release.metadata.finalizers = None;
    store.update(release).await.expect("released");
    assert_eq!(store.get("a").await.expect("get"), None);
}

#[tokio::test]
async fn dry_run_deletes_nothing() {
    let store = store();
    store.create(widget("plain", 1)).await.expect("created");
    store.create(with_finalizer("held")).await.expect("created");
    let opts = DeleteOptions {
        dry_run: true,
        ..Default::default()
    };
    let before = current_revision(&store).await;
    let plain = RestStorage::delete(&store, "v1", ObjectRef::from("plain"), &opts)
        .await
        .expect("dry delete");
    assert!(plain.gone);
    let held = RestStorage::delete(&store, "v1", ObjectRef::from("held"), &opts)
        .await
        .expect("dry mark");
    assert!(!held.gone);
    assert!(held.object["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(current_revision(&store).await, before);
    assert!(store.get("plain").await.expect("get").is_some());
    let held = store.get("held").await.expect("get").expect("held");
    assert_eq!(held.metadata.deletion_timestamp, None);
}

#[tokio::test]
async fn delete_collection_deletes_what_the_selectors_match() {
    let store = store();
    store
        .create(labelled("a", &[("team", "x")]))
        .await
        .expect("a");
    store
        .create(labelled("b", &[("team", "y")]))
        .await
        .expect("b");
    store
        .create(labelled("c", &[("team", "x")]))
        .await
        .expect("c");
    let deleted = RestStorage::delete_collection(
        &store,
        "v1",
        None,
        &ListParams {
            label_selector: Some("team=x".into()),
            ..Default::default()
        },
        &DeleteOptions::default(),
    )
    .await
    .expect("delete collection");
    assert_eq!(deleted["kind"], "WidgetList");
    assert_eq!(names(&deleted), vec!["a", "c"]);
    let (left, _) = store.list_all().await.expect("list");
    let left: Vec<_> = left.iter().map(|w| w.metadata.name.clone()).collect();
    assert_eq!(left, vec![Some("b".to_string())]);
    let none = RestStorage::delete_collection(
        &store,
        "v1",
        None,
        &ListParams {
            label_selector: Some("team=z".into()),
            ..Default::default()
        },
        &DeleteOptions::default(),
    )
    .await
    .expect("nothing to delete");
    assert_eq!(none["items"], json!([]));
}

#[tokio::test]
async fn propagation_policies_set_the_garbage_collectors_finalizers() {
    let store = store();
    let delete = |name: &'static str, policy: &'static str| {
        let store = &store;
        async move {
            let opts = DeleteOptions {
                propagation_policy: Some(policy.into()),
                ..Default::default()
            };
            RestStorage::delete(store, "v1", ObjectRef::from(name), &opts).await
        }
    };
    store.create(widget("fg", 1)).await.expect("fg");
    let foreground = delete("fg", "Foreground").await.expect("foreground");
    assert!(!foreground.gone, "held for the garbage collector");
    assert_eq!(
        foreground.object["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(foreground.object["metadata"]["deletionTimestamp"].is_string());

    store.create(with_finalizer("or")).await.expect("or");
    let orphan = delete("or", "Orphan").await.expect("orphan");
    assert_eq!(
        orphan.object["metadata"]["finalizers"],
        json!(["example.com/hold", "orphan"])
    );

    let mut gc_only = widget("bg", 1);
    gc_only.metadata.finalizers = Some(vec!["orphan".into()]);
    store.create(gc_only).await.expect("bg");
    let background = delete("bg", "Background").await.expect("background");
    assert!(
        background.gone,
        "background drops the GC finalizers: nothing holds it"
    );
    assert_eq!(store.get("bg").await.expect("get"), None);
}
