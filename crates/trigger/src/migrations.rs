//! Where the trigger's migrations live: this server's own store (owner mode, through the
//! registry), or the cluster's built-in StorageVersionMigration API (companion mode, where
//! kube-controller-manager — or our migrator standing in for it — runs them). The trigger
//! plans the same way for both: it reads its migrations (labelled
//! `app.kubernetes.io/managed-by=svm-apiserver-trigger`) in the internal form, creates the one
//! for the newest history entry, deletes stale ones, and is woken by any change to them.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use svm_api::GROUP;
use svm_api::migration::{MigrationStrategy, StorageVersionMigration};
use svm_api::names::TRIGGER_FIELD_MANAGER as FIELD_MANAGER;
use svm_api::names::{MANAGED_BY, MANAGED_BY_LABEL};
use svm_cluster::{BuiltinMigrations, ClusterError};
use svm_registry::rest::Preconditions;
use svm_registry::{ApiError, Fence, Guarded};

const PLURAL: &str = "storageversionmigrations";

/// The trigger's migrations, wherever they are.
#[derive(Clone)]
pub enum Migrations {
    /// This server's store (owner mode), written under the leadership term's fence.
    Ours(Guarded<MigrationStrategy>),
    /// The cluster's built-in API (companion mode). Our fence cannot ride a write to the
    /// cluster: each create or delete re-checks the term first.
    Cluster {
        /// The cluster's `storagemigration.k8s.io` API.
        builtin: BuiltinMigrations,
        /// The leadership term's fence, checked before each create or delete.
        fence: Fence,
    },
}

fn selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// A cluster error as the registry's: AlreadyExists and NotFound keep their meaning (the
/// trigger treats both as done), as does a Conflict (a failed precondition); the rest is an
/// error to retry on.
fn api_error(err: ClusterError, name: &str) -> ApiError {
    let group = GROUP.to_string();
    let resource = PLURAL.to_string();
    match &err {
        ClusterError::Api {
            code: 409, reason, ..
        } if reason == "AlreadyExists" => ApiError::AlreadyExists {
            group,
            resource,
            name: name.to_string(),
        },
        ClusterError::Api { code: 404, .. } => ApiError::NotFound {
            group,
            resource,
            name: name.to_string(),
        },
        ClusterError::Api {
            code: 409, message, ..
        } => ApiError::Conflict {
            group,
            resource,
            name: name.to_string(),
            message: message.clone(),
        },
        _ => ApiError::Internal(format!("the cluster's {GROUP} API: {err}")),
    }
}

impl Migrations {
    /// Writes to our store recorded in managedFields for `manager`.
    pub fn managed_by(self, manager: &'static str) -> Self {
        match self {
            Migrations::Ours(store) => Migrations::Ours(store.managed_by(manager)),
            cluster => cluster,
        }
    }

    /// Every migration the trigger may own (the cluster's: only those with its label).
    pub async fn list_all(&self) -> Result<Vec<StorageVersionMigration>, ApiError> {
        match self {
            Migrations::Ours(store) => Ok(store.list_all().await?.0),
            Migrations::Cluster { builtin, .. } => builtin
                .list(Some(&selector()))
                .await
                .map_err(|e| api_error(e, "")),
        }
    }

    /// Creates `migration` as the trigger's field manager.
    pub async fn create(
        &self,
        migration: StorageVersionMigration,
    ) -> Result<StorageVersionMigration, ApiError> {
        match self {
            Migrations::Ours(store) => store.create(migration).await,
            Migrations::Cluster { builtin, fence } => {
                fence.check().await?;
                let name = migration.metadata.name.clone().unwrap_or_default();
                builtin
                    .create(&migration, FIELD_MANAGER)
                    .await
                    .map_err(|e| api_error(e, &name))
            }
        }
    }

