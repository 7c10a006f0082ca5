//! One migration, from start to end: resolve the resource, then page through it with
//! metadata-only LISTs, rewrite every object with the no-op PATCH, and checkpoint the continue
//! token after each page — so a restarted server resumes at the last page, not at the start.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{TryStreamExt, stream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::events::Reason;
use super::metrics::{MigrationLabels, ResourceLabel, RetryLabels};
use super::status::{
    StatusWriteError, bounded_message, check, set_condition, write_progress, write_status,
};
use crate::api::migration::{
    FAILED, MigrationProgress, RUNNING, SUCCEEDED, StorageVersionMigration,
};
use crate::apimode::guard::{ForeignWrite, StatusGuard};
use crate::cluster::objects::{StreamedList, list_metadata, stream_metadata, touch};
use crate::cluster::resources::{group_resource, resolve};
use crate::cluster::{
    ClusterError, MetadataPage, ObjectRef, ResolveError, ResolvedResource, Touched,
};

/// How long the apiserver may take to stream a whole resource's metadata (its
/// `timeoutSeconds`); a stream cut short is paged instead.
const WATCH_LIST_TIMEOUT: Duration = Duration::from_secs(300);

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Succeeded or Failed, and recorded so.
    Finished,
    /// Deleted, or the pool is shutting down: nothing more to do here.
    Stopped,
    /// The apiserver kept failing past the retry cap: try again later, from the checkpoint.
    RetryLater(String),
    /// Another migrator wrote the migration's status: left to it, never run here again.
    Yielded(ForeignWrite),
}

enum RunError {
    /// The migration cannot succeed: recorded as Failed with this reason and message.
    Fatal {
        reason: &'static str,
        message: String,
    },
    Retry(String),
    Stopped,
    Yielded(ForeignWrite),
}

impl From<StatusWriteError> for RunError {
    fn from(err: StatusWriteError) -> Self {
        match err {
            StatusWriteError::Gone | StatusWriteError::Deposed(_) => RunError::Stopped,
            StatusWriteError::Yielded(foreign) => RunError::Yielded(foreign),
            StatusWriteError::Behind { .. } => {
                tracing::warn!(error = %err, "another run of this migration got further; this one stops");
                RunError::Stopped
            }
            other => RunError::Retry(other.to_string()),
        }
    }
}

pub(crate) async fn run(shared: Arc<Shared>, name: String, cancel: CancellationToken) -> Outcome {
    let runner = Runner {
        shared,
        name,
        cancel,
        guard: Mutex::new(StatusGuard::default()),
    };
    match runner.run().await {
        Ok(()) => Outcome::Finished,
        Err(RunError::Stopped) => Outcome::Stopped,
        Err(RunError::Yielded(foreign)) => Outcome::Yielded(foreign),
        Err(RunError::Retry(message)) => Outcome::RetryLater(message),
        Err(RunError::Fatal { reason, message }) => runner.fail(reason, message).await,
    }
}

struct Runner {
    shared: Arc<Shared>,
    name: String,
    cancel: CancellationToken,
    /// What this run wrote of the status, to notice another migrator's writes.
    guard: Mutex<StatusGuard>,
}

