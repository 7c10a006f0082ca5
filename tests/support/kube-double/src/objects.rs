//! The REST verbs on resources: get, list, create, update, patch, delete, deletecollection,
//! with the representations clients negotiate (full objects, PartialObjectMetadata).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::continue_token::ContinueToken;
use crate::engine::{DeleteOutcome, Engine, ListParams, Preconditions, Writer, unsupported_patch};
use crate::http::{Body, Query, json_response, status_response};
use crate::metrics::ListRecord;
use crate::negotiate::{Encoding, Output, is_json_body, negotiate_encoded, patch_type};
use crate::protobuf;
use crate::resources::{Flavor, ResourceDef};
use crate::reviews;
use crate::route::ResourceRoute;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiResult, Cause, StatusError, go_quote};
use crate::table;
use crate::watch;

/// Everything a resource handler needs from the request.
pub struct Call<'a> {
    pub engine: &'a Arc<Engine>,
    pub route: ResourceRoute,
    pub verb: &'static str,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub pretty: bool,
}

impl Call<'_> {
    fn accept(&self) -> Option<&str> {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
    }

    fn content_type(&self) -> Option<&str> {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }

    /// `fieldManager`, else the User-Agent up to its first `/` (how kube-apiserver names the
    /// managedFields manager, README of the recordings).
    fn manager(&self) -> String {
        if let Some(m) = self.query.get("fieldManager").filter(|m| !m.is_empty()) {
            return m.to_string();
        }
        let ua = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let manager = ua.split('/').next().unwrap_or("");
        manager.chars().take(128).collect()
    }

    /// Validates `dryRun` (only `All` exists, recording 17a).
    fn dry_run(&self, options_kind: &str) -> ApiResult<bool> {
        let values = self.query.all("dryRun");
        if values.iter().any(|v| *v != "All") {
            let rendered = format!(
                "[{}]",
                values
                    .iter()
                    .map(|v| go_quote(v))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            return Err(StatusError::invalid_options(
                options_kind,
                vec![Cause::not_supported("dryRun", &rendered, &["All"])],
            ));
        }
        Ok(!values.is_empty())
    }

    fn writer(&self, options_kind: &str) -> ApiResult<Writer> {
        Ok(Writer {
            manager: self.manager(),
            dry_run: self.dry_run(options_kind)?,
        })
    }

    fn output(&self) -> ApiResult<Output> {
        self.negotiated().map(|(output, _)| output)
    }

    /// The representation asked for and its encoding: protobuf for the metadata forms of any
    /// resource, and for the plain form of a kind the double has messages for.
    fn negotiated(&self) -> ApiResult<(Output, Encoding)> {
        negotiate_encoded(self.accept(), false, self.speaks_protobuf()).ok_or_else(|| {
            StatusError::not_acceptable(
                "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            )
        })
    }

    /// Whether the resource's own kind is written and read in protobuf here (kube-apiserver:
    /// every built-in kind, no custom resource; the double: ConfigMaps).
    fn speaks_protobuf(&self) -> bool {
        let def = &self.route.def;
        protobuf::speaks(&def.group_version(&self.route.version), &def.kind)
    }

    fn protobuf_body(&self) -> bool {
        self.content_type()
            .and_then(|ct| ct.split(';').next())
            .is_some_and(|ct| ct.trim().eq_ignore_ascii_case(protobuf::MEDIA_TYPE))
    }
}

pub async fn handle(call: Call<'_>) -> Response<Body> {
    let pretty = call.pretty;
    let def = call.route.def.clone();
    let needs_name = matches!(call.verb, "get" | "update" | "patch" | "delete");
    if needs_name && call.route.name.is_none() {
        return status_response(
            &StatusError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ),
            pretty,
        );
    }
    let supported = match &call.route.subresource {
        Some(sub) => def
            .subresources
            .iter()
            .find(|s| &s.name == sub)
            .is_some_and(|s| s.verbs.iter().any(|v| v == call.verb)),
        None => def.is_verb_supported(call.verb),
    };
    if !supported {
        return status_response(
            &StatusError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ),
            pretty,
        );
    }
    let result = match call.verb {
        "get" => get(&call),
        "list" => list(&call),
        "watch" => return watch::serve(&call).await,
        "create" => create(&call),
        "update" => update(&call),
        "patch" => patch(&call),
        "delete" => delete(&call),
        "deletecollection" => delete_collection(&call),
        _ => Err(StatusError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    };
    match result {
        Ok((code, body)) => match call.negotiated() {
            Ok((_, Encoding::Protobuf)) => protobuf_response(code, &body, pretty),
            _ => json_response(code, &body, pretty),
        },
        Err(err) => status_response(&err, pretty),
    }
}

