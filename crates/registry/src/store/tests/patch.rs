use crate::ObjectRef;
use serde_json::json;

use super::*;
use crate::RestStorage;
use crate::rest::{FieldValidation, PatchType, Subresource, WriteOptions, Written};

async fn patch(
    store: &Store<WidgetStrategy>,
    subresource: Subresource,
    patch_type: PatchType,
    body: &str,
) -> ApiResult<Written> {
    RestStorage::patch(
        store,
        "v1",
        ObjectRef::from("a"),
        subresource,
        patch_type,
        body.as_bytes(),
        &WriteOptions::default(),
    )
    .await
}

#[tokio::test]
async fn merge_and_json_patches_update_the_object() {
    let store = store();
    store.create(widget("a", 1)).await.expect("created");
    let merged = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        r#"{"spec":{"size":5}}"#,
    )
    .await
    .expect("merge patch");
    assert_eq!(merged.object["spec"]["size"], 5);
    assert_eq!(merged.object["metadata"]["generation"], 2);
    let patched = patch(
        &store,
        Subresource::Main,
        PatchType::Json,
        r#"[{"op":"test","path":"/spec/size","value":5},{"op":"add","path":"/metadata/labels","value":{"k":"v"}}]"#,
    )
    .await
    .expect("json patch");
    assert_eq!(patched.object["metadata"]["labels"]["k"], "v");
    assert_eq!(patched.object["metadata"]["generation"], 2);
    let err = patch(
        &store,
        Subresource::Main,
        PatchType::Json,
        r#"[{"op":"test","path":"/spec/size","value":6}]"#,
    )
    .await
    .expect_err("failed test op");
    assert_eq!(err.code(), 422);
}

#[tokio::test]
async fn resource_version_in_a_patch_is_a_precondition() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    let before = current_revision(&store).await;
    // Recording 08: a no-op patch carrying the current resourceVersion writes nothing.
    let noop = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        &json!({"metadata": {"resourceVersion": rv(&created)}}).to_string(),
    )
    .await
    .expect("no-op");
    assert_eq!(rv_of(&noop.object), rv(&created));
    assert_eq!(current_revision(&store).await, before);

    store
        .update({
            let mut w = created.clone();
            w.spec.size = 2;
            w
        })
        .await
        .expect("moved on");
    // Recording 09a.
    let err = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        &json!({"metadata": {"resourceVersion": rv(&created)}, "spec": {"size": 23}}).to_string(),
    )
    .await
    .expect_err("stale");
    assert_eq!(err.code(), 409);
    assert!(err.to_string().ends_with("the object has been modified; please apply your changes to the latest version and try again"));
}

#[tokio::test]
async fn a_uid_in_a_patch_is_validated_not_a_precondition() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    // Recording 09b: 422 "field is immutable", not 409.
    let err = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        r#"{"metadata":{"uid":"wrong"}}"#,
    )
    .await
    .expect_err("wrong uid");
    assert_eq!(err.code(), 422);
    assert!(
        err.to_string()
            .contains("metadata.uid: Invalid value: \"wrong\": field is immutable"),
        "{err}"
    );
    let uid = created.metadata.uid.clone().expect("uid");
    let ok = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        &json!({"metadata": {"uid": uid}, "spec": {"size": 2}}).to_string(),
    )
    .await
    .expect("right uid");
    assert_eq!(ok.object["spec"]["size"], 2);
}

#[tokio::test]
async fn strategic_merge_on_status_merges_conditions_by_type() {
    let store = store();
    store.create(widget("a", 1)).await.expect("created");
    patch(
        &store,
        Subresource::Status,
        PatchType::StrategicMerge,
        r#"{"status":{"conditions":[{"type":"Running","status":"True"},{"type":"Failed","status":"False"}]}}"#,
    )
    .await
    .expect("first conditions");
    let patched = patch(
        &store,
        Subresource::Status,
        PatchType::StrategicMerge,
        r#"{"status":{"conditions":[{"type":"Running","status":"False","reason":"Done"}]},"spec":{"size":50}}"#,
    )
    .await
    .expect("merge by type");
    assert_eq!(
        patched.object["status"]["conditions"],
        json!([
            {"type": "Running", "status": "False", "reason": "Done"},
            {"type": "Failed", "status": "False"},
        ])
    );
    assert_eq!(patched.object["spec"]["size"], 1, "/status ignores spec");
}

