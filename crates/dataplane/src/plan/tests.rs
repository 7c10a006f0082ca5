use super::*;
use crate::testing::{longhorn_guard, replica};
use svm_api::dataplane::DataPlaneRolloutSpec;

const NEW: &str = "rev-2";
const OLD: &str = "rev-1";

fn rollout(max_unavailable: i32) -> DataPlaneRollout {
    let mut rollout = DataPlaneRollout {
        spec: DataPlaneRolloutSpec {
            daemon_set: "engine".into(),
            max_unavailable: Some(max_unavailable),
            wait_limit: "10m".into(),
            replica_guards: vec![longhorn_guard(1)],
            ..Default::default()
        },
        ..Default::default()
    };
    rollout.metadata.namespace = Some("storage".into());
    rollout.metadata.name = Some("engines".into());
    rollout
}

fn node(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        ready: true,
        ..Default::default()
    }
}

fn pod(node: &str, revision: &str, ready: bool) -> PodView {
    PodView {
        uid: format!("uid-{node}-{revision}"),
        namespace: "storage".into(),
        name: format!("engine-{node}-{revision}"),
        node: node.into(),
        revision: revision.into(),
        ready,
        deleting: false,
    }
}

/// Three nodes on the old revision; vol-1 on every node.
fn cluster() -> Observed {
    let names = ["n1", "n2", "n3"];
    Observed {
        revision: NEW.into(),
        nodes: names.iter().map(|n| node(n)).collect(),
        pods: names.iter().map(|n| pod(n, OLD, true)).collect(),
        consumers: Vec::new(),
        replicas: names.iter().map(|n| replica("vol-1", n, true)).collect(),
    }
}

fn at(minutes: i64) -> jiff::Timestamp {
    jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_mins(minutes)
}

fn phases_of(plan: &Plan) -> Vec<&str> {
    plan.nodes.iter().map(|n| n.phase.as_str()).collect()
}

/// Applies `plan` as the controller would: its statuses stored.
fn stored(mut rollout: DataPlaneRollout, plan: &Plan) -> DataPlaneRollout {
    rollout.status.nodes = plan.nodes.clone();
    rollout
}

#[test]
fn a_node_goes_through_cordon_eviction_new_pod_rebuild_and_uncordon() {
    let mut observed = cluster();
    let first = plan(&rollout(1), &observed, at(0));
    assert_eq!(phases_of(&first), ["Cordoned", "Pending", "Pending"]);
    assert_eq!(first.actions, [Action::Cordon("n1".into())]);
    assert!(first.nodes[0].cordoned_by_us);

    let r = stored(rollout(1), &first);
    observed.nodes[0].unschedulable = true;
    observed.nodes[0].held_by = Some("storage/engines".into());
    let evicting = plan(&r, &observed, at(1));
    assert_eq!(evicting.nodes[0].phase, "Evicting");
    assert_eq!(evicting.nodes[0].evicted_pod_uid, "uid-n1-rev-1");
    assert_eq!(
        evicting.actions,
        [Action::Evict {
            node: "n1".into(),
            namespace: "storage".into(),
            name: "engine-n1-rev-1".into(),
            uid: "uid-n1-rev-1".into()
        }]
    );

    // The old pod is gone, its replica down; the new one not Ready yet.
    let r = stored(r, &evicting);
    observed.pods[0] = pod("n1", NEW, false);
    observed.replicas[0].healthy = false;
    let waiting = plan(&r, &observed, at(2));
    assert_eq!(waiting.nodes[0].phase, "WaitingForPod");
    assert!(
        waiting.actions.is_empty(),
        "evicted once: {:?}",
        waiting.actions
    );

    let r = stored(r, &waiting);
    observed.pods[0].ready = true;
    let rebuilding = plan(&r, &observed, at(3));
    assert_eq!(rebuilding.nodes[0].phase, "Rebuilding");
    assert_eq!(
        rebuilding.nodes[0].blocked_by,
        ["replicas volume vol-1: a replica on n1 is not healthy yet"]
    );
    // Node 2 waits for node 1's rebuild (maxUnavailable 1).
    assert_eq!(rebuilding.nodes[1].phase, "Pending");

    let r = stored(r, &rebuilding);
    observed.replicas[0].healthy = true;
    let done = plan(&r, &observed, at(4));
    assert_eq!(done.nodes[0].phase, "Upgraded");
    assert_eq!(done.nodes[0].revision, NEW);
    // Remembered as ours until its release is seen.
    assert!(done.nodes[0].cordoned_by_us);
    assert_eq!(
        done.actions,
        [
            Action::Release {
                node: "n1".into(),
                uncordon: true
            },
            Action::Cordon("n2".into())
        ]
    );
}

