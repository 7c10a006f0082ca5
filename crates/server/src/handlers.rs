//! The per-verb handlers of resource paths, generic over `RestStorage`:
//! `/apis/<g>/<v>/<resource>[/<name>[/status]]` for cluster-scoped kinds,
//! `/apis/<g>/<v>/namespaces/<ns>/<resource>[/<name>[/status]]` for namespaced ones (whose
//! list and watch across all namespaces is `/apis/<g>/<v>/<resource>`), as kube-apiserver
//! installs them.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use serde_json::Value;

use super::AppState;
use super::body::{decode_object, decode_options, read_limited, summarize};
use super::connection::ConnectionControl;
use super::negotiate::{self, BodyFormat, Endpoint, Negotiated, Protobuf, Target};
use super::params::{self, Query, WriteVerb};
use super::status::{self, HttpError, NO_CACHE_PRIVATE};
use super::table::{TableWriter, partial_object_metadata, partial_object_metadata_list};
use super::watch::{self, EventForm};
use svm_registry::protobuf::{self, ProtobufKind, meta};
use svm_registry::rest::{FieldValidation, Subresource, Written};
use svm_registry::{ApiError, ObjectRef, RestStorage};

type HandlerResult = Result<Response, HttpError>;

/// Everything a resource handler needs about the request.
struct ResourceRequest {
    state: AppState,
    resource: Arc<dyn RestStorage>,
    version: String,
    /// The request's namespace (`/namespaces/<ns>/...`); `None` for a cluster-scoped kind and
    /// for a namespaced kind's list or watch across all namespaces.
    namespace: Option<String>,
    method: Method,
    headers: HeaderMap,
    query: Query,
    body: Body,
    /// The request's connection (absent in unit tests that call the router directly).
    connection: Option<ConnectionControl>,
}

impl ResourceRequest {
    fn negotiate(&self, endpoint: Endpoint) -> Result<Negotiated, ApiError> {
        negotiate::negotiate(
            &self.headers,
            self.query.get("pretty"),
            endpoint,
            self.speaks_protobuf(),
        )
    }

    /// The kind's protobuf messages, if it has any.
    fn protobuf(&self) -> Option<&'static dyn ProtobufKind> {
        self.resource.protobuf()
    }

    fn speaks_protobuf(&self) -> Protobuf {
        match self.protobuf() {
            Some(_) => Protobuf::Spoken,
            None => Protobuf::NotSpoken,
        }
    }

    /// The format of the request's body (its Content-Type).
    fn body_format(&self) -> Result<BodyFormat, ApiError> {
        negotiate::body_format(&self.headers, self.speaks_protobuf())
    }

    fn group(&self) -> &'static str {
        self.resource.info().group
    }

    fn kind(&self) -> &'static str {
        self.resource.info().kind
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The object `name` names in the request's namespace.
    fn at<'a>(&'a self, name: &'a str) -> ObjectRef<'a> {
        ObjectRef {
            namespace: self.namespace(),
            name,
        }
    }

    /// Options of a write, with the User-Agent that names its manager when the query does not.
    fn write_options(&self, verb: WriteVerb) -> Result<svm_registry::rest::WriteOptions, ApiError> {
        let mut opts = params::write_options(&self.query, verb)?;
        opts.user_agent = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(opts)
    }

    async fn read_body(&mut self) -> Result<bytes::Bytes, ApiError> {
        let body = std::mem::take(&mut self.body);
        read_limited(&self.headers, body, self.state.max_request_body_bytes).await
    }
}

/// Resolve `/apis/<g>/<v>/<resource>` to a served resource, or `None` (a 404).
fn resolve(
    state: &AppState,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<Arc<dyn RestStorage>> {
    let resource = state.registry.get(group, plural)?;
    resource
        .info()
        .versions
        .contains(&version)
        .then(|| resource.clone())
}

/// Which of the resource paths a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathKind {
    Collection,
    Item,
}

