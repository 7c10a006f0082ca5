//! The trigger's watches on the cluster — CustomResourceDefinitions, kube-apiserver identity
//! leases, StorageVersions — through kube's `watcher` (list, then watch from the list's
//! resourceVersion, relist after a 410, backoff on errors), turned into updates for the
//! trigger's loop. A relist is delivered whole, so the loop can tell a gap from a change.
//! [`watch`] is the one list+watch helper: the API-mode watch (APIServices) and the built-in
//! migrations of companion mode use it too.

use futures::StreamExt;
use k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What a watch reports.
pub use crate::registry::Update;

/// The trigger's inputs from the cluster.
#[derive(Debug)]
pub enum Signal {
    /// Boxed: a CRD is much larger than the other objects.
    Crd(Box<Update<CustomResourceDefinition>>),
    Lease(Update<Lease>),
    StorageVersion(Update<StorageVersion>),
}

const FIRST_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);
const MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(60);

/// The label kube-apiserver puts on its identity leases (recording 12).
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity=kube-apiserver";

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

pub fn watch_crds(client: kube::Client, out: mpsc::Sender<Signal>) -> JoinHandle<()> {
    watch(
        Api::<CustomResourceDefinition>::all(client),
        watcher::Config::default(),
        out,
        |update| Signal::Crd(Box::new(update)),
    )
}

pub fn watch_identity_leases(client: kube::Client, out: mpsc::Sender<Signal>) -> JoinHandle<()> {
    watch(
        Api::<Lease>::namespaced(client, "kube-system"),
        watcher::Config::default().labels(IDENTITY_LABEL),
        out,
        Signal::Lease,
    )
}

pub fn watch_storage_versions(client: kube::Client, out: mpsc::Sender<Signal>) -> JoinHandle<()> {
    watch(
        Api::<StorageVersion>::all(client),
        watcher::Config::default(),
        out,
        Signal::StorageVersion,
    )
}
