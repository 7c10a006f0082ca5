//! `Guarded<S>`: a store as the controllers of one leadership term write to it. The same code
//! path as every other write (validation, resourceVersions, watch events), plus the term's
//! [`Fence`] in each write's storage transaction: a write commits only while the term lasts.

use std::sync::Arc;

use super::super::error::ApiResult;
use super::super::fence::{Fence, Record};
use super::super::rest::{Preconditions, Subresource};
use super::super::strategy::Strategy;
use super::managed::DEFAULT_FIELD_MANAGER;
use super::{Also, Deletion, ObjectRef, Store, StoreEventStream};
use svm_storage::Revision;

/// A [`Store`] whose writes carry a leadership term's [`Fence`]: what the controllers write
/// through (see the module docs).
pub struct Guarded<S: Strategy> {
    store: Arc<Store<S>>,
    fence: Fence,
    /// The field manager its writes are recorded for in managedFields.
    manager: &'static str,
}

impl<S: Strategy> Clone for Guarded<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            fence: self.fence.clone(),
            manager: self.manager,
        }
    }
}

impl<S: Strategy> Guarded<S> {
    /// Writes under `fence`, recorded for the controllers' field manager (`svm-apiserver`).
    pub fn new(store: Arc<Store<S>>, fence: Fence) -> Self {
        Self {
            store,
            fence,
            manager: DEFAULT_FIELD_MANAGER,
        }
    }

    /// The same, recorded for `manager` (e.g. `svm-apiserver-migrator`).
    pub fn managed_by(mut self, manager: &'static str) -> Self {
        self.manager = manager;
        self
    }

    /// The term its writes are fenced by.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    fn also<'a>(&'a self, records: &'a [Record]) -> Also<'a> {
        Also {
            fence: Some(&self.fence),
            records,
        }
    }

    /// Reads need no fence.
    pub async fn get<'a>(&self, at: impl Into<ObjectRef<'a>>) -> ApiResult<Option<S::Object>> {
        self.store.get(at).await
    }

    /// Every object and the revision read at; reads need no fence.
    pub async fn list_all(&self) -> ApiResult<(Vec<S::Object>, Revision)> {
        self.store.list_all().await
    }

    /// Every change after revision `after` (a compacted `after` fails with 410); reads need no
    /// fence.
    pub async fn watch(&self, after: Revision) -> ApiResult<StoreEventStream<S::Object>> {
        self.store.watch(after).await
    }

    /// Create `obj`, fenced.
    pub async fn create(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.create_with(obj, &[]).await
    }

    /// A create with `records` in the same transaction (the trigger's hash history): all
    /// land, or nothing does.
    pub async fn create_with(&self, obj: S::Object, records: &[Record]) -> ApiResult<S::Object> {
        self.store
            .create_object(
                obj,
                false,
                self.also(records),
                self.store.tracking_for(self.manager),
            )
            .await
    }

    /// Replace `obj` (not its status), fenced; its resourceVersion is the precondition.
    pub async fn update(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.store
            .replace_with(
                obj,
                Subresource::Main,
                false,
                self.store.tracking_for(self.manager),
                self.also(&[]),
            )
            .await
            .map(|updated| updated.object)
    }

    /// Replace `obj`'s status, fenced; its resourceVersion is the precondition.
    pub async fn update_status(&self, obj: S::Object) -> ApiResult<S::Object> {
        self.update_status_with(obj, &[]).await
    }

    /// A status update with `records` in the same transaction; the object's resourceVersion
    /// is the precondition for all of it (a 409 writes nothing).
    pub async fn update_status_with(
        &self,
        obj: S::Object,
        records: &[Record],
    ) -> ApiResult<S::Object> {
        self.store
            .replace_with(
                obj,
                Subresource::Status,
                false,
                self.store.tracking_for(self.manager),
                self.also(records),
            )
            .await
            .map(|updated| updated.object)
    }

    /// Delete the object at `at` if `preconditions` hold, fenced.
    pub async fn delete<'a>(
        &self,
        at: impl Into<ObjectRef<'a>>,
        preconditions: &Preconditions,
    ) -> ApiResult<Deletion<S::Object>> {
        self.store
            .delete_object(at.into(), preconditions, None, false, self.also(&[]))
            .await
    }
}
