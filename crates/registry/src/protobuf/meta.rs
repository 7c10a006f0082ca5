//! The `meta.k8s.io/v1` messages every kind shares — ObjectMeta, ListMeta, Time, Status, DeleteOptions, WatchEvent, PartialObjectMetadata(List) — between their
//! JSON form (k8s-openapi's types, or the registry's `serde_json::Value`) and their `k8s-pb`
//! messages.
//!
//! Writing, each field is set as Go's generated marshaller writes it: a field that is a plain
//! value in Go (a string, an int64, a struct) is always on the wire, even empty; a pointer, a
//! slice or a map only when set. Reading, Go's zero values become absent JSON fields, as Go's
//! JSON encoder (`omitempty`) would leave them out.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as json;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb;
use k8s_pb::apimachinery::pkg::runtime::RawExtension;
use prost::Message;
use serde_json::Value;

use super::{ProtobufError, encode_body};

/// `meta.k8s.io/v1`, the apiVersion of PartialObjectMetadata(List) and of the list forms.
pub const META_V1: &str = "meta.k8s.io/v1";

fn set(value: &Option<String>) -> Option<String> {
    Some(value.clone().unwrap_or_default())
}

/// Go's zero string is an absent JSON field.
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

/// metav1.Time: whole seconds and nanoseconds since the epoch; the zero time is an empty
/// message (Go's `Time.Marshal` writes nothing for it).
pub fn time_to_pb(time: Option<&json::Time>) -> pb::Time {
    match time {
        Some(json::Time(at)) => pb::Time {
            seconds: Some(at.as_second()),
            nanos: Some(at.subsec_nanosecond()),
        },
        None => pb::Time::default(),
    }
}

/// A metav1.Time message: `None` for the zero time (Go reads 0 seconds and 0 nanoseconds as
/// the zero time).
pub fn time_from_pb(time: Option<pb::Time>) -> Result<Option<json::Time>, ProtobufError> {
    let time = time.unwrap_or_default();
    let (seconds, nanos) = (time.seconds.unwrap_or(0), time.nanos.unwrap_or(0));
    if seconds == 0 && nanos == 0 {
        return Ok(None);
    }
    jiff::Timestamp::new(seconds, nanos)
        .map(|at| Some(json::Time(at)))
        .map_err(|err| ProtobufError::Invalid {
            what: "metav1.Time",
            detail: err.to_string(),
        })
}

/// metav1.ObjectMeta as its message, every field written as Go writes it.
pub fn object_meta_to_pb(meta: &json::ObjectMeta) -> pb::ObjectMeta {
    pb::ObjectMeta {
        name: set(&meta.name),
        generate_name: set(&meta.generate_name),
        namespace: set(&meta.namespace),
        self_link: set(&meta.self_link),
        uid: set(&meta.uid),
        resource_version: set(&meta.resource_version),
        generation: Some(meta.generation.unwrap_or(0)),
        creation_timestamp: Some(time_to_pb(meta.creation_timestamp.as_ref())),
        deletion_timestamp: meta
            .deletion_timestamp
            .as_ref()
            .map(|t| time_to_pb(Some(t))),
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        owner_references: meta
            .owner_references
            .iter()
            .flatten()
            .map(owner_reference_to_pb)
            .collect(),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        managed_fields: meta
            .managed_fields
            .iter()
            .flatten()
            .map(managed_fields_to_pb)
            .collect(),
    }
}

/// A metav1.ObjectMeta message as its JSON form; fails on a time out of range or a
/// managed-fields set that is not JSON.
pub fn object_meta_from_pb(meta: pb::ObjectMeta) -> Result<json::ObjectMeta, ProtobufError> {
    let managed_fields = meta
        .managed_fields
        .into_iter()
        .map(managed_fields_from_pb)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json::ObjectMeta {
        name: non_empty(meta.name),
        generate_name: non_empty(meta.generate_name),
        namespace: non_empty(meta.namespace),
        self_link: non_empty(meta.self_link),
        uid: non_empty(meta.uid),
        resource_version: non_empty(meta.resource_version),
        generation: meta.generation.filter(|g| *g != 0),
        creation_timestamp: time_from_pb(meta.creation_timestamp)?,
        deletion_timestamp: match meta.deletion_timestamp {
            Some(time) => time_from_pb(Some(time))?,
            None => None,
        },
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        labels: Some(meta.labels).filter(|m| !m.is_empty()),
        annotations: Some(meta.annotations).filter(|m| !m.is_empty()),
        owner_references: Some(
            meta.owner_references
                .into_iter()
                .map(owner_reference_from_pb)
                .collect::<Vec<_>>(),
        )
        .filter(|v| !v.is_empty()),
        finalizers: Some(meta.finalizers).filter(|v| !v.is_empty()),
        managed_fields: Some(managed_fields).filter(|v| !v.is_empty()),
    })
}

