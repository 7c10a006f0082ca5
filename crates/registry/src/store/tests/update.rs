use crate::ObjectRef;
use serde_json::json;

use super::*;
use crate::RestStorage;
use crate::rest::{Subresource, WriteOptions};

#[tokio::test]
async fn stale_missing_and_unknown_updates_fail_like_upstream() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    let mut next = created.clone();
    next.spec.size = 2;
    let updated = store.update(next.clone()).await.expect("updated");
    assert_ne!(rv(&updated), rv(&created));

    // Recording 09a's text.
    let err = store.update(next.clone()).await.expect_err("stale");
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.to_string(),
        "Operation cannot be fulfilled on widgets.test.example.io \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    let mut without_rv = updated.clone();
    without_rv.metadata.resource_version = None;
    let err = store.update(without_rv).await.expect_err("no rv");
    assert_eq!(err.code(), 422);
    assert_eq!(
        err.to_string(),
        "widgets.test.example.io \"a\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
    );

    let mut ghost = updated.clone();
    ghost.metadata.name = Some("ghost".into());
    let err = store.update(ghost).await.expect_err("update cannot create");
    assert_eq!(err.code(), 404);
    assert_eq!(store.get("ghost").await.expect("get"), None);
}

#[tokio::test]
async fn an_update_that_changes_nothing_writes_nothing() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    let before = current_revision(&store).await;
    let same = store.update(created.clone()).await.expect("no-op update");
    assert_eq!(rv(&same), rv(&created));
    assert_eq!(current_revision(&store).await, before);
    // A status-only no-op too.
    let same = store
        .update_status(created.clone())
        .await
        .expect("no-op status");
    assert_eq!(rv(&same), rv(&created));
    assert_eq!(current_revision(&store).await, before);
}

#[tokio::test]
async fn generation_moves_with_the_spec_only() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    assert_eq!(created.metadata.generation, Some(1));
    let mut labels_only = created.clone();
    labels_only.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    let labelled = store.update(labels_only).await.expect("labels");
    assert_eq!(labelled.metadata.generation, Some(1));
    let mut spec = labelled.clone();
    spec.spec.size = 5;
    spec.metadata.generation = Some(40);
    let bumped = store.update(spec).await.expect("spec");
    assert_eq!(
        bumped.metadata.generation,
        Some(2),
        "clients cannot set generation"
    );
}

#[tokio::test]
async fn system_metadata_survives_updates_and_uid_is_a_precondition() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    let mut bare = created.clone();
    bare.metadata.uid = None;
    bare.metadata.creation_timestamp = None;
    bare.spec.size = 2;
    let updated = store.update(bare).await.expect("updated");
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    assert_eq!(
        updated.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );

    let mut wrong = updated.clone();
    wrong.metadata.uid = Some("wrong".into());
    let err = store.update(wrong).await.expect_err("uid precondition");
    assert_eq!(err.code(), 409);
    assert!(err.to_string().contains(&format!(
        "Precondition failed: UID in precondition: wrong, UID in object meta: {}",
        created.metadata.uid.clone().unwrap_or_default()
    )));
}

#[tokio::test]
async fn main_resource_keeps_status_and_status_keeps_spec_and_metadata() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");

    let mut status = created.clone();
    status.status = Some(WidgetStatus {
        conditions: vec![WidgetCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: None,
        }],
        observed_generation: Some(1),
    });
    status.spec.size = 99;
    status.metadata.labels = Some([("sneaky".to_string(), "yes".to_string())].into());
    let with_status = store.update_status(status).await.expect("status update");
    assert_eq!(with_status.spec.size, 1, "status keeps the spec");
    assert_eq!(with_status.metadata.labels, None, "status keeps metadata");
    assert_eq!(
        with_status.status.as_ref().map(|s| s.conditions.len()),
        Some(1)
    );
    assert_eq!(with_status.metadata.generation, Some(1));

    let mut main = with_status.clone();
    main.status = None;
    main.spec.size = 2;
    let updated = store.update(main).await.expect("main update");
    assert_eq!(updated.status, with_status.status, "main keeps the status");
    assert_eq!(updated.spec.size, 2);

    let mut bad = updated.clone();
    bad.status = Some(WidgetStatus {
        conditions: vec![WidgetCondition {
            type_: "Ready".into(),
            status: "Maybe".into(),
            reason: None,
        }],
        observed_generation: None,
    });
    let err = store
        .update_status(bad)
        .await
        .expect_err("status validation");
    assert_eq!(invalid_fields(&err), vec!["status.conditions[0].status"]);
}