/// A resource path's parameters, by their names in the routes (`crates/server/src/lib.rs`): every
/// route to a resource, cluster-wide or under `/namespaces/{namespace}/`, a collection or an
/// item (`{name}`, `{subresource}`), extracts into this one shape.
#[derive(serde::Deserialize)]
pub(crate) struct ResourcePath {
    group: String,
    version: String,
    #[serde(rename = "resource")]
    plural: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    subresource: Option<String>,
}

fn resource_request(
    state: AppState,
    target: ResourcePath,
    path_kind: PathKind,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<ResourceRequest, Box<Response>> {
    let not_found = || {
        Box::new(status::not_found(
            |g| state.discovery.group(g).is_some(),
            uri.path(),
        ))
    };
    let Some(resource) = resolve(&state, &target.group, &target.version, &target.plural) else {
        return Err(not_found());
    };
    // Each kind is served at the paths of its scope only: a cluster-scoped kind has no
    // namespaced paths; a namespaced kind's only cluster-wide path is its list and watch.
    match (resource.info().namespaced, &target.namespace, path_kind) {
        (false, Some(_), _) | (true, None, PathKind::Item) => return Err(not_found()),
        (true, None, PathKind::Collection) if method != Method::GET => {
            return Err(Box::new(status::method_not_allowed().into_response()));
        }
        _ => {}
    }
    Ok(ResourceRequest {
        state,
        resource,
        namespace: target.namespace,
        version: target.version,
        method,
        headers,
        query: Query::parse(uri.query()),
        body,
        connection: None,
    })
}

/// `.../{resource}`, cluster-wide or in a namespace.
pub(crate) async fn collection(
    State(state): State<AppState>,
    Path(target): Path<ResourcePath>,
    connection: Option<Extension<ConnectionControl>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve_collection(state, target, connection, method, uri, headers, body).await
}

async fn serve_collection(
    state: AppState,
    target: ResourcePath,
    connection: Option<Extension<ConnectionControl>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut req = match resource_request(
        state,
        target,
        PathKind::Collection,
        method,
        &uri,
        headers,
        body,
    ) {
        Ok(req) => req,
        Err(not_found) => return *not_found,
    };
    req.connection = connection.map(|Extension(c)| c);
    let result = match req.method.clone() {
        Method::GET if req.query.is_watch() => watch(req).await,
        Method::GET => list(req).await,
        Method::POST => create(req).await,
        Method::DELETE => delete_collection(req).await,
        _ => Err(status::method_not_allowed()),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `.../{resource}/{name}` and `.../{resource}/{name}/{subresource}`, cluster-wide or in a
/// namespace.
pub(crate) async fn item(
    State(state): State<AppState>,
    Path(target): Path<ResourcePath>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve_item(state, target, method, uri, headers, body).await
}

/// An object, or one of its subresources; `/status` is the only one there is.
async fn serve_item(
    state: AppState,
    mut target: ResourcePath,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (name, sub) = (
        target.name.take().unwrap_or_default(),
        target.subresource.take(),
    );
    let req = match resource_request(state, target, PathKind::Item, method, &uri, headers, body) {
        Ok(req) => req,
        Err(not_found) => return *not_found,
    };
    let subresource = match sub.as_deref() {
        None => Subresource::Main,
        Some("status") if req.resource.info().has_status_subresource => Subresource::Status,
        Some(_) => return status::unknown_path(),
    };
    let result = match (req.method.clone(), subresource) {
        (Method::GET, _) => get(req, &name).await,
        (Method::PUT, _) => update(req, &name, subresource).await,
        (Method::PATCH, _) => patch(req, &name, subresource).await,
        (Method::DELETE, Subresource::Main) => delete(req, &name).await,
        _ => Err(status::method_not_allowed()),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A 200/201 response in the negotiated encoding, with a `Warning` header per warning.
fn respond(
    req: &ResourceRequest,
    code: StatusCode,
    negotiated: &Negotiated,
    value: &Value,
    warnings: &[String],
) -> HandlerResult {
    let (body, content_type) = negotiated.encode(value, req.protobuf())?;
    let mut response = (
        code,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, NO_CACHE_PRIVATE),
        ],
        body,
    )
        .into_response();
    for warning in warnings {
        let value = format!("299 - {warning:?}");
        if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    Ok(response)
}

fn table_writer(req: &ResourceRequest, target: Target) -> Result<Option<TableWriter>, ApiError> {
    match target {
        Target::Table(meta) => {
            let include = params::include_object(&req.query)?;
            Ok(Some(TableWriter::new(
                req.resource.clone(),
                &req.version,
                meta,
                include,
            )))
        }
        _ => Ok(None),
    }
}

async fn get(req: ResourceRequest, name: &str) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Read)?;
    let table = table_writer(&req, negotiated.target)?;
    let opts = params::get_options(&req.query);
    let object = req.resource.get(&req.version, req.at(name), &opts).await?;
    let value = match negotiated.target {
        Target::PartialObjectMetadataList(_) => return Ok(status::content_is_not_a_list()),
        Target::PartialObjectMetadata(meta) => partial_object_metadata(&object, meta),
        Target::Table(_) => match &table {
            Some(writer) => writer.object_table(&object, true)?,
            None => object,
        },
        Target::Object | Target::DiscoveryV2 => object,
    };
    respond(&req, StatusCode::OK, &negotiated, &value, &[])
}

async fn list(req: ResourceRequest) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Read)?;
    if let Target::PartialObjectMetadata(_) = negotiated.target {
        return Err(ApiError::NotAcceptable(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            req.resource.info().list_kind
        ))
        .into());
    }
    let table = table_writer(&req, negotiated.target)?;
    let list_params = params::list_params(&req.query)?;
    let list = req
        .resource
        .list(&req.version, req.namespace(), &list_params)
        .await?;
    let value = match (negotiated.target, &table) {
        (Target::Table(_), Some(writer)) => writer.list_table(&list)?,
        (Target::PartialObjectMetadataList(meta), _) => partial_object_metadata_list(&list, meta),
        _ => list,
    };
    respond(&req, StatusCode::OK, &negotiated, &value, &[])
}

