//! The scheduler: keeps every migration it has seen (list, then watch), and starts the oldest
//! pending ones on free workers, one per resource. A migration that hit the retry cap waits
//! (growing pauses) and resumes from its checkpoint; one that is deleted is cancelled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::events::Reason;
use super::metrics::ManagerLabel;
use super::neighbours::Migrating;
use super::runner::{self, Outcome, retry_delay};
use super::source::Source;
use super::{Events, MigratorContext, MigratorMetrics, Pressure, Settings};
use svm_api::migration::{FAILED, SUCCEEDED, StorageVersionMigration};
use svm_cluster::ClusterClient;
use svm_cluster::watches::Update;
use svm_runtime::API_MODES_DOCS as DOCS;

/// The pool of workers that runs migrations.
pub struct Migrator {
    context: Arc<MigratorContext>,
}

struct Running {
    resource: String,
    cancel: CancellationToken,
}

#[derive(Default)]
struct Scheduler {
    known: HashMap<String, StorageVersionMigration>,
    running: HashMap<String, Running>,
    /// Migrations waiting after hitting the retry cap: when to try again, and how often
    /// they have failed so.
    waiting: HashMap<String, (Instant, u32)>,
    /// Migrations another migrator works on (it wrote their status): never started here.
    yielded: HashSet<String>,
}

fn resource_key(m: &StorageVersionMigration) -> String {
    format!("{}/{}", m.spec.resource.group, m.spec.resource.resource)
}

fn finished(m: &StorageVersionMigration) -> bool {
    m.condition_true(SUCCEEDED).is_some()
        || m.condition_true(FAILED).is_some()
        || svm_api::names::is_imported_history(&m.metadata)
}

impl Scheduler {
    /// The next migrations to start: pending, not running, resource free, not waiting;
    /// oldest first (creation time, then name).
    fn next(&self, free: usize, now: Instant) -> Vec<String> {
        let mut candidates: Vec<&StorageVersionMigration> = self
            .known
            .values()
            .filter(|m| !finished(m) && m.metadata.deletion_timestamp.is_none())
            .filter(|m| {
                let name = m.metadata.name.as_deref().unwrap_or_default();
                !self.running.contains_key(name)
                    && !self.yielded.contains(name)
                    && self.waiting.get(name).is_none_or(|(at, _)| *at <= now)
            })
            .collect();
        candidates.sort_by(|a, b| {
            (
                &a.metadata.creation_timestamp.as_ref().map(|t| t.0),
                &a.metadata.name,
            )
                .cmp(&(
                    &b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    &b.metadata.name,
                ))
        });
        let mut busy: Vec<String> = self.running.values().map(|r| r.resource.clone()).collect();
        let mut out = Vec::new();
        for m in candidates {
            if out.len() >= free {
                break;
            }
            let key = resource_key(m);
            if busy.contains(&key) {
                continue;
            }
            busy.push(key);
            out.push(m.metadata.name.clone().unwrap_or_default());
        }
        out
    }

    /// A full list: what is no longer there is forgotten.
    fn relisted(&mut self, all: Vec<StorageVersionMigration>) {
        let names: Vec<String> = all.iter().filter_map(|m| m.metadata.name.clone()).collect();
        let gone: Vec<String> = self
            .known
            .keys()
            .filter(|k| !names.contains(k))
            .cloned()
            .collect();
        for name in gone {
            self.forget(&name);
        }
        for m in all {
            if let Some(name) = m.metadata.name.clone() {
                self.known.insert(name, m);
            }
        }
    }

    /// A created or changed migration; one being deleted stops.
    fn applied(&mut self, m: StorageVersionMigration) {
        let name = m.metadata.name.clone().unwrap_or_default();
        if m.metadata.deletion_timestamp.is_some()
            && let Some(running) = self.running.get(&name)
        {
            running.cancel.cancel();
        }
        self.known.insert(name, m);
    }