#[tokio::test]
async fn kind_update_validation_and_dry_run() {
    let store = store();
    let mut w = widget("a", 1);
    w.spec.color = Some("red".into());
    let created = store.create(w).await.expect("created");
    let mut recolored = created.clone();
    recolored.spec.color = Some("blue".into());
    let err = store.update(recolored).await.expect_err("immutable");
    assert_eq!(invalid_fields(&err), vec!["spec.color"]);
    assert_eq!(err.to_status()["details"]["kind"], "Widget");

    let mut body = body("a", 7);
    body["metadata"]["resourceVersion"] = json!(rv(&created));
    body["spec"]["color"] = json!("red");
    let opts = WriteOptions {
        dry_run: true,
        ..Default::default()
    };
    let before = current_revision(&store).await;
    let written = RestStorage::update(
        &store,
        "v1",
        ObjectRef::from("a"),
        Subresource::Main,
        body,
        &opts,
    )
    .await
    .expect("dry run update");
    assert!(!written.created);
    assert_eq!(written.object["spec"]["size"], 7);
    assert_eq!(current_revision(&store).await, before);
    assert_eq!(store.get("a").await.expect("get").expect("a").spec.size, 1);
}

#[tokio::test]
async fn rest_update_checks_the_name() {
    let store = store();
    store.create(widget("a", 1)).await.expect("created");
    let err = RestStorage::update(
        &store,
        "v1",
        ObjectRef::from("a"),
        Subresource::Main,
        body("b", 1),
        &WriteOptions::default(),
    )
    .await
    .expect_err("name mismatch");
    assert_eq!(err.code(), 400);
    assert_eq!(
        err.to_string(),
        "the name of the object (b) does not match the name on the URL (a)"
    );
}

#[tokio::test]
async fn concurrent_patches_all_land_through_the_retry_loop() {
    let store = Arc::new(store());
    store.create(widget("a", 1)).await.expect("created");
    let mut tasks = Vec::new();
    for i in 0..12 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let patch = json!({"metadata": {"labels": {format!("l{i}"): "x"}}});
            RestStorage::patch(
                &*store,
                "v1",
                ObjectRef::from("a"),
                Subresource::Main,
                crate::rest::PatchType::Merge,
                patch.to_string().as_bytes(),
                &WriteOptions::default(),
            )
            .await
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("patch lands");
    }
    let labels = store
        .get("a")
        .await
        .expect("get")
        .expect("a")
        .metadata
        .labels
        .expect("labels");
    assert_eq!(labels.len(), 12);
}

#[tokio::test]
async fn odd_update_bodies_are_400_not_panics() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    for body in [json!([1, 2]), json!("text"), json!({"metadata": 5})] {
        let err = RestStorage::update(
            &store,
            "v1",
            ObjectRef::from("a"),
            Subresource::Main,
            body.clone(),
            &WriteOptions::default(),
        )
        .await
        .expect_err("odd body");
        assert_eq!(err.code(), 400, "{body}");
    }
    // A body without a name takes the URL's.
    let mut nameless = json!({"metadata": {"resourceVersion": rv(&created)}, "spec": {"size": 3}});
    nameless["metadata"]["labels"] = json!({"k": "v"});
    let written = RestStorage::update(
        &store,
        "v1",
        ObjectRef::from("a"),
        Subresource::Main,
        nameless,
        &WriteOptions::default(),
    )
    .await
    .expect("named by the URL");
    assert_eq!(written.object["metadata"]["name"], "a");
    assert_eq!(written.object["spec"]["size"], 3);
}

