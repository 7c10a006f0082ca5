//! Server-side field validation: find (and drop) the fields of a JSON body that the kind's
//! OpenAPI schema does not declare, the way kube-apiserver's strict decoding reports them
//! (`unknown field "spec.foo"`, recording 16c). The walk follows `properties`, `$ref`s to
//! `#/components/schemas/<name>` (or `#/definitions/<name>`), `allOf`, `items`,
//! `additionalProperties` and `x-kubernetes-preserve-unknown-fields`. An object schema without
//! `properties` or `additionalProperties` (e.g. `FieldsV1`) is free-form.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// How deep `$ref` chains and nesting may go before the walk stops judging (cycles, abuse).
const MAX_DEPTH: usize = 128;

/// The definitions one served version validates against, with meta.k8s.io's built in.
#[derive(Debug, Clone, Default)]
pub(crate) struct Schemas {
    definitions: BTreeMap<String, Value>,
}

impl Schemas {
    /// The kind's definitions; the meta.k8s.io ones it refers to are added unless it defines
    /// them itself.
    pub(crate) fn new(kind_definitions: Vec<(String, Value)>) -> Self {
        let mut definitions: BTreeMap<String, Value> =
            super::openapi_meta::definitions(&[]).into_iter().collect();
        definitions.extend(kind_definitions);
        Self { definitions }
    }

    /// The typed schema of definition `root` (what server-side apply and strategic merge
    /// patch read), from the same definitions.
    pub(crate) fn typed(&self, root: &str) -> super::managed_fields::schema::TypedSchema {
        super::managed_fields::schema::TypedSchema::new(&self.definitions, root)
    }

    /// Remove every field of `object` that the definition `root` does not declare and return
    /// their dotted paths in document order. `apiVersion` and `kind` are always known at the
    /// root. An unknown root definition makes everything known (nothing to judge by).
    pub(crate) fn prune_unknown(&self, root: &str, object: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        if let Some(schema) = self.definitions.get(root) {
            self.walk(schema, object, "", 0, &mut unknown);
        }
        unknown
    }

    /// Follow `$ref`s to the schema that has content.
    fn resolve<'a>(&'a self, mut schema: &'a Value, depth: usize) -> Option<&'a Value> {
        for _ in depth..MAX_DEPTH {
            match schema.get("$ref").and_then(Value::as_str) {
                None => return Some(schema),
                Some(reference) => {
                    let name = reference
                        .strip_prefix("#/components/schemas/")
                        .or_else(|| reference.strip_prefix("#/definitions/"))?;
                    schema = self.definitions.get(name)?;
                }
            }
        }
        None
    }

    /// The schema and its `allOf` parts, resolved.
    fn parts<'a>(&'a self, schema: &'a Value, depth: usize) -> Option<Vec<&'a Value>> {
        let resolved = self.resolve(schema, depth)?;
        let mut parts = vec![resolved];
        if let Some(all_of) = resolved.get("allOf").and_then(Value::as_array) {
            for part in all_of {
                parts.extend(self.parts(part, depth + 1)?);
            }
        }
        Some(parts)
    }