/// An answer in protobuf (JSON for a value of a kind without messages here).
fn protobuf_response(code: StatusCode, body: &Value, pretty: bool) -> Response<Body> {
    let Some(bytes) = protobuf::encode(body) else {
        return json_response(code, body, pretty);
    };
    Response::builder()
        .status(code)
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header("Audit-Id", uuid::Uuid::new_v4().to_string())
        .header(header::CONTENT_TYPE, protobuf::MEDIA_TYPE)
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(crate::http::full(bytes))
        .unwrap_or_else(|_| Response::new(crate::http::empty()))
}

type Answer = ApiResult<(StatusCode, Value)>;

pub use crate::engine::present;

fn partial_metadata(obj: &Value, meta_version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": format!("meta.k8s.io/{meta_version}"),
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// One object in the negotiated representation (recording 06 for the metadata forms and
/// the mismatched 500).
pub fn single(def: &ResourceDef, obj: Value, version: &str, output: &Output) -> ApiResult<Value> {
    match output {
        Output::PartialMetadata { version: v } => Ok(partial_metadata(&obj, v)),
        Output::PartialMetadataList { .. } => Err(StatusError {
            code: 500,
            reason: None,
            message: "content is not a list".into(),
            details: None,
            continue_token: None,
            retry_after_seconds: None,
        }),
        _ => Ok(present(def, obj, version)),
    }
}

fn get(call: &Call<'_>) -> Answer {
    let output = call.output()?;
    let route = &call.route;
    let name = route.name.as_deref().unwrap_or("");
    let obj = call
        .engine
        .get(&route.def, route.namespace.as_deref(), name)?;
    if output == Output::Table {
        let include = table::include_object(call.query.get("includeObject"))?;
        let obj = present(&route.def, obj, &route.version);
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        return Ok((
            StatusCode::OK,
            table::table(call.engine, &route.def, &route.version, &[obj], rv, include),
        ));
    }
    Ok((
        StatusCode::OK,
        single(&route.def, obj, &route.version, &output)?,
    ))
}

/// `ValidateListOptions` for a plain LIST (recording 10b, step 6).
fn validate_list_options(query: &Query) -> ApiResult<()> {
    let mut causes = Vec::new();
    if let Some(m) = query.get("resourceVersionMatch").filter(|m| !m.is_empty()) {
        if query.get("resourceVersion").is_none_or(str::is_empty) {
            causes.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if query.get("continue").is_some_and(|c| !c.is_empty()) {
            causes.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            causes.push(Cause::not_supported(
                "resourceVersionMatch",
                &go_quote(m),
                &["Exact", "NotOlderThan", ""],
            ));
        }
        if m == "Exact" && query.get("resourceVersion") == Some("0") {
            causes.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if query.has("sendInitialEvents") {
        causes.push(Cause::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(StatusError::invalid_options("ListOptions", causes))
    }
}

pub fn selectors(query: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))
        .map_err(StatusError::bad_request)?;
    let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))
        .map_err(StatusError::bad_request)?;
    Ok((labels, fields))
}

fn list(call: &Call<'_>) -> Answer {
    let route = &call.route;
    let token_text = call.query.get("continue").filter(|c| !c.is_empty());
    let decoded = token_text.map(ContinueToken::decode);
    let mut record = ListRecord {
        resource: route.def.qualified_resource(),
        namespace: route.namespace.clone(),
        limit: call.query.get("limit").and_then(|l| l.parse().ok()),
        continue_token: token_text.map(str::to_string),
        start_key: decoded
            .as_ref()
            .and_then(|d| d.as_ref().ok())
            .map(|t| t.start.trim_end_matches('\u{0}').to_string()),
        token_revision: decoded
            .as_ref()
            .and_then(|d| d.as_ref().ok())
            .map(|t| t.revision.map_or(-1, |r| r as i64)),
        code: 200,
        items: 0,
        next_continue: None,
        resource_version: None,
        metadata_only: false,
    };
    let result = list_page(call, decoded);
    match &result {
        Ok((code, body)) => {
            record.code = code.as_u16();
            record.items = body["items"].as_array().map_or(0, Vec::len);
            record.next_continue = body["metadata"]["continue"].as_str().map(str::to_string);
            record.resource_version = body["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|rv| rv.parse().ok());
            record.metadata_only = body["kind"] == "PartialObjectMetadataList";
        }
        Err(err) => record.code = err.code,
    }
    call.engine.metrics.list(record);
    result
}

fn list_page(call: &Call<'_>, decoded: Option<Result<ContinueToken, String>>) -> Answer {
    let route = &call.route;
    let def = &route.def;
    let output = call.output()?;
    if let Output::PartialMetadata { .. } = output {
        let list_type = if def.is_custom() {
            "*unstructured.UnstructuredList".to_string()
        } else {
            format!(
                "*{}.{}",
                if def.group.is_empty() {
                    "core"
                } else {
                    def.group.split('.').next().unwrap_or("")
                },
                def.list_kind
            )
        };
        return Err(StatusError::not_acceptable(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({list_type})"
        )));
    }
    validate_list_options(&call.query)?;
    let token = decoded.transpose().map_err(StatusError::bad_request)?;
    let resource_version = call.query.get("resourceVersion").filter(|s| !s.is_empty());
    if token.is_some() && resource_version.is_some_and(|rv| rv != "0") {
        return Err(StatusError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let limit = match call.query.get("limit").filter(|l| !l.is_empty()) {
        Some(l) => Some(
            l.parse::<i64>()
                .map_err(|_| StatusError::bad_request(format!("invalid limit {}", go_quote(l))))?
                .max(0) as usize,
        ),
        None => None,
    };
    let (labels, fields) = selectors(&call.query)?;
    let params = ListParams {
        labels,
        fields,
        limit,
        continue_token: token,
        resource_version: resource_version.map(str::to_string),
        resource_version_match: call
            .query
            .get("resourceVersionMatch")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    };
    let page = call.engine.list(def, &route.prefix(), &params)?;
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), json!(page.revision.to_string()));
    if let Some(next) = &page.next {
        metadata.insert("continue".into(), json!(next.encode()));
    }
    if let Some(remaining) = page.remaining {
        metadata.insert("remainingItemCount".into(), json!(remaining));
    }
    let body = match &output {
        Output::Table => {
            let include = table::include_object(call.query.get("includeObject"))?;
            let items: Vec<Value> = page
                .items
                .into_iter()
                .map(|o| present(def, o, &route.version))
                .collect();
            let mut table = table::table(
                call.engine,
                def,
                &route.version,
                &items,
                Some(page.revision.to_string()),
                include,
            );
            table["metadata"] = Value::Object(metadata);
            table
        }
        Output::PartialMetadataList { version } => {
            let items: Vec<Value> = page
                .items
                .iter()
                .map(|o| partial_metadata(o, version))
                .collect();
            // Go encodes the empty (nil) item slice of a metadata-only list as `null`; a typed
            // list's is `[]` (recording 19).
            let items = if items.is_empty() {
                Value::Null
            } else {
                Value::Array(items)
            };
            json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": format!("meta.k8s.io/{version}"),
                "metadata": metadata,
                "items": items,
            })
        }
        _ => {
            // An unstructured (custom resource) list always says `continue`, empty on the
            // last page; a built-in list only when there is a next page.
            if def.is_custom() && page.next.is_none() {
                metadata.insert("continue".into(), json!(""));
            }
            // Items of built-in lists carry no kind/apiVersion; custom resources' do.
            let items: Vec<Value> = page
                .items
                .into_iter()
                .map(|o| {
                    let mut o = present(def, o, &route.version);
                    if !def.is_custom()
                        && let Some(map) = o.as_object_mut()
                    {
                        map.remove("kind");
                        map.remove("apiVersion");
                    }
                    o
                })
                .collect();
            json!({
                "kind": def.list_kind,
                "apiVersion": route.group_version(),
                "metadata": metadata,
                "items": items,
            })
        }
    };
    Ok((StatusCode::OK, body))
}

