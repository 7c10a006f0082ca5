//! OpenAPI schemas of the meta.k8s.io types every resource's paths and schemas refer to
//! (ObjectMeta, ListMeta, Status, DeleteOptions, WatchEvent, Patch, ...), written in OpenAPI v3
//! form (`#/components/schemas/` refs). Resources' own definitions win over these when both
//! define a name.

use serde_json::{Value, json};

use super::managed_fields::schema::{ListSemantics, list_type};

/// The definition-name prefix of the `meta.k8s.io/v1` types (`<META>.ObjectMeta`, ...).
pub const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";
pub(crate) const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn meta_ref(short: &str) -> Value {
    r(&format!("{META}.{short}"))
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string", "default": ""}, "description": description})
}

fn int64(description: &str) -> Value {
    json!({"type": "integer", "format": "int64", "description": description})
}

fn int32(description: &str) -> Value {
    json!({"type": "integer", "format": "int32", "description": description})
}

fn map_of_strings(description: &str) -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": description})
}

fn kind_and_api_version() -> [(&'static str, Value); 2] {
    [
        (
            "apiVersion",
            string("The versioned schema of this representation of an object."),
        ),
        ("kind", string("The REST resource this object represents.")),
    ]
}

fn object(description: &str, properties: Vec<(&str, Value)>, required: &[&str]) -> Value {
    let mut props = serde_json::Map::new();
    for (name, schema) in properties {
        props.insert(name.to_string(), schema);
    }
    let mut schema = json!({"description": description, "type": "object", "properties": props});
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

/// Every meta definition, by full name. `groups` lists (group, version) pairs served, which get
/// `x-kubernetes-group-version-kind` entries on DeleteOptions and WatchEvent as upstream does.
pub fn definitions(groups: &[(String, String)]) -> Vec<(String, Value)> {
    let extra_gvks = |kind: &str| -> Value {
        let mut list = vec![gvk("", "v1", kind)];
        for (group, version) in groups {
            list.push(gvk(group, version, kind));
        }
        Value::Array(list)
    };
    let mut delete_options = object(
        "DeleteOptions may be provided when deleting an API object.",
        vec![
            kind_and_api_version()[0].clone(),
            (
                "dryRun",
                strings("When present, modifications are not persisted. Valid value: All."),
            ),
            (
                "gracePeriodSeconds",
                int64("Seconds before the object should be deleted."),
            ),
            (
                "ignoreStoreReadErrorWithClusterBreakingPotential",
                json!({"type": "boolean", "description": "Delete objects that cannot be read (unsafe)."}),
            ),
            kind_and_api_version()[1].clone(),
            (
                "orphanDependents",
                json!({"type": "boolean", "description": "Deprecated: use propagationPolicy."}),
            ),
            ("preconditions", meta_ref("Preconditions")),
            (
                "propagationPolicy",
                string(
                    "Whether and how garbage collection is performed: Orphan, Background or Foreground.",
                ),
            ),
        ],
        &[],
    );
    delete_options["x-kubernetes-group-version-kind"] = extra_gvks("DeleteOptions");
    let mut watch_event = object(
        "Event represents a single event to a watched resource.",
        vec![
            (
                "object",
                json!({"description": "The object: the new state for ADDED or MODIFIED, the last state for DELETED, a Status for ERROR, a resourceVersion-only object for BOOKMARK.", "allOf": [r(RAW_EXTENSION)]}),
            ),
            (
                "type",
                string("ADDED, MODIFIED, DELETED, BOOKMARK or ERROR."),
            ),
        ],
        &["type", "object"],
    );
    watch_event["x-kubernetes-group-version-kind"] = extra_gvks("WatchEvent");
    let mut status = object(
        "Status is a return value for calls that don't return other objects.",
        vec![
            kind_and_api_version()[0].clone(),
            ("code", int32("Suggested HTTP return code for this status.")),
            ("details", meta_ref("StatusDetails")),
            kind_and_api_version()[1].clone(),
            (
                "message",
                string("A human-readable description of the status."),
            ),
            ("metadata", meta_ref("ListMeta")),
            (
                "reason",
                string("A machine-readable description of why the operation failed."),
            ),
            ("status", string("Success or Failure.")),
        ],
        &[],
    );
    status["x-kubernetes-group-version-kind"] = json!([gvk("", "v1", "Status")]);

    vec![
        (
            format!("{META}.ObjectMeta"),
            object(
                "ObjectMeta is metadata that all persisted resources must have.",
                vec![
                    (
                        "annotations",
                        map_of_strings("Unstructured key value data set by external tools."),
                    ),
                    ("creationTimestamp", meta_ref("Time")),
                    (
                        "deletionGracePeriodSeconds",
                        int64("Seconds allowed for graceful termination."),
                    ),
                    ("deletionTimestamp", meta_ref("Time")),
                    (
                        "finalizers",
                        list_type(
                            json!({"type": "array", "items": {"type": "string", "default": ""}, "description": "Must be empty before the object is deleted from the registry."}),
                            ListSemantics::Set,
                        ),
                    ),
                    (
                        "generateName",
                        string("Prefix used to generate a unique name when name is not given."),
                    ),
                    (
                        "generation",
                        int64(
                            "A sequence number representing a specific generation of the desired state.",
                        ),
                    ),
                    (
                        "labels",
                        map_of_strings(
                            "Map of string keys and values used to organize and categorize objects.",
                        ),
                    ),
                    (
                        "managedFields",
                        list_type(
                            json!({"type": "array", "items": meta_ref("ManagedFieldsEntry"), "description": "Which field managers manage which fields."}),
                            ListSemantics::Atomic,
                        ),
                    ),
                    (
                        "name",
                        string("Unique name of the object (within its namespace, if namespaced)."),
                    ),
                    (
                        "namespace",
                        string(
                            "The namespace of a namespaced object; empty for cluster-scoped ones.",
                        ),
                    ),
                    (
                        "ownerReferences",
                        list_type(
                            json!({"type": "array", "items": meta_ref("OwnerReference"), "description": "Objects this object depends on."}),
                            ListSemantics::MapByKey("uid"),
                        ),
                    ),
                    (
                        "resourceVersion",
                        string(
                            "Opaque value of the internal version of this object, for optimistic concurrency and watches.",
                        ),
                    ),
                    ("selfLink", string("Deprecated, not set.")),
                    (
                        "uid",
                        string(
                            "Unique in time and space value for this object, set by the server.",
                        ),
                    ),
                ],
                &[],
            ),
        ),
        (
            format!("{META}.ListMeta"),
            object(
                "ListMeta describes metadata that synthetic resources must have.",
                vec![
                    (
                        "continue",
                        string(
                            "Set when more results are available: pass it as the continue parameter of the next list.",
                        ),
                    ),
                    (
                        "remainingItemCount",
                        int64("Number of items after this page, when known."),
                    ),
                    (
                        "resourceVersion",
                        string("The revision the list was served at."),
                    ),
                    ("selfLink", string("Deprecated, not set.")),
                ],
                &[],
            ),
        ),
        (
            format!("{META}.Time"),
            json!({"description": "A timestamp in RFC 3339 form, in UTC, with second precision.", "type": "string", "format": "date-time"}),
        ),
        (
            format!("{META}.MicroTime"),
            json!({"description": "A timestamp in RFC 3339 form with microsecond precision.", "type": "string", "format": "date-time"}),
        ),
        (
            format!("{META}.FieldsV1"),
            json!({"description": "FieldsV1 stores a set of fields in a trie-like JSON structure.", "type": "object"}),
        ),
        (
            format!("{META}.ManagedFieldsEntry"),
            object(
                "The workflow ID and version of a field manager and the fields it manages.",
                vec![
                    (
                        "apiVersion",
                        string("The version of the resource this entry applies to."),
                    ),
                    (
                        "fieldsType",
                        string("The format of the fields field; only FieldsV1."),
                    ),
                    ("fieldsV1", meta_ref("FieldsV1")),
                    (
                        "manager",
                        string("The identifier of the workflow managing these fields."),
                    ),
                    ("operation", string("Apply or Update.")),
                    (
                        "subresource",
                        string("The subresource used to update the object, if any."),
                    ),
                    ("time", meta_ref("Time")),
                ],
                &[],
            ),
        ),
        (
            format!("{META}.OwnerReference"),
            object(
                "Enough information to identify an owning object.",
                vec![
                    ("apiVersion", string("API version of the referent.")),
                    (
                        "blockOwnerDeletion",
                        json!({"type": "boolean", "description": "Whether the owner cannot be deleted before this reference is removed."}),
                    ),
                    (
                        "controller",
                        json!({"type": "boolean", "description": "Whether this reference points to the managing controller."}),
                    ),
                    ("kind", string("Kind of the referent.")),
                    ("name", string("Name of the referent.")),
                    ("uid", string("UID of the referent.")),
                ],
                &["apiVersion", "kind", "name", "uid"],
            ),
        ),
        (format!("{META}.Status"), status),
        (
            format!("{META}.StatusDetails"),
            object(
                "Additional properties a server may set to describe a failure or a deletion.",
                vec![
                    (
                        "causes",
                        json!({"type": "array", "items": meta_ref("StatusCause"), "description": "Detailed causes, such as one per invalid field.", "x-kubernetes-list-type": "atomic"}),
                    ),
                    ("group", string("The group of the resource.")),
                    ("kind", string("The kind (or resource) of the object.")),
                    ("name", string("The name of the object.")),
                    (
                        "retryAfterSeconds",
                        int32("Seconds the client should wait before retrying."),
                    ),
                    ("uid", string("The UID of the object.")),
                ],
                &[],
            ),
        ),
        (
            format!("{META}.StatusCause"),
            object(
                "One cause of a failure.",
                vec![
                    (
                        "field",
                        string("The field that caused the error, as a JSON path."),
                    ),
                    (
                        "message",
                        string("A human-readable description of the cause."),
                    ),
                    (
                        "reason",
                        string("A machine-readable description of the cause."),
                    ),
                ],
                &[],
            ),
        ),
        (format!("{META}.DeleteOptions"), delete_options),
        (
            format!("{META}.Preconditions"),
            object(
                "Must be fulfilled before an operation is carried out.",
                vec![
                    ("resourceVersion", string("The target resourceVersion.")),
                    ("uid", string("The target UID.")),
                ],
                &[],
            ),
        ),
        (format!("{META}.WatchEvent"), watch_event),
        (
            format!("{META}.Patch"),
            json!({"description": "A patch body: JSON patch, merge patch, strategic merge patch or an apply configuration.", "type": "object"}),
        ),
        (
            format!("{META}.Condition"),
            object(
                "One aspect of the current state of a resource.",
                vec![
                    ("lastTransitionTime", meta_ref("Time")),
                    (
                        "message",
                        string("A human-readable message about the transition."),
                    ),
                    (
                        "observedGeneration",
                        int64("The metadata.generation the condition was set for."),
                    ),
                    (
                        "reason",
                        string("A CamelCase reason for the last transition."),
                    ),
                    ("status", string("True, False or Unknown.")),
                    ("type", string("The type of the condition, in CamelCase.")),
                ],
                &["type", "status", "lastTransitionTime", "reason", "message"],
            ),
        ),
        (
            format!("{META}.APIResourceList"),
            object(
                "The resources served in one group-version.",
                vec![
                    kind_and_api_version()[0].clone(),
                    (
                        "groupVersion",
                        string("The group and version of the resources."),
                    ),
                    kind_and_api_version()[1].clone(),
                    (
                        "resources",
                        json!({"type": "array", "items": meta_ref("APIResource"), "description": "The resources.", "x-kubernetes-list-type": "atomic"}),
                    ),
                ],
                &["groupVersion", "resources"],
            ),
        ),
        (
            format!("{META}.APIResource"),
            object(
                "A resource served in a group-version.",
                vec![
                    (
                        "categories",
                        strings("Groups this resource belongs to, such as all."),
                    ),
                    (
                        "group",
                        string("The group of the resource, when it differs from the list's."),
                    ),
                    ("kind", string("The kind of the resource.")),
                    ("name", string("The plural name of the resource.")),
                    (
                        "namespaced",
                        json!({"type": "boolean", "description": "Whether the resource is namespaced."}),
                    ),
                    ("shortNames", strings("Suggested short names.")),
                    ("singularName", string("The singular name of the resource.")),
                    (
                        "storageVersionHash",
                        string("A hash of the storage version of the resource."),
                    ),
                    ("verbs", strings("Supported verbs.")),
                    (
                        "version",
                        string("The version of the resource, when it differs from the list's."),
                    ),
                ],
                &["name", "singularName", "namespaced", "kind", "verbs"],
            ),
        ),
        (
            format!("{META}.APIGroup"),
            object(
                "The name, versions and preferred version of a group.",
                vec![
                    kind_and_api_version()[0].clone(),
                    kind_and_api_version()[1].clone(),
                    ("name", string("The name of the group.")),
                    ("preferredVersion", meta_ref("GroupVersionForDiscovery")),
                    (
                        "serverAddressByClientCIDRs",
                        json!({"type": "array", "items": meta_ref("ServerAddressByClientCIDR"), "description": "Addresses clients may use.", "x-kubernetes-list-type": "atomic"}),
                    ),
                    (
                        "versions",
                        json!({"type": "array", "items": meta_ref("GroupVersionForDiscovery"), "description": "Versions served.", "x-kubernetes-list-type": "atomic"}),
                    ),
                ],
                &["name", "versions"],
            ),
        ),
        (
            format!("{META}.GroupVersionForDiscovery"),
            object(
                "A group-version.",
                vec![
                    ("groupVersion", string("group/version.")),
                    ("version", string("The version.")),
                ],
                &["groupVersion", "version"],
            ),
        ),
        (
            format!("{META}.ServerAddressByClientCIDR"),
            object(
                "The server address for clients in a CIDR.",
                vec![
                    ("clientCIDR", string("The CIDR.")),
                    ("serverAddress", string("host:port of the server.")),
                ],
                &["clientCIDR", "serverAddress"],
            ),
        ),
        (
            RAW_EXTENSION.to_string(),
            json!({"description": "An embedded object, in any serialization.", "type": "object"}),
        ),
    ]
}
