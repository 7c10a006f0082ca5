//! The labels, annotations and field managers this server puts on objects: one owner for
//! every name a user may select on, and that every controller reads.
//!
//! The names we invent live in our own domain, [`DOMAIN`]. They used to live in
//! `storagemigration.k8s.io/`, which is the API group's name and, like every `*.k8s.io`
//! prefix, reserved for Kubernetes itself: a later Kubernetes release could give one of them a
//! meaning of its own. [`RENAMED`] lists each old spelling with its new one. For one release
//! the old spellings are still read (an object written by an older svm-apiserver, or by a
//! user's script, behaves as before: [`annotation`], [`label`]), a client that writes one gets
//! a warning ([`old_name_warnings`]), and the trigger still sets the old rotation label next
//! to the new one ([`LEGACY_ENCRYPTION_ROTATION_LABEL`]). svm-apiserver
//! [`OLD_NAMES_DROPPED_IN`] reads and writes the new names only.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The domain (label and annotation prefix) of the names this server invents.
pub const DOMAIN: &str = "storage.svm-apiserver.io";

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

/// What an object the cluster refuses for good does to its migration: `Fail` (the default: the
/// migration ends Failed, naming the objects) or `Skip` (it ends Succeeded with
/// `ObjectsSkipped` True). On a StorageState, the trigger copies it onto the migrations it
/// creates for that resource. An annotation, because every served version's spec is
/// upstream's and has no field for it. Users set it.
pub const ON_OBJECT_FAILURE_ANNOTATION: &str = "storage.svm-apiserver.io/on-object-failure";
/// [`ON_OBJECT_FAILURE_ANNOTATION`]'s values.
pub const ON_OBJECT_FAILURE_VALUES: [&str; 2] = ["Fail", "Skip"];

/// On a trigger migration: the history entry (sequence number) it belongs to. The trigger
/// finds its own migrations of a resource by it.
pub const HISTORY_SEQ_ANNOTATION: &str = "storage.svm-apiserver.io/history-seq";
/// On a trigger migration: the storage-version hash it migrates to.
pub const STORAGE_VERSION_HASH_ANNOTATION: &str = "storage.svm-apiserver.io/storage-version-hash";
/// On a trigger migration: why the trigger created it (its history entry's reason).
pub const TRIGGER_REASON_ANNOTATION: &str = "storage.svm-apiserver.io/trigger-reason";
/// On a migration started by an encryption key rotation: `true` (users select them with
/// `kubectl get svm -l`).
pub const ENCRYPTION_ROTATION_LABEL: &str = "storage.svm-apiserver.io/encryption-rotation";
/// On such a migration: the generation it re-encrypts under (JSON, as in the history).
pub const ENCRYPTION_GENERATION_ANNOTATION: &str = "storage.svm-apiserver.io/encryption-generation";

/// On every object `import-ksvm` created: KSVM's uid of the object it came from.
pub const IMPORTED_UID_ANNOTATION: &str = "storage.svm-apiserver.io/imported-from-ksvm-uid";
/// On a migration imported as history (finished in KSVM): the migrator never runs it.
pub const IMPORTED_HISTORY_ANNOTATION: &str = "storage.svm-apiserver.io/imported-history";

/// Conversion: v1alpha1's `spec.resource.version` on a migration read in v1beta1 or v1.
pub const CONVERSION_RESOURCE_VERSION_ANNOTATION: &str =
    "storage.svm-apiserver.io/v1alpha1-resource-version";
/// Conversion: v1alpha1's `spec.continueToken` on a migration read in v1beta1 or v1.
pub const CONVERSION_CONTINUE_TOKEN_ANNOTATION: &str =
    "storage.svm-apiserver.io/v1alpha1-continue-token";
/// Conversion: the conditions' `observedGeneration`s on a migration read in v1alpha1 (a JSON
/// object from condition type to generation).
pub const CONVERSION_OBSERVED_GENERATIONS_ANNOTATION: &str =
    "storage.svm-apiserver.io/v1-condition-observed-generations";

