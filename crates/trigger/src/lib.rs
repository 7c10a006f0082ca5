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
mod watches;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use svm_api::storagestate::StorageStateStrategy;
use svm_cluster::ClusterClient;
use svm_registry::Guarded;
use svm_registry::versions::storage_version_hash;
use svm_storage::Storage;

use apiservers::Instances;
use discovery::{DiscoveredResource, Discovery, DiscoverySnapshot};
use history::{HashHistory, Source};
use metrics::{ResultLabel, TriggerMetrics};
pub use migrations::Migrations;
use plan::{Encoding, Observed, View};
use watches::{Signal, Update};

pub use metrics::TriggerMetrics as Metrics;

/// The trigger's knobs (flags of `serve`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often aggregated discovery is polled (an unchanged cluster answers 304).
    pub discovery_interval: Duration,
    /// How often each StorageState's `lastHeartbeatTime` (and the observer record) is
    /// refreshed while nothing changes.
    pub heartbeat_interval: Duration,
    /// How long the trigger may be away (its last record of what it vouched for) and still
    /// vouch for built-in resources on its return.
    pub vouch_window: Duration,
    /// `(group, resource)` never tracked.
    pub ignored: Vec<(String, String)>,
    /// Groups served by this server (its objects are in its own store, not the cluster's):
    /// never tracked. Upstream's group is ours only in owner mode.
    pub own_groups: Vec<String>,
    /// `(group, resource)` encrypted at rest: a key rotation migrates them. Empty: kube-apiserver's
    /// `/metrics` is never read.
    pub encryption_resources: Vec<(String, String)>,
    /// How often kube-apiserver's `/metrics` is read for its encryption generation.
    pub encryption_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            discovery_interval: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(300),
            vouch_window: Duration::from_secs(3600),
            ignored: parse_resources("events,events.events.k8s.io"),
            own_groups: vec![svm_api::GROUP.into(), svm_api::PROJECT.name.into()],
            encryption_resources: parse_resources("secrets"),
            encryption_interval: Duration::from_secs(10),
        }
    }
}

/// `events,deployments.apps` → `[("", "events"), ("apps", "deployments")]`.
pub fn parse_resources(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('.') {
            Some((resource, group)) => (group.to_string(), resource.to_string()),
            None => (String::new(), s.to_string()),
        })
        .collect()
}

/// A CRD as the trigger needs it.
#[derive(Clone, Debug)]
struct CrdInfo {
    group: String,
    plural: String,
    kind: String,
    storage_version: Option<String>,
    stored_versions: Vec<String>,
    object: CustomResourceDefinition,
}

impl CrdInfo {
    fn of(crd: CustomResourceDefinition) -> Self {
        let storage_version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone());
        let stored_versions = crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default();
        Self {
            group: crd.spec.group.clone(),
            plural: crd.spec.names.plural.clone(),
            kind: crd.spec.names.kind.clone(),
            storage_version,
            stored_versions,
            object: crd,
        }
    }

    fn encoding(&self, version: &str) -> Encoding {
        Encoding {
            hash: storage_version_hash(&self.group, version, &self.kind),
            encoding_version: format!("{}/{version}", self.group),
            apiserver: None,
        }
    }

    fn key(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }

    /// The CRD's storage version is what every apiserver encodes; its storedVersions are what
    /// objects may still be stored as.
    fn observed(&self, storage_version: &str) -> Observed {
        Observed {
            group: self.group.clone(),
            resource: self.plural.clone(),
            view: View::Agreed(self.encoding(storage_version)),
            source: Source::CustomResourceDefinition,
            stored: self
                .stored_versions
                .iter()
                .map(|v| self.encoding(v))
                .collect(),
        }
    }
}

