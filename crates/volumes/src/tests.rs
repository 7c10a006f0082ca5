//! The controller's passes over a re-create against a played kube-apiserver (an axum router
//! below, [`Cluster`]: the StatefulSet `db`, its claims `data-db-<n>` already at 20Gi, an
//! expandable StorageClass; deletes and creates of the StatefulSet as kube-apiserver answers
//! them, preconditions included, the garbage collector's orphaning taken as instant) and our
//! own store with a leadership term: what is written to the cluster, in which order, with which
//! preconditions, and what the migration holds in between. The real thing, crashes included,
//! is `tests/real_cluster/volumes/crashes.rs`.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use http::{Method, StatusCode, Uri};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;
use svm_api::volumes::{RECREATE_DELETING, RECREATE_DONE, RECREATE_ORPHANED};
use svm_registry::rest::Preconditions;
use svm_registry::{Fence, Store};
use svm_storage::Storage;
use svm_storage::embedded::EmbeddedStorage;

const STS: &str = "/apis/apps/v1/namespaces/ns/statefulsets";

/// The played kube-apiserver's state.
#[derive(Default)]
struct Cluster {
    /// StatefulSet `db`; `None` once deleted (the garbage collector's orphaning is instant).
    statefulset: Option<Value>,
    /// A user's edit (these replicas) that lands right before the next deletion arrives.
    edit_before_delete: Option<i64>,
    /// A user's `kubectl delete` that lands right before the next deletion arrives.
    deleted_before_delete: bool,
    /// Pods by name (`db-<n>`); none unless a test puts them.
    pods: std::collections::BTreeMap<String, Value>,
    /// The claims' request and resourceVersion; `None`: every claim at 20Gi already.
    claims: Option<(String, u64)>,
    /// A user's edit of every claim (a new resourceVersion) right before the next PATCH.
    claim_edit_before_patch: bool,
    /// Creates of the StatefulSet (dry runs too) refused with this code (admission).
    refuse_create: Option<u16>,
    /// Dry-run creates received.
    dry_runs: usize,
    /// Every write but Events: method, path, body.
    writes: Vec<(Method, String, Value)>,
    revision: u64,
}

type Shared = Arc<Mutex<Cluster>>;

fn statefulset(uid: &str, revision: u64, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "ns", "uid": uid,
                     "resourceVersion": revision.to_string()},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "db"}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "storageClassName": "fast",
                     "resources": {"requests": {"storage": "10Gi"}}}}]},
    })
}

fn status(code: u16, reason: &str) -> (StatusCode, axum::Json<Value>) {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": reason, "code": code}),
        ),
    )
}

