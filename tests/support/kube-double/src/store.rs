//! An in-memory etcd: one global revision counter, an ordered map of key histories per
//! resource, compaction, and a change feed per resource for watches.
//!
//! Like etcd 3 (and so like kube-apiserver's storage):
//! - every write gets the next global revision, which becomes the object's resourceVersion;
//! - a read "at revision N" sees, per key, the newest version not newer than N, so a list
//!   snapshot stays consistent across pages until the store is compacted past N;
//! - compaction at C drops every version a read at >= C can no longer see, and reads below C
//!   fail (the 410 Expired of recording 05);
//! - the value is the bytes the apiserver would write: JSON of the object in its storage
//!   version, wrapped in a `k8s:enc:<provider>:v1:<key>:` envelope when encrypted at rest.
//!
//! Locks are `std` locks held only for map work, never across an `.await`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::resources::GroupResource;

/// The provider tag of the simulated encryption-at-rest envelope (kube-apiserver writes
/// `k8s:enc:aescbc:v1:<key name>:` before the ciphertext).
pub const ENVELOPE_PREFIX: &str = "k8s:enc:aescbc:v1:";

/// The value of one key at one revision: the stored bytes and how they were produced.
#[derive(Debug, PartialEq, Eq)]
pub struct StoredValue {
    /// Exactly what an `etcdctl get` would print.
    pub bytes: Bytes,
    /// The group/version the object is encoded in (`v1`, `example.test/v1`).
    pub encoding: String,
    /// The encryption key it was written under; `None` for identity (plain JSON).
    pub key: Option<String>,
}

impl StoredValue {
    /// Encodes `object` (already carrying its storage apiVersion and no resourceVersion) as
    /// kube-apiserver's storage layer would: compact JSON plus a newline, optionally enveloped.
    pub fn encode(object: &Value, encoding: &str, key: Option<&str>) -> Self {
        let mut json = serde_json::to_vec(object).unwrap_or_default();
        json.push(b'\n');
        let bytes = match key {
            None => {
                // The serializer's buffer grows by doubling; keep only what is stored.
                json.shrink_to_fit();
                Bytes::from(json)
            }
            Some(key) => {
                let mut out =
                    Vec::with_capacity(ENVELOPE_PREFIX.len() + key.len() + 1 + json.len());
                out.extend_from_slice(ENVELOPE_PREFIX.as_bytes());
                out.extend_from_slice(key.as_bytes());
                out.push(b':');
                out.extend_from_slice(&json);
                Bytes::from(out)
            }
        };
        Self {
            bytes,
            encoding: encoding.to_string(),
            key: key.map(str::to_string),
        }
    }

    /// The JSON payload without the envelope.
    pub fn payload(&self) -> &[u8] {
        match &self.key {
            None => &self.bytes,
            Some(key) => {
                let skip = ENVELOPE_PREFIX.len() + key.len() + 1;
                self.bytes.get(skip..).unwrap_or_default()
            }
        }
    }

    pub fn decode(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(self.payload())
    }
}

#[derive(Clone, Debug)]
struct Version {
    mod_rev: u64,
    create_rev: u64,
    /// `None` is a deletion (tombstone).
    value: Option<Arc<StoredValue>>,
}

/// One live object as read at some revision.
#[derive(Clone, Debug)]
pub struct Entry {
    pub key: String,
    pub mod_rev: u64,
    pub create_rev: u64,
    pub value: Arc<StoredValue>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A change to one key, as etcd's watch reports it.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventType,
    pub key: String,
    pub rev: u64,
    /// The new state; for a deletion, the last state before it.
    pub value: Arc<StoredValue>,
    /// The state before the change (for label-selector transitions).
    pub prev: Option<Arc<StoredValue>>,
}

/// What a conditional write expects to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The key must not exist (create).
    Absent,
    /// The key must exist at exactly this mod revision (update/delete).
    ModRev(u64),
}

#[derive(Debug, PartialEq, Eq)]
pub enum CommitError {
    /// The key exists (create) or changed since it was read (update).
    Mismatch,
    /// The key does not exist (update/delete).
    Missing,
}

