//! The REST operations of a resource, described once and rendered as swagger 2.0 or OpenAPI
//! 3.0 path items (operation ids, tags and parameters in kube-apiserver's style).

use serde_json::{Map, Value, json};

use svm_registry::ResourceInfo;
use svm_registry::openapi_meta::META;

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
pub(super) struct PathItem {
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
pub(super) fn api_resources(group: &str, version: &str) -> PathItem {
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
pub(super) fn api_group(group: &str) -> PathItem {
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
pub(super) fn resource_paths(
    info: &ResourceInfo,
    version: &str,
    definition: &str,
) -> Vec<PathItem> {
    let r = ResourceOps::new(info, version, definition);
    let mut items = vec![r.collection_item(), r.object_item()];
    if info.has_status_subresource {
        items.push(r.status_item());
    }
    items.extend(r.watch_items());
    if info.namespaced {
        items.extend(r.all_namespaces_items());
    }
    items
}

/// An operation's HTTP method, the verb its id starts with, and its `x-kubernetes-action`.
type Verb = (&'static str, &'static str, &'static str);
const LIST: Verb = ("get", "list", "list");
const READ: Verb = ("get", "read", "get");
const WATCH: Verb = ("get", "watch", "watch");
const WATCH_LIST: Verb = ("get", "watch", "watchlist");
const CREATE: Verb = ("post", "create", "post");
const REPLACE: Verb = ("put", "replace", "put");
const PATCH: Verb = ("patch", "patch", "patch");
const DELETE: Verb = ("delete", "delete", "delete");
const DELETE_COLLECTION: Verb = ("delete", "delete", "deletecollection");

/// How one resource in one version names and describes its operations.
struct ResourceOps<'a> {
    info: &'a ResourceInfo,
    version: &'a str,
    /// The object's definition name; `<definition>List` is its list's.
    definition: &'a str,
    /// `<Group><Version>`, after the verb in every operation id.
    group_version: String,
    /// What operation ids call the kind: `Namespaced<Kind>` for a namespaced one.
    op_kind: String,
    /// `namespaces/{namespace}/` for a namespaced kind.
    scope: &'static str,
    tag: String,
    gvk: Value,
}

impl<'a> ResourceOps<'a> {
    fn new(info: &'a ResourceInfo, version: &'a str, definition: &'a str) -> Self {
        let (op_kind, scope) = if info.namespaced {
            (
                format!("Namespaced{}", info.kind),
                "namespaces/{namespace}/",
            )
        } else {
            (info.kind.to_string(), "")
        };
        Self {
            info,
            version,
            definition,
            group_version: format!("{}{}", group_camel(info.group), capitalize(version)),
            op_kind,
            scope,
            tag: tag(info.group, version),
            gvk: json!({"group": info.group, "kind": info.kind, "version": version}),
        }
    }

    /// One operation: `verb` and `suffix` make its id, `action` is its `x-kubernetes-action`.
    fn op(&self, (method, verb, action): Verb, suffix: &str, description: String) -> Operation {
        Operation {
            method,
            operation_id: format!("{verb}{}{suffix}", self.group_version),
            description,
            action: Some(action),
            tag: self.tag.clone(),
            params: Vec::new(),
            body: None,
            responses: Vec::new(),
            produces: vec![JSON, YAML],
            gvk: Some(self.gvk.clone()),
        }
    }

    /// The resource's path, under `/watch/` for the deprecated watch paths.
    fn base(&self, watch: bool) -> String {
        let watch = if watch { "watch/" } else { "" };
        let (group, version, plural) = (self.info.group, self.version, self.info.plural);
        format!("/apis/{group}/{version}/{watch}{}{plural}", self.scope)
    }

    /// Path-level parameters: the namespace (for a namespaced kind) before `params`.
    fn scoped(&self, params: Vec<Param>) -> Vec<Param> {
        let mut all = Vec::new();
        if self.info.namespaced {
            all.push(namespace_param());
        }
        all.extend(params);
        all
    }

    fn answers_object(&self, mut op: Operation, codes: &[(u16, &'static str)]) -> Operation {
        op.responses = codes
            .iter()
            .map(|&(code, text)| (code, text, self.definition.to_string()))
            .collect();
        op
    }

    fn list(&self, suffix: &str) -> Operation {
        let description = format!("list or watch objects of kind {}", self.info.kind);
        let mut list = self.op(LIST, suffix, description);
        list.params = list_params();
        list.responses = vec![(200, "OK", format!("{}List", self.definition))];
        list.produces = vec![JSON, YAML, JSON_WATCH];
        list
    }

    fn watch(&self, verb: Verb, suffix: &str, description: String) -> Operation {
        let mut watch = self.op(verb, suffix, description);
        watch.params = list_params();
        watch.responses = vec![(200, "OK", meta("WatchEvent"))];
        watch.produces = vec![JSON, YAML, JSON_WATCH];
        watch
    }

    fn watch_list(&self, suffix: &str) -> Operation {
        let kind = self.info.kind;
        self.watch(
            WATCH_LIST,
            suffix,
            format!(
                "watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."
            ),
        )
    }

    fn read(&self, suffix: &str, description: String) -> Operation {
        self.answers_object(self.op(READ, suffix, description), &[(200, "OK")])
    }

    fn replace(&self, suffix: &str, description: String) -> Operation {
        let mut replace = self.op(REPLACE, suffix, description);
        replace.params = write_params();
        replace.body = Some((self.definition.to_string(), vec![JSON, YAML]));
        self.answers_object(replace, &[(200, "OK"), (201, "Created")])
    }

    fn patch(&self, suffix: &str, description: String) -> Operation {
        let mut patch = self.op(PATCH, suffix, description);
        patch.params = write_params();
        patch.params.push(query(
            "force",
            ParamType::Boolean,
            "Force is going to \"force\" Apply requests: take over fields owned by other managers.",
        ));
        patch.body = Some((meta("Patch"), PATCH_TYPES.to_vec()));
        self.answers_object(patch, &[(200, "OK"), (201, "Created")])
    }

    /// `.../<plural>`: list, create, delete the collection.
    fn collection_item(&self) -> PathItem {
        let (kind, op_kind) = (self.info.kind, self.op_kind.as_str());
        let mut create = self.op(CREATE, op_kind, format!("create a {kind}"));
        create.params = write_params();
        create.body = Some((self.definition.to_string(), vec![JSON, YAML]));
        let create =
            self.answers_object(create, &[(200, "OK"), (201, "Created"), (202, "Accepted")]);
        let description = format!("delete collection of {kind}");
        let mut delete_collection = self.op(
            DELETE_COLLECTION,
            &format!("Collection{op_kind}"),
            description,
        );
        delete_collection.params = delete_params();
        delete_collection.params.extend(list_params());
        delete_collection.body = Some((meta("DeleteOptions"), vec![JSON, YAML]));
        delete_collection.responses = vec![(200, "OK", meta("Status"))];
        PathItem {
            path: self.base(false),
            params: self.scoped(vec![pretty()]),
            ops: vec![self.list(op_kind), create, delete_collection],
        }
    }

    /// `.../<plural>/{name}`: read, replace, patch, delete.
    fn object_item(&self) -> PathItem {
        let (kind, op_kind) = (self.info.kind, self.op_kind.as_str());
        let mut delete = self.op(DELETE, op_kind, format!("delete a {kind}"));
        delete.params = delete_params();
        delete.body = Some((meta("DeleteOptions"), vec![JSON, YAML]));
        delete.responses = vec![
            (200, "OK", meta("Status")),
            (202, "Accepted", meta("Status")),
        ];
        PathItem {
            path: format!("{}/{{name}}", self.base(false)),
            params: self.scoped(vec![name_param(), pretty()]),
            ops: vec![
                self.read(op_kind, format!("read the specified {kind}")),
                self.replace(op_kind, format!("replace the specified {kind}")),
                self.patch(op_kind, format!("partially update the specified {kind}")),
                delete,
            ],
        }
    }

    /// `.../<plural>/{name}/status`: read, replace, patch the status.
    fn status_item(&self) -> PathItem {
        let kind = self.info.kind;
        let status = format!("{}Status", self.op_kind);
        PathItem {
            path: format!("{}/{{name}}/status", self.base(false)),
            params: self.scoped(vec![name_param(), pretty()]),
            ops: vec![
                self.read(&status, format!("read status of the specified {kind}")),
                self.replace(&status, format!("replace status of the specified {kind}")),
                self.patch(
                    &status,
                    format!("partially update status of the specified {kind}"),
                ),
            ],
        }
    }

    /// The deprecated watch paths kube-apiserver still documents.
    fn watch_items(&self) -> [PathItem; 2] {
        let (kind, op_kind) = (self.info.kind, self.op_kind.as_str());
        let watch_one = self.watch(
            WATCH,
            op_kind,
            format!(
                "watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."
            ),
        );
        [
            PathItem {
                path: self.base(true),
                params: self.scoped(vec![pretty()]),
                ops: vec![self.watch_list(&format!("{op_kind}List"))],
            },
            PathItem {
                path: format!("{}/{{name}}", self.base(true)),
                params: self.scoped(vec![name_param(), pretty()]),
                ops: vec![watch_one],
            },
        ]
    }

    /// A namespaced kind's list and watch across all namespaces.
    fn all_namespaces_items(&self) -> [PathItem; 2] {
        let (group, version, plural, kind) = (
            self.info.group,
            self.version,
            self.info.plural,
            self.info.kind,
        );
        [
            PathItem {
                path: format!("/apis/{group}/{version}/{plural}"),
                params: vec![pretty()],
                ops: vec![self.list(&format!("{kind}ForAllNamespaces"))],
            },
            PathItem {
                path: format!("/apis/{group}/{version}/watch/{plural}"),
                params: vec![pretty()],
                ops: vec![self.watch_list(&format!("{kind}ListForAllNamespaces"))],
            },
        ]
    }
}

fn write_params() -> Vec<Param> {
    vec![dry_run(), field_manager(), field_validation()]
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

pub(super) fn render_v2(items: &[PathItem]) -> Map<String, Value> {
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

pub(super) fn render_v3(items: &[PathItem]) -> Map<String, Value> {
    let mut paths = Map::new();
    for item in items {
        let mut path = Map::new();
        for op in &item.ops {
            path.insert(op.method.into(), v3_operation(op));
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

/// One operation of a v3 path: its parameters, request body and responses.
fn v3_operation(op: &Operation) -> Value {
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
        out.insert(
            "requestBody".into(),
            json!({"content": v3_content(types, def), "required": true}),
        );
    }
    let mut responses = Map::new();
    for (code, description, def) in &op.responses {
        responses.insert(
            code.to_string(),
            json!({"description": description, "content": v3_content(&op.produces, def)}),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    out.insert("responses".into(), Value::Object(responses));
    finish(op, out)
}

/// A v3 `content`: definition `def` in each of the media types.
fn v3_content(types: &[&str], def: &str) -> Map<String, Value> {
    types
        .iter()
        .map(|t| {
            (
                t.to_string(),
                json!({"schema": {"$ref": format!("#/components/schemas/{def}")}}),
            )
        })
        .collect()
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