    /// A run that finished it: the migration as stored then stands for it until the feed
    /// brings that write (or a later one), so it is not started again meanwhile. One deleted
    /// while it ran stays forgotten.
    fn finished(&mut self, stored: StorageVersionMigration) {
        let name = stored.metadata.name.clone().unwrap_or_default();
        self.waiting.remove(&name);
        if let Some(known) = self.known.get_mut(&name)
            && known.metadata.uid == stored.metadata.uid
        {
            *known = stored;
        }
    }

    fn forget(&mut self, name: &str) {
        self.known.remove(name);
        self.waiting.remove(name);
        self.yielded.remove(name);
        if let Some(running) = self.running.get(name) {
            running.cancel.cancel();
        }
    }
}

impl Migrator {
    /// A pool on `context`, idle until [`Migrator::run`].
    pub fn new(
        cluster: ClusterClient,
        migrations: impl Into<Source>,
        settings: Settings,
        metrics: MigratorMetrics,
        events: Option<Events>,
    ) -> Self {
        let pressure = Pressure::new(settings.qps, settings.burst, settings.concurrency);
        Self {
            context: Arc::new(MigratorContext {
                cluster,
                // Its status writes are recorded for the migrator in managedFields.
                migrations: migrations
                    .into()
                    .managed_by(svm_api::names::MIGRATOR_FIELD_MANAGER),
                pressure,
                migrating: Migrating::default(),
                metrics,
                events,
                settings,
            }),
        }
    }

