//! svm-apiserver killed with SIGKILL mid-rollout, twice: right after the Node watch sees node 1
//! cordoned, and right after it sees node 2's engine pod evicted (its `deletionTimestamp`).
//! Each time it is started again (same store, port and flags; a short leader lease) and the
//! rollout resumes where it stopped: it succeeds, and kube-apiserver's audit log shows each
//! pod — consumers and engines — evicted exactly once.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;

use super::stage::{DS, LIMIT, Stage, Volume, What};
use super::{
    World, assert_rolled_out, create_rollout, evicted, evictions, progress, rollout_spec, rollouts,
    wait_succeeded,
};
use crate::support::real_cluster::RealCluster;
use crate::support::wait::eventually_async_every;

/// How often the moment to kill at is looked for: as soon as the watch saw it.
const KILL_POLL: Duration = Duration::from_millis(10);

pub(super) async fn sigkill_after_the_cordon_and_after_the_eviction(
    world: &World<'_>,
    cluster: &mut RealCluster,
) {
    let volumes: [Volume; 2] = [("vol-1", &[1, 2, 3]), ("vol-2", &[1, 2])];
    let stage = Stage::start(&world.client, &world.kubectl, "dp-crash", 3, &volumes).await;
    let ns = stage.ns.clone();
    for index in 1..=3 {
        stage
            .add_consumer(&ns, &format!("app-{index}"), index, "app")
            .await;
    }
    let engines = stage.wait_engines_ready().await;
    let revision = stage.set_image(DS, "example.test/engine:2").await;
    let (n1, n2) = (stage.node(1), stage.node(2));
    let spec = rollout_spec(json!({
        "nodes": stage.nodes,
        "consumers": {"selector": {"matchLabels": {"app": "app"}}},
    }));
    create_rollout(&stage, "upgrade", spec).await;

    kill_when(&stage, cluster, &format!("{n1} cordoned"), |moment| {
        moment.what == What::Cordoned(n1.clone())
    })
    .await;
    let engine2 = engines[&n2].1.clone();
    kill_when(
        &stage,
        cluster,
        &format!("{n2}'s engine evicted"),
        |moment| matches!(&moment.what, What::PodDeleting(p) if p.uid == engine2),
    )
    .await;

    let done = wait_succeeded(&stage, "upgrade").await;
    assert_rolled_out(world, &stage, &done, &revision, &BTreeSet::new()).await;
    let all = evictions(world.audit, &ns);
    println!("dp-crash: evictions per pod (answer codes): {all:?}");
    let evicted = evicted(world.audit, &ns);
    let consumers: Vec<String> = (1..=3).map(|i| format!("app-{i}")).collect();
    for pod in consumers
        .iter()
        .chain(engines.values().map(|(name, _)| name))
    {
        assert_eq!(evicted.get(pod), Some(&1), "{pod} evicted once: {all:?}");
    }
    assert_eq!(evicted.len(), 6, "{all:?}");
    stage.stop();
}

/// As soon as the stage's watches see a moment `at` says (looked for every [`KILL_POLL`]):
/// SIGKILL svm-apiserver, print what the audit and the rollout show, start it again.
async fn kill_when(
    stage: &Stage,
    cluster: &mut RealCluster,
    what: &str,
    at: impl Fn(&super::stage::Moment) -> bool,
) {
    let seen = eventually_async_every(
        LIMIT,
        KILL_POLL,
        &format!("{}: {what}", stage.ns),
        async || {
            stage
                .moments()
                .into_iter()
                .find(|m| at(m))
                .ok_or_else(|| format!("{} moments", stage.moments().len()))
        },
        async || stage.table(),
    )
    .await;
    cluster.svm.kill();
    let killed = stage.elapsed();
    println!(
        "dp-crash: SIGKILL {:.0} ms after the watch saw {what} ({:?})",
        (killed.saturating_sub(seen.at)).as_secs_f64() * 1000.0,
        seen.what
    );
    let started = Instant::now();
    cluster.restart_svm();
    let rollout = rollouts(&stage.client, &stage.ns)
        .get("upgrade")
        .await
        .unwrap();
    println!(
        "dp-crash: svm-apiserver serving again after {:.1} s; the rollout: {}",
        started.elapsed().as_secs_f64(),
        progress(&rollout)
    );
}
