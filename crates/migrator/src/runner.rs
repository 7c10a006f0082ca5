//! One migration, from start to end: resolve the resource, read it — one watch-list stream,
//! PATCHing while it arrives, or metadata-only LIST pages — rewrite every object with the
//! no-op PATCH, and checkpoint as it goes (the last key below which everything is done, or
//! the continue token of the last page) — so a restarted server resumes there, not at the
//! start.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::MigratorContext;
use super::concurrency::Epoch;
use super::events::Reason;
use super::failures::{self, FailureLog, failures_text};
use super::metrics::{MigrationLabels, ResourceLabel, RetryLabels};
use super::preflight;
use super::pressure::Slot;
use super::status::{
    StatusWriteError, bounded_message, check, count, progress_message, write_progress, write_status,
};
use super::window::Window;
use crate::guard::{ForeignWrite, StatusGuard};
use svm_api::migration::{
    FAILED, MAX_NAMED_FAILURES, MigrationProgress, OBJECTS_SKIPPED, ON_OBJECT_FAILURE_ANNOTATION,
    ObjectFailure, RUNNING, SUCCEEDED, StorageVersionMigration,
};
use svm_cluster::objects::{
    Initial, InitialEvents, StreamUnavailable, list_metadata, open_metadata_stream, touch,
    touch_dry_run,
};
use svm_cluster::resources::{group_resource, resolve};
use svm_cluster::{ClusterError, MetadataPage, ObjectRef, ResolveError, ResolvedResource, Touched};

/// How long the apiserver may take to stream a whole resource's metadata (its
/// `timeoutSeconds`); a stream cut short after some progress is opened again, skipping what
/// is done.
const WATCH_LIST_TIMEOUT: Duration = Duration::from_secs(300);

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// Succeeded or Failed, and recorded so: the migration as stored then (the pool knows it
    /// is finished before its feed says so, and does not start it again meanwhile).
    Finished(Box<StorageVersionMigration>),
    /// Deleted, or the pool is shutting down: nothing more to do here.
    Stopped,
    /// The apiserver kept failing past the retry cap: try again later, from the checkpoint.
    RetryLater(String),
    /// Another migrator wrote the migration's status: left to it, never run here again.
    Yielded(ForeignWrite),
}

/// How a streamed read ended.
enum Streamed {
    /// Every object done, checkpointed with the stream's revision.
    Complete,
    /// Page the rest; why.
    Page(String),
}

/// What asking for a watch-list stream gave.
enum Opened {
    Events(InitialEvents),
    /// Refused for good: page instead.
    Unavailable(StreamUnavailable),
    /// The resource's watch cache is still filling: ask again after this long.
    NotYet(Duration),
}

/// How [`Runner::page`] pages.
struct Pages {
    /// Stop after the page that ends past this time (else: through the last page).
    until: Option<Instant>,
    /// Checkpoint the continue token with each page: a run resumed from the checkpoint pages
    /// on from it rather than streaming again.
    checkpoint_token: bool,
}

/// How one stream of a streamed read ended (everything admitted is done and checkpointed).
enum StreamEnd {
    /// Its initial-events-end bookmark came (with the list revision, checkpointed).
    Complete(String),
    Cut {
        why: String,
        /// Some object was admitted from this stream.
        progressed: bool,
    },
    TooLarge,
    OutOfOrder(String),
}

impl StreamEnd {
    /// Whether the stream served the resource (all of it, or some before it was cut).
    fn served(&self) -> bool {
        !matches!(
            self,
            StreamEnd::Cut {
                progressed: false,
                ..
            }
        )
    }

