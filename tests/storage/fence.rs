//! The fence, on each backend: a deposed leader's writes through every store the controllers
//! write with — `Guarded` StorageVersionMigrations, StorageStates (with the hash history in
//! the same transaction) and VolumeClaimMigrations, and the trigger's observer record — are
//! refused by the store's own transaction (on etcd: etcd's compare on `<prefix>/leader-term`),
//! and nothing of them lands.
//!
//! Leader A takes the lease and its term as the elector does (one transaction writing
//! `<prefix>/leader` and `<prefix>/leader-term`); A writes through its fence; B takes the
//! lease over as the elector does (a compare on the leader record's mod revision, both records
//! written). Then every write A's controllers can make is tried once more. A store between
//! the registry and the backend counts the transactions the backend answered "failed" on the
//! term record's compare: that count, the `Fenced` answers and the writes tried must agree,
//! and the whole prefix must read back as it was.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use svm_api::migration::{
    GroupVersionResource, MigrationProgress, MigrationSpec, StorageVersionMigration,
};
use svm_api::storagestate::{GroupResource, StorageState, StorageStateSpec};
use svm_api::volumes::{Target, TemplateSize, VolumeClaimMigration, VolumeClaimMigrationSpec};
use svm_registry::fence::{Stamp, term_key, writes_key};
use svm_registry::rest::Preconditions;
use svm_registry::{ApiError, ApiResult, Fence, Guarded};
use svm_trigger::history::{HashHistory, NewEntry, ObserverRecord, Source};
use tokio_util::sync::CancellationToken;

use super::*;

const PREFIX: &str = "/svm-fence";

#[tokio::test]
async fn on_etcd_a_deposed_leaders_writes_are_refused_by_etcds_transaction() {
    let backend = etcd().await;
    deposed_leader_writes_nothing(backend.storage.clone(), "etcd").await;
}

#[tokio::test]
async fn on_embedded_a_deposed_leaders_writes_are_refused_by_the_stores_transaction() {
    let backend = durable().await;
    deposed_leader_writes_nothing(backend.storage.clone(), "the embedded store").await;
}

