//! The trigger's watches on the cluster — CustomResourceDefinitions, kube-apiserver identity
//! leases, StorageVersions — turned into [`Signal`]s for the trigger's loop, through the
//! cluster's one list+watch helper ([`svm_cluster::watches::watch`]).

use k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::runtime::watcher;
use svm_cluster::watches::watch;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub(crate) use svm_cluster::watches::Update;

/// The trigger's inputs from the cluster.
#[derive(Debug)]
pub(crate) enum Signal {
    /// Boxed: a CRD is much larger than the other objects.
    Crd(Box<Update<CustomResourceDefinition>>),
    Lease(Update<Lease>),
    StorageVersion(Update<StorageVersion>),
}

/// The label kube-apiserver puts on its identity leases (recording 12).
pub(crate) const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity=kube-apiserver";

pub(crate) fn watch_crds(client: kube::Client, out: mpsc::Sender<Signal>) -> JoinHandle<()> {
    watch(
        Api::<CustomResourceDefinition>::all(client),
        watcher::Config::default(),
        out,
        |update| Signal::Crd(Box::new(update)),
    )
}

pub(crate) fn watch_identity_leases(
    client: kube::Client,
    out: mpsc::Sender<Signal>,
) -> JoinHandle<()> {
    watch(
        Api::<Lease>::namespaced(client, "kube-system"),
        watcher::Config::default().labels(IDENTITY_LABEL),
        out,
        Signal::Lease,
    )
}

pub(crate) fn watch_storage_versions(
    client: kube::Client,
    out: mpsc::Sender<Signal>,
) -> JoinHandle<()> {
    watch(
        Api::<StorageVersion>::all(client),
        watcher::Config::default(),
        out,
        Signal::StorageVersion,
    )
}
