use super::*;
use crate::testing::{longhorn_guard as guard, replica};
use serde_json::json;

fn down(nodes: &[&str]) -> BTreeSet<String> {
    nodes.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_replica_is_read_from_its_fields_and_judged_by_its_rule() {
    let object = json!({
        "spec": {"nodeID": "node-1", "volumeName": "vol-1"},
        "status": {"currentState": "running", "conditions": [{"type": "Ready", "status": "False"}]},
    });
    assert_eq!(
        read_replica(&guard(1), &object),
        Some(replica("vol-1", "node-1", true))
    );
    let mut by_condition = guard(1);
    by_condition.healthy = HealthRule {
        condition: "Ready".into(),
        ..Default::default()
    };
    assert_eq!(
        read_replica(&by_condition, &object).map(|r| r.healthy),
        Some(false)
    );
    // Not placed yet: no node. No volume: not a replica the guard can judge.
    let unplaced = json!({"spec": {"volumeName": "vol-2"}, "status": {"currentState": "stopped"}});
    assert_eq!(
        read_replica(&guard(1), &unplaced),
        Some(replica("vol-2", "", false))
    );
    assert_eq!(read_replica(&guard(1), &json!({"spec": {}})), None);
    // A namespaced replica's volume is known with its namespace.
    let namespaced = json!({
        "metadata": {"namespace": "longhorn-system"},
        "spec": {"nodeID": "node-1", "volumeName": "vol-1"},
        "status": {"currentState": "running"},
    });
    assert_eq!(
        read_replica(&guard(1), &namespaced),
        Some(replica("longhorn-system/vol-1", "node-1", true))
    );
}

/// The seed's failing layouts: a single-replica volume on node 1; a volume whose only healthy
/// replica elsewhere is on node 2, which is down too.
#[test]
fn a_volume_without_a_healthy_replica_elsewhere_holds_the_node_and_is_named() {
    let single = [replica("vol-1", "node-1", true)];
    let short = shortfalls("node-1", &down(&["node-1"]), &[guard(1)], &single);
    assert_eq!(short.len(), 1);
    assert_eq!(
        short[0].to_string(),
        "replicas volume vol-1: 0 healthy replicas on other nodes, 1 needed"
    );
    let two = [
        replica("vol-1", "node-1", true),
        replica("vol-1", "node-2", true),
    ];
    assert!(shortfalls("node-1", &down(&["node-1"]), &[guard(1)], &two).is_empty());
    // node-2 is being upgraded too (maxUnavailable 2): its replica does not count.
    let short = shortfalls("node-1", &down(&["node-1", "node-2"]), &[guard(1)], &two);
    assert_eq!(short[0].healthy_elsewhere, 0);
    // A replica elsewhere that is not healthy does not count either.
    let degraded = [
        replica("vol-1", "node-1", true),
        replica("vol-1", "node-2", false),
    ];
    assert_eq!(
        shortfalls("node-1", &down(&["node-1"]), &[guard(1)], &degraded).len(),
        1
    );
}

/// The seed's succeeding layouts: three replicas everywhere; two replicas not on node 1.
#[test]
fn volumes_with_enough_replicas_elsewhere_or_none_on_the_node_let_it_go() {
    let everywhere: Vec<Replica> = ["node-1", "node-2", "node-3"]
        .iter()
        .map(|n| replica("vol-1", n, true))
        .collect();
    assert!(shortfalls("node-1", &down(&["node-1"]), &[guard(2)], &everywhere).is_empty());
    let short = shortfalls("node-1", &down(&["node-1"]), &[guard(3)], &everywhere);
    assert_eq!(
        short[0].to_string(),
        "replicas volume vol-1: 2 healthy replicas on other nodes, 3 needed"
    );
    let not_on_node_1 = [
        replica("vol-2", "node-2", true),
        replica("vol-2", "node-3", false),
    ];
    assert!(shortfalls("node-1", &down(&["node-1"]), &[guard(1)], &not_on_node_1).is_empty());
}

#[test]
fn the_rebuild_waits_for_every_replica_of_the_affected_volumes() {
    let before = [
        replica("vol-1", "node-1", true),
        replica("vol-1", "node-2", true),
        replica("vol-3", "node-3", false),
    ];
    let affected = affected("node-1", &before);
    assert_eq!(affected["replicas"], down(&["vol-1"]));
    let rebuilding = [
        replica("vol-1", "node-1", false),
        replica("vol-1", "node-2", true),
        replica("vol-3", "node-3", false),
    ];
    let waiting = unrebuilt(&affected, &rebuilding);
    assert_eq!(
        waiting.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["replicas volume vol-1: a replica on node-1 is not healthy yet"]
    );
    // vol-3 was not on node-1: its sick replica is not this node's to wait for.
    let rebuilt = [
        replica("vol-1", "node-1", true),
        replica("vol-1", "node-2", true),
        replica("vol-3", "node-3", false),
    ];
    assert!(unrebuilt(&affected, &rebuilt).is_empty());
}
