//! What a DataPlaneRollout should do next, decided from what the cluster shows: a pure
//! function of the rollout, the observed DaemonSet, nodes, pods and replicas, and the time,
//! so every rule is unit-tested without a cluster. The controller writes the planned status
//! first (the intent: which node is cordoned by us, which pod is evicted) and only then sends
//! the actions, so a crash at any point resumes where it stopped and evicts a pod at most once.

use std::collections::BTreeSet;
use std::time::Duration;

use svm_api::dataplane::{DataPlaneRollout, NodeStatus, phases};

use crate::guards::{self, Replica};

/// A Node as the planner needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Its name.
    pub name: String,
    /// Its uid (the Events about it carry it: `kubectl describe node` finds them by it).
    pub uid: String,
    /// Its Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned, by anyone).
    pub unschedulable: bool,
    /// The rollout holding it (`namespace/name` in its claim annotation), if any.
    pub held_by: Option<String>,
}

/// A data-plane pod (one of the DaemonSet's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    /// Its uid: the eviction's precondition.
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The node it runs on.
    pub node: String,
    /// Its `controller-revision-hash`.
    pub revision: String,
    /// Ready.
    pub ready: bool,
    /// Being deleted.
    pub deleting: bool,
}

/// What the cluster shows for one rollout.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The DaemonSet's newest revision.
    pub revision: String,
    /// The selected nodes, in rollout order.
    pub nodes: Vec<NodeView>,
    /// The DaemonSet's pods.
    pub pods: Vec<PodView>,
    /// Consumer pods to evict, by node.
    pub consumers: Vec<PodView>,
    /// Every replica every guard reads.
    pub replicas: Vec<Replica>,
}

/// A write to the cluster, sent after the status saying it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Cordon the node (and write our claim on it).
    Cordon(String),
    /// Evict a pod through the Eviction API, with its uid as precondition.
    Evict {
        /// The node it runs on.
        node: String,
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// Its uid.
        uid: String,
    },
    /// Release our claim on the node, and uncordon it when we cordoned it (an admin's own
    /// cordon is kept).
    Release {
        /// The node.
        node: String,
        /// Whether the rollout cordoned it.
        uncordon: bool,
    },
}

/// The next status and the writes that get there.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// One entry per selected node.
    pub nodes: Vec<NodeStatus>,
    /// The writes, in order.
    pub actions: Vec<Action>,
}

/// What a node's step needs to know of the rollout and the cluster.
struct Context<'a> {
    rollout: &'a DataPlaneRollout,
    observed: &'a Observed,
    /// `namespace/name` of this rollout: what its claims say.
    owner: String,
    wait_limit: Duration,
    now: jiff::Timestamp,
}

/// The rollout's next step over every selected node, in order.
pub fn plan(rollout: &DataPlaneRollout, observed: &Observed, now: jiff::Timestamp) -> Plan {
    let context = Context {
        rollout,
        observed,
        owner: format!(
            "{}/{}",
            rollout.metadata.namespace.as_deref().unwrap_or_default(),
            rollout.metadata.name.as_deref().unwrap_or_default()
        ),
        // Defaulted and validated on create; a stored value that does not parse waits the
        // default.
        wait_limit: svm_registry::duration::go_duration(&rollout.spec.wait_limit)
            .unwrap_or(Duration::from_secs(600)),
        now,
    };
    let mut plan = Plan::default();
    // Nodes go in order: one that has not started holds the ones after it.
    let mut waiting_before: Option<String> = None;
    for node in &observed.nodes {
        let previous = rollout
            .status
            .nodes
            .iter()
            .find(|n| n.name == node.name)
            .cloned()
            .unwrap_or_else(|| pending(&node.name, now));
        let in_flight = in_flight(&plan.nodes, &rollout.status.nodes, &node.name);
        let (next, actions) = match &waiting_before {
            Some(earlier) if not_started(&previous.phase) && !context.runs_newest(&node.name) => {
                let blocker = format!("node {earlier} goes first");
                (
                    context.waiting(previous, phases::PENDING, "Queued", vec![blocker]),
                    Vec::new(),
                )
            }
            _ => context.step(node, previous, in_flight),
        };
        if waiting_before.is_none() && not_started(&next.phase) {
            waiting_before = Some(node.name.clone());
        }
        plan.nodes.push(next);
        plan.actions.extend(actions);
    }
    plan
}

