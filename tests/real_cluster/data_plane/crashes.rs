//! svm-apiserver killed with SIGKILL mid-rollout, three times: right after node 1's cordon,
//! right after node 1's engine pod's eviction, and right after the Node watch sees node 2
//! cordoned. Each time it is started again (same store, port and flags; a short leader
//! lease) and the rollout resumes where it stopped: it succeeds, and kube-apiserver's audit
//! log shows each pod — consumers and engines — evicted exactly once.
//!
//! How the first two crashes are placed at a step, deterministically: svm-apiserver is
//! started with the `SVM_TEST_DATA_PLANE_HOOKS` of test builds (`crates/dataplane/src/hooks.rs`),
//! which makes its controller stop acting on the rollout right after the cordon (or the
//! eviction) succeeded and log `test hook: halted after …`; the test waits for that line, looks
//! at what the status and the cluster show, and SIGKILLs the process. Watching the API for the
//! write and killing then would race the controller's next step; the halt leaves nothing to
//! race. The suite's `ServerProcess` passes no environment, so the hooked process is started
//! here with the same flags, port, certificates and store (as `volumes/crashes.rs` does). The
//! third crash is the plain kind: killed as soon as the watch saw the cordon, wherever the
//! controller was by then.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;

use super::stage::{DS, LIMIT, Moment, Stage, Volume, What};
use super::{
    SVM_FLAGS, World, assert_rolled_out, create_rollout, evicted, evictions, node_status, progress,
    rollout_spec, rollouts, wait_succeeded,
};
use crate::hooked::Hooked;
use crate::support::real_cluster::RealCluster;
use crate::support::wait::eventually_async_every;

/// The hooks' variable (`crates/dataplane/src/hooks.rs`, compiled into test builds only).
const HOOKS: &str = "SVM_TEST_DATA_PLANE_HOOKS";

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
    let key = format!("{ns}/upgrade");

    // Right after the cordon.
    cluster.svm.kill();
    let hooked = Hooked::start(
        cluster,
        &SVM_FLAGS,
        HOOKS,
        &format!("{key}=halt-after-cordon"),
    );
    cluster.wait_available();
    let spec = rollout_spec(json!({
        "nodes": stage.nodes,
        "consumers": {"selector": {"matchLabels": {"app": "app"}}},
    }));
    create_rollout(&stage, "upgrade", spec).await;
    hooked
        .wait_for(&key, "test hook: halted after Cordon", LIMIT)
        .await;
    super::stage::wait_until(&stage, "node 1 cordoned", |s| s.cordoned().contains(&n1)).await;
    let at_crash = rollouts(&stage.client, &ns).get("upgrade").await.unwrap();
    let entry = node_status(&at_crash, &n1).unwrap();
    println!("dp-crash: halted after the cordon: {}", progress(&at_crash));
    assert_eq!(
        entry.phase, "Cordoned",
        "the intent written first: {entry:#?}"
    );
    assert!(entry.cordoned_by_us, "{entry:#?}");
    hooked.kill();

    // Right after the engine's eviction (its consumer evicted before it).
    let hooked = Hooked::start(
        cluster,
        &SVM_FLAGS,
        HOOKS,
        &format!("{key}=halt-after-evict"),
    );
    cluster.wait_available();
    hooked
        .wait_for(&key, "test hook: halted after Evict", LIMIT)
        .await;
    let engine1 = engines[&n1].1.clone();
    super::stage::wait_until(&stage, "node 1's engine deleting", |s| {
        s.moments()
            .iter()
            .any(|m| matches!(&m.what, What::PodDeleting(p) if p.uid == engine1))
    })
    .await;
    let at_crash = rollouts(&stage.client, &ns).get("upgrade").await.unwrap();
    let entry = node_status(&at_crash, &n1).unwrap();
    println!(
        "dp-crash: halted after the eviction: {}",
        progress(&at_crash)
    );
    assert_eq!(
        entry.evicted_pod_uid, engine1,
        "the uid written first: {entry:#?}"
    );
    hooked.kill();

    // Without hooks; killed again as soon as node 2 is seen cordoned.
    let started = Instant::now();
    cluster.restart_svm();
    println!(
        "dp-crash: svm-apiserver serving again after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    kill_when(&stage, cluster, &format!("{n2} cordoned"), |moment| {
        moment.what == What::Cordoned(n2.clone())
    })
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
    // On each node its consumer went before its engine.
    let order: Vec<String> = world
        .audit
        .requests()
        .iter()
        .filter(|r| r.code == 201)
        .filter_map(|r| {
            let path = r.uri.split('?').next()?;
            let pod = path.strip_suffix("/eviction")?;
            pod.starts_with(&format!("/api/v1/namespaces/{ns}/pods/"))
                .then(|| pod.rsplit('/').next().unwrap_or_default().to_string())
        })
        .collect();
    for (index, node) in stage.nodes.iter().enumerate() {
        let at = |pod: &str| order.iter().position(|p| p == pod);
        let consumer = at(&format!("app-{}", index + 1));
        let engine = at(&engines[node].0);
        assert!(consumer < engine, "{node}: eviction order {order:?}");
    }
    stage.stop();
}

/// As soon as the stage's watches see a moment `at` says (looked for every [`KILL_POLL`]):
/// SIGKILL svm-apiserver, start it again, print what the rollout shows.
async fn kill_when(
    stage: &Stage,
    cluster: &mut RealCluster,
    what: &str,
    at: impl Fn(&Moment) -> bool,
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
        "dp-crash: SIGKILL {:.0} ms after the watch saw {what}",
        (killed.saturating_sub(seen.at)).as_secs_f64() * 1000.0
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