impl Runner {
    fn stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    async fn run(&self) -> Result<(), RunError> {
        let Some(migration) = self.migration().await? else {
            return Err(RunError::Stopped);
        };
        if migration.condition_true(SUCCEEDED).is_some()
            || migration.condition_true(FAILED).is_some()
        {
            return Ok(());
        }
        // Another migrator already wrote its status (managedFields say who): never start.
        if let Some(foreign) = check(&self.guard, &migration) {
            return Err(RunError::Yielded(foreign));
        }
        let spec = &migration.spec.resource;
        let label = group_resource(&spec.group, &spec.resource);
        let resource = self
            .with_retries(&label, "discovery", || {
                let cluster = &self.shared.cluster;
                async move {
                    match resolve(cluster, &spec.group, &spec.version, &spec.resource).await {
                        Ok(found) => Ok(Ok(found)),
                        Err(ResolveError::Unmigratable(message)) => Ok(Err(message)),
                        Err(ResolveError::Cluster(err)) => Err(err),
                    }
                }
            })
            .await
            .map_err(|err| self.classify(err, "DiscoveryFailed", &format!("discovering {label}")))?
            .map_err(|message| RunError::Fatal {
                reason: "ResourceNotMigratable",
                message,
            })?;

        let mut progress = migration.status.progress.clone().unwrap_or_default();
        if migration.condition_true(RUNNING).is_none() {
            let message = format!(
                "migrating {} ({} objects between checkpoints)",
                resource.group_resource(),
                self.shared.settings.chunk_size
            );
            write_status(
                &self.shared.migrations,
                &self.name,
                &self.guard,
                |status, generation| {
                    set_condition(
                        status,
                        RUNNING,
                        true,
                        "MigrationStarted",
                        &message,
                        generation,
                    );
                },
            )
            .await?;
            self.shared
                .event(&migration, Reason::Started, message)
                .await;
        } else {
            tracing::info!(
                migration = %self.name,
                migrated = progress.migrated_objects,
                "resuming from the checkpoint"
            );
        }

        let resource_label = ResourceLabel {
            resource: resource.group_resource(),
        };
        let token = Some(progress.continue_token.clone()).filter(|t| !t.is_empty());
        // A paged migration keeps paging (its continue token is the resume point); anything
        // else first tries the whole resource as one stream.
        if token.is_none() && self.shared.settings.watch_list_max_objects > 0 {
            match self.stream(&resource).await? {
                StreamedList::Complete {
                    items,
                    resource_version,
                } => {
                    self.shared
                        .metrics
                        .count_read(&resource_label.resource, "stream");
                    self.migrate_streamed(
                        &resource,
                        &resource_label,
                        &mut progress,
                        items,
                        &resource_version,
                    )
                    .await?;
                    return self.succeed(&resource, &progress).await;
                }
                StreamedList::Unavailable(why) => {
                    tracing::info!(migration = %self.name, %why, "no watch-list stream; listing in pages");
                }
            }
        }
        self.shared
            .metrics
            .count_read(&resource_label.resource, "pages");
        self.migrate_paged(&resource, &resource_label, &mut progress, token)
            .await?;
        self.succeed(&resource, &progress).await
    }

    /// The watch-list read, through the limiter and the retry loop like any request.
    async fn stream(&self, resource: &ResolvedResource) -> Result<StreamedList, RunError> {
        let max = self.shared.settings.watch_list_max_objects;
        self.with_retries(&resource.group_resource(), "watch", || {
            stream_metadata(&self.shared.cluster, resource, max, WATCH_LIST_TIMEOUT)
        })
        .await
        .map_err(|err| {
            self.classify(
                err,
                "ListFailed",
                &format!("listing {}", resource.group_resource()),
            )
        })
    }

    /// Rewrites a streamed resource in key order, `--chunk-size` objects between checkpoints;
    /// the checkpoint is the last key done, so a restart skips everything up to it.
    async fn migrate_streamed(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        mut items: Vec<ObjectRef>,
        resource_version: &str,
    ) -> Result<(), RunError> {
        items.sort_by_cached_key(ObjectRef::key);
        let start = if progress.migrated_through.is_empty() {
            0
        } else {
            items.partition_point(|item| item.key() <= progress.migrated_through)
        };
        let chunk = usize::try_from(self.shared.settings.chunk_size)
            .unwrap_or(usize::MAX)
            .max(1);
        let mut left = items.len() - start;
        for batch in items[start..].chunks(chunk) {
            if self.stopped() {
                return Err(RunError::Stopped);
            }
            self.migrate_page(resource, batch).await?;
            left -= batch.len();
            if let Some(last) = batch.last() {
                progress.migrated_through = last.key();
            }
            self.record_progress(label, progress, batch.len(), count(left));
            self.checkpoint(progress, resource_version).await?;
        }
        if start == items.len() {
            // Nothing (left) to do: still record the snapshot and the zero remaining.
            self.record_progress(label, progress, 0, 0);
            self.checkpoint(progress, resource_version).await?;
        }
        Ok(())
    }