/// The seed's failing layout: a single-replica volume on n1 holds n1, named; n1 is not
/// cordoned; adding a replica elsewhere lets it go on by itself.
#[test]
fn a_single_replica_volume_blocks_its_node_until_a_replica_is_added_elsewhere() {
    let mut observed = cluster();
    observed.replicas.push(replica("vol-only", "n1", true));
    let blocked = plan(&rollout(1), &observed, at(0));
    assert_eq!(blocked.nodes[0].phase, "Blocked");
    assert_eq!(
        blocked.nodes[0].blocked_by,
        ["replicas volume vol-only: 0 healthy replicas on other nodes, 1 needed"]
    );
    // Nodes go in order: nothing is cordoned while n1 is held.
    assert!(blocked.actions.is_empty(), "{:?}", blocked.actions);
    assert_eq!(blocked.nodes[1].blocked_by, ["node n1 goes first"]);
    observed.replicas.push(replica("vol-only", "n3", true));
    let r = stored(rollout(1), &blocked);
    let going = plan(&r, &observed, at(1));
    assert_eq!(going.nodes[0].phase, "Cordoned");
}

#[test]
fn max_unavailable_bounds_the_nodes_in_flight_and_counts_their_replicas_as_down() {
    let observed = cluster();
    let two = plan(&rollout(2), &observed, at(0));
    assert_eq!(phases_of(&two), ["Cordoned", "Cordoned", "Pending"]);
    assert_eq!(two.nodes[2].reason, "Queued");
    assert_eq!(
        two.nodes[2].blocked_by,
        ["2 node(s) in flight, spec.maxUnavailable 2"]
    );
    // vol-1 has a replica on each node: with n1 and n2 down, n3's would be its last.
    let r = stored(rollout(3), &two);
    let third = plan(&r, &observed, at(1));
    assert_eq!(third.nodes[2].phase, "Blocked", "{:?}", third.nodes[2]);
}

#[test]
fn an_admins_cordon_is_kept_and_a_node_not_ready_waits() {
    let mut observed = cluster();
    observed.nodes[0].unschedulable = true;
    observed.nodes[1].ready = false;
    let first = plan(&rollout(2), &observed, at(0));
    assert!(!first.nodes[0].cordoned_by_us);
    assert_eq!(first.nodes[1].phase, "Blocked");
    assert_eq!(first.nodes[1].blocked_by, ["node n2: not Ready"]);
    // Walk n1 to the end: no Uncordon of the admin's cordon.
    let mut r = stored(rollout(2), &first);
    observed.nodes[0].held_by = Some("storage/engines".into());
    observed.pods[0] = pod("n1", NEW, true);
    for minute in 1..4 {
        let next = plan(&r, &observed, at(minute));
        assert!(!next.actions.contains(&Action::Release {
            node: "n1".into(),
            uncordon: true
        }));
        r = stored(r, &next);
    }
    assert_eq!(r.status.nodes[0].phase, "Upgraded");
}

