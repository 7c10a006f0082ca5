//! Writing a migration's status through its source (the registry, so validation,
//! resourceVersion and watch events stay one code path, under the leadership term's fence; or
//! the cluster's built-in API): a read-modify-write that survives concurrent edits, never moves
//! progress backwards, and stops — writing nothing — the moment another migrator has written
//! the status (see [`crate::guard`]).

use std::sync::Mutex;

use super::source::Source;
use crate::guard::{ForeignWrite, StatusGuard};
use svm_api::migration::{MigrationProgress, MigrationStatus, RUNNING, StorageVersionMigration};
use svm_registry::ApiError;

/// `n` as a status count (`i64`, as the API has it), saturating.
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How a status write ended when it did not succeed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusWriteError {
    /// The migration is gone (deleted): stop working on it.
    #[error("the migration was deleted")]
    Gone,
    /// Another migrator wrote the status: nothing was written; ours leaves the migration to it.
    #[error("another migrator works on this migration: {0}")]
    Yielded(ForeignWrite),
    /// This replica's leadership term is over: nothing was written; the controllers stop.
    #[error("{0}")]
    Deposed(String),
    /// The stored progress is ahead of this run's (another run of the migration got further):
    /// nothing was written; this run stops rather than move the checkpoint back.
    #[error("the stored progress ({stored} objects) is ahead of this run's ({ours})")]
    Behind { stored: i64, ours: i64 },
    #[error("writing the migration's status: {0}")]
    Registry(#[from] ApiError),
}

/// Applies `change` to the stored status of `name` and writes it with `/status` semantics,
/// retrying on conflicts (someone labelled the object meanwhile): every attempt re-reads the
/// object and applies `change` to what is stored then. Returns the stored object. `guard`
/// holds what this run last wrote: a status someone else wrote since is
/// [`StatusWriteError::Yielded`], and nothing is written.
pub(crate) async fn write_status(
    source: &Source,
    name: &str,
    guard: &Mutex<StatusGuard>,
    change: impl Fn(&mut MigrationStatus, Option<i64>),
) -> Result<StorageVersionMigration, StatusWriteError> {
    write_status_checked(source, name, guard, |status, generation| {
        change(status, generation);
        Ok(())
    })
    .await
}

/// Writes `progress` as the checkpoint (and the list snapshot the migration started from, the
/// first time) — never moving it backwards: when the stored progress counts more objects than
/// `progress` (another run got further), nothing is written and the answer is
/// [`StatusWriteError::Behind`]. A conflict retry checks again against what it re-reads.
pub(crate) async fn write_progress(
    source: &Source,
    name: &str,
    guard: &Mutex<StatusGuard>,
    progress: &MigrationProgress,
    resource_version: &str,
) -> Result<StorageVersionMigration, StatusWriteError> {
    write_status_checked(source, name, guard, |status, _| {
        let stored = status.progress.as_ref().map_or(0, |p| p.migrated_objects);
        if stored > progress.migrated_objects {
            return Err(StatusWriteError::Behind {
                stored,
                ours: progress.migrated_objects,
            });
        }
        status.progress = Some(progress.clone());
        // The counts where kubectl looks, from the same progress (one owner per fact).
        if let Some(running) = status
            .conditions
            .iter_mut()
            .find(|c| c.type_ == RUNNING && c.status == "True")
        {
            running.message = progress_message(progress);
        }
        if status.resource_version.is_empty() && !resource_version.is_empty() {
            status.resource_version = resource_version.to_string();
        }
        Ok(())
    })
    .await
}

/// [`write_status`] with a `change` that may refuse (nothing is written then).
async fn write_status_checked(
    source: &Source,
    name: &str,
    guard: &Mutex<StatusGuard>,
    change: impl Fn(&mut MigrationStatus, Option<i64>) -> Result<(), StatusWriteError>,
) -> Result<StorageVersionMigration, StatusWriteError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some(current) = source.get(name).await? else {
            return Err(StatusWriteError::Gone);
        };
        if let Some(foreign) = check(guard, &current) {
            return Err(StatusWriteError::Yielded(foreign));
        }
        let mut updated = current.clone();
        change(&mut updated.status, current.metadata.generation)?;
        if updated == current {
            return Ok(current);
        }
        match source.update_status(updated).await {
            Ok(stored) => {
                if let Ok(mut guard) = guard.lock() {
                    guard.wrote(&stored.status);
                }
                return Ok(stored);
            }
            Err(ApiError::Conflict { .. }) if attempts < 10 => continue,
            Err(ApiError::NotFound { .. }) => return Err(StatusWriteError::Gone),
            Err(ApiError::Fenced(message)) => return Err(StatusWriteError::Deposed(message)),
            Err(err) => return Err(err.into()),
        }
    }
}

