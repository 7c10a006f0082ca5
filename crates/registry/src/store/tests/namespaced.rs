//! A namespaced kind through the generic store: keys per namespace, the request's namespace
//! defaulted into objects and a different one refused, lists and watches of one namespace
//! or of all, and the typed API by `(namespace, name)`.

use serde_json::{Value, json};

use super::*;
use crate::rest::{GetOptions, ListParams, WatchParams, WriteOptions};
use crate::{ObjectRef, RestStorage};

static NAMESPACED_INFO: ResourceInfo = ResourceInfo {
    group: GROUP,
    kind: "Widget",
    list_kind: "WidgetList",
    plural: "widgets",
    singular: "widget",
    short_names: &["wd"],
    categories: &[],
    versions: &["v1", "v1beta1"],
    storage_version: "v1",
    namespaced: true,
    has_status_subresource: true,
};

/// Widgets, namespaced: everything as [`WidgetStrategy`] but the scope.
pub(super) struct NamespacedWidgets;

impl Strategy for NamespacedWidgets {
    type Object = Widget;
    fn info(&self) -> &ResourceInfo {
        &NAMESPACED_INFO
    }
    fn decode(&self, version: &str, value: Value) -> ApiResult<Widget> {
        WidgetStrategy.decode(version, value)
    }
    fn encode(&self, version: &str, obj: &Widget) -> ApiResult<Value> {
        WidgetStrategy.encode(version, obj)
    }
    fn openapi_definitions(&self, version: &str) -> Vec<(String, Value)> {
        WidgetStrategy.openapi_definitions(version)
    }
    fn definition_name(&self, version: &str) -> String {
        WidgetStrategy.definition_name(version)
    }
    fn prepare_for_create(&self, obj: &mut Widget) {
        WidgetStrategy.prepare_for_create(obj)
    }
    fn prepare_for_update(&self, new: &mut Widget, old: &Widget) {
        WidgetStrategy.prepare_for_update(new, old)
    }
    fn prepare_for_status_update(&self, new: &mut Widget, old: &Widget) {
        WidgetStrategy.prepare_for_status_update(new, old)
    }
    fn validate(&self, obj: &Widget) -> Vec<FieldError> {
        WidgetStrategy.validate(obj)
    }
    fn validate_update(&self, new: &Widget, old: &Widget) -> Vec<FieldError> {
        WidgetStrategy.validate_update(new, old)
    }
    fn validate_status_update(&self, new: &Widget, old: &Widget) -> Vec<FieldError> {
        WidgetStrategy.validate_status_update(new, old)
    }
    fn spec_changed(&self, new: &Widget, old: &Widget) -> bool {
        WidgetStrategy.spec_changed(new, old)
    }
    fn table_columns(&self) -> Vec<TableColumn> {
        WidgetStrategy.table_columns()
    }
    fn table_row(&self, obj: &Widget) -> Vec<Value> {
        WidgetStrategy.table_row(obj)
    }
}

fn namespaced_store() -> Store<NamespacedWidgets> {
    Store::new(NamespacedWidgets, storage(), ROOT)
}

fn in_namespace(namespace: &str, name: &str, size: i64) -> Widget {
    let mut w = widget(name, size);
    w.metadata.namespace = Some(namespace.into());
    w
}

async fn create_in(
    store: &Store<NamespacedWidgets>,
    namespace: Option<&str>,
    body: Value,
) -> ApiResult<Value> {
    RestStorage::create(store, "v1", namespace, body, &WriteOptions::default())
        .await
        .map(|w| w.object)
}

#[tokio::test]
async fn objects_live_under_their_namespace_and_the_same_name_twice_is_fine() {
    let store = namespaced_store();
    store.create(in_namespace("a", "w", 1)).await.expect("in a");
    store.create(in_namespace("b", "w", 2)).await.expect("in b");
    let keys: Vec<String> = store
        .storage
        .list(&format!("{ROOT}/widgets/"), Default::default())
        .await
        .expect("list keys")
        .items
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(
        keys,
        vec![format!("{ROOT}/widgets/a/w"), format!("{ROOT}/widgets/b/w")]
    );
    let b = store.get(("b", "w")).await.expect("get").expect("exists");
    assert_eq!(b.spec.size, 2);
    assert_eq!(store.get(("c", "w")).await.expect("get"), None);
}

#[tokio::test]
async fn a_create_takes_the_request_namespace_and_refuses_another() {
    let store = namespaced_store();
    let created = create_in(&store, Some("team"), body("x", 1))
        .await
        .expect("created");
    assert_eq!(created["metadata"]["namespace"], "team");

    let mut other = body("y", 1);
    other["metadata"]["namespace"] = json!("elsewhere");
    let err = create_in(&store, Some("team"), other)
        .await
        .expect_err("mismatch");
    assert!(
        matches!(&err, ApiError::BadRequest(m) if m == "the namespace of the provided object does not match the namespace sent on the request"),
        "{err:?}"
    );
    assert_eq!(store.get(("elsewhere", "y")).await.expect("get"), None);

    // No namespace at all (a typed create without one) is a 422 on metadata.namespace.
    let err = store
        .create(widget("z", 1))
        .await
        .expect_err("no namespace");
    assert_eq!(invalid_fields(&err), vec!["metadata.namespace"]);
    let err = store
        .create(in_namespace("Bad_NS", "z", 1))
        .await
        .expect_err("bad namespace");
    assert_eq!(invalid_fields(&err), vec!["metadata.namespace"]);
}