async fn watch(req: ResourceRequest) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Read)?;
    // Watches stream JSON or protobuf; YAML has no stream framing (kube-apiserver answers 406
    // too), and a list cannot be an event.
    if negotiated.encoding == negotiate::Encoding::Yaml
        || matches!(negotiated.target, Target::PartialObjectMetadataList(_))
    {
        return Err(ApiError::NotAcceptable(
            "only the following media types are accepted for watch: application/json".into(),
        )
        .into());
    }
    let framing = match negotiated.encoding {
        negotiate::Encoding::Protobuf => watch::Framing::Protobuf(req.protobuf()),
        _ => watch::Framing::JsonLines,
    };
    let table = table_writer(&req, negotiated.target)?;
    let watch_params = params::watch_params(&req.query)?;
    let timeout = watch::watch_timeout(watch_params.timeout_seconds);
    let events = req
        .resource
        .watch(&req.version, req.namespace(), &watch_params)
        .await?;
    let form = EventForm::for_target(negotiated.target, table);
    let lines = watch::frame_events(events, form, framing);
    let shutdown = req.state.shutdown.clone();
    let resource = req.resource.info().plural;
    let dropped = req.state.metrics.edge.terminated_watchers.clone();
    let connection = req.connection.clone();
    let on_unresponsive: watch::OnUnresponsive = Box::new(move || {
        tracing::warn!(resource, "closing a watcher that does not read its events");
        dropped
            .get_or_create(&super::metrics::ResourceLabels {
                resource: resource.to_string(),
            })
            .inc();
        if let Some(connection) = connection {
            connection.close_if_http1();
        }
    });
    Ok(watch::response(
        lines,
        framing.content_type(),
        timeout,
        async move { shutdown.wait().await },
        on_unresponsive,
    ))
}

