//! The embedded backend: an in-process store with etcd's semantics, durable in a data directory
//! (or purely in memory, for tests), so the server starts with one command and no etcd.
//!
//! - `mvcc`: the multi-version index every read is served from;
//! - `wal`: the write-ahead log that makes it durable (fsync before a write is acknowledged,
//!   replay on open, snapshot rewrite on compaction);
//! - `fs`: the file operations the log makes, behind a trait: the disk in the server; in the
//!   crate's tests, a filesystem that records every call (`crash`), from which the power-loss
//!   test (`power_loss`) builds what a power loss at each of them could leave;
//! - `watch`: the fan-out of committed transactions to watch streams.
//!
//! Concurrency: one writer at a time (a mutex around the log, held by a blocking thread while it
//! appends and fsyncs), readers under a read-write lock that a writer takes only to apply an
//! already durable transaction. No lock is ever held across an `.await`, and a commit runs to
//! completion even if the caller's future is dropped, so memory and log never diverge.

#[cfg(test)]
mod crash;
mod fs;
mod mvcc;
#[cfg(test)]
mod power_loss;
mod wal;
mod watch;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use self::fs::{Disk, Fs};
use self::mvcc::{Mvcc, Prepared};
use self::wal::Wal;
pub use self::wal::{DamageReport, Recovery, Verification, recover, verify};
use self::watch::Committed;
use super::{
    KeyValue, ListOptions, ListResult, Result, Revision, Storage, StorageError, Txn, TxnOutcome,
    WatchStream,
};

/// Tuning of the embedded store.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// How long a watch may stay silent before it sends `WatchItem::Progress` (drives watch
    /// bookmarks). Zero disables progress items.
    pub progress_interval: Duration,
    /// How many committed transactions a watcher may lag behind the newest before its stream
    /// is ended with `Unavailable` (bounds memory, whatever the watcher's speed).
    pub watch_buffer: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            progress_interval: Duration::from_secs(1),
            watch_buffer: 1024,
        }
    }
}

/// The embedded store. Cheap to clone; clones share one store.
#[derive(Clone)]
pub struct EmbeddedStorage {
    store: Arc<StoreState>,
}

struct StoreState {
    mvcc: RwLock<Mvcc>,
    /// Serializes writers. `None` for an in-memory store.
    log: Mutex<Option<Wal>>,
    durable: bool,
    feed: broadcast::Sender<Arc<Committed>>,
    options: EmbeddedOptions,
}

impl EmbeddedStorage {
    /// Open the store durable in `dir` (created if missing) with default options.
    pub async fn open(dir: impl AsRef<Path>) -> Result<EmbeddedStorage> {
        Self::open_with(dir, EmbeddedOptions::default()).await
    }

    /// Open the store durable in `dir` (created if missing), replaying its log.
    pub async fn open_with(dir: impl AsRef<Path>, options: EmbeddedOptions) -> Result<Self> {
        Self::open_on(Arc::new(Disk), dir.as_ref(), options).await
    }

    /// Open the store durable in `dir` on the filesystem `fs` (the disk, or in tests one that
    /// records every call), on a blocking thread.
    async fn open_on(fs: Arc<dyn Fs>, dir: &Path, options: EmbeddedOptions) -> Result<Self> {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || Self::open_blocking(fs, &dir, options))
            .await
            .map_err(|e| StorageError::unavailable_because("opening the store", e))?
    }

    /// [`Self::open_on`], on this thread.
    fn open_blocking(fs: Arc<dyn Fs>, dir: &Path, options: EmbeddedOptions) -> Result<Self> {
        let opened = Wal::open(fs, dir)?;
        if let Some(cut) = &opened.cut {
            tracing::warn!(
                offset = cut.offset,
                bytes = cut.bytes,
                problem = %cut.problem,
                "write-ahead log ended in a torn record (a write that never completed); it was cut off"
            );
        }
        Ok(Self::build(opened.mvcc, Some(opened.wal), options))
    }

    /// A store with the same semantics that keeps nothing on disk, with default options.
    pub fn in_memory() -> EmbeddedStorage {
        Self::in_memory_with(EmbeddedOptions::default())
    }

    /// A store with the same semantics that keeps nothing on disk.
    pub fn in_memory_with(options: EmbeddedOptions) -> EmbeddedStorage {
        Self::build(Mvcc::new(), None, options)
    }

    fn build(mvcc: Mvcc, wal: Option<Wal>, options: EmbeddedOptions) -> Self {
        let (feed, _) = broadcast::channel(options.watch_buffer.max(1));
        Self {
            store: Arc::new(StoreState {
                mvcc: RwLock::new(mvcc),
                durable: wal.is_some(),
                log: Mutex::new(wal),
                feed,
                options,
            }),
        }
    }

    /// Run a write on a blocking thread when it touches the disk. Spawned, so it completes even
    /// if the caller stops waiting.
    async fn write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&StoreState) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if !self.store.durable {
            return work(&self.store);
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| StorageError::unavailable_because("a storage write", e))?
    }
}

