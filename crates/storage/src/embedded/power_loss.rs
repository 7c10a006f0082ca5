//! The power-loss test: a workload of creates, updates, deletes, multi-key transactions and
//! compactions runs through the embedded store on a filesystem that records every call
//! (`crash.rs`). Then, at every crash point — before the first call and after each write,
//! fsync, create, rename, link and removal — every state a power loss there could leave
//! (`crash.rs` says which) is opened as a store, and must be:
//! - opened: a crash never leaves a log that refuses to open;
//! - exactly the state after some prefix of the operations issued so far that holds every
//!   acknowledged one (every key's history, value and revisions; the current and compacted
//!   revisions): nothing acknowledged is lost, nothing is there that was not issued;
//! - writable: a write after the reopen is acknowledged at the next revision and survives a
//!   power loss right after it (so what the open cut off was cut durably).
//!
//! Size and seed come from the environment: `SVM_POWER_LOSS_OPS` operations (default
//! [`DEFAULT_OPS`], a few seconds), `SVM_POWER_LOSS_SEED` (default: random). Both are printed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::crash::{Model, Recorder};
use super::fs::Fs;
use super::wal::{self, Wal};
use super::{EmbeddedOptions, EmbeddedStorage};
use crate::{Compare, KeyValue, ListOptions, Op, Result, Revision, Storage, Txn, TxnOutcome};

/// Where the store lives on the recorded filesystem (`/srv` does not exist at first: opening
/// creates both directories).
const DIR: &str = "/srv/data";
/// Operations of the workload when `SVM_POWER_LOSS_OPS` is not set.
const DEFAULT_OPS: usize = 120;
/// Crash images opened at one crash point, at most (more are sampled).
const IMAGES_PER_POINT: usize = 256;
/// Keys the workload writes: few, so that updates, deletes and re-creates are frequent.
const KEYS: usize = 8;

/// One operation of the workload.
#[derive(Clone, Debug)]
enum Step {
    Txn(Txn),
    Compact(Revision),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Txn(TxnOutcome),
    Compacted,
}

/// One operation as issued to the store under test.
struct Issued {
    /// Calls recorded before it started, and when it returned.
    start: usize,
    end: usize,
    /// The revision it was acknowledged with (`None` for a compaction).
    revision: Option<Revision>,
}

/// A store's state, exactly: its snapshot encoding (every key's retained history, the current
/// and compacted revisions) and its live keys as a list answers them.
#[derive(Debug, PartialEq, Eq)]
struct State {
    snapshot: Vec<u8>,
    live: Vec<KeyValue>,
}

/// What the crash images showed.
#[derive(Debug, Default)]
struct Report {
    images: usize,
    /// Acknowledged writes missing from a reopened store, summed over the images.
    acknowledged_lost: usize,
    refused: usize,
    /// Reopened states that are no state after a prefix of the issued operations holding every
    /// acknowledged one.
    not_a_prefix: usize,
    /// Reopened stores that did not take a write, or lost it to a power loss right after.
    not_writable: usize,
    /// The first failure, in words.
    first: Option<String>,
}

impl Report {
    fn fail(&mut self, what: String) {
        self.first.get_or_insert(what);
    }
}

fn options() -> EmbeddedOptions {
    EmbeddedOptions {
        // No watches here: a small feed makes the thousands of opens cheap.
        watch_buffer: 1,
        ..EmbeddedOptions::default()
    }
}

async fn open(fs: Recorder) -> Result<EmbeddedStorage> {
    EmbeddedStorage::open_on(Arc::new(fs), Path::new(DIR), options()).await
}

async fn state_of(store: &EmbeddedStorage) -> State {
    let snapshot = wal::encode_snapshot(&store.store.read().unwrap()).unwrap();
    let live = store.list("/", ListOptions::default()).await.unwrap().items;
    State { snapshot, live }
}

async fn run(store: &EmbeddedStorage, step: &Step) -> Result<Outcome> {
    match step {
        Step::Txn(txn) => Ok(Outcome::Txn(store.txn(txn.clone()).await?)),
        Step::Compact(revision) => {
            store.compact(*revision).await?;
            Ok(Outcome::Compacted)
        }
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: impl FnOnce() -> T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        Err(_) => default(),
    }
}

/// A value: mostly short, sometimes long enough to span sectors, sometimes empty, sometimes
/// with long runs of zeros (which a torn write leaves too).
fn value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.random_range(0..10) {
        0 => rng.random_range(600..1500),
        1 => 0,
        _ => rng.random_range(1..120),
    };
    let zeros = rng.random_bool(0.15);
    (0..len)
        .map(|i| match zeros && i % 700 < 530 {
            true => 0,
            false => b'a' + rng.random_range(0..26u8),
        })
        .collect()
}

