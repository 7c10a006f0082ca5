//! The generic REST registry: one `Store<S>` over the `Storage` trait, driven by a per-kind
//! `Strategy` (k8s.io/apiserver's `genericregistry.Store` + `strategy.go`).

mod clock;
pub(crate) mod continue_token;
pub mod duration;
pub(crate) mod error;
pub mod fence;
pub(crate) mod field_validation;
pub(crate) mod managed_fields;
pub(crate) mod metadata;
mod object_ref;
pub mod openapi_meta;
pub(crate) mod patch;
pub mod protobuf;
pub mod rest;
pub(crate) mod selectors;
pub(crate) mod store;
pub(crate) mod strategy;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod validation;
pub mod versions;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use clock::{now as now_time, now_text};
pub use error::{ApiError, ApiResult, FieldError};
pub use fence::{Fence, Record};
/// How a kind's OpenAPI schema says a list merges (what strategic merge patch and server-side
/// apply read), for the kinds' schemas.
pub use managed_fields::schema::{ListSemantics, list_type};
pub use object_ref::ObjectRef;
pub use rest::RestStorage;
pub use store::{Guarded, Store, Update};
pub use strategy::{ListMerge, ResourceInfo, Strategy, TableColumn};

/// Every served resource, by (group, plural).
#[derive(Clone, Default)]
pub struct Registry {
    resources: BTreeMap<(String, String), Arc<dyn RestStorage>>,
}

impl Registry {
    /// An empty registry (`svm_api::install` builds the one the server serves).
    pub fn new() -> Self {
        Self::default()
    }

    /// Serve `storage` under its (group, plural), replacing one registered there before.
    pub fn register(&mut self, storage: Arc<dyn RestStorage>) {
        let info = storage.info();
        self.resources
            .insert((info.group.to_string(), info.plural.to_string()), storage);
    }

    /// The resource served as `plural` in `group`, if any.
    pub fn get(&self, group: &str, plural: &str) -> Option<&Arc<dyn RestStorage>> {
        self.resources.get(&(group.to_string(), plural.to_string()))
    }

    /// All served resources, in (group, plural) order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn RestStorage>> {
        self.resources.values()
    }
}
