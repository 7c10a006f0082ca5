use crate::ObjectRef;
use serde_json::json;

use super::*;
use crate::RestStorage;
use crate::continue_token::ContinueToken;
use crate::rest::{GetOptions, ListParams};

async fn seed(store: &Store<WidgetStrategy>, names: &[&str]) {
    for name in names {
        store.create(widget(name, 1)).await.expect("seed");
    }
}

fn limit(n: i64) -> ListParams {
    ListParams {
        limit: Some(n),
        ..Default::default()
    }
}

fn with_continue(token: &Value) -> ListParams {
    ListParams {
        limit: Some(2),
        continue_token: token.as_str().map(str::to_string),
        ..Default::default()
    }
}

#[tokio::test]
async fn get_honours_the_resource_version_parameter() {
    let store = store();
    let created = store.create(widget("a", 1)).await.expect("created");
    let get = |rv: Option<&str>| {
        let opts = GetOptions {
            resource_version: rv.map(str::to_string),
        };
        let store = &store;
        async move { RestStorage::get(store, "v1", ObjectRef::from("a"), &opts).await }
    };
    let created_rv = rv(&created);
    for requested in [None, Some(""), Some("0"), Some(created_rv.as_str())] {
        let value = get(requested).await.expect("readable");
        assert_eq!(rv_of(&value), created_rv, "{requested:?}");
    }
    let future = (current_revision(&store).await + 10).to_string();
    let err = get(Some(future.as_str())).await.expect_err("future");
    assert_eq!(err.code(), 504);
    assert!(
        err.to_string()
            .starts_with("Timeout: Too large resource version"),
        "{err}"
    );
    assert_eq!(get(Some("abc")).await.expect_err("bad rv").code(), 400);

    let missing = RestStorage::get(
        &store,
        "v1",
        ObjectRef::from("nope"),
        &GetOptions::default(),
    )
    .await
    .expect_err("missing");
    assert_eq!(missing.code(), 404);
    assert_eq!(
        missing.to_string(),
        "widgets.test.example.io \"nope\" not found"
    );
    let bad = RestStorage::get(&store, "v1", ObjectRef::from(".."), &GetOptions::default())
        .await
        .expect_err("bad name");
    assert_eq!(bad.code(), 400);
}

#[tokio::test]
async fn an_empty_list_has_items_and_type_meta() {
    let store = store();
    let list = RestStorage::list(&store, "v1beta1", None, &ListParams::default())
        .await
        .expect("list");
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(list["apiVersion"], "test.example.io/v1beta1");
    assert_eq!(list["items"], json!([]));
    assert_eq!(
        list["metadata"],
        json!({"resourceVersion": current_revision(&store).await.to_string()})
    );
}

#[tokio::test]
async fn list_items_carry_no_type_meta_and_list_rv_is_the_read_revision() {
    let store = store();
    seed(&store, &["b", "a", "c"]).await;
    let list = RestStorage::list(&store, "v1", None, &ListParams::default())
        .await
        .expect("list");
    assert_eq!(names(&list), vec!["a", "b", "c"]);
    let keys: Vec<&String> = list.as_object().expect("object").keys().collect();
    assert_eq!(keys, vec!["kind", "apiVersion", "metadata", "items"]);
    for item in list["items"].as_array().expect("items") {
        assert!(item.get("kind").is_none() && item.get("apiVersion").is_none());
    }
    assert_eq!(rv_of(&list), current_revision(&store).await.to_string());
    let (all, revision) = store.list_all().await.expect("typed list");
    assert_eq!(all.len(), 3);
    assert_eq!(revision, current_revision(&store).await);
}

