//! OpenAPI documents built once from the registry: swagger 2.0 on `/openapi/v2` and OpenAPI
//! 3.0 per group-version on `/openapi/v3/apis/<g>/<v>` with the `/openapi/v3` index. Paths carry
//! `x-kubernetes-action` and `x-kubernetes-group-version-kind` so kubectl can find a kind's
//! schema (`explain`) and see that PATCH takes `fieldValidation` (server-side validation).

use svm_registry::openapi_meta as meta;
mod paths;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::discovery::hash_hex;
use svm_registry::{Registry, RestStorage};

const V3_PREFIX: &str = "#/components/schemas/";
const V2_PREFIX: &str = "#/definitions/";

/// A served OpenAPI v3 document with its hash (the `?hash=` of the index and the ETag).
#[derive(Debug, Clone)]
pub(crate) struct V3Doc {
    pub doc: Value,
    pub hash: String,
}

#[derive(Debug, Clone)]
pub(crate) struct OpenApi {
    pub v2: Value,
    pub v2_etag: String,
    pub v3_index: Value,
    /// Keyed by the index path, e.g. `apis/storagemigration.k8s.io/v1`.
    v3_docs: BTreeMap<String, V3Doc>,
}

impl OpenApi {
    pub(crate) fn build(registry: &Registry, server_version: &str) -> Self {
        let group_versions = group_versions(registry);
        let mut docs = Documents {
            server_version,
            meta: meta::definitions(&group_versions),
            schemas: Map::new(),
            paths: Map::new(),
            v3_docs: BTreeMap::new(),
        };
        for (group, version) in &group_versions {
            docs.add_group_version(registry, group, version);
        }
        let groups: BTreeSet<&String> = group_versions.iter().map(|(g, _)| g).collect();
        for group in groups {
            docs.add_group(group);
        }
        docs.finish()
    }

    /// The v3 document at `apis/<group>[/<version>]`.
    pub(crate) fn v3(&self, path: &str) -> Option<&V3Doc> {
        self.v3_docs.get(path)
    }
}

/// The documents as they are built: the v2 document's paths and definitions, one v3 document
/// per group and per group-version.
struct Documents<'a> {
    server_version: &'a str,
    /// The apimachinery definitions every document may reference.
    meta: Vec<(String, Value)>,
    schemas: Map<String, Value>,
    paths: Map<String, Value>,
    v3_docs: BTreeMap<String, V3Doc>,
}

impl Documents<'_> {
    /// `/apis/<group>/<version>/` and every resource path of the version, with the
    /// definitions they use.
    fn add_group_version(&mut self, registry: &Registry, group: &str, version: &str) {
        let resources: Vec<&std::sync::Arc<dyn RestStorage>> = registry
            .iter()
            .filter(|r| r.info().group == group && r.info().versions.contains(&version))
            .collect();
        let mut schemas = Map::new();
        for resource in &resources {
            for (name, schema) in resource_definitions(resource.as_ref(), version) {
                schemas.insert(name, schema);
            }
        }
        for (name, schema) in &self.meta {
            if !schemas.contains_key(name) {
                schemas.insert(name.clone(), schema.clone());
            }
        }
        let mut path_ops = vec![paths::api_resources(group, version)];
        for resource in &resources {
            let def = resource.definition_name(version);
            path_ops.extend(paths::resource_paths(resource.info(), version, &def));
        }
        self.add_v3(format!("apis/{group}/{version}"), &path_ops, &schemas);
        for (name, schema) in schemas {
            self.schemas.entry(name).or_insert(schema);
        }
    }

    /// `/apis/<group>/`.
    fn add_group(&mut self, group: &str) {
        let meta: Map<String, Value> = self.meta.iter().cloned().collect();
        self.add_v3(format!("apis/{group}"), &[paths::api_group(group)], &meta);
    }

    /// The paths into the v2 document, and a v3 document of them with the schemas they
    /// reference.
    fn add_v3(
        &mut self,
        index_path: String,
        ops: &[paths::PathItem],
        schemas: &Map<String, Value>,
    ) {
        let v3_paths = paths::render_v3(ops);
        self.paths.extend(paths::render_v2(ops));
        let referenced = referenced_closure(&v3_paths, schemas);
        let doc = v3_document(self.server_version, v3_paths, referenced);
        let hash = hash_hex(&doc);
        self.v3_docs.insert(index_path, V3Doc { doc, hash });
    }

    fn finish(mut self) -> OpenApi {
        for (name, schema) in &self.meta {
            self.schemas.entry(name.clone()).or_insert(schema.clone());
        }
        let mut definitions = Value::Object(self.schemas);
        to_v2_schema(&mut definitions);
        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": self.server_version},
            "paths": self.paths,
            "definitions": definitions,
            "securityDefinitions": {
                "BearerToken": {"description": "Bearer Token authentication", "type": "apiKey", "name": "authorization", "in": "header"}
            },
            "security": [{"BearerToken": []}],
        });
        let v2_etag = format!("\"{}\"", hash_hex(&v2));
        let index_paths: Map<String, Value> = self
            .v3_docs
            .iter()
            .map(|(path, doc)| {
                (
                    path.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
                )
            })
            .collect();
        OpenApi {
            v2,
            v2_etag,
            v3_index: json!({"paths": index_paths}),
            v3_docs: self.v3_docs,
        }
    }
}

