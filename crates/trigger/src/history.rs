//! The storage-version-hash history in etcd (docs/design.md, "The hash history"), read back on
//! start and written by the trigger only, each entry in the same transaction as the StorageState
//! change it causes:
//!
//! - `<prefix>/hashhistory/<group>/<resource>/<seq>`: one JSON [`HistoryEntry`] per observed
//!   change, `<group>` being `core` for the core group (as the StorageVersion API names it) and
//!   `<seq>` a per-resource counter, zero-padded so key order is append order;
//! - `<prefix>/trigger/observer`: the [`ObserverRecord`], what the trigger last vouched for —
//!   the kube-apiserver instances it had seen and when — so a restarted trigger can tell what
//!   it may have missed while it was away.
//!
//! Operators read both with `etcdctl get --prefix <prefix>/hashhistory/` (values are JSON).
//!
//! Both are written under the leadership term's fence (`registry::fence`): entries as records
//! in the StorageState's own transaction, the observer record through the fence.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use svm_registry::{ApiResult, Fence, Record};
use svm_storage::{ListOptions, Storage, StorageError};

/// Where an observation came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// A resource's `storageVersionHash` in discovery (`/api/v1`, `/apis/<g>/<v>`).
    Discovery,
    /// A CRD's storage version (`spec.versions[].storage`) or `status.storedVersions`.
    CustomResourceDefinition,
    /// An apiserver's `encodingVersion` in the StorageVersion API.
    StorageVersionApi,
    /// Not an observation: something happened the trigger cannot vouch for (an apiserver
    /// instance it never looked at, a downtime longer than it can account for).
    Unvouched,
    /// kube-apiserver's `/metrics`: the encryption generation every apiserver applies (an
    /// entry with [`HistoryEntry::encryption`]; its `hash` is the unchanged storage version).
    ApiserverMetrics,
}

/// What an encryption entry says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EncryptionKind {
    /// The first generation recorded for the resource: what it was when the trigger started
    /// watching, not a change (no migration).
    Baseline,
    /// Every apiserver applies a generation other than the last recorded: the resource's
    /// objects are re-encrypted by a migration.
    Rotation,
    /// The rotation's migration succeeded: every object is under the generation.
    Applied,
}

/// The encryption generation an entry records (docs/trigger.md, "Key rotation").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionRecord {
    /// Baseline, rotation or applied.
    pub kind: EncryptionKind,
    /// The generation every apiserver applies.
    pub generation: super::encryption::Generation,
    /// The generation recorded before (a rotation's old one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<super::encryption::Generation>,
}

/// One observed storage-version hash of one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The entry's number among its resource's entries, from 1: the last segment of its key.
    pub seq: u64,
    /// The hash, or `Unknown`.
    pub hash: String,
    /// RFC 3339.
    pub time: String,
    /// Where the hash was observed.
    pub source: Source,
    /// The apiserver identity (its identity lease name) the observation is from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apiserver: Option<String>,
    /// The group/version the hash stands for (`apps/v1`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_version: Option<String>,
    /// Why it was recorded, for people.
    pub reason: String,
    /// An encryption generation (source `ApiserverMetrics`); absent in storage-version
    /// entries, and in every entry an earlier version wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<EncryptionRecord>,
}

impl HistoryEntry {
    /// Whether a migration belongs to this entry: every storage-version entry, and a
    /// rotation; not a baseline or an applied rotation, which record without changing what
    /// is stored.
    pub fn calls_for_migration(&self) -> bool {
        self.encryption
            .as_ref()
            .is_none_or(|e| e.kind == EncryptionKind::Rotation)
    }
}

/// An entry to append (the sequence number and time are assigned when written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEntry {
    /// The hash, or `Unknown`.
    pub hash: String,
    /// Where the hash was observed.
    pub source: Source,
    /// The apiserver identity (its identity lease name) the observation is from, when known.
    pub apiserver: Option<String>,
    /// The group/version the hash stands for (`apps/v1`), when known.
    pub encoding_version: Option<String>,
    /// Why it is recorded, for people.
    pub reason: String,
    /// An encryption generation, for source `ApiserverMetrics`.
    pub encryption: Option<EncryptionRecord>,
}