#[tokio::test]
async fn pages_are_consistent_across_writes() {
    let store = store();
    seed(&store, &["a", "b", "c", "d", "e"]).await;
    let first = RestStorage::list(&store, "v1", None, &limit(2))
        .await
        .expect("page 1");
    assert_eq!(names(&first), vec!["a", "b"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let list_rv = rv_of(&first);
    let token = ContinueToken::decode(first["metadata"]["continue"].as_str().expect("token"))
        .expect("upstream format");
    assert_eq!(token.start, "b\0");
    assert_eq!(token.revision.map(|r| r.to_string()), Some(list_rv.clone()));

    // Writes between pages do not show in later pages.
    store
        .create(widget("bb", 1))
        .await
        .expect("insert between pages");
    let c = store.get("c").await.expect("get").expect("c");
    let mut changed = c.clone();
    changed.spec.size = 100;
    store.update(changed).await.expect("update c");
    store
        .delete("d", &Default::default())
        .await
        .expect("delete d");

    let second = RestStorage::list(
        &store,
        "v1",
        None,
        &with_continue(&first["metadata"]["continue"]),
    )
    .await
    .expect("page 2");
    assert_eq!(names(&second), vec!["c", "d"]);
    assert_eq!(rv_of(&second), list_rv);
    assert_eq!(second["items"][0]["spec"]["size"], 1, "old state of c");
    assert_eq!(second["metadata"]["remainingItemCount"], 1);

    let third = RestStorage::list(
        &store,
        "v1",
        None,
        &with_continue(&second["metadata"]["continue"]),
    )
    .await
    .expect("page 3");
    assert_eq!(names(&third), vec!["e"]);
    assert!(third["metadata"].get("continue").is_none());
    assert!(third["metadata"].get("remainingItemCount").is_none());
}

#[tokio::test]
async fn selectors_fill_pages_and_hide_the_remaining_count() {
    let store = store();
    for i in 0..10 {
        let color = if i % 3 == 0 { "red" } else { "blue" };
        let mut w = labelled(&format!("w{i}"), &[("color", color)]);
        w.spec.color = Some(color.into());
        store.create(w).await.expect("seed");
    }
    // Reds: w0, w3, w6, w9.
    let params = |token: Option<&Value>| ListParams {
        label_selector: Some("color=red".into()),
        limit: Some(3),
        continue_token: token.and_then(Value::as_str).map(str::to_string),
        ..Default::default()
    };
    let first = RestStorage::list(&store, "v1", None, &params(None))
        .await
        .expect("page 1");
    assert_eq!(names(&first), vec!["w0", "w3", "w6"]);
    assert!(first["metadata"].get("remainingItemCount").is_none());
    let second = RestStorage::list(
        &store,
        "v1",
        None,
        &params(Some(&first["metadata"]["continue"])),
    )
    .await
    .expect("page 2");
    assert_eq!(names(&second), vec!["w9"]);
    assert!(second["metadata"].get("continue").is_none());

    let by_field = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            field_selector: Some("spec.color=blue,metadata.name!=w1".into()),
            ..Default::default()
        },
    )
    .await
    .expect("field selector");
    assert_eq!(names(&by_field), vec!["w2", "w4", "w5", "w7", "w8"]);
    let by_name = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            field_selector: Some("metadata.name=w7".into()),
            label_selector: Some("color in (blue, green)".into()),
            ..Default::default()
        },
    )
    .await
    .expect("both selectors");
    assert_eq!(names(&by_name), vec!["w7"]);
}

#[tokio::test]
async fn bad_selectors_are_400() {
    let store = store();
    let cases = [
        (Some("a b c"), None, "unable to parse requirement"),
        (
            None,
            Some("spec.size=1"),
            "field label not supported: spec.size",
        ),
        (None, Some("nonsense"), "invalid selector"),
    ];
    for (label, field, expected) in cases {
        let params = ListParams {
            label_selector: label.map(str::to_string),
            field_selector: field.map(str::to_string),
            ..Default::default()
        };
        let err = RestStorage::list(&store, "v1", None, &params)
            .await
            .expect_err("bad selector");
        assert_eq!(err.code(), 400);
        assert!(err.to_string().contains(expected), "{err}");
    }
}