#[test]
fn pause_sends_a_node_not_yet_evicted_back_and_lets_an_evicted_one_finish() {
    let mut observed = cluster();
    let first = plan(&rollout(2), &observed, at(0));
    for node in &mut observed.nodes[..2] {
        node.unschedulable = true;
        node.held_by = Some("storage/engines".into());
    }
    let mut r = stored(rollout(2), &first);
    r.status.nodes[1].evicted_pod_uid = "uid-n2-rev-1".into();
    r.status.nodes[1].phase = "Evicting".into();
    r.spec.paused = true;
    let paused = plan(&r, &observed, at(1));
    assert_eq!(paused.nodes[0].phase, "Pending");
    assert_eq!(paused.nodes[0].reason, "Paused");
    // Once back, it says why it waits, pass after pass.
    let again = plan(&stored(r.clone(), &paused), &observed, at(2));
    assert_eq!(again.nodes[0].reason, "Paused");
    assert_eq!(
        again.nodes[0].blocked_by,
        ["the rollout is paused (spec.paused)"]
    );
    assert!(paused.actions.contains(&Action::Release {
        node: "n1".into(),
        uncordon: true
    }));
    assert_eq!(paused.nodes[1].phase, "Evicting");
    assert_eq!(paused.nodes[2].phase, "Pending");
    assert!(
        !paused
            .actions
            .iter()
            .any(|a| matches!(a, Action::Cordon(_)))
    );
}

#[test]
fn a_new_pod_never_ready_fails_the_node_past_the_wait_limit_left_cordoned() {
    let mut observed = cluster();
    let r = stored(rollout(1), &plan(&rollout(1), &observed, at(0)));
    let r = stored(r.clone(), &plan(&r, &observed, at(1)));
    observed.pods[0] = pod("n1", NEW, false);
    let r = stored(r.clone(), &plan(&r, &observed, at(2)));
    assert_eq!(r.status.nodes[0].phase, "WaitingForPod");
    let still = plan(&r, &observed, at(11));
    assert_eq!(still.nodes[0].phase, "WaitingForPod");
    let failed = plan(&r, &observed, at(13));
    assert_eq!(failed.nodes[0].phase, "Failed");
    assert_eq!(failed.nodes[0].reason, "WaitLimitExceeded");
    assert!(
        failed.actions.is_empty(),
        "left cordoned: {:?}",
        failed.actions
    );
    // A failed node stays in flight: no other node starts.
    assert_eq!(failed.nodes[1].phase, "Pending");
    let r = stored(r, &failed);
    assert_eq!(plan(&r, &observed, at(30)).nodes[0].phase, "Failed");
    // A person made the pod start: the node finishes as any other, then the next starts.
    observed.pods[0] = pod("n1", NEW, true);
    let recovered = plan(&r, &observed, at(31));
    assert_eq!(recovered.nodes[0].phase, "Upgraded");
    assert_eq!(recovered.nodes[0].reason, "Recovered");
    assert_eq!(recovered.nodes[1].phase, "Cordoned");
}

#[test]
fn a_template_change_queues_upgraded_nodes_again() {
    let mut observed = cluster();
    observed.pods = ["n1", "n2", "n3"]
        .iter()
        .map(|n| pod(n, NEW, true))
        .collect();
    let first = plan(&rollout(1), &observed, at(0));
    assert_eq!(phases_of(&first), ["Upgraded", "Upgraded", "Upgraded"]);
    assert!(first.actions.is_empty());
    let r = stored(rollout(1), &first);
    observed.revision = "rev-3".into();
    let again = plan(&r, &observed, at(1));
    assert_eq!(phases_of(&again), ["Cordoned", "Pending", "Pending"]);
    assert_eq!(again.actions, [Action::Cordon("n1".into())]);
}

#[test]
fn consumers_are_evicted_before_the_data_plane_pod() {
    let mut observed = cluster();
    observed.consumers = vec![PodView {
        uid: "app-uid".into(),
        namespace: "apps".into(),
        name: "app-0".into(),
        node: "n1".into(),
        ..Default::default()
    }];
    let r = stored(rollout(1), &plan(&rollout(1), &observed, at(0)));
    observed.nodes[0].unschedulable = true;
    observed.nodes[0].held_by = Some("storage/engines".into());
    let consumers = plan(&r, &observed, at(1));
    assert_eq!(consumers.nodes[0].phase, "EvictingConsumers");
    assert_eq!(
        consumers.actions,
        [Action::Evict {
            node: "n1".into(),
            namespace: "apps".into(),
            name: "app-0".into(),
            uid: "app-uid".into()
        }]
    );
    observed.consumers.clear();
    let r = stored(r, &consumers);
    assert_eq!(plan(&r, &observed, at(2)).nodes[0].phase, "Evicting");
}

