//! Label and field selectors of a list, watch or delete-collection, bound to a kind.

use std::sync::Arc;

use super::super::error::{ApiError, ApiResult};
use super::super::selectors::{FieldSelector, LabelSelector};
use super::super::strategy::Strategy;

const NAME: &str = "metadata.name";
const NAMESPACE: &str = "metadata.namespace";

/// What a request selects; empty selects everything.
pub(crate) struct Selection<S: Strategy> {
    labels: LabelSelector,
    fields: FieldSelector,
    /// The request's namespace (a namespaced kind's `/namespaces/<ns>/...`), if any.
    namespace: Option<String>,
    strategy: Arc<S>,
}

impl<S: Strategy> Clone for Selection<S> {
    fn clone(&self) -> Self {
        Self {
            labels: self.labels.clone(),
            fields: self.fields.clone(),
            namespace: self.namespace.clone(),
            strategy: self.strategy.clone(),
        }
    }
}

impl<S: Strategy> Selection<S> {
    pub(crate) fn everything(strategy: Arc<S>) -> Self {
        Self {
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
            namespace: None,
            strategy,
        }
    }

    /// Parse the `labelSelector` and `fieldSelector` parameters; any defect is a 400, like
    /// upstream's parameter decoding (parse errors) and field label conversion (unknown fields).
    pub(crate) fn parse(
        strategy: Arc<S>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> ApiResult<Self> {
        let labels = LabelSelector::parse(label_selector.unwrap_or_default())
            .map_err(ApiError::BadRequest)?;
        let fields = FieldSelector::parse(field_selector.unwrap_or_default())
            .map_err(ApiError::BadRequest)?;
        let extra = strategy.selectable_fields();
        if let Some(unknown) = fields
            .fields()
            .find(|f| *f != NAME && *f != NAMESPACE && !extra.contains(f))
        {
            // Upstream's default field-label conversion text, or the text of kinds that
            // convert more fields.
            let message = if extra.is_empty() {
                format!("{unknown:?} is not a known field selector: only {NAME:?}, {NAMESPACE:?}")
            } else {
                format!("field label not supported: {unknown}")
            };
            return Err(ApiError::BadRequest(message));
        }
        Ok(Self {
            labels,
            fields,
            namespace: None,
            strategy,
        })
    }

    /// Only the objects of `namespace` (all when `None`).
    pub(crate) fn within(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    pub(crate) fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Whether nothing is filtered (upstream reports `remainingItemCount` only then); a
    /// namespace is a key range, not a filter.
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub(crate) fn matches(&self, obj: &S::Object) -> bool {
        use k8s_openapi::Metadata;
        let meta = obj.metadata();
        if let Some(namespace) = &self.namespace
            && meta.namespace.as_ref() != Some(namespace)
        {
            return false;
        }
        let empty = std::collections::BTreeMap::new();
        self.labels.matches(meta.labels.as_ref().unwrap_or(&empty))
            && self.fields.matches(|field| match field {
                NAME => meta.name.clone(),
                NAMESPACE => meta.namespace.clone(),
                other => self.strategy.field_value(obj, other),
            })
    }
}
