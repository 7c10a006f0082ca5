//! The OpenAPI schema of DataPlaneRollout, as kube-apiserver publishes a built-in kind's
//! (one definition per type, `$ref`s between them), in parts: the object, its spec's types,
//! its status's types.

use serde_json::{Value, json};

use super::types::KIND;
use crate::PROJECT;
use crate::openapi::{META, described_ref, int32, list_map, reference, reversed_name, string};

/// `io.svm-apiserver.storage.v1alpha1.DataPlaneRollout`.
pub(super) fn definition_name(version: &str) -> String {
    reversed_name(PROJECT.name, version, KIND)
}

/// Every definition of the kind in `version`.
pub(super) fn definitions(version: &str) -> Vec<(String, Value)> {
    let name = definition_name(version);
    let mut all = vec![object(&name, version)];
    all.extend(spec(&name));
    all.extend(guards(&name));
    all.extend(status(&name));
    all
}

fn object(name: &str, version: &str) -> (String, Value) {
    (
        name.to_string(),
        json!({
            "description": "DataPlaneRollout upgrades a storage data plane — a DaemonSet of per-node engines with updateStrategy OnDelete — one node at a time, each node gated on every volume with a replica there keeping enough healthy replicas on other nodes.",
            "type": "object",
            "properties": {
                "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
                "kind": string("Kind is a string value representing the REST resource this object represents."),
                "metadata": described_ref(&format!("{META}.ObjectMeta"), "Standard object metadata."),
                "spec": described_ref(&format!("{name}Spec"), "What to roll out, where, and what gates each node."),
                "status": described_ref(&format!("{name}Status"), "How far the rollout is, node by node."),
            },
            "x-kubernetes-group-version-kind": [{"group": PROJECT.name, "kind": KIND, "version": version}],
        }),
    )
}

fn spec(name: &str) -> Vec<(String, Value)> {
    let selector = |description: &str| described_ref(&format!("{META}.LabelSelector"), description);
    vec![
        (
            format!("{name}Spec"),
            json!({
                "description": "The DaemonSet, the nodes, and what must hold before a node goes.",
                "type": "object",
                "required": ["daemonSet"],
                "properties": {
                    "daemonSet": string("The DaemonSet in this namespace; its updateStrategy must be OnDelete. Immutable."),
                    "nodeSelector": selector("Only nodes with these labels."),
                    "nodes": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Only these nodes, in this order; empty: every node of the DaemonSet, by name."},
                    "maxUnavailable": int32("Nodes upgraded at once. Default 1."),
                    "paused": {"type": "boolean", "description": "No node starts while set; a node not yet evicted goes back to pending (uncordoned if the rollout cordoned it), one already evicted finishes."},
                    "waitLimit": string("How long an ambiguous wait (a new pod not Ready, replicas not healthy again) may last before the node and the rollout fail, the node left cordoned. A Go duration; default 10m."),
                    "consumers": described_ref(&format!("{name}ConsumerPods"), "Pods evicted from a node before its data-plane pod."),
                    "replicaGuards": list_map(&format!("{name}ReplicaGuard"), "name", "What must hold of the engine's replicas before a node goes, and after it came back."),
                },
            }),
        ),
        (
            format!("{name}ConsumerPods"),
            json!({
                "description": "The pods evicted from a node before its data-plane pod (through the Eviction API).",
                "type": "object",
                "required": ["selector"],
                "properties": {
                    "namespaces": {"type": "array", "items": {"type": "string", "default": ""}, "description": "The namespaces to look in; empty: the rollout's own."},
                    "selector": selector("The pods' labels; must not be empty."),
                },
            }),
        ),
    ]
}

fn guards(name: &str) -> Vec<(String, Value)> {
    vec![
        (
            format!("{name}ReplicaGuard"),
            json!({
                "description": "One kind of replica object, and how many healthy replicas every volume with a replica on the node must keep on other nodes.",
                "type": "object",
                "required": ["name", "resource", "nodeField", "volumeField", "healthy"],
                "properties": {
                    "name": {"type": "string", "default": "", "description": "A name for messages."},
                    "resource": described_ref(&format!("{name}GuardedResource"), "The replica objects' group, version and resource (any namespace)."),
                    "nodeField": string("The dotted field naming a replica's node, e.g. spec.nodeID."),
                    "volumeField": string("The dotted field naming a replica's volume, e.g. spec.volumeName."),
                    "healthy": described_ref(&format!("{name}HealthRule"), "When a replica is healthy."),
                    "minHealthyElsewhere": int32("Healthy replicas each affected volume must keep on other nodes. Default 1."),
                },
            }),
        ),
        (
            format!("{name}GuardedResource"),
            json!({
                "description": "A group, version and resource.",
                "type": "object",
                "required": ["version", "resource"],
                "properties": {
                    "group": string("The API group; empty for the core group."),
                    "version": string("The version to read."),
                    "resource": string("The plural resource name."),
                },
            }),
        ),
        (
            format!("{name}HealthRule"),
            json!({
                "description": "A replica is healthy when field has value, or when the condition is True: one of the two.",
                "type": "object",
                "properties": {
                    "field": string("A dotted field, e.g. status.currentState."),
                    "value": string("The value field has when healthy, e.g. running."),
                    "condition": string("A condition type in status.conditions that is True when healthy, e.g. Ready."),
                },
            }),
        ),
    ]
}

fn status(name: &str) -> Vec<(String, Value)> {
    vec![
        (
            format!("{name}Status"),
            json!({
                "description": "How far a DataPlaneRollout is.",
                "type": "object",
                "properties": {
                    "observedGeneration": {"type": "integer", "format": "int64", "description": "The generation the status is about."},
                    "revision": string("The DaemonSet's newest ControllerRevision, the one being rolled out."),
                    "nodesTotal": int32("Selected nodes."),
                    "nodesUpgraded": int32("Selected nodes running the newest revision, their replicas healthy again."),
                    "conditions": {
                        "type": "array",
                        "description": "Running, Succeeded, Failed, Paused.",
                        "items": {"allOf": [reference(&format!("{META}.Condition"))], "default": {}},
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                    },
                    "nodes": list_map(&format!("{name}NodeStatus"), "name", "One entry per selected node, in rollout order."),
                },
            }),
        ),
        (
            format!("{name}NodeStatus"),
            json!({
                "description": "One node's step, and what holds it.",
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "default": "", "description": "The Node's name."},
                    "phase": string("Pending, Blocked, Cordoned, EvictingConsumers, Evicting, WaitingForPod, Rebuilding, Upgraded or Failed."),
                    "reason": string("Why, CamelCase."),
                    "message": string("For people."),
                    "since": described_ref(&format!("{META}.Time"), "Since when it is in that phase."),
                    "blockedBy": {"type": "array", "items": {"type": "string", "default": ""}, "description": "What holds it, each named."},
                    "cordonedByUs": {"type": "boolean", "description": "The rollout cordoned the node (an admin's own cordon is never undone)."},
                    "evictedPodUID": string("The data-plane pod evicted from it: at most once, by uid."),
                    "revision": string("The revision the node was upgraded to."),
                },
            }),
        ),
    ]
}
