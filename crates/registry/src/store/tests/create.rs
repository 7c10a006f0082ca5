use crate::ObjectRef;
use serde_json::json;

use super::*;
use crate::RestStorage;
use crate::rest::{FieldValidation, WriteOptions};

fn opts(validation: FieldValidation, dry_run: bool) -> WriteOptions {
    WriteOptions {
        dry_run,
        field_validation: validation,
        ..Default::default()
    }
}

#[tokio::test]
async fn create_fills_system_metadata_and_stores_without_resource_version() {
    let store = store();
    let mut w = widget("a", 3);
    w.status = Some(WidgetStatus {
        observed_generation: Some(9),
        ..Default::default()
    });
    w.metadata.uid = Some("client-uid".into());
    w.metadata.generation = Some(7);
    let created = store.create(w).await.expect("created");
    let meta = &created.metadata;
    assert_eq!(meta.generation, Some(1));
    assert_ne!(meta.uid.as_deref(), Some("client-uid"));
    assert_eq!(meta.uid.as_deref().map(str::len), Some(36));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(created.status, None, "create clears status");
    assert_eq!(rv(&created), current_revision(&store).await.to_string());

    let kv = store
        .storage
        .get(&format!("{ROOT}/widgets/a"))
        .await
        .expect("read")
        .expect("stored");
    let stored: Value = serde_json::from_slice(&kv.value).expect("json");
    assert!(stored["metadata"].get("resourceVersion").is_none());
    assert_eq!(stored["spec"]["size"], 3);

    let fetched = store.get("a").await.expect("get").expect("exists");
    assert_eq!(fetched, created);
}

#[tokio::test]
async fn duplicate_names_conflict() {
    let store = store();
    store.create(widget("a", 1)).await.expect("created");
    let err = store.create(widget("a", 2)).await.expect_err("taken");
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.to_string(),
        "widgets.test.example.io \"a\" already exists"
    );
}

#[tokio::test]
async fn generate_name_appends_a_random_suffix_and_keeps_the_prefix() {
    let store = store();
    let mut w = widget("", 1);
    w.metadata.name = None;
    w.metadata.generate_name = Some("gen-".into());
    let first = store.create(w.clone()).await.expect("created");
    let second = store.create(w).await.expect("created again");
    for created in [&first, &second] {
        let name = created.metadata.name.as_deref().expect("name");
        assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
        assert_eq!(created.metadata.generate_name.as_deref(), Some("gen-"));
    }
    assert_ne!(first.metadata.name, second.metadata.name);
}

/// Generates `<base>taken` three times, then `<base>free`.
fn colliding_three_times(base: &str) -> String {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    match CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
        0..3 => format!("{base}taken"),
        _ => format!("{base}free"),
    }
}

fn always_colliding(base: &str) -> String {
    format!("{base}taken")
}

fn generated(base: &str) -> Widget {
    let mut w = widget("", 1);
    w.metadata.name = None;
    w.metadata.generate_name = Some(base.into());
    w
}

#[tokio::test]
async fn generate_name_retries_on_collisions_then_gives_up() {
    let store = store().with_name_generator(colliding_three_times);
    store
        .create(widget("gen-taken", 1))
        .await
        .expect("occupied");
    let created = store
        .create(generated("gen-"))
        .await
        .expect("found a free name");
    assert_eq!(created.metadata.name.as_deref(), Some("gen-free"));

    let store = super::store().with_name_generator(always_colliding);
    store
        .create(widget("gen-taken", 1))
        .await
        .expect("occupied");
    let err = store
        .create(generated("gen-"))
        .await
        .expect_err("no free name");
    assert_eq!(err.code(), 409);
    // A client-chosen name is never replaced.
    let err = store
        .create(widget("gen-taken", 1))
        .await
        .expect_err("taken");
    assert_eq!(err.code(), 409);
}