fn not_started(phase: &str) -> bool {
    [phases::PENDING, phases::BLOCKED, ""].contains(&phase)
}

/// The nodes between their cordon and their upgrade: this pass's decisions for the nodes
/// before `node`, the stored ones for those after it.
fn in_flight(decided: &[NodeStatus], stored: &[NodeStatus], node: &str) -> BTreeSet<String> {
    let decided_names: BTreeSet<&str> = decided.iter().map(|n| n.name.as_str()).collect();
    decided
        .iter()
        .chain(
            stored
                .iter()
                .filter(|n| n.name != node && !decided_names.contains(n.name.as_str())),
        )
        .filter(|n| is_in_flight(&n.phase))
        .map(|n| n.name.clone())
        .collect()
}

/// A node between its cordon and its upgrade (a failed one included: it stays cordoned).
pub(crate) fn is_in_flight(phase: &str) -> bool {
    [
        phases::CORDONED,
        phases::EVICTING_CONSUMERS,
        phases::EVICTING,
        phases::WAITING_FOR_POD,
        phases::REBUILDING,
        phases::FAILED,
    ]
    .contains(&phase)
}

fn pending(name: &str, now: jiff::Timestamp) -> NodeStatus {
    NodeStatus {
        name: name.to_string(),
        phase: phases::PENDING.into(),
        since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
        ..Default::default()
    }
}

