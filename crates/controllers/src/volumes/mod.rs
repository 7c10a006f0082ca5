//! The VolumeClaimMigration controller: brings a StatefulSet's existing PersistentVolumeClaims
//! up to the sizes a migration asks for, ordinal by ordinal (docs/design.md, "Volume-claim
//! migrations"; the semantics of OpenKruise's AdvancedStatefulSetVolumeResize proposal).
//!
//! Each pass reads the cluster ([`target`]), decides in a pure function ([`plan`]), performs
//! the actions (a merge PATCH of a claim's request, the deletion of a pod whose file system
//! waits for a restart, the steps of an orphan re-create of the StatefulSet, [`recreate`]),
//! records Events and writes the status through the registry. Passes
//! run on every change of a migration and every `--volume-resync-interval`, on the leader
//! only. Nothing here deletes a claim or any data.

pub(crate) mod conditions;
pub(crate) mod metrics;
pub(crate) mod plan;
mod recreate;
mod target;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub(crate) use metrics::VolumeMetrics;
use plan::{Action, CLAIM_FAILED, Note, Plan};
use svm_api::volumes::{KIND, VolumeClaimMigration, VolumeClaimMigrationStrategy};
use svm_cluster::{ClusterClient, ClusterError};
use svm_registry::{Guarded, Update};

/// The controller's settings.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// How often every migration is looked at again without a change of its own (the
    /// cluster's claims and pods change without telling us).
    pub resync: Duration,
}

pub(crate) struct Controller {
    store: Guarded<VolumeClaimMigrationStrategy>,
    cluster: ClusterClient,
    recorder: Recorder,
    metrics: VolumeMetrics,
    settings: Settings,
}

type Key = (String, String);

fn key_of(vcm: &VolumeClaimMigration) -> Key {
    (
        vcm.metadata.namespace.clone().unwrap_or_default(),
        vcm.metadata.name.clone().unwrap_or_default(),
    )
}

