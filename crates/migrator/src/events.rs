//! Kubernetes Events on migrations (started, succeeded, failed, ...), through the runtime's
//! recorder ([`svm_runtime::events`]).

use svm_api::migration::StorageVersionMigration;
pub use svm_runtime::events::Events;
use svm_runtime::events::{Event, EventType};

/// Why an event about a migration is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The migrator took it up.
    Started,
    /// Every object was migrated.
    Succeeded,
    /// It ended Failed.
    Failed,
    /// Its preflight refused it.
    PreflightFailed,
    /// Another migrator writes its status: this one leaves it.
    Yielded,
    /// It ended with objects skipped (`Skip` failure policy).
    ObjectsSkipped,
}

impl Reason {
    fn reason(self) -> &'static str {
        match self {
            Reason::Started => "MigrationStarted",
            Reason::Succeeded => "MigrationSucceeded",
            Reason::Failed => "MigrationFailed",
            Reason::PreflightFailed => "PreflightFailed",
            Reason::Yielded => "MigrationYielded",
            Reason::ObjectsSkipped => "ObjectsSkipped",
        }
    }

    fn event_type(self) -> EventType {
        match self {
            Reason::Started | Reason::Succeeded => EventType::Normal,
            _ => EventType::Warning,
        }
    }
}

/// Publishes the event `reason` on `migration`.
pub(crate) async fn publish(
    events: &Events,
    migration: &StorageVersionMigration,
    reason: Reason,
    note: String,
) {
    let event = Event {
        type_: reason.event_type(),
        reason: reason.reason().into(),
        note: Some(note),
        action: "Migrate".into(),
        secondary: None,
    };
    events.publish(event, &migration.object_reference()).await;
}
