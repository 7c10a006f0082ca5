//! Applying the trigger's plans through the registry (so validation, resourceVersions and
//! watch events stay one code path): StorageStates with their history entries in one
//! transaction, the trigger's migrations, and a CRD's `status.storedVersions`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

use svm_api::migration::{
    GroupVersionResource, MigrationSpec, ON_OBJECT_FAILURE_ANNOTATION, ON_OBJECT_FAILURE_VALUES,
    StorageVersionMigration,
};
use svm_api::storagestate::{
    GroupResource, StorageState, StorageStateSpec, StorageStateStatus, StorageStateStrategy,
    UNKNOWN_HASH,
};
use svm_cluster::ClusterClient;
use svm_registry::rest::Preconditions;
use svm_registry::{ApiError, Guarded};

use super::Migrations;
use super::encryption::Generation;
use super::history::{
    EncryptionKind, EncryptionRecord, HashHistory, HistoryEntry, ObserverRecord, Source,
};
use super::metrics::{SourceLabel, StorageStateLabel, TriggerMetrics};
use super::plan::{
    GENERATION_ANNOTATION, HASH_ANNOTATION, HISTORY_SEQ_ANNOTATION, LEGACY_ROTATION_LABEL,
    MANAGED_BY, MANAGED_BY_LABEL, Observed, OwnedMigration, REASON_ANNOTATION, ROTATION_LABEL,
    StatePlan, applied_entry, migration_name, plan_encryption, plan_migrations, plan_state,
};
use super::settings::Settings;
use super::view::{ClusterView, CrdInfo};

/// What the reconciler needs of a resource's history.
#[derive(Clone, Debug, Default)]
pub(super) struct LastEntry {
    /// The newest entry's sequence number (the next is appended after it).
    pub seq: u64,
    /// When it was recorded (Unix seconds).
    pub time: Option<i64>,
    /// The newest entry that calls for a migration (the trigger's migrations are named for it).
    pub migration_seq: u64,
    /// That entry: its reason goes on the migration.
    pub cause: Option<HistoryEntry>,
    /// The last encryption generation recorded.
    pub generation: Option<Generation>,
    /// A key rotation recorded and not yet applied.
    pub rotation: Option<EncryptionRecord>,
}

impl LastEntry {
    /// From a resource's entries, in append order.
    pub(super) fn of(entries: &[HistoryEntry]) -> Self {
        let mut last = Self::default();
        for entry in entries {
            last.add(entry);
        }
        last
    }

    fn add(&mut self, entry: &HistoryEntry) {
        self.seq = entry.seq;
        self.time = entry
            .time
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| t.as_second());
        if entry.calls_for_migration() {
            self.migration_seq = entry.seq;
            self.cause = Some(entry.clone());
        }
        if let Some(record) = &entry.encryption {
            self.generation = Some(record.generation.clone());
            match record.kind {
                EncryptionKind::Rotation => self.rotation = Some(record.clone()),
                EncryptionKind::Applied => self.rotation = None,
                EncryptionKind::Baseline => {}
            }
        }
    }
}

pub(super) struct Reconciler {
    cluster: ClusterClient,
    states: Guarded<StorageStateStrategy>,
    migrations: Migrations,
    history: HashHistory,
    settings: Settings,
    metrics: TriggerMetrics,
    /// What each resource's history says (its last sequence number, encryption generation).
    last: BTreeMap<(String, String), LastEntry>,
    /// When the last history entry of each resource was recorded (Unix seconds).
    last_change: BTreeMap<(String, String), i64>,
    /// StorageStates not safe, and since when (Unix seconds), as published.
    unsafe_since: BTreeMap<String, i64>,
    /// The earliest unreconciled change in the cluster, during a pass.
    pending_change: Option<jiff::Timestamp>,
    /// `Unknown` entries owed to built-in resources (reasons), until written.
    owed_unknown: BTreeMap<(String, String), Vec<String>>,
    /// When the observer record was last written, and what it said of the instances.
    last_record: Option<(Instant, ObserverRecord)>,
}