    fn out_of_order(err: &super::window::OutOfOrder) -> Self {
        StreamEnd::OutOfOrder(format!(
            "the stream is not in key order ({:?} after {:?})",
            err.key, err.previous
        ))
    }
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

pub(crate) async fn run(
    context: Arc<MigratorContext>,
    name: String,
    cancel: CancellationToken,
) -> Outcome {
    let runner = Runner {
        context,
        name,
        cancel,
        guard: Mutex::new(StatusGuard::default()),
        failures: FailureLog::default(),
        skip: AtomicBool::new(false),
        last: Mutex::new(MigrationProgress::default()),
    };
    match runner.run().await {
        Ok(stored) => Outcome::Finished(Box::new(stored)),
        Err(RunError::Stopped) => Outcome::Stopped,
        Err(RunError::Yielded(foreign)) => Outcome::Yielded(foreign),
        Err(RunError::Retry(message)) => Outcome::RetryLater(message),
        Err(RunError::Fatal { reason, message }) => runner.fail(reason, message).await,
    }
}

struct Runner {
    context: Arc<MigratorContext>,
    name: String,
    cancel: CancellationToken,
    /// What this run wrote of the status, to notice another migrator's writes.
    guard: Mutex<StatusGuard>,
    /// The objects the cluster refused (see [`failures`]).
    failures: FailureLog,
    /// The migration's policy is `Skip` (refused objects do not fail it).
    skip: AtomicBool,
    /// The progress last checkpointed (or read when the run started): what a failure reports.
    last: Mutex<MigrationProgress>,
}

impl Runner {
    fn stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The migration as stored when it finished.
    async fn run(&self) -> Result<StorageVersionMigration, RunError> {
        let Some(migration) = self.migration().await? else {
            return Err(RunError::Stopped);
        };
        if migration.condition_true(SUCCEEDED).is_some()
            || migration.condition_true(FAILED).is_some()
        {
            return Ok(migration);
        }
        // Another migrator already wrote its status (managedFields say who): never start.
        if let Some(foreign) = check(&self.guard, &migration) {
            return Err(RunError::Yielded(foreign));
        }
        let resource = self.discover(&migration).await?;
        let _ours = self.context.migrating.enter(&resource);
        let mut progress = migration.status.progress.clone().unwrap_or_default();
        self.resume(&migration, &progress);
        if preflight::needed(&progress) {
            self.preflight(&migration, &resource).await?;
        }
        self.mark_running(&migration, &resource, &progress).await?;

        let resource_label = ResourceLabel {
            resource: resource.group_resource(),
        };
        let token = Some(progress.continue_token.clone()).filter(|t| !t.is_empty());
        // A paged migration keeps paging (its continue token is the resume point); anything
        // else first tries the whole resource as one stream.
        if token.is_none() && self.context.settings.watch_list_max_objects > 0 {
            match self
                .migrate_streamed(&resource, &resource_label, &mut progress)
                .await?
            {
                Streamed::Complete => return self.finish(&resource, &progress).await,
                Streamed::Page(why) => {
                    tracing::info!(migration = %self.name, %why, through = %progress.migrated_through, "listing in pages");
                }
            }
        }
        self.context
            .metrics
            .count_read(&resource_label.resource, "pages");
        self.migrate_paged(&resource, &resource_label, &mut progress, token)
            .await?;
        self.finish(&resource, &progress).await
    }

    /// What the run starts from: the policy, the refusals and the progress stored.
    fn resume(&self, migration: &StorageVersionMigration, progress: &MigrationProgress) {
        self.skip
            .store(migration.skips_refused_objects(), Ordering::Relaxed);
        self.failures.reset(progress);
        if let Ok(mut last) = self.last.lock() {
            last.clone_from(progress);
        }
    }

    /// Every object was read: Succeeded, unless objects were refused — then the policy
    /// decides (Failed naming them, or Succeeded with them skipped).
    async fn finish(
        &self,
        resource: &ResolvedResource,
        progress: &MigrationProgress,
    ) -> Result<StorageVersionMigration, RunError> {
        if self.failures.count() > 0 && !self.skip.load(Ordering::Relaxed) {
            return Err(self.rejected());
        }
        self.succeed(resource, progress).await
    }

    /// The migration's failure for its refused objects (policy `Fail`), naming them.
    fn rejected(&self) -> RunError {
        let mut progress = MigrationProgress::default();
        self.failures.fill_all(&mut progress);
        RunError::Fatal {
            reason: "ObjectsRejected",
            message: bounded_message(format!(
                "the cluster refused {} objects: {}",
                progress.failed_objects,
                failures_text(&progress)
            )),
        }
    }

    /// The migration's resource as the cluster serves it (retried like any request); a
    /// resource that cannot be migrated (no list or patch) fails the migration.
    async fn discover(
        &self,
        migration: &StorageVersionMigration,
    ) -> Result<ResolvedResource, RunError> {
        let spec = &migration.spec.resource;
        let label = group_resource(&spec.group, &spec.resource);
        self.with_retries(&label, "discovery", || {
            let cluster = &self.context.cluster;
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
        })
    }