/// Decode a create/update body, applying `fieldValidation` to duplicate keys (the registry
/// handles unknown fields).
fn decode_write_body(
    req: &ResourceRequest,
    format: BodyFormat,
    bytes: &[u8],
    validation: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    if format == BodyFormat::Protobuf {
        // No duplicate keys or unknown fields to report: a protobuf decoder skips unknown
        // fields, as Go's does.
        return Ok((decode_protobuf_object(req, bytes)?, Vec::new()));
    }
    let decoded = decode_object(bytes, format, req.kind())?;
    let duplicates: Vec<String> = decoded
        .duplicate_fields
        .iter()
        .map(|path| format!("duplicate field {path:?}"))
        .collect();
    match validation {
        FieldValidation::Strict if !duplicates.is_empty() => Err(ApiError::BadRequest(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            duplicates.join(", "),
            kind = req.kind(),
            version = req.version,
        ))),
        FieldValidation::Warn => Ok((decoded.object, duplicates)),
        _ => Ok((decoded.object, Vec::new())),
    }
}

/// A protobuf create/update body as the JSON of its version (kube-apiserver's texts,
/// recording 20h). The envelope names the body's apiVersion and kind: the message is read with
/// that version's messages when it is one of this kind's, and the store then checks apiVersion
/// and kind against the URL as for a JSON body; a body of another kind is not read further
/// than its envelope.
fn decode_protobuf_object(req: &ResourceRequest, bytes: &[u8]) -> Result<Value, ApiError> {
    let unrecognized = |detail: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!(
            "the object provided is unrecognized (must be of type {}): {detail} ({})",
            req.kind(),
            summarize(bytes)
        ))
    };
    let envelope = protobuf::decode_body(bytes).map_err(|err| unrecognized(&err.in_go_words()))?;
    if envelope.raw.is_empty() {
        return Err(unrecognized(&"empty body"));
    }
    let (group, version) = envelope
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", envelope.api_version.as_str()));
    let own_version = group == req.group()
        && envelope.kind == req.kind()
        && req.resource.info().versions.contains(&version);
    let mut object = match req.protobuf() {
        Some(messages) if own_version => {
            messages.decode(version, &envelope.raw).map_err(|err| {
                ApiError::BadRequest(format!(
                    "{kind} in version {version:?} cannot be handled as a {kind}: {}",
                    err.in_go_words(),
                    kind = req.kind()
                ))
            })?
        }
        _ => serde_json::json!({}),
    };
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(envelope.api_version));
        map.insert("kind".into(), Value::String(envelope.kind));
    }
    Ok(object)
}

fn written(
    req: &ResourceRequest,
    code_if_updated: StatusCode,
    negotiated: &Negotiated,
    mut warnings: Vec<String>,
    written: Written,
) -> HandlerResult {
    let code = if written.created {
        StatusCode::CREATED
    } else {
        code_if_updated
    };
    warnings.extend(written.warnings);
    let object = match negotiated.target {
        Target::PartialObjectMetadata(meta) => partial_object_metadata(&written.object, meta),
        // Written, but not answerable as a list: kube-apiserver's 500 (as for a GET).
        Target::PartialObjectMetadataList(_) => return Ok(status::content_is_not_a_list()),
        _ => written.object,
    };
    respond(req, code, negotiated, &object, &warnings)
}

async fn create(mut req: ResourceRequest) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Write)?;
    let format = req.body_format()?;
    let bytes = req.read_body().await?;
    let opts = req.write_options(WriteVerb::Create)?;
    let (object, warnings) = decode_write_body(&req, format, &bytes, opts.field_validation)?;
    let result = req
        .resource
        .create(&req.version, req.namespace(), object, &opts)
        .await?;
    written(&req, StatusCode::OK, &negotiated, warnings, result)
}