fn owner_reference_to_pb(owner: &json::OwnerReference) -> pb::OwnerReference {
    pb::OwnerReference {
        api_version: Some(owner.api_version.clone()),
        kind: Some(owner.kind.clone()),
        name: Some(owner.name.clone()),
        uid: Some(owner.uid.clone()),
        controller: owner.controller,
        block_owner_deletion: owner.block_owner_deletion,
    }
}

fn owner_reference_from_pb(owner: pb::OwnerReference) -> json::OwnerReference {
    json::OwnerReference {
        api_version: owner.api_version.unwrap_or_default(),
        kind: owner.kind.unwrap_or_default(),
        name: owner.name.unwrap_or_default(),
        uid: owner.uid.unwrap_or_default(),
        controller: owner.controller,
        block_owner_deletion: owner.block_owner_deletion,
    }
}

/// managedFields: the field set (`fieldsV1`) is JSON on one side and that JSON's bytes on the
/// other.
fn managed_fields_to_pb(entry: &json::ManagedFieldsEntry) -> pb::ManagedFieldsEntry {
    pb::ManagedFieldsEntry {
        manager: set(&entry.manager),
        operation: set(&entry.operation),
        api_version: set(&entry.api_version),
        time: entry.time.as_ref().map(|t| time_to_pb(Some(t))),
        fields_type: set(&entry.fields_type),
        fields_v1: entry.fields_v1.as_ref().map(|fields| pb::FieldsV1 {
            // A serde_json::Value always serializes.
            raw: Some(serde_json::to_vec(&fields.0).unwrap_or_default()),
        }),
        subresource: set(&entry.subresource),
    }
}

fn managed_fields_from_pb(
    entry: pb::ManagedFieldsEntry,
) -> Result<json::ManagedFieldsEntry, ProtobufError> {
    let fields_v1 = match entry.fields_v1.and_then(|f| f.raw) {
        Some(raw) => Some(json::FieldsV1(serde_json::from_slice(&raw).map_err(
            |err| ProtobufError::Invalid {
                what: "metadata.managedFields[].fieldsV1",
                detail: err.to_string(),
            },
        )?)),
        None => None,
    };
    Ok(json::ManagedFieldsEntry {
        manager: non_empty(entry.manager),
        operation: non_empty(entry.operation),
        api_version: non_empty(entry.api_version),
        time: match entry.time {
            Some(time) => time_from_pb(Some(time))?,
            None => None,
        },
        fields_type: non_empty(entry.fields_type),
        fields_v1,
        subresource: non_empty(entry.subresource),
    })
}

/// metav1.ListMeta (`resourceVersion`, `continue`, `remainingItemCount`) as its message.
pub fn list_meta_to_pb(meta: &json::ListMeta) -> pb::ListMeta {
    pb::ListMeta {
        self_link: set(&meta.self_link),
        resource_version: set(&meta.resource_version),
        r#continue: set(&meta.continue_),
        remaining_item_count: meta.remaining_item_count,
    }
}

