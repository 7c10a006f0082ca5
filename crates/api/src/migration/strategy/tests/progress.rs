//! `status.progress` through the store, as the HTTP layer drives it (JSON of a served version;
//! YAML and protobuf bodies reach the store as that JSON): every status write that does not
//! carry it — a PUT in any served version, with `"progress"` absent, null or empty, a body that went
//! through upstream's protobuf message, a merge, JSON or strategic merge patch that removes it,
//! a server-side apply — keeps the stored one; a write that carries it replaces it.

use std::sync::Arc;

use k8s_pb::api::storagemigration::v1beta1 as upstream;
use prost::Message;
use serde_json::{Value, json};

use crate::VERSIONS;
use crate::migration::MigrationStrategy;
use crate::migration::proto::MigrationProtobuf;
use svm_registry::protobuf::ProtobufKind;
use svm_registry::rest::{GetOptions, PatchType, Subresource, WriteOptions, Written};
use svm_registry::{ApiResult, ObjectRef, RestStorage, Store};
use svm_storage::embedded::EmbeddedStorage;

/// The migrator's checkpoint, as it writes it.
fn checkpoint() -> Value {
    json!({
        "migratedObjects": 500,
        "remainingObjects": 500,
        "migratedThrough": "demo/cm-00499",
        "lastCheckpointTime": "2026-01-01T00:00:00Z",
    })
}

fn options(manager: &str) -> WriteOptions {
    WriteOptions {
        field_manager: Some(manager.into()),
        ..Default::default()
    }
}

