//! The served shapes of StorageVersionMigration, field for field as upstream published them
//! (k8s.io/api/storagemigration/{v1alpha1,v1beta1,v1}), plus our `status.progress`, and the
//! lossless conversions to and from the hub.
//!
//! What a version cannot hold travels in annotations (the upstream convention for lossy
//! conversions): v1alpha1's `spec.resource.version` and `spec.continueToken` in v1beta1/v1, and
//! metav1.Condition's `observedGeneration` in v1alpha1. Decoding any version strips these
//! reserved annotations, so the hub never carries them and a client never sees one in the
//! version that has the real field.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    GroupVersionResource, KIND, MigrationCondition, MigrationProgress, MigrationSpec,
    MigrationStatus, StorageVersionMigration,
};
use crate::served::{decode_body, encode_body, unknown_version};
use svm_registry::{ApiError, ApiResult};

/// Holds v1alpha1's `spec.continueToken` on an object read in v1beta1 or v1.
pub use crate::names::CONVERSION_CONTINUE_TOKEN_ANNOTATION as ANNOTATION_CONTINUE_TOKEN;
/// Holds the conditions' `observedGeneration`s on an object read in v1alpha1: a JSON object from
/// condition type to generation.
pub use crate::names::CONVERSION_OBSERVED_GENERATIONS_ANNOTATION as ANNOTATION_OBSERVED_GENERATIONS;
/// Holds v1alpha1's `spec.resource.version` on an object read in v1beta1 or v1.
pub use crate::names::CONVERSION_RESOURCE_VERSION_ANNOTATION as ANNOTATION_RESOURCE_VERSION;
const RESERVED: [&str; 3] = [
    ANNOTATION_RESOURCE_VERSION,
    ANNOTATION_CONTINUE_TOKEN,
    ANNOTATION_OBSERVED_GENERATIONS,
];

// ---- v1alpha1 ----

#[derive(Serialize, Deserialize)]
pub(super) struct AlphaObject {
    #[serde(default)]
    pub(super) metadata: ObjectMeta,
    #[serde(default)]
    pub(super) spec: AlphaSpec,
    #[serde(default)]
    pub(super) status: AlphaStatus,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AlphaSpec {
    #[serde(default)]
    pub(super) resource: AlphaResource,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) continue_token: String,
}

#[derive(Default, Serialize, Deserialize)]
pub(super) struct AlphaResource {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) resource: String,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AlphaStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) conditions: Vec<AlphaCondition>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) resource_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) progress: Option<MigrationProgress>,
}

/// upstream v1alpha1 MigrationCondition.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AlphaCondition {
    #[serde(rename = "type")]
    pub(super) type_: String,
    pub(super) status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) message: String,
}

// ---- v1beta1 and v1 (the same shape) ----

#[derive(Serialize, Deserialize)]
pub(super) struct GaObject {
    #[serde(default)]
    pub(super) metadata: ObjectMeta,
    #[serde(default)]
    pub(super) spec: GaSpec,
    #[serde(default)]
    pub(super) status: GaStatus,
}

#[derive(Default, Serialize, Deserialize)]
pub(super) struct GaSpec {
    #[serde(default)]
    pub(super) resource: GroupResource,
}

/// metav1.GroupResource: both fields always present on the wire.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct GroupResource {
    #[serde(default)]
    pub(super) group: String,
    #[serde(default)]
    pub(super) resource: String,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GaStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) conditions: Vec<GaCondition>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) resource_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) progress: Option<MigrationProgress>,
}

/// metav1.Condition, in its field order. A zero lastTransitionTime is `null`, as Go writes it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GaCondition {
    #[serde(rename = "type")]
    pub(super) type_: String,
    pub(super) status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) observed_generation: Option<i64>,
    #[serde(default)]
    pub(super) last_transition_time: Option<Time>,
    #[serde(default)]
    pub(super) reason: String,
    #[serde(default)]
    pub(super) message: String,
}

/// Take the reserved annotations out of `metadata`, returning them under their names. An
/// empty annotation map is dropped (Go omits empty maps), so the hub never holds `Some({})`.
/// Their old `storagemigration.k8s.io/` spellings are taken too (the new one wins where both
/// are set): a client that read a migration from an older server and writes it back keeps
/// what they carry, and the hub never holds them either.
fn take_reserved(metadata: &mut ObjectMeta) -> BTreeMap<String, String> {
    let mut taken = BTreeMap::new();
    if let Some(annotations) = metadata.annotations.as_mut() {
        for key in RESERVED {
            if let Some(value) = annotations.remove(key) {
                taken.insert(key.to_string(), value);
            }
        }
        for renamed in &crate::names::CONVERSION_RENAMED {
            if let Some(value) = annotations.remove(renamed.old) {
                taken.entry(renamed.new.to_string()).or_insert(value);
            }
        }
        if annotations.is_empty() {
            metadata.annotations = None;
        }
    }
    taken
}

fn put_annotation(metadata: &mut ObjectMeta, key: &str, value: String) {
    metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value);
}

/// Served JSON of `version` -> hub.
pub fn decode(version: &str, value: Value) -> ApiResult<StorageVersionMigration> {
    match version {
        "v1alpha1" => decode_alpha(value),
        "v1beta1" | "v1" => decode_ga(version, value),
        other => Err(unknown_version(KIND, other)),
    }
}

