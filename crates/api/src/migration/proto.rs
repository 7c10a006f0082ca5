//! StorageVersionMigration in protobuf: upstream's messages of each served version, between
//! them and the served JSON shapes of `versions`.
//!
//! The messages are declared with prost's derive, field for field and number for number as
//! upstream's `generated.proto` (k8s.io/api/storagemigration/v1alpha1 of Kubernetes 1.30–1.34,
//! v1beta1 of 1.35+, v1 of 1.37+; v1beta1 and v1 are the same messages), over k8s-pb's
//! `meta.k8s.io/v1` messages. They are declared here rather than taken from k8s-pb because
//! k8s-pb 0.9 has v1beta1 only, and because each status carries one field of ours:
//! `status.progress` (JSON everywhere) travels as field [`PROGRESS_FIELD`], a number far from
//! upstream's, which any other decoder skips as an unknown field. A test holds the v1beta1
//! messages wire-compatible with k8s-pb's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta_pb;
use prost::Message;
use serde::Deserialize;
use serde_json::Value;

use super::versions::{
    AlphaCondition, AlphaObject, AlphaResource, AlphaSpec, AlphaStatus, GaCondition, GaObject,
    GaSpec, GaStatus, GroupResource,
};
use super::{KIND, MigrationProgress, ObjectFailure};
use crate::served::encode_body;
use svm_registry::protobuf::meta::{
    list_meta_to_pb, object_meta_from_pb, object_meta_to_pb, time_from_pb, time_to_pb,
};
use svm_registry::protobuf::{ProtobufError, ProtobufKind};

/// The field number of our `status.progress` in every version's status message.
pub const PROGRESS_FIELD: u32 = 1000;

const LIST_KIND: &str = "StorageVersionMigrationList";

/// v1beta1 and v1: `k8s.io.api.storagemigration.v1beta1.StorageVersionMigration`.
#[derive(Clone, PartialEq, Message)]
pub(super) struct Migration {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta_pb::ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<Spec>,
    #[prost(message, optional, tag = "3")]
    status: Option<Status>,
}

#[derive(Clone, PartialEq, Message)]
struct MigrationList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta_pb::ListMeta>,
    #[prost(message, repeated, tag = "2")]
    items: Vec<Migration>,
}

#[derive(Clone, PartialEq, Message)]
struct Spec {
    #[prost(message, optional, tag = "1")]
    resource: Option<meta_pb::GroupResource>,
}

#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(message, repeated, tag = "1")]
    conditions: Vec<meta_pb::Condition>,
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
    #[prost(message, optional, tag = "1000")]
    progress: Option<Progress>,
}

/// v1alpha1: `k8s.io.api.storagemigration.v1alpha1.StorageVersionMigration`.
#[derive(Clone, PartialEq, Message)]
struct AlphaMigration {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta_pb::ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<AlphaSpecPb>,
    #[prost(message, optional, tag = "3")]
    status: Option<AlphaStatusPb>,
}

#[derive(Clone, PartialEq, Message)]
struct AlphaMigrationList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta_pb::ListMeta>,
    #[prost(message, repeated, tag = "2")]
    items: Vec<AlphaMigration>,
}

#[derive(Clone, PartialEq, Message)]
struct AlphaSpecPb {
    #[prost(message, optional, tag = "1")]
    resource: Option<GroupVersionResource>,
    #[prost(string, optional, tag = "2")]
    continue_token: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct GroupVersionResource {
    #[prost(string, optional, tag = "1")]
    group: Option<String>,
    #[prost(string, optional, tag = "2")]
    version: Option<String>,
    #[prost(string, optional, tag = "3")]
    resource: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct AlphaStatusPb {
    #[prost(message, repeated, tag = "1")]
    conditions: Vec<MigrationCondition>,
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
    #[prost(message, optional, tag = "1000")]
    progress: Option<Progress>,
}

#[derive(Clone, PartialEq, Message)]
struct MigrationCondition {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
    #[prost(string, optional, tag = "2")]
    status: Option<String>,
    #[prost(message, optional, tag = "3")]
    last_update_time: Option<meta_pb::Time>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(string, optional, tag = "5")]
    message: Option<String>,
}

/// Ours: `status.progress`.
#[derive(Clone, PartialEq, Message)]
struct Progress {
    #[prost(int64, optional, tag = "1")]
    migrated_objects: Option<i64>,
    #[prost(int64, optional, tag = "2")]
    remaining_objects: Option<i64>,
    #[prost(string, optional, tag = "3")]
    continue_token: Option<String>,
    #[prost(string, optional, tag = "4")]
    migrated_through: Option<String>,
    #[prost(message, optional, tag = "5")]
    last_checkpoint_time: Option<meta_pb::Time>,
    #[prost(int64, optional, tag = "6")]
    failed_objects: Option<i64>,
    #[prost(message, repeated, tag = "7")]
    failures: Vec<ObjectFailurePb>,
}

/// Ours: one of `status.progress.failures`.
#[derive(Clone, PartialEq, Message)]
struct ObjectFailurePb {
    #[prost(string, optional, tag = "1")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
    #[prost(int32, optional, tag = "3")]
    code: Option<i32>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(string, optional, tag = "5")]
    message: Option<String>,
}