/// On each Node a DataPlaneRollout holds: `namespace/name` of the rollout (written with the
/// Node's resourceVersion as precondition, so two rollouts never take the same node).
pub const DATA_PLANE_ROLLOUT_CLAIM_ANNOTATION: &str = "storage.svm-apiserver.io/data-plane-rollout";

/// The release that no longer reads the old spellings of [`RENAMED`] (nor sets the old
/// rotation label): the one after the release that renamed them.
pub const OLD_NAMES_DROPPED_IN: &str = "0.3.0";

/// The old rotation label, still set by the trigger next to [`ENCRYPTION_ROTATION_LABEL`]
/// until [`OLD_NAMES_DROPPED_IN`]: users select rotation migrations with `-l` on it, and a
/// selector in a script or an alert has no fallback of its own — reading the old name
/// ourselves would not keep it working, writing it does (as kubelet kept setting
/// `beta.kubernetes.io/os` next to `kubernetes.io/os` while the old one was deprecated).
pub const LEGACY_ENCRYPTION_ROTATION_LABEL: &str = "storagemigration.k8s.io/encryption-rotation";

/// Whether a renamed name is a label or an annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `metadata.labels`.
    Label,
    /// `metadata.annotations`.
    Annotation,
}

impl Place {
    /// The field path of `name` in this place, as kube-apiserver names it in warnings.
    fn field(self, name: &str) -> String {
        match self {
            Place::Label => format!("metadata.labels[{name}]"),
            Place::Annotation => format!("metadata.annotations[{name}]"),
        }
    }

    fn map(self, meta: &ObjectMeta) -> Option<&BTreeMap<String, String>> {
        match self {
            Place::Label => meta.labels.as_ref(),
            Place::Annotation => meta.annotations.as_ref(),
        }
    }
}

/// One of our names moved out of `storagemigration.k8s.io/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// The old spelling, read until [`OLD_NAMES_DROPPED_IN`].
    pub old: &'static str,
    /// The name written now.
    pub new: &'static str,
    /// A label or an annotation.
    pub place: Place,
}

const fn renamed(old: &'static str, new: &'static str, place: Place) -> Renamed {
    Renamed { old, new, place }
}

/// Every renamed name (none of them is upstream's: neither KEP-4192 nor kube-controller-
/// manager's storage version migrator reads or writes a label or annotation). The conversion
/// annotations are not here: the server strips them on decoding ([`CONVERSION_RENAMED`]), so
/// no strategy ever sees them.
pub const RENAMED: [Renamed; 8] = [
    renamed(
        "storagemigration.k8s.io/on-object-failure",
        ON_OBJECT_FAILURE_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        "storagemigration.k8s.io/history-seq",
        HISTORY_SEQ_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        "storagemigration.k8s.io/storage-version-hash",
        STORAGE_VERSION_HASH_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        "storagemigration.k8s.io/trigger-reason",
        TRIGGER_REASON_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        LEGACY_ENCRYPTION_ROTATION_LABEL,
        ENCRYPTION_ROTATION_LABEL,
        Place::Label,
    ),
    renamed(
        "storagemigration.k8s.io/encryption-generation",
        ENCRYPTION_GENERATION_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        "storagemigration.k8s.io/imported-from-ksvm-uid",
        IMPORTED_UID_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        "storagemigration.k8s.io/imported-history",
        IMPORTED_HISTORY_ANNOTATION,
        Place::Annotation,
    ),
];

/// The conversion annotations' old spellings, read on decoding until
/// [`OLD_NAMES_DROPPED_IN`]: a client that read a migration from an older server and writes it
/// back must not lose what they carry.
pub const CONVERSION_RENAMED: [Renamed; 3] = [
    renamed(
        "storagemigration.k8s.io/v1alpha1-resource-version",
        CONVERSION_RESOURCE_VERSION_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        "storagemigration.k8s.io/v1alpha1-continue-token",
        CONVERSION_CONTINUE_TOKEN_ANNOTATION,
        Place::Annotation,
    ),
    renamed(
        "storagemigration.k8s.io/v1-condition-observed-generations",
        CONVERSION_OBSERVED_GENERATIONS_ANNOTATION,
        Place::Annotation,
    ),
];