#[derive(Clone, Debug)]
pub struct Committed {
    pub rev: u64,
    pub create_rev: u64,
}

/// Why a read at some revision cannot be served.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The revision has been compacted away.
    Compacted { compacted: u64 },
}

#[derive(Default)]
struct TableState {
    keys: BTreeMap<String, Vec<Version>>,
    live: usize,
    live_by_namespace: HashMap<String, usize>,
    /// The latest changes, so a watch resuming from a recent resourceVersion replays them
    /// without walking every key (the watch cache's event window).
    recent: VecDeque<Arc<Event>>,
    /// Every change after this revision is in `recent`.
    recent_floor: u64,
}

/// Changes kept per resource for cheap watch resumption.
const RECENT_EVENTS: usize = 4096;

impl TableState {
    fn adjust_live(&mut self, key: &str, delta: isize) {
        self.live = self.live.saturating_add_signed(delta);
        if let Some((ns, _)) = key.split_once('/') {
            let count = self.live_by_namespace.entry(ns.to_string()).or_default();
            *count = count.saturating_add_signed(delta);
            if *count == 0 {
                self.live_by_namespace.remove(ns);
            }
        }
    }

    /// Live objects under `prefix` (`""` or `"<namespace>/"`) in the current state.
    fn live_under(&self, prefix: &str) -> usize {
        match prefix.strip_suffix('/') {
            None => self.live,
            Some(ns) => self.live_by_namespace.get(ns).copied().unwrap_or(0),
        }
    }
}

/// The keys of one resource. Keys are `<namespace>/<name>` or `<name>`, so a namespace is a
/// contiguous key range, as under etcd's `/registry/<resource>/` prefix.
pub struct Table {
    state: RwLock<TableState>,
    events: broadcast::Sender<Arc<Event>>,
}

/// Bounded backlog per resource; a watcher that falls further behind is closed (the watch
/// cache drops slow watchers too) and re-lists.
const EVENT_BACKLOG: usize = 8192;

