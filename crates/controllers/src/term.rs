//! One leadership term: which controllers run is decided by the API mode
//! ([`svm_apimode`]), watched all term long; when the decision changes (the cluster was
//! upgraded under us, or our APIServices were deleted), the running controllers stop and the
//! ones of the new mode start. Their state is in our store, so they go on where the others
//! stopped.

use std::sync::Arc;

use futures::future::select_all;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use svm_api::dataplane::DataPlaneRolloutStrategy;
use svm_api::migration::MigrationStrategy;
use svm_api::storagestate::StorageStateStrategy;
use svm_api::volumes::VolumeClaimMigrationStrategy;
use svm_api::{GROUP, PROJECT};
use svm_apimode::metrics::ApiModeMetrics;
use svm_apimode::{self as apimode, ApiMode, CompanionMigrator, Decision, GroupServing, carry};
use svm_cluster::{BuiltinMigrations, ClusterClient};
use svm_dataplane::{self as dataplane, DataPlaneMetrics};
use svm_migrator::{self as migrator, Events, Migrator, MigratorMetrics, Source};
use svm_registry::{Fence, Guarded, Store};
use svm_storage::Storage;
use svm_trigger::{self as trigger, Migrations, Trigger};
use svm_volumes::{self as volumes, VolumeMetrics};

/// Everything a term needs, shared by every term of this process.
pub(super) struct Term {
    pub cluster: ClusterClient,
    pub states: Arc<Store<StorageStateStrategy>>,
    pub migrations: Arc<Store<MigrationStrategy>>,
    pub storage: Arc<dyn Storage>,
    pub prefix: String,
    pub run_trigger: bool,
    pub run_migrator: bool,
    pub api_mode: ApiMode,
    pub companion_migrator: CompanionMigrator,
    pub trigger_settings: trigger::Settings,
    pub migrator_settings: migrator::Settings,
    pub trigger_metrics: trigger::Metrics,
    pub migrator_metrics: MigratorMetrics,
    pub mode_metrics: ApiModeMetrics,
    pub instance: Option<String>,
    /// VolumeClaimMigrations and their controller's settings, when the kind is served and
    /// its controller asked for.
    pub volumes: Option<VolumesTerm>,
    /// DataPlaneRollouts and their controller's settings, when the kind is served and its
    /// controller asked for.
    pub data_plane: Option<DataPlaneTerm>,
}

/// What the volume-claim controller needs, each term.
pub(super) struct VolumesTerm {
    pub store: Arc<Store<VolumeClaimMigrationStrategy>>,
    pub settings: volumes::Settings,
    pub metrics: VolumeMetrics,
}

/// What the DataPlaneRollout controller needs, each term.
pub(super) struct DataPlaneTerm {
    pub store: Arc<Store<DataPlaneRolloutStrategy>>,
    pub settings: dataplane::Settings,
    pub metrics: DataPlaneMetrics,
}

/// Waits for one of `tasks` to end (never, when there are none) and removes it.
async fn one_ends(tasks: &mut Vec<JoinHandle<()>>) {
    if tasks.is_empty() {
        return std::future::pending().await;
    }
    let (_, index, _) = select_all(tasks.iter_mut()).await;
    tasks.remove(index);
}

async fn stop(work: &CancellationToken, tasks: Vec<JoinHandle<()>>) {
    work.cancel();
    for task in tasks {
        let _ = task.await;
    }
}

impl Term {
    /// Runs until the term's token is cancelled (leadership lost, or shutdown). Everything the
    /// controllers write to our store carries `fence`.
    pub(crate) async fn run(self: Arc<Self>, fence: Fence) {
        let leading = fence.token().clone();
        let (tx, mut serving) = watch::channel::<Option<GroupServing>>(None);
        let watcher = apimode::watch(self.cluster.clone(), tx);
        let mut last: Option<Decision> = None;
        'decide: loop {
            let current = loop {
                if let Some(current) = serving.borrow_and_update().clone() {
                    break current;
                }
                tokio::select! {
                    _ = leading.cancelled() => break 'decide,
                    changed = serving.changed() => if changed.is_err() { break 'decide },
                }
            };
            let decision = apimode::decide(self.api_mode, &current);
            self.announce(&decision, &current, last.as_ref());
            last = Some(decision.clone());
            let work = leading.child_token();
            let mut tasks = self.start(&decision, &fence, &work);
            loop {
                tokio::select! {
                    _ = leading.cancelled() => {
                        stop(&work, tasks).await;
                        break 'decide;
                    }
                    changed = serving.changed() => {
                        let next = serving.borrow().clone();
                        let Some(next) = next.filter(|_| changed.is_ok()) else {
                            stop(&work, tasks).await;
                            break 'decide;
                        };
                        if apimode::decide(self.api_mode, &next) != decision {
                            stop(&work, tasks).await;
                            continue 'decide;
                        }
                        for warning in apimode::warnings(&decision, &next) {
                            tracing::warn!("{warning}");
                        }
                    }
                    _ = one_ends(&mut tasks) => {
                        // Only a bug ends a controller by itself: end the term, as ever.
                        tracing::error!("a controller ended by itself; ending the leadership term");
                        stop(&work, tasks).await;
                        leading.cancel();
                        break 'decide;
                    }
                }
            }
        }
        watcher.abort();
    }

