//! `Store<S>`: the generic store. (Being written: see the registry work item.)

use std::marker::PhantomData;
use std::sync::Arc;

use crate::storage::Storage;

use super::strategy::Strategy;

pub struct Store<S: Strategy> {
    pub(crate) strategy: S,
    pub(crate) storage: Arc<dyn Storage>,
    /// Key prefix of this resource, e.g. `/svm-apiserver/storageversionmigrations/`.
    pub(crate) prefix: String,
    _marker: PhantomData<S>,
}

impl<S: Strategy> Store<S> {
    pub fn new(strategy: S, storage: Arc<dyn Storage>, root_prefix: &str) -> Self {
        let prefix = format!(
            "{}/{}/",
            root_prefix.trim_end_matches('/'),
            strategy.info().plural
        );
        Self {
            strategy,
            storage,
            prefix,
            _marker: PhantomData,
        }
    }
}
