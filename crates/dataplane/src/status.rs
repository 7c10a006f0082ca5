//! A rollout's status from its nodes' steps: the counts, the revision, the conditions
//! (Running, Succeeded, Failed, Paused), and what changed since the stored status, for Events.

use svm_api::conditions;
use svm_api::dataplane::{
    DataPlaneRollout, DataPlaneRolloutStatus, FAILED, NodeStatus, PAUSED, RUNNING, SUCCEEDED,
    phases,
};

use crate::cluster::Refused;

/// The status after a pass that planned `nodes` for `revision`.
pub(crate) fn summarize(
    rollout: &DataPlaneRollout,
    revision: &str,
    nodes: Vec<NodeStatus>,
    now: jiff::Timestamp,
) -> DataPlaneRolloutStatus {
    let mut status = DataPlaneRolloutStatus {
        observed_generation: rollout.metadata.generation,
        revision: revision.to_string(),
        nodes_total: count(nodes.len()),
        nodes_upgraded: count(nodes.iter().filter(|n| n.phase == phases::UPGRADED).count()),
        conditions: rollout.status.conditions.clone(),
        nodes,
    };
    for (type_, on, reason, message) in verdicts(&status, rollout.spec.paused) {
        let generation = rollout.metadata.generation;
        let conditions = &mut status.conditions;
        conditions::set(conditions, type_, on, reason, &message, generation, now);
    }
    status
}

/// Each condition's status, reason and message for the nodes as planned.
fn verdicts(
    status: &DataPlaneRolloutStatus,
    paused: bool,
) -> [(&'static str, bool, &'static str, String); 4] {
    let failed = status.nodes.iter().find(|n| n.phase == phases::FAILED);
    let done = status.nodes_upgraded == status.nodes_total;
    let busy = status.nodes.iter().any(|n| is_busy(&n.phase));
    let failure = match failed {
        Some(node) => (
            FAILED,
            true,
            "NodeFailed",
            format!("node {}: {}", node.name, node.message),
        ),
        None => (FAILED, false, "NoNodeFailed", String::new()),
    };
    let upgraded = format!(
        "{} of {} nodes run revision {}",
        status.nodes_upgraded, status.nodes_total, status.revision
    );
    let pause = if paused {
        (
            PAUSED,
            true,
            "Paused",
            "spec.paused is set: no node starts".to_string(),
        )
    } else {
        (PAUSED, false, "NotPaused", String::new())
    };
    let running = !done && failed.is_none() && (!paused || busy);
    let (reason, message) = running_reason(status, running);
    [
        failure,
        if done && failed.is_none() {
            (SUCCEEDED, true, "AllNodesUpgraded", upgraded)
        } else {
            (SUCCEEDED, false, "NotAllNodesUpgraded", upgraded)
        },
        pause,
        (RUNNING, running, reason, message),
    ]
}

/// Why Running is what it is, and which node is at work (or waiting).
fn running_reason(status: &DataPlaneRolloutStatus, running: bool) -> (&'static str, String) {
    if !running {
        return ("NotRunning", String::new());
    }
    let current = status
        .nodes
        .iter()
        .find(|n| is_busy(&n.phase) || n.phase == phases::BLOCKED)
        .or_else(|| status.nodes.iter().find(|n| n.phase != phases::UPGRADED));
    let message = current.map_or_else(String::new, |n| {
        let detail = if n.message.is_empty() {
            &n.reason
        } else {
            &n.message
        };
        format!("node {}: {} ({detail})", n.name, n.phase)
    });
    ("RollingOut", message)
}

/// A node between its cordon and its upgrade, at work (in flight and not failed).
fn is_busy(phase: &str) -> bool {
    crate::plan::is_in_flight(phase) && phase != phases::FAILED
}

/// The status of a rollout the cluster refuses: Failed with the reason, nothing else moved
/// (the nodes' entries as they were).
pub(crate) fn refused(
    rollout: &DataPlaneRollout,
    refusal: &Refused,
    now: jiff::Timestamp,
) -> DataPlaneRolloutStatus {
    let mut status = rollout.status.clone();
    status.observed_generation = rollout.metadata.generation;
    let generation = rollout.metadata.generation;
    let conditions = &mut status.conditions;
    conditions::set(
        conditions,
        FAILED,
        true,
        refusal.reason,
        &refusal.message,
        generation,
        now,
    );
    conditions::set(
        conditions,
        RUNNING,
        false,
        refusal.reason,
        "",
        generation,
        now,
    );
    conditions::set(
        conditions,
        SUCCEEDED,
        false,
        refusal.reason,
        "",
        generation,
        now,
    );
    status
}

/// A node's change worth an Event: its phase moved, or what holds it changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    /// The node.
    pub node: String,
    /// A Warning (blocked, failed) or Normal.
    pub warning: bool,
    /// The node's reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

/// What changed from `before` to `after`, node by node.
pub(crate) fn changes(before: &[NodeStatus], after: &[NodeStatus]) -> Vec<Change> {
    after
        .iter()
        .filter(|next| {
            before
                .iter()
                .find(|b| b.name == next.name)
                .is_none_or(|b| b.phase != next.phase || b.blocked_by != next.blocked_by)
        })
        .filter(|next| next.phase != phases::PENDING || next.reason == "Paused")
        .map(|next| Change {
            node: next.name.clone(),
            warning: [phases::BLOCKED, phases::FAILED].contains(&next.phase.as_str()),
            reason: next.reason.clone(),
            message: describe(next),
        })
        .collect()
}

fn describe(node: &NodeStatus) -> String {
    let mut message = format!("node {}: {}", node.name, node.phase);
    if !node.message.is_empty() {
        message.push_str(": ");
        message.push_str(&node.message);
    }
    message
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests;