async fn answer(
    State(cluster): State<Shared>,
    method: Method,
    uri: Uri,
    body: axum::body::Bytes,
) -> (StatusCode, axum::Json<Value>) {
    let path = uri.path().to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut cluster = cluster.lock().unwrap();
    if path.contains("/events") {
        return (StatusCode::CREATED, axum::Json(body));
    }
    if uri.query().is_some_and(|q| q.contains("dryRun=All")) {
        // The dry-run create before a deletion: admitted unless a test refuses it; the name
        // taken while the old one stands.
        cluster.dry_runs += 1;
        if let Some(code) = cluster.refuse_create {
            return status(code, "Invalid");
        }
        return match cluster.statefulset {
            Some(_) => status(409, "AlreadyExists"),
            None => (StatusCode::CREATED, axum::Json(body)),
        };
    }
    if method != Method::GET {
        cluster
            .writes
            .push((method.clone(), path.clone(), body.clone()));
    }
    let ok = |object: Value| (StatusCode::OK, axum::Json(object));
    match (method, path.as_str()) {
        (Method::GET, p) if p == format!("{STS}/db") => match &cluster.statefulset {
            Some(sts) => ok(sts.clone()),
            None => status(404, "NotFound"),
        },
        (Method::GET, p) if p.starts_with("/api/v1/namespaces/ns/persistentvolumeclaims/") => {
            let (requested, revision, capacity) = match cluster.claims.clone() {
                Some((requested, revision)) => (requested, revision, "10Gi"),
                None => ("20Gi".into(), 1, "20Gi"),
            };
            ok(json!({"metadata": {"uid": format!("claim-{}", p.len()),
                                   "resourceVersion": revision.to_string()},
                      "spec": {"storageClassName": "fast",
                               "resources": {"requests": {"storage": requested}}},
                      "status": {"capacity": {"storage": capacity}}}))
        }
        (Method::PATCH, p) if p.starts_with("/api/v1/namespaces/ns/persistentvolumeclaims/") => {
            let Some((requested, mut revision)) = cluster.claims.clone() else {
                return status(404, "NotFound");
            };
            if std::mem::take(&mut cluster.claim_edit_before_patch) {
                revision += 1;
            }
            if body["metadata"]["resourceVersion"].as_str() != Some(revision.to_string().as_str()) {
                cluster.claims = Some((requested, revision));
                return status(409, "Conflict");
            }
            let storage = body["spec"]["resources"]["requests"]["storage"].clone();
            cluster.claims = Some((storage.as_str().unwrap_or_default().into(), revision + 1));
            ok(json!({}))
        }
        (Method::GET, p) if p.starts_with("/api/v1/namespaces/ns/pods/") => {
            let name = p.trim_start_matches("/api/v1/namespaces/ns/pods/");
            match cluster.pods.get(name) {
                Some(pod) => ok(pod.clone()),
                None => status(404, "NotFound"),
            }
        }
        (Method::GET, "/apis/storage.k8s.io/v1/storageclasses/fast") => {
            ok(json!({"allowVolumeExpansion": true}))
        }
        (Method::DELETE, p) if p == format!("{STS}/db") => {
            if let Some(replicas) = cluster.edit_before_delete.take() {
                cluster.revision += 1;
                let revision = cluster.revision;
                if let Some(sts) = cluster.statefulset.as_mut() {
                    sts["spec"]["replicas"] = json!(replicas);
                    sts["metadata"]["resourceVersion"] = json!(revision.to_string());
                }
            }
            if std::mem::take(&mut cluster.deleted_before_delete) {
                cluster.statefulset = None;
            }
            let Some(sts) = cluster.statefulset.clone() else {
                return status(404, "NotFound");
            };
            let wanted = &body["preconditions"];
            if wanted["uid"] != sts["metadata"]["uid"]
                || wanted["resourceVersion"] != sts["metadata"]["resourceVersion"]
            {
                return status(409, "Conflict");
            }
            cluster.statefulset = None;
            ok(sts)
        }
        (Method::POST, STS) => {
            if let Some(code) = cluster.refuse_create {
                return status(code, "Invalid");
            }
            if cluster.statefulset.is_some() {
                return status(409, "AlreadyExists");
            }
            cluster.revision += 1;
            let mut made = body;
            made["metadata"]["uid"] = json!("new");
            made["metadata"]["resourceVersion"] = json!(cluster.revision.to_string());
            cluster.statefulset = Some(made.clone());
            (StatusCode::CREATED, axum::Json(made))
        }
        _ => status(404, "NotFound"),
    }
}

/// The controller, its store, the played cluster, and a way to end the term.
struct World {
    controller: Controller,
    store: Arc<Store<VolumeClaimMigrationStrategy>>,
    storage: Arc<dyn Storage>,
    cluster: Shared,
    token: CancellationToken,
}

async fn take_term(storage: &Arc<dyn Storage>, holder: &str) -> svm_storage::Revision {
    svm_registry::testing::take_term(storage, "/p", holder).await
}

