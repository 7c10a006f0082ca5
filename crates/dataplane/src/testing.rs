//! What the crate's unit tests share: a Longhorn-like replica guard and replicas.

use svm_api::dataplane::{GuardedResource, HealthRule, ReplicaGuard};

use crate::guards::Replica;

/// Longhorn's replicas: node in `spec.nodeID`, volume in `spec.volumeName`, healthy when
/// `status.currentState` is `running`; `min` healthy replicas elsewhere.
pub(crate) fn longhorn_guard(min: i32) -> ReplicaGuard {
    ReplicaGuard {
        name: "replicas".into(),
        resource: GuardedResource {
            group: "longhorn.io".into(),
            version: "v1beta2".into(),
            resource: "replicas".into(),
        },
        node_field: "spec.nodeID".into(),
        volume_field: "spec.volumeName".into(),
        healthy: HealthRule {
            field: "status.currentState".into(),
            value: "running".into(),
            condition: String::new(),
        },
        min_healthy_elsewhere: Some(min),
    }
}

/// A replica of `volume` on `node` as [`longhorn_guard`] reads it.
pub(crate) fn replica(volume: &str, node: &str, healthy: bool) -> Replica {
    Replica {
        guard: "replicas".into(),
        volume: volume.into(),
        node: node.into(),
        healthy,
    }
}
