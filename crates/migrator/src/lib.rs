//! The migrator (docs/design.md, "The migrator"): a pool of workers that runs
//! StorageVersionMigrations against the target cluster — at most `--workers` at once, at most one
//! per resource, oldest first — sharing one owner of the load they put on the apiserver (rate
//! and PATCHes in flight). Migrations come from the registry's watch; deleting one stops its
//! work within a page.

mod concurrency;
mod events;
mod failures;
mod guard;
mod limiter;
mod metrics;
mod neighbours;
mod pool;
mod preflight;
mod pressure;
mod priority_levels;
mod probe;
mod runner;
mod source;
mod status;
mod window;

use std::time::Duration;

use svm_api::migration::StorageVersionMigration;
use svm_cluster::ClusterClient;

pub use concurrency::{DEFAULT_CEILING, Mode as ConcurrencyMode};
pub use events::Events;
pub use limiter::{Backoff, DEFAULT_MAX_RETRIES};
pub use metrics::MigratorMetrics;
pub use pool::Migrator;
pub use pressure::Pressure;
pub use source::Source;

/// The migrator's knobs (flags of `serve`).
#[derive(Clone, Debug)]
pub struct Settings {
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
    /// Requests allowed at once above the rate (a full bucket).
    pub burst: u32,
    /// How a request that failed retriably is retried.
    pub backoff: Backoff,
    /// How often the pool re-reads every migration (a safety net under the watch).
    pub resync: Duration,
}

/// What every worker shares.
pub struct MigratorContext {
    /// The target cluster.
    pub cluster: ClusterClient,
    /// Where the migrations are: our store, or the cluster's built-in API.
    pub migrations: Source,
    /// How hard the pool pushes the apiserver: rate and PATCHes in flight.
    pub pressure: Pressure,
    /// The resources being migrated now (`neighbours.rs`: our requests are not others').
    pub migrating: neighbours::Migrating,
    /// The migrator's `svm_migrator_*` series.
    pub metrics: MigratorMetrics,
    /// Where Events about migrations go (none in some tests).
    pub events: Option<Events>,
    /// The pool's knobs.
    pub settings: Settings,
}

impl MigratorContext {
    /// An Event about `migration`, unless the term is over; it counts against the pool's rate.
    pub async fn event(
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
            events::publish(events, migration, reason, note).await;
        }
    }
}
