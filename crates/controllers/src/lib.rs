//! Hosts the controllers inside `serve` (docs/architecture.md, "Code map"): builds the
//! target-cluster client from `--kubeconfig` (or the in-cluster configuration), elects a leader
//! among the replicas, and runs the trigger and the migrator on the leader only. Controllers talk
//! to our own objects only through the registry.

mod term;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use svm_api::Installed;
use svm_apimode::metrics::ApiModeMetrics;
use svm_apimode::{self as apimode, ApiMode, CompanionMigrator, Decision};
use svm_cluster::{ClusterClient, ClusterError};
use svm_dataplane::{self as dataplane, DataPlaneMetrics};
/// `import-ksvm`: kube-storage-version-migrator's objects carried over through our API.
pub use svm_ksvm::{ImportError, ImportOptions, run as import_ksvm};
use svm_migrator::{self as migrator, Backoff, MigratorMetrics};
use svm_registry::Fence;
use svm_runtime::leader::{ElectionConfig, LeaderElector};
use svm_runtime::leader_metrics::LeaderMetrics;
use svm_server::Metrics;
use svm_storage::Storage;
use svm_trigger as trigger;
use svm_volumes::{self as volumes, VolumeMetrics};

/// Controller flags of `serve`.
#[derive(Args, Clone, Debug)]
pub struct ControllerOptions {
    /// kubeconfig of the cluster whose objects are migrated. Default: the in-cluster
    /// configuration when running in a pod; without either, no controller runs (API only).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Controllers to run, comma-separated: `trigger` (keeps StorageStates true and creates
    /// migrations), `migrator` (runs StorageVersionMigrations), `volumes` (runs
    /// VolumeClaimMigrations, when `--enable-volume-claim-migrations` serves them), `dataplane`
    /// (runs DataPlaneRollouts, when `--enable-data-plane-rollouts` serves them); `migrator`
    /// alone runs manual migrations only, an empty value none (API only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "trigger,migrator,volumes,dataplane"
    )]
    pub controllers: Vec<String>,
    /// Which part of storagemigration.k8s.io this server plays: `owner` serves the group (and
    /// refuses to run where kube-apiserver serves it itself), `companion` leaves the group to
    /// the cluster and creates the trigger's migrations on its built-in API, `auto` is
    /// companion where the cluster serves the group, else owner. See README.md, "Clusters
    /// that serve storagemigration.k8s.io themselves".
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    pub api_mode: ApiMode,
    /// In companion mode, who runs the built-in migrations: `kube-controller-manager` (its
    /// storage-version-migrator-controller), or `svm-apiserver` where that controller is
    /// switched off.
    #[arg(long, value_enum, default_value_t = CompanionMigrator::KubeControllerManager)]
    pub companion_migrator: CompanionMigrator,
    /// How often the trigger polls aggregated discovery (an unchanged cluster answers 304).
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub discovery_interval: Duration,
    /// How often every VolumeClaimMigration is looked at again when nothing of its own changed
    /// (claims and pods change without telling it).
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub volume_resync_interval: Duration,
    /// How often every DataPlaneRollout is looked at again when nothing of its own changed
    /// (nodes, pods and replicas change without telling it).
    #[arg(long, default_value = "5s", value_parser = svm_registry::duration::go_duration)]
    pub data_plane_resync_interval: Duration,
    /// How often each StorageState's lastHeartbeatTime is refreshed while nothing changes.
    #[arg(long, default_value = "5m", value_parser = svm_registry::duration::go_duration)]
    pub heartbeat_interval: Duration,
    /// How long the trigger may be away and still vouch, on its return, that no built-in
    /// storage version changed unseen (identity leases of crashed apiservers live an hour).
    #[arg(long, default_value = "1h", value_parser = svm_registry::duration::go_duration)]
    pub vouch_window: Duration,
    /// Resources the trigger never tracks, as `resource.group` (`resource` for the core
    /// group). Events expire within an hour (kube-apiserver's --event-ttl), long before an
    /// old storage version could be removed.
    #[arg(long, default_value = "events,events.events.k8s.io")]
    pub trigger_ignore_resources: String,
    /// Resources encrypted at rest, as `resource.group` (`resource` for the core group), as
    /// in kube-apiserver's EncryptionConfiguration: when every kube-apiserver applies a new
    /// encryption configuration (or KMS v2 write key), the trigger migrates them so every
    /// object is re-encrypted. Empty: kube-apiserver's /metrics is never read.
    #[arg(long, default_value = "secrets")]
    pub encryption_resources: String,
    /// How often kube-apiserver's /metrics is read for its encryption generation (there is no
    /// watch for metrics).
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub encryption_poll_interval: Duration,
    /// Migrations run at once (at most one per resource).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Objects per LIST page, and between checkpoints of a streamed migration.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub chunk_size: u32,
    /// Objects a migration reads from watch-list streams (sendInitialEvents) at most; past
    /// them the rest is read in pages. Memory does not grow with it (objects are PATCHed as
    /// they arrive, a window at a time). 0: always page.
    #[arg(long, default_value_t = 10_000_000)]
    pub watch_list_max_objects: usize,
    /// PATCHes in flight for the whole pool: `auto` finds them from the apiserver's latency
    /// (growing while it stays flat, backing off when it rises and on 429s and 5xx); a number
    /// fixes them (still halved by 429s and 5xx, growing back to it).
    #[arg(long, default_value = "auto", value_parser = parse_object_concurrency)]
    pub object_concurrency: migrator::ConcurrencyMode,
    /// Requests per second to the kube-apiserver, for the whole pool (0: unlimited). The
    /// default keeps the migrator under the KEP's 10 single-object requests per second.
    #[arg(long, default_value_t = 5.0)]
    pub qps: f64,
    /// Requests allowed at once above the rate (a full bucket).
    #[arg(long, default_value_t = 10)]
    pub burst: u32,
    /// Retries of one request after retriable errors (429, 5xx, timeouts, resets) before the
    /// migration pauses and later resumes from its checkpoint.
    #[arg(long, default_value_t = migrator::DEFAULT_MAX_RETRIES)]
    pub max_retries: u32,
    /// What the migrator asks kube-apiserver to answer its reads in, as kube's components have
    /// it: `application/vnd.kubernetes.protobuf` (JSON as the fallback; kube-apiserver spends
    /// less CPU encoding protobuf) or `application/json`.
    #[arg(long, value_enum, default_value_t = KubeApiContentType::Protobuf)]
    pub kube_api_content_type: KubeApiContentType,
    /// Run the controllers only on the replica holding the leader record (`<prefix>/leader`);
    /// other replicas serve the API. Off: run them here unconditionally (one replica only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    /// How long a leader record must sit unrenewed before another replica takes over.
    #[arg(long, default_value = "15s", value_parser = svm_registry::duration::go_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops its controllers.
    #[arg(long, default_value = "10s", value_parser = svm_registry::duration::go_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often the leader renews and candidates retry.
    #[arg(long, default_value = "2s", value_parser = svm_registry::duration::go_duration)]
    pub leader_elect_retry_period: Duration,
}