/// The next operation, given the live keys and their mod revisions.
fn next_step(
    rng: &mut StdRng,
    live: &BTreeMap<String, Revision>,
    current: Revision,
    compacted: Revision,
) -> Step {
    let key = |rng: &mut StdRng| format!("/p/k{}", rng.random_range(0..KEYS));
    match rng.random_range(0..100) {
        0..8 if current > compacted => Step::Compact(rng.random_range(compacted + 1..=current)),
        8..20 => {
            // Several keys at one revision, without compares.
            let mut keys: Vec<String> = (0..rng.random_range(2..=3)).map(|_| key(rng)).collect();
            keys.sort();
            keys.dedup();
            let ops = keys
                .into_iter()
                .map(|k| match rng.random_bool(0.7) {
                    true => Op::Put(k, value(rng)),
                    false => Op::Delete(k),
                })
                .collect();
            Step::Txn(Txn {
                compares: Vec::new(),
                ops,
            })
        }
        20..23 => {
            // A compare that fails: nothing is written.
            let k = key(rng);
            Step::Txn(Txn {
                compares: vec![Compare::ModRevision(k.clone(), current + 1)],
                ops: vec![Op::Put(k, value(rng))],
            })
        }
        _ => {
            let k = key(rng);
            let (compares, op) = match live.get(&k) {
                None => (vec![Compare::Absent(k.clone())], Op::Put(k, value(rng))),
                Some(&revision) => {
                    let compare = vec![Compare::ModRevision(k.clone(), revision)];
                    match rng.random_bool(0.75) {
                        true => (compare, Op::Put(k, value(rng))),
                        false => (compare, Op::Delete(k)),
                    }
                }
            };
            Step::Txn(Txn {
                compares,
                ops: vec![op],
            })
        }
    }
}

/// Opens `image` and checks it against the states after `acked..=started` operations.
async fn check(
    image: Model,
    states: &[State],
    issued: &[Issued],
    acked: usize,
    started: usize,
    point: usize,
    report: &mut Report,
) {
    report.images += 1;
    let fs = Recorder::from_model(image);
    // (On this thread, as `open` does it on a blocking one: thousands of hand-offs to a
    // blocking thread would cost more than the rest of the check.)
    let opened = EmbeddedStorage::open_blocking(Arc::new(fs.clone()), Path::new(DIR), options());
    let store = match opened {
        Ok(store) => store,
        Err(error) => {
            report.refused += 1;
            report.fail(format!(
                "crash point {point}: the store did not open: {error}"
            ));
            return;
        }
    };
    let current = store.current_revision().await.unwrap();
    let lost = issued[..acked]
        .iter()
        .filter(|op| op.revision.is_some_and(|r| r > current))
        .count();
    report.acknowledged_lost += lost;
    let got = state_of(&store).await;
    if !states[acked..=started].contains(&got) {
        report.not_a_prefix += 1;
        report.fail(format!(
            "crash point {point}: reopened at revision {current}, which is not the state after \
             {acked}..={started} operations; {lost} acknowledged writes missing"
        ));
    }
    // Writes go on after the reopen, and survive a power loss right after.
    // (Committed as `txn` commits it, on this thread.)
    let written = store
        .store
        .commit(Txn {
            compares: vec![Compare::Absent("/after/crash".into())],
            ops: vec![Op::Put("/after/crash".into(), b"after".to_vec())],
        })
        .map(|outcome| match outcome {
            TxnOutcome::Committed { revision } => revision,
            TxnOutcome::Failed { .. } => 0,
        });
    drop(store);
    // (The log itself, opened as the store opens it, without a second store around it.)
    let again = Wal::open(
        Arc::new(Recorder::from_model(fs.model().durable())),
        Path::new(DIR),
    );
    let kept = match (&written, &again) {
        (Ok(revision), Ok(again)) => {
            *revision == current + 1
                && again.mvcc.current() == *revision
                && again
                    .mvcc
                    .get("/after/crash")
                    .is_some_and(|kv| kv.mod_revision == *revision)
        }
        _ => false,
    };
    if !kept {
        report.not_writable += 1;
        report.fail(format!(
            "crash point {point}: after the reopen at revision {current}, a write gave \
             {written:?} and a reopen after it {}",
            again
                .as_ref()
                .err()
                .map_or("opened".into(), |e| e.to_string())
        ));
    }
}

