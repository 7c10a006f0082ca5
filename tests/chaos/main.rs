//! Chaos trials on real processes: a real etcd (one member, or — one trial in three — three
//! members, the replicas given all three URLs), the kube-apiserver test double, and two
//! replicas of the real `svm-apiserver` binary (trigger and migrator on, leader-elected),
//! upgrading 10^4 objects while faults drawn from a printed seed strike: kill -9 of the
//! leader, SIGSTOP of the leader past its lease then SIGCONT, etcd killed and restarted (on
//! three members: the raft leader and a follower the leading replica is connected to, each
//! killed and restarted), 10 % 5xx and 429 (Retry-After) storms, a watch-list stream cut
//! mid-list.
//!
//! Each trial is judged from etcd's own history (see `ledger`): no object left in the old
//! encoding, every migration that succeeded did so once, progress never went backwards, no
//! write from a deposed leader landed and every write is attributed to a holder, and no
//! StorageState said safe while the double still stored an old object (sampled: every safe
//! StorageState write is judged, and a trial must judge at least one), and every migration
//! that succeeded counted each object of its resource once.
//!
//! `SVM_CHAOS_TRIALS` (default 3, `make chaos`: 50) trials run one after another;
//! `SVM_CHAOS_SEED` (or `SVM_TEST_SEED`) replays: trial `i` uses seed + i.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;

mod cluster;
mod gate;
mod ledger;
mod plan;
mod trial;

use std::time::{Duration, Instant};

use cluster::{Cluster, Layout, RESOURCES, Stopped};
use ledger::Ledger;
use support::wait::eventually_async_every;

/// The migrator's request budget: about 25 s for 10^4 objects without faults.
const QPS: u32 = 400;

/// The two tests take turns: each runs etcd, the double and two servers, and a 2-core machine
/// running both at once would mostly measure its own overload.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_trials_lose_no_write_and_misdirect_none() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let trials: u64 = std::env::var("SVM_CHAOS_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(3);
    // The documented replay (`make chaos`, docs/testing.md) is SVM_CHAOS_SEED; the harness's
    // SVM_TEST_SEED works too.
    let base = match std::env::var("SVM_CHAOS_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        Some(seed) => {
            eprintln!("chaos trials: seed {seed} (SVM_CHAOS_SEED)");
            seed
        }
        None => support::seed::seed("chaos trials"),
    };
    let mut reports = Vec::new();
    for i in 0..trials {
        let seed = base.wrapping_add(i);
        eprintln!("trial {}/{trials}: seed {seed}", i + 1);
        let report = match tokio::spawn(trial::run(seed, QPS)).await {
            Ok(report) => report,
            Err(err) => trial::Report {
                seed,
                members: plan::members(seed),
                faults: Vec::new(),
                elapsed: Duration::ZERO,
                upgrade: Duration::ZERO,
                old_left: None,
                holds: Vec::new(),
                accounting: Default::default(),
                refusals: 0,
                failure: Some(format!("the trial panicked: {err}")),
            },
        };
        eprintln!("{}", row(i + 1, &report));
        for problem in report.problems() {
            eprintln!("  PROBLEM: {problem}");
        }
        reports.push(report);
    }
    let table = table(&reports);
    println!("{table}");
    if let Ok(path) = std::env::var("SVM_CHAOS_REPORT") {
        let _ = std::fs::write(path, &table);
    }
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.problems().is_empty())
        .map(|r| format!("seed {}: {}", r.seed, r.problems().join("; ")))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} trials failed (replay one with SVM_CHAOS_SEED=<seed> SVM_CHAOS_TRIALS=1):\n{}",
        failed.len(),
        reports.len(),
        failed.join("\n")
    );
}

fn header() -> String {
    "| # | seed | etcd members | faults | old left | succeeded once | objects counted once | progress ↓ | deposed writes | unattributed | refused by etcd (fenced) | safe samples / unsafe | writes by holder | upgrade / trial |\n\
     |---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        .to_string()
}

