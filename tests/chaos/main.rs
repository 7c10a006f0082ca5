//! Chaos trials on real processes: a real etcd, the kube-apiserver test double, and two
//! replicas of the real `svm-apiserver` binary (trigger and migrator on, leader-elected),
//! upgrading 10^4 objects while faults drawn from a printed seed strike: kill -9 of the
//! leader, SIGSTOP of the leader past its lease then SIGCONT, etcd killed and restarted, 10 %
//! 5xx and 429 (Retry-After) storms, a watch-list stream cut mid-list.
//!
//! Each trial is judged from etcd's own history (see `ledger`): no object left in the old
//! encoding, every migration that succeeded did so once, progress never went backwards, no
//! write from a deposed leader landed and every write is attributed to a holder, and no
//! StorageState said safe while the double still stored an old object (sampled: every safe
//! StorageState write is judged, and a trial must judge at least one).
//!
//! `SVM_CHAOS_TRIALS` (default 3, `make chaos`: 50) trials run one after another;
//! `SVM_CHAOS_SEED` replays: trial `i` uses seed + i.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;

mod cluster;
mod ledger;
mod plan;
mod trial;

use std::time::{Duration, Instant};

use cluster::{Cluster, RESOURCES, Stopped};
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
    let base = support::seed::seed("chaos trials");
    let mut reports = Vec::new();
    for i in 0..trials {
        let seed = base.wrapping_add(i);
        eprintln!("trial {}/{trials}: seed {seed}", i + 1);
        let report = match tokio::spawn(trial::run(seed, QPS)).await {
            Ok(report) => report,
            Err(err) => trial::Report {
                seed,
                faults: Vec::new(),
                elapsed: Duration::ZERO,
                upgrade: Duration::ZERO,
                old_left: None,
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
    "| # | seed | faults | old left | succeeded once | progress ↓ | deposed writes | unattributed | refused (fenced) | safe samples / unsafe | writes by holder | upgrade / trial |\n\
     |---|---|---|---|---|---|---|---|---|---|---|---|"
        .to_string()
}

fn row(n: u64, r: &trial::Report) -> String {
    let a = &r.accounting;
    let (once, succeeded) = a.succeeded_once();
    let holders: Vec<String> = a
        .writes_by_holder
        .iter()
        .map(|(holder, n)| format!("{}:{n}", short(holder)))
        .collect();
    format!(
        "| {n} | {} | {} | {} | {once}/{succeeded} | {} | {} | {} | {} | {} / {} | {} | {:.0}s / {:.0}s |{}",
        r.seed,
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

/// A leader SIGSTOPped past its lease: the other replica takes over and finishes the upgrade;
/// after SIGCONT the old leader — woken in the middle of its work — writes nothing, counted
/// by holder from etcd's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_writes_nothing_after_it_resumes() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(QPS).await;
    let ledger = Ledger::start(
        &cluster.etcd.endpoint(),
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
    // A fifth of the way in, the leader is paused.
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
    let stopped = Stopped::stop(cluster.replicas[paused].pid().expect("pid"));

    // The other replica takes over once the lease lapses, and finishes the upgrade alone.
    until(&cluster, guard, "a takeover", async || {
        match cluster.stored("leader-term").await {
            Some(term) if term["holderIdentity"] != holder.as_str() => Ok(()),
            term => Err(format!("leader term {term:?}")),
        }
    })
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
    let before = ledger.account();

    // SIGCONT: it wakes in the middle of a page, its lease long gone.
    drop(stopped);
    until(&cluster, guard, "the resumed leader noticing", async || {
        if ["lost the leader lease", "a write was refused"]
            .iter()
            .any(|line| cluster.replicas[paused].log().contains(line))
        {
            Ok(())
        } else {
            Err("neither \"lost the leader lease\" nor \"a write was refused\" in its log".into())
        }
    })
    .await;
    // Whatever it was doing, give it time to try.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ledger.catch_up().await.expect("ledger");
    let after = ledger.account();
    eprintln!(
        "writes by holder: before SIGCONT {:?}, after {:?}; terms {:?}; refused writes in the \
         resumed replica's log: {}",
        before.writes_by_holder,
        after.writes_by_holder,
        after.terms,
        cluster.replicas[paused]
            .log()
            .matches("a write was refused")
            .count()
    );
    let by = |a: &ledger::Accounting, h: &str| a.writes_by_holder.get(h).copied().unwrap_or(0);
    assert!(
        by(&before, &holder) > 0,
        "the paused leader wrote while it led"
    );
    assert_eq!(
        by(&after, &holder),
        by(&before, &holder),
        "the paused leader wrote after SIGCONT"
    );
    let successor = after.terms.last().map(|t| t.1.clone()).expect("terms");
    assert_ne!(successor, holder);
    assert!(by(&after, &successor) > 0, "the new leader did the rest");
    assert_eq!(after.deposed(), 0, "{:?}", after.deposed_by_holder);
    assert!(after.unattributed.is_empty(), "{:?}", after.unattributed);
    assert!(after.regressions.is_empty(), "{:?}", after.regressions);
    assert!(after.safe_samples > 0 && after.unsafe_verdicts.is_empty());
}
