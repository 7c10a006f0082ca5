//! List and watch filters: label selectors and field selectors, parsed and matched the way
//! k8s.io/apimachinery does.

mod field;
mod label;

pub use field::FieldSelector;
pub use label::LabelSelector;