/// Decodes a create/update body as kube-apiserver's decoder reports failures (16b; 20h for
/// protobuf).
fn decode_body(call: &Call<'_>) -> ApiResult<Value> {
    if call.protobuf_body() && call.speaks_protobuf() {
        return decode_protobuf(call);
    }
    if !is_json_body(call.content_type()) {
        return Err(StatusError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor (got {})",
            call.content_type().unwrap_or("")
        )));
    }
    let kind = &call.route.def.kind;
    let parsed: Result<Value, String> = serde_json::from_slice(&call.body)
        .or_else(|json_err| {
            // YAML bodies (kubectl can send them); JSON errors are what clients expect to see.
            serde_norway::from_slice::<Value>(&call.body)
                .ok()
                .filter(Value::is_object)
                .ok_or(json_err)
        })
        .map_err(|e| go_json_error(&e));
    match parsed {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(StatusError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: json: cannot unmarshal into Go value of type struct"
        ))),
        Err(e) => {
            let body = String::from_utf8_lossy(&call.body);
            // Go's decoder quotes the first 30 characters, marking a cut with " ...".
            let snippet = match body.char_indices().nth(30) {
                Some((cut, _)) => format!("{} ...", &body[..cut]),
                None => body.to_string(),
            };
            Err(StatusError::bad_request(format!(
                "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: {e} ({snippet})"
            )))
        }
    }
}