    /// Pages through the resource with metadata-only LISTs from `token`, checkpointing the
    /// continue token after each page. Objects a streamed run already finished (at or before
    /// `migrated_through`) are skipped.
    async fn migrate_paged(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        mut token: Option<String>,
    ) -> Result<(), RunError> {
        let done = progress.migrated_through.clone();
        loop {
            if self.stopped() {
                return Err(RunError::Stopped);
            }
            let page = match self.list_page(resource, token.as_deref()).await {
                Ok(page) => page,
                Err(ClusterError::Api {
                    code: 410,
                    continue_token,
                    ..
                }) => {
                    // The token expired (compaction). kube-apiserver hands back an
                    // inconsistent token that continues after the same key at the current
                    // revision (recording 05): objects not yet seen are still all ahead of it.
                    // Without one, start over: finished objects cost only a no-op PATCH.
                    tracing::info!(migration = %self.name, resumed = continue_token.is_some(), "continue token expired");
                    token = continue_token;
                    continue;
                }
                Err(err) => {
                    return Err(self.classify(
                        err,
                        "ListFailed",
                        &format!("listing {}", resource.group_resource()),
                    ));
                }
            };
            let todo: Vec<ObjectRef> = if done.is_empty() {
                page.items
            } else {
                page.items
                    .into_iter()
                    .filter(|item| item.key() > done)
                    .collect()
            };
            self.migrate_page(resource, &todo).await?;
            progress.continue_token = page.continue_token.clone().unwrap_or_default();
            self.record_progress(label, progress, todo.len(), page.remaining.unwrap_or(0));
            self.checkpoint(progress, &page.resource_version).await?;
            token = page.continue_token;
            if token.is_none() {
                return Ok(());
            }
        }
    }

    /// Counts `migrated` more objects into `progress` and the metrics.
    fn record_progress(
        &self,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        migrated: usize,
        remaining: i64,
    ) {
        progress.migrated_objects += count(migrated);
        progress.remaining_objects = Some(remaining.max(0));
        progress.last_checkpoint_time = Some(crate::registry::now_time());
        let metrics = &self.shared.metrics;
        metrics
            .migrated_objects
            .get_or_create(label)
            .inc_by(count(migrated));
        metrics
            .remaining_objects
            .get_or_create(label)
            .set(progress.remaining_objects.unwrap_or(0));
    }

    /// Succeeded=True, Running=False, the metric and the event.
    async fn succeed(
        &self,
        resource: &ResolvedResource,
        progress: &MigrationProgress,
    ) -> Result<(), RunError> {
        let message = format!(
            "migrated {} objects of {}",
            progress.migrated_objects,
            resource.group_resource()
        );
        let stored = write_status(
            &self.shared.migrations,
            &self.name,
            &self.guard,
            |status, generation| {
                set_condition(
                    status,
                    RUNNING,
                    false,
                    "MigrationSucceeded",
                    &message,
                    generation,
                );
                set_condition(
                    status,
                    SUCCEEDED,
                    true,
                    "MigrationSucceeded",
                    &message,
                    generation,
                );
            },
        )
        .await?;
        self.shared
            .metrics
            .migrations
            .get_or_create(&MigrationLabels {
                resource: resource.group_resource(),
                status: SUCCEEDED.into(),
            })
            .inc();
        self.shared.event(&stored, Reason::Succeeded, message).await;
        Ok(())
    }

    async fn migration(&self) -> Result<Option<StorageVersionMigration>, RunError> {
        match self.shared.migrations.get(&self.name).await {
            Ok(found) => Ok(found.filter(|m| m.metadata.deletion_timestamp.is_none())),
            Err(err) => Err(RunError::Retry(format!("reading the migration: {err}"))),
        }
    }

    async fn list_page(
        &self,
        resource: &ResolvedResource,
        token: Option<&str>,
    ) -> Result<MetadataPage, ClusterError> {
        let chunk = self.shared.settings.chunk_size;
        self.with_retries(&resource.group_resource(), "list", || {
            list_metadata(&self.shared.cluster, resource, chunk, token)
        })
        .await
    }

    /// Rewrites a page's objects, `--object-concurrency` at a time; the first error that
    /// cannot be retried ends the page (and the migration).
    async fn migrate_page(
        &self,
        resource: &ResolvedResource,
        items: &[ObjectRef],
    ) -> Result<(), RunError> {
        let concurrency = self.shared.settings.object_concurrency.max(1);
        let label = resource.group_resource();
        stream::iter(items.iter().map(Ok))
            .try_for_each_concurrent(concurrency, |object| {
                let label = &label;
                async move {
                    // A stopped run (deleted, or its leadership term over) sends no more.
                    if self.stopped() {
                        return Err(RunError::Stopped);
                    }
                    let touched = self
                        .with_retries(label, "patch", || {
                            touch(&self.shared.cluster, resource, object)
                        })
                        .await
                        .map_err(|err| {
                            self.classify(
                                err,
                                "ObjectRejected",
                                &format!("patching {label} {}", object.display_name()),
                            )
                        })?;
                    if touched == Touched::Rewritten {
                        tracing::trace!(object = %object.display_name(), "rewritten");
                    }
                    Ok::<(), RunError>(())
                }
            })
            .await
    }

