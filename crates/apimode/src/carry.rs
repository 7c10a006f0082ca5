//! What becomes of the migrations in this server's own store when it enters companion mode
//! (the cluster now serves `storagemigration.k8s.io`, and nothing reaches our copy of it):
//!
//! - finished ones (Succeeded or Failed) stay, as a record; the hash history says the same;
//! - unfinished ones of the trigger are deleted: the trigger creates the migration of each
//!   resource's newest history entry on the cluster's API (same name), so nothing owed is lost;
//! - unfinished ones of anyone else (made by hand, or by a tool) are carried over: created on
//!   the cluster's API under the same name, labels, annotations and resource, then deleted
//!   here. Their progress does not carry over (the built-in API has no field for it; the
//!   migration starts from the beginning there, and objects already rewritten cost a no-op).
//!
//! Idempotent: a carried-over migration that already exists on the cluster *for the same
//! resource* is only deleted here. One of that name for another resource is not ours: ours is
//! kept, with a `CarriedOver=False` condition and a Warning Event saying so, for a person to
//! rename one of them (nothing is deleted that was not carried).

use svm_api::migration::{FAILED, MigrationStrategy, SUCCEEDED, StorageVersionMigration};
use svm_api::names::TRIGGER_FIELD_MANAGER as FIELD_MANAGER;
use svm_api::names::{MANAGED_BY, MANAGED_BY_LABEL};
use svm_cluster::BuiltinMigrations;
use svm_registry::rest::Preconditions;
use svm_registry::{ApiError, Fence, Guarded};
use svm_runtime::events::{Event, EventType, Events};

/// The annotation a carried-over migration gets on the cluster.
pub const CARRIED_OVER_ANNOTATION: &str = "storage.svm-apiserver.io/carried-over-from";

/// The condition a migration that could not be carried over gets in our store.
pub const CARRIED_OVER: &str = "CarriedOver";

/// What [`carry_over`] did, by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// Created on the cluster's API (or found there already, for the same resource), and
    /// deleted here.
    pub carried: Vec<String>,
    /// The trigger's own: deleted here, the trigger creates them anew on the cluster.
    pub dropped: Vec<String>,
    /// The cluster has one of the same name for another resource: kept here, marked.
    pub conflicts: Vec<String>,
}

/// Whether the cluster's migration is ours carried over: the same resource (the built-in
/// API's spec holds group and resource only).
fn same_resource(ours: &StorageVersionMigration, theirs: &StorageVersionMigration) -> bool {
    ours.spec.resource.group == theirs.spec.resource.group
        && ours.spec.resource.resource == theirs.spec.resource.resource
}

fn group_resource(m: &StorageVersionMigration) -> String {
    let r = &m.spec.resource;
    if r.group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.group)
    }
}

fn finished(m: &StorageVersionMigration) -> bool {
    m.condition_true(SUCCEEDED).is_some() || m.condition_true(FAILED).is_some()
}

fn the_triggers(m: &StorageVersionMigration) -> bool {
    m.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| v == MANAGED_BY)
}

/// The cluster's copy of one of ours: what a user gave (name, labels, annotations, resource),
/// nothing a server set. Our names under their old spellings are written under the new ones:
/// the copy is a new object, and we write only the new names (the migrator reads both).
fn for_the_cluster(m: &StorageVersionMigration) -> StorageVersionMigration {
    let renamed = svm_api::names::with_new_names(&m.metadata);
    let mut copy = StorageVersionMigration::default();
    copy.metadata.name = m.metadata.name.clone();
    copy.metadata.labels = renamed.labels;
    let mut annotations = renamed.annotations.unwrap_or_default();
    annotations.insert(CARRIED_OVER_ANNOTATION.into(), "svm-apiserver".into());
    copy.metadata.annotations = Some(annotations);
    copy.spec = m.spec.clone();
    copy
}

