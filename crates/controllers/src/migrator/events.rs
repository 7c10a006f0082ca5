//! Kubernetes Events on migrations (started, succeeded, failed), written to the target
//! cluster with kube's events recorder (events.k8s.io/v1; a cluster-scoped object's events go
//! to the `default` namespace). Events are for people: a failure to write one is logged and
//! never stops a migration.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use svm_api::migration::{KIND, StorageVersionMigration};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    Started,
    Succeeded,
    Failed,
    /// Preflight found a refusal every write would meet (the migration then fails).
    PreflightFailed,
    /// Another migrator writes the migration's status: ours stopped working on it.
    Yielded,
    /// The migration succeeded with objects the cluster refused, skipped by its policy.
    ObjectsSkipped,
    /// Companion mode found the cluster's API holding another migration of the same name:
    /// ours was not carried over.
    NotCarriedOver,
}

impl Reason {
    fn reason(self) -> &'static str {
        match self {
            Reason::Started => "MigrationStarted",
            Reason::Succeeded => "MigrationSucceeded",
            Reason::Failed => "MigrationFailed",
            Reason::PreflightFailed => "PreflightFailed",
            Reason::Yielded => "MigrationYielded",
            Reason::NotCarriedOver => "MigrationNotCarriedOver",
            Reason::ObjectsSkipped => "ObjectsSkipped",
        }
    }

    fn event_type(self) -> EventType {
        match self {
            Reason::Failed | Reason::PreflightFailed | Reason::Yielded | Reason::NotCarriedOver => {
                EventType::Warning
            }
            Reason::ObjectsSkipped => EventType::Warning,
            _ => EventType::Normal,
        }
    }
}

pub(crate) struct Events {
    recorder: Recorder,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    pub(crate) fn new(client: kube::Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: "svm-apiserver".into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    pub(crate) async fn publish(
        &self,
        migration: &StorageVersionMigration,
        reason: Reason,
        note: String,
    ) {
        let reference = ObjectReference {
            api_version: Some(format!("{}/v1", svm_api::GROUP)),
            kind: Some(KIND.into()),
            name: migration.metadata.name.clone(),
            uid: migration.metadata.uid.clone(),
            resource_version: migration.metadata.resource_version.clone(),
            ..Default::default()
        };
        let event = Event {
            type_: reason.event_type(),
            reason: reason.reason().into(),
            // The events API limits a note to 1 kB.
            note: Some(note.chars().take(1000).collect()),
            action: "Migrate".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %err, reason = reason.reason(), "could not record an event");
        }
    }
}