/// Another migrator's write on `migration`, by the guard.
pub(crate) fn check(
    guard: &Mutex<StatusGuard>,
    migration: &StorageVersionMigration,
) -> Option<ForeignWrite> {
    guard
        .lock()
        .ok()
        .and_then(|guard| guard.check(&migration.metadata, &migration.status))
}

/// The counts of `progress` as the Running, Succeeded and Failed messages carry them, as
/// Kubernetes 1.37's in-tree migrator's conditions do (kubernetes/kubernetes#138875,
/// `migrationRunningMessage(migrated, total, err)`): `migrated 250 of 1000 objects (750
/// remaining, 0 failed)`. While a watch-list stream is read, what is left is not known until
/// it ends: `migrated 250 objects so far (0 failed; remaining not known until the listing
/// ends)`. Total = migrated + remaining + failed.
pub(crate) fn progress_message(progress: &MigrationProgress) -> String {
    let (migrated, failed) = (progress.migrated_objects, progress.failed_objects);
    match progress.remaining_objects {
        Some(remaining) => format!(
            "migrated {migrated} of {} objects ({remaining} remaining, {failed} failed)",
            migrated + remaining + failed
        ),
        None => format!(
            "migrated {migrated} objects so far ({failed} failed; remaining not known until the listing ends)"
        ),
    }
}