/// A protobuf create/update body of a kind with messages here (a ConfigMap), as
/// kube-apiserver words what it cannot read (recording 20h): not an envelope ("the object
/// provided is unrecognized"), an envelope of another kind (no conversion), a message that
/// does not decode; unknown fields are skipped without a warning, `fieldValidation` or not.
fn decode_protobuf(call: &Call<'_>) -> ApiResult<Value> {
    let def = &call.route.def;
    let kind = &def.kind;
    let envelope = protobuf::open(&call.body).map_err(|detail| {
        StatusError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): {detail} ({})",
            protobuf::summarize(&call.body)
        ))
    })?;
    let version = envelope
        .api_version
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let cannot = |detail: String| {
        StatusError::bad_request(format!(
            "{} in version {} cannot be handled as a {kind}: {detail}",
            envelope.kind,
            go_quote(&version)
        ))
    };
    let own_kind = envelope.kind == *kind && envelope.api_version == call.route.group_version();
    if !own_kind {
        let built_in = call
            .engine
            .catalog
            .all()
            .iter()
            .any(|d| !d.is_custom() && d.kind == envelope.kind);
        // The Go types of the legacy scheme: `<package>.<Kind>`, the internal `core.<Kind>`.
        return Err(cannot(if built_in {
            format!(
                "converting ({version}.{}) to (core.{kind}): unknown conversion",
                envelope.kind
            )
        } else {
            format!(
                "no kind {} is registered for version {} in scheme \"pkg/api/legacyscheme/scheme.go:30\"",
                go_quote(&envelope.kind),
                go_quote(&envelope.api_version)
            )
        }));
    }
    protobuf::config_map_json(&envelope.raw).map_err(cannot)
}

/// encoding/json's words for the errors it shares with serde_json; the rest keep serde's.
fn go_json_error(err: &serde_json::Error) -> String {
    match err.classify() {
        serde_json::error::Category::Eof => "unexpected end of JSON input".into(),
        _ => err.to_string(),
    }
}

fn create(call: &Call<'_>) -> Answer {
    let route = &call.route;
    let def = &route.def;
    if route.name.is_some() {
        return Err(StatusError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let output = call.output()?;
    let writer = call.writer("CreateOptions")?;
    let body = decode_body(call)?;
    match def.flavor {
        Flavor::TokenReview => {
            return reviews::token_review(call.engine, def, &route.version, body, &writer);
        }
        Flavor::SubjectAccessReview => {
            return reviews::subject_access_review(call.engine, def, &route.version, body, &writer);
        }
        _ => {}
    }
    let obj = call.engine.create(
        def,
        &route.version,
        route.namespace.as_deref(),
        body,
        &writer,
    )?;
    Ok((
        StatusCode::CREATED,
        single(def, obj, &route.version, &output)?,
    ))
}

fn update(call: &Call<'_>) -> Answer {
    let route = &call.route;
    let output = call.output()?;
    let writer = call.writer("UpdateOptions")?;
    let body = decode_body(call)?;
    let name = route.name.as_deref().unwrap_or("");
    let written = call.engine.update(
        &route.def,
        &route.version,
        route.namespace.as_deref(),
        name,
        body,
        route.subresource.as_deref(),
        &writer,
    )?;
    let code = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        code,
        single(&route.def, written.obj, &route.version, &output)?,
    ))
}

fn patch(call: &Call<'_>) -> Answer {
    let route = &call.route;
    let output = call.output()?;
    let Some(patch_type) = patch_type(call.content_type()) else {
        return Err(if route.def.is_custom() {
            unsupported_patch()
        } else {
            StatusError::unsupported_patch_content_type()
        });
    };
    let writer = call.writer("PatchOptions")?;
    let name = route.name.as_deref().unwrap_or("");
    let explicit_manager = call
        .query
        .get("fieldManager")
        .is_some_and(|m| !m.is_empty());
    let written = call.engine.patch(
        &route.def,
        &route.version,
        route.namespace.as_deref(),
        name,
        patch_type,
        &call.body,
        route.subresource.as_deref(),
        &writer,
        explicit_manager,
    )?;
    let code = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        code,
        single(&route.def, written.obj, &route.version, &output)?,
    ))
}

