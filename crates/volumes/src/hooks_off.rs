//! The test hooks as the product has them: none. `hooks.rs` (the crash test's stopping points)
//! is compiled only with the `test-hooks` feature, which only test builds turn on; every other
//! build gets this module in its place, the same calls doing nothing. So the controller reads
//! the same in both builds, and the product reads no test variable and carries no hook.

use svm_api::volumes::VolumeClaimMigration;
use svm_cluster::ClusterClient;
use tokio_util::sync::CancellationToken;

use crate::key::Key;

/// A write of the re-create after which a test build's hook may halt its migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The status write that saved the StatefulSet's manifest.
    Save,
    /// The StatefulSet's deletion.
    Delete,
    /// Its creation from the saved manifest.
    Create,
}

/// No hooks. (Braced rather than a unit struct so that `Hooks::default()`, what the unit
/// tests pass for "no hooks", is written the same in both builds.)
#[derive(Debug, Default)]
pub(crate) struct Hooks {}

impl Hooks {
    /// None: this build has no hooks and reads nothing.
    pub(crate) fn from_env() -> Hooks {
        Hooks {}
    }

    /// Never: nothing halts a migration.
    pub(crate) fn is_halted(&self, _key: &Key) -> bool {
        false
    }

    /// Never: nothing halts a migration.
    pub(crate) fn halted_after(&mut self, _key: &Key, _step: Step) -> bool {
        false
    }

    /// Returns at once: the deletion is never held.
    pub(crate) async fn wait_for_edit_before_delete(
        &mut self,
        _key: &Key,
        _cluster: &ClusterClient,
        _vcm: &VolumeClaimMigration,
        _saved: &str,
        _term: &CancellationToken,
    ) {
    }
}