#[tokio::test]
async fn missing_and_invalid_names_are_422_with_causes() {
    let store = store();
    let mut nameless = widget("", 1);
    nameless.metadata.name = None;
    let err = store.create(nameless).await.expect_err("no name");
    assert_eq!(
        err.to_string(),
        "Widget.test.example.io \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );

    let err = store
        .create(widget("Bad_Name!", -1))
        .await
        .expect_err("bad");
    assert_eq!(invalid_fields(&err), vec!["metadata.name", "spec.size"]);
    let status = err.to_status();
    assert_eq!(status["code"], 422);
    assert_eq!(status["details"]["kind"], "Widget");
    assert_eq!(status["details"]["name"], "Bad_Name!");
    assert!(store.list_all().await.expect("list").0.is_empty());
}

#[tokio::test]
async fn a_client_resource_version_is_refused() {
    let store = store();
    let mut w = widget("a", 1);
    w.metadata.resource_version = Some("5".into());
    let err = store.create(w).await.expect_err("rv set");
    assert_eq!(err.code(), 500);
    assert!(
        err.to_string()
            .contains("resourceVersion should not be set on objects to be created")
    );
    assert_eq!(store.get("a").await.expect("get"), None);
}

#[tokio::test]
async fn dry_run_runs_everything_but_the_write() {
    let store = store();
    let before = current_revision(&store).await;
    let written = RestStorage::create(
        &store,
        "v1",
        None,
        body("dry", 1),
        &opts(FieldValidation::Warn, true),
    )
    .await
    .expect("dry run create");
    assert!(written.created);
    assert!(written.object["metadata"].get("resourceVersion").is_none());
    assert!(written.object["metadata"]["uid"].is_string());
    assert!(written.object["metadata"]["creationTimestamp"].is_string());
    assert_eq!(store.get("dry").await.expect("get"), None);
    assert_eq!(current_revision(&store).await, before);

    // A dry run still validates and still sees taken names (recording 17a).
    store.create(widget("taken", 1)).await.expect("created");
    let err = RestStorage::create(
        &store,
        "v1",
        None,
        body("taken", 1),
        &opts(FieldValidation::Warn, true),
    )
    .await
    .expect_err("taken");
    assert_eq!(err.code(), 409);
    let err = RestStorage::create(
        &store,
        "v1",
        None,
        body("x", -5),
        &opts(FieldValidation::Warn, true),
    )
    .await
    .expect_err("invalid");
    assert_eq!(err.code(), 422);

    // generateName with dry run: a name is generated, nothing persisted (recording 17b).
    let generated = RestStorage::create(
        &store,
        "v1", None,
        json!({"apiVersion": "test.example.io/v1", "kind": "Widget", "metadata": {"generateName": "gen-"}, "spec": {"size": 1}}),
        &opts(FieldValidation::Warn, true),)
    .await
    .expect("generated");
    let name = generated.object["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("gen-"));
    assert_eq!(store.get(name).await.expect("get"), None);
}

#[tokio::test]
async fn type_meta_must_name_this_kind_and_version() {
    let store = store();
    let opts = opts(FieldValidation::Warn, false);
    let cases = [
        (
            json!({"apiVersion": "test.example.io/v1", "kind": "Gadget", "metadata": {"name": "a"}}),
            "Gadget in version \"v1\" cannot be handled as a Widget: no kind \"Gadget\" is registered for version \"test.example.io/v1\"",
        ),
        (
            json!({"apiVersion": "test.example.io/v1beta1", "kind": "Widget", "metadata": {"name": "a"}}),
            "the API version in the data (test.example.io/v1beta1) does not match the expected API version (test.example.io/v1)",
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "Widget", "metadata": {"name": "a"}}),
            "Widget in version \"v1\" cannot be handled as a Widget: no kind \"Widget\" is registered for version \"apps/v1\"",
        ),
    ];
    for (body, message) in cases {
        let err = RestStorage::create(&store, "v1", None, body, &opts)
            .await
            .expect_err("wrong type meta");
        assert_eq!(err.code(), 400);
        assert_eq!(err.to_string(), message);
    }
    // Missing type meta defaults to the URL's; a namespace is dropped (cluster-scoped).
    let written = RestStorage::create(
        &store,
        "v1",
        None,
        json!({"metadata": {"name": "plain", "namespace": "ns"}, "spec": {"size": 2}}),
        &opts,
    )
    .await
    .expect("created");
    assert_eq!(written.object["apiVersion"], "test.example.io/v1");
    assert_eq!(written.object["kind"], "Widget");
    assert!(written.object["metadata"].get("namespace").is_none());
}

#[tokio::test]
async fn field_validation_strict_warn_and_ignore() {
    let store = store();
    let with_unknown = |name: &str| {
        json!({
            "apiVersion": "test.example.io/v1",
            "kind": "Widget",
            "metadata": {"name": name, "bogus": 1},
            "spec": {"size": 1, "shape": "round"},
            "extraTop": "x",
        })
    };
    // Recording 16c: one 400 naming every unknown field.
    let err = RestStorage::create(
        &store,
        "v1",
        None,
        with_unknown("s"),
        &opts(FieldValidation::Strict, false),
    )
    .await
    .expect_err("strict");
    assert_eq!(err.code(), 400);
    assert_eq!(
        err.to_string(),
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"metadata.bogus\", unknown field \"spec.shape\", unknown field \"extraTop\""
    );
    assert_eq!(store.get("s").await.expect("get"), None);

    let warned = RestStorage::create(
        &store,
        "v1",
        None,
        with_unknown("w"),
        &opts(FieldValidation::Warn, false),
    )
    .await
    .expect("warn");
    assert_eq!(
        warned.warnings,
        vec![
            "unknown field \"metadata.bogus\"",
            "unknown field \"spec.shape\"",
            "unknown field \"extraTop\""
        ]
    );
    assert!(warned.object.get("extraTop").is_none());
    assert!(warned.object["spec"].get("shape").is_none());

    let ignored = RestStorage::create(
        &store,
        "v1",
        None,
        with_unknown("i"),
        &opts(FieldValidation::Ignore, false),
    )
    .await
    .expect("ignore");
    assert!(ignored.warnings.is_empty());
    assert!(store.get("i").await.expect("get").is_some());
}

#[tokio::test]
async fn versions_convert_through_the_internal_form() {
    let store = store();
    let written = RestStorage::create(
        &store,
        "v1beta1", None,
        json!({"apiVersion": "test.example.io/v1beta1", "kind": "Widget", "metadata": {"name": "b"}, "spec": {"count": 4}}),
        &opts(FieldValidation::Strict, false),)
    .await
    .expect("created in v1beta1");
    assert_eq!(written.object["spec"]["count"], 4);
    let v1 = RestStorage::get(&store, "v1", ObjectRef::from("b"), &Default::default())
        .await
        .expect("get in v1");
    assert_eq!(v1["apiVersion"], "test.example.io/v1");
    assert_eq!(v1["spec"]["size"], 4);
    // `size` is unknown in v1beta1.
    let err = RestStorage::create(
        &store,
        "v1beta1", None,
        json!({"apiVersion": "test.example.io/v1beta1", "kind": "Widget", "metadata": {"name": "c"}, "spec": {"size": 4}}),
        &opts(FieldValidation::Strict, false),)
    .await
    .expect_err("v1 field in v1beta1");
    assert!(
        err.to_string().contains("unknown field \"spec.size\""),
        "{err}"
    );
    let err = RestStorage::get(&store, "v2", ObjectRef::from("b"), &Default::default())
        .await
        .expect_err("unserved version");
    assert_eq!(err.code(), 404);
}