#[tokio::test]
async fn updates_and_patches_keep_the_namespace_of_the_url() {
    let store = namespaced_store();
    create_in(&store, Some("team"), body("x", 1))
        .await
        .expect("created");
    let at = ObjectRef::namespaced("team", "x");
    let mut moved = body("x", 2);
    moved["metadata"]["namespace"] = json!("other");
    let err = RestStorage::update(
        &store,
        "v1",
        at,
        crate::rest::Subresource::Main,
        moved,
        &WriteOptions::default(),
    )
    .await
    .expect_err("an update may not move the object");
    assert!(matches!(err, ApiError::BadRequest(_)), "{err:?}");

    let patched = RestStorage::patch(
        &store,
        "v1",
        at,
        crate::rest::Subresource::Main,
        crate::rest::PatchType::Merge,
        br#"{"spec":{"size":5}}"#,
        &WriteOptions::default(),
    )
    .await
    .expect("patched");
    assert_eq!(patched.object["metadata"]["namespace"], "team");
    assert_eq!(patched.object["spec"]["size"], 5);
    let err = RestStorage::patch(
        &store,
        "v1",
        at,
        crate::rest::Subresource::Main,
        crate::rest::PatchType::Merge,
        br#"{"metadata":{"namespace":"other"}}"#,
        &WriteOptions::default(),
    )
    .await
    .expect_err("a patch may not move the object");
    assert!(matches!(err, ApiError::BadRequest(_)), "{err:?}");
    let get = RestStorage::get(&store, "v1", at, &GetOptions::default())
        .await
        .expect("get");
    assert_eq!(get["spec"]["size"], 5);
    // Without a namespace, an object of a namespaced kind cannot be named.
    let err = RestStorage::get(
        &store,
        "v1",
        ObjectRef::cluster("x"),
        &GetOptions::default(),
    )
    .await
    .expect_err("no namespace");
    assert!(
        matches!(&err, ApiError::BadRequest(m) if m == "Namespace parameter required."),
        "{err:?}"
    );
}

#[tokio::test]
async fn lists_see_one_namespace_or_all_and_pages_stay_inside_it() {
    let store = namespaced_store();
    for (ns, name) in [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1"), ("c", "1")] {
        store
            .create(in_namespace(ns, name, 1))
            .await
            .expect("created");
    }
    let all = RestStorage::list(&store, "v1", None, &ListParams::default())
        .await
        .expect("all");
    assert_eq!(names(&all).len(), 5);
    let only_a = RestStorage::list(&store, "v1", Some("a"), &ListParams::default())
        .await
        .expect("a");
    assert_eq!(names(&only_a), vec!["1", "2", "3"]);

    // Paged within a namespace: the continue token never leaves it.
    let mut params = ListParams {
        limit: Some(2),
        ..Default::default()
    };
    let first = RestStorage::list(&store, "v1", Some("a"), &params)
        .await
        .expect("page 1");
    assert_eq!(names(&first), vec!["1", "2"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    params.continue_token = first["metadata"]["continue"].as_str().map(str::to_string);
    let second = RestStorage::list(&store, "v1", Some("a"), &params)
        .await
        .expect("page 2");
    assert_eq!(names(&second), vec!["3"]);
    assert!(second["metadata"].get("continue").is_none());

    // fieldSelector metadata.namespace across all namespaces.
    let selected = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            field_selector: Some("metadata.namespace!=a".into()),
            ..Default::default()
        },
    )
    .await
    .expect("selected");
    let namespaces: Vec<&str> = selected["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["namespace"].as_str())
        .collect();
    assert_eq!(namespaces, vec!["b", "c"]);
}

#[tokio::test]
async fn a_watch_in_one_namespace_sees_only_its_objects() {
    let store = namespaced_store();
    store
        .create(in_namespace("a", "old", 1))
        .await
        .expect("created");
    let params = WatchParams::default();
    let mut in_a = RestStorage::watch(&store, "v1", Some("a"), &params)
        .await
        .expect("watch a");
    let mut everywhere = RestStorage::watch(&store, "v1", None, &params)
        .await
        .expect("watch all");
    // The initial state: only a's object.
    let initial = next_event(&mut in_a).await;
    assert_eq!(initial.object["metadata"]["name"], "old");
    assert_eq!(
        next_event(&mut everywhere).await.object["metadata"]["name"],
        "old"
    );

    store
        .create(in_namespace("b", "skipped", 1))
        .await
        .expect("in b");
    store
        .create(in_namespace("a", "seen", 1))
        .await
        .expect("in a");
    let event = next_event(&mut in_a).await;
    assert_eq!(
        (event.event_type, event.object["metadata"]["name"].clone()),
        ("ADDED", json!("seen"))
    );
    assert_eq!(
        next_event(&mut everywhere).await.object["metadata"]["name"],
        "skipped"
    );
    assert_eq!(
        next_event(&mut everywhere).await.object["metadata"]["name"],
        "seen"
    );
}

#[tokio::test]
async fn delete_and_delete_collection_stay_in_the_namespace() {
    let store = namespaced_store();
    for ns in ["a", "b"] {
        store
            .create(in_namespace(ns, "w", 1))
            .await
            .expect("created");
        store
            .create(in_namespace(ns, "v", 1))
            .await
            .expect("created");
    }
    store
        .delete(("a", "w"), &Default::default())
        .await
        .expect("deleted");
    assert_eq!(store.get(("a", "w")).await.expect("get"), None);
    assert!(store.get(("b", "w")).await.expect("get").is_some());
    RestStorage::delete_collection(
        &store,
        "v1",
        Some("b"),
        &ListParams::default(),
        &Default::default(),
    )
    .await
    .expect("collection");
    let left = RestStorage::list(&store, "v1", None, &ListParams::default())
        .await
        .expect("left");
    assert_eq!(names(&left), vec!["v"]);
    assert!(store.get(("a", "v")).await.expect("get").is_some());
}
