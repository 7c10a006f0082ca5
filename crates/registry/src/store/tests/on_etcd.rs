//! The same store on a real etcd (started on a free loopback port for the test): paging,
//! conflicts, finalizers, the expired continue token and watch events agree with the
//! embedded backend.

use svm_test_support::etcd as etcd_server;

use serde_json::json;

use super::*;
use crate::RestStorage;
use crate::continue_token::ContinueToken;
use crate::rest::{ListParams, Preconditions, WatchParams};
use svm_storage::etcd::{EtcdOptions, EtcdStorage};

#[tokio::test]
async fn the_store_behaves_the_same_on_etcd() {
    let server = etcd_server::EtcdServer::start();
    let storage = EtcdStorage::connect(&[server.endpoint()], EtcdOptions::default())
        .await
        .expect("connect to etcd");
    let store = Store::new(WidgetStrategy, Arc::new(storage), ROOT);

    for name in ["a", "b", "c"] {
        store.create(widget(name, 1)).await.expect("create");
    }
    let first = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            limit: Some(2),
            ..Default::default()
        },
    )
    .await
    .expect("page 1");
    assert_eq!(names(&first), vec!["a", "b"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);

    let start = current_revision(&store).await;
    let params = WatchParams {
        resource_version: Some(start.to_string()),
        ..Default::default()
    };
    let mut events = RestStorage::watch(&store, "v1", None, &params)
        .await
        .expect("watch");

    let a = store.get("a").await.expect("get").expect("a");
    let mut bigger = a.clone();
    bigger.spec.size = 2;
    store.update(bigger.clone()).await.expect("update");
    assert_eq!(store.update(bigger).await.expect_err("stale").code(), 409);

    let mut held = widget("held", 1);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    store.create(held).await.expect("held");
    let marked = store
        .delete("held", &Preconditions::default())
        .await
        .expect("marked");
    assert!(!marked.gone);
    let mut release = marked.object.clone();
    release.metadata.finalizers = None;
    store.update(release).await.expect("released");
    assert_eq!(store.get("held").await.expect("get"), None);

    let expected = [
        ("MODIFIED", "a"),
        ("ADDED", "held"),
        ("MODIFIED", "held"),
        ("DELETED", "held"),
    ];
    for (event_type, name) in expected {
        let event = next_event(&mut events).await;
        assert_eq!(
            (event.event_type, event.object["metadata"]["name"].clone()),
            (event_type, json!(name))
        );
    }

    // Compaction expires the first page's token; the inconsistent one continues.
    store
        .storage
        .compact(current_revision(&store).await)
        .await
        .expect("compact");
    let err = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            limit: Some(2),
            continue_token: first["metadata"]["continue"].as_str().map(str::to_string),
            ..Default::default()
        },
    )
    .await
    .expect_err("expired");
    assert_eq!(err.code(), 410);
    let token = err.to_status()["metadata"]["continue"].clone();
    assert_eq!(
        ContinueToken::decode(token.as_str().expect("token"))
            .expect("token")
            .revision,
        None
    );
    let rest = RestStorage::list(
        &store,
        "v1",
        None,
        &ListParams {
            limit: Some(2),
            continue_token: token.as_str().map(str::to_string),
            ..Default::default()
        },
    )
    .await
    .expect("continues");
    assert_eq!(names(&rest), vec!["c"]);
}