/// (group, version) pairs served, in registry order.
fn group_versions(registry: &Registry) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for resource in registry.iter() {
        let info = resource.info();
        for version in info.versions {
            let pair = (info.group.to_string(), version.to_string());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    out
}

/// A resource's definitions in `version`, completed with what clients rely on: the kind's
/// `x-kubernetes-group-version-kind`, and a `<Kind>List` definition when the resource gave none.
fn resource_definitions(resource: &dyn RestStorage, version: &str) -> Vec<(String, Value)> {
    let info = resource.info();
    let def_name = resource.definition_name(version);
    let mut defs = resource.openapi_definitions(version);
    for (name, schema) in defs.iter_mut() {
        if *name == def_name
            && schema.get("x-kubernetes-group-version-kind").is_none()
            && let Some(map) = schema.as_object_mut()
        {
            map.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": info.group, "kind": info.kind, "version": version}]),
            );
        }
    }
    let list_name = format!("{def_name}List");
    if !defs.iter().any(|(name, _)| *name == list_name) {
        defs.push((
            list_name,
            json!({
                "description": format!("{} is a list of {}.", info.list_kind, info.kind),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
                    "items": {"type": "array", "items": {"$ref": format!("{V3_PREFIX}{def_name}")}, "description": format!("The {} objects.", info.kind)},
                    "kind": {"type": "string", "description": "The REST resource this object represents."},
                    "metadata": {"$ref": format!("{V3_PREFIX}{}.ListMeta", meta::META), "description": "Standard list metadata."},
                },
                "x-kubernetes-group-version-kind": [{"group": info.group, "kind": info.list_kind, "version": version}],
            }),
        ));
    }
    defs
}

/// Every `$ref` target in `value` (v3 form).
fn collect_refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if key == "$ref" {
                    if let Some(name) = v.as_str().and_then(|s| s.strip_prefix(V3_PREFIX)) {
                        out.insert(name.to_string());
                    }
                } else {
                    collect_refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// The schemas reachable from `roots`, as in upstream's per-group-version documents.
fn referenced_closure(
    roots: &Map<String, Value>,
    schemas: &Map<String, Value>,
) -> Map<String, Value> {
    let mut pending = BTreeSet::new();
    collect_refs(&Value::Object(roots.clone()), &mut pending);
    let mut done = Map::new();
    while let Some(name) = pending.pop_first() {
        if done.contains_key(&name) {
            continue;
        }
        if let Some(schema) = schemas.get(&name) {
            let mut more = BTreeSet::new();
            collect_refs(schema, &mut more);
            pending.extend(more.into_iter().filter(|n| !done.contains_key(n)));
            done.insert(name, schema.clone());
        }
    }
    // Sorted by name, like upstream's documents.
    let mut sorted: Vec<(String, Value)> = done.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    sorted.into_iter().collect()
}

fn v3_document(
    server_version: &str,
    paths: Map<String, Value>,
    schemas: Map<String, Value>,
) -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}
            }
        },
    })
}