impl World {
    /// A migration `ns/grow` of StatefulSet `db` (2 replicas) to 20Gi with
    /// `recreateStatefulSet`, created by its user; this replica leads.
    async fn new() -> World {
        let storage: Arc<dyn Storage> = Arc::new(EmbeddedStorage::in_memory());
        let revision = take_term(&storage, "a").await;
        let token = CancellationToken::new();
        let fence = Fence::for_term(storage.clone(), "/p", "a", revision, token.clone());
        let store = Arc::new(Store::new(
            VolumeClaimMigrationStrategy,
            storage.clone(),
            "/p",
        ));
        let cluster: Shared = Arc::new(Mutex::new(Cluster {
            statefulset: Some(statefulset("old", 5, 2)),
            revision: 5,
            ..Default::default()
        }));
        let app = Router::new().fallback(answer).with_state(cluster.clone());
        let client = svm_runtime::testing::played_cluster(app).await;
        let controller = Controller::new(
            Guarded::new(store.clone(), fence),
            client,
            VolumeMetrics::default(),
            Settings {
                resync: Duration::from_secs(1),
            },
            None,
        );
        let vcm: VolumeClaimMigration = serde_json::from_value(json!({
            "metadata": {"name": "grow", "namespace": "ns"},
            "spec": {"target": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"},
                     "templates": [{"name": "data", "storage": "20Gi"}],
                     "volumeClaimUpdateStrategy": "OnPodRollingUpdate",
                     "recreateStatefulSet": true},
        }))
        .expect("migration");
        store.create(vcm).await.expect("created by its user");
        World {
            controller,
            store,
            storage,
            cluster,
            token,
        }
    }

    async fn pass(&self) {
        self.controller
            .reconcile(&("ns".into(), "grow".into()), &mut Hooks::default())
            .await;
    }

    async fn stored(&self) -> Option<VolumeClaimMigration> {
        self.store.get(("ns", "grow")).await.expect("get")
    }

    /// The writes the cluster received since the last call.
    fn writes(&self) -> Vec<(Method, String, Value)> {
        std::mem::take(&mut self.cluster.lock().unwrap().writes)
    }

    fn statefulset(&self) -> Option<Value> {
        self.cluster.lock().unwrap().statefulset.clone()
    }
}

fn saved(vcm: &VolumeClaimMigration) -> (String, String, Option<Value>) {
    let recreate = vcm.status.recreate.clone().unwrap_or_default();
    (
        recreate.phase,
        recreate.stateful_set_resource_version,
        recreate.manifest.map(|m| m["spec"]["replicas"].clone()),
    )
}

