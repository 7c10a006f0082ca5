//! What holds a node once it is cordoned: a PodDisruptionBudget refusing its consumers'
//! eviction (kube-apiserver's 429, by the status the real disruption controller keeps), a
//! clear cause the rollout waits on; and a new engine pod that never gets Ready, an ambiguous
//! wait that fails the node past `spec.waitLimit`, the node left cordoned.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::stage::{DS, LIMIT, STEP, Stage, What, create_namespace};
use super::{
    World, assert_rolled_out, create_rollout, evictions, is_true, node_status, phase_of,
    rollout_spec, wait_rollout, wait_succeeded,
};
use crate::support::wait::eventually_async_every;

/// A PodDisruptionBudget `name` in `ns` of pods labelled `app=<app>`, `minAvailable`; returns
/// once the disruption controller has counted `healthy` pods.
pub(super) async fn create_pdb(
    client: &kube::Client,
    ns: &str,
    name: &str,
    app: &str,
    min_available: i32,
    healthy: i32,
) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    wait_pdb(client, ns, name, healthy).await;
}

/// Until the disruption controller counts `healthy` pods for PodDisruptionBudget `ns/name`.
pub(super) async fn wait_pdb(client: &kube::Client, ns: &str, name: &str, healthy: i32) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    eventually_async_every(
        LIMIT,
        STEP,
        &format!("PodDisruptionBudget {ns}/{name} counting {healthy} healthy pods"),
        async || {
            let pdb = pdbs.get(name).await.map_err(|e| e.to_string())?;
            let status = pdb.status.unwrap_or_default();
            let current = pdb.metadata.generation == status.observed_generation;
            if current && status.current_healthy == Some(healthy) {
                Ok(())
            } else {
                Err(format!("{status:?}"))
            }
        },
        async || String::new(),
    )
    .await
}

