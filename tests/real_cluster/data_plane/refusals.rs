//! Rollouts refused before anything is touched: a DaemonSet that is not `OnDelete` (its own
//! controller would replace pods behind the rollout's back), a node that does not exist, a
//! guard on a resource the cluster does not serve. Each is Failed with a condition naming
//! the cause; no node is cordoned, no pod evicted.

use std::time::Duration;

use serde_json::json;

use super::stage::{DS, Stage, What};
use super::{World, condition, create_rollout, evictions, is_true, rollout_spec, wait_rollout};

pub(super) async fn bad_input_is_refused(world: &World<'_>) {
    let volumes: [super::stage::Volume; 1] = [("vol-1", &[1, 2])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-bad", 2, &volumes).await;
    stage.create_daemon_set("rolling", "RollingUpdate").await;
    let rolling = stage.newest_revision("rolling").await;
    stage.wait_pods_of("rolling", &rolling).await;
    let old = stage.newest_revision(DS).await;
    let engines = stage.wait_pods_of(DS, &old).await;
    stage.set_image(DS, "example.test/engine:2").await;
    let (n1, n2) = (stage.node(1), stage.node(2));
    let missing = "dp-bad-node-9";
    let unserved = json!({
        "name": "things",
        "resource": {"group": "nothing.test", "version": "v1", "resource": "things"},
        "nodeField": "spec.node",
        "volumeField": "spec.volume",
        "healthy": {"field": "status.state", "value": "ok"},
    });
    let cases = [
        (
            "rolling-update",
            rollout_spec(json!({"daemonSet": "rolling", "nodes": [n1, n2]})),
            "NotOnDelete",
            "RollingUpdate",
        ),
        (
            "unknown-node",
            rollout_spec(json!({"nodes": [n1, missing, n2]})),
            "UnknownNodes",
            missing,
        ),
        (
            "unserved-guard",
            rollout_spec(json!({"nodes": [n1, n2], "replicaGuards": [unserved]})),
            "GuardNotServed",
            "things",
        ),
    ];
    for (name, spec, reason, named) in cases {
        create_rollout(&stage, name, spec).await;
        let failed = wait_rollout(&stage, name, "Failed", |r| is_true(r, "Failed")).await;
        let cause = condition(&failed, "Failed").unwrap();
        println!(
            "dp-bad: {name}: Failed {} \"{}\"",
            cause.reason, cause.message
        );
        assert_eq!(cause.reason, reason, "{name}: {cause:#?}");
        assert!(
            cause.message.contains(named),
            "{name}: the condition names {named}: {cause:#?}"
        );
        assert!(!is_true(&failed, "Succeeded"), "{failed:#?}");
        assert!(
            failed.status.nodes.iter().all(|n| matches!(
                n.phase.as_str(),
                "" | "Pending" | "Blocked" | "Failed"
            ) && !n.cordoned_by_us),
            "{failed:#?}"
        );
    }
    // A few passes later: still nothing touched.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let moments = stage.moments();
    assert!(
        !moments
            .iter()
            .any(|m| matches!(m.what, What::Cordoned(_) | What::Claim(_, Some(_)))),
        "nothing cordoned or claimed: {moments:#?}"
    );
    let evictions = evictions(world.audit, &stage.ns);
    assert!(evictions.is_empty(), "nothing evicted: {evictions:?}");
    assert_eq!(
        stage.wait_pods_of(DS, &old).await,
        engines,
        "no engine replaced"
    );
    assert_eq!(stage.wait_pods_of("rolling", &rolling).await.len(), 2);
    stage.stop();
}