/// A store holding migration `name`, Running, with [`checkpoint`] stored.
async fn checkpointed(name: &str) -> Store<MigrationStrategy> {
    let store = Store::new(
        MigrationStrategy,
        Arc::new(EmbeddedStorage::in_memory()),
        "/p",
    );
    let body = json!({
        "apiVersion": "storagemigration.k8s.io/v1",
        "kind": "StorageVersionMigration",
        "metadata": {"name": name},
        "spec": {"resource": {"group": "", "resource": "configmaps"}},
    });
    RestStorage::create(&store, "v1", None, body, &WriteOptions::default())
        .await
        .expect("created");
    put_status(&store, "v1", name, |status| {
        status["conditions"] = json!([{
            "type": "Running", "status": "True", "reason": "MigrationStarted", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]);
        status["progress"] = checkpoint();
    })
    .await
    .expect("the migrator's checkpoint");
    assert_eq!(progress(&store, name).await, checkpoint());
    store
}

async fn get(store: &Store<MigrationStrategy>, version: &str, name: &str) -> Value {
    RestStorage::get(
        store,
        version,
        ObjectRef::from(name),
        &GetOptions::default(),
    )
    .await
    .expect("get")
}

/// The stored progress, as v1 serves it.
async fn progress(store: &Store<MigrationStrategy>, name: &str) -> Value {
    get(store, "v1", name).await["status"]["progress"].clone()
}

/// A read-modify-write of the status in `version`: what a client does with a PUT.
async fn put_status(
    store: &Store<MigrationStrategy>,
    version: &str,
    name: &str,
    edit: impl FnOnce(&mut Value),
) -> ApiResult<Written> {
    let mut body = get(store, version, name).await;
    edit(&mut body["status"]);
    put(store, version, name, body).await
}

async fn put(
    store: &Store<MigrationStrategy>,
    version: &str,
    name: &str,
    body: Value,
) -> ApiResult<Written> {
    RestStorage::update(
        store,
        version,
        ObjectRef::from(name),
        Subresource::Status,
        body,
        &options("status-writer"),
    )
    .await
}

async fn patch_status(
    store: &Store<MigrationStrategy>,
    name: &str,
    patch_type: PatchType,
    patch: &Value,
    opts: &WriteOptions,
) -> Written {
    RestStorage::patch(
        store,
        "v1",
        ObjectRef::from(name),
        Subresource::Status,
        patch_type,
        patch.to_string().as_bytes(),
        opts,
    )
    .await
    .unwrap_or_else(|e| panic!("{patch_type:?} {patch}: {e:?}"))
}

#[tokio::test]
async fn a_put_without_progress_keeps_it_in_every_version() {
    for version in VERSIONS {
        for sent in ["absent", "null", "empty"] {
            let store = checkpointed("m").await;
            let written = put_status(&store, version, "m", |status| {
                // A condition of the writer's own (in the version's shape), so the write is
                // not a no-op.
                let mut audited = status["conditions"][0].clone();
                audited["type"] = json!("Audited");
                status["conditions"]
                    .as_array_mut()
                    .expect("conditions")
                    .push(audited);
                match sent {
                    "null" => status["progress"] = Value::Null,
                    "empty" => status["progress"] = json!({}),
                    _ => {
                        status.as_object_mut().expect("status").remove("progress");
                    }
                }
            })
            .await
            .expect("the status write");
            let what = format!("{version}, progress {sent}");
            assert_eq!(written.object["status"]["progress"], checkpoint(), "{what}");
            let stored = get(&store, "v1", "m").await;
            assert_eq!(stored["status"]["progress"], checkpoint(), "{what}");
            assert_eq!(
                stored["status"]["conditions"][1]["type"], "Audited",
                "{what}: the rest of the write is taken"
            );
        }
    }
}

#[tokio::test]
async fn a_put_with_progress_replaces_it_whole_in_every_version() {
    for version in VERSIONS {
        let store = checkpointed("m").await;
        let theirs = json!({"migratedObjects": 600, "continueToken": "next"});
        put_status(&store, version, "m", |status| {
            status["progress"] = theirs.clone();
        })
        .await
        .expect("the status write");
        assert_eq!(progress(&store, "m").await, theirs, "{version}");
    }
}

/// client-go's round trip: the object read in protobuf, decoded into upstream's v1beta1
/// message (which has no field 1000: prost, like Go, drops it), written back as that message.
#[tokio::test]
async fn a_status_written_back_through_upstreams_message_keeps_it() {
    let store = checkpointed("m").await;
    let served = get(&store, "v1beta1", "m").await;
    let ours = MigrationProtobuf
        .encode("v1beta1", &served)
        .expect("our message");
    let mut theirs = upstream::StorageVersionMigration::decode(&ours[..]).expect("upstream's");
    let status = theirs.status.get_or_insert_default();
    status.conditions[0].message = Some("seen by client-go".into());
    let body = MigrationProtobuf
        .decode("v1beta1", &theirs.encode_to_vec())
        .expect("decoded as the server decodes a body");
    assert!(
        body["status"].get("progress").is_none(),
        "the round trip lost progress: {body:#}"
    );
    let written = put(&store, "v1beta1", "m", body)
        .await
        .expect("the status write");
    assert_eq!(written.object["status"]["progress"], checkpoint());
    let stored = get(&store, "v1", "m").await;
    assert_eq!(stored["status"]["progress"], checkpoint());
    assert_eq!(
        stored["status"]["conditions"][0]["message"],
        "seen by client-go"
    );
}

/// A patch starts from the stored object, so one that does not name progress keeps it; one
/// that removes it is refused the same way a PUT without it is: a status write never clears it.
#[tokio::test]
async fn patches_keep_it_unless_they_set_it() {
    let removals = [
        (PatchType::Merge, json!({"status": {"progress": null}})),
        (
            PatchType::Json,
            json!([{"op": "remove", "path": "/status/progress"}]),
        ),
        (
            PatchType::StrategicMerge,
            json!({"status": {"progress": null}}),
        ),
    ];
    for (patch_type, patch) in removals {
        let store = checkpointed("m").await;
        let written =
            patch_status(&store, "m", patch_type, &patch, &options("status-patcher")).await;
        assert_eq!(
            written.object["status"]["progress"],
            checkpoint(),
            "{patch_type:?}"
        );
        assert_eq!(progress(&store, "m").await, checkpoint(), "{patch_type:?}");
    }

    // A patch that names progress changes it, field by field for a merge patch.
    let store = checkpointed("m").await;
    patch_status(
        &store,
        "m",
        PatchType::Merge,
        &json!({"status": {"progress": {"migratedObjects": 600}}}),
        &options("status-patcher"),
    )
    .await;
    let mut expected = checkpoint();
    expected["migratedObjects"] = json!(600);
    assert_eq!(progress(&store, "m").await, expected);
}

/// A server-side apply of the status that does not name progress keeps it; so does one by a
/// manager that took every field of progress and now leaves it out (the apply removes what
/// it alone owned, which would leave progress empty).
#[tokio::test]
async fn server_side_apply_keeps_it_unless_it_sets_it() {
    let store = checkpointed("m").await;
    let apply = |status: Value| {
        json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": "m"},
            "status": status,
        })
    };
    let forced = WriteOptions {
        force: true,
        ..options("applier")
    };
    let audited = json!({"conditions": [{
        "type": "Audited", "status": "True", "reason": "Seen", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:01Z",
    }]});
    patch_status(
        &store,
        "m",
        PatchType::Apply,
        &apply(audited.clone()),
        &forced,
    )
    .await;
    assert_eq!(progress(&store, "m").await, checkpoint());

    // Every field a value of its own: the applier takes them all from the status writer.
    let theirs = json!({
        "migratedObjects": 700,
        "remainingObjects": 300,
        "migratedThrough": "demo/cm-00699",
        "lastCheckpointTime": "2026-01-01T00:00:02Z",
    });
    let mut with_progress = audited.clone();
    with_progress["progress"] = theirs.clone();
    patch_status(
        &store,
        "m",
        PatchType::Apply,
        &apply(with_progress),
        &forced,
    )
    .await;
    assert_eq!(progress(&store, "m").await, theirs);

    let written = patch_status(&store, "m", PatchType::Apply, &apply(audited), &forced).await;
    assert_eq!(
        written.object["status"]["progress"], theirs,
        "leaving out what it applied does not clear it"
    );
    assert_eq!(progress(&store, "m").await, theirs);
}