/// A trigger migration's metadata: its label, the history entry it belongs to and why, and for
/// a key rotation a label and the generation (so `kubectl get svm -l
/// storage.svm-apiserver.io/encryption-rotation` lists them). The rotation label's old
/// spelling too, until the old names are dropped: selectors on it (scripts, alerts) keep
/// listing the new rotations while their owners move to the new name (`svm_api::names`).
fn migration_meta(name: &str, hash: &str, last: &LastEntry) -> ObjectMeta {
    let mut labels = BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())]);
    let mut annotations = BTreeMap::from([
        (
            HISTORY_SEQ_ANNOTATION.to_string(),
            last.migration_seq.to_string(),
        ),
        (HASH_ANNOTATION.to_string(), hash.to_string()),
    ]);
    if let Some(cause) = &last.cause {
        annotations.insert(REASON_ANNOTATION.to_string(), cause.reason.clone());
    }
    if let Some(rotation) = &last.rotation {
        labels.insert(ROTATION_LABEL.to_string(), "true".to_string());
        labels.insert(LEGACY_ROTATION_LABEL.to_string(), "true".to_string());
        annotations.insert(
            GENERATION_ANNOTATION.to_string(),
            serde_json::to_string(&rotation.generation).unwrap_or_default(),
        );
    }
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels),
        annotations: Some(annotations),
        ..Default::default()
    }
}

/// The refused-object policy for the trigger's migrations of a resource: the StorageState's
/// [`ON_OBJECT_FAILURE_ANNOTATION`] (or its old spelling, still read), copied onto each
/// migration it creates under the new name (a user annotates the StorageState once; the
/// migrations come and go). A value the migration would refuse is ignored (said in the log):
/// the default, `Fail`, holds.
fn failure_policy(state: &StorageState) -> Option<&str> {
    let value = svm_api::names::annotation(&state.metadata, ON_OBJECT_FAILURE_ANNOTATION)?;
    if ON_OBJECT_FAILURE_VALUES.contains(&value) {
        Some(value)
    } else {
        tracing::warn!(state = ?state.metadata.name, %value, "unknown {ON_OBJECT_FAILURE_ANNOTATION}; the default (Fail) applies");
        None
    }
}

fn key_of(observed: &Observed) -> (String, String) {
    (observed.group.clone(), observed.resource.clone())
}