    async fn checkpoint(
        &self,
        progress: &MigrationProgress,
        resource_version: &str,
    ) -> Result<(), RunError> {
        write_progress(
            &self.shared.migrations,
            &self.name,
            &self.guard,
            progress,
            resource_version,
        )
        .await?;
        Ok(())
    }

    /// A retriable error that outlived the retry cap waits for a later run; anything else is
    /// the migration's failure, named with what was being done.
    fn classify(&self, err: ClusterError, reason: &'static str, doing: &str) -> RunError {
        if err.is_retriable() {
            RunError::Retry(format!("{doing}: {err}"))
        } else {
            RunError::Fatal {
                reason,
                message: bounded_message(format!("{doing}: {err}")),
            }
        }
    }

    /// One request through the shared limiter, retried with backoff while the error is
    /// retriable and the cap allows. A Retry-After pauses the whole pool.
    async fn with_retries<T, F, Fut>(
        &self,
        resource: &str,
        verb: &str,
        call: F,
    ) -> Result<T, ClusterError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, ClusterError>>,
    {
        let backoff = self.shared.settings.backoff;
        let mut attempt = 0;
        loop {
            self.shared.limiter.acquire().await;
            self.shared
                .metrics
                .rate_limit
                .set(self.shared.limiter.rate());
            let started = Instant::now();
            let result = call().await;
            let code = match &result {
                Ok(_) => Some(200),
                Err(err) => err.code(),
            };
            self.shared
                .metrics
                .observe_request(verb, code, started.elapsed().as_secs_f64());
            match result {
                Err(err)
                    if err.is_retriable() && attempt < backoff.max_retries && !self.stopped() =>
                {
                    if let Some(after) = err.retry_after() {
                        self.shared.limiter.pause(after);
                    }
                    if let Some(level) = err.flow_control() {
                        let rate = self.shared.limiter.backpressure();
                        self.shared.metrics.apf_rejections.inc();
                        self.shared.metrics.rate_limit.set(rate);
                        tracing::info!(%resource, verb, priority_level = level, rate, "API Priority and Fairness rejected a request; lowering the pool's rate");
                    }
                    self.shared
                        .metrics
                        .retries
                        .get_or_create(&RetryLabels {
                            resource: resource.to_string(),
                            reason: err
                                .code()
                                .map_or_else(|| "transport".into(), |c| c.to_string()),
                        })
                        .inc();
                    let delay = backoff.delay(attempt, err.retry_after());
                    tracing::debug!(%resource, verb, attempt, ?delay, error = %err, "retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.cancel.cancelled() => return Err(err),
                    }
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Records the failure (Failed=True, Running=False) and says so in an event.
    async fn fail(&self, reason: &'static str, message: String) -> Outcome {
        tracing::warn!(migration = %self.name, reason, %message, "migration failed");
        let written = write_status(
            &self.shared.migrations,
            &self.name,
            &self.guard,
            |status, generation| {
                set_condition(status, RUNNING, false, reason, &message, generation);
                set_condition(status, FAILED, true, reason, &message, generation);
            },
        )
        .await;
        match written {
            Ok(stored) => {
                let spec = &stored.spec.resource;
                self.shared
                    .metrics
                    .migrations
                    .get_or_create(&MigrationLabels {
                        resource: group_resource(&spec.group, &spec.resource),
                        status: FAILED.into(),
                    })
                    .inc();
                self.shared.event(&stored, Reason::Failed, message).await;
                Outcome::Finished
            }
            Err(StatusWriteError::Gone | StatusWriteError::Deposed(_)) => Outcome::Stopped,
            Err(StatusWriteError::Yielded(foreign)) => Outcome::Yielded(foreign),
            Err(err) => Outcome::RetryLater(err.to_string()),
        }
    }
}

/// A pause before a migration that hit the retry cap is tried again (it resumes from its
/// checkpoint).
pub(crate) fn retry_delay(failures: u32) -> Duration {
    Duration::from_secs(5u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(300))
}
