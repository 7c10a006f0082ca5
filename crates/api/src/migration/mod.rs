//! StorageVersionMigration: the internal (hub) form. Served as v1alpha1 (the 1.30 shape),
//! v1beta1 and v1 (the 1.35+ shape); see `versions` for the conversions.

pub mod proto;
pub mod schema;
pub mod strategy;
pub mod versions;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

pub use strategy::MigrationStrategy;

pub const KIND: &str = "StorageVersionMigration";

/// Condition types (upstream `MigrationConditionType`).
pub const RUNNING: &str = "Running";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

/// The internal form: a superset of every served version, so conversion loses nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageVersionMigration {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MigrationSpec,
    /// Empty until the migrator (or a client through `/status`) reports.
    #[serde(default)]
    pub status: MigrationStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    #[serde(default)]
    pub resource: GroupVersionResource,
    /// v1alpha1's `spec.continueToken`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
}

/// v1alpha1 names a version too; v1beta1 and v1 only group and resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MigrationCondition>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Ours: the migrator's progress (no upstream field exists for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<MigrationProgress>,
}

/// A condition with every field either shape has (metav1.Condition ∪ MigrationCondition).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    /// metav1.Condition.lastTransitionTime = MigrationCondition.lastUpdateTime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Migration progress, under `status.progress` in every served version. Written by the
/// migrator after each page, so a restarted server resumes at the checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationProgress {
    /// Objects rewritten (or found already rewritten or deleted) so far.
    #[serde(default)]
    pub migrated_objects: i64,
    /// The target apiserver's estimate of objects not yet listed (remainingItemCount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_objects: Option<i64>,
    /// The continue token of the next page to migrate: the resume point.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
    /// The resume point of a migration that read the resource as one watch-list stream:
    /// every object whose key (`namespace/name`, or `name`) sorts at or before this one has
    /// been migrated.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub migrated_through: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_time: Option<Time>,
}

impl StorageVersionMigration {
    /// The condition of `type_` that is True, if any.
    pub fn condition_true(&self, type_: &str) -> Option<&MigrationCondition> {
        self.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    }

    /// `Succeeded`, `Failed`, `Running` (whichever is True, in that order), else `Pending`.
    pub fn phase(&self) -> &'static str {
        [SUCCEEDED, FAILED, RUNNING]
            .into_iter()
            .find(|t| self.condition_true(t).is_some())
            .unwrap_or("Pending")
    }
}

impl k8s_openapi::Resource for StorageVersionMigration {
    const API_VERSION: &'static str = "storagemigration.k8s.io/v1";
    const GROUP: &'static str = super::GROUP;
    const KIND: &'static str = KIND;
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "storageversionmigrations";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for StorageVersionMigration {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
