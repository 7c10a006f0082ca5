//! The VolumeClaimMigration controller: brings a StatefulSet's existing PersistentVolumeClaims
//! up to the sizes a migration asks for, ordinal by ordinal (docs/design.md, "Volume-claim
//! migrations"; the semantics of OpenKruise's AdvancedStatefulSetVolumeResize proposal).
//!
//! Each pass reads the migration as stored now and the cluster ([`target`]), decides in a pure
//! function ([`plan`]), performs the actions (a merge PATCH of a claim's request, the deletion
//! of a pod whose file system waits for a restart, the steps of an orphan re-create of the
//! StatefulSet, [`recreate`]), records Events and writes the status through the registry.
//! Passes run on every change of a migration and every `--volume-resync-interval`, on the
//! leader only. Nothing here deletes a claim or any data.
//!
//! Writes to our store carry the term's fence; writes to the cluster cannot, so each of them
//! — a claim's PATCH, a pod's or the StatefulSet's deletion, its creation — checks the term
//! right before ([`svm_registry::Fence::check`], as the trigger's `status.storedVersions`
//! narrowing does) and is not sent once the term is over; and each deletion names the object
//! as read (uid, and for the StatefulSet the resourceVersion its manifest was saved from), so
//! a stale view cannot delete a successor or revert an edit. While a StatefulSet manifest is
//! saved the migration holds [`RECREATE_FINALIZER`]: added before the save, removed once the
//! manifest is dropped.

use svm_api::conditions;
// The crash test's stopping points exist only in test builds: the `test-hooks` feature (turned
// on by the workspace's dev-dependencies, never by a product build) compiles `hooks.rs`; without
// it `hooks_off.rs`, the same calls doing nothing, so the product carries no hook at all.
#[cfg(feature = "test-hooks")]
mod hooks;
#[cfg(not(feature = "test-hooks"))]
#[path = "hooks_off.rs"]
mod hooks;
mod key;
mod metrics;
mod plan;
mod recreate;
mod target;
mod template;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use svm_runtime::events::{Event, EventType, Events};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use hooks::{Hooks, Step};
use key::{Key, key_of};
pub use metrics::VolumeMetrics;
use plan::{Action, CLAIM_FAILED, Note, Plan};
use svm_api::volumes::{
    KIND, RECREATE_FINALIZER, RECREATE_ORPHANED, VolumeClaimMigration, VolumeClaimMigrationStrategy,
};
use svm_cluster::{ClusterClient, ClusterError};
use svm_registry::{ApiError, Guarded, Update};
use target::Deleted;

/// The controller's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often every migration is looked at again without a change of its own (the
    /// cluster's claims and pods change without telling us).
    pub resync: Duration,
}

/// The volume-claim controller: runs VolumeClaimMigrations.
pub struct Controller {
    store: Guarded<VolumeClaimMigrationStrategy>,
    cluster: ClusterClient,
    events: Events,
    metrics: VolumeMetrics,
    settings: Settings,
}