impl StoreState {
    fn read(&self) -> Result<RwLockReadGuard<'_, Mvcc>> {
        self.mvcc.read().map_err(|_| poisoned())
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, Mvcc>> {
        self.mvcc.write().map_err(|_| poisoned())
    }

    fn log(&self) -> Result<MutexGuard<'_, Option<Wal>>> {
        self.log.lock().map_err(|_| poisoned())
    }

    fn commit(&self, txn: Txn) -> Result<TxnOutcome> {
        let mut log = self.log()?;
        // Holding the log lock, no other write can change what `prepare` saw.
        let (revision, changes) = match self.read()?.prepare(txn) {
            Prepared::Done(outcome) => return Ok(outcome),
            Prepared::Commit { revision, changes } => (revision, changes),
        };
        if let Some(wal) = log.as_mut() {
            wal.append_txn(revision, &changes)?;
        }
        let mut mvcc = self.write()?;
        let events = mvcc.apply(revision, changes)?;
        // Published under the write lock, so a watch subscribing under the read lock gets
        // exactly the transactions after its replay. No receivers is fine.
        let _ = self.feed.send(Arc::new(Committed { revision, events }));
        Ok(TxnOutcome::Committed { revision })
    }

    fn compact(&self, revision: Revision) -> Result<()> {
        let mut log = self.log()?;
        // Memory first: if the rewrite then fails, the old log still holds everything, and a
        // restart merely finds more history (a lower compacted revision) than was promised.
        self.write()?.compact(revision)?;
        if let Some(wal) = log.as_mut() {
            // The log lock keeps writers out, so the snapshot is exactly the compacted state.
            let snapshot = wal::encode_snapshot(&*self.read()?)?;
            wal.rewrite(&snapshot)?;
        }
        Ok(())
    }
}

fn poisoned() -> StorageError {
    StorageError::unavailable("embedded store is unusable after an internal panic")
}

#[async_trait]
impl Storage for EmbeddedStorage {
    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.store.read()?.current())
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.store.read()?.get(key))
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        self.store.read()?.list(prefix, &opts)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnOutcome> {
        txn.check()?;
        self.write(move |store| store.commit(txn)).await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let mvcc = self.store.read()?;
        if after + 1 < mvcc.compacted() {
            return Err(StorageError::Compacted {
                requested: after + 1,
                compacted: mvcc.compacted(),
            });
        }
        let start = watch::Start {
            prefix: prefix.to_string(),
            after,
            replay: mvcc.events_after(prefix, after),
            live: self.store.feed.subscribe(),
            revision: mvcc.current(),
            progress_interval: self.store.options.progress_interval,
            capacity: self.store.options.watch_buffer.max(1),
        };
        drop(mvcc);
        Ok(watch::stream(start))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.write(move |store| store.compact(revision)).await
    }

    async fn health(&self) -> Result<()> {
        match self.store.log()?.as_ref().and_then(|wal| wal.broken()) {
            Some(reason) => Err(StorageError::unavailable(reason.to_string())),
            None => Ok(()),
        }
    }
}