    fn announce(&self, decision: &Decision, serving: &GroupServing, last: Option<&Decision>) {
        self.mode_metrics.set(decision);
        let changed = last.is_some_and(|last| last != decision);
        match decision {
            Decision::Owner | Decision::Companion { .. } if changed => {
                tracing::warn!(mode = decision.label(), "the API mode changed: {decision}")
            }
            Decision::Owner | Decision::Companion { .. } => {
                tracing::info!(mode = decision.label(), "{decision}")
            }
            Decision::Waiting { .. } | Decision::Refused { .. } => {
                tracing::error!(mode = decision.label(), "no controller runs: {decision}")
            }
        }
        for warning in apimode::warnings(decision, serving) {
            tracing::warn!("{warning}");
        }
    }

    /// Starts what `decision` runs, under `work`.
    fn start(
        &self,
        decision: &Decision,
        fence: &Fence,
        work: &CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let mut tasks = match decision {
            Decision::Owner => self.start_owner(fence, work),
            Decision::Companion { version } => self.start_companion(version, fence, work),
            Decision::Waiting { .. } | Decision::Refused { .. } => return Vec::new(),
        };
        // Volume claims and data planes are not storagemigration.k8s.io's: whoever serves
        // that group, the leader resizes claims and rolls data planes out.
        tasks.extend(self.start_volumes(fence, work));
        tasks.extend(self.start_data_plane(fence, work));
        tasks
    }