/// A metav1.ListMeta message as its JSON form; empty strings become absent fields.
pub fn list_meta_from_pb(meta: pb::ListMeta) -> json::ListMeta {
    json::ListMeta {
        self_link: non_empty(meta.self_link),
        resource_version: non_empty(meta.resource_version),
        continue_: non_empty(meta.r#continue),
        remaining_item_count: meta.remaining_item_count,
        shard_info: None,
    }
}

/// A JSON value of a meta type, typed.
pub fn from_value<T: serde::de::DeserializeOwned>(
    what: &'static str,
    value: &Value,
) -> Result<T, ProtobufError> {
    T::deserialize(value).map_err(ProtobufError::shape(what))
}

/// A typed meta value as JSON.
pub fn to_value<T: serde::Serialize>(
    what: &'static str,
    value: &T,
) -> Result<Value, ProtobufError> {
    serde_json::to_value(value).map_err(ProtobufError::shape(what))
}

/// A metav1.Status (a failure, or the Success of a delete) as a whole protobuf body.
pub fn status_body(status: &Value) -> Result<Vec<u8>, ProtobufError> {
    let status: json::Status = from_value("Status", status)?;
    let details = status.details.map(|d| pb::StatusDetails {
        name: set(&d.name),
        group: set(&d.group),
        kind: set(&d.kind),
        uid: set(&d.uid),
        causes: d
            .causes
            .into_iter()
            .flatten()
            .map(|c| pb::StatusCause {
                reason: set(&c.reason),
                message: set(&c.message),
                field: set(&c.field),
            })
            .collect(),
        retry_after_seconds: Some(d.retry_after_seconds.unwrap_or(0)),
    });
    let message = pb::Status {
        metadata: Some(list_meta_to_pb(&status.metadata)),
        status: set(&status.status),
        message: set(&status.message),
        reason: set(&status.reason),
        details,
        code: Some(status.code.unwrap_or(0)),
    };
    Ok(encode_body("v1", "Status", message.encode_to_vec()))
}

/// A protobuf metav1.Status message as JSON (for reading the cluster's answers).
pub fn status_from_pb(raw: &[u8]) -> Result<Value, ProtobufError> {
    let status = pb::Status::decode(raw).map_err(ProtobufError::malformed("Status"))?;
    let details = status.details.map(|d| json::StatusDetails {
        name: non_empty(d.name),
        group: non_empty(d.group),
        kind: non_empty(d.kind),
        uid: non_empty(d.uid),
        causes: Some(
            d.causes
                .into_iter()
                .map(|c| json::StatusCause {
                    reason: non_empty(c.reason),
                    message: non_empty(c.message),
                    field: non_empty(c.field),
                })
                .collect::<Vec<_>>(),
        )
        .filter(|c| !c.is_empty()),
        retry_after_seconds: d.retry_after_seconds.filter(|s| *s != 0),
    });
    let status = json::Status {
        metadata: list_meta_from_pb(status.metadata.unwrap_or_default()),
        status: non_empty(status.status),
        message: non_empty(status.message),
        reason: non_empty(status.reason),
        details,
        code: status.code.filter(|c| *c != 0),
    };
    let mut value = to_value("Status", &status)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("kind".into(), Value::from("Status"));
        map.insert("apiVersion".into(), Value::from("v1"));
    }
    Ok(value)
}

/// A protobuf metav1.DeleteOptions message as the JSON body a client would have sent.
pub fn delete_options_from_pb(raw: &[u8]) -> Result<Value, ProtobufError> {
    let options = pb::DeleteOptions::decode(raw)
        .map_err(ProtobufError::malformed_in("DeleteOptions", raw))?;
    let options = json::DeleteOptions {
        api_version: None,
        kind: None,
        dry_run: Some(options.dry_run).filter(|d| !d.is_empty()),
        grace_period_seconds: options.grace_period_seconds,
        ignore_store_read_error_with_cluster_breaking_potential: options
            .ignore_store_read_error_with_cluster_breaking_potential,
        orphan_dependents: options.orphan_dependents,
        preconditions: options.preconditions.map(|p| json::Preconditions {
            resource_version: p.resource_version,
            uid: p.uid,
        }),
        propagation_policy: options.propagation_policy,
    };
    to_value("DeleteOptions", &options)
}

/// metav1.PartialObjectMetadata (`{"metadata": …}` as the server writes it) as its message.
fn partial_object_metadata_to_pb(
    value: &Value,
) -> Result<pb::PartialObjectMetadata, ProtobufError> {
    let metadata: json::ObjectMeta = match value.get("metadata") {
        Some(metadata) => from_value("PartialObjectMetadata.metadata", metadata)?,
        None => json::ObjectMeta::default(),
    };
    Ok(pb::PartialObjectMetadata {
        metadata: Some(object_meta_to_pb(&metadata)),
    })
}

/// A list's `metadata` (ListMeta) and `items` of a JSON list.
fn list_parts<'a>(
    what: &'static str,
    list: &'a Value,
) -> Result<(json::ListMeta, &'a [Value]), ProtobufError> {
    let meta = match list.get("metadata") {
        Some(meta) => from_value(what, meta)?,
        None => json::ListMeta::default(),
    };
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    Ok((meta, items))
}