/// DeleteOptions from the body (optional) and the query.
fn delete_options(call: &Call<'_>) -> ApiResult<(Preconditions, Writer)> {
    let mut writer = call.writer("DeleteOptions")?;
    let mut pre = Preconditions::default();
    if !call.body.is_empty() {
        let opts: Value = if call.protobuf_body() {
            delete_options_protobuf(&call.body)?
        } else {
            serde_json::from_slice(&call.body).map_err(|e| {
                StatusError::bad_request(format!("error decoding DeleteOptions: {e}"))
            })?
        };
        pre.uid = opts["preconditions"]["uid"].as_str().map(str::to_string);
        pre.resource_version = opts["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        if let Some(dry) = opts["dryRun"].as_array() {
            if dry.iter().any(|d| d.as_str() != Some("All")) {
                return Err(StatusError::invalid_options(
                    "DeleteOptions",
                    vec![Cause::not_supported(
                        "dryRun",
                        &opts["dryRun"].to_string(),
                        &["All"],
                    )],
                ));
            }
            writer.dry_run |= !dry.is_empty();
        }
    }
    Ok((pre, writer))
}

/// A protobuf DeleteOptions body (client-go's typed and metadata clients send one with a
/// delete; a meta.k8s.io message, read for every resource: recordings 20a step 6, 20e), as
/// the JSON a client would have sent.
fn delete_options_protobuf(body: &[u8]) -> ApiResult<Value> {
    let unrecognized = |detail: String| {
        StatusError::bad_request(format!(
            "the object provided is unrecognized (must be of type DeleteOptions): {detail} ({})",
            protobuf::summarize(body)
        ))
    };
    let envelope = protobuf::open(body).map_err(unrecognized)?;
    if envelope.kind != "DeleteOptions" {
        return Err(StatusError::bad_request(format!(
            "{} in version {} cannot be handled as a DeleteOptions",
            envelope.kind,
            go_quote(envelope.api_version.rsplit('/').next().unwrap_or_default())
        )));
    }
    protobuf::delete_options_json(&envelope.raw).map_err(unrecognized)
}

fn delete(call: &Call<'_>) -> Answer {
    let route = &call.route;
    let def = &route.def;
    let output = call.output()?;
    let (pre, writer) = delete_options(call)?;
    let name = route.name.as_deref().unwrap_or("");
    match call
        .engine
        .delete(def, route.namespace.as_deref(), name, &pre, &writer)?
    {
        DeleteOutcome::Finalizing(obj) => {
            Ok((StatusCode::OK, single(def, obj, &route.version, &output)?))
        }
        // Namespaces answer with the object (ReturnDeletedObject); everything else with a
        // Success Status whose details.kind is the resource (`finalizeDelete`).
        DeleteOutcome::Deleted(obj) if def.flavor == Flavor::Namespace => {
            Ok((StatusCode::OK, single(def, obj, &route.version, &output)?))
        }
        DeleteOutcome::Deleted(obj) => {
            let mut details = Map::new();
            details.insert("name".into(), json!(name));
            if !def.group.is_empty() {
                details.insert("group".into(), json!(def.group));
            }
            details.insert("kind".into(), json!(def.plural));
            if let Some(uid) = crate::object::meta_str(&obj, "uid") {
                details.insert("uid".into(), json!(uid));
            }
            Ok((
                StatusCode::OK,
                json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }),
            ))
        }
    }
}

fn delete_collection(call: &Call<'_>) -> Answer {
    let route = &call.route;
    let def = &route.def;
    let (pre, writer) = delete_options(call)?;
    let (labels, fields) = selectors(&call.query)?;
    let params = ListParams {
        labels,
        fields,
        ..ListParams::default()
    };
    let page = call.engine.list(def, &route.prefix(), &params)?;
    let mut deleted = Vec::new();
    for obj in page.items {
        let name = crate::object::name_of(&obj).to_string();
        let ns = crate::object::meta_str(&obj, "namespace").map(str::to_string);
        match call.engine.delete(def, ns.as_deref(), &name, &pre, &writer) {
            Ok(DeleteOutcome::Deleted(o) | DeleteOutcome::Finalizing(o)) => {
                deleted.push(present(def, o, &route.version));
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok((
        StatusCode::OK,
        json!({
            "kind": def.list_kind,
            "apiVersion": route.group_version(),
            "metadata": {"resourceVersion": call.engine.store.revision().to_string()},
            "items": deleted,
        }),
    ))
}
