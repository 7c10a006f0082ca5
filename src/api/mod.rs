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