/// Save (with the finalizer first), delete naming the object saved, create, then drop the
/// manifest and the finalizer.
#[tokio::test]
async fn a_recreate_holds_the_finalizer_while_a_manifest_is_saved() {
    let world = World::new().await;
    world.pass().await;
    let vcm = world.stored().await.expect("stored");
    assert!(has_finalizer(&vcm), "the finalizer with the save");
    assert_eq!(
        saved(&vcm),
        (RECREATE_DELETING.into(), "5".into(), Some(json!(2)))
    );
    assert!(world.writes().is_empty(), "nothing deleted before the save");

    world.pass().await;
    let writes = world.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    let (method, path, body) = &writes[0];
    assert_eq!(
        (method, path.as_str()),
        (&Method::DELETE, &*format!("{STS}/db"))
    );
    assert_eq!(body["propagationPolicy"], "Orphan");
    assert_eq!(
        body["preconditions"],
        json!({"uid": "old", "resourceVersion": "5"})
    );

    assert_eq!(
        saved(&world.stored().await.expect("stored")).0,
        RECREATE_ORPHANED,
        "the deletion's acceptance is recorded"
    );

    world.pass().await;
    let writes = world.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    let (method, path, made) = &writes[0];
    assert_eq!((method, path.as_str()), (&Method::POST, STS));
    assert_eq!(
        made["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "20Gi"
    );
    assert!(has_finalizer(&world.stored().await.expect("stored")));

    world.pass().await;
    let vcm = world.stored().await.expect("stored");
    assert_eq!(saved(&vcm), (RECREATE_DONE.into(), String::new(), None));
    assert!(!has_finalizer(&vcm), "the finalizer goes with the manifest");
    assert!(world.writes().is_empty());
}

/// A user's edit lands between the decision and the deletion: the deletion's precondition
/// fails (409), the manifest is saved again from the edited object, and the replacement keeps
/// the edit.
#[tokio::test]
async fn an_edit_racing_the_deletion_is_saved_again_never_reverted() {
    let world = World::new().await;
    world.pass().await;
    world.cluster.lock().unwrap().edit_before_delete = Some(3);
    world.pass().await;
    let refused = world.writes();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].2["preconditions"]["resourceVersion"], "5");
    assert!(world.statefulset().is_some(), "the edited object stays");

    world.pass().await;
    let vcm = world.stored().await.expect("stored");
    assert_eq!(
        saved(&vcm),
        (RECREATE_DELETING.into(), "6".into(), Some(json!(3))),
        "saved again from the edited object"
    );
    assert!(
        world.writes().is_empty(),
        "nothing deleted in the pass that saves"
    );

    world.pass().await;
    let deleted = world.writes();
    assert_eq!(deleted[0].2["preconditions"]["resourceVersion"], "6");
    world.pass().await;
    let created = world.writes();
    assert_eq!(created[0].0, Method::POST);
    assert_eq!(created[0].2["spec"]["replicas"], 3, "the edit kept");
}

/// Another replica took the term: the pass that would delete the StatefulSet sends nothing,
/// writes nothing to our store, and stops the controllers.
#[tokio::test]
async fn no_cluster_write_once_the_term_is_over() {
    let world = World::new().await;
    world.pass().await;
    let before = world.stored().await.expect("stored");
    take_term(&world.storage, "b").await;
    world.pass().await;
    assert!(world.writes().is_empty(), "the deletion was sent");
    assert!(world.statefulset().is_some());
    assert!(world.token.is_cancelled(), "the term's controllers stop");
    assert_eq!(world.stored().await.expect("stored"), before);
}

/// The migration deleted by its user after the StatefulSet's deletion: held by the finalizer
/// until the StatefulSet is created again, then gone. Deleted before it: the re-create is
/// called off, the StatefulSet left alone, the migration gone.
#[tokio::test]
async fn a_migration_deleted_mid_recreate_waits_for_its_statefulset() {
    let world = World::new().await;
    world.pass().await;
    world.pass().await;
    assert!(world.statefulset().is_none(), "deleted");
    let deletion = world
        .store
        .delete(("ns", "grow"), &Preconditions::default())
        .await
        .expect("deleted by its user");
    assert!(!deletion.gone, "held by the finalizer");
    world.writes();
    world.pass().await;
    assert_eq!(world.writes()[0].0, Method::POST, "created first");
    assert!(world.stored().await.is_some(), "still held");
    world.pass().await;
    assert!(
        world.stored().await.is_none(),
        "released once the StatefulSet is back"
    );
    assert_eq!(
        world.statefulset().map(|s| s["metadata"]["uid"].clone()),
        Some(json!("new"))
    );

    let world = World::new().await;
    world.pass().await;
    world
        .store
        .delete(("ns", "grow"), &Preconditions::default())
        .await
        .expect("deleted by its user");
    world.pass().await;
    assert!(world.writes().is_empty(), "nothing deleted: called off");
    assert!(world.stored().await.is_none(), "released");
    assert_eq!(
        world.statefulset().map(|s| s["metadata"]["uid"].clone()),
        Some(json!("old"))
    );
}

