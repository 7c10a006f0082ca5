//! One chaos trial: the upgrade of 10^4 objects (every migrated resource's storage version
//! moves to v2, the trigger records it and the migrator rewrites them) on one etcd member or
//! three, under the faults the trial's seed draws, then the accounting.

use std::time::{Duration, Instant};

use kube_double::{Fault as DoubleFault, FaultRule};
use svm_storage::Storage;
use svm_storage::etcd::EtcdStorage;

use crate::cluster::{Cluster, Etcd, LEASE, Layout, RESOURCES, Stopped};
use crate::ledger::{Accounting, Ledger};
use crate::plan::{self, Fault, Member};

/// How long the upgrade may go on with no object leaving the old encoding (a hang guard, not
/// a speed check: a slow machine makes the upgrade longer, never a failure).
const UPGRADE_GUARD: Duration = Duration::from_secs(300);

/// What one trial saw.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub seed: u64,
    /// etcd members the trial ran (1 or 3).
    pub members: usize,
    /// Each fault as applied: what, at what share of the migration, and what came of it.
    pub faults: Vec<String>,
    pub elapsed: Duration,
    /// From the storage-version move to every StorageState safe at v2, faults included.
    pub upgrade: Duration,
    /// Objects still in the old encoding once the StorageStates said safe.
    pub old_left: Option<usize>,
    /// How many objects each migrated resource holds (the preloaded ones and any the double
    /// starts with), read from the double at the end.
    pub holds: Vec<(String, i64)>,
    pub accounting: Accounting,
    /// Fenced writes the replicas' logs say were refused.
    pub refusals: usize,
    /// Why the trial could not finish (a hang, a panic).
    pub failure: Option<String>,
}

impl Report {
    /// Succeeded migrations of the migrated resources whose count is the resource's size, of
    /// those that succeeded.
    pub(crate) fn counted_once(&self) -> (usize, usize) {
        let mut right = 0;
        let mut counted = 0;
        for (_, resource, migrated) in &self.accounting.counted {
            if let Some((_, holds)) = self.holds.iter().find(|(name, _)| name == resource) {
                counted += 1;
                if holds == migrated {
                    right += 1;
                }
            }
        }
        (right, counted)
    }

    /// What went wrong; empty when every invariant held.
    pub(crate) fn problems(&self) -> Vec<String> {
        let a = &self.accounting;
        let mut out = Vec::new();
        if let Some(failure) = &self.failure {
            out.push(failure.clone());
        }
        if let Some(broken) = &a.broken {
            out.push(format!("ledger incomplete: {broken}"));
        }
        match self.old_left {
            Some(0) => {}
            Some(n) => out.push(format!("{n} objects left in the old encoding")),
            None => out.push("old encoding not counted".into()),
        }
        if a.deposed() > 0 {
            out.push(format!(
                "writes from deposed leaders landed: {:?}",
                a.deposed_by_holder
            ));
        }
        if !a.unattributed.is_empty() {
            out.push(format!("unattributed writes: {:?}", a.unattributed));
        }
        if !a.regressions.is_empty() {
            out.push(format!("progress went backwards: {:?}", a.regressions));
        }
        let (once, succeeded) = a.succeeded_once();
        if once != succeeded {
            out.push(format!("succeeded more than once: {:?}", a.successes));
        }
        // Each object counted once: a migration of a migrated resource that succeeded says it
        // migrated exactly as many objects as the resource holds, faults or not.
        let (right, counted) = self.counted_once();
        if right != counted {
            out.push(format!(
                "objects counted other than once: migrations {:?}, resources {:?}",
                a.counted, self.holds
            ));
        }
        if !a.failures.is_empty() {
            out.push(format!("migrations failed: {:?}", a.failures));
        }
        if a.safe_samples == 0 {
            out.push("no safe StorageState was judged".into());
        }
        if !a.unsafe_verdicts.is_empty() {
            out.push(format!(
                "safe while old objects remained: {:?}",
                a.unsafe_verdicts
            ));
        }
        out
    }
}

/// Runs the trial of `seed`.
pub(crate) async fn run(seed: u64, qps: u32) -> Report {
    let started = Instant::now();
    let members = plan::members(seed);
    let mut report = Report {
        seed,
        members,
        faults: Vec::new(),
        elapsed: Duration::ZERO,
        upgrade: Duration::ZERO,
        old_left: None,
        holds: Vec::new(),
        accounting: Accounting::default(),
        refusals: 0,
        failure: None,
    };
    let layout = Layout {
        members,
        gates: false,
    };
    let mut cluster = Cluster::start(qps, layout).await;
    let ledger = Ledger::start(
        &cluster.etcd.endpoints(),
        &cluster.prefix,
        cluster.double.engine().clone(),
    );
    let outcome = upgrade(&mut cluster, seed, &mut report).await;
    if let Err(why) = outcome {
        report.failure = Some(format!("{why}\n{}", cluster.logs_tail(30)));
    }
    if let Err(why) = ledger.catch_up().await {
        report.failure.get_or_insert(why);
    }
    report.accounting = ledger.account();
    report.holds = RESOURCES
        .iter()
        .map(|(resource, _)| {
            let objects: usize = cluster.double.stored_summary(resource).values().sum();
            (resource.to_string(), objects as i64)
        })
        .collect();
    report.refusals = cluster.refusals();
    report.elapsed = started.elapsed();
    report
}

