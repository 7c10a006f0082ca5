//! The DataPlaneRollout types, as served and stored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta, Time};
use serde::{Deserialize, Serialize};

use crate::PROJECT;

/// The kind.
pub const KIND: &str = "DataPlaneRollout";
/// `spec.waitLimit` when unset: how long an ambiguous wait may last before the node fails.
pub const DEFAULT_WAIT_LIMIT: &str = "10m";
/// The one update strategy a rolled-out DaemonSet may have: its pods change only when deleted.
pub const ON_DELETE: &str = "OnDelete";

/// Condition types of a rollout.
pub const RUNNING: &str = "Running";
/// Every selected node runs the newest revision.
pub const SUCCEEDED: &str = "Succeeded";
/// A node failed (its wait outlived `spec.waitLimit`, or the rollout is refused).
pub const FAILED: &str = "Failed";
/// `spec.paused`: no node starts.
pub const PAUSED: &str = "Paused";

/// A rollout of a data-plane DaemonSet over its nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataPlaneRollout {
    /// Standard object metadata (namespaced: the DaemonSet's namespace).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The DaemonSet, the nodes, and what gates each node.
    #[serde(default)]
    pub spec: DataPlaneRolloutSpec,
    /// How far the rollout is, node by node, as the controller writes it.
    #[serde(default)]
    pub status: DataPlaneRolloutStatus,
}

/// What to roll out, where, and what must hold before a node goes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataPlaneRolloutSpec {
    /// The DaemonSet in the rollout's namespace; its `updateStrategy` must be `OnDelete`.
    /// Immutable.
    #[serde(default)]
    pub daemon_set: String,
    /// Only nodes with these labels (and running one of the DaemonSet's pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Only these nodes, in this order; empty: every node of the DaemonSet (by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Nodes upgraded at once (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<i32>,
    /// No node starts while set; a node not yet evicted goes back to pending.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// How long an ambiguous wait (a new pod not Ready, replicas not healthy again) may last
    /// before the node fails (Go duration, default 10m).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub wait_limit: String,
    /// Pods evicted from a node before its data-plane pod (the consumers of its volumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumers: Option<ConsumerPods>,
    /// What must hold of the engine's replicas before a node goes, and after it came back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_guards: Vec<ReplicaGuard>,
}

/// The pods evicted from a node before its data-plane pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerPods {
    /// The namespaces to look in; empty: the rollout's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// The pods' labels.
    #[serde(default)]
    pub selector: LabelSelector,
}

/// One kind of replica object and what "healthy elsewhere" means for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaGuard {
    /// A name for messages (`guard replicas: volume vol-1 has 0 healthy replicas elsewhere`).
    #[serde(default)]
    pub name: String,
    /// The replica objects' resource.
    #[serde(default)]
    pub resource: GuardedResource,
    /// The field that names a replica's node, dotted (`spec.nodeID`).
    #[serde(default)]
    pub node_field: String,
    /// The field that names a replica's volume, dotted (`spec.volumeName`).
    #[serde(default)]
    pub volume_field: String,
    /// When a replica is healthy.
    #[serde(default)]
    pub healthy: HealthRule,
    /// Healthy replicas every volume with a replica on the node must keep on other nodes
    /// (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_healthy_elsewhere: Option<i32>,
}

/// A group, version and resource of replica objects (any namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardedResource {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The version to read.
    #[serde(default)]
    pub version: String,
    /// The plural resource name.
    #[serde(default)]
    pub resource: String,
}

/// A replica is healthy when a field has a value, or when a condition is True: one of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    /// A dotted field (`status.currentState`), with `value`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// The value `field` has when healthy (`running`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Or: a condition type in `status.conditions` that is True when healthy (`Ready`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub condition: String,
}

/// How far a rollout is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataPlaneRolloutStatus {
    /// The generation this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The DaemonSet's newest ControllerRevision, the one being rolled out.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// Selected nodes.
    #[serde(default)]
    pub nodes_total: i32,
    /// Selected nodes running the newest revision, their replicas healthy again.
    #[serde(default)]
    pub nodes_upgraded: i32,
    /// Running, Succeeded, Failed, Paused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One entry per selected node, in rollout order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeStatus>,
}

/// One node's step, and what holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The Node's name.
    #[serde(default)]
    pub name: String,
    /// Pending, Cordoned, EvictingConsumers, Evicting, WaitingForPod, Rebuilding, Upgraded,
    /// Blocked or Failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Why it is in that phase, CamelCase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// For people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Since when it is in that phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// What holds it, each named (`volume vol-1: 0 healthy replicas on other nodes, 1
    /// needed`, `PodDisruptionBudget ns/name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<String>,
    /// The rollout cordoned the node (an admin's own cordon is never undone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cordoned_by_us: bool,
    /// The data-plane pod evicted from it (at most once, by uid).
    #[serde(
        default,
        rename = "evictedPodUID",
        skip_serializing_if = "String::is_empty"
    )]
    pub evicted_pod_uid: String,
    /// The revision the node was upgraded to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
}

/// Node phases.
pub mod phases {
    /// Not started.
    pub const PENDING: &str = "Pending";
    /// Waiting for what `blockedBy` names; nothing done to the node.
    pub const BLOCKED: &str = "Blocked";
    /// Cordoned: no new pod lands on it.
    pub const CORDONED: &str = "Cordoned";
    /// Its consumer pods are being evicted.
    pub const EVICTING_CONSUMERS: &str = "EvictingConsumers";
    /// Its data-plane pod is being evicted.
    pub const EVICTING: &str = "Evicting";
    /// Waiting for a pod of the new revision Ready on it.
    pub const WAITING_FOR_POD: &str = "WaitingForPod";
    /// Waiting for its volumes' replicas to be healthy again.
    pub const REBUILDING: &str = "Rebuilding";
    /// Done: the new revision runs, replicas healthy, uncordoned.
    pub const UPGRADED: &str = "Upgraded";
    /// A wait outlived the limit; left cordoned for a person.
    pub const FAILED: &str = "Failed";
    /// Every phase, for validation.
    pub const ALL: &[&str] = &[
        PENDING,
        BLOCKED,
        CORDONED,
        EVICTING_CONSUMERS,
        EVICTING,
        WAITING_FOR_POD,
        REBUILDING,
        UPGRADED,
        FAILED,
    ];
}

impl k8s_openapi::Resource for DataPlaneRollout {
    const API_VERSION: &'static str = "storage.svm-apiserver.io/v1alpha1";
    const GROUP: &'static str = PROJECT.name;
    const KIND: &'static str = KIND;
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "dataplanerollouts";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for DataPlaneRollout {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
