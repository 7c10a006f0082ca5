//! The migrator (docs/design.md, "The migrator"): a pool of workers that runs
//! StorageVersionMigrations against the target cluster — at most `--workers` at once, at most one
//! per resource, oldest first — sharing one owner of the load they put on the apiserver (rate
//! and PATCHes in flight). Migrations come from the registry's watch; deleting one stops its
//! work within a page.

pub(crate) mod concurrency;
pub(crate) mod events;
mod failures;
pub(crate) mod limiter;
pub(crate) mod metrics;
pub(crate) mod neighbours;
mod pool;
mod preflight;
pub(crate) mod pressure;
pub(crate) mod probe;
mod runner;
pub(crate) mod source;
pub(crate) mod status;
mod window;

use std::time::Duration;

use svm_api::migration::StorageVersionMigration;
use svm_cluster::ClusterClient;

pub(crate) use concurrency::Mode as ConcurrencyMode;
pub(crate) use events::Events;
pub(crate) use limiter::Backoff;
pub(crate) use metrics::MigratorMetrics;
pub(crate) use pool::Migrator;
pub(crate) use pressure::Pressure;
pub(crate) use source::Source;

/// The migrator's knobs (flags of `serve`).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Migrations run at once.
    pub workers: usize,
    /// Objects per LIST page, and between checkpoints of a streamed migration.
    pub chunk_size: u32,
    /// Objects read from one watch-list stream at most (past them, the rest is paged);
    /// 0: always page. Memory does not grow with it: the stream is PATCHed as it arrives.
    pub watch_list_max_objects: usize,
    /// PATCHes in flight for the whole pool: found from the apiserver's latency, or fixed
    /// (`--object-concurrency N`).
    pub concurrency: ConcurrencyMode,
    /// Requests per second of the whole pool (0: unlimited).
    pub qps: f64,
    pub burst: u32,
    pub backoff: Backoff,
    /// How often the pool re-reads every migration (a safety net under the watch).
    pub resync: Duration,
}

/// What every worker shares.
pub(crate) struct MigratorContext {
    pub cluster: ClusterClient,
    /// Where the migrations are: our store, or the cluster's built-in API.
    pub migrations: Source,
    /// How hard the pool pushes the apiserver: rate and PATCHes in flight.
    pub pressure: Pressure,
    /// The resources being migrated now (`neighbours.rs`: our requests are not others').
    pub migrating: neighbours::Migrating,
    pub metrics: MigratorMetrics,
    pub events: Option<Events>,
    pub settings: Settings,
}

impl MigratorContext {
    pub(crate) async fn event(
        &self,
        migration: &StorageVersionMigration,
        reason: events::Reason,
        note: String,
    ) {
        // Events go to the target cluster, where our fence cannot reach: a term that is over
        // publishes none.
        if let Some(events) = &self.events
            && !self.migrations.fence().is_over()
        {
            // Events are requests to the same apiserver: they count against the same budget.
            self.pressure.token().await;
            events.publish(migration, reason, note).await;
        }
    }
}