/// The message of a JSON value of a `meta.k8s.io` kind (PartialObjectMetadata or its list),
/// or `None` when the value is of another kind.
pub fn meta_message(value: &Value) -> Option<Result<Vec<u8>, ProtobufError>> {
    let api_version = value.get("apiVersion").and_then(Value::as_str)?;
    if !api_version.starts_with("meta.k8s.io/") {
        return None;
    }
    match value.get("kind").and_then(Value::as_str)? {
        "PartialObjectMetadata" => {
            Some(partial_object_metadata_to_pb(value).map(|m| m.encode_to_vec()))
        }
        "PartialObjectMetadataList" => Some((|| {
            let (meta, items) = list_parts("PartialObjectMetadataList.metadata", value)?;
            let list = pb::PartialObjectMetadataList {
                metadata: Some(list_meta_to_pb(&meta)),
                items: items
                    .iter()
                    .map(partial_object_metadata_to_pb)
                    .collect::<Result<_, _>>()?,
            };
            Ok(list.encode_to_vec())
        })()),
        _ => None,
    }
}

/// One event of a protobuf watch stream: a metav1.WatchEvent message (no magic, no envelope)
/// whose object is `object_body`, a whole protobuf body.
pub fn watch_event(event_type: &str, object_body: Vec<u8>) -> Vec<u8> {
    pb::WatchEvent {
        r#type: Some(event_type.to_string()),
        object: Some(RawExtension {
            raw: Some(object_body),
        }),
    }
    .encode_to_vec()
}

/// A watch event read from a protobuf stream: its type and its object's whole body.
pub fn decode_watch_event(frame: &[u8]) -> Result<(String, Vec<u8>), ProtobufError> {
    let event = pb::WatchEvent::decode(frame).map_err(ProtobufError::malformed("WatchEvent"))?;
    Ok((
        event.r#type.unwrap_or_default(),
        event.object.and_then(|o| o.raw).unwrap_or_default(),
    ))
}

/// What a metadata-only read of the cluster gives per object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectKey {
    /// The namespace; `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its resourceVersion.
    pub resource_version: String,
    /// Its annotations; empty when it has none.
    pub annotations: BTreeMap<String, String>,
}

fn object_key(metadata: Option<pb::ObjectMeta>) -> ObjectKey {
    let metadata = metadata.unwrap_or_default();
    ObjectKey {
        namespace: non_empty(metadata.namespace),
        name: metadata.name.unwrap_or_default(),
        uid: metadata.uid.unwrap_or_default(),
        resource_version: metadata.resource_version.unwrap_or_default(),
        annotations: metadata.annotations,
    }
}

/// A PartialObjectMetadata message: the object's key.
pub fn decode_partial_object_metadata(raw: &[u8]) -> Result<ObjectKey, ProtobufError> {
    let object = pb::PartialObjectMetadata::decode(raw)
        .map_err(ProtobufError::malformed("PartialObjectMetadata"))?;
    Ok(object_key(object.metadata))
}