impl Controller {
    /// A controller of the migrations in `store`, acting on `cluster`.
    pub fn new(
        store: Guarded<VolumeClaimMigrationStrategy>,
        cluster: ClusterClient,
        metrics: VolumeMetrics,
        settings: Settings,
        instance: Option<String>,
    ) -> Self {
        let events = Events::new(cluster.kube().clone(), instance);
        Controller {
            store,
            cluster,
            events,
            metrics,
            settings,
        }
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut hooks = Hooks::from_env();
        let (tx, mut updates) = mpsc::channel(64);
        let feed = self.store.list_and_watch(self.settings.resync, tx, |u| u);
        let mut known: BTreeMap<Key, VolumeClaimMigration> = BTreeMap::new();
        let mut tick = tokio::time::interval(self.settings.resync);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => {}
                update = updates.recv() => match update {
                    Some(update) => apply(&mut known, update),
                    None => break,
                },
            }
            for vcm in known.values() {
                if cancel.is_cancelled() {
                    break;
                }
                let key = key_of(vcm);
                if hooks.is_halted(&key) {
                    continue;
                }
                let (namespace, name) = &key;
                let span = tracing::info_span!("volume_claim_migration", %namespace, %name);
                self.reconcile(&key, &mut hooks).instrument(span).await;
            }
        }
        feed.abort();
    }

    /// One pass over one migration; `hooks` are a test build's stopping points ([`hooks`]).
    async fn reconcile(&self, key: &Key, hooks: &mut Hooks) {
        let Some((vcm, observed)) = self.read_pass(key).await else {
            return;
        };
        let mut plan = plan::plan(&vcm, &observed.view, jiff::Timestamp::now());
        let Some(vcm) = self.finalizer_first(vcm, &plan).await else {
            return;
        };
        // Stopped (the term is over, or a test build's hook halted the migration): nothing more
        // is written.
        if self.perform(key, &vcm, &mut plan, hooks).await.is_err() {
            return;
        }
        for note in &plan.notes {
            self.record(&vcm, &observed.statefulset, note).await;
        }
        let Some(stored) = self.write_status(vcm, &plan).await else {
            return;
        };
        if plan.saves_manifest {
            let saved = plan.status.recreate.as_ref();
            tracing::info!(
                uid = saved.map(|r| r.stateful_set_uid.as_str()),
                resource_version = saved.map(|r| r.stateful_set_resource_version.as_str()),
                "StatefulSet manifest saved in the status"
            );
            if hooks.halted_after(key, Step::Save) {
                return;
            }
        }
        // The manifest is dropped (the StatefulSet exists again, or the re-create was called
        // off) and that is stored: the finalizer goes.
        if !plan.needs_finalizer()
            && has_finalizer(&stored)
            && let Err(err) = self.set_finalizer(&stored, false).await
        {
            tracing::info!(error = %err, "removing the finalizer deferred");
        }
    }

    /// The migration as stored now and its target as the cluster has it; `None` (the pass
    /// deferred) when either cannot be read, or the migration is gone.
    async fn read_pass(&self, key: &Key) -> Option<(VolumeClaimMigration, target::Observed)> {
        // The migration as stored now, not as the watch last brought it: the status this pass
        // builds on (a saved manifest above all) must be the latest one. Only this term writes
        // the status, so it stays the latest until our own write.
        let (namespace, name) = key;
        let vcm = match self.store.get((namespace.as_str(), name.as_str())).await {
            Ok(Some(vcm)) => vcm,
            Ok(None) => return None,
            Err(err) => {
                tracing::info!(error = %err, "reading the migration deferred");
                return None;
            }
        };
        match target::observe(&self.cluster, &vcm).await {
            Ok(observed) => Some((vcm, observed)),
            Err(err) => {
                tracing::info!(error = %err, "reading the target deferred");
                None
            }
        }
    }

    /// The finalizer before the manifest is saved, and before any step of a re-create (a
    /// migration being deleted cannot gain one: it is held by ours already, or by none);
    /// `None` (the pass deferred) when it could not be added.
    async fn finalizer_first(
        &self,
        vcm: VolumeClaimMigration,
        plan: &Plan,
    ) -> Option<VolumeClaimMigration> {
        if !plan.needs_finalizer()
            || has_finalizer(&vcm)
            || vcm.metadata.deletion_timestamp.is_some()
        {
            return Some(vcm);
        }
        match self.set_finalizer(&vcm, true).await {
            Ok(updated) => Some(updated),
            Err(err) => {
                tracing::info!(error = %err, "adding the finalizer deferred");
                None
            }
        }
    }

    /// The plan's status written when it differs from the stored one: the migration as
    /// stored after; `None` (the pass deferred) when the write failed.
    async fn write_status(
        &self,
        vcm: VolumeClaimMigration,
        plan: &Plan,
    ) -> Option<VolumeClaimMigration> {
        if plan.status == vcm.status {
            return Some(vcm);
        }
        let mut updated = vcm;
        updated.status = plan.status.clone();
        match self.store.update_status(updated).await {
            Ok(written) => Some(written),
            Err(err) => {
                tracing::info!(error = %err, "writing the status deferred");
                None
            }
        }
    }

    /// Adds (`on`) or removes [`RECREATE_FINALIZER`], fenced, with the migration's
    /// resourceVersion as the precondition.
    async fn set_finalizer(
        &self,
        vcm: &VolumeClaimMigration,
        on: bool,
    ) -> Result<VolumeClaimMigration, ApiError> {
        let mut updated = vcm.clone();
        let mut finalizers = updated.metadata.finalizers.take().unwrap_or_default();
        finalizers.retain(|f| f != RECREATE_FINALIZER);
        if on {
            finalizers.push(RECREATE_FINALIZER.into());
        }
        updated.metadata.finalizers = Some(finalizers).filter(|f| !f.is_empty());
        let written = self.store.update(updated).await?;
        tracing::info!(
            finalizer = RECREATE_FINALIZER,
            "{}",
            if on {
                "finalizer added: a StatefulSet manifest is about to be saved"
            } else {
                "finalizer removed: no StatefulSet manifest is held any more"
            }
        );
        Ok(written)
    }

    /// The plan's actions, in order; a refused PATCH stops the rollout at that claim. Each is
    /// a write to the cluster, sent only after the term was found to last.
    async fn perform(
        &self,
        key: &Key,
        vcm: &VolumeClaimMigration,
        plan: &mut Plan,
        hooks: &mut Hooks,
    ) -> Result<(), Stop> {
        for action in plan.actions.clone() {
            let go_on = match action {
                Action::Resize {
                    claim,
                    storage,
                    resource_version,
                } => {
                    self.leading().await?;
                    self.resize_claim(vcm, plan, &claim, &storage, &resource_version)
                        .await
                }
                Action::RestartPod { pod, uid, claim } => {
                    self.leading().await?;
                    self.restart_pod(vcm, plan, &pod, &uid, &claim).await;
                    true
                }
                Action::DeleteStatefulSet {
                    uid,
                    resource_version,
                } => {
                    self.perform_delete(key, vcm, plan, hooks, &uid, &resource_version)
                        .await?
                }
                Action::CreateStatefulSet { manifest } => {
                    self.perform_create(key, vcm, plan, hooks, &manifest)
                        .await?;
                    true
                }
            };
            if !go_on {
                break;
            }
        }
        let resized = plan.notes.iter().filter(|n| n.reason == "Resized").count();
        self.metrics.claims_resized.inc_by(resized as u64);
        Ok(())
    }

    /// The StatefulSet's deletion (orphaning its pods), once a dry-run create of the saved
    /// one passed; false when it would be refused (the old one stays, the plan stops).
    async fn perform_delete(
        &self,
        key: &Key,
        vcm: &VolumeClaimMigration,
        plan: &mut Plan,
        hooks: &mut Hooks,
        uid: &str,
        resource_version: &str,
    ) -> Result<bool, Stop> {
        // Held there only by a test build's hook, to meet the real 409.
        let term = self.store.fence().token();
        hooks
            .wait_for_edit_before_delete(key, &self.cluster, vcm, resource_version, term)
            .await;
        if !self.would_be_created(vcm, plan).await {
            return Ok(false);
        }
        self.leading().await?;
        let deleted = self
            .delete_statefulset(vcm, plan, uid, resource_version)
            .await;
        if deleted && hooks.halted_after(key, Step::Delete) {
            return Err(Stop::Halted);
        }
        Ok(true)
    }

    /// The StatefulSet created from the saved manifest; the next pass sees the new uid and
    /// says so (StatefulSetRecreated).
    async fn perform_create(
        &self,
        key: &Key,
        vcm: &VolumeClaimMigration,
        plan: &mut Plan,
        hooks: &mut Hooks,
        manifest: &serde_json::Value,
    ) -> Result<(), Stop> {
        self.leading().await?;
        match target::create_statefulset(&self.cluster, vcm, manifest, false).await {
            Ok(()) => {
                tracing::info!("StatefulSet created from the saved manifest");
                if hooks.halted_after(key, Step::Create) {
                    return Err(Stop::Halted);
                }
            }
            Err(err) if err.is_retriable() => {
                tracing::info!(error = %err, "creating the StatefulSet deferred")
            }
            Err(err) => {
                tracing::warn!(error = %err, "creating the StatefulSet was refused");
                create_refused(plan, vcm, &err, true);
            }
        }
        Ok(())
    }

    /// Whether this replica still leads, read right before a write to the cluster (the term
    /// record in our store); a term found over stops the controllers.
    async fn leading(&self) -> Result<(), Stop> {
        match self.store.fence().check().await {
            Ok(()) => Ok(()),
            Err(err) => {
                tracing::warn!(error = %err, "not writing to the cluster: the leadership term is over");
                Err(Stop::TermOver)
            }
        }
    }

    /// Returns whether the rollout goes on (the server accepted the PATCH).
    async fn resize_claim(
        &self,
        vcm: &VolumeClaimMigration,
        plan: &mut Plan,
        claim: &str,
        storage: &str,
        resource_version: &str,
    ) -> bool {
        let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
        match target::resize(&self.cluster, namespace, claim, storage, resource_version).await {
            Ok(()) => {
                self.metrics.resizes_started.inc();
                plan.notes.push(Note {
                    warning: false,
                    reason: "ResizeStarted",
                    message: format!("claim {claim}: requested {storage}"),
                });
                true
            }
            Err(err) if err.is_conflict() => {
                tracing::info!(%claim, resource_version, "the claim changed since it was read: decided again on the next pass");
                as_before(plan, claim, vcm);
                false
            }
            Err(err) => {
                self.metrics.resize_failure(&err);
                refused(plan, claim, &err, vcm);
                false
            }
        }
    }

    async fn restart_pod(
        &self,
        vcm: &VolumeClaimMigration,
        plan: &mut Plan,
        pod: &str,
        uid: &str,
        claim: &str,
    ) {
        let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
        match target::delete_pod(&self.cluster, namespace, pod, uid).await {
            Ok(()) => {
                self.metrics.pod_restarts.inc();
                plan.notes.push(Note {
                    warning: false,
                    reason: "PodRestarted",
                    message: format!(
                        "pod {pod} deleted so that claim {claim}'s file system is resized when \
                         it starts again"
                    ),
                });
            }
            Err(err) => {
                tracing::info!(error = %err, %pod, "restarting the pod deferred");
                forget_restart(plan, claim);
            }
        }
    }

    /// Before the old StatefulSet is deleted: whether kube-apiserver would take the saved one
    /// (a dry-run create). A refusal — an admission webhook or policy, validation,
    /// `OwnerReferencesPermissionEnforcement` — found now leaves the old one standing; found
    /// after the deletion, it would leave the pods without their StatefulSet.
    async fn would_be_created(&self, vcm: &VolumeClaimMigration, plan: &mut Plan) -> bool {
        let Some(manifest) = plan
            .status
            .recreate
            .as_ref()
            .and_then(|r| r.manifest.clone())
        else {
            return false;
        };
        match target::create_statefulset(&self.cluster, vcm, &manifest, true).await {
            // Admitted and valid; the name is taken by the old one, as it must be.
            Ok(()) => true,
            Err(err) if err.is_conflict() => true,
            Err(err) if err.is_retriable() => {
                tracing::info!(error = %err, "the dry-run create deferred the deletion");
                false
            }
            Err(err) => {
                tracing::warn!(error = %err, "the StatefulSet to create would be refused: the old one is not deleted");
                create_refused(plan, vcm, &err, false);
                false
            }
        }
    }

    /// The old StatefulSet goes with orphan cascade; returns whether it did. Gone before
    /// ours (404): someone else's deletion, not undone — the re-create is abandoned. A failure is
    /// decided again on the next pass: a conflict (the StatefulSet was edited since its
    /// manifest was saved, or replaced) makes that pass save the manifest again from the
    /// current object (or see the replacement).
    async fn delete_statefulset(
        &self,
        vcm: &VolumeClaimMigration,
        plan: &mut Plan,
        uid: &str,
        resource_version: &str,
    ) -> bool {
        match target::delete_statefulset(&self.cluster, vcm, uid, resource_version).await {
            Ok(Deleted::AlreadyGone) => {
                // Someone else's deletion: not ours to undo. The manifest goes to the log, for
                // whoever wants it back.
                let manifest = plan
                    .status
                    .recreate
                    .as_ref()
                    .and_then(|r| r.manifest.clone());
                tracing::warn!(
                    uid,
                    manifest = %manifest.unwrap_or_default(),
                    "the StatefulSet was gone before our deletion: not created again"
                );
                plan.abandon_recreate(vcm.metadata.generation, jiff::Timestamp::now());
                false
            }
            Ok(Deleted::Accepted) => {
                tracing::info!(
                    uid,
                    resource_version,
                    "StatefulSet deleted with orphan cascade"
                );
                if let Some(recreate) = plan.status.recreate.as_mut() {
                    recreate.phase = RECREATE_ORPHANED.into();
                }
                plan.notes.push(Note {
                    warning: false,
                    reason: "RecreatingStatefulSet",
                    message: "StatefulSet deleted with orphan cascade (its pods and claims \
                              stay); it is created again with the new volumeClaimTemplates"
                        .into(),
                });
                true
            }
            Err(err) if err.code() == Some(409) => {
                tracing::info!(
                    error = %err,
                    resource_version,
                    "the StatefulSet changed since its manifest was saved (the deletion's \
                     precondition failed): its manifest is saved again from it first"
                );
                false
            }
            Err(err) => {
                tracing::info!(error = %err, "deleting the StatefulSet deferred");
                false
            }
        }
    }

    /// An Event on the migration, and the same on the StatefulSet.
    async fn record(&self, vcm: &VolumeClaimMigration, statefulset: &ObjectReference, note: &Note) {
        let migration = ObjectReference {
            api_version: Some(format!("{}/v1alpha1", svm_api::PROJECT.name)),
            kind: Some(KIND.into()),
            name: vcm.metadata.name.clone(),
            namespace: vcm.metadata.namespace.clone(),
            uid: vcm.metadata.uid.clone(),
            resource_version: vcm.metadata.resource_version.clone(),
            ..Default::default()
        };
        let event = || Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.into(),
            note: Some(note.message.clone()),
            action: "ResizeVolumes".into(),
            secondary: None,
        };
        for reference in [&migration, statefulset] {
            self.events.publish(event(), reference).await;
        }
    }
}

