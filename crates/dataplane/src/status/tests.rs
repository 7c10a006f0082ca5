use super::*;

fn node(name: &str, phase: &str) -> NodeStatus {
    NodeStatus {
        name: name.into(),
        phase: phase.into(),
        reason: phase.into(),
        ..Default::default()
    }
}

fn rollout() -> DataPlaneRollout {
    let mut rollout = DataPlaneRollout::default();
    rollout.metadata.generation = Some(3);
    rollout
}

fn condition<'a>(status: &'a DataPlaneRolloutStatus, type_: &str) -> (&'a str, &'a str) {
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .expect(type_);
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn counts_and_conditions_follow_the_nodes() {
    let now = jiff::Timestamp::UNIX_EPOCH;
    let nodes = vec![node("n1", phases::UPGRADED), node("n2", phases::REBUILDING)];
    let running = summarize(&rollout(), "r2", nodes, now);
    assert_eq!((running.nodes_total, running.nodes_upgraded), (2, 1));
    assert_eq!(running.observed_generation, Some(3));
    assert_eq!(condition(&running, RUNNING), ("True", "RollingOut"));
    assert_eq!(
        condition(&running, SUCCEEDED),
        ("False", "NotAllNodesUpgraded")
    );
    let message = &running
        .conditions
        .iter()
        .find(|c| c.type_ == RUNNING)
        .expect("Running")
        .message;
    assert_eq!(message, "node n2: Rebuilding (Rebuilding)");

    let done = vec![node("n1", phases::UPGRADED), node("n2", phases::UPGRADED)];
    let succeeded = summarize(&rollout(), "r2", done, now);
    assert_eq!(
        condition(&succeeded, SUCCEEDED),
        ("True", "AllNodesUpgraded")
    );
    assert_eq!(condition(&succeeded, RUNNING).0, "False");

    let mut failed_node = node("n2", phases::FAILED);
    failed_node.message = "waited past spec.waitLimit".into();
    let failed = summarize(
        &rollout(),
        "r2",
        vec![node("n1", phases::UPGRADED), failed_node],
        now,
    );
    assert_eq!(condition(&failed, FAILED), ("True", "NodeFailed"));
    assert_eq!(condition(&failed, RUNNING).0, "False");

    let mut paused = rollout();
    paused.spec.paused = true;
    let idle = summarize(&paused, "r2", vec![node("n1", phases::PENDING)], now);
    assert_eq!(condition(&idle, PAUSED), ("True", "Paused"));
    assert_eq!(condition(&idle, RUNNING).0, "False");
    // Paused with a node already evicted: it finishes, so the rollout still runs.
    let finishing = summarize(
        &paused,
        "r2",
        vec![node("n1", phases::WAITING_FOR_POD)],
        now,
    );
    assert_eq!(condition(&finishing, RUNNING).0, "True");
}

#[test]
fn a_refusal_fails_the_rollout_and_keeps_the_nodes_as_they_were() {
    let mut r = rollout();
    r.status.nodes = vec![node("n1", phases::UPGRADED)];
    let refusal = Refused {
        reason: "NotOnDelete",
        message: "set OnDelete".into(),
    };
    let status = refused(&r, &refusal, jiff::Timestamp::UNIX_EPOCH);
    assert_eq!(condition(&status, FAILED), ("True", "NotOnDelete"));
    assert_eq!(status.nodes, r.status.nodes);
}

#[test]
fn events_are_for_a_new_phase_or_a_new_blocker_only() {
    let mut blocked = node("n1", phases::BLOCKED);
    blocked.blocked_by = vec!["vol-1".into()];
    let before = vec![blocked.clone(), node("n2", phases::PENDING)];
    assert!(changes(&before, &before).is_empty());
    let mut other = blocked.clone();
    other.blocked_by = vec!["vol-2".into()];
    let after = vec![other, node("n2", phases::PENDING)];
    let said = changes(&before, &after);
    assert_eq!(said.len(), 1);
    assert!(said[0].warning);
    let cordoned = changes(&before, &[node("n1", phases::CORDONED)]);
    assert_eq!(cordoned[0].message, "node n1: Cordoned");
    assert!(!cordoned[0].warning);
}