    /// We serve the group: the trigger and the migrator work on our migrations.
    fn start_owner(&self, fence: &Fence, work: &CancellationToken) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        let migrations = Guarded::new(self.migrations.clone(), fence.clone());
        let mut settings = self.trigger_settings.clone();
        settings.own_groups = vec![GROUP.into(), PROJECT.name.into()];
        if self.run_trigger {
            let trigger = self.new_trigger(Migrations::Ours(migrations.clone()), settings, fence);
            tasks.push(tokio::spawn(trigger.run(work.clone())));
        }
        if self.run_migrator {
            tasks.push(self.migrator(migrations.into(), work));
        }
        tasks
    }

    /// The cluster serves the group: ours are carried over to it, then the trigger creates
    /// the cluster's migrations, and our migrator runs them only if asked to.
    fn start_companion(
        &self,
        version: &str,
        fence: &Fence,
        work: &CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        let builtin = BuiltinMigrations::new(self.cluster.clone(), version);
        let carry = tokio::spawn(carry_over(
            Guarded::new(self.migrations.clone(), fence.clone()),
            builtin.clone(),
            fence.clone(),
            Events::new(self.cluster.kube().clone(), self.instance.clone()),
            work.clone(),
        ));
        if self.run_migrator {
            tasks.extend(self.companion_migrator(&builtin, fence, work));
        }
        if self.run_trigger {
            // The cluster's group is not ours here: its resources (storageversionmigrations)
            // are tracked like any built-in's.
            let mut settings = self.trigger_settings.clone();
            settings.own_groups = vec![PROJECT.name.into()];
            let cluster = Migrations::Cluster {
                builtin,
                fence: fence.clone(),
            };
            let trigger = self.new_trigger(cluster, settings, fence);
            let leading = work.clone();
            tasks.push(tokio::spawn(async move {
                // The trigger starts once what it may own in our store is settled.
                let _ = carry.await;
                trigger.run(leading).await;
            }));
        }
        tasks
    }

    /// Our migrator in companion mode: idle when kube-controller-manager runs the cluster's
    /// migrations, else running them.
    fn companion_migrator(
        &self,
        builtin: &BuiltinMigrations,
        fence: &Fence,
        work: &CancellationToken,
    ) -> Option<JoinHandle<()>> {
        match self.companion_migrator {
            CompanionMigrator::KubeControllerManager => {
                tracing::info!(
                    "companion mode: kube-controller-manager runs the migrations \
                     (--companion-migrator=kube-controller-manager); this server's \
                     migrator stays idle"
                );
                None
            }
            CompanionMigrator::SvmApiserver => {
                tracing::info!(
                    "companion mode: this server's migrator runs the cluster's \
                     migrations (--companion-migrator=svm-apiserver); it leaves any \
                     that kube-controller-manager writes to it"
                );
                let source = Source::Cluster {
                    builtin: builtin.clone(),
                    fence: fence.clone(),
                };
                Some(self.migrator(source, work))
            }
        }
    }

    /// The volume-claim controller, where the kind is served and wanted.
    fn start_volumes(&self, fence: &Fence, work: &CancellationToken) -> Option<JoinHandle<()>> {
        let volumes = self.volumes.as_ref()?;
        let controller = volumes::Controller::new(
            Guarded::new(volumes.store.clone(), fence.clone()),
            self.cluster.clone(),
            volumes.metrics.clone(),
            volumes.settings.clone(),
            self.instance.clone(),
        );
        tracing::info!(resync = ?volumes.settings.resync, "volume-claim controller started");
        Some(tokio::spawn(controller.run(work.clone())))
    }

    /// The DataPlaneRollout controller, where the kind is served and wanted.
    fn start_data_plane(&self, fence: &Fence, work: &CancellationToken) -> Option<JoinHandle<()>> {
        let data_plane = self.data_plane.as_ref()?;
        let controller = dataplane::Controller::new(
            Guarded::new(data_plane.store.clone(), fence.clone()),
            self.cluster.clone(),
            data_plane.metrics.clone(),
            data_plane.settings.clone(),
            self.instance.clone(),
        );
        tracing::info!(resync = ?data_plane.settings.resync, "data-plane rollout controller started");
        Some(tokio::spawn(controller.run(work.clone())))
    }

    fn new_trigger(
        &self,
        migrations: Migrations,
        settings: trigger::Settings,
        fence: &Fence,
    ) -> Trigger {
        tracing::info!(
            discovery_interval = ?settings.discovery_interval,
            "trigger starting"
        );
        Trigger::new(
            self.cluster.clone(),
            Guarded::new(self.states.clone(), fence.clone()),
            migrations,
            self.storage.clone(),
            &self.prefix,
            settings,
            self.trigger_metrics.clone(),
        )
    }

    fn migrator(&self, source: Source, work: &CancellationToken) -> JoinHandle<()> {
        let settings = &self.migrator_settings;
        let events = Events::new(self.cluster.kube().clone(), self.instance.clone());
        let migrator = Migrator::new(
            self.cluster.clone(),
            source,
            settings.clone(),
            self.migrator_metrics.clone(),
            Some(events),
        );
        tracing::info!(
            workers = settings.workers,
            qps = settings.qps,
            burst = settings.burst,
            chunk_size = settings.chunk_size,
            "migrator started"
        );
        tokio::spawn(migrator.run(work.clone()))
    }
}

/// [`carry::carry_over`], retried until it succeeds or the term ends (the trigger waits for
/// it).
async fn carry_over(
    ours: Guarded<MigrationStrategy>,
    builtin: BuiltinMigrations,
    fence: Fence,
    events: Events,
    work: CancellationToken,
) {
    while !work.is_cancelled() {
        match carry::carry_over(&ours, &builtin, &fence, Some(&events)).await {
            Ok(done) => {
                if !done.conflicts.is_empty() {
                    tracing::warn!(
                        conflicts = ?done.conflicts,
                        "companion mode: the cluster's API has migrations of these names for \
                         other resources; ours stay in this server's store, marked \
                         CarriedOver=False"
                    );
                }
                if !done.carried.is_empty() || !done.dropped.is_empty() {
                    tracing::warn!(
                        carried = ?done.carried,
                        dropped = ?done.dropped,
                        "companion mode: unfinished migrations of this server's store moved to \
                         the cluster's API (the trigger's own are created there anew)"
                    );
                }
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, "moving unfinished migrations to the cluster's API failed; retrying");
                tokio::select! {
                    _ = work.cancelled() => {}
                    _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
                }
            }
        }
    }
}