/// A kube-apiserver instance as the trigger last saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenInstance {
    /// The identity lease's `spec.holderIdentity` (new for every process).
    pub holder_identity: String,
    /// RFC 3339.
    pub first_seen: String,
}

/// What the trigger last vouched for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObserverRecord {
    /// RFC 3339: the last time every watch was healthy and every instance accounted for.
    #[serde(default)]
    pub last_vouched: String,
    /// Live kube-apiserver instances then, by identity lease name.
    #[serde(default)]
    pub instances: BTreeMap<String, SeenInstance>,
}

/// `(group, resource)`.
pub type GroupResource = (String, String);

/// The hash history and the trigger's observer record, under the server's key prefix. Cheap to
/// clone.
#[derive(Clone)]
pub struct HashHistory {
    storage: Arc<dyn Storage>,
    prefix: String,
}

impl std::fmt::Debug for HashHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashHistory")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn group_segment(group: &str) -> &str {
    if group.is_empty() { "core" } else { group }
}

impl HashHistory {
    /// The history in `storage` under `root_prefix` (the server's `--etcd-prefix`; a trailing `/`
    /// is ignored).
    pub fn new(storage: Arc<dyn Storage>, root_prefix: &str) -> Self {
        Self {
            storage,
            prefix: root_prefix.trim_end_matches('/').to_string(),
        }
    }

    fn history_root(&self) -> String {
        format!("{}/hashhistory/", self.prefix)
    }

    fn resource_prefix(&self, group: &str, resource: &str) -> String {
        format!(
            "{}{}/{resource}/",
            self.history_root(),
            group_segment(group)
        )
    }

    fn observer_key(&self) -> String {
        format!("{}/trigger/observer", self.prefix)
    }

    /// Every resource's entries, in append order.
    pub async fn read_all(
        &self,
    ) -> Result<BTreeMap<GroupResource, Vec<HistoryEntry>>, StorageError> {
        let root = self.history_root();
        let listed = self.storage.list(&root, ListOptions::default()).await?;
        let mut out: BTreeMap<GroupResource, Vec<HistoryEntry>> = BTreeMap::new();
        for kv in listed.items {
            let Some(rest) = kv.key.strip_prefix(&root) else {
                continue;
            };
            let mut parts = rest.split('/');
            let (Some(group), Some(resource)) = (parts.next(), parts.next()) else {
                continue;
            };
            let group = if group == "core" { "" } else { group };
            match serde_json::from_slice::<HistoryEntry>(&kv.value) {
                Ok(entry) => out
                    .entry((group.to_string(), resource.to_string()))
                    .or_default()
                    .push(entry),
                Err(err) => {
                    return Err(StorageError::Corrupt(format!(
                        "hash history entry {:?} does not decode: {err}",
                        kv.key
                    )));
                }
            }
        }
        for entries in out.values_mut() {
            entries.sort_by_key(|e| e.seq);
        }
        Ok(out)
    }

    /// One resource's entries, in append order.
    pub async fn read(
        &self,
        group: &str,
        resource: &str,
    ) -> Result<Vec<HistoryEntry>, StorageError> {
        let prefix = self.resource_prefix(group, resource);
        let listed = self.storage.list(&prefix, ListOptions::default()).await?;
        let mut entries = Vec::with_capacity(listed.items.len());
        for kv in listed.items {
            entries.push(serde_json::from_slice(&kv.value).map_err(|err| {
                StorageError::Corrupt(format!("hash history entry {:?}: {err}", kv.key))
            })?);
        }
        Ok(entries)
    }

