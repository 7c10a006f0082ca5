//! Periodic compaction, as kube-apiserver's `--etcd-compaction-interval` does: at each tick,
//! compact up to the revision seen at the previous tick, so at least one interval of history
//! (watch replay, paged lists) always remains.

use std::sync::Arc;
use std::time::Duration;

use super::{Revision, Storage, StorageError};

/// Runs until the task is dropped. `interval` zero disables compaction.
pub async fn run(storage: Arc<dyn Storage>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<Revision> = None;
    loop {
        ticker.tick().await;
        previous = tick(storage.as_ref(), previous).await;
    }
}

/// One compaction step: compact to `previous` (if any) and return the revision to compact to
/// next time.
pub async fn tick(storage: &dyn Storage, previous: Option<Revision>) -> Option<Revision> {
    if let Some(revision) = previous {
        match storage.compact(revision).await {
            Ok(()) => tracing::debug!(revision, "compacted"),
            // Someone (another replica, an operator) compacted further already: fine.
            Err(StorageError::Compacted { .. }) => {}
            Err(error) => tracing::warn!(%error, revision, "compaction failed"),
        }
    }
    match storage.current_revision().await {
        Ok(current) => Some(current),
        Err(error) => {
            tracing::warn!(%error, "reading the current revision for compaction failed");
            previous
        }
    }
}
