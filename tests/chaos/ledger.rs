//! The ledger: every change under the servers' etcd prefix, read with a watch from revision 1
//! (resumed after etcd restarts and member kills), and what it shows.
//!
//! - **Who wrote what.** Leader election writes `<prefix>/leader` and, when the holder changes,
//!   `<prefix>/leader-term`; every controller write sets `<prefix>/leader-writes` to its
//!   holder and term in its own transaction. So each revision that changes anything else is a
//!   controller write attributed to a holder — or *unattributed*, which only an unfenced write
//!   can be (the harness itself writes nothing). A write whose term is not the term in force
//!   just before it is a write *from a deposed leader that landed*.
//! - **Migrations.** Every stored state of every migration (by uid): how often it turned
//!   Succeeded, whether its progress ever went backwards, and how many objects it said it
//!   migrated when it succeeded (each object counted once: as many as the resource holds).
//! - **Safety, sampled.** Each StorageState write that says safe is judged, as it arrives,
//!   against the double's read-back of how the resource's objects are stored.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use svm_api::migration::StorageVersionMigration;
use svm_registry::fence::Stamp;
use svm_storage::etcd::{EtcdOptions, EtcdStorage};
use svm_storage::{EventKind, Revision, Storage, StorageError, WatchItem};
use tokio::task::JoinHandle;

use crate::support::doubles::{Verdict, verdict};

/// One change to one key.
#[derive(Clone, Debug)]
struct Change {
    revision: Revision,
    key: String,
    /// `None`: deleted.
    value: Option<Vec<u8>>,
}

#[derive(Default)]
struct Seen {
    changes: Vec<Change>,
    last_revision: Revision,
    /// Safe StorageState verdicts judged against the double, and the unsafe ones.
    safe_samples: u64,
    unsafe_verdicts: Vec<String>,
    /// Why the ledger may be incomplete (a compacted resume point).
    broken: Option<String>,
}

pub(crate) struct Ledger {
    prefix: String,
    endpoints: Vec<String>,
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the ledger shows about a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Accounting {
    /// Stamped controller writes per term (the revision it began, its holder): a replica
    /// deposed may lead again later, in a term of its own.
    pub writes_by_term: BTreeMap<(Revision, String), u64>,
    /// Stamped writes whose term was over when they landed, per holder.
    pub deposed_by_holder: BTreeMap<String, u64>,
    /// Revisions that changed something other than leader election with no stamp.
    pub unattributed: Vec<String>,
    /// The terms, in order: (revision the term began, holder).
    pub terms: Vec<(Revision, String)>,
    /// Migrations (`name uid`) that turned Succeeded, with how many times each did.
    pub successes: BTreeMap<String, u32>,
    /// Migrations that turned Failed.
    pub failures: Vec<String>,
    /// Progress that went backwards: (migration, from, to).
    pub regressions: Vec<(String, i64, i64)>,
    /// Migrations that succeeded: (migration, resource as `resource.group`, objects migrated).
    pub counted: Vec<(String, String, i64)>,
    pub safe_samples: u64,
    pub unsafe_verdicts: Vec<String>,
    pub broken: Option<String>,
}

impl Accounting {
    /// Stamped controller writes per holder identity, over all its terms.
    pub(crate) fn writes_by_holder(&self) -> BTreeMap<String, u64> {
        let mut by_holder = BTreeMap::new();
        for ((_, holder), n) in &self.writes_by_term {
            *by_holder.entry(holder.clone()).or_default() += n;
        }
        by_holder
    }

    pub(crate) fn deposed(&self) -> u64 {
        self.deposed_by_holder.values().sum()
    }

    /// Migrations that succeeded exactly once, of those that succeeded.
    pub(crate) fn succeeded_once(&self) -> (usize, usize) {
        (
            self.successes.values().filter(|n| **n == 1).count(),
            self.successes.len(),
        )
    }
}

impl Ledger {
    /// Starts reading every change under `prefix` from revision 1 (from etcd at `endpoints`,
    /// every member's URL); StorageStates that say safe are judged against `engine`.
    pub(crate) fn start(
        endpoints: &[String],
        prefix: &str,
        engine: Arc<kube_double::engine::Engine>,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(follow(
            endpoints.to_vec(),
            prefix.to_string(),
            engine,
            seen.clone(),
        ));
        Ledger {
            prefix: prefix.to_string(),
            endpoints: endpoints.to_vec(),
            seen,
            task,
        }
    }