#[tokio::test]
async fn no_acknowledged_write_is_lost_at_any_crash_point() {
    let seed: u64 = env_or("SVM_POWER_LOSS_SEED", rand::random);
    let ops: usize = env_or("SVM_POWER_LOSS_OPS", || DEFAULT_OPS);
    let mut rng = StdRng::seed_from_u64(seed);

    // The workload, on the recorded filesystem and on a store in memory (the reference).
    let fs = Recorder::default();
    let store = open(fs.clone()).await.unwrap();
    let reference = EmbeddedStorage::in_memory();
    let mut states = vec![state_of(&reference).await];
    let mut issued = Vec::new();
    let (mut transactions, mut compactions) = (0, 0);
    for _ in 0..ops {
        let live: BTreeMap<String, Revision> = states
            .last()
            .unwrap()
            .live
            .iter()
            .map(|kv| (kv.key.clone(), kv.mod_revision))
            .collect();
        let current = reference.current_revision().await.unwrap();
        let compacted = reference.store.read().unwrap().compacted();
        let step = next_step(&mut rng, &live, current, compacted);
        let start = fs.recorded();
        let outcome = run(&store, &step).await.unwrap();
        let end = fs.recorded();
        assert_eq!(run(&reference, &step).await.unwrap(), outcome, "{step:?}");
        let revision = match outcome {
            Outcome::Txn(TxnOutcome::Committed { revision }) => {
                transactions += 1;
                Some(revision)
            }
            Outcome::Txn(TxnOutcome::Failed { .. }) => None,
            Outcome::Compacted => {
                compactions += 1;
                None
            }
        };
        issued.push(Issued {
            start,
            end,
            revision,
        });
        states.push(state_of(&reference).await);
    }
    assert_eq!(state_of(&store).await, *states.last().unwrap());
    drop(store);

    // Every crash point, every image.
    let events = fs.events();
    let mut model = Model::default();
    let mut report = Report::default();
    for point in 0..=events.len() {
        if let Some(event) = point.checked_sub(1).map(|i| &events[i]) {
            model.apply(event);
        }
        let acked = issued.iter().filter(|op| op.end <= point).count();
        let started = issued
            .iter()
            .filter(|op| op.start < point)
            .count()
            .max(acked);
        for image in model.crash_images(IMAGES_PER_POINT, &mut rng) {
            check(image, &states, &issued, acked, started, point, &mut report).await;
        }
    }

    let writes = events.iter().filter(|e| e.is_write()).count();
    let syncs = events.iter().filter(|e| e.is_sync()).count();
    println!(
        "power-loss test: seed {seed} (SVM_POWER_LOSS_SEED), {ops} operations \
         (SVM_POWER_LOSS_OPS, default {DEFAULT_OPS}): {transactions} committed transactions, \
         {compactions} compactions; {} recorded calls ({writes} writes, {syncs} fsyncs, {} \
         creates, renames, links, removals, truncations) = {} crash points; {} crash images \
         reopened. acknowledged lost: {}; refused to open: {}; not the state after a prefix of \
         the issued operations: {}; not writable after the reopen: {}",
        events.len(),
        events.len() - writes - syncs,
        events.len() + 1,
        report.images,
        report.acknowledged_lost,
        report.refused,
        report.not_a_prefix,
        report.not_writable,
    );
    assert!(
        report.first.is_none(),
        "seed {seed}: {}",
        report.first.unwrap_or_default()
    );
    assert_eq!(report.acknowledged_lost, 0);
}

/// `store recover` is power-loss safe too: at every crash point of a recovery, the store either
/// still refuses at the same damage (nothing changed) or opens as recovered, with the damaged
/// log kept under its second name.
#[tokio::test]
async fn a_recovery_leaves_the_damaged_log_or_the_recovered_one_at_every_crash_point() {
    let dir = Path::new(DIR);
    let log = dir.join("wal.log");
    let fs = Recorder::default();
    let store = open(fs.clone()).await.unwrap();
    for i in 0..5 {
        store
            .create(&format!("/r/{i}"), vec![b'v'; 40])
            .await
            .unwrap();
    }
    drop(store);
    // A flipped bit in the last record: the store refuses to open.
    let mut damaged = fs.read(&log).unwrap();
    let last = damaged.len() - 3;
    damaged[last] ^= 0x10;
    let mut file = fs.create(&log).unwrap();
    file.write_all(&damaged).unwrap();
    file.sync_all().unwrap();
    let before = fs.model().durable();
    let refused = |error: &crate::StorageError| error.to_string().contains("is damaged at byte");
    assert!(
        open(Recorder::from_model(before.clone()))
            .await
            .is_err_and(|e| refused(&e))
    );

    let fs = Recorder::from_model(before.clone());
    let recovery = wal::recover_on(&fs, dir).unwrap();
    assert_eq!(recovery.revision, 5);
    let copy = recovery.damaged_copy.clone().unwrap();
    let events = fs.events();
    let mut model = before;
    let mut rng = StdRng::seed_from_u64(0);
    let (mut images, mut recovered) = (0, 0);
    for point in 0..=events.len() {
        if let Some(event) = point.checked_sub(1).map(|i| &events[i]) {
            model.apply(event);
        }
        for image in model.crash_images(IMAGES_PER_POINT, &mut rng) {
            images += 1;
            let image = Recorder::from_model(image);
            match EmbeddedStorage::open_blocking(Arc::new(image.clone()), dir, options()) {
                Err(error) => assert!(refused(&error), "crash point {point}: {error}"),
                Ok(store) => {
                    recovered += 1;
                    assert_eq!(store.current_revision().await.unwrap(), 5, "point {point}");
                    assert_eq!(image.read(&copy).unwrap(), damaged, "point {point}");
                }
            }
        }
    }
    assert!(
        recovered > 0 && recovered < images,
        "{recovered} of {images}"
    );
    // Recovered for good once it returned.
    let after = Recorder::from_model(fs.model().durable());
    assert!(EmbeddedStorage::open_blocking(Arc::new(after), dir, options()).is_ok());
}
