//! The `storagemigration.k8s.io` types: one internal (hub) form per kind, the served versions
//! with lossless conversion, defaulting, validation, OpenAPI schemas, and the strategies the
//! generic store runs them with.

pub mod common;
pub mod install;
pub mod migration;
pub mod storagestate;

pub use install::{Installed, install};

/// The API group served.
pub const GROUP: &str = "storagemigration.k8s.io";

/// Served versions, preferred first (kube-apiserver orders GA before beta before alpha).
pub const VERSIONS: &[&str] = &["v1", "v1beta1", "v1alpha1"];

/// Storage hashes and internal forms are those of this version.
pub const STORAGE_VERSION: &str = "v1";

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