fn row(n: u64, r: &trial::Report) -> String {
    let a = &r.accounting;
    let (once, succeeded) = a.succeeded_once();
    let holders: Vec<String> = a
        .writes_by_holder()
        .iter()
        .map(|(holder, n)| format!("{}:{n}", short(holder)))
        .collect();
    let (counted_once, counted) = r.counted_once();
    format!(
        "| {n} | {} | {} | {} | {} | {once}/{succeeded} | {counted_once}/{counted} | {} | {} | {} | {} | {} / {} | {} | {:.0}s / {:.0}s |{}",
        r.seed,
        r.members,
        r.faults.join("; "),
        r.old_left.map_or("?".into(), |n| n.to_string()),
        a.regressions.len(),
        a.deposed(),
        a.unattributed.len(),
        r.refusals,
        a.safe_samples,
        a.unsafe_verdicts.len(),
        holders.join(" "),
        r.upgrade.as_secs_f64(),
        r.elapsed.as_secs_f64(),
        if r.problems().is_empty() {
            ""
        } else {
            " FAILED"
        }
    )
}

fn table(reports: &[trial::Report]) -> String {
    let mut out = vec![header()];
    out.extend(
        reports
            .iter()
            .enumerate()
            .map(|(i, r)| row(i as u64 + 1, r)),
    );
    let passed = reports.iter().filter(|r| r.problems().is_empty()).count();
    out.push(format!("\n{passed} of {} trials passed", reports.len()));
    out.join("\n")
}

/// Polls `check` every 100 ms (a fine poll: the test acts at the moment it comes true) until it
/// is `Ok`, within what is left of `guard`; a failure ends with the replicas' logs.
async fn until<T>(
    cluster: &Cluster,
    guard: Instant,
    what: &str,
    check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    eventually_async_every(
        guard.saturating_duration_since(Instant::now()),
        Duration::from_millis(100),
        what,
        check,
        async || cluster.logs_tail(40),
    )
    .await
}

/// The random suffix of an identity, shortened.
fn short(holder: &str) -> &str {
    let suffix = holder.rsplit('_').next().unwrap_or(holder);
    &suffix[..suffix.len().min(8)]
}