/// Why a pass stops before its status write.
enum Stop {
    /// The term is over: nothing more is written (our store would refuse it anyway).
    TermOver,
    /// A test hook halted the migration ([`hooks`]).
    Halted,
}

fn has_finalizer(vcm: &VolumeClaimMigration) -> bool {
    vcm.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == RECREATE_FINALIZER)
}

fn apply(known: &mut BTreeMap<Key, VolumeClaimMigration>, update: Update<VolumeClaimMigration>) {
    match update {
        Update::Applied(vcm) => {
            known.insert(key_of(&vcm), vcm);
        }
        Update::Deleted(vcm) => {
            known.remove(&key_of(&vcm));
        }
        Update::Relisted(all) => {
            *known = all.into_iter().map(|v| (key_of(&v), v)).collect();
        }
        Update::Failed(message) => {
            tracing::info!(%message, "listing VolumeClaimMigrations failed; retrying");
        }
    }
}

/// The server refused a claim's PATCH (a quota, a validation, the StorageClass): the claim
/// is failed with the server's words and the rollout blocked there until the PATCH succeeds
/// on a later pass.
/// kube-apiserver refuses the saved StatefulSet (`deleted`: after the old one was deleted; else
/// its dry run, before): the Running condition says so, with a Warning Event when that is
/// new. Tried again on every pass.
fn create_refused(plan: &mut Plan, vcm: &VolumeClaimMigration, err: &ClusterError, deleted: bool) {
    const REASON: &str = "StatefulSetCreateRefused";
    let said = match err {
        ClusterError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let message = if deleted {
        format!(
            "creating the StatefulSet from the saved manifest was refused: {said}; its pods run \
             without it until it is created (tried again on every pass)"
        )
    } else {
        format!(
            "the StatefulSet to create would be refused: {said}; the old one is not deleted \
             (tried again on every pass)"
        )
    };
    running_said_once(plan, vcm, deleted, REASON, message, REASON);
}

/// The claim's entry as the pass found it (its resize was not sent), and no further action.
fn as_before(plan: &mut Plan, claim: &str, vcm: &VolumeClaimMigration) {
    let before = vcm.status.claims.iter().find(|c| c.name == claim).cloned();
    if let Some(at) = plan.status.claims.iter().position(|c| c.name == claim) {
        match before {
            Some(before) => plan.status.claims[at] = before,
            None => {
                plan.status.claims.remove(at);
            }
        }
    }
    plan.actions.clear();
}

fn refused(plan: &mut Plan, claim: &str, err: &ClusterError, vcm: &VolumeClaimMigration) {
    let message = match err {
        ClusterError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    };
    // The uid as it was before this pass: `OnDelete` resizes a claim once its uid changed, and a
    // refused claim must stay eligible for the next try.
    let uid_before = vcm
        .status
        .claims
        .iter()
        .find(|c| c.name == claim)
        .map(|c| c.uid.clone());
    if let Some(entry) = plan.status.claims.iter_mut().find(|c| c.name == claim) {
        entry.phase = CLAIM_FAILED.into();
        entry.requested.clear();
        entry.resize_start_time.clear();
        entry.last_error = message.clone();
        if let Some(uid) = uid_before.filter(|u| !u.is_empty()) {
            entry.uid = uid;
        }
    }
    plan.actions.clear();
    let blocked = format!("claim {claim}: {message}");
    running_said_once(plan, vcm, false, "Blocked", blocked, "ResizeFailed");
}

/// The Running condition set to `reason` and `message`, with a Warning Event `event` when it
/// did not say so already (so not again on every pass).
fn running_said_once(
    plan: &mut Plan,
    vcm: &VolumeClaimMigration,
    on: bool,
    reason: &str,
    message: String,
    event: &'static str,
) {
    let said = vcm.status.conditions.iter().any(|c| {
        c.type_ == svm_api::volumes::RUNNING && c.reason == reason && c.message == message
    });
    conditions::set(
        &mut plan.status.conditions,
        svm_api::volumes::RUNNING,
        on,
        reason,
        &message,
        vcm.metadata.generation,
        jiff::Timestamp::now(),
    );
    if !said {
        plan.notes.push(Note {
            warning: true,
            reason: event,
            message,
        });
    }
}

/// The pod could not be deleted: try again on the next pass.
fn forget_restart(plan: &mut Plan, claim: &str) {
    if let Some(entry) = plan.status.claims.iter_mut().find(|c| c.name == claim) {
        entry.restarted_pod_uid.clear();
    }
}

#[cfg(test)]
mod tests;
