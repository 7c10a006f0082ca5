//! Builds the served registry: one generic store per kind and group over the shared storage.

use std::sync::Arc;

use super::PROJECT;
use super::dataplane::DataPlaneRolloutStrategy;
use super::migration::MigrationStrategy;
use super::storagestate::StorageStateStrategy;
use super::volumes::VolumeClaimMigrationStrategy;
use svm_registry::{Registry, Store};
use svm_storage::Storage;

/// What `install` built: the registry the HTTP layer serves, and the typed stores the
/// controllers use (the same stores, so validation and watch events stay one code path).
pub struct Installed {
    /// Every served kind in every group, for the HTTP layer.
    pub registry: Registry,
    /// `storagemigration.k8s.io` StorageVersionMigrations, for the trigger and the migrator.
    pub migrations: Arc<Store<MigrationStrategy>>,
    /// StorageStates as `storagemigration.k8s.io` serves them (the same objects as the project
    /// group's), for the trigger.
    pub states: Arc<Store<StorageStateStrategy>>,
    /// `storage.svm-apiserver.io` VolumeClaimMigrations (namespaced), when served.
    pub volume_migrations: Option<Arc<Store<VolumeClaimMigrationStrategy>>>,
    /// `storage.svm-apiserver.io` DataPlaneRollouts (namespaced), when served.
    pub data_plane_rollouts: Option<Arc<Store<DataPlaneRolloutStrategy>>>,
}

/// Which optional kinds to serve.
#[derive(Clone, Copy, Debug, Default)]
pub struct Kinds {
    /// VolumeClaimMigration (alpha): served, and its controller run, only when asked for
    /// (`--enable-volume-claim-migrations`).
    pub volume_claim_migrations: bool,
    /// DataPlaneRollout (alpha): served, and its controller run, only when asked for
    /// (`--enable-data-plane-rollouts`).
    pub data_plane_rollouts: bool,
}

/// Objects live under `<prefix>/storageversionmigrations/` and `<prefix>/storagestates/`.
/// StorageStates are served twice over the same keys: in `storagemigration.k8s.io` and in
/// the project group `storage.svm-apiserver.io` — one set of objects, two names.
/// VolumeClaimMigrations (namespaced) live under `<prefix>/volumeclaimmigrations/<namespace>/`,
/// DataPlaneRollouts under `<prefix>/dataplanerollouts/<namespace>/`.
pub fn install(storage: Arc<dyn Storage>, prefix: &str, kinds: Kinds) -> Installed {
    let migrations = Arc::new(Store::new(MigrationStrategy, storage.clone(), prefix));
    let states = Arc::new(Store::new(
        StorageStateStrategy::default(),
        storage.clone(),
        prefix,
    ));
    let project_states = Arc::new(Store::new(
        StorageStateStrategy::served_in(PROJECT),
        storage.clone(),
        prefix,
    ));
    let mut registry = Registry::new();
    registry.register(migrations.clone());
    registry.register(states.clone());
    registry.register(project_states);
    let volume_migrations = kinds.volume_claim_migrations.then(|| {
        let store = Arc::new(Store::new(
            VolumeClaimMigrationStrategy,
            storage.clone(),
            prefix,
        ));
        registry.register(store.clone());
        store
    });
    let data_plane_rollouts = kinds.data_plane_rollouts.then(|| {
        let store = Arc::new(Store::new(DataPlaneRolloutStrategy, storage, prefix));
        registry.register(store.clone());
        store
    });
    Installed {
        registry,
        migrations,
        states,
        volume_migrations,
        data_plane_rollouts,
    }
}
