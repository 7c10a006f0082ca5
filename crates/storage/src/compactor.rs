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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::EmbeddedStorage;
    use crate::{ListOptions, Storage};

    #[tokio::test]
    async fn each_tick_compacts_to_the_revision_seen_one_tick_earlier() {
        let store = EmbeddedStorage::in_memory();
        let first = store.create("/k/a", b"1".to_vec()).await.unwrap();
        // The first tick only records the current revision.
        let seen = tick(&store, None).await;
        assert_eq!(seen, Some(first));
        let second = store.create("/k/b", b"2".to_vec()).await.unwrap();
        // A read at the first revision still works: nothing was compacted yet.
        let opts = ListOptions {
            revision: Some(first),
            ..Default::default()
        };
        assert_eq!(
            store.list("/k/", opts.clone()).await.unwrap().items.len(),
            1
        );
        // The second tick compacts to `first` and records `second`.
        assert_eq!(tick(&store, seen).await, Some(second));
        let before_first = ListOptions {
            revision: Some(first - 1),
            ..Default::default()
        };
        assert!(matches!(
            store.list("/k/", before_first).await,
            Err(StorageError::Compacted { .. })
        ));
        assert_eq!(store.list("/k/", opts).await.unwrap().items.len(), 1);
    }
}
