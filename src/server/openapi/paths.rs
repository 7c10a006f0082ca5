//! The REST operations of a resource, described once and rendered as swagger 2.0 or OpenAPI
//! 3.0 path items (operation ids, tags and parameters in kube-apiserver's style).

use serde_json::{Map, Value, json};

use crate::registry::ResourceInfo;
use crate::registry::openapi_meta::META;

const JSON: &str = "application/json";
const YAML: &str = "application/yaml";
const JSON_WATCH: &str = "application/json;stream=watch";
const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

#[derive(Debug, Clone, Copy)]
enum ParamType {
    String,
    Integer,
    Boolean,
}

#[derive(Debug, Clone)]
struct Param {
    name: &'static str,
    location: &'static str,
    description: &'static str,
    type_: ParamType,
    required: bool,
}

fn query(name: &'static str, type_: ParamType, description: &'static str) -> Param {
    Param {
        name,
        location: "query",
        description,
        type_,
        required: false,
    }
}

fn name_param() -> Param {
    Param {
        name: "name",
        location: "path",
        description: "name of the object",
        type_: ParamType::String,
        required: true,
    }
}

fn namespace_param() -> Param {
    Param {
        name: "namespace",
        location: "path",
        description: "object name and auth scope, such as for teams and projects",
        type_: ParamType::String,
        required: true,
    }
}

fn pretty() -> Param {
    query(
        "pretty",
        ParamType::String,
        "If 'true', then the output is pretty printed.",
    )
}
fn dry_run() -> Param {
    query(
        "dryRun",
        ParamType::String,
        "When present, modifications are not persisted. Valid value: All.",
    )
}
fn field_manager() -> Param {
    query(
        "fieldManager",
        ParamType::String,
        "The name of the actor making the change.",
    )
}
fn field_validation() -> Param {
    query(
        "fieldValidation",
        ParamType::String,
        "How to handle unknown or duplicate fields: Ignore, Warn (default) or Strict.",
    )
}

fn list_params() -> Vec<Param> {
    vec![
        query(
            "allowWatchBookmarks",
            ParamType::Boolean,
            "Request BOOKMARK watch events.",
        ),
        query(
            "continue",
            ParamType::String,
            "The continue token of the previous page.",
        ),
        query(
            "fieldSelector",
            ParamType::String,
            "Restrict the returned objects by their fields.",
        ),
        query(
            "labelSelector",
            ParamType::String,
            "Restrict the returned objects by their labels.",
        ),
        query(
            "limit",
            ParamType::Integer,
            "The maximum number of items in one page.",
        ),
        query(
            "resourceVersion",
            ParamType::String,
            "Which revision a read is served from.",
        ),
        query(
            "resourceVersionMatch",
            ParamType::String,
            "How resourceVersion applies: NotOlderThan or Exact.",
        ),
        query(
            "sendInitialEvents",
            ParamType::Boolean,
            "Start a watch with the current state, ended by an initial-events-end bookmark.",
        ),
        query(
            "timeoutSeconds",
            ParamType::Integer,
            "Timeout of a list or watch call.",
        ),
        query(
            "watch",
            ParamType::Boolean,
            "Watch for changes instead of listing.",
        ),
    ]
}

fn delete_params() -> Vec<Param> {
    vec![
        dry_run(),
        query(
            "gracePeriodSeconds",
            ParamType::Integer,
            "Seconds before the object should be deleted.",
        ),
        query(
            "orphanDependents",
            ParamType::Boolean,
            "Deprecated: use propagationPolicy.",
        ),
        query(
            "propagationPolicy",
            ParamType::String,
            "Orphan, Background or Foreground.",
        ),
    ]
}