    /// Runs until `shutdown` fires; then cancels every running migration (each keeps its
    /// checkpoint) and waits for the workers to stop.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut scheduler = Scheduler::default();
        let mut workers: JoinSet<(String, Outcome)> = JoinSet::new();
        let (tx, mut updates) = mpsc::channel(256);
        let feed = self
            .context
            .migrations
            .feed(tx, self.context.settings.resync);
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        let neighbours = self.watch_neighbours();
        loop {
            self.start_next(&mut scheduler, &mut workers);
            self.publish_statuses(&scheduler);
            tokio::select! {
                _ = shutdown.cancelled() => break,
                update = updates.recv() => match update {
                    Some(Update::Relisted(all)) => scheduler.relisted(all),
                    Some(Update::Applied(m)) => scheduler.applied(m),
                    Some(Update::Deleted(m)) => {
                        scheduler.forget(m.metadata.name.as_deref().unwrap_or_default());
                    }
                    Some(Update::Failed(err)) => {
                        tracing::info!(error = %err, source = %self.context.migrations.describe(), "reading migrations failed; relisting");
                    }
                    None => break,
                },
                Some(done) = workers.join_next(), if !workers.is_empty() => {
                    self.finish(&mut scheduler, done).await;
                }
                _ = tick.tick() => {}
            }
        }
        feed.abort();
        if let Some(watch) = neighbours {
            watch.abort();
        }
        for running in scheduler.running.values() {
            running.cancel.cancel();
        }
        while workers.join_next().await.is_some() {}
        self.context.metrics.running.set(0);
    }

    /// `--object-concurrency auto` also follows kube-apiserver's own counts of who else is
    /// using it (`neighbours.rs`) and, while others are there, how long they wait
    /// (`probe.rs`); a fixed limit has no use for either.
    fn watch_neighbours(&self) -> Option<tokio::task::JoinHandle<()>> {
        if !matches!(
            self.context.settings.concurrency,
            super::ConcurrencyMode::Adaptive { .. }
        ) {
            return None;
        }
        let context = self.context.clone();
        Some(tokio::spawn(async move {
            let counts = super::neighbours::watch(
                &context.cluster,
                super::neighbours::Sources {
                    pressure: &context.pressure,
                    migrating: &context.migrating,
                    metrics: &context.metrics,
                },
            );
            let others_wait = super::probe::watch(
                &context.cluster,
                &context.pressure,
                &context.migrating,
                &context.metrics,
            );
            tokio::join!(counts, others_wait);
        }))
    }

    fn publish_statuses(&self, scheduler: &Scheduler) {
        let mut counts: Vec<(&str, i64)> = Vec::new();
        for m in scheduler.known.values() {
            let status = m.phase();
            match counts.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => counts.push((status, 1)),
            }
        }
        self.context.metrics.set_statuses(&counts);
    }

    fn start_next(&self, scheduler: &mut Scheduler, workers: &mut JoinSet<(String, Outcome)>) {
        let free = self
            .context
            .settings
            .workers
            .max(1)
            .saturating_sub(scheduler.running.len());
        if free == 0 {
            return;
        }
        for name in scheduler.next(free, Instant::now()) {
            let Some(m) = scheduler.known.get(&name) else {
                continue;
            };
            let cancel = CancellationToken::new();
            scheduler.running.insert(
                name.clone(),
                Running {
                    resource: resource_key(m),
                    cancel: cancel.clone(),
                },
            );
            // Every log line of the run carries the migration and its resource.
            let span =
                tracing::info_span!("migration", migration = %name, resource = %resource_key(m));
            span.in_scope(|| tracing::info!("starting migration"));
            let context = self.context.clone();
            workers.spawn(
                async move {
                    // A panic in a worker must not take the pool down: its migration waits
                    // and resumes from its checkpoint like any other interrupted one.
                    let run =
                        std::panic::AssertUnwindSafe(runner::run(context, name.clone(), cancel));
                    let outcome = run.catch_unwind().await.unwrap_or_else(|_| {
                        Outcome::RetryLater("the migration worker panicked".into())
                    });
                    (name, outcome)
                }
                .instrument(span),
            );
        }
        self.context
            .metrics
            .running
            .set(scheduler.running.len() as i64);
    }

    async fn finish(
        &self,
        scheduler: &mut Scheduler,
        done: Result<(String, Outcome), tokio::task::JoinError>,
    ) {
        let (name, outcome) = match done {
            Ok(done) => done,
            // Only an abort gets here (panics are caught in the task), and the pool never
            // aborts its workers.
            Err(err) => {
                tracing::error!(error = %err, "a migration worker ended abnormally");
                return;
            }
        };
        scheduler.running.remove(&name);
        self.context
            .metrics
            .running
            .set(scheduler.running.len() as i64);
        match outcome {
            Outcome::Finished(stored) => scheduler.finished(*stored),
            Outcome::Stopped => {
                scheduler.waiting.remove(&name);
            }
            Outcome::Yielded(foreign) => {
                scheduler.waiting.remove(&name);
                scheduler.yielded.insert(name.clone());
                let message = format!(
                    "{foreign}: another migrator works on this migration, so this server's \
                     migrator stops working on it and leaves it to that one. Two migrators on \
                     one cluster means the cluster serves storagemigration.k8s.io itself \
                     (kube-controller-manager reaches this server's migrations through its \
                     APIServices after an upgrade, or its controller runs beside \
                     --companion-migrator=svm-apiserver): see {DOCS}"
                );
                tracing::error!(migration = %name, source = %self.context.migrations.describe(), "{message}");
                self.context
                    .metrics
                    .yielded
                    .get_or_create(&ManagerLabel {
                        manager: foreign.manager.clone().unwrap_or_else(|| "unknown".into()),
                    })
                    .inc();
                if let Some(migration) = scheduler.known.get(&name).cloned() {
                    self.context
                        .event(&migration, Reason::Yielded, message)
                        .await;
                }
            }
            Outcome::RetryLater(message) => {
                let failures = scheduler.waiting.get(&name).map_or(0, |(_, n)| n + 1);
                let delay = retry_delay(failures);
                tracing::warn!(migration = %name, %message, ?delay, "migration paused after repeated errors; it resumes from its checkpoint");
                scheduler
                    .waiting
                    .insert(name, (Instant::now() + delay, failures));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use svm_api::migration::{GroupVersionResource, MigrationSpec};

    fn migration(name: &str, created: i64, resource: &str) -> StorageVersionMigration {
        let mut m = StorageVersionMigration {
            spec: MigrationSpec {
                resource: GroupVersionResource {
                    group: "".into(),
                    version: "".into(),
                    resource: resource.into(),
                },
                ..Default::default()
            },
            ..Default::default()
        };
        m.metadata.name = Some(name.into());
        m.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).expect("time")));
        m
    }

    fn scheduler(migrations: Vec<StorageVersionMigration>) -> Scheduler {
        let mut s = Scheduler::default();
        for m in migrations {
            s.known
                .insert(m.metadata.name.clone().unwrap_or_default(), m);
        }
        s
    }

    #[test]
    fn oldest_first_one_per_resource_within_the_free_workers() {
        let s = scheduler(vec![
            migration("c", 30, "secrets"),
            migration("a", 10, "secrets"),
            migration("b", 20, "configmaps"),
            migration("d", 40, "deployments"),
        ]);
        let now = Instant::now();
        // "c" waits for "a" (same resource); the rest go oldest first.
        assert_eq!(s.next(10, now), ["a", "b", "d"]);
        assert_eq!(s.next(2, now), ["a", "b"]);
    }

    #[test]
    fn running_finished_deleting_and_waiting_migrations_are_not_started() {
        let mut done = migration("done", 1, "a");
        done.status.set_condition(SUCCEEDED, true, "Done", "", None);
        let mut failed = migration("failed", 2, "b");
        failed
            .status
            .set_condition(FAILED, true, "Failed", "", None);
        let mut deleting = migration("deleting", 3, "c");
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let mut s = scheduler(vec![
            done,
            failed,
            deleting,
            migration("busy", 4, "secrets"),
            migration("same-resource", 5, "secrets"),
            migration("paused", 6, "d"),
            migration("ready", 7, "e"),
        ]);
        s.running.insert(
            "busy".into(),
            Running {
                resource: "/secrets".into(),
                cancel: CancellationToken::new(),
            },
        );
        let now = Instant::now();
        s.waiting.insert(
            "paused".into(),
            (now + std::time::Duration::from_secs(5), 0),
        );
        assert_eq!(s.next(10, now), ["ready"]);
        // Once its pause is over, the waiting one is eligible again.
        assert_eq!(
            s.next(10, now + std::time::Duration::from_secs(6)),
            ["paused", "ready"]
        );
    }

    #[test]
    fn a_migration_left_to_another_migrator_is_never_started_again() {
        let mut s = scheduler(vec![
            migration("theirs", 1, "secrets"),
            migration("ours", 2, "a"),
        ]);
        s.yielded.insert("theirs".into());
        assert_eq!(s.next(10, Instant::now()), ["ours"]);
        // A relist keeps it yielded; deleting it forgets that.
        s.relisted(vec![migration("theirs", 1, "secrets")]);
        assert!(s.next(10, Instant::now()).is_empty());
        s.forget("theirs");
        assert!(s.yielded.is_empty());
    }

    #[test]
    fn forgetting_a_running_migration_cancels_it() {
        let mut s = scheduler(vec![migration("gone", 1, "secrets")]);
        let cancel = CancellationToken::new();
        s.running.insert(
            "gone".into(),
            Running {
                resource: "/secrets".into(),
                cancel: cancel.clone(),
            },
        );
        s.forget("gone");
        assert!(cancel.is_cancelled());
        assert!(s.known.is_empty());
    }

    #[test]
    fn a_finished_run_is_not_started_again_before_the_feed_brings_its_write() {
        let mut running = migration("done-here", 1, "secrets");
        running.metadata.uid = Some("uid-1".into());
        let mut s = scheduler(vec![running.clone()]);
        let mut stored = running.clone();
        stored
            .status
            .set_condition(SUCCEEDED, true, "Done", "", None);
        s.finished(stored.clone());
        assert!(s.next(10, Instant::now()).is_empty());
        // A migration deleted and created again under the name while the run ended is the
        // new one, and starts.
        let mut again = migration("done-here", 2, "secrets");
        again.metadata.uid = Some("uid-2".into());
        s.applied(again);
        s.finished(stored);
        assert_eq!(s.next(10, Instant::now()), ["done-here"]);
    }
}