    fn walk(
        &self,
        schema: &Value,
        value: &mut Value,
        path: &str,
        depth: usize,
        unknown: &mut Vec<String>,
    ) {
        if depth >= MAX_DEPTH {
            return;
        }
        // A reference we cannot follow: nothing to judge by.
        let Some(parts) = self.parts(schema, depth) else {
            return;
        };
        let preserves = parts.iter().any(|p| {
            p.get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        });
        if preserves {
            return;
        }
        match value {
            Value::Object(map) => self.walk_object(&parts, map, path, depth, unknown),
            Value::Array(items) => {
                let Some(item_schema) = parts.iter().find_map(|p| p.get("items")) else {
                    return;
                };
                for (i, item) in items.iter_mut().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    self.walk(item_schema, item, &item_path, depth + 1, unknown);
                }
            }
            _ => {}
        }
    }

    fn walk_object(
        &self,
        parts: &[&Value],
        map: &mut Map<String, Value>,
        path: &str,
        depth: usize,
        unknown: &mut Vec<String>,
    ) {
        let properties: Vec<&Map<String, Value>> = parts
            .iter()
            .filter_map(|p| p.get("properties").and_then(Value::as_object))
            .collect();
        let additional = parts.iter().find_map(|p| p.get("additionalProperties"));
        if properties.is_empty() && additional.is_none() {
            // A free-form object.
            return;
        }
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            let child_path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            let declared = properties.iter().find_map(|props| props.get(&key));
            let type_meta = path.is_empty() && (key == "apiVersion" || key == "kind");
            let child_schema = match (declared, additional) {
                (None, _) if type_meta => None,
                (Some(schema), _) => Some(schema),
                (None, Some(Value::Bool(true))) => None,
                (None, Some(schema @ Value::Object(_))) => Some(schema),
                (None, _) => {
                    map.shift_remove(&key);
                    unknown.push(child_path);
                    continue;
                }
            };
            if let (Some(schema), Some(child)) = (child_schema, map.get_mut(&key)) {
                self.walk(schema, child, &child_path, depth + 1, unknown);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KIND: &str = "io.example.v1.Widget";

    fn schemas() -> Schemas {
        Schemas::new(vec![
            (
                KIND.into(),
                json!({
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                        "spec": {"allOf": [{"$ref": "#/components/schemas/io.example.v1.WidgetSpec"}], "description": "Spec."},
                        "status": {"$ref": "#/definitions/io.example.v1.WidgetStatus"},
                    }
                }),
            ),
            (
                "io.example.v1.WidgetSpec".into(),
                json!({
                    "type": "object",
                    "properties": {
                        "size": {"type": "integer"},
                        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                        "parts": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/io.example.v1.Part"}},
                        "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "anything": {"type": "object"},
                        "missing": {"$ref": "#/components/schemas/io.example.v1.NotDefined"},
                    }
                }),
            ),
            (
                "io.example.v1.Part".into(),
                json!({"type": "object", "properties": {"name": {"type": "string"}}}),
            ),
            (
                "io.example.v1.WidgetStatus".into(),
                json!({
                    "type": "object",
                    "properties": {
                        "conditions": {"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Condition"}},
                    }
                }),
            ),
        ])
    }

    #[test]
    fn reports_unknown_fields_in_document_order_and_drops_them() {
        // Recording 16c: the same two unknown fields, reported in body order.
        let mut body = json!({
            "apiVersion": "example.io/v1",
            "kind": "Widget",
            "metadata": {"name": "fv", "bogus": 1},
            "spec": {"size": 1},
            "extraTop": "x",
        });
        let unknown = schemas().prune_unknown(KIND, &mut body);
        assert_eq!(unknown, vec!["metadata.bogus", "extraTop"]);
        assert_eq!(
            body,
            json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "fv"}, "spec": {"size": 1}})
        );
    }

    #[test]
    fn follows_refs_allof_items_and_additional_properties() {
        let mut body = json!({
            "spec": {
                "size": 2,
                "shape": "round",
                "tags": {"any-key": "v"},
                "parts": {"p1": {"name": "a", "color": "red"}},
                "raw": {"whatever": {"deep": true}},
                "anything": {"free": 1},
                "missing": {"cannot": "judge"},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "bogus": 1}]},
            "metadata": {
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}, "nope": 1}],
                "ownerReferences": [{"uid": "u", "extra": true}],
            },
        });
        let unknown = schemas().prune_unknown(KIND, &mut body);
        assert_eq!(
            unknown,
            vec![
                "spec.shape",
                "spec.parts.p1.color",
                "status.conditions[1].bogus",
                "metadata.managedFields[0].nope",
                "metadata.ownerReferences[0].extra",
            ]
        );
        assert!(body.pointer("/spec/raw/whatever/deep").is_some());
        assert!(body.pointer("/spec/anything/free").is_some());
        assert!(body.pointer("/spec/missing/cannot").is_some());
        assert!(body.pointer("/status/conditions/1/bogus").is_none());
    }

    #[test]
    fn type_meta_is_always_known_and_stays_first() {
        let schemas = Schemas::new(vec![(
            "bare".into(),
            json!({"type": "object", "properties": {"spec": {"type": "object"}}}),
        )]);
        let mut body = json!({"apiVersion": "v1", "kind": "Bare", "spec": {}, "odd": 1});
        assert_eq!(schemas.prune_unknown("bare", &mut body), vec!["odd"]);
        let keys: Vec<&String> = body.as_object().expect("object").keys().collect();
        assert_eq!(keys, vec!["apiVersion", "kind", "spec"]);
    }

    #[test]
    fn unknown_root_judges_nothing() {
        let mut body = json!({"anything": 1});
        assert!(schemas().prune_unknown("nope", &mut body).is_empty());
        assert_eq!(body, json!({"anything": 1}));
    }
}
