//! managedFields through the store: every write recorded, applies merged, and the
//! controllers' typed writes taking nothing a user applied.

use crate::ObjectRef;
use serde_json::{Value, json};

use super::*;
use crate::RestStorage;
use crate::rest::{FieldValidation, PatchType, Subresource, WriteOptions, Written};
use crate::store::managed::DEFAULT_FIELD_MANAGER;

fn opts(manager: &str) -> WriteOptions {
    WriteOptions {
        field_manager: Some(manager.into()),
        field_validation: FieldValidation::Strict,
        ..WriteOptions::default()
    }
}

async fn apply(
    store: &Store<WidgetStrategy>,
    subresource: Subresource,
    body: Value,
    opts: &WriteOptions,
) -> ApiResult<Written> {
    RestStorage::patch(
        store,
        "v1",
        ObjectRef::from("a"),
        subresource,
        PatchType::Apply,
        body.to_string().as_bytes(),
        opts,
    )
    .await
}

fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn config() -> Value {
    json!({
        "apiVersion": "test.example.io/v1",
        "kind": "Widget",
        "metadata": {"name": "a", "labels": {"team": "a"}},
        "spec": {"size": 3, "tags": ["x"]},
    })
}

#[tokio::test]
async fn controllers_take_nothing_a_user_applied() {
    let store = store();
    let created = apply(&store, Subresource::Main, config(), &opts("user"))
        .await
        .expect("created by apply");
    assert!(created.created);
    // A controller writes status (and re-writes the whole object) as its own manager.
    let mut current = store.get("a").await.expect("get").expect("exists");
    current.status = Some(WidgetStatus {
        conditions: vec![WidgetCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: None,
        }],
        observed_generation: Some(1),
    });
    let stored = store
        .managed_by("svm-apiserver-migrator")
        .update_status(current)
        .await
        .expect("status written");
    let same = stored.clone();
    store
        .managed_by("svm-apiserver-migrator")
        .update(same)
        .await
        .expect("a no-op update");
    // The user re-applies without force: nothing of theirs was taken.
    let again = apply(&store, Subresource::Main, config(), &opts("user"))
        .await
        .expect("no conflict");
    assert_eq!(
        managers(&again.object),
        vec![
            ("user".to_string(), "Apply".to_string()),
            ("svm-apiserver-migrator".to_string(), "Update".to_string()),
        ]
    );
    let entries = again.object["metadata"]["managedFields"]
        .as_array()
        .expect("entries")
        .clone();
    assert_eq!(
        entries[0]["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:size": {}, "f:tags": {"v:\"x\"": {}}}})
    );
    assert_eq!(entries[1]["subresource"], "status");
    assert_eq!(
        entries[1]["fieldsV1"],
        json!({"f:status": {".": {}, "f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}, "f:observedGeneration": {}}})
    );
}

#[tokio::test]
async fn every_write_is_recorded_for_its_manager() {
    let store = store();
    let created = RestStorage::create(
        &store,
        "v1",
        None,
        body("a", 1),
        &WriteOptions {
            user_agent: Some("kubectl-create/v1.37.0 (linux/amd64)".into()),
            ..WriteOptions::default()
        },
    )
    .await
    .expect("created");
    assert_eq!(
        managers(&created.object),
        vec![("kubectl-create".to_string(), "Update".to_string())]
    );
    let patched = RestStorage::patch(
        &store,
        "v1beta1",
        ObjectRef::from("a"),
        Subresource::Main,
        PatchType::Merge,
        br#"{"metadata": {"labels": {"x": "y"}}}"#,
        &WriteOptions::default(),
    )
    .await
    .expect("patched");
    // No fieldManager and no User-Agent: "unknown", as upstream; entries per version.
    let entries = patched.object["metadata"]["managedFields"]
        .as_array()
        .expect("entries")
        .clone();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[1]["manager"], "unknown");
    assert_eq!(entries[1]["apiVersion"], "test.example.io/v1beta1");
    // A typed controller write without a name is recorded as the server's.
    let mut current = store.get("a").await.expect("get").expect("exists");
    current.spec.size = 2;
    let updated = store.update(current).await.expect("updated");
    let names: Vec<&str> = updated
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert!(names.contains(&DEFAULT_FIELD_MANAGER), "{names:?}");
    // Dry-run apply: the answer carries the entries, nothing is stored.
    let mut dry = opts("dry");
    dry.dry_run = true;
    let before = store.get("a").await.expect("get").expect("exists");
    let answer = apply(
        &store,
        Subresource::Main,
        json!({"apiVersion": "test.example.io/v1", "kind": "Widget", "metadata": {"name": "a", "labels": {"d": "1"}}}),
        &dry,
    )
    .await
    .expect("dry run");
    assert!(managers(&answer.object).iter().any(|(m, _)| m == "dry"));
    assert_eq!(store.get("a").await.expect("get").expect("exists"), before);
}

#[tokio::test]
async fn apply_errors_change_nothing() {
    let store = store();
    apply(&store, Subresource::Main, config(), &opts("user"))
        .await
        .expect("created");
    let before = store.get("a").await.expect("get").expect("exists");
    let mut bogus = config();
    bogus["spec"]["bogus"] = json!(1);
    let cases = [
        (
            bogus,
            500,
            "failed to create typed patch object (/a; test.example.io/v1, Kind=Widget): .spec.bogus: field not declared in schema",
        ),
        (
            json!({"apiVersion": "test.example.io/v1beta1", "kind": "Widget", "metadata": {"name": "a"}}),
            400,
            "invalid object type: test.example.io/v1beta1, Kind=Widget",
        ),
        (
            json!({"apiVersion": "test.example.io/v1", "kind": "Widget", "metadata": {"name": "b"}}),
            400,
            "the name of the object (b) does not match the name on the URL (a)",
        ),
        (
            json!({"apiVersion": "test.example.io/v1", "kind": "Widget", "metadata": {"name": "a", "resourceVersion": "1"}}),
            409,
            "the object has been modified",
        ),
        (
            json!({"apiVersion": "test.example.io/v1", "kind": "Widget", "metadata": {"name": "a", "labels": {"team": "b"}}}),
            409,
            "Apply failed with 1 conflict: conflict with \"user\": .metadata.labels.team",
        ),
        (
            json!({"apiVersion": "test.example.io/v1", "kind": "Widget", "metadata": {"name": "a"}, "spec": {"size": -1}}),
            409,
            "conflict with \"user\": .spec.size",
        ),
    ];
    for (body, code, message) in cases {
        let err = apply(&store, Subresource::Main, body.clone(), &opts("other"))
            .await
            .expect_err("fails");
        assert_eq!(err.code(), code, "{body}: {err}");
        assert!(err.to_string().contains(message), "{body}: {err}");
    }
    // Forced, an invalid value is still invalid.
    let mut forced = opts("other");
    forced.force = true;
    let err = apply(
        &store,
        Subresource::Main,
        json!({"apiVersion": "test.example.io/v1", "kind": "Widget", "metadata": {"name": "a"}, "spec": {"size": -1}}),
        &forced,
    )
    .await
    .expect_err("invalid");
    assert_eq!(err.code(), 422);
    assert_eq!(store.get("a").await.expect("get").expect("exists"), before);
}
