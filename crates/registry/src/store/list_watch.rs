//! The one list+watch loop over our own objects, as the controllers consume it (what kube's
//! `watcher` is for the cluster's): a complete list, then every change from the list's
//! revision; after a gap (a failed watch, a closed stream) or every `resync`, a new list, so a
//! consumer never depends on having seen every event.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::super::strategy::Strategy;
use super::{Guarded, StoreEvent};

/// What a list+watch delivers: the same vocabulary for our store and for the cluster's watches.
#[derive(Debug)]
pub enum Update<K> {
    /// An object was created or changed: its new state.
    Applied(K),
    /// An object was deleted: its last state.
    Deleted(K),
    /// A complete list (the first one, or after a gap).
    Relisted(Vec<K>),
    /// The list or watch failed; it retries and relists.
    Failed(String),
}

/// How long a failed list waits before the next one.
const RETRY: Duration = Duration::from_secs(1);

impl<S: Strategy> Guarded<S> {
    /// Lists and watches this store until `out` is closed, sending every [`Update`] through
    /// `wrap`; relists after a gap and every `resync`.
    pub fn list_and_watch<T: Send + 'static>(
        &self,
        resync: Duration,
        out: mpsc::Sender<T>,
        wrap: fn(Update<S::Object>) -> T,
    ) -> JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(
            async move { while store.list_then_watch(resync, &out, wrap).await.is_ok() {} },
        )
    }

    /// One list and the watch after it, until a gap or the resync. `Err`: `out` is closed.
    async fn list_then_watch<T>(
        &self,
        resync: Duration,
        out: &mpsc::Sender<T>,
        wrap: fn(Update<S::Object>) -> T,
    ) -> Result<(), ()> {
        let send = |update| async move { out.send(wrap(update)).await.map_err(|_| ()) };
        let (all, revision) = match self.list_all().await {
            Ok(listed) => listed,
            Err(err) => {
                send(Update::Failed(err.to_string())).await?;
                tokio::time::sleep(RETRY).await;
                return Ok(());
            }
        };
        send(Update::Relisted(all)).await?;
        let mut changes = match self.watch(revision).await {
            Ok(changes) => changes,
            Err(err) => return send(Update::Failed(err.to_string())).await,
        };
        let relist = tokio::time::sleep(resync);
        tokio::pin!(relist);
        loop {
            let update = tokio::select! {
                _ = &mut relist => return Ok(()),
                change = changes.next() => match change {
                    Some(Ok(StoreEvent::Added(o) | StoreEvent::Modified(o))) => Update::Applied(o),
                    Some(Ok(StoreEvent::Deleted(o))) => Update::Deleted(o),
                    Some(Ok(StoreEvent::Progress(_))) => continue,
                    Some(Err(err)) => Update::Failed(err.to_string()),
                    None => return Ok(()),
                },
            };
            let failed = matches!(update, Update::Failed(_));
            send(update).await?;
            if failed {
                return Ok(());
            }
        }
    }
}