/// Moves the unfinished migrations of our store as the module says: our store's writes carry
/// the term's fence, and the term is re-checked before each create on the cluster.
pub async fn carry_over(
    ours: &Guarded<MigrationStrategy>,
    cluster: &BuiltinMigrations,
    fence: &Fence,
    events: Option<&Events>,
) -> Result<Carried, ApiError> {
    let (all, _) = ours.list_all().await?;
    let mut done = Carried::default();
    for migration in all.iter().filter(|m| !finished(m)) {
        let name = migration.metadata.name.clone().unwrap_or_default();
        if the_triggers(migration) {
            done.dropped.push(name.clone());
        } else {
            fence.check().await?;
            let carried = match cluster
                .create(&for_the_cluster(migration), FIELD_MANAGER)
                .await
            {
                Ok(_) => true,
                Err(err) if err.code() == Some(409) => {
                    let unreadable = |err: svm_cluster::ClusterError| {
                        ApiError::Internal(format!(
                            "reading the cluster's migration {name} after a conflict: {err}"
                        ))
                    };
                    match cluster.get(&name).await.map_err(unreadable)? {
                        Some(theirs) if !same_resource(migration, &theirs) => false,
                        // The same resource (carried before), or gone since: nothing of ours
                        // is lost by deleting ours.
                        _ => true,
                    }
                }
                Err(err) => {
                    return Err(ApiError::Internal(format!(
                        "carrying migration {name} over to the cluster's API: {err}"
                    )));
                }
            };
            if !carried {
                mark_conflict(ours, migration, events).await?;
                done.conflicts.push(name.clone());
                continue;
            }
            done.carried.push(name.clone());
        }
        match ours.delete(&name, &Preconditions::default()).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(done)
}

/// Ours stays, with `CarriedOver=False` saying why, and a Warning Event for a person.
async fn mark_conflict(
    ours: &Guarded<MigrationStrategy>,
    migration: &StorageVersionMigration,
    events: Option<&Events>,
) -> Result<(), ApiError> {
    let name = migration.metadata.name.clone().unwrap_or_default();
    let message = format!(
        "not carried over to the cluster's API: the cluster has a StorageVersionMigration named \
         {name} for another resource; this one (for {}) stays here until one of them is renamed \
         or deleted",
        group_resource(migration)
    );
    if migration
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == CARRIED_OVER && c.status == "False")
    {
        return Ok(());
    }
    let mut marked = migration.clone();
    marked
        .status
        .set_condition(CARRIED_OVER, false, "NameTakenOnTheCluster", &message, None);
    ours.update_status(marked).await?;
    if let Some(events) = events {
        let event = Event {
            type_: EventType::Warning,
            reason: "MigrationNotCarriedOver".into(),
            note: Some(message),
            action: "Migrate".into(),
            secondary: None,
        };
        events.publish(event, &migration.object_reference()).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clusters_copy_keeps_what_a_user_gave_and_says_where_it_came_from() {
        let mut m = StorageVersionMigration::default();
        m.metadata.name = Some("secrets-rotate".into());
        m.metadata.uid = Some("u".into());
        m.metadata.resource_version = Some("7".into());
        m.metadata.labels = Some([("team".to_string(), "storage".to_string())].into());
        m.spec.resource.resource = "secrets".into();
        m.status.set_condition("Running", true, "Started", "", None);
        let copy = for_the_cluster(&m);
        assert_eq!(copy.metadata.name.as_deref(), Some("secrets-rotate"));
        assert_eq!(copy.metadata.uid, None);
        assert_eq!(copy.metadata.resource_version, None);
        assert_eq!(copy.metadata.labels, m.metadata.labels);
        assert_eq!(
            copy.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CARRIED_OVER_ANNOTATION))
                .map(String::as_str),
            Some("svm-apiserver")
        );
        assert_eq!(copy.spec, m.spec);
        assert!(copy.status.conditions.is_empty());
        assert!(!finished(&m));
        assert!(!the_triggers(&m));
    }

    /// A user's policy under its old spelling lands on the cluster under the new one.
    #[test]
    fn the_clusters_copy_is_in_the_new_names() {
        let mut m = StorageVersionMigration::default();
        m.metadata.name = Some("secrets-rotate".into());
        m.metadata.annotations = Some(
            [
                (
                    "storagemigration.k8s.io/on-object-failure".to_string(),
                    "Skip".to_string(),
                ),
                ("owner".to_string(), "platform".to_string()),
            ]
            .into(),
        );
        let copy = for_the_cluster(&m);
        let annotations = copy.metadata.annotations.clone().unwrap_or_default();
        let keys: Vec<&str> = annotations.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "owner",
                "storage.svm-apiserver.io/carried-over-from",
                "storage.svm-apiserver.io/on-object-failure",
            ]
        );
        assert!(copy.skips_refused_objects());
    }

    /// A cluster whose built-in API already has `rotate-secrets`, for `resource`: every
    /// create answers 409 AlreadyExists, a GET answers that migration.
    async fn cluster_holding(resource: &'static str) -> BuiltinMigrations {
        use axum::Router;
        use axum::routing::{get, post};
        let existing = serde_json::json!({
            "apiVersion": "storagemigration.k8s.io/v1beta1", "kind": "StorageVersionMigration",
            "metadata": {"name": "rotate-secrets", "uid": "theirs", "resourceVersion": "9"},
            "spec": {"resource": {"group": "", "resource": resource}},
        });
        let conflict = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "storageversionmigrations.storagemigration.k8s.io \"rotate-secrets\" already exists",
            "reason": "AlreadyExists", "code": 409,
        });
        let collection = "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations";
        let app = Router::new()
            .route(
                collection,
                post(move || {
                    let conflict = conflict.clone();
                    async move { (http::StatusCode::CONFLICT, axum::Json(conflict)) }
                }),
            )
            .route(
                &format!("{collection}/rotate-secrets"),
                get(move || {
                    let existing = existing.clone();
                    async move { axum::Json(existing) }
                }),
            );
        BuiltinMigrations::new(svm_runtime::testing::played_cluster(app).await, "v1beta1")
    }

    /// A 409 is "carried already" only when the cluster's migration of that name is for the
    /// same resource; one for another resource keeps ours, marked, and deletes nothing.
    #[tokio::test]
    async fn a_name_taken_for_another_resource_keeps_ours_and_says_so() {
        use std::sync::Arc;

        use svm_registry::Store;
        use svm_storage::Storage;
        use svm_storage::embedded::EmbeddedStorage;
        use tokio_util::sync::CancellationToken;

        for (theirs, carried) in [("secrets", true), ("configmaps", false)] {
            let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
            let revision = svm_registry::testing::take_term(&storage, "/p", "a").await;
            let fence = Fence::for_term(
                storage.clone(),
                "/p",
                "a",
                revision,
                CancellationToken::new(),
            );
            let store = Arc::new(Store::new(MigrationStrategy, storage.clone(), "/p"));
            let mut users = StorageVersionMigration::default();
            users.metadata.name = Some("rotate-secrets".into());
            users.spec.resource.resource = "secrets".into();
            store.create(users).await.expect("ours");
            let ours = Guarded::new(store.clone(), fence.clone());

            let done = carry_over(&ours, &cluster_holding(theirs).await, &fence, None)
                .await
                .expect("carry-over");
            let left = store.get("rotate-secrets").await.expect("get");
            if carried {
                assert_eq!(done.carried, ["rotate-secrets"], "{theirs}");
                assert!(done.conflicts.is_empty());
                assert!(left.is_none(), "carried: ours is deleted");
            } else {
                assert_eq!(done.conflicts, ["rotate-secrets"], "{theirs}");
                assert!(done.carried.is_empty());
                let kept = left.expect("not carried: ours is kept");
                let condition = kept
                    .status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == CARRIED_OVER)
                    .expect("the CarriedOver condition");
                assert_eq!(condition.status, "False");
                assert_eq!(condition.reason, "NameTakenOnTheCluster");
                assert!(
                    condition.message.contains("for secrets"),
                    "{}",
                    condition.message
                );
                // Again: nothing changes, the condition is not written twice.
                let again = carry_over(&ours, &cluster_holding(theirs).await, &fence, None)
                    .await
                    .expect("carry-over");
                assert_eq!(again.conflicts, ["rotate-secrets"]);
                let after = store
                    .get("rotate-secrets")
                    .await
                    .expect("get")
                    .expect("kept");
                assert_eq!(
                    after.metadata.resource_version,
                    kept.metadata.resource_version
                );
            }
        }
    }
}
