//! List and watch filters: label selectors and field selectors, parsed and matched the way
//! k8s.io/apimachinery does.

mod field;
mod label;

pub(crate) use field::FieldSelector;
pub(crate) use label::LabelSelector;