fn heartbeat_due(state: &StorageState, interval: Duration) -> bool {
    let Some(last) = &state.status.last_heartbeat_time else {
        return true;
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    now.duration_since(last.0)
        .try_into()
        .map_or(true, |elapsed: Duration| elapsed >= interval)
}

fn safe(status: &StorageStateStatus) -> bool {
    status.current_storage_version_hash != UNKNOWN_HASH
        && !status.current_storage_version_hash.is_empty()
        && status.persisted_storage_version_hashes == [status.current_storage_version_hash.clone()]
}

impl Reconciler {
    /// A reconciler writing through `states` and `migrations`, recording in `history`.
    pub(super) fn new(
        cluster: ClusterClient,
        states: Guarded<StorageStateStrategy>,
        migrations: Migrations,
        history: HashHistory,
        settings: Settings,
        metrics: TriggerMetrics,
    ) -> Self {
        Self {
            cluster,
            states,
            migrations,
            history,
            settings,
            metrics,
            last: BTreeMap::new(),
            last_change: BTreeMap::new(),
            unsafe_since: BTreeMap::new(),
            pending_change: None,
            owed_unknown: BTreeMap::new(),
            last_record: None,
        }
    }

    pub(super) fn set_last_entries(&mut self, last: BTreeMap<(String, String), LastEntry>) {
        self.last_change = last
            .iter()
            .filter_map(|(key, e)| Some((key.clone(), e.time?)))
            .collect();
        self.last = last;
    }

    /// Publishes which StorageStates are unsafe and since when: from the history entry that
    /// made it unsafe when this term saw it happen, else (a StorageState already unsafe when
    /// the term began) from the resource's newest entry, a lower bound.
    fn publish_safety(&mut self, key: &(String, String), name: &str, status: &StorageStateStatus) {
        let label = StorageStateLabel {
            storagestate: name.to_string(),
        };
        if safe(status) {
            if self.unsafe_since.remove(name).is_some() {
                self.metrics.unsafe_since.remove(&label);
            }
            return;
        }
        let since = *self
            .unsafe_since
            .entry(name.to_string())
            .or_insert_with(|| {
                self.last_change
                    .get(key)
                    .copied()
                    .unwrap_or_else(|| jiff::Timestamp::now().as_second())
            });
        self.metrics.unsafe_since.get_or_create(&label).set(since);
    }

    /// The oldest heartbeat among the StorageStates (now when there are none).
    fn publish_oldest_heartbeat(&self, states: &[StorageState]) {
        let oldest = states
            .iter()
            .filter_map(|s| s.status.last_heartbeat_time.as_ref())
            .map(|t| t.0.as_second())
            .min()
            .unwrap_or_else(|| jiff::Timestamp::now().as_second());
        self.metrics.oldest_heartbeat.set(oldest);
    }

    /// One pass over every resource. Returns whether everything was done (otherwise the
    /// caller comes back soon: a conflict, a storage hiccup).
    pub(super) async fn reconcile(&mut self, known: &mut ClusterView) -> bool {
        let observed = known.observe(&self.settings);
        self.pending_change = known.changed_at;
        if known.look.is_some() {
            self.owe_unknown(known, &observed);
        }
        let (states, migrations) = match (
            self.states.list_all().await,
            self.migrations.list_all().await,
        ) {
            (Ok((states, _)), Ok(migrations)) => (states, migrations),
            (Err(err), _) | (_, Err(err)) => {
                tracing::warn!(error = %err, "reading StorageStates and migrations failed");
                return false;
            }
        };
        self.publish_oldest_heartbeat(&states);
        let tracked_done = self
            .reconcile_tracked(known, &observed, &states, &migrations)
            .await;
        let gone_done = self
            .forget_gone(known, &observed, &states, &migrations)
            .await;
        self.drop_untracked_metrics(&observed);
        let done = tracked_done && gone_done;
        if done {
            known.resync_crds = false;
            known.changed_at = None;
        }
        self.metrics.resources.set(observed.len() as i64);
        self.maybe_write_record(known).await;
        done
    }

    /// The apiserver instances the trigger cannot vouch for owe an `Unknown` entry to every
    /// built-in resource (a CRD's storage is known from the CRD itself).
    fn owe_unknown(
        &mut self,
        known: &mut ClusterView,
        observed: &BTreeMap<(String, String), Observed>,
    ) {
        let reasons = known.instances.take_unvouched();
        if reasons.is_empty() {
            return;
        }
        tracing::warn!(?reasons, "recording Unknown for every built-in resource");
        for (key, o) in observed {
            if o.source != Source::CustomResourceDefinition {
                self.owed_unknown
                    .entry(key.clone())
                    .or_default()
                    .extend(reasons.iter().cloned());
            }
        }
    }

    /// Every observed resource reconciled; whether all were done.
    async fn reconcile_tracked(
        &mut self,
        known: &ClusterView,
        observed: &BTreeMap<(String, String), Observed>,
        states: &[StorageState],
        migrations: &[StorageVersionMigration],
    ) -> bool {
        let by_name: BTreeMap<String, &StorageState> = states
            .iter()
            .map(|s| (s.metadata.name.clone().unwrap_or_default(), s))
            .collect();
        let mut done = true;
        let mut safe_count = 0;
        for (key, observed) in observed {
            let name = StorageState::name_for(&observed.group, &observed.resource);
            let crd = known
                .crd_backed(&observed.group, &observed.resource)
                .cloned();
            let state = by_name.get(&name).copied();
            let resync = known.resync_crds;
            let generation = known
                .encryption
                .as_ref()
                .filter(|_| self.settings.encryption_resources.contains(key));
            match self
                .reconcile_one(
                    observed,
                    state,
                    migrations,
                    crd.as_ref(),
                    resync,
                    generation,
                )
                .await
            {
                Ok(status) => {
                    safe_count += i64::from(safe(&status));
                    self.publish_safety(key, &name, &status);
                }
                Err(err) => {
                    tracing::info!(resource = %name, error = %err, "reconcile deferred");
                    done = false;
                }
            }
        }
        self.metrics.safe_resources.set(safe_count);
        done
    }

    /// StorageStates of resources known to be gone are removed; whether all were.
    async fn forget_gone(
        &mut self,
        known: &ClusterView,
        observed: &BTreeMap<(String, String), Observed>,
        states: &[StorageState],
        migrations: &[StorageVersionMigration],
    ) -> bool {
        let mut done = true;
        for state in states {
            let resource = &state.spec.resource;
            let key = (resource.group.clone(), resource.resource.clone());
            if !observed.contains_key(&key)
                && known.known_gone(&key.0, &key.1)
                && let Err(err) = self.forget(state, migrations).await
            {
                tracing::info!(error = %err, "removing a StorageState deferred");
                done = false;
            }
        }
        done
    }

    /// The unsafe-since gauge of a resource no longer tracked goes away with it.
    fn drop_untracked_metrics(&mut self, observed: &BTreeMap<(String, String), Observed>) {
        let tracked: Vec<String> = observed
            .values()
            .map(|o| StorageState::name_for(&o.group, &o.resource))
            .collect();
        let untracked: Vec<String> = self
            .unsafe_since
            .keys()
            .filter(|name| !tracked.contains(name))
            .cloned()
            .collect();
        for name in untracked {
            self.unsafe_since.remove(&name);
            self.metrics
                .unsafe_since
                .remove(&StorageStateLabel { storagestate: name });
        }
    }

    /// Plans and applies one resource: its StorageState (with the history entries the change
    /// makes), then its migrations. Returns the status as written.
    async fn reconcile_one(
        &mut self,
        observed: &Observed,
        state: Option<&StorageState>,
        migrations: &[StorageVersionMigration],
        crd: Option<&CrdInfo>,
        resync_crds: bool,
        generation: Option<&Generation>,
    ) -> Result<StorageStateStatus, ApiError> {
        let key = key_of(observed);
        let owed = self.owed_reasons(&key);
        let mut plan = plan_state(
            state,
            observed,
            owed.as_deref(),
            resync_crds && crd.is_some(),
        );
        if let Some(now) = generation {
            let last = self.last.get(&key).and_then(|l| l.generation.as_ref());
            plan.entries
                .extend(plan_encryption(last, now, &plan.current));
        }
        let stored = self.write_state(observed, state, &plan).await?;
        self.apply_migration_plan(observed, stored, migrations, crd)
            .await
    }

    /// Why this resource's hash is owed as unknown, each reason once.
    fn owed_reasons(&self, key: &(String, String)) -> Option<String> {
        self.owed_unknown.get(key).map(|reasons| {
            let mut unique: Vec<&str> = Vec::new();
            for reason in reasons {
                if !unique.contains(&reason.as_str()) {
                    unique.push(reason);
                }
            }
            unique.join("; ")
        })
    }

    /// Writes the planned StorageState status (creating the object first if needed) and its
    /// history entries in one transaction, when the plan changes it or a heartbeat is due.
    async fn write_state(
        &mut self,
        observed: &Observed,
        state: Option<&StorageState>,
        plan: &StatePlan,
    ) -> Result<StorageState, ApiError> {
        let key = key_of(observed);
        let name = StorageState::name_for(&observed.group, &observed.resource);
        let last_seq = self.last.get(&key).map_or(0, |l| l.seq);
        let mut status = StorageStateStatus {
            persisted_storage_version_hashes: plan.persisted.clone(),
            current_storage_version_hash: plan.current.clone(),
            last_heartbeat_time: state.and_then(|s| s.status.last_heartbeat_time.clone()),
        };
        let due = state.is_none_or(|s| heartbeat_due(s, self.settings.heartbeat_interval));
        let stored = match state {
            Some(s) => s.clone(),
            None => self.create_state(&name, observed).await?,
        };
        if !(plan.changes(state) || due || stored.status != status) {
            return Ok(stored);
        }
        if due || plan.changes(state) {
            status.last_heartbeat_time = Some(svm_registry::now_time());
        }
        let (records, entries) =
            self.history
                .append(&observed.group, &observed.resource, last_seq, &plan.entries);
        let mut next = stored;
        next.status = status;
        let stored = self.states.update_status_with(next, &records).await?;
        if !entries.is_empty() {
            self.entries_recorded(&name, &entries);
            self.last_change
                .insert(key.clone(), jiff::Timestamp::now().as_second());
            let last = self.last.entry(key.clone()).or_default();
            for entry in &entries {
                last.add(entry);
            }
        }
        self.owed_unknown.remove(&key);
        Ok(stored)
    }

    /// Logs and counts history entries just written, with the detection lag of what the
    /// cluster changed (an Unvouched entry marks what the trigger could not see: no lag).
    fn entries_recorded(&self, name: &str, entries: &[HistoryEntry]) {
        let now = jiff::Timestamp::now();
        for entry in entries {
            tracing::info!(resource = %name, hash = %entry.hash, source = ?entry.source, reason = %entry.reason, "storage-version hash recorded");
            let source = SourceLabel {
                source: format!("{:?}", entry.source),
            };
            self.metrics.history_entries.get_or_create(&source).inc();
            if let Some(changed) = self.pending_change
                && entry.source != Source::Unvouched
            {
                let lag = now.duration_since(changed).as_secs_f64().max(0.0);
                self.metrics
                    .detection_lag
                    .get_or_create(&source)
                    .observe(lag);
            }
        }
    }

    /// The resource's migrations: stale ones deleted, the one it needs created, and once every
    /// object is in the current storage version the StorageState (and a CRD's storedVersions)
    /// narrowed to it.
    async fn apply_migration_plan(
        &mut self,
        observed: &Observed,
        mut stored: StorageState,
        migrations: &[StorageVersionMigration],
        crd: Option<&CrdInfo>,
    ) -> Result<StorageStateStatus, ApiError> {
        let key = key_of(observed);
        let name = StorageState::name_for(&observed.group, &observed.resource);
        let last = self.last.get(&key).cloned().unwrap_or_default();
        let owned: Vec<OwnedMigration> = migrations
            .iter()
            .filter_map(|m| OwnedMigration::of(m, &observed.group, &observed.resource))
            .collect();
        let current = stored.status.current_storage_version_hash.clone();
        let mplan = plan_migrations(
            &name,
            &current,
            &stored.status.persisted_storage_version_hashes,
            last.migration_seq,
            &owned,
            last.rotation.is_some(),
        );
        for stale in owned.iter().filter(|m| mplan.delete.contains(&m.name)) {
            self.delete_migration(stale).await?;
        }
        if let Some(migration) = &mplan.create {
            let policy = failure_policy(&stored);
            self.create_migration(migration, observed, &current, &last, policy)
                .await?;
        }
        if mplan.narrow {
            if let Some(crd) = crd
                && !self.narrow_stored_versions(crd, &current).await
            {
                return Err(ApiError::Internal(format!(
                    "narrowing {}'s storedVersions: retrying",
                    crd.object.metadata.name.as_deref().unwrap_or_default()
                )));
            }
            stored = self.narrow(observed, stored, &current, &last).await?;
            tracing::info!(resource = %name, hash = %current, "every stored object is in the current storage version");
        }
        if let Some(crd) = crd
            && safe(&stored.status)
            && crd.stored_versions.len() > 1
        {
            // Safe already (e.g. after a restart): the CRD's record can narrow too.
            self.narrow_stored_versions(crd, &current).await;
        }
        Ok(stored.status)
    }

    /// The migration of the newest entry succeeded: persisted narrows to the current hash, and
    /// an owed rotation is recorded as applied in the same transaction.
    async fn narrow(
        &mut self,
        observed: &Observed,
        stored: StorageState,
        current: &str,
        last: &LastEntry,
    ) -> Result<StorageState, ApiError> {
        let key = key_of(observed);
        let name = StorageState::name_for(&observed.group, &observed.resource);
        let applied: Vec<_> = last
            .rotation
            .iter()
            .map(|r| applied_entry(r, &migration_name(&name, last.migration_seq), current))
            .collect();
        let (records, entries) =
            self.history
                .append(&observed.group, &observed.resource, last.seq, &applied);
        let mut next = stored;
        next.status.persisted_storage_version_hashes = vec![current.to_string()];
        next.status.last_heartbeat_time = Some(svm_registry::now_time());
        let stored = self.states.update_status_with(next, &records).await?;
        if !entries.is_empty() {
            self.entries_recorded(&name, &entries);
            let last = self.last.entry(key).or_default();
            for entry in &entries {
                last.add(entry);
            }
        }
        Ok(stored)
    }

    /// A new StorageState: created with persisted `["Unknown"]` (the strategy's default);
    /// the first observation is written next, with its history entry.
    async fn create_state(
        &self,
        name: &str,
        observed: &Observed,
    ) -> Result<StorageState, ApiError> {
        let state = StorageState {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: StorageStateSpec {
                resource: GroupResource {
                    group: observed.group.clone(),
                    resource: observed.resource.clone(),
                },
            },
            status: StorageStateStatus::default(),
        };
        match self.states.create(state).await {
            Ok(created) => Ok(created),
            Err(ApiError::AlreadyExists { .. }) => self
                .states
                .get(name)
                .await?
                .ok_or_else(|| ApiError::Internal(format!("StorageState {name} vanished"))),
            Err(err) => Err(err),
        }
    }

    async fn create_migration(
        &self,
        name: &str,
        observed: &Observed,
        hash: &str,
        last: &LastEntry,
        policy: Option<&str>,
    ) -> Result<(), ApiError> {
        let mut metadata = migration_meta(name, hash, last);
        if let Some(policy) = policy {
            metadata
                .annotations
                .get_or_insert_default()
                .insert(ON_OBJECT_FAILURE_ANNOTATION.to_string(), policy.to_string());
        }
        let migration = StorageVersionMigration {
            metadata,
            spec: MigrationSpec {
                resource: GroupVersionResource {
                    group: observed.group.clone(),
                    version: String::new(),
                    resource: observed.resource.clone(),
                },
                continue_token: String::new(),
            },
            status: Default::default(),
        };
        match self.migrations.create(migration).await {
            Ok(_) => {
                let rotation = last.rotation.is_some();
                tracing::info!(migration = %name, %hash, rotation, "migration created");
                self.metrics.migrations_created.inc();
                Ok(())
            }
            // Another leader's term (or an earlier pass) created it: the same migration.
            Err(ApiError::AlreadyExists { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Deletes the stale migration as listed: a migration of the same name made again since
    /// (another uid) is not it, and is left alone.
    async fn delete_migration(&self, stale: &OwnedMigration) -> Result<(), ApiError> {
        let name = &stale.name;
        let preconditions = Preconditions {
            uid: Some(stale.uid.clone()).filter(|u| !u.is_empty()),
            ..Default::default()
        };
        match self.migrations.delete(name, &preconditions).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => {
                tracing::info!(migration = %name, "stale migration deleted");
                Ok(())
            }
            Err(ApiError::Conflict { message, .. }) => {
                tracing::info!(migration = %name, %message, "not deleted: a migration of that name was made again since it was listed");
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// A StorageState whose resource is no longer served: it and the trigger's migrations of
    /// it go (the history stays).
    async fn forget(
        &mut self,
        state: &StorageState,
        migrations: &[StorageVersionMigration],
    ) -> Result<(), ApiError> {
        let resource = &state.spec.resource;
        for m in migrations
            .iter()
            .filter_map(|m| OwnedMigration::of(m, &resource.group, &resource.resource))
        {
            self.delete_migration(&m).await?;
        }
        let name = state.metadata.name.clone().unwrap_or_default();
        match self.states.delete(&name, &Preconditions::default()).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => {
                tracing::info!(resource = %name, "resource no longer served; StorageState removed");
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// `status.storedVersions` of the CRD narrowed to its storage version (whose hash is
    /// `hash`), with the CRD's resourceVersion as the precondition. Returns false when it
    /// must be tried again (a conflict: the CRD changed; the watch brings the new one).
    async fn narrow_stored_versions(&self, crd: &CrdInfo, hash: &str) -> bool {
        let Some(version) = &crd.storage_version else {
            return true;
        };
        if crd.encoding(version).hash != hash || crd.stored_versions == [version.clone()] {
            return true;
        }
        let mut object: CustomResourceDefinition = crd.object.clone();
        let mut status = object.status.clone().unwrap_or_default();
        status.stored_versions = Some(vec![version.clone()]);
        object.status = Some(status);
        let name = object.metadata.name.clone().unwrap_or_default();
        // Narrowing says "nothing older is stored": only the leader may say it, so leadership
        // is checked right before (the CRD's resourceVersion is the precondition of the write).
        if let Err(err) = self.states.fence().check().await {
            tracing::info!(crd = %name, error = %err, "not narrowing status.storedVersions");
            return false;
        }
        let api: Api<CustomResourceDefinition> = Api::all(self.cluster.kube().clone());
        match api
            .replace_status(&name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => {
                tracing::info!(crd = %name, %version, "status.storedVersions narrowed");
                true
            }
            Err(kube::Error::Api(status)) if status.code == 409 => false,
            Err(err) => {
                // Forbidden or refused: the StorageState is still true; the CRD keeps its
                // longer list (and a later start migrates those versions once more).
                tracing::warn!(crd = %name, error = %err, "narrowing status.storedVersions failed");
                true
            }
        }
    }

    /// Writes what is vouched for, when everything is accounted for, at heartbeat pace or when
    /// the instances changed.
    async fn maybe_write_record(&mut self, known: &ClusterView) {
        if !known.leases_synced || !known.instances.all_accounted() || !self.owed_unknown.is_empty()
        {
            return;
        }
        let record = known.instances.record();
        let due = match &self.last_record {
            None => true,
            Some((at, last)) => {
                last.instances != record.instances
                    || at.elapsed() >= self.settings.heartbeat_interval
            }
        };
        if !due {
            return;
        }
        match self
            .history
            .write_observer(self.states.fence(), &record)
            .await
        {
            Ok(()) => self.last_record = Some((Instant::now(), record)),
            Err(err) => tracing::warn!(error = %err, "writing the observer record failed"),
        }
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn the_storage_states_policy_goes_on_its_migrations_when_it_is_one_the_migrator_knows() {
        let mut state = StorageState::default();
        assert_eq!(failure_policy(&state), None);
        for (value, copied) in [
            ("Skip", Some("Skip")),
            ("Fail", Some("Fail")),
            ("skip", None),
        ] {
            state.metadata.annotations =
                Some([(ON_OBJECT_FAILURE_ANNOTATION.to_string(), value.to_string())].into());
            assert_eq!(failure_policy(&state), copied, "{value}");
        }
    }

    /// A StorageState annotated before the rename keeps its policy; the new name wins.
    #[test]
    fn the_old_spelling_of_the_policy_on_a_storage_state_is_still_copied() {
        let mut state = StorageState::default();
        state.metadata.annotations = Some(
            [(
                "storagemigration.k8s.io/on-object-failure".to_string(),
                "Skip".to_string(),
            )]
            .into(),
        );
        assert_eq!(failure_policy(&state), Some("Skip"));
        state
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(ON_OBJECT_FAILURE_ANNOTATION.to_string(), "Fail".to_string());
        assert_eq!(failure_policy(&state), Some("Fail"));
    }

    /// The trigger writes the new names, and the rotation label under both spellings (the
    /// deprecation window: `-l` on the old one keeps listing rotations).
    #[test]
    fn a_rotation_migration_carries_the_new_names_and_both_rotation_labels() {
        let generation = Generation {
            config_hash: Some("sha256:ab".into()),
            write_key_id_hash: None,
        };
        let last = LastEntry {
            migration_seq: 4,
            cause: Some(HistoryEntry {
                seq: 4,
                hash: "H".into(),
                time: String::new(),
                source: Source::ApiserverMetrics,
                apiserver: None,
                encoding_version: None,
                reason: "key rotated".into(),
                encryption: None,
            }),
            rotation: Some(EncryptionRecord {
                kind: EncryptionKind::Rotation,
                generation,
                previous: None,
            }),
            ..Default::default()
        };
        let meta = migration_meta("secrets-4", "H", &last);
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get("storage.svm-apiserver.io/encryption-rotation")
                .map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels
                .get("storagemigration.k8s.io/encryption-rotation")
                .map(String::as_str),
            Some("true")
        );
        let annotations = meta.annotations.clone().unwrap_or_default();
        let keys: Vec<&str> = annotations.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "storage.svm-apiserver.io/encryption-generation",
                "storage.svm-apiserver.io/history-seq",
                "storage.svm-apiserver.io/storage-version-hash",
                "storage.svm-apiserver.io/trigger-reason",
            ]
        );
        assert_eq!(annotations["storage.svm-apiserver.io/history-seq"], "4");
        // A plain storage-version migration gets neither rotation label.
        let plain = migration_meta("secrets-4", "H", &LastEntry::default());
        assert_eq!(plain.labels.unwrap_or_default().len(), 1);
    }
}