async fn upgrade(cluster: &mut Cluster, seed: u64, report: &mut Report) -> Result<(), String> {
    // The trigger's first start made the StorageStates of the migrated resources.
    wait(
        Duration::from_secs(120),
        "the trigger's first StorageStates",
        || async {
            for (resource, _) in RESOURCES {
                if cluster
                    .stored(&format!("storagestates/{resource}"))
                    .await
                    .is_none()
                {
                    return false;
                }
            }
            true
        },
    )
    .await?;
    let plan = plan::draw(seed);
    let mut cuts = Vec::new();
    for step in plan.iter().filter(|s| s.at == 0.0) {
        cuts.push((report.faults.len(), arm(cluster, &step.fault)));
        report.faults.push(format!("{} @0%", step.fault.label()));
    }
    // The upgrade: every migrated resource moves to v2.
    for (resource, _) in RESOURCES {
        cluster
            .double
            .set_storage_version(resource, "v2")
            .map_err(|e| format!("moving {resource}: {e}"))?;
    }
    let moved = Instant::now();
    let old_at_start = cluster.old_total().max(1);
    let mut stall = Stall::default();
    for step in plan.iter().filter(|s| s.at > 0.0) {
        let reached = loop {
            if finished(cluster).await {
                break false;
            }
            let old = cluster.old_total();
            let done = 1.0 - old as f64 / old_at_start as f64;
            if done >= step.at {
                break true;
            }
            stall
                .saw(old)
                .map_err(|stalled| format!("not {:.0}% done: {stalled}", step.at * 100.0))?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if !reached {
            report
                .faults
                .push(format!("{} (not reached: done first)", step.fault.label()));
            continue;
        }
        let percent = (step.at * 100.0).round();
        let note = match &step.fault {
            Fault::CutStream { .. } => {
                cuts.push((report.faults.len(), arm(cluster, &step.fault)));
                String::new()
            }
            other => apply(cluster, other).await?,
        };
        report
            .faults
            .push(format!("{} @{percent}%{note}", step.fault.label()));
    }
    while !finished(cluster).await {
        stall
            .saw(cluster.old_total())
            .map_err(|stalled| format!("every StorageState safe at v2: {stalled}"))?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report.upgrade = moved.elapsed();
    report.old_left = Some(cluster.old_total());
    for (index, id) in cuts {
        let hit = cluster.double.fault_injections(id) > 0;
        report.faults[index].push_str(if hit { " (hit)" } else { " (not hit)" });
    }
    Ok(())
}

/// Whether every migrated resource's StorageState says safe at v2.
async fn finished(cluster: &Cluster) -> bool {
    for (resource, _) in RESOURCES {
        if !cluster.safe_at_v2(resource).await {
            return false;
        }
    }
    true
}

/// Installs a stream cut; returns its rule id.
fn arm(cluster: &Cluster, fault: &Fault) -> u64 {
    let Fault::CutStream { resource, after } = fault else {
        return 0;
    };
    cluster.double.add_fault(
        FaultRule::new(DoubleFault::CutStream {
            after_frames: *after,
        })
        .verb("watch")
        .resource(resource)
        .times(1),
    )
}

/// Applies a fault; returns a note on what happened.
async fn apply(cluster: &mut Cluster, fault: &Fault) -> Result<String, String> {
    match fault {
        Fault::KillLeader { down } => {
            let Some(leader) = cluster.wait_leader().await else {
                return Ok(" (no leader)".into());
            };
            tokio::task::block_in_place(|| cluster.replicas[leader].kill());
            tokio::time::sleep(*down).await;
            tokio::task::block_in_place(|| cluster.replicas[leader].restart());
            Ok(String::new())
        }
        Fault::PauseLeader { past_lease } => {
            let Some(leader) = cluster.wait_leader().await else {
                return Ok(" (no leader)".into());
            };
            let pid = cluster.replicas[leader]
                .pid()
                .ok_or("the leader has no process")?;
            let stopped = Stopped::stop(pid);
            tokio::time::sleep(LEASE + *past_lease).await;
            drop(stopped);
            Ok(String::new())
        }
        Fault::RestartEtcd { down } => {
            let Etcd::One(etcd) = &mut cluster.etcd else {
                return Err("an etcd restart drawn for three members".into());
            };
            tokio::task::block_in_place(|| etcd.kill());
            tokio::time::sleep(*down).await;
            tokio::task::block_in_place(|| etcd.restart());
            Ok(String::new())
        }
        Fault::KillMember { member, down } => kill_member(cluster, *member, *down).await,
        Fault::ServerErrors { lasting } => {
            let rules = [
                FaultRule::new(DoubleFault::ServerError { code: 503 })
                    .verb("patch")
                    .fraction(0.1),
                FaultRule::new(DoubleFault::ServerError { code: 500 })
                    .verb("list")
                    .fraction(0.1),
            ];
            storm(cluster, rules, *lasting).await
        }
        Fault::Throttling { lasting } => {
            let throttled = |verb: &str| {
                FaultRule::new(DoubleFault::TooManyRequests {
                    retry_after_seconds: 1,
                })
                .verb(verb)
                .fraction(0.1)
            };
            storm(cluster, [throttled("patch"), throttled("list")], *lasting).await
        }
        Fault::CutStream { .. } => Ok(String::new()),
    }
}

/// Kills one of three etcd members, restarts it after `down`; says which member went, and how
/// long until the controllers' next write landed (`<prefix>/leader-writes` moved) — while it
/// was down, or after it came back.
async fn kill_member(
    cluster: &mut Cluster,
    member: Member,
    down: Duration,
) -> Result<String, String> {
    let Etcd::Three(members) = &cluster.etcd else {
        return Err("a member kill drawn for one etcd".into());
    };
    let leader = tokio::task::block_in_place(|| members.wait_leader());
    let replica = cluster.wait_leader().await;
    let connected = replica
        .and_then(|r| cluster.replicas[r].pid())
        .map(|pid| members.connected(pid))
        .unwrap_or_default();
    let victim = match member {
        Member::Leader => leader,
        // The leading replica's client is connected to every member it can reach; any of
        // them but the raft leader is a connected follower.
        Member::Connected => match connected.iter().find(|m| **m != leader) {
            Some(found) => *found,
            None => return Ok(format!(" (no follower connected: {connected:?})")),
        },
    };
    let name = members.members()[victim].name().to_string();
    // One client for the whole fault, given every member: it rides out the kill.
    let client = cluster
        .etcd_client()
        .await
        .ok_or("no etcd client before the kill")?;
    let prefix = cluster.prefix.clone();
    let stamp = last_write(&client, &prefix).await;
    let Etcd::Three(members) = &mut cluster.etcd else {
        unreachable!("matched above");
    };
    tokio::task::block_in_place(|| members.kill(victim));
    let killed = Instant::now();
    let mut recovered = None;
    while killed.elapsed() < down {
        if last_write(&client, &prefix).await > stamp {
            recovered = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(rest) = down.checked_sub(killed.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let Etcd::Three(members) = &mut cluster.etcd else {
        unreachable!("matched above");
    };
    tokio::task::block_in_place(|| members.restart(victim));
    let back = killed.elapsed();
    // A hang guard, not a speed check: the migration may have finished meanwhile.
    while recovered.is_none() && killed.elapsed() < back + Duration::from_secs(30) {
        if last_write(&client, &prefix).await > stamp {
            recovered = Some(killed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recovery = match recovered {
        Some(after) if after <= back => {
            format!("next write {:.2}s after, while down", after.as_secs_f64())
        }
        Some(after) => format!("next write {:.2}s after, once back", after.as_secs_f64()),
        None => "no write since".into(),
    };
    Ok(format!(
        " ({name}: {recovery}; back and healthy {:.1}s after the kill)",
        back.as_secs_f64()
    ))
}

/// The revision of the controllers' last write (`<prefix>/leader-writes`'s mod revision; 0 when
/// etcd does not answer).
async fn last_write(client: &EtcdStorage, prefix: &str) -> i64 {
    client
        .get(&format!("{prefix}/leader-writes"))
        .await
        .ok()
        .flatten()
        .map_or(0, |kv| kv.mod_revision)
}

/// `rules` for `lasting`; says how many requests they hit.
async fn storm(
    cluster: &Cluster,
    rules: [FaultRule; 2],
    lasting: Duration,
) -> Result<String, String> {
    let ids: Vec<u64> = rules
        .into_iter()
        .map(|rule| cluster.double.add_fault(rule))
        .collect();
    tokio::time::sleep(lasting).await;
    let mut hits = 0;
    for id in ids {
        hits += cluster.double.fault_injections(id);
        cluster.double.remove_fault(id);
    }
    Ok(format!(" ({hits} hit)"))
}

/// The upgrade's hang guard: objects left in the old encoding, and since when that count
/// has not moved; [`UPGRADE_GUARD`] without a move fails the trial.
#[derive(Default)]
struct Stall {
    last: Option<(usize, Instant)>,
}

impl Stall {
    fn saw(&mut self, old: usize) -> Result<(), String> {
        match self.last {
            Some((last, since)) if last == old => {
                if since.elapsed() > UPGRADE_GUARD {
                    return Err(format!(
                        "{old} objects still in the old encoding, unchanged for {UPGRADE_GUARD:?}"
                    ));
                }
            }
            _ => self.last = Some((old, Instant::now())),
        }
        Ok(())
    }
}

/// Polls `done` every 100 ms until it holds, or fails after `guard`.
async fn wait<F, Fut>(guard: Duration, what: &str, mut done: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + guard;
    while !done().await {
        if Instant::now() > deadline {
            return Err(format!("{what}: not within {guard:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