impl Controller {
    pub(crate) fn new(
        store: Guarded<VolumeClaimMigrationStrategy>,
        cluster: ClusterClient,
        metrics: VolumeMetrics,
        settings: Settings,
        instance: Option<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: "svm-apiserver".into(),
            instance,
        };
        let recorder = Recorder::new(cluster.kube().clone(), reporter);
        Controller {
            store,
            cluster,
            recorder,
            metrics,
            settings,
        }
    }

    /// Runs until `cancel` fires.
    pub(crate) async fn run(self, cancel: CancellationToken) {
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
                let (namespace, name) = key_of(vcm);
                let span = tracing::info_span!("volume_claim_migration", %namespace, %name);
                self.reconcile(vcm).instrument(span).await;
            }
        }
        feed.abort();
    }

    /// One pass over one migration.
    async fn reconcile(&self, vcm: &VolumeClaimMigration) {
        let observed = match target::observe(&self.cluster, vcm).await {
            Ok(observed) => observed,
            Err(err) => {
                tracing::info!(error = %err, "reading the target deferred");
                return;
            }
        };
        let mut plan = plan::plan(vcm, &observed.view, jiff::Timestamp::now());
        self.perform(vcm, &mut plan).await;
        for note in &plan.notes {
            self.record(vcm, &observed.statefulset, note).await;
        }
        if plan.status != vcm.status {
            let mut updated = vcm.clone();
            updated.status = plan.status;
            if let Err(err) = self.store.update_status(updated).await {
                tracing::info!(error = %err, "writing the status deferred");
            }
        }
    }

    /// The plan's actions, in order; a refused PATCH stops the rollout at that claim.
    async fn perform(&self, vcm: &VolumeClaimMigration, plan: &mut Plan) {
        for action in plan.actions.clone() {
            let go_on = match action {
                Action::Resize { claim, storage } => {
                    self.resize_claim(vcm, plan, &claim, &storage).await
                }
                Action::RestartPod { pod, claim } => {
                    self.restart_pod(vcm, plan, &pod, &claim).await;
                    true
                }
                Action::DeleteStatefulSet { uid } => {
                    self.delete_statefulset(vcm, plan, &uid).await;
                    true
                }
                Action::CreateStatefulSet { manifest } => {
                    // The next pass sees the new uid and says so (StatefulSetRecreated).
                    if let Err(err) =
                        target::create_statefulset(&self.cluster, vcm, &manifest).await
                    {
                        tracing::info!(error = %err, "creating the StatefulSet deferred");
                    }
                    true
                }
            };
            if !go_on {
                break;
            }
        }
        let resized = plan.notes.iter().filter(|n| n.reason == "Resized").count();
        self.metrics.claims_resized.inc_by(resized as u64);
    }

    /// Returns whether the rollout goes on (the server accepted the PATCH).
    async fn resize_claim(
        &self,
        vcm: &VolumeClaimMigration,
        plan: &mut Plan,
        claim: &str,
        storage: &str,
    ) -> bool {
        let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
        match target::resize(&self.cluster, namespace, claim, storage).await {
            Ok(()) => {
                self.metrics.resizes_started.inc();
                plan.notes.push(Note {
                    warning: false,
                    reason: "ResizeStarted",
                    message: format!("claim {claim}: requested {storage}"),
                });
                true
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
        claim: &str,
    ) {
        let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
        match target::delete_pod(&self.cluster, namespace, pod).await {
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

    /// The old StatefulSet goes with orphan cascade; a failure (a conflict: someone else
    /// acted first) is decided again on the next pass.
    async fn delete_statefulset(&self, vcm: &VolumeClaimMigration, plan: &mut Plan, uid: &str) {
        match target::delete_statefulset(&self.cluster, vcm, uid).await {
            Ok(()) => plan.notes.push(Note {
                warning: false,
                reason: "RecreatingStatefulSet",
                message: "StatefulSet deleted with orphan cascade (its pods and claims stay); \
                          it is created again with the new volumeClaimTemplates"
                    .into(),
            }),
            Err(err) => tracing::info!(error = %err, "deleting the StatefulSet deferred"),
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
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.into(),
            // The events API limits a note to 1 kB.
            note: Some(note.message.chars().take(1000).collect()),
            action: "ResizeVolumes".into(),
            secondary: None,
        };
        for reference in [&migration, statefulset] {
            if let Err(err) = self.recorder.publish(&event, reference).await {
                tracing::warn!(error = %err, reason = note.reason, "could not record an event");
            }
        }
    }
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
fn refused(plan: &mut Plan, claim: &str, err: &ClusterError, vcm: &VolumeClaimMigration) {
    let message = match err {
        ClusterError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    };
    if let Some(entry) = plan.status.claims.iter_mut().find(|c| c.name == claim) {
        entry.phase = CLAIM_FAILED.into();
        entry.requested.clear();
        entry.resize_start_time.clear();
        entry.last_error = message.clone();
    }
    plan.actions.clear();
    let blocked = format!("claim {claim}: {message}");
    let generation = vcm.metadata.generation;
    let now = jiff::Timestamp::now();
    let was_blocked = vcm.status.conditions.iter().any(|c| {
        c.type_ == svm_api::volumes::RUNNING && c.reason == "Blocked" && c.message == blocked
    });
    conditions::set(
        &mut plan.status.conditions,
        svm_api::volumes::RUNNING,
        false,
        "Blocked",
        &blocked,
        generation,
        now,
    );
    if !was_blocked {
        plan.notes.push(Note {
            warning: true,
            reason: "ResizeFailed",
            message: blocked,
        });
    }
}

/// The pod could not be deleted: try again on the next pass.
fn forget_restart(plan: &mut Plan, claim: &str) {
    if let Some(entry) = plan.status.claims.iter_mut().find(|c| c.name == claim) {
        entry.restarted_pod_uid.clear();
    }
}