    /// [`preflight`]: dry runs of the no-op PATCH for a sample of the first objects; a
    /// refusal every write would meet fails the migration before any write (a Warning Event
    /// with the object, the answer and what to fix, then the Failed condition).
    async fn preflight(
        &self,
        migration: &StorageVersionMigration,
        resource: &ResolvedResource,
    ) -> Result<(), RunError> {
        let label = resource.group_resource();
        let cluster = &self.context.cluster;
        let verdict = match self
            .with_retries(&label, "list", || {
                list_metadata(cluster, resource, preflight::LIST_LIMIT, None)
            })
            .await
        {
            Err(err) => preflight::list_failed(err, &label),
            Ok(page) => {
                let dry_runs = preflight::sample(&page.items)
                    .into_iter()
                    .map(|object| async {
                        let answer = self
                            .with_retries(&label, "dry-run", || {
                                touch_dry_run(cluster, resource, &object)
                            })
                            .await;
                        (object, answer)
                    });
                preflight::verdict(futures::future::join_all(dry_runs).await, &label)
            }
        };
        match verdict {
            preflight::Verdict::Pass { sampled, admitted } => {
                tracing::info!(migration = %self.name, sampled, admitted, "preflight passed");
                Ok(())
            }
            preflight::Verdict::Error { err, doing } => {
                Err(self.classify(err, preflight::REASON, &doing))
            }
            preflight::Verdict::Stop {
                first,
                refused,
                sampled,
            } => {
                let message = bounded_message(preflight::message(&first, refused, sampled, &label));
                self.context
                    .event(migration, Reason::PreflightFailed, message.clone())
                    .await;
                Err(RunError::Fatal {
                    reason: preflight::REASON,
                    message,
                })
            }
        }
    }

    /// A migration starting says so (condition Running, an Event); one resuming from its
    /// checkpoint only logs it.
    async fn mark_running(
        &self,
        migration: &StorageVersionMigration,
        resource: &ResolvedResource,
        progress: &MigrationProgress,
    ) -> Result<(), RunError> {
        if migration.condition_true(RUNNING).is_some() {
            tracing::info!(
                migration = %self.name,
                migrated = progress.migrated_objects,
                "resuming from the checkpoint"
            );
            return Ok(());
        }
        let message = format!(
            "migrating {} ({} objects between checkpoints)",
            resource.group_resource(),
            self.context.settings.chunk_size
        );
        let counts = progress_message(progress);
        write_status(
            &self.context.migrations,
            &self.name,
            &self.guard,
            |status, generation| {
                status.set_condition(RUNNING, true, "MigrationStarted", &counts, generation);
            },
        )
        .await?;
        self.context
            .event(migration, Reason::Started, message)
            .await;
        Ok(())
    }

    /// Opens the watch-list stream, through the pool's pressure and the retry loop like any
    /// request — except the answer that the resource's watch cache is still filling, which
    /// comes back as [`Opened::NotYet`]: there is work to do meanwhile.
    async fn open_stream(&self, resource: &ResolvedResource) -> Result<Opened, RunError> {
        let label = resource.group_resource();
        let opened = self
            .with_retries_while(
                &label,
                "watch",
                |err| !err.is_refused_for_now(),
                || open_metadata_stream(&self.context.cluster, resource, WATCH_LIST_TIMEOUT),
            )
            .await;
        match opened {
            Ok(Ok(events)) => Ok(Opened::Events(events)),
            Ok(Err(unavailable)) => Ok(Opened::Unavailable(unavailable)),
            Err(err) if err.is_refused_for_now() => Ok(Opened::NotYet(
                err.retry_after().unwrap_or(Duration::from_secs(1)),
            )),
            Err(err) => Err(self.classify(err, "ListFailed", &format!("listing {label}"))),
        }
    }

    /// While the resource's watch cache fills (its storage was rebuilt: a CRD's storage
    /// version just moved, as before most migrations), pages from etcd for at least `wait`,
    /// each checkpointed as the stream's done prefix (`migrated_through`), so the stream
    /// opened after it skips them. Whether those pages were the whole resource.
    async fn page_while_filling(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        token: &mut Option<String>,
        wait: Duration,
    ) -> Result<bool, RunError> {
        // The continue token is not checkpointed: a run resumed from this checkpoint streams
        // again rather than paging on.
        let pages = Pages {
            until: Some(Instant::now() + wait),
            checkpoint_token: false,
        };
        self.page(resource, label, progress, token, pages).await
    }

