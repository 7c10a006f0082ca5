//! OpenAPI definitions of StorageVersionMigration per served version, with upstream's
//! definition names and extensions (x-kubernetes-group-version-kind, list-type map keyed by
//! `type`, patch strategy merge). `$ref`s use `#/components/schemas/`; the server rewrites
//! them for OpenAPI v2. The meta.k8s.io definitions referred to are the server's.

use serde_json::{Value, json};

use super::KIND;
use crate::GROUP;
use svm_registry::{ListSemantics, list_type};

use crate::openapi::{META, described_ref, reference, string};

/// The OpenAPI definition name of the kind in `version`, as upstream names it
/// (`io.k8s.api.storagemigration.v1.StorageVersionMigration`).
pub fn definition_name(version: &str) -> String {
    format!("io.k8s.api.storagemigration.{version}.{KIND}")
}

/// The definition name of `status.progress` in `version` (one copy per version, so that each
/// version's definitions stand on their own).
pub fn progress_definition_name(version: &str) -> String {
    format!("io.k8s.api.storagemigration.{version}.MigrationProgress")
}

/// `status.progress`: ours, shared by every version.
pub fn progress_definition() -> Value {
    json!({
        "description": "Progress of the migration as the svm-apiserver migrator reports it (not an upstream field).",
        "type": "object",
        "properties": {
            "migratedObjects": {"type": "integer", "format": "int64", "description": "Objects rewritten in the current storage version (or found rewritten or deleted) so far."},
            "remainingObjects": {"type": "integer", "format": "int64", "description": "The target apiserver's estimate of objects not yet listed (its remainingItemCount)."},
            "continueToken": string("The continue token of the next page to migrate: where a restarted migrator resumes."),
            "migratedThrough": string("Every object whose key (namespace/name, or name) sorts at or before this one has been migrated (read as a watch-list stream or in pages, both in key order); a restarted stream, or pages started over, skip up to it."),
            "lastCheckpointTime": described_ref(&format!("{META}.Time"), "When the checkpoint was last written."),
            "failedObjects": {"type": "integer", "format": "int64", "description": "Objects the cluster refused for good (a webhook's denial, a 400/403/422); not counted in migratedObjects."},
            "failures": list_type(json!({
                "description": "The first 10 objects the cluster refused, with its answer.",
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "namespace": string("The object's namespace; empty for a cluster-scoped object."),
                        "name": string("The object's name."),
                        "code": {"type": "integer", "format": "int32", "description": "The HTTP code of the cluster's answer."},
                        "reason": string("The reason of the cluster's answer (metav1.Status reason)."),
                        "message": string("The message of the cluster's answer."),
                    }
                },
            }), ListSemantics::Atomic),
        }
    })
}

/// Every definition of the kind in `version` — the object, its spec, status, conditions and
/// progress — by name, for the server's OpenAPI documents.
pub fn definitions(version: &str) -> Vec<(String, Value)> {
    let name = definition_name(version);
    let spec = format!("{name}Spec");
    let status = format!("{name}Status");
    let progress = progress_definition_name(version);
    let kind = json!({
        "description": "StorageVersionMigration represents a migration of stored data to the latest storage version.",
        "type": "object",
        "properties": {
            "apiVersion": string("APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"),
            "kind": string("Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"),
            "metadata": described_ref(&format!("{META}.ObjectMeta"), "Standard object metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"),
            "spec": described_ref(&spec, "Specification of the migration."),
            "status": described_ref(&status, "Status of the migration."),
        },
        "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": KIND, "version": version}],
    });
    let status_properties = |conditions_item: Value, extra: &str| {
        json!({
            "conditions": list_type(json!({
                "description": format!("The latest available observations of the migration's current state.{extra}"),
                "type": "array",
                "items": conditions_item,
            }), ListSemantics::MapByKey("type")),
            "resourceVersion": string("ResourceVersion to compare with the GC cache for performing the migration. This is the current resource version of given group, version and resource when kube-controller-manager first observes this StorageVersionMigration resource."),
            "progress": described_ref(&progress, "Progress of the migration (svm-apiserver's addition)."),
        })
    };
    let mut defs = vec![(name.clone(), kind)];
    if version == "v1alpha1" {
        let gvr = format!("io.k8s.api.storagemigration.{version}.GroupVersionResource");
        let condition = format!("io.k8s.api.storagemigration.{version}.MigrationCondition");
        defs.push((
            spec,
            json!({
                "description": "Spec of the storage version migration.",
                "type": "object",
                "required": ["resource"],
                "properties": {
                    "resource": described_ref(&gvr, "The resource that is being migrated. The migrator sends requests to the endpoint serving the resource. Immutable."),
                    "continueToken": string("The token used in the list options to get the next chunk of objects to migrate. When the .status.conditions indicates the migration is \"Running\", users can use this token to check the progress of the migration."),
                }
            }),
        ));
        defs.push((
            gvr,
            json!({
                "description": "The names of the group, the version, and the resource.",
                "type": "object",
                "properties": {
                    "group": string("The name of the group."),
                    "version": string("The name of the version."),
                    "resource": string("The name of the resource."),
                }
            }),
        ));
        defs.push((
            condition.clone(),
            json!({
                "description": "Describes the state of a migration at a certain point.",
                "type": "object",
                "required": ["type", "status"],
                "properties": {
                    "type": {"type": "string", "default": "", "description": "Type of the condition: Running, Succeeded or Failed."},
                    "status": {"type": "string", "default": "", "description": "Status of the condition, one of True, False, Unknown."},
                    "lastUpdateTime": described_ref(&format!("{META}.Time"), "The last time this condition was updated."),
                    "reason": string("The reason for the condition's last transition."),
                    "message": string("A human readable message indicating details about the transition."),
                }
            }),
        ));
        defs.push((
            status,
            json!({
                "description": "Status of the storage version migration.",
                "type": "object",
                "properties": status_properties(json!({"allOf": [reference(&condition)], "default": {}}), ""),
            }),
        ));
    } else {
        defs.push((
            spec,
            json!({
                "description": "Spec of the storage version migration.",
                "type": "object",
                "required": ["resource"],
                "properties": {
                    "resource": described_ref(&format!("{META}.GroupResource"), "The resource that is being migrated. The migrator sends requests to the endpoint serving the resource. Immutable."),
                }
            }),
        ));
        defs.push((
            format!("{META}.GroupResource"),
            json!({
                "description": "GroupResource specifies a Group and a Resource, but does not force a version.  This is useful for identifying concepts during lookup stages without having partially valid types",
                "type": "object",
                "required": ["group", "resource"],
                "properties": {
                    "group": {"type": "string", "default": "", "description": "The API group of the resource; empty for the core group."},
                    "resource": {"type": "string", "default": "", "description": "The plural name of the resource."},
                }
            }),
        ));
        defs.push((
            status,
            json!({
                "description": "Status of the storage version migration.",
                "type": "object",
                "properties": status_properties(json!({"allOf": [reference(&format!("{META}.Condition"))], "default": {}}), ""),
            }),
        ));
    }
    defs.push((progress, progress_definition()));
    defs
}
