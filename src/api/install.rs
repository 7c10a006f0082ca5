//! Builds the served registry: one generic store per kind over the shared storage.

use std::sync::Arc;

use super::migration::MigrationStrategy;
use super::storagestate::StorageStateStrategy;
use super::volumes::VolumeClaimMigrationStrategy;
use crate::registry::{Registry, Store};
use crate::storage::Storage;

/// What `install` built: the registry the HTTP layer serves, and the typed stores the
/// controllers use (the same stores, so validation and watch events stay one code path).
pub struct Installed {
    pub registry: Registry,
    pub migrations: Arc<Store<MigrationStrategy>>,
    pub states: Arc<Store<StorageStateStrategy>>,
    /// `storage.svm-apiserver.io` VolumeClaimMigrations (namespaced).
    pub volume_migrations: Arc<Store<VolumeClaimMigrationStrategy>>,
}

/// Objects live under `<prefix>/storageversionmigrations/`, `<prefix>/storagestates/` and
/// `<prefix>/volumeclaimmigrations/<namespace>/`.
pub fn install(storage: Arc<dyn Storage>, prefix: &str) -> Installed {
    let migrations = Arc::new(Store::new(MigrationStrategy, storage.clone(), prefix));
    let states = Arc::new(Store::new(StorageStateStrategy, storage.clone(), prefix));
    let volume_migrations = Arc::new(Store::new(VolumeClaimMigrationStrategy, storage, prefix));
    let mut registry = Registry::new();
    registry.register(migrations.clone());
    registry.register(states.clone());
    registry.register(volume_migrations.clone());
    Installed {
        registry,
        migrations,
        states,
        volume_migrations,
    }
}