/// A leader SIGSTOPped past its lease with a fenced write of its own in flight: the other
/// replica takes over and finishes; the write reaches etcd only under the new term and is
/// refused by etcd's transaction, which the old leader — woken in the middle of its work —
/// reports as a refused write (its fence is compared first: when the new leader has rewritten
/// the same object meanwhile, the term's end is still what it is told); nothing it sent lands
/// (writes counted by holder from etcd's history, the held one included).
///
/// The write is held by the leader's [`gate::Gate`]: armed with the fence's stamp key, it
/// holds what the leader sends from its next fenced write on; the leader is paused at once,
/// and the gate lets the bytes through once the other replica holds the term. Without it,
/// which comes first when the paused leader wakes — a write, or noticing the lease is lost —
/// would be a race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_writes_nothing_after_it_resumes() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let layout = Layout {
        members: 1,
        gates: true,
    };
    let cluster = Cluster::start(QPS, layout).await;
    let ledger = Ledger::start(
        &cluster.etcd.endpoints(),
        &cluster.prefix,
        cluster.double.engine().clone(),
    );
    // One hang guard for every wait of the test.
    let guard = Instant::now() + Duration::from_secs(300);
    for (resource, _) in RESOURCES {
        until(
            &cluster,
            guard,
            "the first StorageStates",
            async || match cluster.stored(&format!("storagestates/{resource}")).await {
                Some(_) => Ok(()),
                None => Err(format!("none of {resource}")),
            },
        )
        .await;
    }
    for (resource, _) in RESOURCES {
        cluster.double.set_storage_version(resource, "v2").unwrap();
    }
    let old = cluster.old_total();
    // A fifth of the way in, the leader's next fenced write is held in flight, and the leader
    // paused the moment it is.
    until(&cluster, guard, "a fifth migrated", async || {
        let left = cluster.old_total();
        if left * 5 > old * 4 {
            Err(format!("{left} of {old} objects still old"))
        } else {
            Ok(())
        }
    })
    .await;
    let paused = cluster.wait_leader().await.expect("a leader");
    let holder = cluster.stored("leader").await.expect("leader record")["holderIdentity"]
        .as_str()
        .expect("holder")
        .to_string();
    let gate = &cluster.gates[paused];
    gate.arm(&svm_registry::fence::writes_key(&cluster.prefix));
    until(
        &cluster,
        guard,
        "a fenced write of the leader in flight",
        async || {
            if gate.holding() {
                Ok(())
            } else {
                Err("no fenced write sent since the gate was armed".into())
            }
        },
    )
    .await;
    let stopped = Stopped::stop(cluster.replicas[paused].pid().expect("pid"));
    // Stopped: it sends nothing more, and nothing it sent since the gate closed reached etcd.
    let held = gate.held_writes();
    let refused_before = cluster.refusals_of(paused);
    ledger.catch_up().await.expect("ledger");
    let before = ledger.account();

    // The other replica takes over once the lease lapses.
    until(&cluster, guard, "a takeover", async || {
        match cluster.stored("leader-term").await {
            Some(term) if term["holderIdentity"] != holder.as_str() => Ok(()),
            term => Err(format!("leader term {term:?}")),
        }
    })
    .await;
    // Only now does etcd see the held write, under the new term; then SIGCONT: the old
    // leader wakes to etcd's answers, its lease long gone.
    gate.release();
    drop(stopped);
    until(
        &cluster,
        guard,
        "the held write refused by etcd",
        async || {
            let refused = cluster.refusals_of(paused) - refused_before;
            if refused >= held {
                Ok(())
            } else {
                Err(format!(
                    "{refused} refused writes in its log, {held} held in flight"
                ))
            }
        },
    )
    .await;
    for (resource, _) in RESOURCES {
        until(&cluster, guard, "the new leader finishing", async || {
            if cluster.safe_at_v2(resource).await {
                Ok(())
            } else {
                Err(format!("{resource} not safe at v2"))
            }
        })
        .await;
    }
    assert_eq!(cluster.old_total(), 0);
    ledger.catch_up().await.expect("ledger");
    let after = ledger.account();
    let refused = cluster.refusals_of(paused) - refused_before;
    let log = cluster.replicas[paused].log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("a write was refused"))
        .collect();
    eprintln!("the resumed leader's refusals:\n{}", refusals.join("\n"));
    eprintln!(
        "the paused leader had {held} fenced write(s) in flight; etcd refused {refused} of its \
         writes after it woke ({refused_before} before); writes by holder: at the pause {:?}, \
         at the end {:?}; terms {:?}",
        before.writes_by_holder(),
        after.writes_by_holder(),
        after.terms,
    );
    // Judged by term: the replica woken may lead again later (when its successor's lease
    // lapses in turn, as on a loaded machine), in a term of its own, and write then.
    let by = |a: &ledger::Accounting, term: &(svm_storage::Revision, String)| {
        a.writes_by_term.get(term).copied().unwrap_or(0)
    };
    let paused_term = before
        .terms
        .last()
        .cloned()
        .expect("the paused leader's term");
    assert_eq!(paused_term.1, holder);
    assert!(held >= 1, "a fenced write was held in flight");
    assert!(
        refused >= held,
        "every held write refused: {refused} of {held}"
    );
    assert!(
        by(&before, &paused_term) > 0,
        "the paused leader wrote while it led"
    );
    assert_eq!(
        by(&after, &paused_term),
        by(&before, &paused_term),
        "a write of the paused leader's term landed after the pause"
    );
    let next = after
        .terms
        .iter()
        .position(|t| *t == paused_term)
        .expect("paused term")
        + 1;
    let successor = after
        .terms
        .get(next)
        .cloned()
        .expect("a term after the paused one");
    assert_ne!(successor.1, holder);
    assert!(by(&after, &successor) > 0, "the new leader did the rest");
    assert_eq!(after.deposed(), 0, "{:?}", after.deposed_by_holder);
    assert!(after.unattributed.is_empty(), "{:?}", after.unattributed);
    assert!(after.regressions.is_empty(), "{:?}", after.regressions);
    assert!(after.safe_samples > 0 && after.unsafe_verdicts.is_empty());
}