/// One operation on a path.
#[derive(Debug, Clone)]
struct Operation {
    method: &'static str,
    operation_id: String,
    description: String,
    action: Option<&'static str>,
    tag: String,
    params: Vec<Param>,
    /// Definition name of the body and the media types it may come in.
    body: Option<(String, Vec<&'static str>)>,
    /// (code, description, definition name).
    responses: Vec<(u16, &'static str, String)>,
    produces: Vec<&'static str>,
    gvk: Option<Value>,
}

/// A path with its operations and its path-level parameters.
#[derive(Debug, Clone)]
pub struct PathItem {
    path: String,
    params: Vec<Param>,
    ops: Vec<Operation>,
}

/// `storagemigration.k8s.io` -> `Storagemigration`; `test.example.io` -> `TestExampleIo`.
fn group_camel(group: &str) -> String {
    group
        .strip_suffix(".k8s.io")
        .unwrap_or(group)
        .split('.')
        .map(capitalize)
        .collect()
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn tag(group: &str, version: &str) -> String {
    format!("{}_{version}", lower_first(&group_camel(group)))
}

fn meta(short: &str) -> String {
    format!("{META}.{short}")
}

/// `GET /apis/<g>/<v>/`: the APIResourceList.
pub fn api_resources(group: &str, version: &str) -> PathItem {
    PathItem {
        path: format!("/apis/{group}/{version}/"),
        params: Vec::new(),
        ops: vec![Operation {
            method: "get",
            operation_id: format!(
                "get{}{}APIResources",
                group_camel(group),
                capitalize(version)
            ),
            description: "get available resources".into(),
            action: None,
            tag: tag(group, version),
            params: Vec::new(),
            body: None,
            responses: vec![(200, "OK", meta("APIResourceList"))],
            produces: vec![JSON, YAML],
            gvk: None,
        }],
    }
}

/// `GET /apis/<g>/`: the APIGroup.
pub fn api_group(group: &str) -> PathItem {
    PathItem {
        path: format!("/apis/{group}/"),
        params: Vec::new(),
        ops: vec![Operation {
            method: "get",
            operation_id: format!("get{}APIGroup", group_camel(group)),
            description: "get information of a group".into(),
            action: None,
            tag: lower_first(&group_camel(group)),
            params: Vec::new(),
            body: None,
            responses: vec![(200, "OK", meta("APIGroup"))],
            produces: vec![JSON, YAML],
            gvk: None,
        }],
    }
}

/// Every path of a resource in one version: for a namespaced kind, the paths under
/// `/namespaces/{namespace}/` (operation ids `...Namespaced<Kind>...`, as kube-apiserver's)
/// and its list and watch across all namespaces (`...ForAllNamespaces`).
pub fn resource_paths(info: &ResourceInfo, version: &str, definition: &str) -> Vec<PathItem> {
    let g = group_camel(info.group);
    let v = capitalize(version);
    let namespaced_kind = format!("Namespaced{}", info.kind);
    let kind = info.kind;
    // What operation ids call the kind.
    let op_kind: &str = if info.namespaced {
        &namespaced_kind
    } else {
        kind
    };
    let scope = if info.namespaced {
        "namespaces/{namespace}/"
    } else {
        ""
    };
    // The path parameters every item carries before its own.
    let scope_params = || {
        if info.namespaced {
            vec![namespace_param()]
        } else {
            Vec::new()
        }
    };
    let base = format!("/apis/{}/{version}/{scope}{}", info.group, info.plural);
    let tag = tag(info.group, version);
    let gvk = json!({"group": info.group, "kind": kind, "version": version});
    let list_def = format!("{definition}List");
    let op = |method: &'static str,
              verb: &str,
              suffix: &str,
              description: String,
              action: &'static str| Operation {
        method,
        operation_id: format!("{verb}{g}{v}{suffix}"),
        description,
        action: Some(action),
        tag: tag.clone(),
        params: Vec::new(),
        body: None,
        responses: Vec::new(),
        produces: vec![JSON, YAML],
        gvk: Some(gvk.clone()),
    };
    let write_params = || vec![dry_run(), field_manager(), field_validation()];
    let patch_params = || {
        let mut p = write_params();
        p.push(query(
            "force",
            ParamType::Boolean,
            "Force is going to \"force\" Apply requests: take over fields owned by other managers.",
        ));
        p
    };

    let mut list = op(
        "get",
        "list",
        op_kind,
        format!("list or watch objects of kind {kind}"),
        "list",
    );
    list.params = list_params();
    list.responses = vec![(200, "OK", list_def.clone())];
    list.produces = vec![JSON, YAML, JSON_WATCH];

    let mut create = op(
        "post",
        "create",
        op_kind,
        format!("create a {kind}"),
        "post",
    );
    create.params = write_params();
    create.body = Some((definition.to_string(), vec![JSON, YAML]));
    create.responses = vec![
        (200, "OK", definition.to_string()),
        (201, "Created", definition.to_string()),
        (202, "Accepted", definition.to_string()),
    ];

    let mut delete_collection = op(
        "delete",
        "delete",
        &format!("Collection{op_kind}"),
        format!("delete collection of {kind}"),
        "deletecollection",
    );
    delete_collection.params = delete_params();
    delete_collection.params.extend(list_params());
    delete_collection.body = Some((meta("DeleteOptions"), vec![JSON, YAML]));
    delete_collection.responses = vec![(200, "OK", meta("Status"))];

    let mut read = op(
        "get",
        "read",
        op_kind,
        format!("read the specified {kind}"),
        "get",
    );
    read.responses = vec![(200, "OK", definition.to_string())];

    let mut replace = op(
        "put",
        "replace",
        op_kind,
        format!("replace the specified {kind}"),
        "put",
    );
    replace.params = write_params();
    replace.body = Some((definition.to_string(), vec![JSON, YAML]));
    replace.responses = vec![
        (200, "OK", definition.to_string()),
        (201, "Created", definition.to_string()),
    ];

    let mut patch = op(
        "patch",
        "patch",
        op_kind,
        format!("partially update the specified {kind}"),
        "patch",
    );
    patch.params = patch_params();
    patch.body = Some((meta("Patch"), PATCH_TYPES.to_vec()));
    patch.responses = vec![
        (200, "OK", definition.to_string()),
        (201, "Created", definition.to_string()),
    ];

    let mut delete = op(
        "delete",
        "delete",
        op_kind,
        format!("delete a {kind}"),
        "delete",
    );
    delete.params = delete_params();
    delete.body = Some((meta("DeleteOptions"), vec![JSON, YAML]));
    delete.responses = vec![
        (200, "OK", meta("Status")),
        (202, "Accepted", meta("Status")),
    ];

    let with_scope = |params: Vec<Param>| {
        let mut all = scope_params();
        all.extend(params);
        all
    };
    let mut items = vec![
        PathItem {
            path: base.clone(),
            params: with_scope(vec![pretty()]),
            ops: vec![list, create, delete_collection],
        },
        PathItem {
            path: format!("{base}/{{name}}"),
            params: with_scope(vec![name_param(), pretty()]),
            ops: vec![read, replace, patch, delete],
        },
    ];

    if info.has_status_subresource {
        let status = format!("{op_kind}Status");
        let mut read_status = op(
            "get",
            "read",
            &status,
            format!("read status of the specified {kind}"),
            "get",
        );
        read_status.responses = vec![(200, "OK", definition.to_string())];
        let mut replace_status = op(
            "put",
            "replace",
            &status,
            format!("replace status of the specified {kind}"),
            "put",
        );
        replace_status.params = write_params();
        replace_status.body = Some((definition.to_string(), vec![JSON, YAML]));
        replace_status.responses = vec![
            (200, "OK", definition.to_string()),
            (201, "Created", definition.to_string()),
        ];
        let mut patch_status = op(
            "patch",
            "patch",
            &status,
            format!("partially update status of the specified {kind}"),
            "patch",
        );
        patch_status.params = patch_params();
        patch_status.body = Some((meta("Patch"), PATCH_TYPES.to_vec()));
        patch_status.responses = vec![
            (200, "OK", definition.to_string()),
            (201, "Created", definition.to_string()),
        ];
        items.push(PathItem {
            path: format!("{base}/{{name}}/status"),
            params: with_scope(vec![name_param(), pretty()]),
            ops: vec![read_status, replace_status, patch_status],
        });
    }

    // The deprecated watch paths kube-apiserver still documents.
    let watch_base = format!(
        "/apis/{}/{version}/watch/{scope}{}",
        info.group, info.plural
    );
    let mut watch_list = op(
        "get",
        "watch",
        &format!("{op_kind}List"),
        format!(
            "watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."
        ),
        "watchlist",
    );
    watch_list.params = list_params();
    watch_list.responses = vec![(200, "OK", meta("WatchEvent"))];
    watch_list.produces = vec![JSON, YAML, JSON_WATCH];
    let mut watch_one = op(
        "get",
        "watch",
        op_kind,
        format!(
            "watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."
        ),
        "watch",
    );
    watch_one.params = list_params();
    watch_one.responses = vec![(200, "OK", meta("WatchEvent"))];
    watch_one.produces = vec![JSON, YAML, JSON_WATCH];
    items.push(PathItem {
        path: watch_base.clone(),
        params: with_scope(vec![pretty()]),
        ops: vec![watch_list],
    });
    items.push(PathItem {
        path: format!("{watch_base}/{{name}}"),
        params: with_scope(vec![name_param(), pretty()]),
        ops: vec![watch_one],
    });
    if info.namespaced {
        let mut list_all = op(
            "get",
            "list",
            &format!("{kind}ForAllNamespaces"),
            format!("list or watch objects of kind {kind}"),
            "list",
        );
        list_all.params = list_params();
        list_all.responses = vec![(200, "OK", list_def.clone())];
        list_all.produces = vec![JSON, YAML, JSON_WATCH];
        let mut watch_all = op(
            "get",
            "watch",
            &format!("{kind}ListForAllNamespaces"),
            format!(
                "watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."
            ),
            "watchlist",
        );
        watch_all.params = list_params();
        watch_all.responses = vec![(200, "OK", meta("WatchEvent"))];
        watch_all.produces = vec![JSON, YAML, JSON_WATCH];
        items.push(PathItem {
            path: format!("/apis/{}/{version}/{}", info.group, info.plural),
            params: vec![pretty()],
            ops: vec![list_all],
        });
        items.push(PathItem {
            path: format!("/apis/{}/{version}/watch/{}", info.group, info.plural),
            params: vec![pretty()],
            ops: vec![watch_all],
        });
    }
    items
}

fn type_name(t: ParamType) -> &'static str {
    match t {
        ParamType::String => "string",
        ParamType::Integer => "integer",
        ParamType::Boolean => "boolean",
    }
}

fn v2_param(p: &Param) -> Value {
    let mut v = json!({
        "name": p.name,
        "in": p.location,
        "description": p.description,
        "type": type_name(p.type_),
        "uniqueItems": true,
    });
    if p.required {
        v["required"] = json!(true);
    }
    v
}

fn v3_param(p: &Param) -> Value {
    let mut v = json!({
        "name": p.name,
        "in": p.location,
        "description": p.description,
        "schema": {"type": type_name(p.type_), "uniqueItems": true},
    });
    if p.required {
        v["required"] = json!(true);
    }
    v
}

fn finish(op: &Operation, mut out: Map<String, Value>) -> Value {
    if let Some(action) = op.action {
        out.insert("x-kubernetes-action".into(), json!(action));
    }
    if let Some(gvk) = &op.gvk {
        out.insert("x-kubernetes-group-version-kind".into(), gvk.clone());
    }
    Value::Object(out)
}

pub fn render_v2(items: &[PathItem]) -> Map<String, Value> {
    let mut paths = Map::new();
    for item in items {
        let mut path = Map::new();
        for op in &item.ops {
            let mut params: Vec<Value> = Vec::new();
            if let Some((def, _)) = &op.body {
                params.push(json!({"name": "body", "in": "body", "required": true,
                                   "schema": {"$ref": format!("#/definitions/{def}")}}));
            }
            params.extend(op.params.iter().map(v2_param));
            let mut responses = Map::new();
            for (code, description, def) in &op.responses {
                responses.insert(
                    code.to_string(),
                    json!({"description": description, "schema": {"$ref": format!("#/definitions/{def}")}}),
                );
            }
            responses.insert("401".into(), json!({"description": "Unauthorized"}));
            let consumes: Vec<&str> = match &op.body {
                Some((_, types)) => types.clone(),
                None => vec!["*/*"],
            };
            let mut out = Map::new();
            out.insert("description".into(), json!(op.description));
            out.insert("consumes".into(), json!(consumes));
            out.insert("produces".into(), json!(op.produces));
            out.insert("schemes".into(), json!(["https"]));
            out.insert("tags".into(), json!([op.tag]));
            out.insert("operationId".into(), json!(op.operation_id));
            if !params.is_empty() {
                out.insert("parameters".into(), Value::Array(params));
            }
            out.insert("responses".into(), Value::Object(responses));
            path.insert(op.method.into(), finish(op, out));
        }
        if !item.params.is_empty() {
            path.insert(
                "parameters".into(),
                Value::Array(item.params.iter().map(v2_param).collect()),
            );
        }
        paths.insert(item.path.clone(), Value::Object(path));
    }
    paths
}

pub fn render_v3(items: &[PathItem]) -> Map<String, Value> {
    let mut paths = Map::new();
    for item in items {
        let mut path = Map::new();
        for op in &item.ops {
            let mut out = Map::new();
            out.insert("tags".into(), json!([op.tag]));
            out.insert("description".into(), json!(op.description));
            out.insert("operationId".into(), json!(op.operation_id));
            if !op.params.is_empty() {
                out.insert(
                    "parameters".into(),
                    Value::Array(op.params.iter().map(v3_param).collect()),
                );
            }
            if let Some((def, types)) = &op.body {
                let content: Map<String, Value> = types
                    .iter()
                    .map(|t| {
                        (
                            t.to_string(),
                            json!({"schema": {"$ref": format!("#/components/schemas/{def}")}}),
                        )
                    })
                    .collect();
                out.insert(
                    "requestBody".into(),
                    json!({"content": content, "required": true}),
                );
            }
            let mut responses = Map::new();
            for (code, description, def) in &op.responses {
                let content: Map<String, Value> = op
                    .produces
                    .iter()
                    .map(|t| {
                        (
                            t.to_string(),
                            json!({"schema": {"$ref": format!("#/components/schemas/{def}")}}),
                        )
                    })
                    .collect();
                responses.insert(
                    code.to_string(),
                    json!({"description": description, "content": content}),
                );
            }
            responses.insert("401".into(), json!({"description": "Unauthorized"}));
            out.insert("responses".into(), Value::Object(responses));
            path.insert(op.method.into(), finish(op, out));
        }
        if !item.params.is_empty() {
            path.insert(
                "parameters".into(),
                Value::Array(item.params.iter().map(v3_param).collect()),
            );
        }
        paths.insert(item.path.clone(), Value::Object(path));
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_id_parts() {
        assert_eq!(group_camel("storagemigration.k8s.io"), "Storagemigration");
        assert_eq!(
            group_camel("flowcontrol.apiserver.k8s.io"),
            "FlowcontrolApiserver"
        );
        assert_eq!(group_camel("example.test"), "ExampleTest");
        assert_eq!(
            tag("storagemigration.k8s.io", "v1beta1"),
            "storagemigration_v1beta1"
        );
    }
}