    /// Deletes `name`: NotFound when it is already gone. `preconditions` hold in our store only;
    /// the cluster's API is asked without them.
    pub async fn delete(&self, name: &str, preconditions: &Preconditions) -> Result<(), ApiError> {
        match self {
            Migrations::Ours(store) => store.delete(name, preconditions).await.map(|_| ()),
            Migrations::Cluster { builtin, fence } => match fence.check().await {
                Err(err) => Err(err),
                Ok(()) => match builtin.delete(name, preconditions.uid.as_deref()).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(api_error(
                        ClusterError::from_status(404, b"", None, "NotFound"),
                        name,
                    )),
                    Err(err) => Err(api_error(err, name)),
                },
            },
        }
    }

    /// Sends a wake-up on every change of the migrations (and after every relist), until
    /// `wake` is closed.
    pub fn wake_on_changes(&self, wake: mpsc::Sender<()>) -> JoinHandle<()> {
        match self {
            Migrations::Ours(store) => store.list_and_watch(RESYNC, wake, |_| ()),
            Migrations::Cluster { builtin, .. } => builtin.watch(Some(&selector()), wake, |_| ()),
        }
    }
}

/// A wake-up at least this often even when no event came: a safety net under the watch.
const RESYNC: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_answers_keep_their_meaning_for_the_trigger() {
        let exists = ClusterError::from_status(
            409,
            br#"{"kind":"Status","reason":"AlreadyExists","message":"exists"}"#,
            None,
            "Conflict",
        );
        assert!(matches!(
            api_error(exists, "x-1"),
            ApiError::AlreadyExists { name, .. } if name == "x-1"
        ));
        let conflict = ClusterError::from_status(
            409,
            br#"{"kind":"Status","reason":"Conflict","message":"changed"}"#,
            None,
            "Conflict",
        );
        assert!(matches!(
            api_error(conflict, "x-1"),
            ApiError::Conflict { message, .. } if message == "changed"
        ));
        let gone = ClusterError::from_status(404, b"", None, "NotFound");
        assert!(matches!(api_error(gone, "x-1"), ApiError::NotFound { .. }));
    }

    /// A stale migration is deleted with its listed uid as the precondition: the cluster's
    /// API (played: kube-apiserver's 409 "Precondition failed: UID in precondition") refuses
    /// it once a migration of that name was made again, and that one stays.
    #[tokio::test]
    async fn a_stale_migration_is_deleted_only_while_it_is_the_one_listed() {
        use std::sync::{Arc, Mutex};

        use axum::Router;
        use svm_storage::Storage;
        use svm_storage::embedded::EmbeddedStorage;
        use tokio_util::sync::CancellationToken;

        let deleted: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = deleted.clone();
        let app = Router::new().route(
            "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations/x-1",
            axum::routing::delete(move |body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let options: serde_json::Value =
                        serde_json::from_slice(&body).unwrap_or_default();
                    let uid = options["preconditions"]["uid"].as_str().unwrap_or("");
                    if uid != "remade" {
                        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "reason": "Conflict", "code": 409,
                            "message": format!("Operation cannot be fulfilled on storageversionmigrations.storagemigration.k8s.io \"x-1\": Precondition failed: UID in precondition: {uid}, UID in object meta: remade")});
                        return (http::StatusCode::CONFLICT, axum::Json(status));
                    }
                    seen.lock().unwrap().push(uid.to_string());
                    (http::StatusCode::OK, axum::Json(serde_json::json!({})))
                }
            }),
        );
        let client = svm_runtime::testing::played_cluster(app).await;
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let revision = svm_registry::testing::take_term(&storage, "/p", "a").await;
        let fence = Fence::for_term(storage, "/p", "a", revision, CancellationToken::new());
        let migrations = Migrations::Cluster {
            builtin: BuiltinMigrations::new(client, "v1beta1"),
            fence,
        };
        let with_uid = |uid: &str| Preconditions {
            uid: Some(uid.into()),
            ..Default::default()
        };
        let refused = migrations.delete("x-1", &with_uid("listed")).await;
        assert!(
            matches!(&refused, Err(ApiError::Conflict { message, .. }) if message.contains("UID in precondition")),
            "{refused:?}"
        );
        assert!(deleted.lock().unwrap().is_empty());
        migrations
            .delete("x-1", &with_uid("remade"))
            .await
            .expect("deleted while it is the one named");
        assert_eq!(*deleted.lock().unwrap(), ["remade"]);
    }
}