/// A refused PATCH (a quota, an unbound claim) of an `OnDelete` claim made again keeps the uid
/// it had before: the claim stays eligible and is tried again on the next pass.
#[test]
fn a_refused_on_delete_claim_stays_eligible() {
    let mut vcm = VolumeClaimMigration::default();
    vcm.status.claims = vec![svm_api::volumes::ClaimStatus {
        name: "data-db-0".into(),
        uid: "before".into(),
        ..Default::default()
    }];
    let mut plan = Plan::default();
    plan.status.claims = vec![svm_api::volumes::ClaimStatus {
        name: "data-db-0".into(),
        uid: "made-again".into(),
        phase: plan::RESIZING.into(),
        ..Default::default()
    }];
    let quota = ClusterError::Api {
        code: 403,
        reason: "Forbidden".into(),
        message: "exceeded quota".into(),
        retry_after: None,
        continue_token: None,
        flow_control: None,
    };
    refused(&mut plan, "data-db-0", &quota, &vcm);
    let entry = &plan.status.claims[0];
    assert_eq!(
        (entry.phase.as_str(), entry.uid.as_str()),
        (CLAIM_FAILED, "before")
    );
}

fn running_condition(
    vcm: &VolumeClaimMigration,
) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    vcm.status
        .conditions
        .iter()
        .find(|c| c.type_ == svm_api::volumes::RUNNING)
        .expect("Running")
}

/// The migration's failed condition of `reason`, if it is there.
fn failed_because(vcm: &VolumeClaimMigration) -> Option<String> {
    vcm.status
        .conditions
        .iter()
        .find(|c| c.type_ == svm_api::volumes::FAILED && c.status == "True")
        .map(|c| c.reason.clone())
}

/// A user deletes the StatefulSet (`kubectl delete`, `helm uninstall`) right before our
/// deletion arrives: ours is a 404, and the StatefulSet is not created again — the manifest and
/// the finalizer go, the migration fails saying why, and later passes write nothing.
#[tokio::test]
async fn a_statefulset_its_user_deletes_before_ours_is_not_created_again() {
    let world = World::new().await;
    world.pass().await;
    world.cluster.lock().unwrap().deleted_before_delete = true;
    world.pass().await;
    let writes = world.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0].0, Method::DELETE);
    let vcm = world.stored().await.expect("stored");
    assert_eq!(vcm.status.recreate, None, "the manifest dropped");
    assert!(!has_finalizer(&vcm));
    assert_eq!(
        failed_because(&vcm).as_deref(),
        Some("StatefulSetDeletedElsewhere")
    );
    for _ in 0..3 {
        world.pass().await;
    }
    assert!(world.writes().is_empty(), "nothing created");
    assert!(world.statefulset().is_none());
}

/// The StatefulSet found gone between the save and our deletion: its pods tell whose deletion
/// it was. Still owned by it (a cascading deletion under way) or none left: someone else's, not
/// undone. Orphaned: an orphan deletion, ours (its acceptance not recorded, as after a crash)
/// or a user's doing the same by hand: the saved one is created.
#[tokio::test]
async fn a_statefulset_found_gone_is_created_again_only_if_its_pods_were_orphaned() {
    let pod = |owner: Option<&str>| {
        let mut pod = json!({"metadata": {"uid": "p", "labels": {"app": "db"}}});
        if let Some(uid) = owner {
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                        "uid": uid, "controller": true}]);
        }
        pod
    };
    for (pods, created) in [
        (vec![], false),
        (vec![pod(Some("old")), pod(Some("old"))], false),
        (vec![pod(None), pod(Some("old"))], false),
        (vec![pod(None), pod(None)], true),
    ] {
        let world = World::new().await;
        world.pass().await;
        {
            let mut cluster = world.cluster.lock().unwrap();
            cluster.statefulset = None;
            for (ordinal, pod) in pods.iter().enumerate() {
                cluster.pods.insert(format!("db-{ordinal}"), pod.clone());
            }
        }
        world.pass().await;
        let writes = world.writes();
        let vcm = world.stored().await.expect("stored");
        if created {
            assert_eq!(writes.len(), 1, "{writes:?}");
            assert_eq!(writes[0].0, Method::POST);
        } else {
            assert!(writes.is_empty(), "{pods:?}: {writes:?}");
            assert_eq!(vcm.status.recreate, None, "{pods:?}");
            assert!(!has_finalizer(&vcm), "{pods:?}");
            assert_eq!(
                failed_because(&vcm).as_deref(),
                Some("StatefulSetDeletedElsewhere"),
                "{pods:?}"
            );
        }
    }
}

