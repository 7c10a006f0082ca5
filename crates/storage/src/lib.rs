//! The `Storage` trait: an etcd-shaped key-value store with revisions.
//!
//! Everything above this module (the registry, the hash history) speaks only this trait, so the
//! etcd backend and the embedded backend are interchangeable. The semantics are etcd's:
//! - one global, monotonically increasing revision; every successful write transaction
//!   increments it by exactly one, and every key it touched gets that `mod_revision`;
//! - reads may be served at a past revision (until compacted), which is how list paging stays
//!   consistent across pages;
//! - a watch from a revision delivers every later change in revision order, or fails with
//!   [`StorageError::Compacted`] when that history is gone.

pub mod compactor;
mod config;
pub mod embedded;
pub mod etcd;

pub use config::{StorageConfig, connect};

use async_trait::async_trait;
use futures::stream::BoxStream;

/// An etcd revision. Kubernetes exposes it as `resourceVersion`.
pub type Revision = i64;

/// One stored key at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key, prefix included (etcd's `key`).
    pub key: String,
    /// The stored bytes: an encoded object, opaque to this layer.
    pub value: Vec<u8>,
    /// Revision of the transaction that created this key (since its last deletion).
    pub create_revision: Revision,
    /// Revision of the last transaction that modified this key.
    pub mod_revision: Revision,
}

/// Why a storage call failed. The registry maps each onto an API status.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An update or delete named a key that does not exist.
    #[error("key {key:?} not found")]
    NotFound {
        /// The missing key.
        key: String,
    },
    /// A create named a key that already exists.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The existing key.
        key: String,
    },
    /// A transaction's compare failed: the key was modified (or created/deleted) concurrently.
    #[error("key {key:?} was modified: expected mod revision {expected}, found {actual:?}")]
    Conflict {
        /// The key whose compare failed.
        key: String,
        /// The mod revision the caller read and expected still to find.
        expected: Revision,
        /// The key's mod revision now (`None`: it no longer exists).
        actual: Option<Revision>,
    },
    /// The requested revision is older than the oldest one the store still keeps.
    #[error("required revision {requested} has been compacted (compacted revision {compacted})")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The store's compacted revision: history before it is gone.
        compacted: Revision,
    },
    /// The requested revision is newer than the store's current revision.
    #[error("required revision {requested} is a future revision (current revision {current})")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// The backend cannot serve the call now (etcd unreachable or answering with an error, the
    /// data directory locked by another process, a watcher that fell too far behind); retrying
    /// may help.
    #[error("storage unavailable: {message}{}", source.as_ref().map(|s| format!(": {s}")).unwrap_or_default())]
    Unavailable {
        /// What could not be done.
        message: String,
        /// The backend's own error, when there is one (etcd's, a failed blocking task's).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The stored data cannot be read back as written (a damaged log, a replay that does not add
    /// up); retrying will not help.
    #[error("storage data corrupt: {0}")]
    Corrupt(String),
    /// Reading or writing the data directory failed; also a transaction [`Txn`] rejects as
    /// malformed (kind `InvalidInput`).
    #[error("storage I/O error")]
    Io(#[from] std::io::Error),
}

impl StorageError {
    /// The backend cannot serve the call now, for the reason `message` says.
    pub fn unavailable(message: impl Into<String>) -> Self {
        StorageError::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// `message` could not be done because of `source`.
    pub fn unavailable_because(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StorageError::Unavailable {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// The result of every storage call.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// A range read under a prefix.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Start at this key (inclusive). Must lie under the prefix. `None` = the prefix itself.
    pub start: Option<String>,
    /// At most this many items; `None` = all.
    pub limit: Option<usize>,
    /// Serve the read at this revision; `None` = the current revision.
    pub revision: Option<Revision>,
}

/// The answer to [`Storage::list`]: one page of keys, read at one revision.
#[derive(Debug, Clone, Default)]
pub struct ListResult {
    /// Items in ascending key order.
    pub items: Vec<KeyValue>,
    /// The revision the read was served at (the store revision for `revision: None`).
    pub revision: Revision,
    /// How many keys under the prefix follow the last returned item (0 when complete).
    pub remaining: i64,
}

impl ListResult {
    /// Whether keys under the prefix follow this page (`remaining > 0`).
    pub fn more(&self) -> bool {
        self.remaining > 0
    }
}

/// A compare guarding a transaction, as in etcd's `Txn().If(...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key must not exist.
    Absent(String),
    /// The key must exist with exactly this mod revision.
    ModRevision(String, Revision),
}

/// One write in a [`Txn`], as in etcd's `Txn().Then(...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Set the key to these bytes, creating it if missing.
    Put(String, Vec<u8>),
    /// Remove the key; deleting a missing key is no change.
    Delete(String),
}

/// An atomic, all-or-nothing write: if every compare holds, every op is applied at one new
/// revision. An empty `ops` list with passing compares does not advance the revision.
#[derive(Debug, Clone, Default)]
pub struct Txn {
    /// Every compare must hold for the ops to run (etcd's `If`); empty: always.
    pub compares: Vec<Compare>,
    /// The writes, all applied at one new revision (etcd's `Then`).
    pub ops: Vec<Op>,
}

/// What [`Storage::txn`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOutcome {
    /// All compares held; the ops were applied at `revision`.
    Committed {
        /// The new store revision, the `mod_revision` of every key written.
        revision: Revision,
    },
    /// The compare at `index` failed; nothing was written. `current` is that key's current
    /// mod revision, if it exists.
    Failed {
        /// Position of the failed compare in [`Txn::compares`].
        index: usize,
        /// That key's mod revision now (`None`: it does not exist).
        current: Option<Revision>,
    },
}

/// Whether a watch event wrote or removed its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or modified.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Whether this change wrote or removed the key.
    pub kind: EventKind,
    /// For `Put`: the new value. For `Delete`: the key with the value it had before the delete
    /// and `mod_revision` set to the revision of the delete.
    pub kv: KeyValue,
    /// The previous value, if the key existed before this change.
    pub prev: Option<KeyValue>,
}