impl Table {
    fn new() -> Self {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        Self {
            state: RwLock::new(TableState::default()),
            events,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, TableState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, TableState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }
}

/// Newest version at or below `rev`.
fn version_at(versions: &[Version], rev: u64) -> Option<&Version> {
    versions.iter().rev().find(|v| v.mod_rev <= rev)
}

fn live_at(key: &str, versions: &[Version], rev: u64) -> Option<Entry> {
    let v = version_at(versions, rev)?;
    let value = v.value.clone()?;
    Some(Entry {
        key: key.to_string(),
        mod_rev: v.mod_rev,
        create_rev: v.create_rev,
        value,
    })
}

/// One page of a range read.
pub struct Scan {
    pub entries: Vec<Entry>,
    /// Whether live keys remain in the range after the last entry.
    pub more: bool,
}

/// The whole store.
pub struct Store {
    tables: RwLock<HashMap<GroupResource, Arc<Table>>>,
    revision: AtomicU64,
    compacted: AtomicU64,
    revision_feed: watch::Sender<u64>,
    remaining: Mutex<RemainingCache>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        let (revision_feed, _) = watch::channel(1);
        Self {
            tables: RwLock::new(HashMap::new()),
            // etcd starts at revision 1.
            revision: AtomicU64::new(1),
            compacted: AtomicU64::new(0),
            revision_feed,
            remaining: Mutex::new(RemainingCache::default()),
        }
    }

    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::SeqCst)
    }

    pub fn compacted_revision(&self) -> u64 {
        self.compacted.load(Ordering::SeqCst)
    }

    /// Resolves when the store reaches `rev` (for "too large resourceVersion" waits).
    pub fn subscribe_revision(&self) -> watch::Receiver<u64> {
        self.revision_feed.subscribe()
    }

    pub fn table(&self, gr: &GroupResource) -> Arc<Table> {
        if let Some(t) = self
            .tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(gr)
        {
            return t.clone();
        }
        self.tables
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(gr.clone())
            .or_insert_with(|| Arc::new(Table::new()))
            .clone()
    }

    /// The current value of `key`.
    pub fn get(&self, gr: &GroupResource, key: &str) -> Option<Entry> {
        let table = self.table(gr);
        let state = table.read();
        let versions = state.keys.get(key)?;
        live_at(key, versions, u64::MAX)
    }

    fn check_readable(&self, rev: u64) -> Result<(), ReadError> {
        let compacted = self.compacted_revision();
        if rev < compacted {
            return Err(ReadError::Compacted { compacted });
        }
        Ok(())
    }

    /// Pins a snapshot for a list: the current revision and the number of live keys under
    /// `prefix` in it, read together under the resource's lock.
    pub fn snapshot(&self, gr: &GroupResource, prefix: &str) -> (u64, usize) {
        let table = self.table(gr);
        let state = table.read();
        (self.revision(), state.live_under(prefix))
    }

    /// Reads up to `limit` live entries at `rev` with keys under `prefix`, from `from`
    /// (inclusive) on. `more` says whether further live keys exist after the last entry
    /// returned. Callers page through big ranges in bounded batches, so the resource's lock
    /// is never held for long.
    pub fn scan(
        &self,
        gr: &GroupResource,
        prefix: &str,
        from: Option<&str>,
        rev: u64,
        limit: usize,
    ) -> Result<Scan, ReadError> {
        let table = self.table(gr);
        let state = table.read();
        // Checked under the lock: a compaction bumps the revision before it frees versions
        // under the write lock, so a read that passes here sees every version at `rev` (as
        // an etcd range at a revision fails whole or answers whole, never with keys missing).
        self.check_readable(rev)?;
        let start = match from {
            Some(from) if from > prefix => Bound::Included(from.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        let mut entries = Vec::new();
        let mut more = false;
        for (key, versions) in state.keys.range::<String, _>((start, Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            let Some(entry) = live_at(key, versions, rev) else {
                continue;
            };
            if entries.len() == limit {
                more = true;
                break;
            }
            entries.push(entry);
        }
        Ok(Scan { entries, more })
    }

    /// Counts live keys at `rev` under `prefix` from `from` (inclusive) on — the slow path of
    /// remainingItemCount, used only when the page cache cannot answer.
    pub fn count_from(
        &self,
        gr: &GroupResource,
        prefix: &str,
        from: Option<&str>,
        rev: u64,
    ) -> Result<usize, ReadError> {
        let table = self.table(gr);
        let state = table.read();
        // Under the lock, as in `scan`.
        self.check_readable(rev)?;
        let start = match from {
            Some(from) if from > prefix => from.to_string(),
            _ => prefix.to_string(),
        };
        Ok(state
            .keys
            .range(start..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(k, v)| live_at(k, v, rev).is_some())
            .count())
    }

    /// Every change to the resource after `after` (exclusive) up to `until` (inclusive), in
    /// revision order — the replay a watch from an old resourceVersion starts with. Recent
    /// changes come from the event window; older ones are rebuilt from the key histories.
    pub fn changes_since(
        &self,
        gr: &GroupResource,
        prefix: &str,
        after: u64,
        until: u64,
    ) -> Result<Vec<Event>, ReadError> {
        // A watch may start exactly at the compacted revision, but not before it.
        if after < self.compacted_revision() {
            return Err(ReadError::Compacted {
                compacted: self.compacted_revision(),
            });
        }
        let table = self.table(gr);
        let state = table.read();
        if after >= state.recent_floor {
            return Ok(state
                .recent
                .iter()
                .filter(|e| e.rev > after && e.rev <= until && e.key.starts_with(prefix))
                .map(|e| Event::clone(e))
                .collect());
        }
        let mut events = Vec::new();
        for (key, versions) in state.keys.range(prefix.to_string()..) {
            if !key.starts_with(prefix) {
                break;
            }
            for (i, v) in versions.iter().enumerate() {
                if v.mod_rev <= after || v.mod_rev > until {
                    continue;
                }
                let prev = i
                    .checked_sub(1)
                    .and_then(|p| versions.get(p))
                    .and_then(|p| p.value.clone());
                let event = match (&v.value, prev) {
                    (Some(value), None) => Event {
                        kind: EventType::Added,
                        key: key.clone(),
                        rev: v.mod_rev,
                        value: value.clone(),
                        prev: None,
                    },
                    (Some(value), Some(prev)) => Event {
                        kind: EventType::Modified,
                        key: key.clone(),
                        rev: v.mod_rev,
                        value: value.clone(),
                        prev: Some(prev),
                    },
                    (None, Some(prev)) => Event {
                        kind: EventType::Deleted,
                        key: key.clone(),
                        rev: v.mod_rev,
                        value: prev.clone(),
                        prev: Some(prev),
                    },
                    (None, None) => continue,
                };
                events.push(event);
            }
        }
        events.sort_by_key(|e| e.rev);
        Ok(events)
    }

    /// Writes `value` (or deletes, with `None`) if the key is as `expect` says.
    pub fn commit(
        &self,
        gr: &GroupResource,
        key: &str,
        expect: Expect,
        value: Option<StoredValue>,
    ) -> Result<Committed, CommitError> {
        let table = self.table(gr);
        let mut state = table.write();
        let current = state
            .keys
            .get(key)
            .and_then(|v| v.last())
            .filter(|v| v.value.is_some())
            .cloned();
        match (expect, &current) {
            (Expect::Absent, Some(_)) => return Err(CommitError::Mismatch),
            (Expect::ModRev(_), None) => return Err(CommitError::Missing),
            (Expect::ModRev(rev), Some(cur)) if cur.mod_rev != rev => {
                return Err(CommitError::Mismatch);
            }
            _ => {}
        }
        if value.is_none() && current.is_none() {
            return Err(CommitError::Missing);
        }
        let rev = self.revision.fetch_add(1, Ordering::SeqCst) + 1;
        let create_rev = current.as_ref().map_or(rev, |c| c.create_rev);
        let value = value.map(Arc::new);
        let prev = current.as_ref().and_then(|c| c.value.clone());
        let event = match (&value, &prev) {
            (Some(v), None) => Event {
                kind: EventType::Added,
                key: key.to_string(),
                rev,
                value: v.clone(),
                prev: None,
            },
            (Some(v), Some(p)) => Event {
                kind: EventType::Modified,
                key: key.to_string(),
                rev,
                value: v.clone(),
                prev: Some(p.clone()),
            },
            (None, Some(p)) => Event {
                kind: EventType::Deleted,
                key: key.to_string(),
                rev,
                value: p.clone(),
                prev: Some(p.clone()),
            },
            (None, None) => return Err(CommitError::Missing),
        };
        let delta: isize = match (&value, &prev) {
            (Some(_), None) => 1,
            (None, Some(_)) => -1,
            _ => 0,
        };
        state
            .keys
            .entry(key.to_string())
            .or_default()
            .push(Version {
                mod_rev: rev,
                create_rev,
                value,
            });
        state.adjust_live(key, delta);
        let event = Arc::new(event);
        state.recent.push_back(event.clone());
        if state.recent.len() > RECENT_EVENTS
            && let Some(evicted) = state.recent.pop_front()
        {
            state.recent_floor = evicted.rev;
        }
        // No receivers is fine: nobody is watching this resource.
        let _ = table.events.send(event);
        drop(state);
        self.revision_feed.send_if_modified(|seen| {
            if rev > *seen {
                *seen = rev;
                true
            } else {
                false
            }
        });
        Ok(Committed { rev, create_rev })
    }

    /// Compacts at `rev` (capped at the current revision), like `etcdctl compact`: reads below
    /// it fail from now on, and superseded versions are freed.
    pub fn compact(&self, rev: u64) -> u64 {
        let rev = rev.min(self.revision());
        let previous = self.compacted.fetch_max(rev, Ordering::SeqCst);
        if rev <= previous {
            return previous;
        }
        let tables: Vec<Arc<Table>> = self
            .tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for table in tables {
            let mut state = table.write();
            state.keys.retain(|_, versions| {
                // Keep the newest version at or below `rev` (reads at `rev` need it) and
                // everything after; a tombstone at or below `rev` is no longer needed.
                if let Some(pos) = versions.iter().rposition(|v| v.mod_rev <= rev) {
                    versions.drain(..pos);
                    if versions.first().is_some_and(|v| v.value.is_none()) {
                        versions.remove(0);
                    }
                }
                !versions.is_empty()
            });
        }
        self.remaining
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget_below(rev);
        rev
    }

    /// Remembers how many items remain after a page, so the next page of the same snapshot can
    /// report remainingItemCount without counting the range again.
    pub fn remember_remaining(
        &self,
        gr: &GroupResource,
        prefix: &str,
        rev: u64,
        next: &str,
        remaining: usize,
    ) {
        self.remaining
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                (gr.clone(), prefix.to_string(), rev, next.to_string()),
                remaining,
            );
    }

    pub fn recall_remaining(
        &self,
        gr: &GroupResource,
        prefix: &str,
        rev: u64,
        next: &str,
    ) -> Option<usize> {
        self.remaining
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(gr.clone(), prefix.to_string(), rev, next.to_string()))
    }

    /// Every current entry of a resource (test read-back; clones only `Arc`s).
    pub fn current_entries(&self, gr: &GroupResource) -> Vec<Entry> {
        let table = self.table(gr);
        let state = table.read();
        state
            .keys
            .iter()
            .filter_map(|(k, v)| live_at(k, v, u64::MAX))
            .collect()
    }
}

