//! StorageVersionMigration: the internal (hub) form. Served as v1alpha1 (the 1.30 shape),
//! v1beta1 and v1 (the 1.35+ shape); see `versions` for the conversions.

pub mod proto;
pub mod schema;
pub mod strategy;
pub mod versions;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

pub use strategy::MigrationStrategy;

/// The kind's name.
pub const KIND: &str = "StorageVersionMigration";

/// Condition types (upstream `MigrationConditionType`).
pub const RUNNING: &str = "Running";
/// The migration is done: every object was rewritten (or found rewritten or deleted).
pub const SUCCEEDED: &str = "Succeeded";
/// The migration stopped for good.
pub const FAILED: &str = "Failed";
/// Ours: True when the migration finished (Succeeded) with objects it could not migrate, under
/// the [`ON_OBJECT_FAILURE_ANNOTATION`] policy `Skip`; its message names them. A migration with
/// it True did not migrate every object, so the resource is not safe.
pub const OBJECTS_SKIPPED: &str = "ObjectsSkipped";

/// The refused-object policy and its values, owned by [`crate::names`] with our other names;
/// here too, where the migration's readers look for it.
pub use crate::names::{ON_OBJECT_FAILURE_ANNOTATION, ON_OBJECT_FAILURE_VALUES};
/// How many refused objects `status.progress.failures` names (the count goes on).
pub const MAX_NAMED_FAILURES: usize = 10;

/// The internal form: a superset of every served version, so conversion loses nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageVersionMigration {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What to migrate.
    #[serde(default)]
    pub spec: MigrationSpec,
    /// Empty until the migrator (or a client through `/status`) reports.
    #[serde(default)]
    pub status: MigrationStatus,
}

/// What a migration migrates: the resource, and v1alpha1's continue token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    /// The resource whose stored objects are rewritten; immutable.
    #[serde(default)]
    pub resource: GroupVersionResource,
    /// v1alpha1's `spec.continueToken`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
}

/// v1alpha1 names a version too; v1beta1 and v1 only group and resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionResource {
    /// The API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// v1alpha1's `spec.resource.version`; empty when a version without it wrote the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The plural resource name, e.g. `deployments`.
    #[serde(default)]
    pub resource: String,
}

/// How far a migration is, as the migrator (or a client through `/status`) reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    /// `Running`, `Succeeded`, `Failed`; at most one of each type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MigrationCondition>,
    /// The resourceVersion of the list the migration started from (upstream's
    /// `status.resourceVersion`); empty until the migrator has read its first page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Ours: the migrator's progress (no upstream field exists for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<MigrationProgress>,
}

impl MigrationStatus {
    /// Sets condition `type_` (metav1.Condition semantics: lastTransitionTime moves only when
    /// the status changes).
    pub fn set_condition(
        &mut self,
        type_: &str,
        value: bool,
        reason: &str,
        message: &str,
        generation: Option<i64>,
    ) {
        let value = if value { "True" } else { "False" };
        let now = Some(svm_registry::now_time());
        match self.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(condition) => {
                if condition.status != value {
                    condition.last_transition_time = now;
                }
                condition.status = value.into();
                condition.reason = reason.into();
                condition.message = message.into();
                condition.observed_generation = generation;
            }
            None => self.conditions.push(MigrationCondition {
                type_: type_.into(),
                status: value.into(),
                last_transition_time: now,
                reason: reason.into(),
                message: message.into(),
                observed_generation: generation,
            }),
        }
    }
}

/// A condition with every field either shape has (metav1.Condition ∪ MigrationCondition).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationCondition {
    /// `Running`, `Succeeded` or `Failed`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// metav1.Condition.lastTransitionTime = MigrationCondition.lastUpdateTime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The reason for the condition's last transition, CamelCase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Details of the last transition, for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// metav1.Condition's `observedGeneration`: the generation the condition was set for. v1alpha1
    /// has no such field and carries it in an annotation.
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
    /// The done prefix: every object whose key (`namespace/name`, or `name`) sorts at or
    /// before this one has been migrated, by a watch-list stream or by pages (both read in
    /// key order). A restarted stream, or pages started over, skip up to it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub migrated_through: String,
    /// When this checkpoint was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_time: Option<Time>,
    /// Objects the cluster refused for good (not counted in `migratedObjects`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_objects: i64,
    /// The first [`MAX_NAMED_FAILURES`] of them, in the order they were refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<ObjectFailure>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One object the migration could not rewrite, and the cluster's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectFailure {
    /// Empty for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// The HTTP code of the answer (e.g. 403).
    #[serde(default)]
    pub code: i32,
    /// The answer's metav1.Status reason (e.g. `Forbidden`, `Invalid`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The answer's message (e.g. `admission webhook "…" denied the request: …`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl ObjectFailure {
    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

impl StorageVersionMigration {
    /// The condition of `type_` that is True, if any.
    pub fn condition_true(&self, type_: &str) -> Option<&MigrationCondition> {
        self.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    }

    /// Succeeded with every object migrated: not with objects skipped ([`OBJECTS_SKIPPED`]).
    /// What makes a resource safe.
    pub fn migrated_every_object(&self) -> bool {
        self.condition_true(SUCCEEDED).is_some() && self.condition_true(OBJECTS_SKIPPED).is_none()
    }

    /// The [`ON_OBJECT_FAILURE_ANNOTATION`] policy: `Skip` when it says so, else `Fail`. Its
    /// old spelling still counts (see [`crate::names`]): a migration annotated before the
    /// rename must not start failing on objects it was told to skip.
    pub fn skips_refused_objects(&self) -> bool {
        crate::names::annotation(&self.metadata, ON_OBJECT_FAILURE_ANNOTATION) == Some("Skip")
    }

    /// This migration as an Event's `regarding` (its v1 group and kind, name, uid, version).
    pub fn object_reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(format!("{}/v1", crate::GROUP)),
            kind: Some(KIND.into()),
            name: self.metadata.name.clone(),
            uid: self.metadata.uid.clone(),
            resource_version: self.metadata.resource_version.clone(),
            ..Default::default()
        }
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
