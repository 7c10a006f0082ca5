//! Writing a migration's status through the registry (so validation, resourceVersion and watch
//! events stay one code path): a read-modify-write that survives concurrent edits.

use crate::api::migration::MigrationStrategy;
use crate::api::migration::{MigrationCondition, MigrationStatus, StorageVersionMigration};
use crate::registry::{ApiError, Store};

/// The migrator's name in `metadata.managedFields`: it owns the status fields it writes
/// (conditions, progress) and takes nothing a user applied.
pub const FIELD_MANAGER: &str = "svm-apiserver-migrator";

/// How a status write ended when it did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum StatusWriteError {
    /// The migration is gone (deleted): stop working on it.
    #[error("the migration was deleted")]
    Gone,
    #[error("writing the migration's status: {0}")]
    Registry(#[from] ApiError),
}

/// Applies `change` to the stored status of `name` and writes it with `/status` semantics,
/// retrying on conflicts (someone labelled the object meanwhile). Returns the stored object.
pub async fn write_status(
    store: &Store<MigrationStrategy>,
    name: &str,
    change: impl Fn(&mut MigrationStatus, Option<i64>),
) -> Result<StorageVersionMigration, StatusWriteError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some(current) = store.get(name).await? else {
            return Err(StatusWriteError::Gone);
        };
        let mut updated = current.clone();
        change(&mut updated.status, current.metadata.generation);
        if updated == current {
            return Ok(current);
        }
        match store.managed_by(FIELD_MANAGER).update_status(updated).await {
            Ok(stored) => return Ok(stored),
            Err(ApiError::Conflict { .. }) if attempts < 10 => continue,
            Err(ApiError::NotFound { .. }) => return Err(StatusWriteError::Gone),
            Err(err) => return Err(err.into()),
        }
    }
}

/// Sets condition `type_` (metav1.Condition semantics: lastTransitionTime moves only when the
/// status changes).
pub fn set_condition(
    status: &mut MigrationStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let value = if value { "True" } else { "False" };
    let now = Some(crate::registry::now_time());
    match status.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(condition) => {
            if condition.status != value {
                condition.last_transition_time = now;
            }
            condition.status = value.into();
            condition.reason = reason.into();
            condition.message = message.into();
            condition.observed_generation = generation;
        }
        None => status.conditions.push(MigrationCondition {
            type_: type_.into(),
            status: value.into(),
            last_transition_time: now,
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
        }),
    }
}

/// A condition message fits the API's limit (32 KiB) whatever the cluster answered.
pub fn bounded_message(message: String) -> String {
    const LIMIT: usize = 4096;
    if message.len() <= LIMIT {
        return message;
    }
    let mut end = LIMIT;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_a_status_change() {
        let mut status = MigrationStatus::default();
        set_condition(&mut status, "Running", true, "Started", "a", Some(1));
        // An old transition (times are kept to the second, so "now" twice may be equal).
        let first = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        status.conditions[0].last_transition_time = first.clone();
        set_condition(&mut status, "Running", true, "Progress", "b", Some(1));
        assert_eq!(status.conditions[0].last_transition_time, first);
        assert_eq!(status.conditions[0].message, "b");
        set_condition(&mut status, "Running", false, "Done", "c", Some(2));
        assert_ne!(status.conditions[0].last_transition_time, first);
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.conditions[0].observed_generation, Some(2));
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let message = "é".repeat(5000);
        let cut = bounded_message(message);
        assert!(cut.len() <= 4096 + "…".len());
        assert!(cut.ends_with('…'));
    }
}
