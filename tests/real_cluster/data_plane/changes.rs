//! What people do to a rollout under way, and around it: pause and resume it mid-node, cordon a
//! node themselves before it comes, change the DaemonSet's template again, start a second
//! rollout on the same nodes.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use super::gates::create_pdb;
use super::stage::{CLAIM, DS, Stage, Volume, What};
use super::{
    World, assert_rolled_out, claims_left, cordon_order, create_rollout, evicted,
    max_cordoned_at_once, node_status, patch_rollout, phase_of, rollout_spec, wait_rollout,
    wait_succeeded,
};

/// How long a paused rollout is watched to start nothing: a few of its passes.
const STILL: Duration = Duration::from_secs(4);

/// Pause while node 1 is cordoned but not evicted (its consumer held by a budget): it goes
/// back to Pending, uncordoned, its engine untouched, and nothing starts. Resume (the budget
/// gone): node 1 goes. Pause while node 2's new pod is not Ready yet (evicted already): node 2
/// finishes once its pod is Ready, node 3 does not start. Resume: it succeeds.
pub(super) async fn pause_and_resume_mid_node(world: &World<'_>) {
    let volumes: [Volume; 1] = [("vol-1", &[1, 2, 3])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-pause", 3, &volumes).await;
    let ns = stage.ns.clone();
    stage.add_consumer(&ns, "app-1", 1, "app").await;
    create_pdb(&world.client, &ns, "app", "app", 1, 1).await;
    let engines = stage.wait_engines_ready().await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let (n1, n2, n3) = (stage.node(1), stage.node(2), stage.node(3));
    let spec = rollout_spec(json!({
        "nodes": [n1, n2, n3],
        "consumers": {"selector": {"matchLabels": {"app": "app"}}},
    }));
    create_rollout(&stage, "upgrade", spec).await;
    wait_rollout(&stage, "upgrade", "node 1 EvictingConsumers", |r| {
        phase_of(r, &n1) == "EvictingConsumers"
    })
    .await;
    patch_rollout(&stage, "upgrade", json!({"spec": {"paused": true}})).await;
    // Back to Pending, released: `cordonedByUs` is kept until the uncordon is seen.
    let paused = wait_rollout(&stage, "upgrade", "Paused, node 1 Pending, released", |r| {
        super::is_true(r, "Paused")
            && node_status(r, &n1).is_some_and(|n| n.phase == "Pending" && !n.cordoned_by_us)
    })
    .await;
    let entry = node_status(&paused, &n1).unwrap();
    println!(
        "dp-pause: node 1 back to {} ({})",
        entry.phase, entry.reason
    );
    super::stage::wait_until(&stage, "node 1 uncordoned", |s| s.cordoned().is_empty()).await;
    let before = stage.moments().len();
    tokio::time::sleep(STILL).await;
    let cordons: Vec<_> = stage.moments()[before..]
        .iter()
        .filter(|m| matches!(m.what, What::Cordoned(_)))
        .cloned()
        .collect();
    assert!(
        cordons.is_empty(),
        "nothing starts while paused: {cordons:?}"
    );
    let engine = &engines[&n1].1;
    assert!(
        !stage
            .moments()
            .iter()
            .any(|m| matches!(&m.what, What::PodDeleting(p) if &p.uid == engine)),
        "node 1's engine untouched"
    );

    world
        .kubectl
        .ok(&["delete", "pdb", "-n", &ns, "app", "--wait=false"]);
    stage.hold_node(2);
    patch_rollout(&stage, "upgrade", json!({"spec": {"paused": false}})).await;
    wait_rollout(&stage, "upgrade", "node 2 WaitingForPod", |r| {
        phase_of(r, &n2) == "WaitingForPod"
    })
    .await;
    patch_rollout(&stage, "upgrade", json!({"spec": {"paused": true}})).await;
    wait_rollout(&stage, "upgrade", "Paused", |r| super::is_true(r, "Paused")).await;
    stage.release_node(2);
    let finished = wait_rollout(&stage, "upgrade", "node 2 Upgraded while paused", |r| {
        phase_of(r, &n2) == "Upgraded"
    })
    .await;
    println!("dp-pause: {}", super::progress(&finished));
    let before = stage.moments().len();
    tokio::time::sleep(STILL).await;
    assert!(
        !stage.moments()[before..]
            .iter()
            .any(|m| m.what == What::Cordoned(n3.clone())),
        "node 3 does not start while paused"
    );
    let still = wait_rollout(&stage, "upgrade", "paused", |_| true).await;
    assert!(
        matches!(phase_of(&still, &n3).as_str(), "Pending" | "Blocked"),
        "{still:#?}"
    );
    patch_rollout(&stage, "upgrade", json!({"spec": {"paused": false}})).await;
    let done = wait_succeeded(&stage, "upgrade").await;
    assert!(!super::is_true(&done, "Paused"), "{done:#?}");
    assert_rolled_out(world, &stage, &done, &revision, &BTreeSet::new()).await;
    // Node 1 cordoned twice (before the pause and after), the others once.
    assert_eq!(
        cordon_order(&stage.moments(), &BTreeSet::new()),
        [n1.clone(), n1, n2, n3]
    );
    stage.stop();
}

/// Node 2 cordoned by its admin before the rollout: the rollout upgrades it without claiming
/// the cordon as its own and leaves it cordoned; the others are cordoned and uncordoned.
pub(super) async fn an_admins_cordon_is_kept(world: &World<'_>) {
    let volumes: [Volume; 1] = [("vol-1", &[1, 2, 3])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-admin", 3, &volumes).await;
    let n2 = stage.node(2);
    world.kubectl.ok(&["cordon", &n2]);
    super::stage::wait_until(&stage, "node 2 cordoned", |s| s.cordoned().contains(&n2)).await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let nodes = stage.nodes.clone();
    create_rollout(&stage, "upgrade", rollout_spec(json!({"nodes": nodes}))).await;
    // Every status seen on the way says the admin's cordon is not ours.
    let ours = std::cell::RefCell::new(Vec::new());
    let done = wait_rollout(&stage, "upgrade", "Succeeded", |r| {
        if node_status(r, &n2).is_some_and(|n| n.cordoned_by_us) {
            ours.borrow_mut().push(super::progress(r));
        }
        super::is_true(r, "Succeeded")
    })
    .await;
    let ours = ours.into_inner();
    assert!(ours.is_empty(), "node 2's cordon taken as ours: {ours:#?}");
    let admins = BTreeSet::from([n2.clone()]);
    assert_rolled_out(world, &stage, &done, &revision, &admins).await;
    let moments = stage.moments();
    assert!(
        !moments
            .iter()
            .any(|m| m.what == What::Uncordoned(n2.clone())),
        "the admin's cordon never undone: {moments:#?}"
    );
    assert_eq!(
        cordon_order(&moments, &admins),
        [stage.node(1), stage.node(3)]
    );
    let claims = claims_left(&stage).await;
    println!("dp-admin: claims left on Nodes after the rollout: {claims:?}");
    assert!(claims.is_empty(), "{CLAIM} left on {claims:?}");
    world.kubectl.ok(&["uncordon", &n2]);
    stage.stop();
}

/// The template changes again once node 1 is upgraded: the rollout takes the newest revision,
/// node 1 is queued again, every node ends on the newest revision.
pub(super) async fn a_template_change_queues_nodes_again(world: &World<'_>) {
    let volumes: [Volume; 1] = [("vol-1", &[1, 2, 3])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-template", 3, &volumes).await;
    let second = stage.set_image(DS, "example.test/engine:2").await;
    let n1 = stage.node(1);
    let nodes = stage.nodes.clone();
    create_rollout(&stage, "upgrade", rollout_spec(json!({"nodes": nodes}))).await;
    wait_rollout(&stage, "upgrade", "node 1 Upgraded", |r| {
        phase_of(r, &n1) == "Upgraded"
    })
    .await;
    let third = stage.set_image(DS, "example.test/engine:3").await;
    let requeued = wait_rollout(&stage, "upgrade", "revision 3 taken", |r| {
        r.status.revision == third
    })
    .await;
    println!(
        "dp-template: after the change: {}",
        super::progress(&requeued)
    );
    let done = wait_succeeded(&stage, "upgrade").await;
    assert_rolled_out(world, &stage, &done, &third, &BTreeSet::new()).await;
    let order = cordon_order(&stage.moments(), &BTreeSet::new());
    println!(
        "dp-template: cordons {order:?}; evicted {:?}; revisions {second} then {third}",
        evicted(world.audit, &stage.ns)
    );
    assert_eq!(
        order.iter().filter(|n| **n == n1).count(),
        2,
        "node 1 upgraded twice: {order:?}"
    );
    stage.stop();
}

/// A second rollout of the same DaemonSet on the same nodes while the first holds node 1
/// (its new pod held un-Ready): the second waits, naming the first; never two nodes cordoned
/// at once, each node cordoned and claimed once; both succeed, on the same revision.
pub(super) async fn two_rollouts_on_the_same_nodes(world: &World<'_>) {
    let volumes: [Volume; 1] = [("vol-1", &[1, 2])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-two", 2, &volumes).await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let n1 = stage.node(1);
    let nodes = stage.nodes.clone();
    stage.hold_node(1);
    create_rollout(&stage, "first", rollout_spec(json!({"nodes": nodes}))).await;
    wait_rollout(&stage, "first", "node 1 WaitingForPod", |r| {
        phase_of(r, &n1) == "WaitingForPod"
    })
    .await;
    create_rollout(&stage, "second", rollout_spec(json!({"nodes": nodes}))).await;
    let first_key = format!("{}/first", stage.ns);
    let held = format!("node {n1}: held by DataPlaneRollout {first_key}");
    let second = wait_rollout(&stage, "second", "node 1 held by the first", |r| {
        node_status(r, &n1).is_some_and(|n| n.blocked_by.contains(&held))
    })
    .await;
    let entry = node_status(&second, &n1).unwrap();
    println!(
        "dp-two: second's node 1 {} {:?}",
        entry.phase, entry.blocked_by
    );
    assert_eq!(entry.phase, "Blocked", "{entry:#?}");
    stage.release_node(1);
    let first = wait_succeeded(&stage, "first").await;
    let second = wait_succeeded(&stage, "second").await;
    assert_rolled_out(world, &stage, &first, &revision, &BTreeSet::new()).await;
    assert_eq!(second.status.revision, revision);
    assert_eq!(second.status.nodes_upgraded, 2, "{second:#?}");
    let moments = stage.moments();
    assert_eq!(max_cordoned_at_once(&moments, &BTreeSet::new()), 1);
    assert_eq!(
        cordon_order(&moments, &BTreeSet::new()).len(),
        2,
        "each node cordoned once: {moments:#?}"
    );
    // Each node held by one rollout at a time (the claim is one annotation, written with the
    // Node's resourceVersion): the first, or the second if it took node 2 between the first's
    // release of node 1 and its claim of node 2 (both are right).
    let claims: Vec<_> = moments
        .iter()
        .filter_map(|m| match &m.what {
            What::Claim(node, Some(holder)) => Some((node.clone(), holder.clone())),
            _ => None,
        })
        .collect();
    println!("dp-two: claims seen {claims:?}");
    assert_eq!(
        claims.first().map(|c| c.1.as_str()),
        Some(first_key.as_str())
    );
    assert_eq!(claims.len(), 2, "each node claimed once: {claims:?}");
    stage.stop();
}
