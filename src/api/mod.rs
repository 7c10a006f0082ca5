//! The `storagemigration.k8s.io` types: one internal (hub) form per kind, the served versions
//! with lossless conversion, defaulting, validation, OpenAPI schemas, and the strategies the
//! generic store runs them with.

pub mod common;
pub mod install;
pub mod migration;
pub mod storagestate;
pub mod volumes;

pub use install::{Installed, install};

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
    pub name: &'static str,
    pub versions: &'static [&'static str],
    pub storage_version: &'static str,
}

/// The project's own group: what svm-apiserver adds to Kubernetes (VolumeClaimMigration
/// today). Not under `k8s.io`, which is reserved for upstream-reviewed APIs; a group of our
/// own can never clash with one the cluster serves.
pub const PROJECT: ApiGroup = ApiGroup {
    name: "storage.svm-apiserver.io",
    versions: &["v1alpha1"],
    storage_version: "v1alpha1",
};

/// The category both kinds belong to (`kubectl get storage-migration`).
pub const CATEGORY: &str = "storage-migration";

/// A storage version's hash as discovery publishes it: base64 of the first 8 bytes of
/// sha256("<group>/<version>/<kind>") (recording 03b). Our own discovery and the trigger's
/// reading of CRDs and StorageVersions compute it the same way.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}