    /// Waits (a hang guard of a minute) until the ledger has every change up to etcd's current
    /// revision.
    pub(crate) async fn catch_up(&self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(storage) = connect(&self.endpoints).await
                && let Ok(current) = storage.current_revision().await
                && self.seen.lock().unwrap().last_revision >= current
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "the ledger did not catch up with etcd (at {})",
                    self.seen.lock().unwrap().last_revision
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The accounting of everything seen so far.
    pub(crate) fn account(&self) -> Accounting {
        let seen = self.seen.lock().unwrap();
        let leader_term = format!("{}/leader-term", self.prefix);
        let leader = format!("{}/leader", self.prefix);
        let stamp_key = format!("{}/leader-writes", self.prefix);
        let migrations = format!("{}/storageversionmigrations/", self.prefix);
        let mut out = Accounting {
            safe_samples: seen.safe_samples,
            unsafe_verdicts: seen.unsafe_verdicts.clone(),
            broken: seen.broken.clone(),
            ..Accounting::default()
        };
        // The term in force: (revision it began, holder).
        let mut term: Option<(Revision, String)> = None;
        // Per migration uid: (name, succeeded now, failed now, migrated objects).
        let mut states: BTreeMap<String, (String, bool, bool, i64)> = BTreeMap::new();
        let mut index = 0;
        while index < seen.changes.len() {
            let revision = seen.changes[index].revision;
            let end = seen.changes[index..]
                .iter()
                .position(|c| c.revision != revision)
                .map_or(seen.changes.len(), |n| index + n);
            let txn = &seen.changes[index..end];
            index = end;
            let election = |c: &&Change| c.key == leader || c.key == leader_term;
            let others: Vec<&Change> = txn
                .iter()
                .filter(|c| !election(c) && c.key != stamp_key)
                .collect();
            if !others.is_empty() {
                let stamp = txn
                    .iter()
                    .find(|c| c.key == stamp_key)
                    .and_then(|c| c.value.as_deref())
                    .and_then(|v| serde_json::from_slice::<Stamp>(v).ok());
                match stamp {
                    None => out.unattributed.push(format!(
                        "revision {revision}: {}",
                        others
                            .iter()
                            .map(|c| c.key.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    Some(stamp) => {
                        *out.writes_by_term
                            .entry((stamp.term, stamp.holder.clone()))
                            .or_default() += 1;
                        if term.as_ref().map(|t| t.0) != Some(stamp.term) {
                            *out.deposed_by_holder.entry(stamp.holder).or_default() += 1;
                        }
                    }
                }
            }
            for change in txn {
                if change.key == leader_term {
                    term = change.value.as_deref().map(|v| {
                        let holder = serde_json::from_slice::<Value>(v)
                            .ok()
                            .and_then(|t| t["holderIdentity"].as_str().map(str::to_string))
                            .unwrap_or_default();
                        (revision, holder)
                    });
                    if let Some(t) = &term {
                        out.terms.push(t.clone());
                    }
                }
                if change.key.starts_with(&migrations)
                    && let Some(value) = &change.value
                    && let Ok(m) = serde_json::from_slice::<StorageVersionMigration>(value)
                {
                    let name = m.metadata.name.clone().unwrap_or_default();
                    let uid = m.metadata.uid.clone().unwrap_or_default();
                    let succeeded = m.condition_true("Succeeded").is_some();
                    let failed = m.condition_true("Failed").is_some();
                    let migrated = m.status.progress.as_ref().map_or(0, |p| p.migrated_objects);
                    let before =
                        states
                            .get(&uid)
                            .cloned()
                            .unwrap_or((name.clone(), false, false, 0));
                    if succeeded && !before.1 {
                        *out.successes.entry(format!("{name} {uid}")).or_default() += 1;
                        let resource = &m.spec.resource;
                        let resource = match resource.group.as_str() {
                            "" => resource.resource.clone(),
                            group => format!("{}.{group}", resource.resource),
                        };
                        out.counted.push((name.clone(), resource, migrated));
                    }
                    if failed && !before.2 {
                        out.failures.push(name.clone());
                    }
                    if migrated < before.3 {
                        out.regressions.push((name.clone(), before.3, migrated));
                    }
                    states.insert(uid, (name, succeeded, failed, migrated));
                }
            }
        }
        out
    }
}

async fn connect(endpoints: &[String]) -> Result<EtcdStorage, StorageError> {
    let options = EtcdOptions {
        request_timeout: Duration::from_secs(5),
        ..EtcdOptions::default()
    };
    tokio::time::timeout(
        Duration::from_secs(5),
        EtcdStorage::connect(endpoints, options),
    )
    .await
    .map_err(|_| StorageError::unavailable("connecting to etcd timed out"))?
}

/// Watches everything under `prefix` from revision 1, resuming after the last revision seen
/// whenever the watch ends (etcd restarted, or the member it was on killed).
async fn follow(
    endpoints: Vec<String>,
    prefix: String,
    engine: Arc<kube_double::engine::Engine>,
    seen: Arc<Mutex<Seen>>,
) {
    let states = format!("{prefix}/storagestates/");
    let watched = format!("{prefix}/");
    loop {
        let after = seen.lock().unwrap().last_revision;
        let stream = match connect(&endpoints).await {
            Ok(storage) => storage.watch(&watched, after).await.map(|s| (s, storage)),
            Err(err) => Err(err),
        };
        let (mut stream, _storage) = match stream {
            Ok(found) => found,
            Err(StorageError::Compacted { .. }) => {
                seen.lock().unwrap().broken = Some(format!("compacted past revision {after}"));
                return;
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while let Some(item) = stream.next().await {
            let event = match item {
                Ok(WatchItem::Event(event)) => event,
                Ok(WatchItem::Progress(revision)) => {
                    let mut seen = seen.lock().unwrap();
                    seen.last_revision = seen.last_revision.max(revision);
                    continue;
                }
                Err(_) => break,
            };
            let revision = event.kv.mod_revision;
            let value = match event.kind {
                EventKind::Put => Some(event.kv.value.clone()),
                EventKind::Delete => None,
            };
            // Judged now: objects only move to the new encoding, so an old one seen now was
            // there when the StorageState was written.
            let judged = value
                .as_ref()
                .filter(|_| event.kv.key.starts_with(&states))
                .and_then(|v| serde_json::from_slice::<Value>(v).ok())
                .map(|state| verdict(&engine, &state));
            let mut seen = seen.lock().unwrap();
            match judged {
                Some(Verdict::Safe) => seen.safe_samples += 1,
                Some(Verdict::Unsafe(problem)) => {
                    seen.safe_samples += 1;
                    seen.unsafe_verdicts
                        .push(format!("revision {revision}: {problem}"));
                }
                _ => {}
            }
            seen.last_revision = seen.last_revision.max(revision);
            seen.changes.push(Change {
                revision,
                key: event.kv.key,
                value,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
