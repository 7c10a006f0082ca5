//! The trigger (docs/design.md, "The trigger and StorageStates"): keeps one StorageState per
//! resource true and creates the migrations that make it safe again, never missing a
//! storage-version change.
//!
//! - **Observe.** Aggregated discovery polled every `--discovery-interval` with
//!   `If-None-Match` (an idle cluster costs two 304s); a watch on CRDs (a storage move is exact
//!   and immediate there); a watch on kube-apiserver identity leases (every restart — the only
//!   time a built-in's storage version can change — makes it look at once); the
//!   StorageVersion API where served (each apiserver's encoding). While the lease watch is not
//!   established, every poll is a full look.
//! - **Record.** Every observed change is appended to the hash history in etcd in the same
//!   transaction as the StorageState update it causes ([`history`]); what the trigger cannot
//!   vouch for (an apiserver instance it never saw, a downtime it cannot account for) is
//!   recorded as `Unknown` ([`apiservers`]).
//! - **Act.** Decisions are pure functions ([`plan`]); [`reconcile`] applies them through the
//!   registry: migrations for the newest entry created, stale ones deleted, persisted hashes
//!   narrowed (and a CRD's `status.storedVersions`) once a migration of the newest entry
//!   succeeds.
//!
//! Which resources are tracked: those discovery lists with a `storageVersionHash` (so not
//! subresources, and not resources that are never stored, such as reviews) that can be listed
//! and patched, outside this server's own group and `--trigger-ignore-resources`.

mod apiservers;
mod discovery;
pub mod encryption;
pub mod history;
mod metrics;
mod migrations;
mod plan;
mod reconcile;
mod settings;
mod view;
mod watches;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use svm_api::storagestate::StorageStateStrategy;
use svm_cluster::ClusterClient;
use svm_registry::Guarded;
use svm_storage::Storage;

use discovery::Discovery;
use history::HashHistory;
use metrics::{ResultLabel, TriggerMetrics};
pub use migrations::Migrations;
use watches::{Signal, Update};

pub use metrics::TriggerMetrics as Metrics;
pub use settings::{Settings, parse_resources};
use view::ClusterView;

/// The trigger of one leadership term.
pub struct Trigger {
    cluster: ClusterClient,
    states: Guarded<StorageStateStrategy>,
    migrations: Migrations,
    history: HashHistory,
    settings: Settings,
    metrics: TriggerMetrics,
}

/// How long the start waits for a watch's first list before going on without it (a
/// forbidden or missing API must not stop the trigger).
const FIRST_LIST_WAIT: Duration = Duration::from_secs(10);

pub use svm_api::names::TRIGGER_FIELD_MANAGER as FIELD_MANAGER;

impl Trigger {
    /// A trigger writing through `states` and `migrations` (under the term's fence, recorded
    /// for [`FIELD_MANAGER`]); `storage` is where it reads its hash history from.
    pub fn new(
        cluster: ClusterClient,
        states: Guarded<StorageStateStrategy>,
        migrations: Migrations,
        storage: Arc<dyn Storage>,
        prefix: &str,
        settings: Settings,
        metrics: TriggerMetrics,
    ) -> Self {
        Self {
            cluster,
            states: states.managed_by(FIELD_MANAGER),
            migrations: migrations.managed_by(FIELD_MANAGER),
            history: HashHistory::new(storage, prefix),
            settings,
            metrics,
        }
    }