/// The old spelling of `new` in `place`, if it was renamed.
pub fn old_spelling(new: &str, place: Place) -> Option<&'static str> {
    RENAMED
        .iter()
        .find(|r| r.new == new && r.place == place)
        .map(|r| r.old)
}

/// The value of `name` in `place`: under its name, else (while the old spellings are read)
/// under its old spelling. The new name wins when an object carries both.
fn read<'a>(meta: &'a ObjectMeta, name: &str, place: Place) -> Option<&'a str> {
    let map = place.map(meta)?;
    map.get(name)
        .or_else(|| old_spelling(name, place).and_then(|old| map.get(old)))
        .map(String::as_str)
}

/// The value of annotation `name` (one of ours), read as [`read`] does.
pub fn annotation<'a>(meta: &'a ObjectMeta, name: &str) -> Option<&'a str> {
    read(meta, name, Place::Annotation)
}

/// The value of label `name` (one of ours), read as [`read`] does.
pub fn label<'a>(meta: &'a ObjectMeta, name: &str) -> Option<&'a str> {
    read(meta, name, Place::Label)
}

/// Each name of [`RENAMED`] that `meta` carries under its old spelling, with the value there.
pub fn old_names(meta: &ObjectMeta) -> impl Iterator<Item = (&'static Renamed, &str)> {
    RENAMED.iter().filter_map(move |r| {
        r.place
            .map(meta)
            .and_then(|m| m.get(r.old))
            .map(|v| (r, v.as_str()))
    })
}

/// The warning for one old spelling a client wrote, in kube-apiserver's form for a deprecated
/// name (`<field path>: <what>; use "<new>" instead`).
pub fn old_name_warning(renamed: &Renamed) -> String {
    format!(
        "{}: deprecated, and no longer read from svm-apiserver {OLD_NAMES_DROPPED_IN}; use \"{}\" instead",
        renamed.place.field(renamed.old),
        renamed.new
    )
}

/// The warnings a write of `new` earns for old spellings (upstream's `WarningsOnCreate` /
/// `WarningsOnUpdate`): one per old name it carries that `old` (the stored object, for an
/// update) does not carry with the same value. Only what the write brings is warned about: an
/// object an older trigger made, or one carrying the rotation label the trigger still sets,
/// must not earn a warning for every `kubectl annotate` a user sends it (as a Deployment's
/// update warns about its pod template only when the template changes).
pub fn old_name_warnings(new: &ObjectMeta, old: Option<&ObjectMeta>) -> Vec<String> {
    old_names(new)
        .filter(|(r, value)| {
            old.and_then(|o| r.place.map(o))
                .and_then(|m| m.get(r.old))
                .is_none_or(|was| was != value)
        })
        .map(|(r, _)| old_name_warning(r))
        .collect()
}

/// `meta` with every old spelling of [`RENAMED`] moved to its new name (the new name's value
/// kept where both are set): what we write when we copy a user's object (a carried-over
/// migration), so the copy is in the new names.
pub fn with_new_names(meta: &ObjectMeta) -> ObjectMeta {
    let mut meta = meta.clone();
    for r in &RENAMED {
        let map = match r.place {
            Place::Label => meta.labels.as_mut(),
            Place::Annotation => meta.annotations.as_mut(),
        };
        if let Some(map) = map
            && let Some(value) = map.remove(r.old)
        {
            map.entry(r.new.to_string()).or_insert(value);
        }
    }
    meta
}

/// Whether the migration of `meta` was imported from KSVM as history (finished there): the
/// migrator leaves it. (Of the metadata, so that the kinds' modules may use this one and it
/// none of them.)
pub fn is_imported_history(meta: &ObjectMeta) -> bool {
    annotation(meta, IMPORTED_HISTORY_ANNOTATION) == Some("true")
}

#[cfg(test)]
mod tests;
