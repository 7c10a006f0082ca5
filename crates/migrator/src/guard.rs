//! Two migrators must never work on one migration: each would PATCH every object (twice the
//! load) and write the other's conditions over (a Succeeded from one while the other still
//! runs, checkpoints moving backwards). The other migrator is seen by what it writes:
//!
//! - on the cluster's built-in objects (companion mode, our migrator standing in for
//!   kube-controller-manager's): `metadata.managedFields` names every manager that wrote
//!   `/status` — kube-controller-manager writes as `kube-controller-manager` (its client's
//!   User-Agent; it sets no fieldManager);
//! - on our own objects (owner mode, where kube-controller-manager reaches our objects through
//!   our APIService after the cluster was upgraded under it): managedFields where the registry
//!   keeps them, and in any case a status that changed since this migrator last wrote it.
//!
//! Either way our migrator stops working on that migration, says so, and leaves it to the
//! other one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use svm_api::migration::MigrationStatus;

/// Managers that are this server: `svm-apiserver` (the store's default),
/// `svm-apiserver-migrator` (the migrator's status writes, here and on the cluster's built-in
/// objects), `svm-apiserver-trigger` (the trigger's creates).
pub(crate) const OUR_MANAGER_PREFIX: &str = "svm-apiserver";

/// A status write by someone else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ForeignWrite {
    /// The manager, as managedFields name it; `None` when only the status itself shows the
    /// write (no managedFields entry says who).
    pub manager: Option<String>,
    /// When, if managedFields say.
    pub time: Option<String>,
}

impl std::fmt::Display for ForeignWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.manager, &self.time) {
            (Some(manager), Some(time)) => write!(f, "{manager:?} wrote its status at {time}"),
            (Some(manager), None) => write!(f, "{manager:?} wrote its status"),
            (None, _) => write!(f, "another writer changed its status"),
        }
    }
}

fn is_ours(manager: &str) -> bool {
    manager.starts_with(OUR_MANAGER_PREFIX)
}

/// The latest `/status` write that managedFields record for a manager that is not this
/// server, if any.
pub(crate) fn foreign_status_write(meta: &ObjectMeta) -> Option<ForeignWrite> {
    meta.managed_fields
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|entry| entry.subresource.as_deref() == Some("status"))
        .filter(|entry| !entry.manager.as_deref().is_none_or(is_ours))
        .max_by_key(|entry| entry.time.as_ref().map(|t| t.0))
        .map(|entry| ForeignWrite {
            manager: entry.manager.clone(),
            time: entry.time.as_ref().map(|t| t.0.to_string()),
        })
}

/// What one run of our migrator knows of the status it wrote, to notice any other writer.
#[derive(Clone, Debug, Default)]
pub(crate) struct StatusGuard {
    /// The status as our last write stored it (`None` before this run's first write).
    last_written: Option<MigrationStatus>,
}

impl StatusGuard {
    /// Someone else wrote this migration's status: by managedFields, or because the status
    /// is no longer what this run last wrote.
    pub(crate) fn check(
        &self,
        meta: &ObjectMeta,
        status: &MigrationStatus,
    ) -> Option<ForeignWrite> {
        if let Some(foreign) = foreign_status_write(meta) {
            return Some(foreign);
        }
        match &self.last_written {
            Some(ours) if ours != status => Some(ForeignWrite {
                manager: None,
                time: None,
            }),
            _ => None,
        }
    }

    /// Our write stored `status`.
    pub(crate) fn wrote(&mut self, status: &MigrationStatus) {
        self.last_written = Some(status.clone());
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn entry(manager: &str, subresource: Option<&str>, second: i64) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: subresource.map(str::to_string),
            time: Some(Time(Timestamp::from_second(second).expect("time"))),
            ..Default::default()
        }
    }

    fn meta(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(entries),
            ..Default::default()
        }
    }

    #[test]
    fn only_status_writes_by_others_count() {
        assert_eq!(foreign_status_write(&ObjectMeta::default()), None);
        let ours = meta(vec![
            entry("svm-apiserver-trigger", None, 1),
            entry("svm-apiserver-migrator", Some("status"), 2),
            // A user labelling the object is not a migrator.
            entry("kubectl-label", None, 3),
        ]);
        assert_eq!(foreign_status_write(&ours), None);
        let raced = meta(vec![
            entry("svm-apiserver-migrator", Some("status"), 2),
            entry("kube-controller-manager", Some("status"), 5),
            entry("someone", Some("status"), 4),
        ]);
        let foreign = foreign_status_write(&raced).expect("foreign");
        assert_eq!(foreign.manager.as_deref(), Some("kube-controller-manager"));
        assert!(foreign.to_string().contains("kube-controller-manager"));
    }

    #[test]
    fn a_status_that_is_not_what_we_wrote_is_someone_elses() {
        let mut guard = StatusGuard::default();
        // Before our first write there is nothing to compare with.
        let status = MigrationStatus {
            resource_version: "7".into(),
            ..Default::default()
        };
        assert_eq!(guard.check(&ObjectMeta::default(), &status), None);
        guard.wrote(&status);
        assert_eq!(guard.check(&ObjectMeta::default(), &status), None);
        let mut changed = status.clone();
        changed.resource_version = "9".into();
        let foreign = guard
            .check(&ObjectMeta::default(), &changed)
            .expect("noticed");
        assert_eq!(foreign.manager, None);
        assert_eq!(foreign.to_string(), "another writer changed its status");
    }
}