    /// The records that append `entries` after sequence number `last_seq`, and the entries as
    /// they will be stored. The caller commits them with the StorageState write they belong
    /// to; that write's revision precondition is what keeps two writers from taking one
    /// sequence number.
    pub fn append(
        &self,
        group: &str,
        resource: &str,
        last_seq: u64,
        entries: &[NewEntry],
    ) -> (Vec<Record>, Vec<HistoryEntry>) {
        let prefix = self.resource_prefix(group, resource);
        let time = svm_registry::now_text();
        let mut ops = Vec::with_capacity(entries.len());
        let mut stored = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let seq = last_seq + 1 + i as u64;
            let record = HistoryEntry {
                seq,
                hash: entry.hash.clone(),
                time: time.clone(),
                source: entry.source,
                apiserver: entry.apiserver.clone(),
                encoding_version: entry.encoding_version.clone(),
                reason: entry.reason.clone(),
                encryption: entry.encryption.clone(),
            };
            // Serializing plain strings and enums cannot fail; an empty value would only
            // make the entry unreadable, never the write wrong.
            let bytes = serde_json::to_vec(&record).unwrap_or_default();
            ops.push(Record {
                key: format!("{prefix}{seq:020}"),
                value: bytes,
            });
            stored.push(record);
        }
        (ops, stored)
    }

    /// The observer record; `None` until the trigger first wrote one.
    pub async fn read_observer(&self) -> Result<Option<ObserverRecord>, StorageError> {
        let Some(kv) = self.storage.get(&self.observer_key()).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&kv.value)
            .map(Some)
            .map_err(|err| StorageError::Corrupt(format!("the trigger's observer record: {err}")))
    }

    /// Writes the observer record under `fence` (nothing is written once the term is over).
    pub async fn write_observer(&self, fence: &Fence, record: &ObserverRecord) -> ApiResult<()> {
        let bytes = serde_json::to_vec(record).unwrap_or_default();
        fence
            .put_records(vec![Record {
                key: self.observer_key(),
                value: bytes,
            }])
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svm_storage::embedded::EmbeddedStorage;
    use svm_storage::{Op, Txn, TxnOutcome};

    fn puts(records: Vec<Record>) -> Vec<Op> {
        records
            .into_iter()
            .map(|r| Op::Put(r.key, r.value))
            .collect()
    }

    fn entry(hash: &str) -> NewEntry {
        NewEntry {
            hash: hash.into(),
            source: Source::Discovery,
            apiserver: Some("apiserver-a".into()),
            encoding_version: Some("v1".into()),
            reason: "seen".into(),
            encryption: None,
        }
    }

    #[tokio::test]
    async fn entries_append_in_order_per_resource_and_read_back() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let history = HashHistory::new(storage.clone(), "/svm/");
        for (group, resource, hashes) in [
            ("", "configmaps", vec!["a", "b"]),
            ("apps", "deployments", vec!["x"]),
        ] {
            let entries: Vec<NewEntry> = hashes.iter().map(|h| entry(h)).collect();
            let (records, stored) = history.append(group, resource, 0, &entries);
            let ops = puts(records);
            assert_eq!(
                stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
                (1..=hashes.len() as u64).collect::<Vec<_>>()
            );
            let outcome = storage
                .txn(Txn {
                    compares: vec![],
                    ops,
                })
                .await
                .expect("txn");
            assert!(matches!(outcome, TxnOutcome::Committed { .. }));
        }
        // A tenth entry sorts after the ninth (zero-padded keys).
        let (records, _) = history.append("", "configmaps", 9, &[entry("c")]);
        assert_eq!(
            records[0].key,
            "/svm/hashhistory/core/configmaps/00000000000000000010"
        );
        let ops = puts(records);
        storage
            .txn(Txn {
                compares: vec![],
                ops,
            })
            .await
            .expect("txn");
        let all = history.read_all().await.expect("read");
        let configmaps: Vec<&str> = all[&("".to_string(), "configmaps".to_string())]
            .iter()
            .map(|e| e.hash.as_str())
            .collect();
        assert_eq!(configmaps, ["a", "b", "c"]);
        assert_eq!(
            all[&("apps".to_string(), "deployments".to_string())][0]
                .apiserver
                .as_deref(),
            Some("apiserver-a")
        );
        assert_eq!(
            history
                .read("apps", "deployments")
                .await
                .expect("read")
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn the_observer_record_round_trips() {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let history = HashHistory::new(storage.clone(), "/svm");
        assert_eq!(history.read_observer().await.expect("read"), None);
        let mut record = ObserverRecord {
            last_vouched: "2026-11-23T10:00:00Z".into(),
            ..Default::default()
        };
        record.instances.insert(
            "apiserver-x".into(),
            SeenInstance {
                holder_identity: "apiserver-x_1".into(),
                first_seen: "2026-11-23T09:00:00Z".into(),
            },
        );
        let fence = Fence::unfenced(storage, tokio_util::sync::CancellationToken::new());
        history
            .write_observer(&fence, &record)
            .await
            .expect("write");
        assert_eq!(history.read_observer().await.expect("read"), Some(record));
    }
}