async fn deposed_leader_writes_nothing(backend: Arc<dyn Storage>, name: &str) {
    let counting = Arc::new(Counting::new(backend));
    let storage: Arc<dyn Storage> = counting.clone();
    let installed = svm_api::install(
        storage.clone(),
        PREFIX,
        svm_api::Kinds {
            volume_claim_migrations: true,
            ..Default::default()
        },
    );
    let volume_store = installed
        .volume_migrations
        .clone()
        .expect("VolumeClaimMigrations installed");
    let history = HashHistory::new(storage.clone(), PREFIX);

    // A leads: its term, its fence, its stores.
    let (a_held, a_term) = take_lease(&storage, "replica-a", None).await;
    let a_token = CancellationToken::new();
    let a_fence = Fence::for_term(
        storage.clone(),
        PREFIX,
        "replica-a",
        a_term,
        a_token.clone(),
    );
    let migrations = Guarded::new(installed.migrations.clone(), a_fence.clone());
    let states = Guarded::new(installed.states.clone(), a_fence.clone());
    let volumes = Guarded::new(volume_store.clone(), a_fence.clone());

    // While it leads, each of its writes lands, stamped with its term.
    let m1 = migrations.create(migration("m1")).await.expect("create m1");
    let (records, _) = history.append("example.test", "widgets", 0, &[entry("h1")]);
    let s1 = states
        .create_with(state("example.test", "widgets"), &records)
        .await
        .expect("create a StorageState with its history");
    let v1 = volumes.create(volume("v1")).await.expect("create v1");
    history
        .write_observer(&a_fence, &observer("2026-01-01T00:00:00Z"))
        .await
        .expect("the observer record");
    a_fence.check().await.expect("A's term holds");
    assert_eq!(stamp(&storage).await.holder, "replica-a");
    assert_eq!(counting.refused(), 0, "nothing refused while A leads");

    // B takes the lease over, as the elector does once A's record sat still for a lease.
    let (_, b_term) = take_lease(&storage, "replica-b", Some(a_held)).await;
    assert!(b_term > a_term);
    let revision = storage.current_revision().await.unwrap();
    let before = everything(&storage).await;

    // A, deposed but unaware, tries every write its controllers make.
    let mut status = m1.clone();
    status.status.progress = Some(MigrationProgress {
        migrated_objects: 250,
        ..MigrationProgress::default()
    });
    let mut labelled = m1.clone();
    labelled.metadata.labels = Some(BTreeMap::from([("svm".into(), "a".into())]));
    let mut safe = s1.clone();
    safe.status.current_storage_version_hash = "h2".into();
    safe.status.persisted_storage_version_hashes = vec!["h2".into()];
    let (next, _) = history.append("example.test", "widgets", 1, &[entry("h2")]);
    let (other, _) = history.append("", "configmaps", 0, &[entry("c1")]);
    let mut resized = v1.clone();
    resized.status.observed_generation = Some(1);
    let mut v1_labelled = v1.clone();
    v1_labelled.metadata.labels = Some(BTreeMap::from([("svm".into(), "a".into())]));
    let none = Preconditions::default();
    let tried: Vec<(&str, ApiResult<()>)> = vec![
        (
            "create a StorageVersionMigration",
            migrations.create(migration("m2")).await.map(drop),
        ),
        (
            "update a StorageVersionMigration",
            migrations.update(labelled).await.map(drop),
        ),
        (
            "write a StorageVersionMigration's status (a checkpoint)",
            migrations.update_status(status).await.map(drop),
        ),
        (
            "delete a StorageVersionMigration",
            migrations.delete("m1", &none).await.map(drop),
        ),
        (
            "create a StorageState with its hash history",
            states
                .create_with(state("", "configmaps"), &other)
                .await
                .map(drop),
        ),
        (
            "write a StorageState's status with its hash history",
            states.update_status_with(safe, &next).await.map(drop),
        ),
        (
            "delete a StorageState",
            states.delete("widgets.example.test", &none).await.map(drop),
        ),
        (
            "create a VolumeClaimMigration",
            volumes.create(volume("v2")).await.map(drop),
        ),
        (
            "update a VolumeClaimMigration",
            volumes.update(v1_labelled).await.map(drop),
        ),
        (
            "write a VolumeClaimMigration's status",
            volumes.update_status(resized).await.map(drop),
        ),
        (
            "delete a VolumeClaimMigration",
            volumes.delete(("demo", "v1"), &none).await.map(drop),
        ),
        (
            "write the trigger's observer record",
            history
                .write_observer(&a_fence, &observer("2026-01-02T00:00:00Z"))
                .await,
        ),
    ];
    let fenced = tried
        .iter()
        .filter(|(_, outcome)| matches!(outcome, Err(ApiError::Fenced(_))))
        .count();
    for (what, outcome) in &tried {
        assert!(
            matches!(outcome, Err(ApiError::Fenced(_))),
            "{what}: {outcome:?}"
        );
    }
    assert!(
        a_token.is_cancelled(),
        "a refused write stops A's controllers"
    );
    assert_eq!(
        (counting.refused(), fenced),
        (tried.len(), tried.len()),
        "every write tried was refused on the term record's compare by {name}"
    );
    // The leader record is not behind the fence — it is what the terms are made of — but a
    // deposed renewal carries a compare on the mod revision A last wrote it at, which B's
    // takeover moved: refused as well.
    let renewal = storage
        .txn(Txn {
            compares: vec![Compare::ModRevision(leader_key(), a_held)],
            ops: vec![Op::Put(
                leader_key(),
                b"{\"holderIdentity\":\"replica-a\"}".to_vec(),
            )],
        })
        .await
        .unwrap();
    assert!(
        matches!(renewal, TxnOutcome::Failed { index: 0, .. }),
        "{renewal:?}"
    );
    assert!(matches!(a_fence.check().await, Err(ApiError::Fenced(_))));

    // Nothing landed: the revision did not move, every key reads back as it was.
    assert_eq!(storage.current_revision().await.unwrap(), revision);
    assert_eq!(everything(&storage).await, before);
    assert!(migrations.get("m2").await.unwrap().is_none());
    assert!(
        volumes.get(("demo", "v2")).await.unwrap().is_none(),
        "no VolumeClaimMigration v2"
    );
    assert_eq!(stamp(&storage).await.holder, "replica-a");

    // B's fence, on the same stores, writes.
    let b_fence = Fence::for_term(
        storage.clone(),
        PREFIX,
        "replica-b",
        b_term,
        CancellationToken::new(),
    );
    let current = migrations.get("m1").await.unwrap().expect("m1");
    let mut progressed = current.clone();
    progressed.status.progress = Some(MigrationProgress {
        migrated_objects: 250,
        ..MigrationProgress::default()
    });
    Guarded::new(installed.migrations.clone(), b_fence)
        .update_status(progressed)
        .await
        .expect("B's checkpoint lands");
    assert_eq!(
        stamp(&storage).await,
        Stamp {
            holder: "replica-b".into(),
            term: b_term,
        }
    );
    eprintln!(
        "on {name}: {} writes of the deposed leader tried, {} refused by the store's \
         transaction (the term record's compare), {} answered Fenced, none landed (revision \
         still {revision}); its lease renewal refused too; the new leader's write landed",
        tried.len(),
        counting.refused(),
        fenced
    );
}

fn leader_key() -> String {
    format!("{PREFIX}/leader")
}

/// Takes the lease as the elector does: the leader record and a new term record in one
/// transaction, conditioned on the record being absent (a first leader) or unchanged since
/// `over` (a takeover). Returns the revision of both, which is the term.
async fn take_lease(
    storage: &Arc<dyn Storage>,
    holder: &str,
    over: Option<Revision>,
) -> (Revision, Revision) {
    let compare = match over {
        None => Compare::Absent(leader_key()),
        Some(revision) => Compare::ModRevision(leader_key(), revision),
    };
    let record = format!("{{\"holderIdentity\":\"{holder}\"}}").into_bytes();
    let outcome = storage
        .txn(Txn {
            compares: vec![compare],
            ops: vec![
                Op::Put(leader_key(), record.clone()),
                Op::Put(term_key(PREFIX), record),
            ],
        })
        .await
        .unwrap();
    match outcome {
        TxnOutcome::Committed { revision } => (revision, revision),
        other => panic!("{holder} could not take the lease: {other:?}"),
    }
}

