//! The one list+watch helper over the cluster, through kube's `watcher` (list, then watch from
//! the list's resourceVersion, relist after a 410, backoff on errors): a relist is delivered
//! whole, so a consumer can tell a gap from a change. The trigger's watches (CRDs, identity
//! leases, StorageVersions), the API-mode watch (APIServices) and the built-in migrations of
//! companion mode use it.

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What a watch reports.
pub use svm_registry::Update;

const FIRST_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);
const MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(60);

/// Lists and watches `api` until `out` is closed, sending every [`Update`] through `wrap`.
pub fn watch<K, T>(
    api: Api<K>,
    config: watcher::Config,
    out: mpsc::Sender<T>,
    wrap: fn(Update<K>) -> T,
) -> JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        let mut listing: Option<Vec<K>> = None;
        // kube's backoff restarts with every relist attempt (the watcher yields `Init` before
        // it lists), so a list that keeps failing (403: RBAC refuses it) would be retried
        // about once a second forever: back off here too, up to a minute, until a list works.
        let mut pause = FIRST_PAUSE;
        while let Some(event) = events.next().await {
            let update = match event {
                Ok(Event::Init) => {
                    listing = Some(Vec::new());
                    continue;
                }
                Ok(Event::InitApply(obj)) => {
                    listing.get_or_insert_with(Vec::new).push(obj);
                    continue;
                }
                Ok(Event::InitDone) => {
                    pause = FIRST_PAUSE;
                    Update::Relisted(listing.take().unwrap_or_default())
                }
                Ok(Event::Apply(obj)) => Update::Applied(obj),
                Ok(Event::Delete(obj)) => Update::Deleted(obj),
                Err(err) => {
                    listing = None;
                    if out
                        .send(wrap(Update::Failed(err.to_string())))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                    continue;
                }
            };
            if out.send(wrap(update)).await.is_err() {
                return;
            }
        }
    })
}
