//! How the controller names a migration: its namespace and name. A module of its own because
//! both the controller's loop (the crate root) and the test hooks ([`crate::hooks`]) key by it,
//! and the hooks must not import from the root that declares them.

use svm_api::volumes::VolumeClaimMigration;

/// A migration's namespace and name.
pub(crate) type Key = (String, String);

/// `vcm`'s key.
pub(crate) fn key_of(vcm: &VolumeClaimMigration) -> Key {
    (
        vcm.metadata.namespace.clone().unwrap_or_default(),
        vcm.metadata.name.clone().unwrap_or_default(),
    )
}