/// Consumers `db-a` on node 1 and `db-b` on node 2 in namespace `dp-pdb-apps`, a
/// PodDisruptionBudget `db` of `minAvailable: 2` over them: node 1 is cordoned and its
/// consumer's eviction refused (429) — the node waits in EvictingConsumers naming the budget,
/// its engine pod untouched — until a third consumer is Ready elsewhere (node 3, not in the
/// rollout); node 2 then waits the same way until a fourth is. Then it succeeds.
pub(super) async fn a_pdb_holds_the_consumers_eviction(world: &World<'_>) {
    let volumes: [super::stage::Volume; 1] = [("vol-1", &[1, 2, 3])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-pdb", 3, &volumes).await;
    let apps = "dp-pdb-apps";
    create_namespace(&world.client, &world.kubectl, apps).await;
    stage.add_consumer(apps, "db-a", 1, "db").await;
    stage.add_consumer(apps, "db-b", 2, "db").await;
    create_pdb(&world.client, apps, "db", "db", 2, 2).await;
    let engines = stage.wait_engines_ready().await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let (n1, n2) = (stage.node(1), stage.node(2));
    let spec = rollout_spec(json!({
        "nodes": [n1, n2],
        "consumers": {"namespaces": [apps], "selector": {"matchLabels": {"app": "db"}}},
    }));
    create_rollout(&stage, "upgrade", spec).await;
    let budget = format!("PodDisruptionBudget {apps}/db");
    for (node, consumer, spare) in [(&n1, "db-a", "db-c"), (&n2, "db-b", "db-d")] {
        let held = wait_rollout(
            &stage,
            "upgrade",
            &format!("{node} held by {budget}"),
            |r| {
                node_status(r, node)
                    .is_some_and(|n| n.blocked_by.iter().any(|b| b.contains(&budget)))
            },
        )
        .await;
        let entry = node_status(&held, node).unwrap();
        println!(
            "dp-pdb: {node} {} {} {:?}",
            entry.phase, entry.reason, entry.blocked_by
        );
        assert_eq!(entry.phase, "EvictingConsumers", "{entry:#?}");
        assert!(stage.cordoned().contains(node), "{node} cordoned");
        let refused = evictions(world.audit, apps);
        assert!(
            refused
                .get(consumer)
                .is_some_and(|codes| codes.contains(&429)),
            "{consumer}'s eviction answered 429: {refused:?}"
        );
        let engine = &engines[node].1;
        let gone = stage.moments().iter().any(
            |m| matches!(&m.what, What::PodDeleting(p) | What::PodGone(p) if &p.uid == engine),
        );
        assert!(
            !gone,
            "{node}'s engine pod untouched while its consumers stay"
        );
        // Another consumer Ready elsewhere: the budget allows one disruption.
        stage.add_consumer(apps, spare, 3, "db").await;
        wait_rollout(&stage, "upgrade", &format!("{node} Upgraded"), |r| {
            phase_of(r, node) == "Upgraded"
        })
        .await;
    }
    let done = wait_succeeded(&stage, "upgrade").await;
    assert_eq!(done.status.revision, revision);
    assert_eq!(done.status.nodes_upgraded, 2, "{done:#?}");
    super::stage::wait_until(&stage, "both nodes released", |s| {
        s.cordoned().is_empty() && s.claimed().is_empty()
    })
    .await;
    let moments = stage.moments();
    assert!(super::max_cordoned_at_once(&moments, &BTreeSet::new()) <= 1);
    // The rollout's nodes only (node 3 holds the spare consumers and is not in it).
    let evicted = super::evicted(world.audit, apps);
    assert_eq!(
        evicted.keys().cloned().collect::<Vec<_>>(),
        ["db-a", "db-b"],
        "{evicted:?}"
    );
    assert_eq!(done.status.nodes_total, 2);
    let all = evictions(world.audit, apps);
    println!("dp-pdb: consumers' evictions (codes): {all:?}");
    let described = world
        .kubectl
        .ok(&["describe", "dpr", "-n", &stage.ns, "upgrade"]);
    assert!(
        described.contains("EvictionRefused") && described.contains(&budget),
        "{described}"
    );
    stage.stop();
}

/// The new revision's pods never get Ready: node 1 is cordoned, its engine evicted, and after
/// `waitLimit: 5s` of WaitingForPod it is Failed and so is the rollout; it stays cordoned
/// (for a person to decide) and node 2 is never touched. Then the pod gets Ready after all:
/// node 1 recovers and the rollout succeeds.
pub(super) async fn a_pod_never_ready_fails_the_node(world: &World<'_>) {
    let volumes: [super::stage::Volume; 1] = [("vol-1", &[1, 2])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-never", 2, &volumes).await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    stage.hold_revision(&revision);
    let (n1, n2) = (stage.node(1), stage.node(2));
    let spec = rollout_spec(json!({"nodes": [n1, n2], "waitLimit": "5s"}));
    create_rollout(&stage, "upgrade", spec).await;
    let waiting = wait_rollout(&stage, "upgrade", "node 1 WaitingForPod", |r| {
        phase_of(r, &n1) == "WaitingForPod"
    })
    .await;
    let since = node_status(&waiting, &n1).and_then(|n| n.since.clone());
    let failed = wait_rollout(&stage, "upgrade", "Failed", |r| is_true(r, "Failed")).await;
    let entry = node_status(&failed, &n1).unwrap();
    println!(
        "dp-never: {n1} {} {}: {} (WaitingForPod since {:?}, Failed since {:?})",
        entry.phase,
        entry.reason,
        entry.message,
        since.as_ref().map(|t| t.0.to_string()),
        entry.since.as_ref().map(|t| t.0.to_string())
    );
    assert_eq!(entry.phase, "Failed", "{failed:#?}");
    assert!(entry.message.contains("waitLimit"), "{entry:#?}");
    if let (Some(from), Some(to)) = (since, entry.since.as_ref()) {
        let waited = to.0.duration_since(from.0).unsigned_abs();
        assert!(waited >= Duration::from_secs(5), "failed after {waited:?}");
    }
    assert!(!is_true(&failed, "Succeeded"), "{failed:#?}");
    let described = world
        .kubectl
        .ok(&["describe", "dpr", "-n", &stage.ns, "upgrade"]);
    // The node was seen waiting for its pod: that step's Event is there, then the failure's.
    for reason in ["WaitingForPod", "WaitLimitExceeded"] {
        assert!(described.contains(reason), "{reason}: {described}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cordoned = stage.cordoned();
    assert_eq!(
        cordoned,
        BTreeSet::from([n1.clone()]),
        "node 1 left cordoned, node 2 untouched"
    );
    let again = wait_rollout(&stage, "upgrade", "still Failed", |_| true).await;
    assert_eq!(phase_of(&again, &n1), "Failed");
    assert!(
        matches!(phase_of(&again, &n2).as_str(), "Pending" | "Blocked"),
        "{again:#?}"
    );
    let evicted = super::evicted(world.audit, &stage.ns);
    assert_eq!(evicted.len(), 1, "node 1's engine only: {evicted:?}");

    // The pod gets Ready after all (a person fixed it): the node recovers, the rollout goes on.
    stage.release_revision(&revision);
    let done = wait_succeeded(&stage, "upgrade").await;
    let entry = node_status(&done, &n1).unwrap();
    println!(
        "dp-never: after the fix: {n1} {} {}",
        entry.phase, entry.reason
    );
    assert!(!is_true(&done, "Failed"), "{done:#?}");
    assert_rolled_out(world, &stage, &done, &revision, &BTreeSet::new()).await;
    stage.stop();
}