type RemainingKey = (GroupResource, String, u64, String);

/// A bounded map (oldest entries evicted first).
#[derive(Default)]
struct RemainingCache {
    map: HashMap<RemainingKey, usize>,
    order: VecDeque<RemainingKey>,
}

const REMAINING_CACHE_SIZE: usize = 4096;

impl RemainingCache {
    fn insert(&mut self, key: RemainingKey, remaining: usize) {
        if self.map.insert(key.clone(), remaining).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > REMAINING_CACHE_SIZE {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }

    fn get(&self, key: &RemainingKey) -> Option<usize> {
        self.map.get(key).copied()
    }

    fn forget_below(&mut self, rev: u64) {
        self.map.retain(|k, _| k.2 >= rev);
        self.order.retain(|k| k.2 >= rev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gr() -> GroupResource {
        GroupResource::new("", "configmaps")
    }

    fn value(n: i64) -> StoredValue {
        StoredValue::encode(&json!({"n": n}), "v1", None)
    }

    #[test]
    fn snapshots_survive_later_writes_until_compaction() {
        let store = Store::new();
        let a = store
            .commit(&gr(), "ns/a", Expect::Absent, Some(value(1)))
            .unwrap();
        store
            .commit(&gr(), "ns/b", Expect::Absent, Some(value(2)))
            .unwrap();
        let snapshot = store.revision();
        store
            .commit(&gr(), "ns/a", Expect::ModRev(a.rev), Some(value(3)))
            .unwrap();
        store
            .commit(&gr(), "ns/c", Expect::Absent, Some(value(4)))
            .unwrap();

        let old = store.scan(&gr(), "ns/", None, snapshot, 10).unwrap();
        let keys: Vec<_> = old.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["ns/a", "ns/b"]);
        assert_eq!(old.entries[0].value.decode().unwrap()["n"], 1);

        store.compact(store.revision());
        assert_eq!(
            store.scan(&gr(), "ns/", None, snapshot, 10).err(),
            Some(ReadError::Compacted {
                compacted: store.revision()
            })
        );
        let now = store
            .scan(&gr(), "ns/", None, store.revision(), 10)
            .unwrap();
        assert_eq!(now.entries.len(), 3);
        assert_eq!(now.entries[0].value.decode().unwrap()["n"], 3);
    }

    #[test]
    fn conditional_commits_detect_conflicts() {
        let store = Store::new();
        let first = store
            .commit(&gr(), "x", Expect::Absent, Some(value(1)))
            .unwrap();
        assert_eq!(
            store
                .commit(&gr(), "x", Expect::Absent, Some(value(2)))
                .err(),
            Some(CommitError::Mismatch)
        );
        assert_eq!(
            store
                .commit(&gr(), "x", Expect::ModRev(first.rev + 7), Some(value(2)))
                .err(),
            Some(CommitError::Mismatch)
        );
        store
            .commit(&gr(), "x", Expect::ModRev(first.rev), None)
            .unwrap();
        assert!(store.get(&gr(), "x").is_none());
        assert_eq!(
            store
                .commit(&gr(), "x", Expect::ModRev(first.rev), None)
                .err(),
            Some(CommitError::Missing)
        );
    }

    #[test]
    fn pages_report_more_and_live_counts_track_namespaces() {
        let store = Store::new();
        for name in ["a/1", "a/2", "a/3", "b/1"] {
            store
                .commit(&gr(), name, Expect::Absent, Some(value(0)))
                .unwrap();
        }
        let rev = store.revision();
        let page = store.scan(&gr(), "a/", None, rev, 2).unwrap();
        assert!(page.more);
        let next = format!("{}\0", page.entries[1].key);
        let page2 = store.scan(&gr(), "a/", Some(&next), rev, 2).unwrap();
        assert_eq!(page2.entries.len(), 1);
        assert!(!page2.more);
        assert_eq!(store.snapshot(&gr(), "a/").1, 3);
        assert_eq!(store.snapshot(&gr(), "").1, 4);
        assert_eq!(store.count_from(&gr(), "", Some("a/2\0"), rev).unwrap(), 2);
    }

    #[test]
    fn replay_rebuilds_events_in_revision_order() {
        let store = Store::new();
        let start = store.revision();
        let a = store
            .commit(&gr(), "a", Expect::Absent, Some(value(1)))
            .unwrap();
        let a2 = store
            .commit(&gr(), "a", Expect::ModRev(a.rev), Some(value(2)))
            .unwrap();
        store
            .commit(&gr(), "b", Expect::Absent, Some(value(3)))
            .unwrap();
        store
            .commit(&gr(), "a", Expect::ModRev(a2.rev), None)
            .unwrap();
        let events = store
            .changes_since(&gr(), "", start, store.revision())
            .unwrap();
        let kinds: Vec<_> = events.iter().map(|e| (e.key.as_str(), e.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("a", EventType::Added),
                ("a", EventType::Modified),
                ("b", EventType::Added),
                ("a", EventType::Deleted)
            ]
        );
        assert_eq!(events[3].value.decode().unwrap()["n"], 2);
    }

    #[test]
    fn replay_beyond_the_event_window_walks_the_histories() {
        let store = Store::new();
        let start = store.revision();
        let mut rev = store
            .commit(&gr(), "k", Expect::Absent, Some(value(0)))
            .unwrap()
            .rev;
        for n in 1..=(RECENT_EVENTS as i64 + 10) {
            rev = store
                .commit(&gr(), "k", Expect::ModRev(rev), Some(value(n)))
                .unwrap()
                .rev;
        }
        let all = store
            .changes_since(&gr(), "", start, store.revision())
            .unwrap();
        assert_eq!(all.len(), RECENT_EVENTS + 11);
        assert_eq!(all[0].kind, EventType::Added);
        let recent = store
            .changes_since(&gr(), "", rev - 3, store.revision())
            .unwrap();
        assert_eq!(recent.len(), 3);
        assert_eq!(
            recent[2].value.decode().unwrap()["n"],
            RECENT_EVENTS as i64 + 10
        );
    }

    #[test]
    fn envelope_round_trips_and_names_the_key() {
        let v = StoredValue::encode(&json!({"a": 1}), "v1", Some("key2"));
        assert!(v.bytes.starts_with(b"k8s:enc:aescbc:v1:key2:{"));
        assert_eq!(v.decode().unwrap(), json!({"a": 1}));
    }
}
