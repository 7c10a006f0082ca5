//! Rules the project's own kinds (VolumeClaimMigration, DataPlaneRollout) share: how a rollout
//! field is validated, and how a phase is read off conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use svm_registry::FieldError;

/// `maxUnavailable`: at least 1 when given.
pub(crate) fn at_least_one(field: &str, value: Option<i32>) -> Option<FieldError> {
    value
        .filter(|v| *v < 1)
        .map(|v| FieldError::invalid(field, &v.to_string(), "must be greater than or equal to 1"))
}

/// A Go duration greater than zero, when given (`examples` name two, e.g. `60s or 5m`).
pub(crate) fn positive_duration(field: &str, value: &str, examples: &str) -> Option<FieldError> {
    if value.is_empty() {
        return None;
    }
    match svm_registry::duration::go_duration(value) {
        Ok(d) if !d.is_zero() => None,
        Ok(_) => Some(FieldError::invalid(
            field,
            value,
            "must be greater than zero",
        )),
        Err(e) => Some(FieldError::invalid(
            field,
            value,
            &format!("must be a duration such as {examples}: {e}"),
        )),
    }
}

/// The first of `order` whose condition is True; `Pending` when none is.
pub(crate) fn phase_of(conditions: &[Condition], order: &[&'static str]) -> &'static str {
    order
        .iter()
        .find(|kind| {
            conditions
                .iter()
                .any(|c| c.type_ == **kind && c.status == "True")
        })
        .copied()
        .unwrap_or("Pending")
}
