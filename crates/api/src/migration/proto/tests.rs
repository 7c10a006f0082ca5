use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use k8s_pb::api::storagemigration::v1beta1 as upstream;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::VERSIONS;
use crate::migration::versions;
use crate::migration::versions::tests::time;
use crate::migration::{MigrationCondition, StorageVersionMigration};

/// The conversions' fixture, with what it leaves out added: managed fields, a finalizer, a
/// second condition with every field empty.
fn full() -> StorageVersionMigration {
    let mut migration = versions::tests::full();
    migration.metadata.finalizers = Some(vec!["example.test/keep".into()]);
    migration.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kube-controller-manager".into()),
        operation: Some("Update".into()),
        api_version: Some("storagemigration.k8s.io/v1beta1".into()),
        time: Some(time(1_700_000_050)),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(json!({"f:status": {"f:conditions": {}}}))),
        subresource: Some("status".into()),
    }]);
    migration.status.conditions.push(MigrationCondition {
        type_: "Succeeded".into(),
        status: "True".into(),
        last_transition_time: None,
        reason: String::new(),
        message: String::new(),
        observed_generation: None,
    });
    migration
}

#[test]
fn every_version_round_trips_through_protobuf() {
    for version in VERSIONS {
        let served = versions::encode(version, &full()).expect("served JSON");
        let raw = MigrationProtobuf.encode(version, &served).expect("encodes");
        let back = MigrationProtobuf.decode(version, &raw).expect("decodes");
        assert_eq!(back, served, "{version}");
        // And the hub is the same as from the JSON itself.
        assert_eq!(
            versions::decode(version, back).expect("hub"),
            full(),
            "{version}"
        );
    }
}

#[test]
fn an_empty_migration_round_trips() {
    for version in VERSIONS {
        let served =
            versions::encode(version, &StorageVersionMigration::default()).expect("served");
        let raw = MigrationProtobuf.encode(version, &served).expect("encodes");
        let back = MigrationProtobuf.decode(version, &raw).expect("decodes");
        assert_eq!(back, served, "{version}");
    }
}

#[test]
fn v1beta1_is_wire_compatible_with_upstreams_messages() {
    let served = versions::encode("v1beta1", &full()).expect("served");
    let raw = MigrationProtobuf
        .encode("v1beta1", &served)
        .expect("encodes");
    // Read by k8s-pb's message, generated from upstream's generated.proto: every upstream field
    // where upstream has it (our progress is an unknown field there).
    let theirs = upstream::StorageVersionMigration::decode(&raw[..]).expect("upstream decodes");
    let spec = theirs.spec.clone().expect("spec");
    let resource = spec.resource.expect("resource");
    assert_eq!(resource.group.as_deref(), Some("apps"));
    assert_eq!(resource.resource.as_deref(), Some("deployments"));
    let status = theirs.status.clone().expect("status");
    assert_eq!(status.resource_version.as_deref(), Some("40"));
    assert_eq!(status.conditions.len(), 2);
    assert_eq!(status.conditions[0].observed_generation, Some(1));
    assert_eq!(status.conditions[0].message.as_deref(), Some("migrating"));
    let metadata = theirs.metadata.clone().expect("metadata");
    assert_eq!(metadata.name.as_deref(), Some("m1"));
    assert_eq!(metadata.generation, Some(1));
    assert_eq!(metadata.managed_fields.len(), 1);
    // Written by upstream's message, read by ours.
    let back = MigrationProtobuf
        .decode("v1beta1", &theirs.encode_to_vec())
        .expect("ours decodes upstream's");
    let mut without_progress = served.clone();
    if let Some(status) = without_progress
        .get_mut("status")
        .and_then(Value::as_object_mut)
    {
        status.remove("progress");
    }
    assert_eq!(back, without_progress);
}

#[test]
fn lists_carry_their_metadata_and_items() {
    let item = versions::encode("v1", &full()).expect("served");
    let list = json!({
        "kind": "StorageVersionMigrationList",
        "apiVersion": "storagemigration.k8s.io/v1",
        "metadata": {"resourceVersion": "77", "continue": "c", "remainingItemCount": 3},
        "items": [item.clone(), item],
    });
    let raw = MigrationProtobuf.encode("v1", &list).expect("encodes");
    let theirs = upstream::StorageVersionMigrationList::decode(&raw[..]).expect("decodes");
    assert_eq!(theirs.items.len(), 2);
    let meta = theirs.metadata.expect("metadata");
    assert_eq!(meta.resource_version.as_deref(), Some("77"));
    assert_eq!(meta.r#continue.as_deref(), Some("c"));
    assert_eq!(meta.remaining_item_count, Some(3));
    let alpha = json!({"kind": "StorageVersionMigrationList", "apiVersion": "storagemigration.k8s.io/v1alpha1", "metadata": {}, "items": []});
    let raw = MigrationProtobuf
        .encode("v1alpha1", &alpha)
        .expect("encodes");
    assert!(
        AlphaMigrationList::decode(&raw[..])
            .expect("decodes")
            .items
            .is_empty()
    );
}

#[test]
fn unknown_fields_are_skipped_as_go_skips_them() {
    let served = versions::encode("v1", &full()).expect("served");
    let mut raw = MigrationProtobuf.encode("v1", &served).expect("encodes");
    // Field 99, length-delimited, 3 bytes: no such field in the message.
    raw.extend_from_slice(&[0x9a, 0x06, 0x03, b'a', b'b', b'c']);
    assert_eq!(
        MigrationProtobuf.decode("v1", &raw).expect("decodes"),
        served
    );
}

#[test]
fn a_cut_message_is_an_error_not_a_panic() {
    let served = versions::encode("v1alpha1", &full()).expect("served");
    let raw = MigrationProtobuf
        .encode("v1alpha1", &served)
        .expect("encodes");
    let mut errors = 0;
    for cut in 1..raw.len() {
        if MigrationProtobuf.decode("v1alpha1", &raw[..cut]).is_err() {
            errors += 1;
        }
    }
    // A cut exactly between two fields is a valid, shorter message; most cuts are not.
    assert!(
        errors > raw.len() / 2,
        "{errors} of {} cuts refused",
        raw.len()
    );
}

#[test]
fn a_value_of_the_wrong_shape_is_an_error() {
    let wrong = json!({"kind": "StorageVersionMigration", "apiVersion": "storagemigration.k8s.io/v1", "spec": "not an object"});
    assert!(matches!(
        MigrationProtobuf.encode("v1", &wrong),
        Err(ProtobufError::Shape { .. })
    ));
}

proptest! {
    /// Whatever the bytes, decoding answers (an object or an error) and never panics.
    #[test]
    fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for version in VERSIONS {
            let _ = MigrationProtobuf.decode(version, &bytes);
        }
    }
}