async fn update(mut req: ResourceRequest, name: &str, subresource: Subresource) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Write)?;
    let format = req.body_format()?;
    let bytes = req.read_body().await?;
    let opts = req.write_options(WriteVerb::Update)?;
    let (mut object, warnings) = decode_write_body(&req, format, &bytes, opts.field_validation)?;
    match object.pointer("/metadata/name").and_then(Value::as_str) {
        Some(body_name) if !body_name.is_empty() && body_name != name => {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ))
            .into());
        }
        Some(body_name) if !body_name.is_empty() => {}
        _ => {
            if !object.get("metadata").is_some_and(Value::is_object) {
                object["metadata"] = serde_json::json!({});
            }
            object["metadata"]["name"] = Value::String(name.to_string());
        }
    }
    let result = req
        .resource
        .update(&req.version, req.at(name), subresource, object, &opts)
        .await?;
    written(&req, StatusCode::OK, &negotiated, warnings, result)
}

async fn patch(mut req: ResourceRequest, name: &str, subresource: Subresource) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Write)?;
    let patch_type = negotiate::patch_type(&req.headers, req.speaks_protobuf())?;
    let bytes = req.read_body().await?;
    let opts = req.write_options(WriteVerb::Patch(patch_type))?;
    let result = req
        .resource
        .patch(
            &req.version,
            req.at(name),
            subresource,
            patch_type,
            &bytes,
            &opts,
        )
        .await?;
    written(&req, StatusCode::OK, &negotiated, Vec::new(), result)
}

/// DeleteOptions may come as a body (kubectl sends one); its format defaults to JSON.
async fn delete_options(
    req: &mut ResourceRequest,
) -> Result<svm_registry::rest::DeleteOptions, ApiError> {
    let bytes = req.read_body().await?;
    let format = if bytes.iter().all(u8::is_ascii_whitespace) {
        BodyFormat::Json
    } else {
        match req.headers.get(header::CONTENT_TYPE) {
            None => BodyFormat::Json,
            // DeleteOptions is a meta.k8s.io message: protobuf for every kind.
            Some(_) => negotiate::body_format(&req.headers, Protobuf::Spoken)?,
        }
    };
    let body = match format {
        BodyFormat::Protobuf => Some(decode_protobuf_delete_options(&bytes)?),
        _ => decode_options(&bytes, format, "DeleteOptions")?,
    };
    params::delete_options(&req.query, body.as_ref())
}

/// A protobuf DeleteOptions body (client-go's typed and metadata clients send one with every
/// delete), as the JSON body the query's options are merged with.
fn decode_protobuf_delete_options(bytes: &[u8]) -> Result<Value, ApiError> {
    let unrecognized = |detail: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!(
            "the object provided is unrecognized (must be of type DeleteOptions): {detail} ({})",
            summarize(bytes)
        ))
    };
    let envelope = protobuf::decode_body(bytes).map_err(|err| unrecognized(&err.in_go_words()))?;
    if envelope.kind != "DeleteOptions" {
        return Err(ApiError::BadRequest(format!(
            "{} in version {:?} cannot be handled as a DeleteOptions: no kind {:?} is registered for version {:?}",
            envelope.kind,
            protobuf::version_of(&envelope.api_version),
            envelope.kind,
            envelope.api_version
        )));
    }
    meta::delete_options_from_pb(&envelope.raw).map_err(|err| unrecognized(&err.in_go_words()))
}

async fn delete(mut req: ResourceRequest, name: &str) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Plain)?;
    let opts = delete_options(&mut req).await?;
    let deleted = req
        .resource
        .delete(&req.version, req.at(name), &opts)
        .await?;
    let value = if deleted.gone {
        let uid = deleted
            .object
            .pointer("/metadata/uid")
            .and_then(Value::as_str);
        status::delete_success(req.group(), req.resource.info().plural, name, uid)
    } else {
        deleted.object
    };
    respond(&req, StatusCode::OK, &negotiated, &value, &[])
}

async fn delete_collection(mut req: ResourceRequest) -> HandlerResult {
    let negotiated = req.negotiate(Endpoint::Plain)?;
    let list_params = params::list_params(&req.query)?;
    let opts = delete_options(&mut req).await?;
    let list = req
        .resource
        .delete_collection(&req.version, req.namespace(), &list_params, &opts)
        .await?;
    respond(&req, StatusCode::OK, &negotiated, &list, &[])
}