/// One view of the apiservers' encodings: agreed when they all hash the same (then no one
/// apiserver is named, unless there is only one).
fn agreement(mut encodings: Vec<Encoding>) -> View {
    let distinct: BTreeSet<&str> = encodings.iter().map(|e| e.hash.as_str()).collect();
    if distinct.len() != 1 {
        return View::Disagreed(encodings);
    }
    let several = encodings.len() > 1;
    // One distinct hash: there is a first encoding.
    let mut agreed = encodings.swap_remove(0);
    if several {
        agreed.apiserver = None;
    }
    View::Agreed(agreed)
}

/// What the trigger knows of the cluster.
#[derive(Default)]
struct ClusterView {
    crds: BTreeMap<String, CrdInfo>,
    crds_synced: bool,
    /// The next reconcile counts CRDs' storedVersions (first sync, or after a watch gap).
    resync_crds: bool,
    instances: Instances,
    leases_synced: bool,
    /// The lease watch's failure was logged (once per outage).
    lease_failure_logged: bool,
    /// `(group, resource)` → `(apiserver id, encoding group/version)`.
    storage_versions: BTreeMap<(String, String), Vec<(String, String)>>,
    storage_versions_synced: bool,
    look: Option<DiscoverySnapshot>,
    need_look: bool,
    /// When the earliest change not yet reconciled happened in the cluster, as the cluster
    /// stamped it (for the detection-lag metric).
    changed_at: Option<jiff::Timestamp>,
    /// The encryption generation every live apiserver applies, once read and agreed.
    encryption: Option<encryption::Generation>,
}

/// `<group>.<resource>` (`core.<resource>`) → `(group, resource)`.
fn storage_version_resource(name: &str) -> Option<(String, String)> {
    let (group, resource) = name.rsplit_once('.')?;
    let group = if group == "core" { "" } else { group };
    Some((group.to_string(), resource.to_string()))
}

