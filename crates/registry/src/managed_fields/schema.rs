//! The typed schema server-side apply merges by (structured-merge-diff's `schema`), built
//! from the kind's OpenAPI definitions the way kube-openapi's `schemaconv` builds it: structs
//! from `properties`, maps from `additionalProperties`, lists whose merge semantics come from
//! `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` (atomic when absent), atomic maps
//! from `x-kubernetes-map-type: atomic`, and free-form objects as "deduced" (any JSON).
//!
//! The OpenAPI extensions are the one owner of the list semantics: [`list_type`] writes them
//! (and the matching strategic-merge-patch extensions) into a schema, this module reads them
//! for apply, and the strategic merge patch's rules are read back from the result.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Index of an atom in a [`TypedSchema`].
pub(crate) type TypeId = usize;

/// A scalar type: what a leaf value may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    /// OpenAPI `type: string`.
    String,
    /// OpenAPI `type: integer` or `number`.
    Numeric,
    /// OpenAPI `type: boolean`.
    Boolean,
    /// Any scalar (`x-kubernetes-int-or-string` and the like).
    Untyped,
}

/// How a list merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Replaced whole; owned as one field.
    Atomic,
    /// A set of scalars: items merge by value.
    Set,
    /// An associative list: items (maps) merge by these key fields.
    Map(Vec<String>),
}

/// A map: a struct with declared fields, a map with typed values, or both.
#[derive(Debug, Clone)]
pub(crate) struct MapType {
    /// Declared fields (a struct); empty for a plain map.
    pub fields: BTreeMap<String, TypeId>,
    /// The type of undeclared keys; `None` means undeclared keys are errors.
    pub element: Option<TypeId>,
    /// `x-kubernetes-map-type: atomic`: owned and replaced whole, not field by field.
    pub atomic: bool,
}

/// A list: its item type and how it merges.
#[derive(Debug, Clone)]
pub(crate) struct ListType {
    /// The type of each item.
    pub element: TypeId,
    /// How the list merges: atomic, as a set, or by key fields.
    pub kind: ListKind,
}

/// One type of the schema.
#[derive(Debug, Clone)]
pub(crate) enum Atom {
    /// A leaf value.
    Scalar(Scalar),
    /// An object (struct or map).
    Map(MapType),
    /// An array.
    List(ListType),
    /// Any JSON: a scalar, an atomic list, or a granular map of deduced values.
    Deduced,
}

/// The atoms of one kind in one version, rooted at the kind.
#[derive(Debug, Clone)]
pub(crate) struct TypedSchema {
    atoms: Vec<Atom>,
    root: TypeId,
    deduced: TypeId,
}

/// The list semantics of one list field, written into its OpenAPI schema by [`list_type`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListSemantics {
    /// Replaced whole (the default of a list without extensions).
    Atomic,
    /// A set of scalars (`patchStrategy:"merge"` on a list of strings, e.g. finalizers).
    Set,
    /// A list of objects keyed by one field (`patchStrategy:"merge" patchMergeKey:"<key>"`).
    MapByKey(&'static str),
}

/// Write `semantics` into a list's OpenAPI schema: `x-kubernetes-list-type` (and
/// `x-kubernetes-list-map-keys`) for server-side apply, `x-kubernetes-patch-strategy` (and
/// `x-kubernetes-patch-merge-key`) for strategic merge patch, as upstream's generated
/// schemas carry both.
pub fn list_type(mut schema: Value, semantics: ListSemantics) -> Value {
    if let Value::Object(map) = &mut schema {
        match semantics {
            ListSemantics::Atomic => {
                map.insert("x-kubernetes-list-type".into(), json!("atomic"));
            }
            ListSemantics::Set => {
                map.insert("x-kubernetes-list-type".into(), json!("set"));
                map.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
            }
            ListSemantics::MapByKey(key) => {
                map.insert("x-kubernetes-list-map-keys".into(), json!([key]));
                map.insert("x-kubernetes-list-type".into(), json!("map"));
                map.insert("x-kubernetes-patch-merge-key".into(), json!(key));
                map.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
            }
        }
    }
    schema
}

