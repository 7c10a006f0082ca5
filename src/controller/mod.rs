//! Hosts the controllers inside `serve` (DESIGN.md §2): builds the target-cluster client from
//! `--kubeconfig` (or the in-cluster configuration), elects a leader among the replicas, and
//! runs the migrator on the leader only. Controllers talk to our own objects only through the
//! registry.

pub mod leader;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::Installed;
use crate::cluster::ClusterClient;
use crate::migrator::{self, Backoff, Events, Migrator, MigratorMetrics};
use crate::server::Metrics;
use crate::storage::Storage;
use leader::{ElectionConfig, LeaderElector};

/// Controller flags of `serve`.
#[derive(Args, Clone, Debug)]
pub struct ControllerOptions {
    /// kubeconfig of the cluster whose objects are migrated. Default: the in-cluster
    /// configuration when running in a pod; without either, no controller runs (API only).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Controllers to run, comma-separated: `migrator` (runs StorageVersionMigrations), or
    /// empty for none (API only).
    #[arg(long, value_delimiter = ',', default_value = "migrator")]
    pub controllers: Vec<String>,
    /// Migrations run at once (at most one per resource).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Objects per LIST page.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub chunk_size: u32,
    /// PATCHes in flight per migration.
    #[arg(long, default_value_t = 4)]
    pub object_concurrency: usize,
    /// Requests per second to the kube-apiserver, for the whole pool (0: unlimited). The
    /// default keeps the migrator under the KEP's 10 single-object requests per second.
    #[arg(long, default_value_t = 5.0)]
    pub qps: f64,
    /// Requests allowed at once above the rate (a full bucket).
    #[arg(long, default_value_t = 10)]
    pub burst: u32,
    /// Retries of one request after retriable errors (429, 5xx, timeouts, resets) before the
    /// migration pauses and later resumes from its checkpoint.
    #[arg(long, default_value_t = 8)]
    pub max_retries: u32,
    /// Run the controllers only on the replica holding the leader record (`<prefix>/leader`);
    /// other replicas serve the API. Off: run them here unconditionally (one replica only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    /// How long a leader record must sit unrenewed before another replica takes over.
    #[arg(long, default_value = "15s", value_parser = crate::auth::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops its controllers.
    #[arg(long, default_value = "10s", value_parser = crate::auth::parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often the leader renews and candidates retry.
    #[arg(long, default_value = "2s", value_parser = crate::auth::parse_duration)]
    pub leader_elect_retry_period: Duration,
}

impl ControllerOptions {
    fn wants(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c.trim() == name)
    }

    fn validate(&self) -> anyhow::Result<()> {
        for name in &self.controllers {
            let name = name.trim();
            if !name.is_empty() && name != "migrator" {
                anyhow::bail!("--controllers: unknown controller {name:?} (known: migrator)");
            }
        }
        if self.qps < 0.0 || !self.qps.is_finite() {
            anyhow::bail!("--qps must be 0 (unlimited) or positive");
        }
        if self.workers == 0 || self.object_concurrency == 0 {
            anyhow::bail!("--workers and --object-concurrency must be at least 1");
        }
        if self.leader_elect_renew_deadline >= self.leader_elect_lease_duration
            || self.leader_elect_retry_period >= self.leader_elect_renew_deadline
        {
            anyhow::bail!("leader election needs retry period < renew deadline < lease duration");
        }
        Ok(())
    }

    pub fn migrator_settings(&self) -> migrator::Settings {
        migrator::Settings {
            workers: self.workers,
            chunk_size: self.chunk_size,
            object_concurrency: self.object_concurrency,
            qps: self.qps,
            burst: self.burst,
            backoff: Backoff {
                max_retries: self.max_retries,
                ..Backoff::default()
            },
            resync: Duration::from_secs(60),
        }
    }
}

/// The running controllers.
pub struct Controllers {
    tasks: Vec<JoinHandle<()>>,
}

impl Controllers {
    /// Waits for every controller to stop (after the shutdown token fired).
    pub async fn join(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Starts the controllers `options` ask for; they stop when `shutdown` fires.
pub async fn start(
    options: &ControllerOptions,
    api: &Installed,
    storage: Arc<dyn Storage>,
    prefix: &str,
    metrics: &Arc<Metrics>,
    shutdown: CancellationToken,
) -> anyhow::Result<Controllers> {
    options.validate()?;
    let mut tasks = Vec::new();
    if !options.wants("migrator") {
        return Ok(Controllers { tasks });
    }
    let Some(cluster) = ClusterClient::connect(options.kubeconfig.as_deref())
        .await
        .context("--kubeconfig")?
    else {
        tracing::warn!(
            "no --kubeconfig and not in a cluster: the migrator does not run (API only)"
        );
        return Ok(Controllers { tasks });
    };
    let migrator_metrics = MigratorMetrics::new();
    if let Ok(mut registry) = metrics.registry.lock() {
        migrator_metrics.register(&mut registry);
    }
    let instance = std::env::var("POD_NAME").ok().or_else(hostname);
    let migrations = api.migrations.clone();
    let settings = options.migrator_settings();
    // One migrator per leadership term; each keeps its checkpoints in the migrations' status,
    // so the next term (here or on another replica) resumes where this one stopped.
    let run_migrator = move |leading: CancellationToken| {
        let events = Events::new(cluster.kube().clone(), instance.clone());
        let migrator = Migrator::new(
            cluster.clone(),
            migrations.clone(),
            settings.clone(),
            migrator_metrics.clone(),
            Some(events),
        );
        tracing::info!(
            workers = settings.workers,
            qps = settings.qps,
            burst = settings.burst,
            chunk_size = settings.chunk_size,
            "migrator started"
        );
        migrator.run(leading)
    };
    if !options.leader_elect {
        tasks.push(tokio::spawn(run_migrator(shutdown)));
        return Ok(Controllers { tasks });
    }
    let identity = format!(
        "{}_{}",
        std::env::var("POD_NAME")
            .ok()
            .or_else(hostname)
            .unwrap_or_else(|| "svm-apiserver".into()),
        uuid::Uuid::new_v4()
    );
    let elector = LeaderElector::new(
        storage,
        prefix,
        ElectionConfig {
            identity,
            lease_duration: options.leader_elect_lease_duration,
            renew_deadline: options.leader_elect_renew_deadline,
            retry_period: options.leader_elect_retry_period,
        },
    );
    tasks.push(tokio::spawn(elector.run(shutdown, run_migrator)));
    Ok(Controllers { tasks })
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}
