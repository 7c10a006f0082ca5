//! Where the migrations the migrator runs live: this server's own store (owner mode, through
//! the registry), or the cluster's built-in StorageVersionMigration API (companion mode with
//! `--companion-migrator=svm-apiserver`, standing in for kube-controller-manager's migrator).
//! The pool and the runner see the same internal form either way: a feed of the migrations
//! (a full list, then changes), a read of one, and a status write as the migrator's field
//! manager.

use std::time::Duration;

use kube::api::DynamicObject;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use svm_api::GROUP;
use svm_api::migration::{MigrationStrategy, StorageVersionMigration};
use svm_api::names::MIGRATOR_FIELD_MANAGER as FIELD_MANAGER;
use svm_cluster::watches::Update;
use svm_cluster::{BuiltinMigrations, ClusterError};
use svm_registry::{ApiError, Fence, Guarded};

/// Where the migrations the migrator runs are kept.
#[derive(Clone)]
pub enum Source {
    /// This server's store, written under the leadership term's fence.
    Ours(Guarded<MigrationStrategy>),
    /// The cluster's built-in API. Our fence cannot ride a write to the cluster: each status
    /// write re-checks the term first (as the trigger does before narrowing storedVersions).
    Cluster {
        /// The cluster's storagemigration.k8s.io API.
        builtin: BuiltinMigrations,
        /// The term, re-checked before each write.
        fence: Fence,
    },
}

impl From<Guarded<MigrationStrategy>> for Source {
    fn from(store: Guarded<MigrationStrategy>) -> Self {
        Source::Ours(store)
    }
}

/// A cluster error as the registry's, so the status writer handles both alike: a 409 is a
/// Conflict (re-read and retry), a 404 NotFound (the migration is gone).
fn api_error(err: ClusterError, name: &str) -> ApiError {
    let (group, resource, name) = (
        GROUP.to_string(),
        "storageversionmigrations".to_string(),
        name.to_string(),
    );
    match err.code() {
        Some(409) => ApiError::Conflict {
            group,
            resource,
            name,
            message: err.to_string(),
        },
        Some(404) => ApiError::NotFound {
            group,
            resource,
            name,
        },
        _ => ApiError::Internal(format!("the cluster's {GROUP} API: {err}")),
    }
}

impl Source {
    /// Writes recorded in managedFields for `manager` (our store's; the cluster's writes name
    /// the migrator's field manager themselves).
    pub fn managed_by(self, manager: &'static str) -> Self {
        match self {
            Source::Ours(store) => Source::Ours(store.managed_by(manager)),
            cluster => cluster,
        }
    }

    /// The leadership term these writes belong to.
    pub fn fence(&self) -> &Fence {
        match self {
            Source::Ours(store) => store.fence(),
            Source::Cluster { fence, .. } => fence,
        }
    }

    /// Which API, for messages.
    pub fn describe(&self) -> String {
        match self {
            Source::Ours(_) => "svm-apiserver's own store".into(),
            Source::Cluster { builtin, .. } => format!("the cluster's {}", builtin.api_version()),
        }
    }

    /// The migration `name`, `None` when there is none.
    pub async fn get(&self, name: &str) -> Result<Option<StorageVersionMigration>, ApiError> {
        match self {
            Source::Ours(store) => store.get(name).await,
            Source::Cluster { builtin, .. } => {
                builtin.get(name).await.map_err(|e| api_error(e, name))
            }
        }
    }

    /// Writes `migration`'s status as the migrator (its resourceVersion the precondition).
    pub async fn update_status(
        &self,
        migration: StorageVersionMigration,
    ) -> Result<StorageVersionMigration, ApiError> {
        match self {
            Source::Ours(store) => store.update_status(migration).await,
            Source::Cluster { builtin, fence } => {
                fence.check().await?;
                let name = migration.metadata.name.clone().unwrap_or_default();
                // The built-in API has no field for our checkpoint: it would be dropped with
                // a warning, so it is not sent (a built-in migration interrupted here starts
                // over; objects already rewritten cost a no-op PATCH).
                let mut sent = migration;
                sent.status.progress = None;
                builtin
                    .update_status(&sent, FIELD_MANAGER)
                    .await
                    .map_err(|e| api_error(e, &name))
            }
        }
    }

    /// Feeds every migration (a relist first, after any gap, and every `resync`), then each
    /// change, into `out` until it is closed.
    pub fn feed(
        &self,
        out: mpsc::Sender<Update<StorageVersionMigration>>,
        resync: Duration,
    ) -> JoinHandle<()> {
        match self {
            Source::Ours(store) => store.list_and_watch(resync, out, |update| update),
            Source::Cluster { builtin, .. } => feed_cluster(builtin.clone(), out),
        }
    }
}

/// The built-in migrations through the one list+watch helper, read into the internal form.
fn feed_cluster(
    builtin: BuiltinMigrations,
    out: mpsc::Sender<Update<StorageVersionMigration>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, mut raw) = mpsc::channel::<Update<DynamicObject>>(64);
        let watch = builtin.watch(None, tx, |update| update);
        let read = |object: DynamicObject| match builtin.from_dynamic(object) {
            Ok(migration) => Some(migration),
            Err(err) => {
                tracing::warn!(error = %err, "a built-in migration could not be read; skipped");
                None
            }
        };
        while let Some(update) = raw.recv().await {
            let update = match update {
                Update::Relisted(all) => {
                    Update::Relisted(all.into_iter().filter_map(read).collect())
                }
                Update::Applied(object) => match read(object) {
                    Some(m) => Update::Applied(m),
                    None => continue,
                },
                Update::Deleted(object) => match read(object) {
                    Some(m) => Update::Deleted(m),
                    None => continue,
                },
                Update::Failed(err) => Update::Failed(err),
            };
            if out.send(update).await.is_err() {
                break;
            }
        }
        watch.abort();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_answers_map_to_what_the_status_writer_retries_or_stops_on() {
        let conflict = ClusterError::from_status(409, b"", None, "Conflict");
        assert!(matches!(
            api_error(conflict, "m"),
            ApiError::Conflict { .. }
        ));
        let gone = ClusterError::from_status(404, b"", None, "NotFound");
        assert!(matches!(api_error(gone, "m"), ApiError::NotFound { .. }));
        let refused = ClusterError::from_status(403, b"", None, "Forbidden");
        assert!(matches!(api_error(refused, "m"), ApiError::Internal(_)));
    }
}