/// How deep `$ref` chains may go before a schema is taken as deduced (cycles, abuse).
const MAX_DEPTH: usize = 64;

struct Builder<'a> {
    definitions: &'a BTreeMap<String, Value>,
    atoms: Vec<Atom>,
    named: BTreeMap<String, TypeId>,
    deduced: TypeId,
}

impl<'a> Builder<'a> {
    fn push(&mut self, atom: Atom) -> TypeId {
        self.atoms.push(atom);
        self.atoms.len() - 1
    }

    fn reference(schema: &Value) -> Option<&str> {
        let reference = schema.get("$ref")?.as_str()?;
        reference
            .strip_prefix("#/components/schemas/")
            .or_else(|| reference.strip_prefix("#/definitions/"))
    }

    /// The schema with its `allOf` parts and `$ref`s flattened into a list of parts.
    fn parts(&self, schema: &'a Value, depth: usize, out: &mut Vec<&'a Value>) {
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(name) = Self::reference(schema) {
            if let Some(target) = self.definitions.get(name) {
                self.parts(target, depth + 1, out);
            }
            return;
        }
        out.push(schema);
        if let Some(all_of) = schema.get("allOf").and_then(Value::as_array) {
            for part in all_of {
                self.parts(part, depth + 1, out);
            }
        }
    }

    /// The atom of the root reference (which lives shorter than the definitions).
    fn build_root(&mut self, reference: &Value) -> TypeId {
        let Some(name) = Self::reference(reference) else {
            return self.deduced;
        };
        let Some(target) = self.definitions.get(name) else {
            return self.deduced;
        };
        let id = self.push(Atom::Deduced);
        self.named.insert(name.to_string(), id);
        let atom = self.atom(target, 1);
        self.atoms[id] = atom;
        id
    }

    /// The atom of a schema: a named definition is built once (and may refer to itself).
    fn build(&mut self, schema: &'a Value, depth: usize) -> TypeId {
        if depth > MAX_DEPTH {
            return self.deduced;
        }
        // A bare `$ref` names a definition: share its atom.
        let bare_ref = schema.as_object().is_some_and(|m| m.len() == 1);
        if let (Some(name), true) = (Self::reference(schema), bare_ref) {
            if let Some(id) = self.named.get(name) {
                return *id;
            }
            let Some(target) = self.definitions.get(name) else {
                return self.deduced;
            };
            let id = self.push(Atom::Deduced);
            self.named.insert(name.to_string(), id);
            let atom = self.atom(target, depth + 1);
            self.atoms[id] = atom;
            return id;
        }
        let atom = self.atom(schema, depth);
        self.push(atom)
    }

    /// The atom a schema describes, read from all its parts: a scalar, a list, a map or
    /// struct, or deduced when it says nothing of its shape.
    fn atom(&mut self, schema: &'a Value, depth: usize) -> Atom {
        let mut parts = Vec::new();
        self.parts(schema, depth, &mut parts);
        let parts = Parts(parts);
        if parts.flag("x-kubernetes-int-or-string") {
            return Atom::Scalar(Scalar::Untyped);
        }
        let type_ = parts.str("type").unwrap_or("");
        match type_ {
            "string" => return Atom::Scalar(Scalar::String),
            "integer" | "number" => return Atom::Scalar(Scalar::Numeric),
            "boolean" => return Atom::Scalar(Scalar::Boolean),
            "array" => return Atom::List(self.list(&parts, depth)),
            _ => {}
        }
        let properties = parts.properties();
        if properties.is_empty()
            && parts.find("additionalProperties").is_none()
            && type_ != "object"
        {
            return Atom::Deduced;
        }
        Atom::Map(self.map(&parts, properties, depth))
    }

    /// A list's item type (deduced without `items`) and how it merges.
    fn list(&mut self, parts: &Parts<'a>, depth: usize) -> ListType {
        let element = match parts.find("items") {
            Some(items) => self.build(items, depth + 1),
            None => self.deduced,
        };
        ListType {
            element,
            kind: parts.list_kind(),
        }
    }