impl Context<'_> {
    fn step(
        &self,
        node: &NodeView,
        status: NodeStatus,
        in_flight: BTreeSet<String>,
    ) -> (NodeStatus, Vec<Action>) {
        let (next, actions) = match status.phase.as_str() {
            phases::UPGRADED if self.runs_newest(&node.name) => (status, Vec::new()),
            phases::UPGRADED | phases::PENDING | phases::BLOCKED | "" => {
                self.start(node, status, &in_flight)
            }
            phases::FAILED => self.recover(node, status),
            _ if self.rollout.spec.paused && status.evicted_pod_uid.is_empty() => {
                self.back_to_pending(status)
            }
            _ => self.go_on(node, status),
        };
        self.settle(node, next, actions)
    }

    /// The node's cordon and claim made to agree with its phase: a node in flight is cordoned
    /// and ours, one that is not is released. Both are rechecked on every pass, so a crash
    /// between the status write and the cluster write (or someone's uncordon) is mended;
    /// `cordonedByUs` stays until the release is seen, so it is never forgotten half-way.
    fn settle(
        &self,
        node: &NodeView,
        mut next: NodeStatus,
        mut actions: Vec<Action>,
    ) -> (NodeStatus, Vec<Action>) {
        let ours = node.held_by.as_deref() == Some(self.owner.as_str());
        if next.phase == phases::FAILED {
            // Left as it is, for a person to decide.
        } else if is_in_flight(&next.phase) {
            let cordoned = actions.iter().any(|a| matches!(a, Action::Cordon(_)));
            if !cordoned && (!node.unschedulable || !ours) {
                actions.insert(0, Action::Cordon(node.name.clone()));
            }
        } else if ours {
            actions.push(Action::Release {
                node: node.name.clone(),
                uncordon: next.cordoned_by_us,
            });
        } else {
            next.cordoned_by_us = false;
        }
        (next, actions)
    }

    /// The next step of a node between its cordon and its upgrade.
    fn go_on(&self, node: &NodeView, status: NodeStatus) -> (NodeStatus, Vec<Action>) {
        match status.phase.as_str() {
            phases::CORDONED | phases::EVICTING_CONSUMERS => self.evict_consumers(node, status),
            phases::EVICTING => self.evict_data_plane(node, status),
            phases::WAITING_FOR_POD => self.wait_for_pod(node, status),
            _ => self.wait_for_rebuild(node, status),
        }
    }

    /// Whether the node runs a Ready pod of the newest revision.
    fn runs_newest(&self, node: &str) -> bool {
        self.observed.pods.iter().any(|p| {
            p.node == node && p.revision == self.observed.revision && p.ready && !p.deleting
        })
    }

    /// A pending node: already up to date, or held (what holds it named), or cordoned now.
    fn start(
        &self,
        node: &NodeView,
        status: NodeStatus,
        in_flight: &BTreeSet<String>,
    ) -> (NodeStatus, Vec<Action>) {
        if self.runs_newest(&node.name) {
            let revision = self.observed.revision.clone();
            return (
                self.moved(status, phases::UPGRADED, "UpToDate", "", revision),
                Vec::new(),
            );
        }
        if self.rollout.spec.paused {
            let blocker = "the rollout is paused (spec.paused)".to_string();
            return (
                self.waiting(status, phases::PENDING, "Paused", vec![blocker]),
                Vec::new(),
            );
        }
        let max = usize::try_from(self.rollout.spec.max_unavailable()).unwrap_or(1);
        if in_flight.len() >= max {
            let blocker = format!(
                "{} node(s) in flight, spec.maxUnavailable {max}",
                in_flight.len()
            );
            return (
                self.waiting(status, phases::PENDING, "Queued", vec![blocker]),
                Vec::new(),
            );
        }
        let blockers = self.preflight(node, in_flight);
        if !blockers.is_empty() {
            return (
                self.waiting(status, phases::BLOCKED, "PreflightBlocked", blockers),
                Vec::new(),
            );
        }
        // Still cordoned by us from before (its release not seen yet) counts as ours.
        let ours_already =
            status.cordoned_by_us && node.held_by.as_deref() == Some(self.owner.as_str());
        let mut next = self.moved(status, phases::CORDONED, "Cordoned", "", String::new());
        next.cordoned_by_us = !node.unschedulable || ours_already;
        (next, vec![Action::Cordon(node.name.clone())])
    }

    /// What holds the node before anything is done to it.
    fn preflight(&self, node: &NodeView, in_flight: &BTreeSet<String>) -> Vec<String> {
        let mut blockers = Vec::new();
        if !node.ready {
            blockers.push(format!("node {}: not Ready", node.name));
        }
        if let Some(holder) = node.held_by.as_ref().filter(|h| **h != self.owner) {
            blockers.push(format!(
                "node {}: held by DataPlaneRollout {holder}",
                node.name
            ));
        }
        // Down while this node goes: itself, this rollout's nodes in flight, and any node
        // another rollout holds (its engine may be restarting, its replicas rebuilding).
        let mut down = in_flight.clone();
        down.insert(node.name.clone());
        down.extend(
            self.observed
                .nodes
                .iter()
                .filter(|n| n.held_by.as_ref().is_some_and(|h| *h != self.owner))
                .map(|n| n.name.clone()),
        );
        let guards = &self.rollout.spec.replica_guards;
        blockers.extend(
            guards::shortfalls(&node.name, &down, guards, &self.observed.replicas)
                .iter()
                .map(ToString::to_string),
        );
        blockers
    }

    /// A failed node stays as it is until what it waited for happens after all (a person
    /// fixed the pod or the replicas): then it finishes as any other.
    fn recover(&self, node: &NodeView, status: NodeStatus) -> (NodeStatus, Vec<Action>) {
        let affected = guards::affected(&node.name, &self.observed.replicas);
        if self.runs_newest(&node.name)
            && guards::unrebuilt(&affected, &self.observed.replicas).is_empty()
        {
            let revision = self.observed.revision.clone();
            let next = self.moved(status, phases::UPGRADED, "Recovered", "", revision);
            return (next, Vec::new());
        }
        (status, Vec::new())
    }

    fn back_to_pending(&self, status: NodeStatus) -> (NodeStatus, Vec<Action>) {
        let next = self.moved(status, phases::PENDING, "Paused", "", String::new());
        (next, Vec::new())
    }

    fn evict_consumers(&self, node: &NodeView, status: NodeStatus) -> (NodeStatus, Vec<Action>) {
        let left: Vec<&PodView> = self
            .observed
            .consumers
            .iter()
            .filter(|p| p.node == node.name && !p.deleting)
            .collect();
        if left.is_empty() {
            return self.evict_data_plane(node, status);
        }
        let actions = left.iter().map(|p| evict(p)).collect();
        let names = left.iter().map(|p| format!("pod {}", p.name)).collect();
        (
            self.waiting(
                status,
                phases::EVICTING_CONSUMERS,
                "EvictingConsumers",
                names,
            ),
            actions,
        )
    }

    /// The old data-plane pod evicted once (its uid written first); waiting while it goes.
    fn evict_data_plane(
        &self,
        node: &NodeView,
        mut status: NodeStatus,
    ) -> (NodeStatus, Vec<Action>) {
        let old = self
            .observed
            .pods
            .iter()
            .find(|p| p.node == node.name && p.revision != self.observed.revision);
        match old {
            None => self.wait_for_pod(node, status),
            Some(pod) if pod.deleting => {
                status.evicted_pod_uid = pod.uid.clone();
                self.wait_for_pod(node, status)
            }
            Some(pod)
                if !status.evicted_pod_uid.is_empty() && status.evicted_pod_uid != pod.uid =>
            {
                // The pod we evicted is gone and an old one came back (the DaemonSet made it
                // before the new revision): evict that one too, by its own uid.
                status.evicted_pod_uid = pod.uid.clone();
                (status, vec![evict(pod)])
            }
            Some(pod) => {
                let mut next = self.waiting(status, phases::EVICTING, "Evicting", Vec::new());
                next.evicted_pod_uid = pod.uid.clone();
                (next, vec![evict(pod)])
            }
        }
    }

    fn wait_for_pod(&self, node: &NodeView, status: NodeStatus) -> (NodeStatus, Vec<Action>) {
        if self.runs_newest(&node.name) {
            let next = self.moved(status, phases::REBUILDING, "PodReady", "", String::new());
            return self.wait_for_rebuild(node, next);
        }
        let blocker = format!(
            "node {}: no Ready pod of revision {} yet",
            node.name, self.observed.revision
        );
        self.or_fail(
            status,
            phases::WAITING_FOR_POD,
            "WaitingForPod",
            vec![blocker],
        )
    }

    fn wait_for_rebuild(&self, node: &NodeView, status: NodeStatus) -> (NodeStatus, Vec<Action>) {
        let affected = guards::affected(&node.name, &self.observed.replicas);
        let left: Vec<String> = guards::unrebuilt(&affected, &self.observed.replicas)
            .iter()
            .map(ToString::to_string)
            .collect();
        if !left.is_empty() {
            return self.or_fail(status, phases::REBUILDING, "Rebuilding", left);
        }
        let revision = self.observed.revision.clone();
        let next = self.moved(status, phases::UPGRADED, "Upgraded", "", revision);
        (next, Vec::new())
    }

    /// Waiting in `phase`; past the wait limit, Failed (the node left cordoned for a person).
    fn or_fail(
        &self,
        status: NodeStatus,
        phase: &str,
        reason: &str,
        blockers: Vec<String>,
    ) -> (NodeStatus, Vec<Action>) {
        let since = status.since.as_ref().map_or(self.now, |t| t.0);
        let waited = self.now.duration_since(since).unsigned_abs();
        if status.phase == phase && waited > self.wait_limit {
            let message = format!(
                "waited past spec.waitLimit ({}); the node is left as it is for a person to decide: {}",
                self.rollout.spec.wait_limit,
                blockers.join("; ")
            );
            let mut next = self.moved(
                status,
                phases::FAILED,
                "WaitLimitExceeded",
                &message,
                String::new(),
            );
            next.blocked_by = blockers;
            return (next, Vec::new());
        }
        (self.waiting(status, phase, reason, blockers), Vec::new())
    }

    /// `status` in `phase`, its `since` moved only when the phase changes.
    fn waiting(
        &self,
        status: NodeStatus,
        phase: &str,
        reason: &str,
        blockers: Vec<String>,
    ) -> NodeStatus {
        let mut next = self.moved(status, phase, reason, &blockers.join("; "), String::new());
        next.blocked_by = blockers;
        next
    }

    fn moved(
        &self,
        mut status: NodeStatus,
        phase: &str,
        reason: &str,
        message: &str,
        revision: String,
    ) -> NodeStatus {
        if status.phase != phase {
            status.since = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                self.now,
            ));
        }
        status.phase = phase.into();
        status.reason = reason.into();
        status.message = message.into();
        status.blocked_by.clear();
        if !revision.is_empty() {
            status.revision = revision;
        }
        status
    }
}

fn evict(pod: &PodView) -> Action {
    Action::Evict {
        node: pod.node.clone(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    }
}

#[cfg(test)]
mod tests;