    /// Pages with metadata-only LISTs from `token`, each page rewritten and checkpointed with
    /// its last key as `migrated_through` (a LIST is in key order), until the last page or
    /// `pages.until`: whether the last page was read. Objects at or before `migrated_through`
    /// are skipped — done by a stream, or by these pages before a token expired without the
    /// inconsistent token to go on from (then the pages start over, and nothing is PATCHed or
    /// counted twice).
    async fn page(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        token: &mut Option<String>,
        pages: Pages,
    ) -> Result<bool, RunError> {
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
                    tracing::info!(migration = %self.name, resumed = continue_token.is_some(), "continue token expired");
                    *token = continue_token;
                    continue;
                }
                Err(err) => {
                    let doing = format!("listing {}", resource.group_resource());
                    return Err(self.classify(err, "ListFailed", &doing));
                }
            };
            let done = progress.migrated_through.clone();
            if let Some(last) = page.items.last() {
                progress.migrated_through = last.key().max(done.clone());
            }
            *token = page.continue_token.clone();
            if pages.checkpoint_token {
                progress.continue_token = token.clone().unwrap_or_default();
            }
            self.rewrite(resource, label, progress, page, &done).await?;
            if token.is_none() {
                return Ok(true);
            }
            if pages.until.is_some_and(|until| Instant::now() >= until) {
                return Ok(false);
            }
        }
    }

    /// Rewrites the objects of `page` after `done` (a key; empty: all), records the ones
    /// refused, counts the rest into `progress` and checkpoints it.
    async fn rewrite(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        page: MetadataPage,
        done: &str,
    ) -> Result<(), RunError> {
        let todo: Vec<ObjectRef> = page
            .items
            .into_iter()
            .filter(|item| done.is_empty() || item.key().as_str() > done)
            .collect();
        let refused = self.migrate_page(resource, &todo).await?;
        let migrated = todo.len() - refused.len();
        self.failures.record(refused);
        self.record_progress(label, progress, migrated, Some(page.remaining.unwrap_or(0)));
        self.checkpoint(progress, &page.resource_version).await
    }

    /// Reads the resource as watch-list streams, PATCHing while they arrive. A stream cut
    /// after some progress (its `timeoutSeconds`, a restart of the apiserver) is opened
    /// again, skipping what is done; one that gives nothing new, that is refused, that passes
    /// `--watch-list-max-objects` or that is not in key order ends in `Page`: the caller
    /// pages the rest, skipping keys up to `progress.migrated_through`.
    async fn migrate_streamed(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
    ) -> Result<Streamed, RunError> {
        let mut counted = false;
        // The pages read while the watch cache fills, continued between its refusals.
        let mut filling = None;
        loop {
            let events = match self.open_stream(resource).await? {
                Opened::Events(events) => events,
                Opened::Unavailable(StreamUnavailable(why)) => return Ok(Streamed::Page(why)),
                Opened::NotYet(wait) => {
                    if filling.is_none() {
                        tracing::info!(migration = %self.name, "the watch cache is still filling; paging meanwhile");
                    }
                    let token = filling.get_or_insert(None);
                    if self
                        .page_while_filling(resource, label, progress, token, wait)
                        .await?
                    {
                        self.context.metrics.count_read(&label.resource, "pages");
                        return Ok(Streamed::Complete);
                    }
                    continue;
                }
            };
            let end = self.pipeline(resource, label, progress, events).await?;
            // A read by stream is one that served: an apiserver that cannot stream (etcd 3.4)
            // opens it and sends an ERROR event first, and the read is counted as pages.
            if !counted && end.served() {
                counted = true;
                self.context.metrics.count_read(&label.resource, "stream");
            }
            match end {
                StreamEnd::Complete(_) => return Ok(Streamed::Complete),
                StreamEnd::Cut { why, progressed } if progressed => {
                    tracing::info!(migration = %self.name, %why, through = %progress.migrated_through, "the stream was cut; streaming the rest");
                }
                StreamEnd::Cut { why, .. } => return Ok(Streamed::Page(why)),
                StreamEnd::TooLarge => {
                    let max = self.context.settings.watch_list_max_objects;
                    return Ok(Streamed::Page(format!(
                        "more than {max} objects (--watch-list-max-objects)"
                    )));
                }
                StreamEnd::OutOfOrder(why) => {
                    // A key checkpointed from this stream may be above objects still to come:
                    // nothing may be skipped, so page from the start (finished objects cost a
                    // no-op PATCH each, no write).
                    progress.migrated_through.clear();
                    self.checkpoint(progress, "").await?;
                    return Ok(Streamed::Page(why));
                }
            }
        }
    }

    /// Objects arrived and not yet done that the pipeline holds at most: enough to keep
    /// every PATCH slot busy while a slow one holds the done prefix back, and at least a
    /// chunk; it follows the concurrency limit as that moves.
    fn window_size(&self) -> usize {
        let chunk = usize::try_from(self.context.settings.chunk_size).unwrap_or(usize::MAX);
        chunk
            .max(self.context.pressure.concurrency().saturating_mul(4))
            .max(1)
    }

    /// One stream: each object is PATCHed as it arrives (objects at or below the checkpoint
    /// only pass), at most [`Runner::window_size`] between the done prefix and the newest;
    /// the stream is read only while the window has room, so memory stays bounded and the
    /// connection pushes back on the apiserver. Every `--chunk-size` objects that join the
    /// done prefix, its last key is the checkpoint. Before returning, everything admitted is
    /// finished and checkpointed.
    async fn pipeline(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        mut events: InitialEvents,
    ) -> Result<StreamEnd, RunError> {
        let group_resource = resource.group_resource();
        let mut state = Pipeline::new(&self.context.settings, progress);
        let mut in_flight = FuturesUnordered::new();
        let end = loop {
            if self.stopped() {
                return Err(RunError::Stopped);
            }
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(RunError::Stopped),
                Some(finished) = in_flight.next(), if !in_flight.is_empty() => {
                    self.joined(&mut state, label, progress, finished?).await?;
                }
                step = events.next(), if state.window.len() < self.window_size() => match step {
                    Initial::Object(object) => match state.arrive(object.key()) {
                        Arrival::Patch(seq) => {
                            let group_resource = &group_resource;
                            in_flight.push(async move {
                                self.patch_object(resource, group_resource, &object)
                                    .await
                                    .map(|refusal| (seq, refusal))
                            });
                        }
                        Arrival::Passed => {}
                        Arrival::End(end) => break end,
                    },
                    Initial::End { resource_version } => {
                        break StreamEnd::Complete(resource_version);
                    }
                    Initial::Broken(why) => {
                        break StreamEnd::Cut { why, progressed: state.progressed };
                    }
                },
            }
        };
        while let Some(finished) = in_flight.next().await {
            let joined = self.join(&mut state.window, &mut state.refused, finished?);
            state.unsaved.add(joined);
        }
        self.end_pipeline(label, progress, state, end).await
    }

    /// An object PATCHed (or refused): what joins the done prefix is counted, and every
    /// `--chunk-size` of them checkpointed.
    async fn joined(
        &self,
        state: &mut Pipeline,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        finished: (u64, Option<ObjectFailure>),
    ) -> Result<(), RunError> {
        let joined = self.join(&mut state.window, &mut state.refused, finished);
        state.unsaved.add(joined);
        if state.unsaved.objects >= state.chunk {
            let unsaved = std::mem::take(&mut state.unsaved);
            self.save_prefix(label, progress, &state.window, unsaved, None, "")
                .await?;
        }
        Ok(())
    }

    /// The last checkpoint of a stream, everything admitted finished: at its end nothing
    /// remains; cut short, the done prefix is saved if it moved.
    async fn end_pipeline(
        &self,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        state: Pipeline,
        end: StreamEnd,
    ) -> Result<StreamEnd, RunError> {
        let unsaved = state.unsaved;
        match end {
            StreamEnd::Complete(resource_version) => {
                self.save_prefix(
                    label,
                    progress,
                    &state.window,
                    unsaved,
                    Some(0),
                    &resource_version,
                )
                .await?;
                Ok(StreamEnd::Complete(resource_version))
            }
            other => {
                let moved = state.window.through() > progress.migrated_through.as_str();
                if unsaved.objects > 0 || moved {
                    self.save_prefix(label, progress, &state.window, unsaved, None, "")
                        .await?;
                }
                Ok(other)
            }
        }
    }

    /// Marks the object `seq` done (`refusal` when the cluster refused it): what joined the
    /// done prefix, its refusals recorded.
    fn join(
        &self,
        window: &mut Window,
        refused: &mut BTreeMap<u64, ObjectFailure>,
        (seq, refusal): (u64, Option<ObjectFailure>),
    ) -> Joined {
        if let Some(failure) = refusal {
            refused.insert(seq, failure);
        }
        let objects = window.done(seq);
        let still_out = refused.split_off(&window.next_seq());
        let joined = std::mem::replace(refused, still_out);
        let joined_refused = joined.len();
        self.failures.record(joined.into_values());
        Joined {
            objects,
            refused: joined_refused,
        }
    }

    /// Checkpoints the end of the window's done prefix, `joined` more objects done.
    async fn save_prefix(
        &self,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        window: &Window,
        joined: Joined,
        remaining: Option<i64>,
        resource_version: &str,
    ) -> Result<(), RunError> {
        if window.through() > progress.migrated_through.as_str() {
            progress.migrated_through = window.through().to_string();
        }
        self.record_progress(label, progress, joined.migrated(), remaining);
        self.checkpoint(progress, resource_version).await
    }

    /// Pages through the rest of the resource from `token`, checkpointing the continue token
    /// after each page (a run resumed from it pages on).
    async fn migrate_paged(
        &self,
        resource: &ResolvedResource,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        mut token: Option<String>,
    ) -> Result<(), RunError> {
        let pages = Pages {
            until: None,
            checkpoint_token: true,
        };
        self.page(resource, label, progress, &mut token, pages)
            .await
            .map(|_last_page_read| ())
    }

    /// Counts `migrated` more objects into `progress` and the metrics.
    fn record_progress(
        &self,
        label: &ResourceLabel,
        progress: &mut MigrationProgress,
        migrated: usize,
        remaining: Option<i64>,
    ) {
        progress.migrated_objects += count(migrated);
        // A stream does not know what is left until it ends.
        progress.remaining_objects = remaining.map(|r| r.max(0));
        progress.last_checkpoint_time = Some(svm_registry::now_time());
        self.failures.fill(progress);
        let metrics = &self.context.metrics;
        metrics
            .migrated_objects
            .get_or_create(label)
            .inc_by(count(migrated));
        if let Some(remaining) = progress.remaining_objects {
            metrics
                .remaining_objects
                .get_or_create(label)
                .set(remaining);
        }
    }

    /// Succeeded=True, Running=False, the metric and the event.
    async fn succeed(
        &self,
        resource: &ResolvedResource,
        progress: &MigrationProgress,
    ) -> Result<StorageVersionMigration, RunError> {
        let message = progress_message(progress);
        // Reached with refused objects only under the policy `Skip`: said in a condition of
        // its own (which keeps the resource unsafe) and a Warning Event, never silently.
        let skipped = (progress.failed_objects > 0).then(|| {
            bounded_message(format!(
                "{} objects of {} were not migrated ({ON_OBJECT_FAILURE_ANNOTATION}: Skip); the resource still holds objects in an old encoding: {}",
                progress.failed_objects,
                resource.group_resource(),
                failures_text(progress)
            ))
        });
        let reason = if skipped.is_some() {
            "MigrationSucceededWithSkips"
        } else {
            "MigrationSucceeded"
        };
        let stored = write_status(
            &self.context.migrations,
            &self.name,
            &self.guard,
            |status, generation| {
                status.set_condition(RUNNING, false, reason, &message, generation);
                status.set_condition(SUCCEEDED, true, reason, &message, generation);
                if let Some(skipped) = &skipped {
                    let why = "ObjectsRefused";
                    status.set_condition(OBJECTS_SKIPPED, true, why, skipped, generation);
                }
            },
        )
        .await?;
        self.context
            .metrics
            .migrations
            .get_or_create(&MigrationLabels {
                resource: resource.group_resource(),
                status: SUCCEEDED.into(),
            })
            .inc();
        self.context
            .event(&stored, Reason::Succeeded, message)
            .await;
        if let Some(skipped) = skipped {
            tracing::warn!(migration = %self.name, %skipped, "objects skipped");
            self.context
                .event(&stored, Reason::ObjectsSkipped, skipped)
                .await;
        }
        Ok(stored)
    }

    async fn migration(&self) -> Result<Option<StorageVersionMigration>, RunError> {
        match self.context.migrations.get(&self.name).await {
            Ok(found) => Ok(found.filter(|m| m.metadata.deletion_timestamp.is_none())),
            Err(err) => Err(RunError::Retry(format!("reading the migration: {err}"))),
        }
    }

    async fn list_page(
        &self,
        resource: &ResolvedResource,
        token: Option<&str>,
    ) -> Result<MetadataPage, ClusterError> {
        let chunk = self.context.settings.chunk_size;
        self.with_retries(&resource.group_resource(), "list", || {
            list_metadata(&self.context.cluster, resource, chunk, token)
        })
        .await
    }

    /// Rewrites a page's objects, as many at a time as the pool's PATCH slots allow (see
    /// [`Runner::with_retries`]): the objects the cluster refused; the first other error
    /// that cannot be retried ends the page (and the migration).
    async fn migrate_page(
        &self,
        resource: &ResolvedResource,
        items: &[ObjectRef],
    ) -> Result<Vec<ObjectFailure>, RunError> {
        let label = resource.group_resource();
        let mut pending: FuturesUnordered<_> = items
            .iter()
            .map(|object| self.patch_object(resource, &label, object))
            .collect();
        let mut refused = Vec::new();
        while let Some(patched) = pending.next().await {
            refused.extend(patched?);
        }
        Ok(refused)
    }

    /// The no-op PATCH of one object, retried: the cluster's refusal of the object, if it
    /// refused it (see [`failures`]); any other error that cannot be retried is the
    /// migration's.
    async fn patch_object(
        &self,
        resource: &ResolvedResource,
        label: &str,
        object: &ObjectRef,
    ) -> Result<Option<ObjectFailure>, RunError> {
        // A stopped run (deleted, or its leadership term over) sends no more.
        if self.stopped() {
            return Err(RunError::Stopped);
        }
        let touched = match self
            .with_retries(label, "patch", || {
                touch(&self.context.cluster, resource, object)
            })
            .await
        {
            Ok(touched) => touched,
            Err(err) => {
                return match failures::refusal(&err, object) {
                    Some(failure) => self.refused(failure),
                    None => Err(self.classify(
                        err,
                        "ObjectRejected",
                        &format!("patching {label} {}", object.display_name()),
                    )),
                };
            }
        };
        if touched == Touched::Rewritten {
            tracing::trace!(object = %object.display_name(), "rewritten");
        }
        Ok(None)
    }

    /// One refused object. Under the policy `Fail`, once [`MAX_NAMED_FAILURES`] are refused
    /// the migration fails at once: a longer list would say no more.
    fn refused(&self, failure: ObjectFailure) -> Result<Option<ObjectFailure>, RunError> {
        tracing::info!(migration = %self.name, object = %failure.key(), code = failure.code, message = %failure.message, "the cluster refused the object");
        let seen = self.failures.saw(&failure);
        if !self.skip.load(Ordering::Relaxed) && seen >= count(MAX_NAMED_FAILURES) {
            return Err(self.rejected());
        }
        Ok(Some(failure))
    }

    async fn checkpoint(
        &self,
        progress: &MigrationProgress,
        resource_version: &str,
    ) -> Result<(), RunError> {
        if let Ok(mut last) = self.last.lock() {
            last.clone_from(progress);
        }
        write_progress(
            &self.context.migrations,
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

    /// One request under the pool's [`Pressure`](super::Pressure) (a token from the rate; a
    /// slot, for a PATCH), retried with backoff while the error is retriable and the cap
    /// allows. Every answer is reported to it: a Retry-After pauses the whole pool, an
    /// overload halves the PATCHes in flight, a PATCH's latency moves their limit.
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
        self.with_retries_while(resource, verb, |_| true, call)
            .await
    }

    /// [`Runner::with_retries`], retrying only the retriable errors `retry` accepts (the
    /// others come back at once).
    async fn with_retries_while<T, F, Fut>(
        &self,
        resource: &str,
        verb: &str,
        retry: impl Fn(&ClusterError) -> bool,
        call: F,
    ) -> Result<T, ClusterError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, ClusterError>>,
    {
        let mut attempt = 0;
        loop {
            match self.send_once(resource, verb, &call).await {
                Err(err) if err.is_retriable() && retry(&err) && !self.stopped() => {
                    let Some(delay) = self.next_retry(resource, verb, attempt, &err) else {
                        return Err(err);
                    };
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

    /// One request within the pool's budget — a token, and a PATCH slot for a PATCH — its
    /// answer told to the pool's pressure and the metrics.
    async fn send_once<T, F, Fut>(
        &self,
        resource: &str,
        verb: &str,
        call: &F,
    ) -> Result<T, ClusterError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, ClusterError>>,
    {
        let pressure = &self.context.pressure;
        // Only PATCHes take a slot and feed the concurrency limit: their latency is what
        // queueing in the apiserver shows in; a page or a stream takes long for other reasons.
        let patch = verb == "patch";
        pressure.token().await;
        let slot = if patch {
            Some(pressure.slot().await)
        } else {
            None
        };
        // A read is counted while it executes, so that kube-apiserver's counts of others
        // leave it out; the open stream holds no seat.
        let reading = (!patch && verb != "watch").then(|| pressure.reading());
        let started = Instant::now();
        let result = call().await;
        let latency = started.elapsed();
        drop(reading);
        let sent_in = slot.as_ref().map(Slot::epoch);
        drop(slot);
        self.observe_answer(resource, verb, &result, latency, sent_in);
        result
    }

    /// Tells the pool's pressure and the metrics how a request was answered, and logs what
    /// the pressure made of it.
    fn observe_answer<T>(
        &self,
        resource: &str,
        verb: &str,
        result: &Result<T, ClusterError>,
        latency: Duration,
        sent_in: Option<Epoch>,
    ) {
        let pressure = &self.context.pressure;
        let metrics = &self.context.metrics;
        let code = match result {
            Ok(_) => Some(200),
            Err(err) => err.code(),
        };
        metrics.observe_request(verb, code, latency.as_secs_f64());
        let reaction = pressure.answered(result, latency, sent_in);
        metrics.rate_limit.set(pressure.rate());
        metrics.patch_concurrency.set(count(pressure.concurrency()));
        if let Some((level, rate)) = &reaction.apf {
            metrics.apf_rejections.inc();
            tracing::info!(%resource, verb, priority_level = %level, rate, "API Priority and Fairness rejected a request; lowering the pool's rate");
        }
        if let Some(step) = reaction.step {
            tracing::debug!(%resource, ?step, limit = pressure.concurrency(), "PATCH concurrency");
        }
    }

    /// How long before retry `attempt` of a request that failed retriably with `err`;
    /// `None` once its retries are spent.
    fn next_retry(
        &self,
        resource: &str,
        verb: &str,
        attempt: u32,
        err: &ClusterError,
    ) -> Option<Duration> {
        let backoff = self.context.settings.backoff;
        let metrics = &self.context.metrics;
        let labels = RetryLabels {
            resource: resource.to_string(),
            reason: err
                .code()
                .map_or_else(|| "transport".into(), |c| c.to_string()),
        };
        if attempt >= backoff.max_retries {
            // Left to the migration-level retry (a pause, then on from the checkpoint):
            // counted apart, so every retriable answer is in one of the two counters.
            metrics.retries_exhausted.get_or_create(&labels).inc();
            return None;
        }
        metrics.retries.get_or_create(&labels).inc();
        let delay = backoff.delay(attempt, err.retry_after());
        tracing::debug!(%resource, verb, attempt, ?delay, error = %err, "retrying");
        Some(delay)
    }

    /// Records the failure (Failed=True, Running=False) and says so in an event.
    async fn fail(&self, reason: &'static str, message: String) -> Outcome {
        tracing::warn!(migration = %self.name, reason, %message, "migration failed");
        let mut progress = self.last.lock().map(|p| p.clone()).unwrap_or_default();
        self.failures.fill_all(&mut progress);
        let message = bounded_message(format!("{}: {message}", progress_message(&progress)));
        let written = write_status(
            &self.context.migrations,
            &self.name,
            &self.guard,
            |status, generation| {
                status.set_condition(RUNNING, false, reason, &message, generation);
                status.set_condition(FAILED, true, reason, &message, generation);
                // The refused objects, named where the checkpoints name them.
                if let Some(stored) = status.progress.as_mut() {
                    stored.failed_objects = progress.failed_objects;
                    stored.failures.clone_from(&progress.failures);
                }
            },
        )
        .await;
        match written {
            Ok(stored) => {
                let spec = &stored.spec.resource;
                self.context
                    .metrics
                    .migrations
                    .get_or_create(&MigrationLabels {
                        resource: group_resource(&spec.group, &spec.resource),
                        status: FAILED.into(),
                    })
                    .inc();
                self.context.event(&stored, Reason::Failed, message).await;
                Outcome::Finished(Box::new(stored))
            }
            Err(StatusWriteError::Gone | StatusWriteError::Deposed(_)) => Outcome::Stopped,
            Err(StatusWriteError::Yielded(foreign)) => Outcome::Yielded(foreign),
            Err(err) => Outcome::RetryLater(err.to_string()),
        }
    }
}

/// What [`Runner::pipeline`] keeps while it reads a stream.
struct Pipeline {
    /// Objects between checkpoints (`--chunk-size`).
    chunk: usize,
    /// Objects a stream may bring at most (`--watch-list-max-objects`).
    max: usize,
    /// The checkpoint the run resumed from: objects at or below it only pass.
    skip_through: String,
    window: Window,
    /// Refused objects not yet in the done prefix, by sequence number: counted when they
    /// join it, so a checkpoint never names an object a restart would PATCH again.
    refused: BTreeMap<u64, ObjectFailure>,
    /// Joined the done prefix since the last checkpoint.
    unsaved: Joined,
    arrived: usize,
    /// Whether any object was admitted to be PATCHed.
    progressed: bool,
}

/// What becomes of an object that arrived.
enum Arrival {
    /// PATCH it, as sequence number `seq` of the window.
    Patch(u64),
    /// At or below the checkpoint: done already.
    Passed,
    /// The stream ends here.
    End(StreamEnd),
}

impl Pipeline {
    fn new(settings: &super::Settings, progress: &MigrationProgress) -> Self {
        Self {
            chunk: usize::try_from(settings.chunk_size)
                .unwrap_or(usize::MAX)
                .max(1),
            max: settings.watch_list_max_objects,
            skip_through: progress.migrated_through.clone(),
            window: Window::new(),
            refused: BTreeMap::new(),
            unsaved: Joined::default(),
            arrived: 0,
            progressed: false,
        }
    }

    /// Takes in the object of `key`.
    fn arrive(&mut self, key: String) -> Arrival {
        self.arrived += 1;
        if self.arrived > self.max {
            return Arrival::End(StreamEnd::TooLarge);
        }
        if !self.skip_through.is_empty() && key <= self.skip_through {
            return match self.window.pass(key) {
                Ok(()) => Arrival::Passed,
                Err(err) => Arrival::End(StreamEnd::out_of_order(&err)),
            };
        }
        match self.window.admit(key) {
            Ok(seq) => {
                self.progressed = true;
                Arrival::Patch(seq)
            }
            Err(err) => Arrival::End(StreamEnd::out_of_order(&err)),
        }
    }
}

/// Objects that joined the done prefix, and how many of them the cluster refused.
#[derive(Clone, Copy, Debug, Default)]
struct Joined {
    objects: usize,
    refused: usize,
}

impl Joined {
    fn add(&mut self, other: Joined) {
        self.objects += other.objects;
        self.refused += other.refused;
    }

    /// The objects migrated: joined and not refused.
    fn migrated(self) -> usize {
        self.objects.saturating_sub(self.refused)
    }
}

/// A pause before a migration that hit the retry cap is tried again (it resumes from its
/// checkpoint).
pub(crate) fn retry_delay(failures: u32) -> Duration {
    Duration::from_secs(5u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(300))
}
