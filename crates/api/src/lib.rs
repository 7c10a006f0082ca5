//! The served types: one internal (hub) form per kind, the served versions with lossless
//! conversion, defaulting, validation, OpenAPI schemas, and the strategies the generic store
//! runs them with. Two groups: upstream's `storagemigration.k8s.io` ([`UPSTREAM`]) and the
//! project's own `storage.svm-apiserver.io` ([`PROJECT`]), where the kinds that are ours alone
//! live (VolumeClaimMigration; StorageState, also served there so that it stays reachable on clusters that serve
//! `storagemigration.k8s.io` themselves; see [`ApiGroup`]).

pub(crate) mod columns;
pub mod conditions;
pub mod dataplane;
pub mod install;
pub mod migration;
pub mod names;
mod openapi;
mod rules;
pub(crate) mod served;
pub mod storagestate;
pub mod volumes;

pub use install::{Installed, Kinds, install};

/// The API group served.
pub const GROUP: &str = "storagemigration.k8s.io";

/// Served versions, preferred first (kube-apiserver orders GA before beta before alpha).
pub const VERSIONS: &[&str] = &["v1", "v1beta1", "v1alpha1"];

/// Storage hashes and internal forms are those of this version.
pub const STORAGE_VERSION: &str = "v1";

/// A group a kind is served in: its name, its versions (preferred first) and the version
/// whose `<group>/<version>/<kind>` the storage-version hash is computed from. A kind served
/// in a second group is one more registration of its strategy, never new HTTP code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiGroup {
    /// The group's name, e.g. `storagemigration.k8s.io`.
    pub name: &'static str,
    /// The versions the kind is served in, preferred first.
    pub versions: &'static [&'static str],
    /// The version the storage-version hash is computed from.
    pub storage_version: &'static str,
}

/// Upstream's group: StorageVersionMigration (the shapes Kubernetes published) and
/// StorageState. Registered with the aggregator only where the cluster does not serve the
/// group itself (owner mode).
pub const UPSTREAM: ApiGroup = ApiGroup {
    name: GROUP,
    versions: VERSIONS,
    storage_version: STORAGE_VERSION,
};

/// The project's own group: what svm-apiserver adds to Kubernetes (StorageState, and the
/// namespaced VolumeClaimMigration).
/// Registered in both modes. Not a version of `storagemigration.k8s.io`: kube-apiserver 1.37
/// serves that group itself, and the aggregator routes a group's versions to different
/// backends only version by version — a StorageState in a version the cluster does not serve
/// would disappear (or shadow the cluster) with the next release that serves it, and the
/// group's discovery would mix two servers. A group of our own can never clash.
pub const PROJECT: ApiGroup = ApiGroup {
    name: "storage.svm-apiserver.io",
    versions: &["v1alpha1"],
    storage_version: "v1alpha1",
};

/// The category both kinds belong to (`kubectl get storage-migration`).
pub const CATEGORY: &str = "storage-migration";