#[tokio::test]
async fn extra_records_commit_with_the_object_or_not_at_all() {
    use crate::{Fence, Guarded, Record};
    let store = Arc::new(store());
    let storage = store.storage.clone();
    let guarded = Guarded::new(
        store.clone(),
        Fence::unfenced(storage.clone(), tokio_util::sync::CancellationToken::new()),
    );
    let put = |key: &str, value: &str| Record {
        key: key.to_string(),
        value: value.as_bytes().to_vec(),
    };

    // Create: the object and the extra key land at one revision.
    let created = guarded
        .create_with(widget("a", 1), &[put("/side/1", "one")])
        .await
        .expect("created");
    let side = storage
        .get("/side/1")
        .await
        .expect("get")
        .expect("side key");
    assert_eq!(side.mod_revision.to_string(), rv(&created));
    // A taken name writes neither.
    let err = guarded
        .create_with(widget("a", 1), &[put("/side/2", "two")])
        .await
        .expect_err("exists");
    assert_eq!(err.code(), 409);
    assert!(storage.get("/side/2").await.expect("get").is_none());

    // Status update: both at one revision.
    let mut next = created.clone();
    next.status = Some(WidgetStatus {
        observed_generation: Some(1),
        ..Default::default()
    });
    let updated = guarded
        .update_status_with(next.clone(), &[put("/side/3", "three")])
        .await
        .expect("updated");
    let side = storage
        .get("/side/3")
        .await
        .expect("get")
        .expect("side key");
    assert_eq!(side.mod_revision.to_string(), rv(&updated));

    // A stale resourceVersion writes neither.
    let err = guarded
        .update_status_with(next.clone(), &[put("/side/4", "four")])
        .await
        .expect_err("stale");
    assert_eq!(err.code(), 409);
    assert!(storage.get("/side/4").await.expect("get").is_none());

    // An unchanged status still writes the extra keys, and leaves the object as it was.
    let before = current_revision(&store).await;
    let same = guarded
        .update_status_with(updated.clone(), &[put("/side/5", "five")])
        .await
        .expect("extra only");
    assert_eq!(rv(&same), rv(&updated));
    assert_eq!(current_revision(&store).await, before + 1);
    assert!(storage.get("/side/5").await.expect("get").is_some());
    let stored = store.get("a").await.expect("get").expect("object");
    assert_eq!(rv(&stored), rv(&updated));
}

#[tokio::test]
async fn fenced_writes_commit_only_while_the_term_lasts_and_a_refusal_stops_the_controllers() {
    use crate::fence::{Stamp, writes_key};
    use crate::rest::Preconditions;
    use crate::{Fence, Guarded, Record};
    let store = Arc::new(store());
    let storage = store.storage.clone();
    let take_term = |holder: &'static str| crate::testing::take_term(&storage, ROOT, holder);
    let term = take_term("a").await;
    let token = tokio_util::sync::CancellationToken::new();
    let guarded = Guarded::new(
        store.clone(),
        Fence::for_term(storage.clone(), ROOT, "a", term, token.clone()),
    );
    let stamp = || async {
        let kv = storage
            .get(&writes_key(ROOT))
            .await
            .expect("get")
            .expect("stamp");
        (
            serde_json::from_slice::<Stamp>(&kv.value).expect("stamp"),
            kv.mod_revision,
        )
    };

    // While the term lasts, every kind of write lands, stamped with its holder.
    let created = guarded.create(widget("a", 1)).await.expect("create");
    assert_eq!(
        stamp().await,
        (
            Stamp {
                holder: "a".into(),
                term
            },
            created
                .metadata
                .resource_version
                .clone()
                .unwrap()
                .parse()
                .unwrap()
        )
    );
    let managers = |w: &Widget| -> Vec<String> {
        w.metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|e| e.manager.clone())
            .collect()
    };
    assert_eq!(managers(&created), ["svm-apiserver"]);
    let mut bigger = created.clone();
    bigger.spec.size = 2;
    let updated = guarded
        .clone()
        .managed_by("svm-apiserver-test")
        .update(bigger)
        .await
        .expect("update");
    assert!(
        managers(&updated).contains(&"svm-apiserver-test".to_string()),
        "{:?}",
        managers(&updated)
    );
    assert_eq!(stamp().await.1.to_string(), rv(&updated));
    guarded.create(widget("b", 1)).await.expect("create b");
    guarded
        .delete("b", &Preconditions::default())
        .await
        .expect("delete b");

    // Another replica takes the term: nothing more lands, and the controllers are stopped.
    take_term("someone-else").await;
    let before = current_revision(&store).await;
    let mut status = updated.clone();
    status.status = Some(WidgetStatus {
        observed_generation: Some(2),
        ..Default::default()
    });
    let side = Record {
        key: "/side/x".into(),
        value: b"x".to_vec(),
    };
    for refused in [
        guarded.update_status_with(status, &[side]).await.err(),
        guarded.create(widget("c", 1)).await.err(),
        guarded.delete("a", &Preconditions::default()).await.err(),
    ] {
        assert!(matches!(refused, Some(ApiError::Fenced(_))), "{refused:?}");
    }
    assert!(
        token.is_cancelled(),
        "a refused write stops the controllers"
    );
    assert_eq!(
        current_revision(&store).await,
        before,
        "nothing was written"
    );
    assert!(store.get("c").await.expect("get").is_none());
    assert_eq!(
        rv(&store.get("a").await.expect("get").expect("a")),
        rv(&updated)
    );
}