    /// A struct's declared fields and, for undeclared keys, the type of their values — or
    /// none, when such keys are errors.
    fn map(
        &mut self,
        parts: &Parts<'a>,
        properties: Vec<(&'a String, &'a Value)>,
        depth: usize,
    ) -> MapType {
        let mut fields = BTreeMap::new();
        for (name, field_schema) in properties {
            let id = self.build(field_schema, depth + 1);
            fields.insert(name.clone(), id);
        }
        let preserve = parts.flag("x-kubernetes-preserve-unknown-fields");
        let element = match parts.find("additionalProperties") {
            _ if preserve => Some(self.deduced),
            Some(Value::Bool(true)) => Some(self.deduced),
            Some(Value::Bool(false)) => None,
            Some(schema @ Value::Object(_)) => Some(self.build(schema, depth + 1)),
            // An object without properties is free-form (FieldsV1, RawExtension).
            _ if fields.is_empty() => Some(self.deduced),
            _ => None,
        };
        MapType {
            fields,
            element,
            atomic: parts.str("x-kubernetes-map-type") == Some("atomic"),
        }
    }
}

/// The parts of one schema (itself, its `allOf` parts, the definitions its `$ref`s name),
/// read as one schema: the first part that has a key gives its value.
struct Parts<'a>(Vec<&'a Value>);

