//! Kubernetes Events for people, written to the target cluster with kube's events recorder
//! (events.k8s.io/v1; a cluster-scoped object's events go to the `default` namespace), as
//! `svm-apiserver` and the replica's name. Events are for people: a failure to write one is
//! logged and never stops the controller that wrote it.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
pub use kube::runtime::events::{Event, EventType};
use kube::runtime::events::{Recorder, Reporter};

/// How long one event may take: the cluster client has no read timeout (its watches stay
/// open), and a hung answer must not stop a controller's loop.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The events API's limit on a note.
const NOTE_LIMIT: usize = 1000;

/// The recorder every controller shares.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported as `svm-apiserver`, from `instance` (the replica) when known.
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: "svm-apiserver".into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes `event` about `regarding`, its note cut to the API's limit; a failure or a
    /// hung answer is logged.
    pub async fn publish(&self, mut event: Event, regarding: &ObjectReference) {
        event.note = event
            .note
            .map(|note| note.chars().take(NOTE_LIMIT).collect());
        let reason = event.reason.clone();
        match tokio::time::timeout(EVENT_TIMEOUT, self.recorder.publish(&event, regarding)).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, %reason, "could not record an event"),
            Err(_) => tracing::warn!(%reason, "recording an event timed out"),
        }
    }
}
