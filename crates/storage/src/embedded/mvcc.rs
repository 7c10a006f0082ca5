//! The in-memory multi-version index of the embedded store: every key keeps its versions (values
//! and deletion tombstones) since the compacted revision, so reads at a past revision and watch
//! replay are answered exactly as etcd answers them.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::{
    Compare, Event, EventKind, KeyValue, ListOptions, ListResult, Op, Result, Revision,
    StorageError, Txn, TxnOutcome,
};

/// One version of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Version {
    /// The revision of the transaction that wrote it.
    pub revision: Revision,
    /// Its position among that transaction's changes (etcd's sub-revision); orders the events
    /// of one transaction.
    pub sub: u32,
    /// `None` for a deletion tombstone.
    pub live: Option<Live>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Live {
    pub value: Arc<[u8]>,
    pub create_revision: Revision,
}

/// A change a committed transaction made: what the write-ahead log records and what `apply`
/// replays. Only effective changes are kept (deleting a missing key changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    Put { key: String, value: Arc<[u8]> },
    Delete { key: String },
}

impl Change {
    pub(super) fn key(&self) -> &str {
        match self {
            Change::Put { key, .. } | Change::Delete { key } => key,
        }
    }
}

/// What evaluating a transaction against the current state decided.
#[derive(Debug)]
pub(super) enum Prepared {
    /// A compare failed, or nothing would change: answer without writing.
    Done(TxnOutcome),
    /// Write these changes at this revision.
    Commit {
        revision: Revision,
        changes: Vec<Change>,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Mvcc {
    keys: BTreeMap<String, Vec<Version>>,
    current: Revision,
    compacted: Revision,
}

impl Default for Mvcc {
    fn default() -> Self {
        Self::new()
    }
}

impl Mvcc {
    /// An empty store at revision 1, like a fresh etcd.
    pub(super) fn new() -> Self {
        Self {
            keys: BTreeMap::new(),
            current: 1,
            compacted: 0,
        }
    }

    /// A store restored from a snapshot; its key histories follow through `restore_key`.
    pub(super) fn restored(current: Revision, compacted: Revision) -> Result<Self> {
        if current < 1 || compacted < 0 || compacted > current {
            return Err(StorageError::Corrupt(format!(
                "snapshot header has current revision {current} and compacted revision {compacted}"
            )));
        }
        Ok(Self {
            keys: BTreeMap::new(),
            current,
            compacted,
        })
    }

    /// Add one key's history from a snapshot.
    pub(super) fn restore_key(&mut self, key: String, versions: Vec<Version>) -> Result<()> {
        let ordered = versions.windows(2).all(|w| w[0].revision < w[1].revision);
        let in_range = versions
            .iter()
            .all(|v| v.revision >= 1 && v.revision <= self.current);
        if versions.is_empty() || !ordered || !in_range || self.keys.contains_key(&key) {
            return Err(StorageError::Corrupt(format!(
                "snapshot holds an invalid history for key {key:?}"
            )));
        }
        self.keys.insert(key, versions);
        Ok(())
    }

    pub(super) fn current(&self) -> Revision {
        self.current
    }

    pub(super) fn compacted(&self) -> Revision {
        self.compacted
    }

    /// Every key with its retained history, in key order (for snapshots).
    pub(super) fn histories(&self) -> impl Iterator<Item = (&String, &Vec<Version>)> {
        self.keys.iter()
    }

    /// The revision a read asks for, checked against history: `None` (or, as in etcd, a
    /// non-positive revision) means the current one.
    fn read_revision(&self, requested: Option<Revision>) -> Result<Revision> {
        match requested {
            None => Ok(self.current),
            Some(r) if r <= 0 => Ok(self.current),
            Some(r) if r < self.compacted => Err(StorageError::Compacted {
                requested: r,
                compacted: self.compacted,
            }),
            Some(r) if r > self.current => Err(StorageError::FutureRevision {
                requested: r,
                current: self.current,
            }),
            Some(r) => Ok(r),
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<KeyValue> {
        self.keys
            .get(key)
            .and_then(|versions| visible_at(key, versions, self.current))
    }

    pub(super) fn list(&self, prefix: &str, opts: &ListOptions) -> Result<ListResult> {
        let revision = self.read_revision(opts.revision)?;
        let from = match &opts.start {
            Some(start) if start.as_str() > prefix => start.as_str(),
            _ => prefix,
        };
        let mut items = Vec::new();
        let mut remaining = 0i64;
        let range = self
            .keys
            .range::<str, _>((Bound::Included(from), Bound::Unbounded));
        for (key, versions) in range.take_while(|(key, _)| key.starts_with(prefix)) {
            let Some(kv) = visible_at(key, versions, revision) else {
                continue;
            };
            if opts.limit.is_none_or(|limit| items.len() < limit) {
                items.push(kv);
            } else {
                remaining += 1;
            }
        }
        Ok(ListResult {
            items,
            revision,
            remaining,
        })
    }

    /// Evaluate a transaction's compares in order and work out its effective changes.
    pub(super) fn prepare(&self, txn: Txn) -> Prepared {
        for (index, compare) in txn.compares.iter().enumerate() {
            let key = match compare {
                Compare::Absent(key) | Compare::ModRevision(key, _) => key,
            };
            let current = self.get(key).map(|kv| kv.mod_revision);
            let holds = match compare {
                Compare::Absent(_) => current.is_none(),
                Compare::ModRevision(_, expected) => current == Some(*expected),
            };
            if !holds {
                return Prepared::Done(TxnOutcome::Failed { index, current });
            }
        }
        let changes: Vec<Change> = txn
            .ops
            .into_iter()
            .filter_map(|op| match op {
                Op::Put(key, value) => Some(Change::Put {
                    key,
                    value: value.into(),
                }),
                // As in etcd, deleting a missing key is not a change.
                Op::Delete(key) => self.get(&key).map(|_| Change::Delete { key }),
            })
            .collect();
        if changes.is_empty() {
            return Prepared::Done(TxnOutcome::Committed {
                revision: self.current,
            });
        }
        Prepared::Commit {
            revision: self.current + 1,
            changes,
        }
    }

    /// Apply a committed transaction's changes at `revision` (the next one) and return its
    /// events. Fails, changing nothing, on a change that cannot follow the current state — which
    /// only a damaged log can produce.
    pub(super) fn apply(&mut self, revision: Revision, changes: Vec<Change>) -> Result<Vec<Event>> {
        if revision != self.current + 1 {
            return Err(StorageError::Corrupt(format!(
                "transaction at revision {revision} does not follow revision {}",
                self.current
            )));
        }
        self.check_changes(&changes)?;
        let mut events = Vec::with_capacity(changes.len());
        for (sub, change) in (0u32..).zip(changes) {
            let prev = self.get(change.key());
            let versions = self.keys.entry(change.key().to_string()).or_default();
            let event = match change {
                Change::Put { key, value } => {
                    let create_revision = prev.as_ref().map_or(revision, |p| p.create_revision);
                    versions.push(Version {
                        revision,
                        sub,
                        live: Some(Live {
                            value: value.clone(),
                            create_revision,
                        }),
                    });
                    Event {
                        kind: EventKind::Put,
                        kv: KeyValue {
                            key,
                            value: value.to_vec(),
                            create_revision,
                            mod_revision: revision,
                        },
                        prev,
                    }
                }
                Change::Delete { key } => {
                    versions.push(Version {
                        revision,
                        sub,
                        live: None,
                    });
                    Event {
                        kind: EventKind::Delete,
                        kv: deleted_key_value(key, prev.as_ref(), revision),
                        prev,
                    }
                }
            };
            events.push(event);
        }
        self.current = revision;
        Ok(events)
    }

    /// A transaction touches each key once, and deletes only keys that exist.
    fn check_changes(&self, changes: &[Change]) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for change in changes {
            if !seen.insert(change.key()) {
                return Err(StorageError::Corrupt(format!(
                    "transaction changes key {:?} twice",
                    change.key()
                )));
            }
            if matches!(change, Change::Delete { .. }) && self.get(change.key()).is_none() {
                return Err(StorageError::Corrupt(format!(
                    "transaction deletes missing key {:?}",
                    change.key()
                )));
            }
        }
        Ok(())
    }

    /// Discard history older than `revision`, as etcd compaction does: reads at `revision` and
    /// later, and watches from `revision` on, keep working.
    pub(super) fn compact(&mut self, revision: Revision) -> Result<()> {
        if revision <= self.compacted {
            return Err(StorageError::Compacted {
                requested: revision,
                compacted: self.compacted,
            });
        }
        if revision > self.current {
            return Err(StorageError::FutureRevision {
                requested: revision,
                current: self.current,
            });
        }
        self.keys.retain(|_, versions| {
            let older = versions.partition_point(|v| v.revision < revision);
            // The newest version older than `revision` is still what a read at `revision` sees
            // (and the previous value of an event at `revision`), unless it is a tombstone.
            let keep_from = match older.checked_sub(1) {
                Some(newest_older) if versions[newest_older].live.is_some() => newest_older,
                _ => older,
            };
            versions.drain(..keep_from);
            !versions.is_empty()
        });
        self.compacted = revision;
        Ok(())
    }

    /// Every change under `prefix` with revision greater than `after`, in revision order, with
    /// previous values. The caller has checked `after` against the compacted revision.
    pub(super) fn events_after(&self, prefix: &str, after: Revision) -> Vec<Event> {
        let mut found: Vec<(Revision, u32, Event)> = Vec::new();
        let range = self
            .keys
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded));
        for (key, versions) in range.take_while(|(key, _)| key.starts_with(prefix)) {
            let first = versions.partition_point(|v| v.revision <= after);
            for index in first..versions.len() {
                let version = &versions[index];
                let prev = index
                    .checked_sub(1)
                    .and_then(|p| key_value(key, &versions[p]));
                let event = match key_value(key, version) {
                    Some(kv) => Event {
                        kind: EventKind::Put,
                        kv,
                        prev,
                    },
                    None => Event {
                        kind: EventKind::Delete,
                        kv: deleted_key_value(key.clone(), prev.as_ref(), version.revision),
                        prev,
                    },
                };
                found.push((version.revision, version.sub, event));
            }
        }
        found.sort_by_key(|(revision, sub, _)| (*revision, *sub));
        found.into_iter().map(|(_, _, event)| event).collect()
    }
}

/// The key's value as a read at `revision` sees it.
fn visible_at(key: &str, versions: &[Version], revision: Revision) -> Option<KeyValue> {
    let newer = versions.partition_point(|v| v.revision <= revision);
    newer
        .checked_sub(1)
        .and_then(|index| key_value(key, &versions[index]))
}

/// A delete event's key-value: the value before the delete, at the delete's revision. (A
/// tombstone always follows a live version, which compaction keeps; the empty fallback only
/// guards against the impossible.)
fn deleted_key_value(key: String, prev: Option<&KeyValue>, revision: Revision) -> KeyValue {
    KeyValue {
        key,
        value: prev.map(|p| p.value.clone()).unwrap_or_default(),
        create_revision: prev.map_or(0, |p| p.create_revision),
        mod_revision: revision,
    }
}

fn key_value(key: &str, version: &Version) -> Option<KeyValue> {
    version.live.as_ref().map(|live| KeyValue {
        key: key.to_string(),
        value: live.value.to_vec(),
        create_revision: live.create_revision,
        mod_revision: version.revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> Op {
        Op::Put(key.into(), value.as_bytes().to_vec())
    }

    fn commit(mvcc: &mut Mvcc, ops: Vec<Op>) -> Revision {
        match mvcc.prepare(Txn {
            compares: vec![],
            ops,
        }) {
            Prepared::Commit { revision, changes } => {
                mvcc.apply(revision, changes).unwrap();
                revision
            }
            other => panic!("expected a commit, got {other:?}"),
        }
    }

    fn values(result: &ListResult) -> Vec<(String, String)> {
        result
            .items
            .iter()
            .map(|kv| (kv.key.clone(), String::from_utf8(kv.value.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn compaction_keeps_what_reads_at_the_compacted_revision_need() {
        let mut mvcc = Mvcc::new();
        commit(&mut mvcc, vec![put("/a", "1"), put("/b", "1")]); // 2
        commit(&mut mvcc, vec![Op::Delete("/b".into())]); // 3
        commit(&mut mvcc, vec![put("/a", "2")]); // 4
        commit(&mut mvcc, vec![put("/c", "1")]); // 5
        mvcc.compact(4).unwrap();

        // /b's history ended in a tombstone before 4: gone entirely. /a keeps revision 2 too,
        // as the previous value of its event at 4.
        assert_eq!(mvcc.keys.len(), 2);
        assert_eq!(mvcc.keys["/a"].len(), 2);
        let at4 = mvcc
            .list(
                "/",
                &ListOptions {
                    revision: Some(4),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(values(&at4), vec![("/a".into(), "2".into())]);
        assert!(matches!(
            mvcc.list(
                "/",
                &ListOptions {
                    revision: Some(3),
                    ..Default::default()
                }
            ),
            Err(StorageError::Compacted {
                requested: 3,
                compacted: 4
            })
        ));
        // A watch from 4 sees the event at 4 with its previous value, then the one at 5.
        let events = mvcc.events_after("/", 3);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].kv.mod_revision, 4);
        assert_eq!(events[0].prev.as_ref().unwrap().value, b"1");
        assert_eq!(events[1].kv.key, "/c");
    }

    #[test]
    fn compaction_keeps_the_previous_value_of_an_event_at_the_compacted_revision() {
        let mut mvcc = Mvcc::new();
        commit(&mut mvcc, vec![put("/a", "1")]); // 2
        commit(&mut mvcc, vec![put("/x", "1")]); // 3
        commit(&mut mvcc, vec![Op::Delete("/a".into())]); // 4
        mvcc.compact(4).unwrap();
        let events = mvcc.events_after("/a", 3);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, EventKind::Delete);
        assert_eq!(events[0].kv.mod_revision, 4);
        assert_eq!(events[0].kv.value, b"1");
        assert_eq!(events[0].prev.as_ref().unwrap().mod_revision, 2);
    }

    #[test]
    fn events_of_one_transaction_keep_their_op_order() {
        let mut mvcc = Mvcc::new();
        commit(
            &mut mvcc,
            vec![put("/z", "1"), put("/a", "1"), put("/m", "1")],
        );
        let keys: Vec<String> = mvcc
            .events_after("/", 1)
            .into_iter()
            .map(|e| e.kv.key)
            .collect();
        assert_eq!(keys, vec!["/z", "/a", "/m"]);
    }

    #[test]
    fn apply_rejects_changes_that_cannot_follow_the_state() {
        let mut mvcc = Mvcc::new();
        let delete_missing = vec![Change::Delete { key: "/a".into() }];
        assert!(matches!(
            mvcc.apply(2, delete_missing),
            Err(StorageError::Corrupt(_))
        ));
        let gap = vec![Change::Put {
            key: "/a".into(),
            value: Arc::from(&b"1"[..]),
        }];
        assert!(matches!(mvcc.apply(5, gap), Err(StorageError::Corrupt(_))));
        assert_eq!(mvcc.current(), 1);
        assert!(mvcc.keys.is_empty());
    }
}
