//! The seed's layouts of replicas: those that must hold a node (a volume whose only healthy
//! replica is on it), until a replica elsewhere lets the rollout go on by itself; and those
//! that let every node go, one at a time, each only once the one before it was rebuilt.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use super::stage::{DS, Stage, Volume, What};
use super::{
    World, assert_rolled_out, cordon_order, create_rollout, evicted, node_status, phase_of,
    rollout_spec, wait_rollout, wait_succeeded,
};

/// How long a held rollout is watched to do nothing: a few of its passes (1 s each).
const HELD: Duration = Duration::from_secs(4);

pub(super) async fn failing_layouts_block_until_a_replica_is_added(world: &World<'_>) {
    a_single_replica_volume_holds_the_first_node(world).await;
    a_volume_whose_only_replica_is_on_node_2_holds_node_2(world).await;
}

/// A volume with its one replica on node 1: node 1 is Blocked with the volume named, the
/// others wait their turn, nothing is cordoned or evicted; a replica added on node 2 lets it
/// go on by itself. The rollout names no nodes: every node of the DaemonSet, by name.
async fn a_single_replica_volume_holds_the_first_node(world: &World<'_>) {
    let volumes: [Volume; 2] = [("vol-1", &[1]), ("vol-2", &[1, 2, 3])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-single", 3, &volumes).await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    create_rollout(&stage, "upgrade", rollout_spec(json!({}))).await;
    let n1 = stage.node(1);
    let blocked = wait_rollout(&stage, "upgrade", "node 1 Blocked", |r| {
        phase_of(r, &n1) == "Blocked"
    })
    .await;
    let entry = node_status(&blocked, &n1).unwrap();
    assert!(
        entry.blocked_by.iter().any(|b| *b
            == format!(
                "replicas volume {}: 0 healthy replicas on other nodes, 1 needed",
                stage.volume("vol-1")
            )),
        "{entry:#?}"
    );
    assert!(entry.message.contains("vol-1"), "{entry:#?}");
    assert!(
        !entry.blocked_by.iter().any(|b| b.contains("vol-2")),
        "vol-2 has replicas elsewhere: {entry:#?}"
    );
    println!("dp-single: node 1 {} {:?}", entry.reason, entry.blocked_by);
    assert_held(world, &stage, "upgrade").await;
    let described = world
        .kubectl
        .ok(&["describe", "dpr", "-n", &stage.ns, "upgrade"]);
    assert!(
        described.contains("Warning") && described.contains("PreflightBlocked"),
        "{described}"
    );

    stage.add_replica("vol-1", 2).await;
    let done = wait_succeeded(&stage, "upgrade").await;
    assert_rolled_out(world, &stage, &done, &revision, &BTreeSet::new()).await;
    let order = cordon_order(&stage.moments(), &BTreeSet::new());
    assert_eq!(order, stage.nodes, "in the DaemonSet's nodes' order");
    stage.stop();
}

/// Node 1 not Ready at first (held, named), then Ready: it goes. vol-1's only replica is on
/// node 2: node 2 is Blocked when its turn comes, node 3 waits behind it; a replica added on
/// node 3 lets it go on. The rollout names its nodes.
async fn a_volume_whose_only_replica_is_on_node_2_holds_node_2(world: &World<'_>) {
    let volumes: [Volume; 2] = [("vol-1", &[2]), ("vol-2", &[1, 2, 3])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-only-on-2", 3, &volumes).await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let (n1, n2, n3) = (stage.node(1), stage.node(2), stage.node(3));
    stage.set_node_ready(1, false);
    let spec = rollout_spec(json!({"nodes": [n1, n2, n3]}));
    create_rollout(&stage, "upgrade", spec).await;
    let not_ready = wait_rollout(&stage, "upgrade", "node 1 Blocked, not Ready", |r| {
        phase_of(r, &n1) == "Blocked"
    })
    .await;
    let entry = node_status(&not_ready, &n1).unwrap();
    assert!(
        entry.blocked_by.contains(&format!("node {n1}: not Ready")),
        "{entry:#?}"
    );
    assert_held(world, &stage, "upgrade").await;
    stage.set_node_ready(1, true);

    let blocked = wait_rollout(&stage, "upgrade", "node 2 Blocked", |r| {
        phase_of(r, &n1) == "Upgraded" && phase_of(r, &n2) == "Blocked"
    })
    .await;
    let entry = node_status(&blocked, &n2).unwrap();
    assert!(
        entry.blocked_by.iter().any(|b| *b
            == format!(
                "replicas volume {}: 0 healthy replicas on other nodes, 1 needed",
                stage.volume("vol-1")
            )),
        "{entry:#?}"
    );
    assert!(
        matches!(phase_of(&blocked, &n3).as_str(), "Pending" | "Blocked"),
        "node 3 waits behind node 2: {blocked:#?}"
    );
    println!(
        "dp-only-on-2: node 2 {} {:?}",
        entry.reason, entry.blocked_by
    );
    let before = stage.moments().len();
    let evictions_before = evicted(world.audit, &stage.ns);
    tokio::time::sleep(HELD).await;
    let cordons: Vec<_> = stage.moments()[before..]
        .iter()
        .filter(|m| matches!(m.what, What::Cordoned(_)))
        .cloned()
        .collect();
    assert!(cordons.is_empty(), "cordoned while held: {cordons:?}");
    assert_eq!(evicted(world.audit, &stage.ns), evictions_before);
    assert_eq!(
        evictions_before.len(),
        1,
        "node 1's pod only: {evictions_before:?}"
    );

    stage.add_replica("vol-1", 3).await;
    let done = wait_succeeded(&stage, "upgrade").await;
    assert_rolled_out(world, &stage, &done, &revision, &BTreeSet::new()).await;
    assert_eq!(
        cordon_order(&stage.moments(), &BTreeSet::new()),
        [n1, n2, n3]
    );
    stage.stop();
}

/// For [`HELD`]: the rollout still holds (same phases), nothing cordoned, nothing evicted,
/// every engine pod the same.
async fn assert_held(world: &World<'_>, stage: &Stage, name: &str) {
    let pods = stage.engine_uids().await;
    let held = wait_rollout(stage, name, "held", |_| true).await;
    tokio::time::sleep(HELD).await;
    let still = wait_rollout(stage, name, "held", |_| true).await;
    let phases = |r: &svm_api::dataplane::DataPlaneRollout| {
        r.status
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.phase.clone(), n.blocked_by.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(phases(&held), phases(&still));
    let moments = stage.moments();
    assert!(
        !moments.iter().any(|m| matches!(m.what, What::Cordoned(_))),
        "nothing cordoned: {moments:#?}"
    );
    let evictions = super::evictions(world.audit, &stage.ns);
    assert!(evictions.is_empty(), "nothing evicted: {evictions:?}");
    assert_eq!(stage.engine_uids().await, pods, "no engine pod replaced");
}

pub(super) async fn succeeding_layouts_go_one_node_at_a_time(world: &World<'_>) {
    // Three replicas everywhere; the rollout names the nodes in its own order.
    let everywhere: [Volume; 3] = [
        ("vol-1", &[1, 2, 3]),
        ("vol-2", &[1, 2, 3]),
        ("vol-3", &[1, 2, 3]),
    ];
    let order = [3, 1, 2];
    let stage = Stage::start(
        &world.client,
        &world.kubectl,
        "dp-everywhere",
        3,
        &everywhere,
    )
    .await;
    let nodes: Vec<String> = order.iter().map(|i| stage.node(*i)).collect();
    succeeds(world, &stage, json!({"nodes": nodes})).await;
    assert_eq!(cordon_order(&stage.moments(), &BTreeSet::new()), nodes);
    // What a person sees: the table, and each step as an Event on the rollout (on the Node:
    // `super::events_on_nodes`, at the end).
    let table = world.kubectl.ok(&["get", "dpr", "-n", &stage.ns]);
    println!("{table}");
    for column in [
        "NAME",
        "DAEMONSET",
        "UPGRADED",
        "REVISION",
        "STATUS",
        "3/3",
        "Succeeded",
    ] {
        assert!(table.contains(column), "{column}: {table}");
    }
    let described = world
        .kubectl
        .ok(&["describe", "dpr", "-n", &stage.ns, "upgrade"]);
    // WaitingForPod and Rebuilding are there only when a pass saw them: a pod Ready and its
    // replicas rebuilt between two passes take the node from Evicting to Upgraded at once.
    for reason in ["Cordoned", "Evicting", "Upgraded"] {
        assert!(described.contains(reason), "{reason}: {described}");
    }
    stage.stop();

    // Two replicas, neither on node 1; the rollout selects its nodes by label.
    let not_on_1: [Volume; 2] = [("vol-1", &[2, 3]), ("vol-2", &[2, 3])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-not-on-1", 3, &not_on_1).await;
    let selector = json!({"matchLabels": {super::stage::SCENARIO_LABEL: stage.ns}});
    succeeds(world, &stage, json!({"nodeSelector": selector})).await;
    stage.stop();

    // Engines spread: two replicas a volume, in a ring over four nodes.
    let spread: [Volume; 4] = [
        ("vol-1", &[1, 2]),
        ("vol-2", &[2, 3]),
        ("vol-3", &[3, 4]),
        ("vol-4", &[4, 1]),
    ];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-spread", 4, &spread).await;
    let selector = json!({"matchExpressions": [
        {"key": super::stage::SCENARIO_LABEL, "operator": "In", "values": [stage.ns]}
    ]});
    succeeds(world, &stage, json!({"nodeSelector": selector})).await;
    stage.stop();
}

/// A new image rolled out with `spec` and the checks every success passes; the rollout's
/// time and how it split over the nodes printed.
async fn succeeds(world: &World<'_>, stage: &Stage, spec: serde_json::Value) {
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let started = stage.elapsed();
    create_rollout(stage, "upgrade", rollout_spec(spec)).await;
    let done = wait_succeeded(stage, "upgrade").await;
    let took = stage.elapsed() - started;
    assert_rolled_out(world, stage, &done, &revision, &BTreeSet::new()).await;
    let cordons = cordon_order(&stage.moments(), &BTreeSet::new());
    assert_eq!(cordons.len(), stage.nodes.len(), "each node cordoned once");
    println!(
        "{}: {} nodes upgraded in {:.1} s (played rebuild {:?} a node)",
        stage.ns,
        stage.nodes.len(),
        took.as_secs_f64(),
        stage.rebuild()
    );
}

/// Ten nodes, each volume with three replicas on neighbouring nodes: the rollout's wall time
/// against the waits the played components impose (the rebuild, [`Stage::rebuild`], a node),
/// and where each node's time went, from what the watches saw (printed, never asserted):
/// cordon → engine evicted (the controller), evicted → new pod Ready (the played kubelet,
/// kube-controller-manager's DaemonSet controller, the played binding), Ready → rebuilt (the
/// played engine), rebuilt → uncordon and uncordon → next cordon (the controller).
pub(super) async fn ten_nodes_where_the_time_goes(world: &World<'_>) {
    let names: Vec<String> = (1..=10).map(|i| format!("vol-{i}")).collect();
    let rings: Vec<[usize; 3]> = (0..10)
        .map(|i| [i + 1, (i + 1) % 10 + 1, (i + 2) % 10 + 1])
        .collect();
    let volumes: Vec<Volume> = names
        .iter()
        .zip(&rings)
        .map(|(name, ring)| (name.as_str(), &ring[..]))
        .collect();
    let stage = Stage::start(&world.client, &world.kubectl, "dp-ten", 10, &volumes).await;
    let selector = json!({"matchLabels": {super::stage::SCENARIO_LABEL: stage.ns}});
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let started = stage.elapsed();
    create_rollout(
        &stage,
        "upgrade",
        rollout_spec(json!({"nodeSelector": selector})),
    )
    .await;
    let done = wait_succeeded(&stage, "upgrade").await;
    let took = stage.elapsed() - started;
    assert_rolled_out(world, &stage, &done, &revision, &BTreeSet::new()).await;
    let spans = node_spans(&stage.moments(), &stage.nodes);
    let sum = |pick: fn(&Span) -> Duration| spans.iter().map(pick).sum::<Duration>();
    let played = stage.rebuild() * 10;
    let controller = sum(|s| s.to_evicted) + sum(|s| s.to_uncordon) + sum(|s| s.to_next);
    println!(
        "dp-ten: 10 nodes in {:.1} s; the played rebuild's waits {:.1} s in all; per node on \
         average: cordon→evicted {}, evicted→new pod Ready {}, Ready→rebuilt {}, \
         rebuilt→uncordon {}, uncordon→next cordon {}; the controller's own share {:.2} s a node",
        took.as_secs_f64(),
        played.as_secs_f64(),
        mean(sum(|s| s.to_evicted), spans.len()),
        mean(sum(|s| s.to_ready), spans.len()),
        mean(sum(|s| s.to_rebuilt), spans.len()),
        mean(sum(|s| s.to_uncordon), spans.len()),
        mean(sum(|s| s.to_next), spans.len().saturating_sub(1)),
        controller.as_secs_f64() / spans.len().max(1) as f64,
    );
    stage.stop();
}

fn mean(total: Duration, count: usize) -> String {
    format!("{:.2} s", total.as_secs_f64() / count.max(1) as f64)
}

/// Where one node's time went, as the watches saw it.
#[derive(Debug, Default)]
struct Span {
    to_evicted: Duration,
    to_ready: Duration,
    to_rebuilt: Duration,
    to_uncordon: Duration,
    to_next: Duration,
}

/// Each node's [`Span`], in cordon order: from its cordon to its engine deleting, to the new
/// engine Ready on it, to no replica in `error`, to its uncordon, to the next node's cordon.
fn node_spans(moments: &[super::stage::Moment], nodes: &[String]) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut last_uncordon: Option<Duration> = None;
    for node in cordon_order(moments, &BTreeSet::new()) {
        if !nodes.contains(&node) {
            continue;
        }
        let find = |from: Duration, want: &dyn Fn(&What) -> bool| {
            moments
                .iter()
                .find(|m| m.at >= from && want(&m.what))
                .map(|m| m.at)
        };
        let Some(cordon) = find(Duration::ZERO, &|w| *w == What::Cordoned(node.clone())) else {
            continue;
        };
        let engine = |w: &What, deleting: bool| match w {
            What::PodDeleting(p) if deleting => p.node == node && p.app == DS,
            What::PodReady(p) if !deleting => p.node == node && p.app == DS,
            _ => false,
        };
        let evicted = find(cordon, &|w| engine(w, true)).unwrap_or(cordon);
        let ready = find(evicted, &|w| engine(w, false)).unwrap_or(evicted);
        let rebuilt = all_running_from(moments, ready).unwrap_or(ready);
        let uncordon = find(cordon, &|w| *w == What::Uncordoned(node.clone())).unwrap_or(rebuilt);
        if let (Some(previous), Some(span)) = (last_uncordon, spans.last_mut()) {
            let span: &mut Span = span;
            span.to_next = cordon.saturating_sub(previous);
        }
        spans.push(Span {
            to_evicted: evicted - cordon,
            to_ready: ready.saturating_sub(evicted),
            to_rebuilt: rebuilt.saturating_sub(ready),
            to_uncordon: uncordon.saturating_sub(rebuilt),
            to_next: Duration::ZERO,
        });
        last_uncordon = Some(uncordon);
    }
    spans
}

/// The first moment at or after `from` when no replica is in `error`.
fn all_running_from(moments: &[super::stage::Moment], from: Duration) -> Option<Duration> {
    let mut states: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
    for moment in moments {
        if let What::Replica { name, state } = &moment.what {
            states.insert(name, state);
        }
        if moment.at >= from && !states.values().any(|s| *s == "error") {
            return Some(moment.at);
        }
    }
    None
}
