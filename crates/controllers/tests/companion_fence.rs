//! Companion mode's writes to the cluster's built-in API, across the controllers: once a
//! term is over, neither the trigger, the migrator nor the carry-over sends anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use svm_api::migration::{MigrationStrategy, StorageVersionMigration};
use svm_apimode::carry::carry_over;
use svm_cluster::BuiltinMigrations;
use svm_migrator::Source;
use svm_registry::rest::Preconditions;
use svm_registry::{ApiError, Fence, Guarded, Store};
use svm_storage::Storage;
use svm_storage::embedded::EmbeddedStorage;
use svm_trigger::Migrations;

/// A loopback listener that counts the connections made to it and closes each at once:
/// how many requests a client tried to send the "cluster".
async fn counting_cluster() -> (svm_cluster::ClusterClient, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    let url: http::Uri = format!("http://127.0.0.1:{port}").parse().expect("url");
    let client = svm_cluster::ClusterClient::from_config(kube::Config::new(url)).expect("client");
    (client, seen)
}

/// Companion mode writes to the cluster's built-in API, where our fence's compare cannot
/// ride: the trigger's creates and deletes, the migrator's status writes and the
/// carry-over each re-read the term first. Once another replica holds the term, none of
/// them sends anything, each answers Fenced, and the term's token is cancelled.
#[tokio::test]
async fn no_write_reaches_the_clusters_api_once_the_term_is_over() {
    let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
    let take_term = |holder: &'static str| svm_registry::testing::take_term(&storage, "/p", holder);
    let (client, seen) = counting_cluster().await;
    let builtin = BuiltinMigrations::new(client, "v1");
    let store = Arc::new(Store::new(MigrationStrategy, storage.clone(), "/p"));
    let mut users = StorageVersionMigration::default();
    users.metadata.name = Some("rotate-secrets".into());
    users.spec.resource.resource = "secrets".into();

    // While the term lasts, a write does go out (the listener sees it): the count below
    // can tell.
    let revision = take_term("a").await;
    let token = CancellationToken::new();
    let fence = Fence::for_term(storage.clone(), "/p", "a", revision, token.clone());
    let trigger = Migrations::Cluster {
        builtin: builtin.clone(),
        fence: fence.clone(),
    };
    assert!(trigger.create(users.clone()).await.is_err(), "no cluster");
    let while_leading = seen.load(Ordering::SeqCst);
    assert!(while_leading > 0, "the create never reached the listener");

    // Another replica takes over.
    take_term("b").await;
    let fenced = |r: Result<(), ApiError>, what: &str| {
        assert!(matches!(r, Err(ApiError::Fenced(_))), "{what}: {r:?}");
    };
    fenced(trigger.create(users.clone()).await.map(|_| ()), "create");
    assert!(
        token.is_cancelled(),
        "a term found over stops the controllers"
    );
    fenced(
        trigger
            .delete("rotate-secrets", &Preconditions::default())
            .await,
        "delete",
    );
    let migrator = Source::Cluster {
        builtin: builtin.clone(),
        fence: fence.clone(),
    };
    fenced(
        migrator.update_status(users.clone()).await.map(|_| ()),
        "status write",
    );
    // The carry-over: a user's unfinished migration in our store stays there, and nothing
    // is created on the cluster.
    store.create(users).await.expect("ours");
    let ours = Guarded::new(store.clone(), fence.clone());
    fenced(
        carry_over(&ours, &builtin, &fence, None).await.map(|_| ()),
        "carry-over",
    );
    assert!(store.get("rotate-secrets").await.expect("get").is_some());
    assert_eq!(
        seen.load(Ordering::SeqCst),
        while_leading,
        "a request reached the cluster after the term ended"
    );
}