/// The controllers `--controllers` may name.
const CONTROLLERS: [&str; 4] = ["trigger", "migrator", "volumes", "dataplane"];

impl ControllerOptions {
    fn wants(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c.trim() == name)
    }

    fn validate(&self) -> Result<(), StartError> {
        for name in &self.controllers {
            let name = name.trim();
            if !name.is_empty() && !CONTROLLERS.contains(&name) {
                return Err(StartError::Flags(format!(
                    "--controllers: unknown controller {name:?} (known: {})",
                    CONTROLLERS.join(", ")
                )));
            }
        }
        if self.qps < 0.0 || !self.qps.is_finite() {
            return Err(StartError::Flags(
                "--qps must be 0 (unlimited) or positive".into(),
            ));
        }
        if self.discovery_interval.is_zero()
            || self.heartbeat_interval.is_zero()
            || self.volume_resync_interval.is_zero()
            || self.data_plane_resync_interval.is_zero()
            || self.encryption_poll_interval.is_zero()
        {
            return Err(StartError::Flags("--discovery-interval, --heartbeat-interval, --volume-resync-interval, --data-plane-resync-interval and --encryption-poll-interval must be positive".into()));
        }
        if self.workers == 0 {
            return Err(StartError::Flags("--workers must be at least 1".into()));
        }
        if self.leader_elect_renew_deadline >= self.leader_elect_lease_duration
            || self.leader_elect_retry_period >= self.leader_elect_renew_deadline
        {
            return Err(StartError::Flags(
                "leader election needs retry period < renew deadline < lease duration".into(),
            ));
        }
        Ok(())
    }

    /// The trigger's settings from these flags.
    pub(crate) fn trigger_settings(&self) -> trigger::Settings {
        trigger::Settings {
            discovery_interval: self.discovery_interval,
            heartbeat_interval: self.heartbeat_interval,
            vouch_window: self.vouch_window,
            ignored: trigger::parse_resources(&self.trigger_ignore_resources),
            encryption_resources: trigger::parse_resources(&self.encryption_resources),
            encryption_interval: self.encryption_poll_interval,
            ..trigger::Settings::default()
        }
    }

    /// The migrator's settings from these flags.
    pub(crate) fn migrator_settings(&self) -> migrator::Settings {
        migrator::Settings {
            workers: self.workers,
            chunk_size: self.chunk_size,
            watch_list_max_objects: self.watch_list_max_objects,
            concurrency: self.object_concurrency,
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

/// `--kube-api-content-type`'s values, named as kube's components name them.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeApiContentType {
    /// Protobuf, JSON where kube-apiserver cannot answer in it.
    #[value(name = "application/vnd.kubernetes.protobuf")]
    Protobuf,
    /// JSON only.
    #[value(name = "application/json")]
    Json,
}

impl KubeApiContentType {
    fn wire_format(self) -> svm_cluster::WireFormat {
        match self {
            KubeApiContentType::Protobuf => svm_cluster::WireFormat::Protobuf,
            KubeApiContentType::Json => svm_cluster::WireFormat::Json,
        }
    }
}

/// `--object-concurrency`: `auto`, or a number of PATCHes from 1 up.
fn parse_object_concurrency(value: &str) -> Result<migrator::ConcurrencyMode, String> {
    if value == "auto" {
        return Ok(migrator::ConcurrencyMode::Adaptive {
            ceiling: migrator::DEFAULT_CEILING,
        });
    }
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(migrator::ConcurrencyMode::Fixed(n)),
        _ => Err(format!(
            "{value:?} is neither `auto` nor a number from 1 up"
        )),
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

/// Why the controllers could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A flag's value that cannot work; the message names the flag.
    #[error("{0}")]
    Flags(String),
    /// The target cluster's client could not be built from `--kubeconfig` (or the in-cluster
    /// configuration).
    #[error("--kubeconfig")]
    Cluster(#[source] ClusterError),
    /// `--api-mode` refuses to run on this cluster (the reason names the flag and the docs).
    #[error("{0}")]
    Refused(String),
}

/// Starts the controllers `options` ask for; they stop when `shutdown` fires.
pub async fn start(
    options: &ControllerOptions,
    api: &Installed,
    storage: Arc<dyn Storage>,
    prefix: &str,
    metrics: &Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<Controllers, StartError> {
    options.validate()?;
    let wanted = Wanted::from_options(options, api);
    if wanted.nothing() {
        return Ok(Controllers { tasks: Vec::new() });
    }
    let Some(cluster) = ClusterClient::connect(options.kubeconfig.as_deref())
        .await
        .map_err(StartError::Cluster)?
    else {
        tracing::warn!("no --kubeconfig and not in a cluster: no controller runs (API only)");
        return Ok(Controllers { tasks: Vec::new() });
    };
    let cluster = cluster.with_wire_format(options.kube_api_content_type.wire_format());
    refuse_at_start(options.api_mode, &cluster).await?;
    let (series, leader) = Series::registered(metrics, &wanted);
    let term = term_of(options, api, &storage, prefix, cluster, wanted, series);
    let mut lead = leader_work(term, leader);
    let task = if options.leader_elect {
        let elector = LeaderElector::new(storage, prefix, election_config(options));
        tokio::spawn(elector.run(shutdown, lead))
    } else {
        tokio::spawn(lead(Fence::unfenced(storage, shutdown)))
    };
    Ok(Controllers { tasks: vec![task] })
}

/// Which controllers `--controllers` asks for (volumes only where the kind is installed).
struct Wanted {
    trigger: bool,
    migrator: bool,
    volumes: Option<Arc<svm_registry::Store<svm_api::volumes::VolumeClaimMigrationStrategy>>>,
    data_plane: Option<Arc<svm_registry::Store<svm_api::dataplane::DataPlaneRolloutStrategy>>>,
}

impl Wanted {
    fn from_options(options: &ControllerOptions, api: &Installed) -> Self {
        Self {
            trigger: options.wants("trigger"),
            migrator: options.wants("migrator"),
            volumes: api
                .volume_migrations
                .clone()
                .filter(|_| options.wants("volumes")),
            data_plane: api
                .data_plane_rollouts
                .clone()
                .filter(|_| options.wants("dataplane")),
        }
    }

    fn nothing(&self) -> bool {
        !self.trigger && !self.migrator && self.volumes.is_none() && self.data_plane.is_none()
    }
}

/// The term's metric families (the leader's own are beside them).
struct Series {
    migrator: MigratorMetrics,
    trigger: trigger::Metrics,
    mode: ApiModeMetrics,
    volumes: VolumeMetrics,
    data_plane: DataPlaneMetrics,
}

impl Series {
    /// Every family registered for the controllers that run.
    fn registered(metrics: &Metrics, wanted: &Wanted) -> (Self, LeaderMetrics) {
        let series = Self {
            migrator: MigratorMetrics::new(),
            trigger: trigger::Metrics::default(),
            mode: ApiModeMetrics::default(),
            volumes: VolumeMetrics::default(),
            data_plane: DataPlaneMetrics::default(),
        };
        let leader = LeaderMetrics::default();
        if let Ok(mut registry) = metrics.registry.lock() {
            if wanted.volumes.is_some() {
                series.volumes.register(&mut registry);
            }
            if wanted.data_plane.is_some() {
                series.data_plane.register(&mut registry);
            }
            leader.register(&mut registry);
            if wanted.migrator {
                series.migrator.register(&mut registry);
            }
            if wanted.trigger {
                series.trigger.register(&mut registry);
            }
            series.mode.register(&mut registry);
        }
        (series, leader)
    }
}

/// One trigger and one migrator per leadership term, as the API mode decides; the trigger's
/// history and the migrations' checkpoints are in our store, so the next term (here or on
/// another replica) goes on where this one stopped. Everything they write to our store
/// carries the term's fence, and they stop when its token is cancelled.
fn term_of(
    options: &ControllerOptions,
    api: &Installed,
    storage: &Arc<dyn Storage>,
    prefix: &str,
    cluster: ClusterClient,
    wanted: Wanted,
    series: Series,
) -> Arc<term::Term> {
    Arc::new(term::Term {
        cluster,
        states: api.states.clone(),
        migrations: api.migrations.clone(),
        storage: storage.clone(),
        prefix: prefix.to_string(),
        run_trigger: wanted.trigger,
        run_migrator: wanted.migrator,
        api_mode: options.api_mode,
        companion_migrator: options.companion_migrator,
        trigger_settings: options.trigger_settings(),
        migrator_settings: options.migrator_settings(),
        trigger_metrics: series.trigger,
        migrator_metrics: series.migrator,
        mode_metrics: series.mode,
        instance: instance_name(),
        volumes: wanted.volumes.map(|store| term::VolumesTerm {
            store,
            settings: volumes::Settings {
                resync: options.volume_resync_interval,
            },
            metrics: series.volumes,
        }),
        data_plane: wanted.data_plane.map(|store| term::DataPlaneTerm {
            store,
            settings: dataplane::Settings {
                resync: options.data_plane_resync_interval,
            },
            metrics: series.data_plane,
        }),
    })
}

/// What a replica does while it leads: run the term, then clear what only the leader knows,
/// so a former leader's stale series never add to (or outvote) the new leader's — the API
/// mode too (an alert reads the mode across replicas).
fn leader_work(
    term: Arc<term::Term>,
    leader: LeaderMetrics,
) -> impl FnMut(Fence) -> BoxFuture<'static, ()> + Send + 'static {
    move |fence: Fence| {
        let held = leader.term();
        let term = term.clone();
        Box::pin(async move {
            let _held = held;
            term.clone().run(fence).await;
            term.mode_metrics.mode.clear();
            term.migrator_metrics.migrations_by_status.clear();
            term.trigger_metrics.unsafe_since.clear();
        })
    }
}

/// The pod's name (or the host's): the holder identity in the lease and the migrator's name.
fn instance_name() -> Option<String> {
    std::env::var("POD_NAME").ok().or_else(hostname)
}

fn election_config(options: &ControllerOptions) -> ElectionConfig {
    ElectionConfig {
        identity: format!(
            "{}_{}",
            instance_name().unwrap_or_else(|| "svm-apiserver".into()),
            uuid::Uuid::new_v4()
        ),
        lease_duration: options.leader_elect_lease_duration,
        renew_deadline: options.leader_elect_renew_deadline,
        retry_period: options.leader_elect_retry_period,
    }
}

/// `--api-mode=owner` on a cluster that serves the group itself refuses to run: `serve`
/// fails with the reason (naming the flag and the docs). An unanswered detection is not a
/// refusal: the term's watch decides once the cluster answers.
async fn refuse_at_start(mode: ApiMode, cluster: &ClusterClient) -> Result<(), StartError> {
    match apimode::detect(cluster).await {
        Ok(serving) => match apimode::decide(mode, &serving) {
            Decision::Refused { reason } => Err(StartError::Refused(reason)),
            decision => {
                tracing::info!(mode = decision.label(), "API mode at start: {decision}");
                Ok(())
            }
        },
        Err(err) => {
            tracing::warn!(error = %err, "could not tell who serves storagemigration.k8s.io yet; the controllers wait for the answer");
            Ok(())
        }
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_concurrency_is_auto_or_a_positive_number() {
        assert_eq!(
            parse_object_concurrency("auto"),
            Ok(migrator::ConcurrencyMode::Adaptive {
                ceiling: migrator::DEFAULT_CEILING
            })
        );
        assert_eq!(
            parse_object_concurrency("16"),
            Ok(migrator::ConcurrencyMode::Fixed(16))
        );
        for bad in ["0", "-1", "", "many", "4.5"] {
            let err = parse_object_concurrency(bad).expect_err(bad);
            assert!(err.contains("neither `auto` nor a number"), "{bad}: {err}");
        }
    }
}