#[test]
fn a_node_held_by_another_rollout_waits_and_says_which() {
    let mut observed = cluster();
    observed.nodes[0].held_by = Some("storage/other".into());
    let first = plan(&rollout(1), &observed, at(0));
    assert_eq!(
        first.nodes[0].blocked_by,
        ["node n1: held by DataPlaneRollout storage/other"]
    );
    assert!(first.actions.is_empty());
    // Our own claim (left by a crash before the cordon's status) does not hold it.
    observed.nodes[0].held_by = Some("storage/engines".into());
    assert_eq!(
        plan(&rollout(1), &observed, at(1)).nodes[0].phase,
        "Cordoned"
    );
}

/// A crash between the status write and the cordon: the node is cordoned before anything
/// else; between the upgrade and the release: released on the next pass, and `cordonedByUs`
/// forgotten only once the release is seen.
#[test]
fn a_cordon_or_release_lost_in_a_crash_is_sent_again() {
    let mut observed = cluster();
    let first = plan(&rollout(1), &observed, at(0));
    let r = stored(rollout(1), &first);
    // The cordon never reached the node.
    let again = plan(&r, &observed, at(1));
    assert_eq!(again.nodes[0].phase, "Evicting");
    assert_eq!(again.actions[0], Action::Cordon("n1".into()));
    assert!(matches!(&again.actions[1], Action::Evict { name, .. } if name == "engine-n1-rev-1"));

    // Upgraded, the release lost: still ours and cordoned.
    let mut r = stored(r, &again);
    r.status.nodes[0].phase = "Upgraded".into();
    observed.nodes[0].unschedulable = true;
    observed.nodes[0].held_by = Some("storage/engines".into());
    observed.pods[0] = pod("n1", NEW, true);
    let release = plan(&r, &observed, at(2));
    assert!(release.actions.contains(&Action::Release {
        node: "n1".into(),
        uncordon: true
    }));
    assert!(release.nodes[0].cordoned_by_us);
    // Seen released: forgotten, nothing sent for n1.
    observed.nodes[0].unschedulable = false;
    observed.nodes[0].held_by = None;
    let r = stored(r, &release);
    let done = plan(&r, &observed, at(3));
    assert!(!done.nodes[0].cordoned_by_us);
    assert!(
        !done
            .actions
            .iter()
            .any(|a| matches!(a, Action::Release { .. }))
    );
}

/// Two rollouts on the same nodes: a node another rollout holds counts as down, so this one's
/// next node waits while that node's replicas are the only healthy ones elsewhere.
#[test]
fn a_node_held_by_another_rollout_counts_as_down_in_the_preflight() {
    let mut observed = cluster();
    observed.nodes.truncate(2);
    observed.pods.truncate(2);
    observed.replicas = vec![replica("vol-1", "n1", true), replica("vol-1", "n2", true)];
    // n1 already runs the new revision (the other rollout's work) but is still held by it.
    observed.pods[0] = pod("n1", NEW, true);
    observed.nodes[0].held_by = Some("storage/other".into());
    let first = plan(&rollout(1), &observed, at(0));
    assert_eq!(first.nodes[0].phase, "Upgraded");
    assert_eq!(first.nodes[1].phase, "Blocked");
    assert_eq!(
        first.nodes[1].blocked_by,
        ["replicas volume vol-1: 0 healthy replicas on other nodes, 1 needed"]
    );
    // Released by the other rollout: n2 goes.
    observed.nodes[0].held_by = None;
    assert_eq!(
        plan(&rollout(1), &observed, at(1)).nodes[1].phase,
        "Cordoned"
    );
}