/// The protobuf messages of StorageVersionMigration, for the store's strategy.
pub struct MigrationProtobuf;

impl ProtobufKind for MigrationProtobuf {
    fn encode(&self, version: &str, value: &Value) -> Result<Vec<u8>, ProtobufError> {
        let is_list = value.get("kind").and_then(Value::as_str) == Some(LIST_KIND);
        match (version, is_list) {
            ("v1alpha1", false) => Ok(alpha_to_pb(value)?.encode_to_vec()),
            ("v1alpha1", true) => Ok(AlphaMigrationList {
                metadata: Some(list_meta(value)?),
                items: items(value).map(alpha_to_pb).collect::<Result<_, _>>()?,
            }
            .encode_to_vec()),
            (_, false) => Ok(ga_to_pb(value)?.encode_to_vec()),
            (_, true) => Ok(MigrationList {
                metadata: Some(list_meta(value)?),
                items: items(value).map(ga_to_pb).collect::<Result<_, _>>()?,
            }
            .encode_to_vec()),
        }
    }

    fn decode(&self, version: &str, raw: &[u8]) -> Result<Value, ProtobufError> {
        let malformed = ProtobufError::malformed_in("StorageVersionMigration", raw);
        match version {
            "v1alpha1" => {
                let message = AlphaMigration::decode(raw).map_err(malformed)?;
                served_json(version, &alpha_from_pb(message)?)
            }
            _ => {
                let message = Migration::decode(raw).map_err(malformed)?;
                served_json(version, &ga_from_pb(message)?)
            }
        }
    }
}

/// The served JSON, with apiVersion and kind.
fn served_json<T: serde::Serialize>(version: &str, object: &T) -> Result<Value, ProtobufError> {
    encode_body(KIND, version, object).map_err(|err| ProtobufError::Invalid {
        what: "StorageVersionMigration",
        detail: err.to_string(),
    })
}

fn list_meta(list: &Value) -> Result<meta_pb::ListMeta, ProtobufError> {
    let meta = match list.get("metadata") {
        Some(meta) => Deserialize::deserialize(meta)
            .map_err(ProtobufError::shape("StorageVersionMigrationList.metadata"))?,
        None => Default::default(),
    };
    Ok(list_meta_to_pb(&meta))
}