/// A condition message fits the API's limit (32 KiB) whatever the cluster answered.
pub(crate) fn bounded_message(message: String) -> String {
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
        status.set_condition("Running", true, "Started", "a", Some(1));
        // An old transition (times are kept to the second, so "now" twice may be equal).
        let first = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        status.conditions[0].last_transition_time = first.clone();
        status.set_condition("Running", true, "Progress", "b", Some(1));
        assert_eq!(status.conditions[0].last_transition_time, first);
        assert_eq!(status.conditions[0].message, "b");
        status.set_condition("Running", false, "Done", "c", Some(2));
        assert_ne!(status.conditions[0].last_transition_time, first);
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.conditions[0].observed_generation, Some(2));
    }

    #[tokio::test]
    async fn progress_never_moves_backwards_and_a_stale_write_changes_nothing() {
        use std::sync::Arc;

        use svm_api::migration::{GroupVersionResource, MigrationSpec, MigrationStrategy};
        use svm_registry::{Fence, Guarded, Store};
        use svm_storage::Storage;
        use svm_storage::embedded::EmbeddedStorage;

        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let store = Arc::new(Store::new(MigrationStrategy, storage.clone(), "/p"));
        let guarded = Guarded::new(
            store.clone(),
            Fence::unfenced(storage, tokio_util::sync::CancellationToken::new()),
        );
        let mut migration = StorageVersionMigration {
            spec: MigrationSpec {
                resource: GroupVersionResource {
                    group: "".into(),
                    version: "".into(),
                    resource: "secrets".into(),
                },
                ..Default::default()
            },
            ..Default::default()
        };
        migration.metadata.name = Some("m".into());
        guarded.create(migration).await.expect("create");
        let at = |n: i64, through: &str| MigrationProgress {
            migrated_objects: n,
            migrated_through: through.into(),
            ..Default::default()
        };
        let source = Source::Ours(guarded.clone());
        let run = || Mutex::new(StatusGuard::default());
        let written = write_progress(&source, "m", &run(), &at(500, "ns/b"), "42")
            .await
            .expect("forward");
        assert_eq!(written.status.resource_version, "42");
        // Another run (a deposed leader's, or a stale one) is behind: refused, nothing written.
        let stale = write_progress(&source, "m", &run(), &at(200, "ns/a"), "42").await;
        assert!(
            matches!(
                stale,
                Err(StatusWriteError::Behind {
                    stored: 500,
                    ours: 200
                })
            ),
            "{stale:?}"
        );
        let stored = store.get("m").await.expect("get").expect("m");
        assert_eq!(
            stored.metadata.resource_version,
            written.metadata.resource_version
        );
        assert_eq!(
            stored
                .status
                .progress
                .as_ref()
                .map(|p| p.migrated_through.as_str()),
            Some("ns/b")
        );
        // Equal or ahead is written.
        write_progress(&source, "m", &run(), &at(700, "ns/c"), "42")
            .await
            .expect("forward again");
    }

    #[test]
    fn the_message_carries_migrated_total_remaining_and_failed() {
        let mut progress = MigrationProgress {
            migrated_objects: 250,
            remaining_objects: Some(750),
            ..Default::default()
        };
        assert_eq!(
            progress_message(&progress),
            "migrated 250 of 1000 objects (750 remaining, 0 failed)"
        );
        progress.failed_objects = 3;
        progress.remaining_objects = Some(0);
        progress.migrated_objects = 997;
        assert_eq!(
            progress_message(&progress),
            "migrated 997 of 1000 objects (0 remaining, 3 failed)"
        );
        progress.remaining_objects = None;
        assert_eq!(
            progress_message(&progress),
            "migrated 997 objects so far (3 failed; remaining not known until the listing ends)"
        );
        assert_eq!(
            progress_message(&MigrationProgress::default()),
            "migrated 0 objects so far (0 failed; remaining not known until the listing ends)"
        );
    }

    #[tokio::test]
    async fn a_checkpoint_updates_the_running_message_from_its_counts() {
        use std::sync::Arc;

        use svm_api::migration::MigrationStrategy;
        use svm_registry::{Fence, Guarded, Store};
        use svm_storage::Storage;
        use svm_storage::embedded::EmbeddedStorage;

        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let store = Arc::new(Store::new(MigrationStrategy, storage.clone(), "/p"));
        let source = Source::Ours(Guarded::new(
            store,
            Fence::unfenced(storage, tokio_util::sync::CancellationToken::new()),
        ));
        let mut migration = StorageVersionMigration::default();
        migration.metadata.name = Some("m".into());
        migration.spec.resource.resource = "secrets".into();
        if let Source::Ours(store) = &source {
            store.create(migration).await.expect("create");
        }
        let guard = Mutex::new(StatusGuard::default());
        write_status(&source, "m", &guard, |status, generation| {
            status.set_condition(RUNNING, true, "MigrationStarted", "", generation);
        })
        .await
        .expect("running");
        let progress = MigrationProgress {
            migrated_objects: 500,
            remaining_objects: Some(500),
            ..Default::default()
        };
        let stored = write_progress(&source, "m", &guard, &progress, "42")
            .await
            .expect("checkpoint");
        let running = stored.condition_true(RUNNING).expect("running");
        assert_eq!(
            running.message,
            "migrated 500 of 1000 objects (500 remaining, 0 failed)"
        );
        assert_eq!(running.reason, "MigrationStarted");
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let message = "é".repeat(5000);
        let cut = bounded_message(message);
        assert!(cut.len() <= 4096 + "…".len());
        assert!(cut.ends_with('…'));
    }

    #[tokio::test]
    async fn a_status_another_migrator_wrote_stops_ours_and_nothing_more_is_written() {
        use std::sync::Arc;

        use svm_api::migration::{MigrationStrategy, RUNNING};
        use svm_registry::Store;
        use svm_storage::Storage;
        use svm_storage::embedded::EmbeddedStorage;

        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let store = Arc::new(Store::new(MigrationStrategy, storage.clone(), "/p"));
        let mut migration = StorageVersionMigration::default();
        migration.metadata.name = Some("m".into());
        migration.spec.resource.resource = "secrets".into();
        store.create(migration).await.expect("create");
        let fence =
            svm_registry::Fence::unfenced(storage, tokio_util::sync::CancellationToken::new());
        let source = Source::Ours(
            svm_registry::Guarded::new(store.clone(), fence)
                .managed_by(svm_api::names::MIGRATOR_FIELD_MANAGER),
        );
        let guard = Mutex::new(StatusGuard::default());
        write_status(&source, "m", &guard, |status, generation| {
            status.set_condition(RUNNING, true, "MigrationStarted", "", generation);
        })
        .await
        .expect("our first write");
        // kube-controller-manager, reaching our API through the aggregator, writes the status
        // as its typed client does (no `progress`: its Go type has none).
        let mut theirs = store.get("m").await.expect("get").expect("m");
        theirs
            .status
            .set_condition(RUNNING, true, "StorageVersionMigrationInProgress", "", None);
        let theirs = store
            .managed_by("kube-controller-manager")
            .update_status(theirs)
            .await
            .expect("their write");
        let err = write_status(&source, "m", &guard, |status, _| {
            status.resource_version = "42".into();
        })
        .await
        .expect_err("ours stops");
        let StatusWriteError::Yielded(foreign) = err else {
            panic!("{err:?}")
        };
        assert_eq!(foreign.manager.as_deref(), Some("kube-controller-manager"));
        let stored = store.get("m").await.expect("get").expect("m");
        assert_eq!(
            stored.metadata.resource_version, theirs.metadata.resource_version,
            "nothing written after theirs"
        );
        // A new run (a restart, another replica) sees it before writing anything.
        assert!(check(&Mutex::new(StatusGuard::default()), &stored).is_some());
    }

    #[tokio::test]
    async fn a_status_changed_behind_our_back_is_noticed_without_managed_fields() {
        let guard = Mutex::new(StatusGuard::default());
        let mut migration = StorageVersionMigration::default();
        assert_eq!(check(&guard, &migration), None);
        guard.lock().expect("guard").wrote(&migration.status);
        migration.status.resource_version = "7".into();
        assert!(check(&guard, &migration).is_some());
    }
}