/// One item of a [`WatchStream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchItem {
    /// A change under the watched prefix.
    Event(Event),
    /// Every change up to and including this revision under the watched prefix has been
    /// delivered. Sent periodically on an otherwise idle watch; drives watch bookmarks.
    Progress(Revision),
}

/// A watch: items in revision order; an `Err` item ends it.
pub type WatchStream = BoxStream<'static, Result<WatchItem>>;

/// An etcd-shaped key-value store with revisions (see the module docs for its semantics);
/// implemented by [`embedded::EmbeddedStorage`] and [`etcd::EtcdStorage`].
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// The current store revision.
    async fn current_revision(&self) -> Result<Revision>;

    /// Read one key at the current revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Read keys under `prefix` in ascending key order, optionally at a past revision and from a
    /// start key, with a limit. Reading at a compacted revision fails with `Compacted`; at a
    /// future revision with `FutureRevision`.
    /// A limit of zero returns no items and counts them all in `remaining`.
    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult>;

    /// Apply a transaction atomically. As etcd does, a transaction naming an empty key or
    /// writing one key twice is rejected before anything is evaluated (`StorageError::Io` of
    /// kind `InvalidInput`), and deleting a missing key is no change.
    async fn txn(&self, txn: Txn) -> Result<TxnOutcome>;

    /// Watch every change under `prefix` with revision strictly greater than `after`, in
    /// revision order. Fails (immediately, or as the first stream item) with `Compacted` when
    /// `after + 1` is older than the compacted revision.
    /// As in etcd, `after` may be ahead of the current revision: the watch waits for it.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream>;

    /// Discard history older than `revision` (etcd compaction).
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// A cheap liveness probe of the backend (readyz).
    async fn health(&self) -> Result<()>;

    /// Create `key`; fails with `AlreadyExists` if it exists. Returns the new revision.
    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Revision> {
        let txn = Txn {
            compares: vec![Compare::Absent(key.to_string())],
            ops: vec![Op::Put(key.to_string(), value)],
        };
        match self.txn(txn).await? {
            TxnOutcome::Committed { revision } => Ok(revision),
            TxnOutcome::Failed { .. } => Err(StorageError::AlreadyExists {
                key: key.to_string(),
            }),
        }
    }

    /// Replace `key` if its mod revision is still `expected`. Returns the new revision.
    async fn update(&self, key: &str, value: Vec<u8>, expected: Revision) -> Result<Revision> {
        let txn = Txn {
            compares: vec![Compare::ModRevision(key.to_string(), expected)],
            ops: vec![Op::Put(key.to_string(), value)],
        };
        match self.txn(txn).await? {
            TxnOutcome::Committed { revision } => Ok(revision),
            TxnOutcome::Failed { current: None, .. } => Err(StorageError::NotFound {
                key: key.to_string(),
            }),
            TxnOutcome::Failed { current, .. } => Err(StorageError::Conflict {
                key: key.to_string(),
                expected,
                actual: current,
            }),
        }
    }

    /// Delete `key` if its mod revision is still `expected`. Returns the delete's revision.
    async fn delete(&self, key: &str, expected: Revision) -> Result<Revision> {
        let txn = Txn {
            compares: vec![Compare::ModRevision(key.to_string(), expected)],
            ops: vec![Op::Delete(key.to_string())],
        };
        match self.txn(txn).await? {
            TxnOutcome::Committed { revision } => Ok(revision),
            TxnOutcome::Failed { current: None, .. } => Err(StorageError::NotFound {
                key: key.to_string(),
            }),
            TxnOutcome::Failed { current, .. } => Err(StorageError::Conflict {
                key: key.to_string(),
                expected,
                actual: current,
            }),
        }
    }
}

impl Txn {
    /// Reject what etcd rejects before evaluating anything: an empty key, or a transaction that
    /// writes one key twice (etcd: "duplicate key given in txn request"). Both are caller bugs,
    /// reported as an `InvalidInput` I/O error.
    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |msg: String| {
            StorageError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, msg))
        };
        let compared = self.compares.iter().map(|c| match c {
            Compare::Absent(key) | Compare::ModRevision(key, _) => key,
        });
        let written: Vec<&String> = self
            .ops
            .iter()
            .map(|op| match op {
                Op::Put(key, _) | Op::Delete(key) => key,
            })
            .collect();
        if compared
            .chain(written.iter().copied())
            .any(|k| k.is_empty())
        {
            return Err(invalid("transaction names an empty key".into()));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = written.iter().find(|k| !seen.insert(**k)) {
            return Err(invalid(format!(
                "transaction writes key {dup:?} more than once"
            )));
        }
        Ok(())
    }
}