/// A claim edited by its user between our read and our resize: the PATCH carries the
/// resourceVersion read, so it is a 409 — nothing written over the edit, the claim not marked
/// failed — and the next pass sends it again from the claim as it is now.
#[tokio::test]
async fn a_claim_edited_between_the_read_and_the_resize_is_decided_again() {
    let world = World::new().await;
    {
        let mut cluster = world.cluster.lock().unwrap();
        cluster.claims = Some(("10Gi".into(), 3));
        cluster.claim_edit_before_patch = true;
    }
    world.pass().await;
    let refused = world.writes();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, Method::PATCH);
    assert_eq!(refused[0].2["metadata"]["resourceVersion"], "3");
    assert_eq!(
        world.cluster.lock().unwrap().claims,
        Some(("10Gi".into(), 4)),
        "the edit stands"
    );
    let vcm = world.stored().await.expect("stored");
    assert!(
        vcm.status
            .claims
            .iter()
            .all(|c| c.phase != plan::CLAIM_FAILED),
        "{:?}",
        vcm.status.claims
    );
    assert_eq!(failed_because(&vcm), None);

    world.pass().await;
    let sent = world.writes();
    assert_eq!(sent[0].0, Method::PATCH);
    assert_eq!(sent[0].2["metadata"]["resourceVersion"], "4");
    assert_eq!(
        world.cluster.lock().unwrap().claims,
        Some(("20Gi".into(), 5))
    );
}

/// An admission policy refuses the StatefulSet to create (a ValidatingAdmissionPolicy's 422). Found by the dry run before the
/// deletion: the old one is not deleted, the Running condition and a Warning Event (once) say
/// why. Refused after the deletion (the policy came meanwhile): the same, tried on every pass,
/// and created once the policy lets it.
#[tokio::test]
async fn a_statefulset_that_would_be_refused_is_not_deleted() {
    let world = World::new().await;
    world.pass().await;
    world.cluster.lock().unwrap().refuse_create = Some(422);
    for _ in 0..3 {
        world.pass().await;
    }
    assert!(world.writes().is_empty(), "nothing deleted");
    assert!(world.statefulset().is_some());
    assert_eq!(world.cluster.lock().unwrap().dry_runs, 3);
    let vcm = world.stored().await.expect("stored");
    let running = running_condition(&vcm);
    assert_eq!(
        (running.status.as_str(), running.reason.as_str()),
        ("False", "StatefulSetCreateRefused"),
        "{:#?}",
        vcm.status
    );
    assert!(
        running.message.contains("not deleted"),
        "{}",
        running.message
    );

    // Let through: deleted; refused again before the create: said, retried, then created.
    world.cluster.lock().unwrap().refuse_create = None;
    world.pass().await;
    assert_eq!(world.writes()[0].0, Method::DELETE);
    world.cluster.lock().unwrap().refuse_create = Some(422);
    world.pass().await;
    let vcm = world.stored().await.expect("stored");
    let running = running_condition(&vcm);
    assert_eq!(
        (running.status.as_str(), running.reason.as_str()),
        ("True", "StatefulSetCreateRefused")
    );
    assert!(
        running.message.contains("pods run without it"),
        "{}",
        running.message
    );
    world.cluster.lock().unwrap().refuse_create = None;
    world.pass().await;
    assert!(world.statefulset().is_some(), "created once allowed");
}