/// The time of an object's newest write, as kube-apiserver stamps it in `managedFields`.
fn last_written(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<jiff::Timestamp> {
    meta.managed_fields
        .as_deref()?
        .iter()
        .filter_map(|f| f.time.as_ref())
        .map(|t| t.0)
        .max()
}

fn version_of(encoding_version: &str) -> &str {
    encoding_version
        .rsplit_once('/')
        .map_or(encoding_version, |(_, v)| v)
}

impl ClusterView {
    /// Remembers that something changed at `at` (the earliest wins until reconciled).
    fn changed(&mut self, at: Option<jiff::Timestamp>) {
        if let Some(at) = at {
            self.changed_at = Some(self.changed_at.map_or(at, |t| t.min(at)));
        }
    }

    fn crd_backed(&self, group: &str, resource: &str) -> Option<&CrdInfo> {
        self.crds
            .values()
            .find(|c| c.group == group && c.plural == resource)
    }

    /// What the cluster shows now, per tracked resource: CRDs from their watch, every other
    /// resource from discovery or, where apiservers publish them, StorageVersions.
    fn observe(&self, settings: &Settings) -> BTreeMap<(String, String), Observed> {
        let mut out: BTreeMap<_, _> = self
            .crds
            .values()
            .filter_map(|crd| Some((crd, crd.storage_version.as_ref()?)))
            .filter(|(crd, _)| !settings.ignored.contains(&crd.key()))
            .map(|(crd, version)| (crd.key(), crd.observed(version)))
            .collect();
        let Some(look) = &self.look else {
            return out;
        };
        for (key, found) in &look.resources {
            let Some(hash) = &found.storage_version_hash else {
                continue;
            };
            if out.contains_key(key) || !self.tracks(settings, key, found) {
                continue;
            }
            let (view, source) = match self.published_encodings(key, found) {
                Some(encodings) => (agreement(encodings), Source::StorageVersionApi),
                None => (self.discovered(hash), Source::Discovery),
            };
            let observed = Observed {
                group: found.group.clone(),
                resource: found.resource.clone(),
                view,
                source,
                stored: Vec::new(),
            };
            out.insert(key.clone(), observed);
        }
        out
    }

    /// Whether a discovered resource is one the trigger keeps a StorageState for: not ours,
    /// not ignored, and migratable (list and patch).
    fn tracks(
        &self,
        settings: &Settings,
        key: &(String, String),
        found: &DiscoveredResource,
    ) -> bool {
        let migratable = ["list", "patch"]
            .iter()
            .all(|verb| found.verbs.iter().any(|v| v == verb));
        migratable && !settings.own_groups.contains(&found.group) && !settings.ignored.contains(key)
    }

    /// The encodings the apiservers publish for a resource (StorageVersion API), once that
    /// watch has listed and only where it says something.
    fn published_encodings(
        &self,
        key: &(String, String),
        found: &DiscoveredResource,
    ) -> Option<Vec<Encoding>> {
        let entries = self
            .storage_versions
            .get(key)
            .filter(|entries| self.storage_versions_synced && !entries.is_empty())?;
        let encodings = entries
            .iter()
            .map(|(apiserver, encoding)| Encoding {
                hash: storage_version_hash(&found.group, version_of(encoding), &found.kind),
                encoding_version: encoding.clone(),
                apiserver: Some(apiserver.clone()),
            })
            .collect();
        Some(encodings)
    }

    /// Discovery's hash alone: it does not say which apiserver, unless there is only one.
    fn discovered(&self, hash: &str) -> View {
        View::Agreed(Encoding {
            hash: hash.to_string(),
            encoding_version: String::new(),
            apiserver: self.instances.sole(),
        })
    }

    /// Whether a resource with a StorageState but no observation is known to be gone (and not
    /// merely unseen: a look that missed a group, a CRD watch not yet listed).
    fn known_gone(&self, group: &str, resource: &str) -> bool {
        let look_complete = self.look.as_ref().is_some_and(|l| l.complete);
        let key = (group.to_string(), resource.to_string());
        let listed = self
            .look
            .as_ref()
            .is_some_and(|l| l.resources.contains_key(&key));
        self.crds_synced && look_complete && !listed && self.crd_backed(group, resource).is_none()
    }

    fn on_crd(&mut self, update: Update<CustomResourceDefinition>) {
        match update {
            Update::Applied(crd) => {
                let name = crd.metadata.name.clone().unwrap_or_default();
                self.changed(last_written(&crd.metadata));
                let info = CrdInfo::of(crd);
                // Two storage moves between passes (A→B→A) leave only A in the latest event;
                // the versions objects were written in are still in status.storedVersions, so
                // the next pass reads them (otherwise only a relist does).
                if self.crds.get(&name).is_none_or(|old| {
                    info.stored_versions
                        .iter()
                        .any(|v| !old.stored_versions.contains(v))
                }) {
                    self.resync_crds = true;
                }
                self.crds.insert(name, info);
            }
            Update::Deleted(crd) => {
                self.crds
                    .remove(crd.metadata.name.as_deref().unwrap_or_default());
                // Its resource leaves discovery too: the next look confirms it is gone.
                self.need_look = true;
            }
            Update::Relisted(all) => {
                self.crds = all
                    .into_iter()
                    .map(|crd| {
                        (
                            crd.metadata.name.clone().unwrap_or_default(),
                            CrdInfo::of(crd),
                        )
                    })
                    .collect();
                self.crds_synced = true;
                self.resync_crds = true;
            }
            Update::Failed(err) => {
                tracing::warn!(error = %err, "the CustomResourceDefinition watch failed; it retries");
            }
        }
    }

    fn on_lease(&mut self, update: Update<Lease>) {
        let identity = |lease: &Lease| {
            (
                lease.metadata.name.clone().unwrap_or_default(),
                lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default(),
            )
        };
        match update {
            Update::Applied(lease) => {
                let (name, holder) = identity(&lease);
                if self.instances.applied(&name, &holder) {
                    // The new instance's first renewal is when it started serving.
                    self.changed(
                        lease
                            .spec
                            .as_ref()
                            .and_then(|s| s.renew_time.as_ref())
                            .map(|t| t.0),
                    );
                    tracing::info!(apiserver = %name, instance = %holder, "a kube-apiserver instance started; looking again");
                    self.need_look = true;
                }
            }
            Update::Deleted(lease) => {
                let (name, _) = identity(&lease);
                tracing::info!(apiserver = %name, "a kube-apiserver instance stopped");
                self.instances.deleted(&name);
            }
            Update::Relisted(all) => {
                let leases: Vec<(String, String)> = all.iter().map(identity).collect();
                if self.instances.relisted(&leases) {
                    self.need_look = true;
                }
                self.leases_synced = true;
                self.lease_failure_logged = false;
            }
            Update::Failed(err) => {
                if !self.lease_failure_logged {
                    tracing::warn!(error = %err, "the apiserver identity lease watch failed: every discovery poll is a full look until it is back");
                    self.lease_failure_logged = true;
                }
                self.leases_synced = false;
            }
        }
    }

    fn on_storage_version(&mut self, update: Update<StorageVersion>) {
        let entries = |sv: &StorageVersion| -> Vec<(String, String)> {
            sv.status
                .as_ref()
                .and_then(|s| s.storage_versions.as_deref())
                .unwrap_or_default()
                .iter()
                .filter(|s| !s.api_server_id.is_empty() && !s.encoding_version.is_empty())
                .map(|s| (s.api_server_id.clone(), s.encoding_version.clone()))
                .collect()
        };
        let key = |sv: &StorageVersion| {
            storage_version_resource(sv.metadata.name.as_deref().unwrap_or_default())
        };
        match update {
            Update::Applied(sv) => {
                self.changed(last_written(&sv.metadata));
                if let Some(key) = key(&sv) {
                    self.storage_versions.insert(key, entries(&sv));
                }
            }
            Update::Deleted(sv) => {
                if let Some(key) = key(&sv) {
                    self.storage_versions.remove(&key);
                }
            }
            Update::Relisted(all) => {
                self.storage_versions = all
                    .iter()
                    .filter_map(|sv| Some((key(sv)?, entries(sv))))
                    .collect();
                self.storage_versions_synced = true;
                self.instances.set_encodings_watched(true);
            }
            Update::Failed(err) => {
                if self.storage_versions_synced {
                    tracing::warn!(error = %err, "the StorageVersion watch failed; it retries");
                }
                self.storage_versions_synced = false;
                self.instances.set_encodings_watched(false);
            }
        }
    }

    /// Whether the last look found the StorageVersion API served.
    fn serves_storage_versions(&self) -> bool {
        self.look.as_ref().is_some_and(|l| l.storage_version_api)
    }

    fn on_signal(&mut self, signal: Signal) {
        match signal {
            Signal::Crd(update) => self.on_crd(*update),
            Signal::Lease(update) => self.on_lease(update),
            Signal::StorageVersion(update) => self.on_storage_version(update),
        }
    }
}

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
            reconciler: reconcile::Reconciler::new(&self),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_lists_and_storage_version_names_parse() {
        assert_eq!(
            parse_resources("events, events.events.k8s.io,,deployments.apps"),
            [
                ("".to_string(), "events".to_string()),
                ("events.k8s.io".into(), "events".into()),
                ("apps".into(), "deployments".into())
            ]
        );
        assert_eq!(
            storage_version_resource("core.configmaps"),
            Some(("".into(), "configmaps".into()))
        );
        assert_eq!(
            storage_version_resource("internal.apiserver.k8s.io.storageversions"),
            Some(("internal.apiserver.k8s.io".into(), "storageversions".into()))
        );
        assert_eq!(version_of("apps/v1"), "v1");
        assert_eq!(version_of("v1"), "v1");
    }
}