/// A PartialObjectMetadataList message: its ListMeta and each item's key.
pub fn decode_partial_object_metadata_list(
    raw: &[u8],
) -> Result<(json::ListMeta, Vec<ObjectKey>), ProtobufError> {
    let list = pb::PartialObjectMetadataList::decode(raw)
        .map_err(ProtobufError::malformed("PartialObjectMetadataList"))?;
    Ok((
        list_meta_from_pb(list.metadata.unwrap_or_default()),
        list.items
            .into_iter()
            .map(|i| object_key(i.metadata))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta() -> json::ObjectMeta {
        serde_json::from_value(json!({
            "name": "m1",
            "uid": "8d3f6c1e-0000-4000-8000-000000000001",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-11-22T11:12:24Z",
            "labels": {"b": "2", "a": "1"},
            "annotations": {"note": "x"},
            "finalizers": ["example.test/keep"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u", "controller": true}],
            "managedFields": [{
                "manager": "kubectl", "operation": "Update", "apiVersion": "storagemigration.k8s.io/v1",
                "time": "2026-11-22T11:12:24Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:resource": {}}}, "subresource": "status"
            }]
        }))
        .expect("ObjectMeta")
    }

    #[test]
    fn object_meta_round_trips() {
        let original = meta();
        let bytes = object_meta_to_pb(&original).encode_to_vec();
        let back = object_meta_from_pb(pb::ObjectMeta::decode(&bytes[..]).expect("decodes"))
            .expect("converts");
        assert_eq!(back, original);
    }

    #[test]
    fn go_plain_fields_are_written_even_when_empty() {
        let message = object_meta_to_pb(&json::ObjectMeta::default());
        assert_eq!(message.name.as_deref(), Some(""));
        assert_eq!(message.generation, Some(0));
        assert_eq!(message.creation_timestamp, Some(pb::Time::default()));
        assert_eq!(message.deletion_timestamp, None);
        // Read back, Go's zero values are absent fields.
        let back = object_meta_from_pb(message).expect("converts");
        assert_eq!(back, json::ObjectMeta::default());
    }

    #[test]
    fn a_time_keeps_its_nanoseconds_and_the_zero_time_is_empty() {
        let at: jiff::Timestamp = "2026-11-22T11:12:24.5Z".parse().expect("time");
        let message = time_to_pb(Some(&json::Time(at)));
        assert_eq!(message.nanos, Some(500_000_000));
        assert_eq!(
            time_from_pb(Some(message)).expect("in range"),
            Some(json::Time(at))
        );
        assert_eq!(time_from_pb(None).expect("zero"), None);
        let out_of_range = pb::Time {
            seconds: Some(i64::MAX),
            nanos: Some(0),
        };
        assert!(time_from_pb(Some(out_of_range)).is_err());
    }

    #[test]
    fn managed_fields_that_are_not_json_are_an_error() {
        let mut message = object_meta_to_pb(&meta());
        message.managed_fields[0].fields_v1 = Some(pb::FieldsV1 {
            raw: Some(b"{not json".to_vec()),
        });
        assert!(matches!(
            object_meta_from_pb(message),
            Err(ProtobufError::Invalid { .. })
        ));
    }

    #[test]
    fn a_status_round_trips_through_its_body() {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "storageversionmigrations.storagemigration.k8s.io \"x\" is invalid: spec.resource.resource: Required value",
            "reason": "Invalid",
            "details": {"name": "x", "group": "storagemigration.k8s.io", "kind": "StorageVersionMigration",
                        "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.resource.resource"}]},
            "code": 422
        });
        let body = status_body(&status).expect("encodes");
        let envelope = super::super::decode_body(&body).expect("envelope");
        assert_eq!(
            (envelope.api_version.as_str(), envelope.kind.as_str()),
            ("v1", "Status")
        );
        let back = status_from_pb(&envelope.raw).expect("decodes");
        assert_eq!(back["reason"], "Invalid");
        assert_eq!(back["code"], 422);
        assert_eq!(back["details"], status["details"]);
        assert_eq!(back["message"], status["message"]);
    }

    #[test]
    fn delete_options_become_the_json_body() {
        let message = pb::DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(pb::Preconditions {
                uid: Some("u-1".into()),
                resource_version: None,
            }),
            propagation_policy: Some("Background".into()),
            dry_run: vec!["All".into()],
            ..Default::default()
        };
        let value = delete_options_from_pb(&message.encode_to_vec()).expect("decodes");
        assert_eq!(
            value,
            json!({"dryRun": ["All"], "gracePeriodSeconds": 0, "preconditions": {"uid": "u-1"}, "propagationPolicy": "Background"})
        );
        assert!(delete_options_from_pb(&[0x0a, 0x05, 0x01]).is_err());
    }

    #[test]
    fn metadata_lists_round_trip_to_object_keys() {
        let list = json!({
            "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": "9", "continue": "tok", "remainingItemCount": 4},
            "items": [
                {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a", "namespace": "demo", "resourceVersion": "7"}},
                {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "b", "resourceVersion": "8"}}
            ]
        });
        let raw = meta_message(&list).expect("a meta kind").expect("encodes");
        let (meta, keys) = decode_partial_object_metadata_list(&raw).expect("decodes");
        assert_eq!(meta.continue_.as_deref(), Some("tok"));
        assert_eq!(meta.remaining_item_count, Some(4));
        assert_eq!(meta.resource_version.as_deref(), Some("9"));
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].namespace.as_deref(), Some("demo"));
        assert_eq!(keys[1].namespace, None);
        assert_eq!(keys[1].resource_version, "8");
        assert!(meta_message(&json!({"apiVersion": "v1", "kind": "ConfigMap"})).is_none());
    }

    #[test]
    fn a_watch_event_carries_a_whole_body() {
        let object = encode_body("meta.k8s.io/v1", "PartialObjectMetadata", vec![10, 0]);
        let frame = watch_event("ADDED", object.clone());
        let (event_type, body) = decode_watch_event(&frame).expect("decodes");
        assert_eq!(event_type, "ADDED");
        assert_eq!(body, object);
    }
}