    /// Runs until `shutdown` fires: starts (what was recorded, the first lists, the first
    /// look), then keeps every StorageState true.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut inputs = self.open_inputs();
        let mut term = Term {
            known: ClusterView::default(),
            discovery: Discovery::new(self.cluster.clone()),
            reconciler: reconcile::Reconciler::new(
                self.cluster.clone(),
                self.states.clone(),
                self.migrations.clone(),
                self.history.clone(),
                self.settings.clone(),
                self.metrics.clone(),
            ),
            encryption: self.encryption_observer(),
        };
        if self
            .start(&mut inputs, &mut term, &shutdown)
            .await
            .is_some()
        {
            self.keep_states_true(&mut inputs, &mut term, &shutdown)
                .await;
        }
        inputs.stop();
        // A replica that no longer leads vouches for nothing: max() across replicas is the
        // leader's view.
        self.metrics.encryption_observed.set(0);
    }

    /// The reader of kube-apiserver's encryption generation, when resources are encrypted.
    fn encryption_observer(&self) -> Option<encryption::EncryptionObserver> {
        let (group, resource) = self.settings.encryption_resources.first()?;
        Some(encryption::EncryptionObserver::new(
            self.cluster.clone(),
            self.metrics.clone(),
            svm_api::storagestate::StorageState::name_for(group, resource),
        ))
    }

    /// One read of the apiservers' encryption generation. Returns whether it changed (a pass
    /// compares it with each encrypted resource's history).
    async fn poll_encryption(&self, term: &mut Term) -> bool {
        let Some(observer) = term.encryption.as_mut() else {
            return false;
        };
        let live = term
            .known
            .leases_synced
            .then(|| term.known.instances.live_instances());
        let Some(agreed) = observer.poll(live.as_deref()).await else {
            return false;
        };
        if term.known.encryption.as_ref() == Some(&agreed.generation) {
            return false;
        }
        tracing::info!(generation = %agreed.generation.describe(), "every kube-apiserver applies this encryption generation");
        term.known.changed(agreed.changed_at);
        term.known.encryption = Some(agreed.generation);
        true
    }

    /// The watches feeding the trigger, and its own objects' changes.
    fn open_inputs(&self) -> Inputs {
        let (signals_tx, signals) = mpsc::channel::<Signal>(1024);
        let (local_tx, local) = mpsc::channel::<()>(16);
        let tasks = vec![
            watches::watch_crds(self.cluster.kube().clone(), signals_tx.clone()),
            watches::watch_identity_leases(self.cluster.kube().clone(), signals_tx.clone()),
            self.migrations.wake_on_changes(local_tx),
        ];
        Inputs {
            signals_tx,
            signals,
            local,
            tasks,
            storage_versions: None,
        }
    }

    /// What was recorded, the watches' first lists, the first complete look and what it says
    /// of the apiserver instances. `None`: shut down meanwhile.
    async fn start(
        &self,
        inputs: &mut Inputs,
        term: &mut Term,
        shutdown: &CancellationToken,
    ) -> Option<()> {
        let (entries, record) = self.read_records(shutdown).await?;
        let ran_before = !entries.is_empty();
        term.reconciler.set_last_entries(entries);
        wait_for_first_lists(inputs, &mut term.known, shutdown).await?;
        self.first_look(term, shutdown).await?;
        if term.known.serves_storage_versions() {
            inputs.watch_storage_versions(self.cluster.kube());
            wait_for_storage_versions(inputs, &mut term.known, shutdown).await?;
        }
        self.account_for_apiservers(&mut term.known, record, ran_before);
        tracing::info!(
            resources = term.known.observe(&self.settings).len(),
            crds = term.known.crds.len(),
            apiservers = ?term.known.instances.sole(),
            storage_version_api = term.known.storage_versions_synced,
            "trigger started"
        );
        Some(())
    }

    /// Looks until one look succeeds. `None`: shut down meanwhile.
    async fn first_look(&self, term: &mut Term, shutdown: &CancellationToken) -> Option<()> {
        let pause = self.settings.discovery_interval.min(Duration::from_secs(5));
        while !self.look(&mut term.known, &mut term.discovery, true).await {
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        Some(())
    }

    /// Compares the instances seen now with the ones the last term vouched for.
    fn account_for_apiservers(
        &self,
        known: &mut ClusterView,
        record: Option<history::ObserverRecord>,
        ran_before: bool,
    ) {
        let Some(record) = record else {
            if ran_before {
                // A history but no record: the last term never had every instance accounted
                // for (no lease watch, or it stopped first), so its absence cannot be vouched for.
                known.instances.unvouched(
                    "the trigger has no record of the apiserver instances it last vouched for"
                        .into(),
                );
            }
            return;
        };
        // A record from the future (clock skew) counts as no time away.
        let away = record
            .last_vouched
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| {
                Duration::try_from(jiff::Timestamp::now().duration_since(t)).unwrap_or_default()
            });
        known
            .instances
            .compare_with_record(&record, away, self.settings.vouch_window);
    }

    /// The steady state: a pass whenever something changed (a watch, our own objects, a
    /// discovery poll), retried each second while a pass left work unfinished.
    async fn keep_states_true(
        &self,
        inputs: &mut Inputs,
        term: &mut Term,
        shutdown: &CancellationToken,
    ) {
        let mut poll = tokio::time::interval(self.settings.discovery_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        // Conflicts and unfinished work are retried on this tick.
        let mut retry = tokio::time::interval(Duration::from_secs(1));
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // There is no watch for metrics: kube-apiserver's /metrics is read on its own period.
        let mut encryption_poll = tokio::time::interval(self.settings.encryption_interval);
        encryption_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut dirty = true;
        // The last poll that found discovery unchanged: a change a poll sees happened after it.
        let mut last_poll = jiff::Timestamp::now();
        loop {
            if term.known.need_look {
                self.look(&mut term.known, &mut term.discovery, false).await;
                dirty = true;
            }
            if term.known.serves_storage_versions() && inputs.storage_versions.is_none() {
                inputs.watch_storage_versions(self.cluster.kube());
            }
            if dirty {
                dirty = !self.pass(term).await;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                Some(signal) = inputs.signals.recv() => {
                    term.known.on_signal(signal);
                    // Take whatever else is queued before acting on it.
                    while let Ok(signal) = inputs.signals.try_recv() {
                        term.known.on_signal(signal);
                    }
                    dirty = true;
                }
                Some(()) = inputs.local.recv() => {
                    while inputs.local.try_recv().is_ok() {}
                    dirty = true;
                }
                _ = poll.tick() => {
                    self.poll_discovery(term, &mut last_poll).await;
                    dirty = true;
                }
                _ = encryption_poll.tick(), if term.encryption.is_some() => {
                    dirty |= self.poll_encryption(term).await;
                }
                _ = retry.tick(), if dirty => {}
            }
        }
    }

    /// One reconcile pass, in its own span. Returns whether it finished everything.
    async fn pass(&self, term: &mut Term) -> bool {
        let span = tracing::debug_span!("trigger pass", crds = term.known.crds.len());
        term.reconciler
            .reconcile(&mut term.known)
            .instrument(span)
            .await
    }

    /// The periodic discovery poll: a change asks for a look, dated after the last quiet poll.
    async fn poll_discovery(&self, term: &mut Term, last_poll: &mut jiff::Timestamp) {
        match term.discovery.poll().await {
            Ok(changed) => {
                if changed {
                    term.known.changed(Some(*last_poll));
                }
                if changed || !term.known.leases_synced {
                    term.known.need_look = true;
                }
                *last_poll = jiff::Timestamp::now();
            }
            Err(err) => tracing::warn!(error = %err, "discovery poll failed"),
        }
        self.count_discovery(&mut term.discovery);
    }

    /// The hash history and the observer record, retried until storage answers.
    #[allow(clippy::type_complexity)]
    async fn read_records(
        &self,
        shutdown: &CancellationToken,
    ) -> Option<(
        BTreeMap<(String, String), reconcile::LastEntry>,
        Option<history::ObserverRecord>,
    )> {
        loop {
            let read = async {
                let all = self.history.read_all().await?;
                let record = self.history.read_observer().await?;
                Ok::<_, svm_storage::StorageError>((all, record))
            };
            match read.await {
                Ok((all, record)) => {
                    let seqs = all
                        .into_iter()
                        .map(|(key, entries)| (key, reconcile::LastEntry::of(&entries)))
                        .collect();
                    return Some((seqs, record));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "reading the hash history failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return None,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    }

    /// One look at every group's hashes. Returns whether it succeeded.
    async fn look(&self, known: &mut ClusterView, discovery: &mut Discovery, first: bool) -> bool {
        let ticket = known.instances.start_look();
        let result = if first {
            match discovery.poll().await {
                Ok(_) => discovery.look().await,
                Err(err) => Err(err),
            }
        } else {
            discovery.look().await
        };
        self.count_discovery(discovery);
        match result {
            Ok(look) => {
                known.instances.finish_look(&ticket);
                known.look = Some(look);
                known.need_look = false;
                self.metrics.looks.inc();
                true
            }
            Err(err) => {
                tracing::warn!(error = %err, "looking at discovery failed; trying again");
                false
            }
        }
    }

    fn count_discovery(&self, discovery: &mut Discovery) {
        let counts = std::mem::take(&mut discovery.counts);
        for (result, n) in [
            ("not_modified", counts.not_modified),
            ("fetched", counts.fetched),
            ("group_version", counts.group_versions),
        ] {
            if n > 0 {
                self.metrics
                    .discovery_requests
                    .get_or_create(&ResultLabel {
                        result: result.into(),
                    })
                    .inc_by(n);
            }
        }
    }
}

/// What one term of the trigger works on.
struct Term {
    known: ClusterView,
    discovery: Discovery,
    reconciler: reconcile::Reconciler,
    encryption: Option<encryption::EncryptionObserver>,
}

/// The channels a term listens on and the tasks feeding them.
struct Inputs {
    signals_tx: mpsc::Sender<Signal>,
    signals: mpsc::Receiver<Signal>,
    /// Our own migrations changed.
    local: mpsc::Receiver<()>,
    tasks: Vec<JoinHandle<()>>,
    /// Started once discovery shows the StorageVersion API.
    storage_versions: Option<JoinHandle<()>>,
}

impl Inputs {
    fn watch_storage_versions(&mut self, kube: &kube::Client) {
        self.storage_versions = Some(watches::watch_storage_versions(
            kube.clone(),
            self.signals_tx.clone(),
        ));
    }

    fn stop(mut self) {
        self.tasks.extend(self.storage_versions.take());
        stop(self.tasks);
    }
}

/// Waits (at most [`FIRST_LIST_WAIT`]) for the CRD and lease watches' first lists, so the
/// first look sees the cluster as it is. `None`: shut down meanwhile.
async fn wait_for_first_lists(
    inputs: &mut Inputs,
    known: &mut ClusterView,
    shutdown: &CancellationToken,
) -> Option<()> {
    let (mut crds, mut leases) = (false, false);
    let deadline = Instant::now() + FIRST_LIST_WAIT;
    while !(crds && leases) {
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(crds, leases, "going on without every watch's first list");
                break;
            }
            Some(signal) = inputs.signals.recv() => {
                match &signal {
                    Signal::Crd(update) if matches!(**update, Update::Relisted(_) | Update::Failed(_)) => crds = true,
                    Signal::Lease(Update::Relisted(_) | Update::Failed(_)) => leases = true,
                    _ => {}
                }
                known.on_signal(signal);
            }
        }
    }
    Some(())
}

/// Waits (at most [`FIRST_LIST_WAIT`]) for the StorageVersion watch's first list, or its
/// failure. `None`: shut down meanwhile.
async fn wait_for_storage_versions(
    inputs: &mut Inputs,
    known: &mut ClusterView,
    shutdown: &CancellationToken,
) -> Option<()> {
    let deadline = Instant::now() + FIRST_LIST_WAIT;
    while !known.storage_versions_synced {
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep_until(deadline) => break,
            Some(signal) = inputs.signals.recv() => {
                let failed = matches!(signal, Signal::StorageVersion(Update::Failed(_)));
                known.on_signal(signal);
                if failed { break; }
            }
        }
    }
    Some(())
}

fn stop(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        task.abort();
    }
}
