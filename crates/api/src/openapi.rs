//! The pieces every kind's OpenAPI definitions are written with, as kube-apiserver's v3
//! documents write them: `$ref`s (with a description and a default where a field refers to a
//! type), strings, int32s, map-keyed lists, and a CRD-style definition name.

use serde_json::{Value, json};

/// Where the `meta.k8s.io/v1` definitions live.
pub(crate) const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

/// A bare `$ref` to definition `name`.
pub(crate) fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A field of type `name`: its `$ref` with a description and a default.
pub(crate) fn described_ref(name: &str, description: &str) -> Value {
    json!({"allOf": [reference(name)], "default": {}, "description": description})
}

/// A string field.
pub(crate) fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// An int32 field.
pub(crate) fn int32(description: &str) -> Value {
    json!({"type": "integer", "format": "int32", "description": description})
}

/// A list of `item`s merged by `key` (`x-kubernetes-list-type: map`).
pub(crate) fn list_map(item: &str, key: &str, description: &str) -> Value {
    json!({
        "type": "array",
        "description": description,
        "items": {"allOf": [reference(item)], "default": {}},
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": [key],
    })
}

/// `io.svm-apiserver.storage.v1alpha1.<Kind>`: the group's reversed domain, as CRDs are named.
pub(crate) fn reversed_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}
