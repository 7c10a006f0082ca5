//! The labels, annotations and field managers this server puts on objects: one owner for
//! every name a user may select on, and that every controller reads.

use crate::migration::StorageVersionMigration;

/// The label on every migration the trigger creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value: the trigger.
pub const MANAGED_BY: &str = "svm-apiserver-trigger";
/// The trigger's name in `metadata.managedFields` (it owns what it creates and the status it
/// writes, and takes nothing else from anyone).
pub const TRIGGER_FIELD_MANAGER: &str = "svm-apiserver-trigger";
/// The migrator's name in `metadata.managedFields`: it owns the status fields it writes
/// (conditions, progress) and takes nothing a user applied.
pub const MIGRATOR_FIELD_MANAGER: &str = "svm-apiserver-migrator";

/// On every object `import-ksvm` created: KSVM's uid of the object it came from.
pub const IMPORTED_UID_ANNOTATION: &str = "storagemigration.k8s.io/imported-from-ksvm-uid";
/// On a migration imported as history (finished in KSVM): the migrator never runs it.
pub const IMPORTED_HISTORY_ANNOTATION: &str = "storagemigration.k8s.io/imported-history";

/// Whether `m` was imported from KSVM as history (finished there): the migrator leaves it.
pub fn is_imported_history(m: &StorageVersionMigration) -> bool {
    m.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(IMPORTED_HISTORY_ANNOTATION))
        .is_some_and(|v| v == "true")
}