#[tokio::test]
async fn resource_version_and_match_semantics() {
    let store = store();
    let a = store.create(widget("a", 1)).await.expect("a");
    let at_a = rv(&a);
    store.create(widget("b", 1)).await.expect("b");
    let current = current_revision(&store).await;

    let list = |rv: &str, rv_match: Option<&str>, limit: Option<i64>| {
        let params = ListParams {
            resource_version: Some(rv.to_string()),
            resource_version_match: rv_match.map(str::to_string),
            limit,
            ..Default::default()
        };
        let store = &store;
        async move { RestStorage::list(store, "v1", None, &params).await }
    };
    // Exact reads the past.
    let exact = list(&at_a, Some("Exact"), None).await.expect("exact");
    assert_eq!(names(&exact), vec!["a"]);
    assert_eq!(rv_of(&exact), at_a);
    // Legacy: a resourceVersion with a limit is exact too.
    let legacy = list(&at_a, None, Some(10)).await.expect("legacy paged");
    assert_eq!(names(&legacy), vec!["a"]);
    // Without a limit it means "not older than": the current state.
    let not_older = list(&at_a, None, None).await.expect("legacy unpaged");
    assert_eq!(names(&not_older), vec!["a", "b"]);
    let not_older = list(&at_a, Some("NotOlderThan"), None)
        .await
        .expect("not older");
    assert_eq!(rv_of(&not_older), current.to_string());
    let any = list("0", None, None).await.expect("any");
    assert_eq!(names(&any), vec!["a", "b"]);
    // Too new.
    let future = (current + 5).to_string();
    assert_eq!(
        list(&future, Some("NotOlderThan"), None)
            .await
            .expect_err("future")
            .code(),
        504
    );
    assert_eq!(
        list(&future, Some("Exact"), None)
            .await
            .expect_err("future")
            .code(),
        504
    );
    assert_eq!(list("x", None, None).await.expect_err("bad rv").code(), 400);

    // A continue token and a resourceVersion do not mix.
    let page = RestStorage::list(&store, "v1", None, &limit(1))
        .await
        .expect("page");
    let err = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            limit: Some(1),
            continue_token: page["metadata"]["continue"].as_str().map(str::to_string),
            resource_version: Some(at_a.clone()),
            ..Default::default()
        },
    )
    .await
    .expect_err("rv with continue");
    assert_eq!(
        err.to_string(),
        "specifying resource version is not allowed when using continue"
    );

    // After compaction the past is gone.
    store.storage.compact(current).await.expect("compact");
    let err = list(&at_a, Some("Exact"), None)
        .await
        .expect_err("compacted");
    assert_eq!(err.code(), 410);
    assert_eq!(
        err.to_string(),
        "The resourceVersion for the provided list is too old."
    );
}

#[tokio::test]
async fn an_expired_continue_token_offers_an_inconsistent_one() {
    let store = store();
    seed(&store, &["a", "b", "c", "d"]).await;
    let first = RestStorage::list(&store, "v1", None, &limit(2))
        .await
        .expect("page 1");
    store
        .create(widget("bz", 1))
        .await
        .expect("new object after b");
    store
        .delete("c", &Default::default())
        .await
        .expect("delete c");
    let now = current_revision(&store).await;
    store.storage.compact(now).await.expect("compact");

    let err = RestStorage::list(
        &store,
        "v1",
        None,
        &with_continue(&first["metadata"]["continue"]),
    )
    .await
    .expect_err("expired");
    assert_eq!(err.code(), 410);
    let status = err.to_status();
    assert!(status["message"].as_str().expect("message").starts_with(
        "The provided continue parameter is too old to display a consistent list result."
    ));
    let inconsistent = status["metadata"]["continue"].clone();
    let token = ContinueToken::decode(inconsistent.as_str().expect("token")).expect("token");
    assert_eq!(token.revision, None);
    assert_eq!(token.start, "b\0");

    // The inconsistent token continues after "b" in the current state.
    let next = RestStorage::list(&store, "v1", None, &with_continue(&inconsistent))
        .await
        .expect("continues");
    assert_eq!(names(&next), vec!["bz", "d"]);
    assert_eq!(rv_of(&next), now.to_string());
    assert!(next["metadata"].get("continue").is_none());
}

#[tokio::test]
async fn malformed_continue_tokens_are_400() {
    let store = store();
    let err = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            continue_token: Some("garbage!".into()),
            ..Default::default()
        },
    )
    .await
    .expect_err("garbage");
    assert_eq!(err.code(), 400);
    assert!(err.to_string().starts_with("invalid continue token"));
}

#[tokio::test]
async fn table_rows_accept_list_items_without_type_meta() {
    let store = store();
    seed(&store, &["a"]).await;
    let list = RestStorage::list(&store, "v1", None, &ListParams::default())
        .await
        .expect("list");
    let row = RestStorage::table_row(&store, "v1", &list["items"][0]).expect("row");
    assert_eq!(row, vec![json!("a")]);
}