impl<'a> Parts<'a> {
    fn find(&self, key: &str) -> Option<&'a Value> {
        self.0.iter().find_map(|part| part.get(key))
    }

    fn str(&self, key: &str) -> Option<&'a str> {
        self.find(key).and_then(Value::as_str)
    }

    /// An extension flag: false when absent.
    fn flag(&self, key: &str) -> bool {
        self.find(key).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The declared properties of every part, in order.
    fn properties(&self) -> Vec<(&'a String, &'a Value)> {
        self.0
            .iter()
            .filter_map(|part| part.get("properties").and_then(Value::as_object))
            .flat_map(|props| props.iter())
            .collect()
    }

    /// How a list merges, from `x-kubernetes-list-type` (atomic when absent) and, for a map
    /// list, `x-kubernetes-list-map-keys`.
    fn list_kind(&self) -> ListKind {
        match self.str("x-kubernetes-list-type") {
            Some("set") => ListKind::Set,
            Some("map") => ListKind::Map(
                self.find("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| {
                        keys.iter()
                            .filter_map(|k| k.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            _ => ListKind::Atomic,
        }
    }
}

impl TypedSchema {
    /// The schema of definition `root` among `definitions` (OpenAPI v3 `components/schemas`
    /// with `#/components/schemas/` refs, or v2 `#/definitions/`).
    pub(crate) fn new(definitions: &BTreeMap<String, Value>, root: &str) -> Self {
        let mut builder = Builder {
            definitions,
            atoms: vec![Atom::Deduced],
            named: BTreeMap::new(),
            deduced: 0,
        };
        let reference = json!({"$ref": format!("#/components/schemas/{root}")});
        let root = builder.build_root(&reference);
        TypedSchema {
            atoms: builder.atoms,
            root,
            deduced: builder.deduced,
        }
    }

    /// The type of the kind itself.
    pub(crate) fn root(&self) -> TypeId {
        self.root
    }

    /// The type `id` stands for; an unknown `id` reads as [`Atom::Deduced`].
    pub(crate) fn atom(&self, id: TypeId) -> &Atom {
        self.atoms.get(id).unwrap_or(&Atom::Deduced)
    }

    /// The "deduced" type: any JSON, taking the shape of the value.
    pub(crate) fn deduced(&self) -> TypeId {
        self.deduced
    }

    /// The type of field or key `name` of the map type `id` (`None`: not declared).
    #[cfg(test)]
    pub(crate) fn field_type(&self, id: TypeId, name: &str) -> Option<TypeId> {
        match self.atom(id) {
            Atom::Map(map) => map.fields.get(name).copied().or(map.element),
            Atom::Deduced => Some(self.deduced),
            _ => None,
        }
    }

    /// Whether `name` is a declared field (not merely a map key) of the map type `id`.
    #[cfg(test)]
    pub(crate) fn is_named_field(&self, id: TypeId, name: &str) -> bool {
        matches!(self.atom(id), Atom::Map(map) if map.fields.contains_key(name))
    }

    /// Every non-atomic list, by dotted field path from the root (list items transparent),
    /// with its kind: what strategic merge patch merges.
    pub(crate) fn merging_lists(&self) -> Vec<(String, ListKind)> {
        let mut out = Vec::new();
        let mut visiting = Vec::new();
        self.collect_lists(self.root, "", &mut visiting, &mut out);
        out
    }

    fn collect_lists(
        &self,
        id: TypeId,
        path: &str,
        visiting: &mut Vec<TypeId>,
        out: &mut Vec<(String, ListKind)>,
    ) {
        if visiting.contains(&id) || visiting.len() > MAX_DEPTH {
            return;
        }
        visiting.push(id);
        match self.atom(id) {
            Atom::Map(map) => {
                for (name, field) in &map.fields {
                    let child = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}.{name}")
                    };
                    self.collect_lists(*field, &child, visiting, out);
                }
            }
            Atom::List(list) => {
                if list.kind != ListKind::Atomic {
                    out.push((path.to_string(), list.kind.clone()));
                }
                self.collect_lists(list.element, path, visiting, out);
            }
            Atom::Scalar(_) | Atom::Deduced => {}
        }
        visiting.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definitions() -> BTreeMap<String, Value> {
        BTreeMap::from([
            (
                "Kind".to_string(),
                json!({"type": "object", "properties": {
                    "metadata": {"$ref": "#/components/schemas/Meta"},
                    "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}], "default": {}},
                }}),
            ),
            (
                "Meta".to_string(),
                json!({"type": "object", "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "finalizers": list_type(json!({"type": "array", "items": {"type": "string"}}), ListSemantics::Set),
                }}),
            ),
            (
                "Spec".to_string(),
                json!({"type": "object", "properties": {
                    "size": {"type": "integer"},
                    "conditions": list_type(json!({"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}}}}), ListSemantics::MapByKey("type")),
                    "args": {"type": "array", "items": {"type": "string"}},
                    "raw": {"type": "object"},
                }}),
            ),
        ])
    }

    #[test]
    fn builds_structs_maps_and_lists_from_openapi() {
        let schema = TypedSchema::new(&definitions(), "Kind");
        let root = schema.root();
        let spec = schema.field_type(root, "spec").expect("spec");
        assert!(schema.is_named_field(root, "spec"));
        assert!(schema.field_type(spec, "bogus").is_none());
        let size = schema.field_type(spec, "size").expect("size");
        assert!(matches!(schema.atom(size), Atom::Scalar(Scalar::Numeric)));
        let raw = schema.field_type(spec, "raw").expect("raw");
        assert!(schema.field_type(raw, "anything").is_some());
        let meta = schema.field_type(root, "metadata").expect("metadata");
        let labels = schema.field_type(meta, "labels").expect("labels");
        assert!(schema.field_type(labels, "any-key").is_some());
        assert!(!schema.is_named_field(labels, "any-key"));
    }

    #[test]
    fn list_semantics_come_from_the_extensions() {
        let schema = TypedSchema::new(&definitions(), "Kind");
        assert_eq!(
            schema.merging_lists(),
            vec![
                ("metadata.finalizers".to_string(), ListKind::Set),
                (
                    "spec.conditions".to_string(),
                    ListKind::Map(vec!["type".into()])
                ),
            ]
        );
        let written = list_type(json!({"type": "array"}), ListSemantics::MapByKey("uid"));
        assert_eq!(written["x-kubernetes-patch-merge-key"], "uid");
        assert_eq!(written["x-kubernetes-list-map-keys"], json!(["uid"]));
    }
}