async fn stamp(storage: &Arc<dyn Storage>) -> Stamp {
    let kv = storage
        .get(&writes_key(PREFIX))
        .await
        .unwrap()
        .expect("a stamp");
    serde_json::from_slice(&kv.value).unwrap()
}

/// Every key under the prefix with its value and revisions.
async fn everything(storage: &Arc<dyn Storage>) -> Vec<KeyValue> {
    storage
        .list(&format!("{PREFIX}/"), ListOptions::default())
        .await
        .unwrap()
        .items
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

fn migration(name: &str) -> StorageVersionMigration {
    StorageVersionMigration {
        metadata: named(name),
        spec: MigrationSpec {
            resource: GroupVersionResource {
                group: "example.test".into(),
                resource: "widgets".into(),
                ..GroupVersionResource::default()
            },
            ..MigrationSpec::default()
        },
        ..StorageVersionMigration::default()
    }
}

fn state(group: &str, resource: &str) -> StorageState {
    let mut state = StorageState {
        metadata: named(&StorageState::name_for(group, resource)),
        spec: StorageStateSpec {
            resource: GroupResource {
                group: group.into(),
                resource: resource.into(),
            },
        },
        ..StorageState::default()
    };
    state.status.current_storage_version_hash = "h1".into();
    state.status.persisted_storage_version_hashes = vec!["h1".into()];
    state
}

fn volume(name: &str) -> VolumeClaimMigration {
    VolumeClaimMigration {
        metadata: ObjectMeta {
            namespace: Some("demo".into()),
            ..named(name)
        },
        spec: VolumeClaimMigrationSpec {
            target: Target {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: "web".into(),
            },
            templates: vec![TemplateSize {
                name: "data".into(),
                storage: "10Gi".into(),
            }],
            ..VolumeClaimMigrationSpec::default()
        },
        ..VolumeClaimMigration::default()
    }
}

fn entry(hash: &str) -> NewEntry {
    NewEntry {
        hash: hash.into(),
        source: Source::Discovery,
        apiserver: None,
        encoding_version: None,
        reason: "seen".into(),
        encryption: None,
    }
}

fn observer(at: &str) -> ObserverRecord {
    ObserverRecord {
        last_vouched: at.into(),
        ..ObserverRecord::default()
    }
}

/// The backend, with a count of the transactions it answered "failed" on a compare of the
/// term record: the backend's refusals, whatever the layers above made of them.
struct Counting {
    inner: Arc<dyn Storage>,
    term_key: String,
    refused: AtomicUsize,
}

impl Counting {
    fn new(inner: Arc<dyn Storage>) -> Counting {
        Counting {
            inner,
            term_key: term_key(PREFIX),
            refused: AtomicUsize::new(0),
        }
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

/// What `#[async_trait]` makes of an `async fn` (the root package does not depend on the
/// macro).
type Boxed<'a, T> = Pin<Box<dyn Future<Output = svm_storage::Result<T>> + Send + 'a>>;

impl Storage for Counting {
    fn current_revision<'s, 'f>(&'s self) -> Boxed<'f, Revision>
    where
        's: 'f,
        Self: 'f,
    {
        self.inner.current_revision()
    }

    fn get<'s, 'k, 'f>(&'s self, key: &'k str) -> Boxed<'f, Option<KeyValue>>
    where
        's: 'f,
        'k: 'f,
        Self: 'f,
    {
        self.inner.get(key)
    }

    fn list<'s, 'p, 'f>(
        &'s self,
        prefix: &'p str,
        opts: ListOptions,
    ) -> Boxed<'f, svm_storage::ListResult>
    where
        's: 'f,
        'p: 'f,
        Self: 'f,
    {
        self.inner.list(prefix, opts)
    }

    fn txn<'s, 'f>(&'s self, txn: Txn) -> Boxed<'f, TxnOutcome>
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let compares = txn.compares.clone();
            let outcome = self.inner.txn(txn).await?;
            if let TxnOutcome::Failed { index, .. } = &outcome
                && let Some(Compare::ModRevision(key, _)) = compares.get(*index)
                && *key == self.term_key
            {
                self.refused.fetch_add(1, Ordering::SeqCst);
            }
            Ok(outcome)
        })
    }

    fn watch<'s, 'p, 'f>(&'s self, prefix: &'p str, after: Revision) -> Boxed<'f, WatchStream>
    where
        's: 'f,
        'p: 'f,
        Self: 'f,
    {
        self.inner.watch(prefix, after)
    }

    fn compact<'s, 'f>(&'s self, revision: Revision) -> Boxed<'f, ()>
    where
        's: 'f,
        Self: 'f,
    {
        self.inner.compact(revision)
    }

    fn health<'s, 'f>(&'s self) -> Boxed<'f, ()>
    where
        's: 'f,
        Self: 'f,
    {
        self.inner.health()
    }
}
