//! End-to-end tests of the generic store on the in-memory embedded backend, with a small
//! test-only kind (`Widget`: spec + status with conditions, served as v1 and v1beta1).

mod create;
mod delete;
mod managed;
mod namespaced;
mod on_etcd;
mod patch;
mod read;
mod update;
mod warnings;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use crate::rest::{WatchEvent, WatchEventStream};
pub(super) use crate::testing::*;
use crate::{ApiError, ApiResult, FieldError, ResourceInfo, Store, Strategy, TableColumn};

pub(super) fn rv(obj: &Widget) -> String {
    obj.metadata
        .resource_version
        .clone()
        .expect("resourceVersion")
}

pub(super) fn rv_of(value: &Value) -> String {
    value["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string()
}

pub(super) async fn current_revision(store: &Store<WidgetStrategy>) -> i64 {
    store.storage.current_revision().await.expect("revision")
}

/// The next watch event, failing the test if none comes in a generous while.
pub(super) async fn next_event(events: &mut WatchEventStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("a watch event arrives")
        .expect("the stream is open")
}

pub(super) fn invalid_fields(err: &ApiError) -> Vec<String> {
    match err {
        ApiError::Invalid { causes, .. } => causes.iter().map(|c| c.field.clone()).collect(),
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
}