#[tokio::test]
async fn strategic_merge_on_finalizers_and_tags_is_a_set() {
    let store = store();
    let mut w = widget("a", 1);
    w.metadata.finalizers = Some(vec!["example.com/a".into()]);
    w.spec.tags = vec!["x".into()];
    store.create(w).await.expect("created");
    let patched = patch(
        &store,
        Subresource::Main,
        PatchType::StrategicMerge,
        r#"{"metadata":{"finalizers":["example.com/b"]},"spec":{"tags":["y","x"]}}"#,
    )
    .await
    .expect("set union");
    assert_eq!(
        patched.object["metadata"]["finalizers"],
        json!(["example.com/b", "example.com/a"])
    );
    assert_eq!(patched.object["spec"]["tags"], json!(["y", "x"]));
    let removed = patch(
        &store,
        Subresource::Main,
        PatchType::StrategicMerge,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["example.com/b"]}}"#,
    )
    .await
    .expect("delete from list");
    assert_eq!(
        removed.object["metadata"]["finalizers"],
        json!(["example.com/a"])
    );
}

#[tokio::test]
async fn patch_errors() {
    let store = store();
    store.create(widget("a", 1)).await.expect("created");
    let missing = RestStorage::patch(
        &store,
        "v1",
        ObjectRef::from("missing"),
        Subresource::Main,
        PatchType::Merge,
        b"{}",
        &WriteOptions::default(),
    )
    .await
    .expect_err("missing");
    assert_eq!(missing.code(), 404);
    // An apply configuration must name the kind in the URL's version.
    let apply = patch(&store, Subresource::Main, PatchType::Apply, "{}")
        .await
        .expect_err("apply");
    assert_eq!(apply.code(), 400);
    assert_eq!(apply.to_string(), "invalid object type: /, Kind=");
    assert_eq!(
        patch(&store, Subresource::Main, PatchType::Merge, "{")
            .await
            .expect_err("malformed")
            .code(),
        400
    );
    let renamed = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        r#"{"metadata":{"name":"b"}}"#,
    )
    .await
    .expect_err("rename");
    assert_eq!(renamed.code(), 400);
    let kind = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        r#"{"kind":"Gadget"}"#,
    )
    .await
    .expect_err("kind change");
    assert_eq!(kind.code(), 400);
    let invalid = patch(
        &store,
        Subresource::Main,
        PatchType::Merge,
        r#"{"spec":{"size":-1}}"#,
    )
    .await
    .expect_err("validation");
    assert_eq!(invalid_fields(&invalid), vec!["spec.size"]);
}

#[tokio::test]
async fn field_validation_applies_to_the_patched_object() {
    let store = store();
    store.create(widget("a", 1)).await.expect("created");
    let unknown = r#"{"spec":{"size":2,"shape":"round"}}"#;
    let strict = RestStorage::patch(
        &store,
        "v1",
        ObjectRef::from("a"),
        Subresource::Main,
        PatchType::Merge,
        unknown.as_bytes(),
        &WriteOptions {
            field_validation: FieldValidation::Strict,
            ..Default::default()
        },
    )
    .await
    .expect_err("strict");
    assert_eq!(strict.code(), 422);
    assert!(
        strict
            .to_string()
            .contains("strict decoding error: unknown field \"spec.shape\"")
    );
    let warned = patch(&store, Subresource::Main, PatchType::Merge, unknown)
        .await
        .expect("warn");
    assert_eq!(warned.warnings, vec!["unknown field \"spec.shape\""]);
    assert_eq!(warned.object["spec"], json!({"size": 2}));
}
