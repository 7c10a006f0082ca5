//! The strategy's warnings reach the REST answer of every write that earns them: create (a
//! dry run too), update, patch, server-side apply (update and create); a `/status` write and
//! a write that does not bring the deprecated label earn none.

use serde_json::{Value, json};

use super::*;
use crate::ObjectRef;
use crate::RestStorage;
use crate::rest::{PatchType, Subresource, WriteOptions};

const WARNING: &str = "metadata.labels[test.example.io/deprecated]: deprecated";

fn body(name: &str, label: Option<&str>) -> Value {
    let mut body = json!({
        "apiVersion": "test.example.io/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": {"size": 1},
    });
    if let Some(value) = label {
        body["metadata"]["labels"] = json!({ DEPRECATED_LABEL: value });
    }
    body
}

async fn patch(
    store: &Store<WidgetStrategy>,
    subresource: Subresource,
    patch_type: PatchType,
    patch: &Value,
) -> Vec<String> {
    RestStorage::patch(
        store,
        "v1",
        ObjectRef::from("a"),
        subresource,
        patch_type,
        patch.to_string().as_bytes(),
        &WriteOptions {
            field_manager: Some("test".into()),
            // Apply takes the label over from the earlier updates' manager.
            force: patch_type == PatchType::Apply,
            ..Default::default()
        },
    )
    .await
    .expect("patch")
    .warnings
}

#[tokio::test]
async fn strategy_warnings_reach_every_write_that_earns_them() {
    let store = store();
    let opts = WriteOptions::default();
    let dry_run = WriteOptions {
        dry_run: true,
        ..Default::default()
    };
    let dry = RestStorage::create(&store, "v1", None, body("a", Some("x")), &dry_run)
        .await
        .expect("dry-run create");
    assert_eq!(dry.warnings, [WARNING]);
    let plain = RestStorage::create(&store, "v1", None, body("p", None), &opts)
        .await
        .expect("create without the label");
    assert!(plain.warnings.is_empty());
    let created = RestStorage::create(&store, "v1", None, body("a", Some("x")), &opts)
        .await
        .expect("create");
    assert_eq!(created.warnings, [WARNING]);

    // A PUT of the object as stored brings nothing new; one that changes the label does.
    let mut again = created.object.clone();
    again["spec"]["size"] = json!(2);
    let put = |object: Value| async {
        RestStorage::update(
            &store,
            "v1",
            ObjectRef::from("a"),
            Subresource::Main,
            object,
            &WriteOptions::default(),
        )
        .await
        .expect("update")
    };
    let kept = put(again).await;
    assert!(kept.warnings.is_empty(), "{:?}", kept.warnings);
    let mut changed = kept.object.clone();
    changed["metadata"]["labels"][DEPRECATED_LABEL] = json!("y");
    assert_eq!(put(changed).await.warnings, [WARNING]);

    // Patches: a merge patch that changes it, one that does not, and a status patch.
    let label = |v: &str| json!({"metadata": {"labels": { DEPRECATED_LABEL: v }}});
    let merge = PatchType::Merge;
    assert_eq!(
        patch(&store, Subresource::Main, merge, &label("z")).await,
        [WARNING]
    );
    let size = json!({"spec": {"size": 5}});
    assert!(
        patch(&store, Subresource::Main, merge, &size)
            .await
            .is_empty()
    );
    // A status write keeps the stored metadata: the label in its body is dropped, no warning.
    let status = json!({"metadata": {"labels": { DEPRECATED_LABEL: "s" }},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    assert!(
        patch(&store, Subresource::Status, merge, &status)
            .await
            .is_empty()
    );

    // Server-side apply: taking the label to a new value warns; creating by apply warns.
    let mut applied = body("a", Some("w"));
    applied["spec"]["size"] = json!(5);
    assert_eq!(
        patch(&store, Subresource::Main, PatchType::Apply, &applied).await,
        [WARNING]
    );
    let created_by_apply = RestStorage::patch(
        &store,
        "v1",
        ObjectRef::from("b"),
        Subresource::Main,
        PatchType::Apply,
        body("b", Some("x")).to_string().as_bytes(),
        &WriteOptions {
            field_manager: Some("test".into()),
            ..Default::default()
        },
    )
    .await
    .expect("apply create");
    assert!(created_by_apply.created);
    assert_eq!(created_by_apply.warnings, [WARNING]);

    // The controllers' entry points take no warnings: they go nowhere, and nothing fails.
    let mut w = store.get("a").await.expect("get").expect("a");
    w.metadata
        .labels
        .get_or_insert_default()
        .insert(DEPRECATED_LABEL.into(), "c".into());
    store.update(w).await.expect("a controller's update");
}
