//! Crash and resume: the server is SIGKILLed mid-migration three times, at pages drawn from a
//! printed seed, and restarted; each time the checkpoint survives, the restarted server goes on
//! from it (never from the first page), progress never goes backwards, and the migration
//! completes with every object rewritten exactly once — in pages (the continue token is the
//! checkpoint) and streamed (the last key done is, while the stream is still arriving). A
//! stream cut mid-list is opened again and goes on after the last key done.

use std::time::Duration;

use rand::{Rng, SeedableRng};

use kube_double::{Fault, FaultRule};

use crate::harness::{Harness, double_with_widgets, migrated, tail};
use crate::support::wait::eventually_async_every;

const OBJECTS: usize = 5_000;
const CHUNK: usize = 100;
/// PATCHes in flight when the server is killed: done but not yet checkpointed.
const IN_FLIGHT: usize = 8;
/// What a streamed run holds between the done prefix and the newest object it read: done
/// out of order there is not checkpointed either (at least a chunk, 4 × the PATCH limit).
const STREAM_WINDOW: usize = CHUNK;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_three_times_a_paged_migration_resumes_from_the_checkpoint_and_completes() {
    let (h, total) = killed_three_times(Mode::Paged).await;
    let counters = h.double.counters();
    // Pages: 51, plus at most one re-done page per crash, plus preflight's LIST (once: a
    // restart after a checkpoint does not repeat it).
    let pages = total.div_ceil(CHUNK) as u64 + 1;
    let lists = h.double.pages_of("configmaps").len() as u64;
    assert!(
        (pages..=pages + 3).contains(&lists),
        "{lists} LIST requests for {pages} pages"
    );
    assert_eq!(counters.requests_for("watch", "configmaps"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_three_times_a_streamed_migration_resumes_after_the_last_key_done() {
    let (h, _) = killed_three_times(Mode::Streamed).await;
    let counters = h.double.counters();
    // One watch-list stream per start, never a page: the one LIST is preflight's, before the
    // first start's first write (a restart after a checkpoint does not repeat it).
    assert_eq!(counters.requests_for("watch", "configmaps"), 4);
    assert_eq!(h.double.pages_of("configmaps").len(), 1);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Paged,
    Streamed,
}

async fn killed_three_times(mode: Mode) -> (Harness, usize) {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", OBJECTS, 64)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    // Every namespace also holds its kube-root-ca.crt ConfigMap, as in a real cluster.
    let total: usize = double.stored_summary("configmaps").values().sum();
    assert!(total > OBJECTS);
    double.reset_counters();
    // Throttled, so there is time to kill it between pages.
    let mut h = Harness::start(
        double,
        &[
            "--qps=500",
            "--burst=50",
            "--chunk-size=100",
            "--object-concurrency=8",
            match mode {
                Mode::Paged => "--watch-list-max-objects=0",
                Mode::Streamed => "--watch-list-max-objects=100000",
            },
        ],
    );
    h.create_migration("crashy", "", "configmaps").await;

    let seed = crate::support::seed::seed("kill points");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let windows = [(400, 1_300), (1_800, 2_800), (3_200, 4_200)];
    for (round, (low, high)) in windows.into_iter().enumerate() {
        let threshold: i64 = rng.random_range(low..high);
        let at_kill = h
            .wait_for("crashy", Duration::from_secs(120), |m| {
                migrated(m) >= threshold
            })
            .await;
        h.server.kill();
        let before = h.double.pages_of("configmaps");
        h.server.restart();
        // What the crash left: the restarted server writes nothing before its next checkpoint,
        // so this is the last checkpoint of the killed one — at least what was seen before.
        let left = h.get_migration("crashy").await.expect("the migration");
        assert!(
            migrated(&left) >= migrated(&at_kill),
            "round {round} (seed {seed}): the checkpoint went back from {} to {}: {left:#}",
            migrated(&at_kill),
            migrated(&left)
        );
        // The restarted server goes on: its next checkpoint counts more (where it resumed is
        // asserted below, from the double's LIST log or the last key done).
        h.wait_for("crashy", Duration::from_secs(60), |m| {
            migrated(m) > migrated(&left)
        })
        .await;
        match mode {
            Mode::Paged => assert_resumed_at_a_recent_token(&h, round, &before).await,
            Mode::Streamed => {
                // The first chunks done after the restart lie after the key checkpointed
                // before the kill: a start from the top would checkpoint demo/cm-00099.
                let through = migrated_through(&at_kill);
                assert!(
                    through.starts_with("demo/cm-"),
                    "round {round}: {at_kill:#}"
                );
                let later = h
                    .wait_for("crashy", Duration::from_secs(60), |m| {
                        migrated(m) >= threshold + 2 * CHUNK as i64
                    })
                    .await;
                assert!(
                    migrated_through(&later) > through,
                    "round {round}: {} after {through}",
                    migrated_through(&later)
                );
            }
        }
    }

    let m = h.wait_succeeded("crashy", Duration::from_secs(180)).await;
    assert_eq!(migrated(&m), total as i64, "{m:#}");
    let summary = h.double.stored_summary("configmaps");
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert_eq!(summary.get(&("v2".to_string(), None)), Some(&total));
    let counters = h.double.counters();
    // Each old object was written once; re-done pages cost only skipped (no-op) writes, and
    // at most a page (plus what was in flight) is re-done per crash.
    assert_eq!(counters.writes_performed_for("configmaps"), total as u64);
    let patches = counters.requests_for("patch", "configmaps");
    let redone = match mode {
        Mode::Paged => CHUNK + IN_FLIGHT,
        Mode::Streamed => CHUNK + STREAM_WINDOW + IN_FLIGHT,
    };
    assert!(
        patches <= (total + 3 * redone) as u64,
        "{patches} PATCHes for {total} objects"
    );
    (h, total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_mid_list_is_opened_again_and_goes_on_after_the_last_key_done() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 3_000, 64)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    let total: usize = double.stored_summary("configmaps").values().sum();
    double.reset_counters();
    // The first stream ends after 1 200 objects, without its initial-events-end bookmark.
    let cut = double.add_fault(
        FaultRule::new(Fault::CutStream {
            after_frames: 1_200,
        })
        .verb("watch")
        .resource("configmaps")
        .times(1),
    );
    let h = Harness::start(
        double,
        &["--qps=0", "--chunk-size=100", "--object-concurrency=8"],
    );
    h.create_migration("cut", "", "configmaps").await;
    let m = h.wait_succeeded("cut", Duration::from_secs(180)).await;
    assert_eq!(h.double.fault_injections(cut), 1);
    assert_eq!(migrated(&m), total as i64, "{m:#}");
    let counters = h.double.counters();
    // A second stream, no page; what the first one admitted was finished and checkpointed
    // before the second opened, so no object was PATCHed twice.
    // (The one LIST is preflight's.)
    assert_eq!(counters.requests_for("watch", "configmaps"), 2);
    assert_eq!(h.double.pages_of("configmaps").len(), 1);
    assert_eq!(counters.requests_for("patch", "configmaps"), total as u64);
    assert_eq!(counters.writes_performed_for("configmaps"), total as u64);
    assert_eq!(
        h.double
            .stored_summary("configmaps")
            .get(&("v2".to_string(), None)),
        Some(&total)
    );
    let log = h.server.log();
    assert!(
        log.contains("the stream was cut; streaming the rest"),
        "{}",
        tail(&log, 30)
    );
}

/// The first LIST after the restart carries a continue token handed out by one of the last
/// two pages before the kill (the checkpoint is written after a page is done).
async fn assert_resumed_at_a_recent_token(
    h: &Harness,
    round: usize,
    before: &[kube_double::ListRecord],
) {
    let after = wait_for_list_after(h, before.len()).await;
    let token = after
        .continue_token
        .clone()
        .unwrap_or_else(|| panic!("round {round}: restarted from the first page: {after:?}"));
    let recent: Vec<Option<String>> = before
        .iter()
        .rev()
        .take(2)
        .map(|l| l.next_continue.clone())
        .collect();
    assert!(
        recent.contains(&Some(token.clone())),
        "round {round}: resumed at {token}, not at the checkpoint ({recent:?})\n{}",
        tail(&h.server.log(), 40)
    );
}

fn migrated_through(m: &serde_json::Value) -> String {
    m["status"]["progress"]["migratedThrough"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Waits (30 s, polling every 50 ms: the restart is quick) for the double to log a LIST after
/// the first `seen` ones.
async fn wait_for_list_after(h: &Harness, seen: usize) -> kube_double::ListRecord {
    eventually_async_every(
        Duration::from_secs(30),
        Duration::from_millis(50),
        "a LIST after the restart",
        async || {
            let lists = h.double.pages_of("configmaps");
            lists
                .get(seen)
                .cloned()
                .ok_or_else(|| format!("{} LISTs, none after the first {seen}", lists.len()))
        },
        async || tail(&h.server.log(), 40),
    )
    .await
}