/// Turn v3 schemas into swagger 2.0 ones: refs to `#/definitions/`, no `nullable`.
fn to_v2_schema(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("nullable");
            for (key, v) in map.iter_mut() {
                if key == "$ref" {
                    if let Some(name) = v.as_str().and_then(|s| s.strip_prefix(V3_PREFIX)) {
                        *v = Value::String(format!("{V2_PREFIX}{name}"));
                    }
                } else {
                    to_v2_schema(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_v2_schema),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{GROUP, registry_with, things};

    fn openapi() -> OpenApi {
        OpenApi::build(&registry_with(things()), "v0.1.0")
    }

    fn refs(value: &Value) -> BTreeSet<String> {
        fn walk(value: &Value, out: &mut BTreeSet<String>) {
            match value {
                Value::Object(map) => {
                    for (k, v) in map {
                        if k == "$ref" {
                            out.insert(v.as_str().unwrap_or_default().to_string());
                        } else {
                            walk(v, out);
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        let mut out = BTreeSet::new();
        walk(value, &mut out);
        out
    }

    #[test]
    fn v2_refs_all_point_into_definitions_and_resolve() {
        let api = openapi();
        assert_eq!(api.v2["swagger"], "2.0");
        let definitions = api.v2["definitions"].as_object().expect("definitions");
        for r in refs(&api.v2) {
            let name = r
                .strip_prefix(V2_PREFIX)
                .unwrap_or_else(|| panic!("v3 ref left: {r}"));
            assert!(definitions.contains_key(name), "dangling ref {r}");
        }
        for name in [
            "io.example.test.v1.Thing",
            "io.example.test.v1beta1.Thing",
            "io.example.test.v1.ThingList",
            "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
            "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        ] {
            assert!(definitions.contains_key(name), "missing {name}");
        }
        assert_eq!(
            definitions["io.example.test.v1.ThingList"]["x-kubernetes-group-version-kind"][0]["kind"],
            "ThingList"
        );
    }

    #[test]
    fn v2_paths_have_actions_and_gvk() {
        let api = openapi();
        let paths = &api.v2["paths"];
        let collection = &paths["/apis/test.example.io/v1/things"];
        assert_eq!(collection["get"]["x-kubernetes-action"], "list");
        assert_eq!(collection["post"]["x-kubernetes-action"], "post");
        assert_eq!(
            collection["delete"]["x-kubernetes-action"],
            "deletecollection"
        );
        assert_eq!(
            collection["get"]["x-kubernetes-group-version-kind"],
            json!({"group": GROUP, "kind": "Thing", "version": "v1"})
        );
        assert_eq!(collection["get"]["operationId"], "listTestExampleIoV1Thing");
        let item = &paths["/apis/test.example.io/v1/things/{name}"];
        for (method, action) in [
            ("get", "get"),
            ("put", "put"),
            ("patch", "patch"),
            ("delete", "delete"),
        ] {
            assert_eq!(item[method]["x-kubernetes-action"], action);
        }
        let status = &paths["/apis/test.example.io/v1beta1/things/{name}/status"];
        assert_eq!(
            status["patch"]["operationId"],
            "patchTestExampleIoV1beta1ThingStatus"
        );
        assert_eq!(
            status["put"]["parameters"][0]["schema"]["$ref"],
            "#/definitions/io.example.test.v1beta1.Thing"
        );
        assert!(paths.get("/apis/test.example.io/v1/watch/things").is_some());
        assert_eq!(
            paths["/apis/test.example.io/"]["get"]["operationId"],
            "getTestExampleIoAPIGroup"
        );
    }

    #[test]
    fn v3_index_points_at_hashed_documents() {
        let api = openapi();
        let url = api.v3_index["paths"]["apis/test.example.io/v1"]["serverRelativeURL"]
            .as_str()
            .expect("url");
        let doc = api.v3("apis/test.example.io/v1").expect("doc");
        assert_eq!(
            url,
            format!("/openapi/v3/apis/test.example.io/v1?hash={}", doc.hash)
        );
        assert!(api.v3_index["paths"]["apis/test.example.io"].is_object());
    }

    #[test]
    fn v3_document_is_self_contained_and_patch_takes_field_validation() {
        let api = openapi();
        let doc = &api.v3("apis/test.example.io/v1").expect("doc").doc;
        assert_eq!(doc["openapi"], "3.0.0");
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        for r in refs(doc) {
            let name = r
                .strip_prefix(V3_PREFIX)
                .unwrap_or_else(|| panic!("bad ref {r}"));
            assert!(schemas.contains_key(name), "dangling ref {r}");
        }
        // Only this version's kind, with its GVK.
        assert!(schemas.contains_key("io.example.test.v1.Thing"));
        assert!(!schemas.contains_key("io.example.test.v1beta1.Thing"));
        assert_eq!(
            schemas["io.example.test.v1.Thing"]["x-kubernetes-group-version-kind"][0]["version"],
            "v1"
        );
        let patch = &doc["paths"]["/apis/test.example.io/v1/things/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Thing");
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .expect("params")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"fieldValidation"), "{names:?}");
        assert!(names.contains(&"force"));
        let content = patch["requestBody"]["content"]
            .as_object()
            .expect("content");
        assert!(content.contains_key("application/apply-patch+yaml"));
        assert!(content.contains_key("application/strategic-merge-patch+json"));
    }
}