/// v1alpha1 -> hub: conditions' observedGeneration from their annotation.
fn decode_alpha(value: Value) -> ApiResult<StorageVersionMigration> {
    let version = "v1alpha1";
    let mut obj: AlphaObject = decode_body(KIND, version, value)?;
    let reserved = take_reserved(&mut obj.metadata);
    let generations: BTreeMap<String, i64> = reserved
        .get(ANNOTATION_OBSERVED_GENERATIONS)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let conditions = obj
        .status
        .conditions
        .into_iter()
        .map(|c| MigrationCondition {
            observed_generation: generations.get(&c.type_).copied(),
            type_: c.type_,
            status: c.status,
            last_transition_time: c.last_update_time,
            reason: c.reason,
            message: c.message,
        })
        .collect();
    Ok(StorageVersionMigration {
        metadata: obj.metadata,
        spec: MigrationSpec {
            resource: GroupVersionResource {
                group: obj.spec.resource.group,
                version: obj.spec.resource.version,
                resource: obj.spec.resource.resource,
            },
            continue_token: obj.spec.continue_token,
        },
        status: MigrationStatus {
            conditions,
            resource_version: obj.status.resource_version,
            progress: obj.status.progress,
        },
    })
}

/// v1beta1 or v1 -> hub: the resource's version and the continue token from their
/// annotations.
fn decode_ga(version: &str, value: Value) -> ApiResult<StorageVersionMigration> {
    let mut obj: GaObject = decode_body(KIND, version, value)?;
    let mut reserved = take_reserved(&mut obj.metadata);
    let conditions = obj
        .status
        .conditions
        .into_iter()
        .map(|c| MigrationCondition {
            type_: c.type_,
            status: c.status,
            last_transition_time: c.last_transition_time,
            reason: c.reason,
            message: c.message,
            observed_generation: c.observed_generation,
        })
        .collect();
    Ok(StorageVersionMigration {
        metadata: obj.metadata,
        spec: MigrationSpec {
            resource: GroupVersionResource {
                group: obj.spec.resource.group,
                version: reserved
                    .remove(ANNOTATION_RESOURCE_VERSION)
                    .unwrap_or_default(),
                resource: obj.spec.resource.resource,
            },
            continue_token: reserved
                .remove(ANNOTATION_CONTINUE_TOKEN)
                .unwrap_or_default(),
        },
        status: MigrationStatus {
            conditions,
            resource_version: obj.status.resource_version,
            progress: obj.status.progress,
        },
    })
}

/// Hub -> served JSON of `version`.
pub fn encode(version: &str, svm: &StorageVersionMigration) -> ApiResult<Value> {
    match version {
        "v1alpha1" => encode_alpha(svm),
        "v1beta1" | "v1" => encode_ga(version, svm),
        other => Err(unknown_version(KIND, other)),
    }
}

/// Hub -> v1alpha1: conditions' observedGeneration kept in an annotation.
fn encode_alpha(svm: &StorageVersionMigration) -> ApiResult<Value> {
    let version = "v1alpha1";
    let mut metadata = svm.metadata.clone();
    let generations: BTreeMap<&str, i64> = svm
        .status
        .conditions
        .iter()
        .filter_map(|c| Some((c.type_.as_str(), c.observed_generation?)))
        .collect();
    if !generations.is_empty() {
        let text =
            serde_json::to_string(&generations).map_err(|e| ApiError::Internal(e.to_string()))?;
        put_annotation(&mut metadata, ANNOTATION_OBSERVED_GENERATIONS, text);
    }
    let obj = AlphaObject {
        metadata,
        spec: AlphaSpec {
            resource: AlphaResource {
                group: svm.spec.resource.group.clone(),
                version: svm.spec.resource.version.clone(),
                resource: svm.spec.resource.resource.clone(),
            },
            continue_token: svm.spec.continue_token.clone(),
        },
        status: AlphaStatus {
            conditions: svm
                .status
                .conditions
                .iter()
                .map(|c| AlphaCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    last_update_time: c.last_transition_time.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect(),
            resource_version: svm.status.resource_version.clone(),
            progress: svm.status.progress.clone(),
        },
    };
    encode_body(KIND, version, &obj)
}

/// Hub -> v1beta1 or v1: the resource's version and the continue token kept in annotations.
fn encode_ga(version: &str, svm: &StorageVersionMigration) -> ApiResult<Value> {
    let mut metadata = svm.metadata.clone();
    if !svm.spec.resource.version.is_empty() {
        let v = svm.spec.resource.version.clone();
        put_annotation(&mut metadata, ANNOTATION_RESOURCE_VERSION, v);
    }
    if !svm.spec.continue_token.is_empty() {
        let token = svm.spec.continue_token.clone();
        put_annotation(&mut metadata, ANNOTATION_CONTINUE_TOKEN, token);
    }
    let obj = GaObject {
        metadata,
        spec: GaSpec {
            resource: GroupResource {
                group: svm.spec.resource.group.clone(),
                resource: svm.spec.resource.resource.clone(),
            },
        },
        status: GaStatus {
            conditions: svm
                .status
                .conditions
                .iter()
                .map(|c| GaCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    observed_generation: c.observed_generation,
                    last_transition_time: c.last_transition_time.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect(),
            resource_version: svm.status.resource_version.clone(),
            progress: svm.status.progress.clone(),
        },
    };
    encode_body(KIND, version, &obj)
}

#[cfg(test)]
pub(crate) mod tests;