fn items(list: &Value) -> impl Iterator<Item = &Value> {
    list.get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn metadata_to_pb(metadata: &ObjectMeta) -> Option<meta_pb::ObjectMeta> {
    Some(object_meta_to_pb(metadata))
}

fn ga_to_pb(value: &Value) -> Result<Migration, ProtobufError> {
    let object: GaObject =
        Deserialize::deserialize(value).map_err(ProtobufError::shape("StorageVersionMigration"))?;
    Ok(Migration {
        metadata: metadata_to_pb(&object.metadata),
        spec: Some(Spec {
            resource: Some(meta_pb::GroupResource {
                group: Some(object.spec.resource.group),
                resource: Some(object.spec.resource.resource),
            }),
        }),
        status: Some(Status {
            conditions: object
                .status
                .conditions
                .iter()
                .map(ga_condition_to_pb)
                .collect(),
            resource_version: Some(object.status.resource_version),
            progress: object.status.progress.as_ref().map(progress_to_pb),
        }),
    })
}

fn ga_from_pb(message: Migration) -> Result<GaObject, ProtobufError> {
    let spec = message.spec.unwrap_or_default();
    let resource = spec.resource.unwrap_or_default();
    let status = message.status.unwrap_or_default();
    Ok(GaObject {
        metadata: object_meta_from_pb(message.metadata.unwrap_or_default())?,
        spec: GaSpec {
            resource: GroupResource {
                group: resource.group.unwrap_or_default(),
                resource: resource.resource.unwrap_or_default(),
            },
        },
        status: GaStatus {
            conditions: status
                .conditions
                .into_iter()
                .map(ga_condition_from_pb)
                .collect::<Result<_, _>>()?,
            resource_version: status.resource_version.unwrap_or_default(),
            progress: status.progress.map(progress_from_pb).transpose()?,
        },
    })
}

fn ga_condition_to_pb(condition: &GaCondition) -> meta_pb::Condition {
    meta_pb::Condition {
        r#type: Some(condition.type_.clone()),
        status: Some(condition.status.clone()),
        observed_generation: Some(condition.observed_generation.unwrap_or(0)),
        last_transition_time: Some(time_to_pb(condition.last_transition_time.as_ref())),
        reason: Some(condition.reason.clone()),
        message: Some(condition.message.clone()),
    }
}

fn ga_condition_from_pb(condition: meta_pb::Condition) -> Result<GaCondition, ProtobufError> {
    Ok(GaCondition {
        type_: condition.r#type.unwrap_or_default(),
        status: condition.status.unwrap_or_default(),
        observed_generation: condition.observed_generation.filter(|g| *g != 0),
        last_transition_time: time_from_pb(condition.last_transition_time)?,
        reason: condition.reason.unwrap_or_default(),
        message: condition.message.unwrap_or_default(),
    })
}

fn alpha_to_pb(value: &Value) -> Result<AlphaMigration, ProtobufError> {
    let object: AlphaObject =
        Deserialize::deserialize(value).map_err(ProtobufError::shape("StorageVersionMigration"))?;
    let resource = object.spec.resource;
    Ok(AlphaMigration {
        metadata: metadata_to_pb(&object.metadata),
        spec: Some(AlphaSpecPb {
            resource: Some(GroupVersionResource {
                group: Some(resource.group),
                version: Some(resource.version),
                resource: Some(resource.resource),
            }),
            continue_token: Some(object.spec.continue_token),
        }),
        status: Some(AlphaStatusPb {
            conditions: object
                .status
                .conditions
                .iter()
                .map(|c| MigrationCondition {
                    r#type: Some(c.type_.clone()),
                    status: Some(c.status.clone()),
                    last_update_time: Some(time_to_pb(c.last_update_time.as_ref())),
                    reason: Some(c.reason.clone()),
                    message: Some(c.message.clone()),
                })
                .collect(),
            resource_version: Some(object.status.resource_version),
            progress: object.status.progress.as_ref().map(progress_to_pb),
        }),
    })
}

fn alpha_from_pb(message: AlphaMigration) -> Result<AlphaObject, ProtobufError> {
    let spec = message.spec.unwrap_or_default();
    let resource = spec.resource.unwrap_or_default();
    let status = message.status.unwrap_or_default();
    Ok(AlphaObject {
        metadata: object_meta_from_pb(message.metadata.unwrap_or_default())?,
        spec: AlphaSpec {
            resource: AlphaResource {
                group: resource.group.unwrap_or_default(),
                version: resource.version.unwrap_or_default(),
                resource: resource.resource.unwrap_or_default(),
            },
            continue_token: spec.continue_token.unwrap_or_default(),
        },
        status: AlphaStatus {
            conditions: status
                .conditions
                .into_iter()
                .map(|c| {
                    Ok(AlphaCondition {
                        type_: c.r#type.unwrap_or_default(),
                        status: c.status.unwrap_or_default(),
                        last_update_time: time_from_pb(c.last_update_time)?,
                        reason: c.reason.unwrap_or_default(),
                        message: c.message.unwrap_or_default(),
                    })
                })
                .collect::<Result<_, ProtobufError>>()?,
            resource_version: status.resource_version.unwrap_or_default(),
            progress: status.progress.map(progress_from_pb).transpose()?,
        },
    })
}

fn progress_to_pb(progress: &MigrationProgress) -> Progress {
    Progress {
        migrated_objects: Some(progress.migrated_objects),
        remaining_objects: progress.remaining_objects,
        continue_token: Some(progress.continue_token.clone()),
        migrated_through: Some(progress.migrated_through.clone()),
        last_checkpoint_time: progress
            .last_checkpoint_time
            .as_ref()
            .map(|t| time_to_pb(Some(t))),
        failed_objects: Some(progress.failed_objects),
        failures: progress
            .failures
            .iter()
            .map(|f| ObjectFailurePb {
                namespace: Some(f.namespace.clone()),
                name: Some(f.name.clone()),
                code: Some(f.code),
                reason: Some(f.reason.clone()),
                message: Some(f.message.clone()),
            })
            .collect(),
    }
}

fn progress_from_pb(progress: Progress) -> Result<MigrationProgress, ProtobufError> {
    Ok(MigrationProgress {
        migrated_objects: progress.migrated_objects.unwrap_or(0),
        remaining_objects: progress.remaining_objects,
        continue_token: progress.continue_token.unwrap_or_default(),
        migrated_through: progress.migrated_through.unwrap_or_default(),
        last_checkpoint_time: match progress.last_checkpoint_time {
            Some(time) => time_from_pb(Some(time))?,
            None => None,
        },
        failed_objects: progress.failed_objects.unwrap_or(0),
        failures: progress
            .failures
            .into_iter()
            .map(|f| ObjectFailure {
                namespace: f.namespace.unwrap_or_default(),
                name: f.name.unwrap_or_default(),
                code: f.code.unwrap_or(0),
                reason: f.reason.unwrap_or_default(),
                message: f.message.unwrap_or_default(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests;
