//! Handlers of the non-resource paths: discovery, OpenAPI, `/version`, `/metrics`, and the
//! plain 404 for everything unknown.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use serde_json::{Value, json};

use super::AppState;
use super::negotiate::{self, DISCOVERY_V2, Encoding, Endpoint, Protobuf, Target};
use super::params::Query;
use super::status::{self, HttpError, NO_CACHE_PRIVATE};

/// Only GET (and HEAD, which hyper answers without a body) is served on these paths.
fn only_get(method: &Method) -> Result<(), HttpError> {
    if method == Method::GET || method == Method::HEAD {
        Ok(())
    } else {
        Err(status::method_not_allowed())
    }
}

fn json_response(headers: &HeaderMap, uri: &Uri, value: &Value) -> Result<Response, HttpError> {
    let query = Query::parse(uri.query());
    let negotiated = negotiate::negotiate(
        headers,
        query.get("pretty"),
        Endpoint::Plain,
        Protobuf::NotSpoken,
    )?;
    let (body, content_type) = negotiate::encode(negotiated.encoding, value);
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, NO_CACHE_PRIVATE),
        ],
        body,
    )
        .into_response())
}

fn finish(result: Result<Response, HttpError>) -> Response {
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Every path no route serves: a NotFound Status under our group, plain text elsewhere.
pub(crate) async fn not_found(State(state): State<AppState>, uri: Uri) -> Response {
    status::not_found(|g| state.discovery.group(g).is_some(), uri.path())
}

/// `/api`: the core group is not ours. kube-apiserver's generic servers (sample-apiserver,
/// metrics-server) register no legacy API, so `/api` is a plain 404, which client-go's
/// discovery tolerates ("aggregated api servers can return it").
pub(crate) async fn core_api() -> Response {
    status::page_not_found()
}

/// `/apis`: the APIGroupList, or aggregated discovery v2 with ETag / 304 (recording 02a).
pub(crate) async fn apis(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    finish(apis_inner(&state, &method, &uri, &headers))
}

fn apis_inner(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, HttpError> {
    only_get(method)?;
    let query = Query::parse(uri.query());
    let negotiated = negotiate::negotiate(
        headers,
        query.get("pretty"),
        Endpoint::Apis,
        Protobuf::NotSpoken,
    )?;
    if negotiated.target != Target::DiscoveryV2 {
        return json_response(headers, uri, &state.discovery.group_list);
    }
    let etag = state.discovery.aggregated_etag.as_str();
    let cache_headers = [
        (header::CACHE_CONTROL, "public"),
        (header::ETAG, etag),
        (header::VARY, "Accept"),
    ];
    if if_none_match(headers, etag) {
        return Ok((StatusCode::NOT_MODIFIED, cache_headers).into_response());
    }
    let pretty = matches!(negotiated.encoding, Encoding::Json { pretty: true });
    let (body, _) = negotiate::encode(Encoding::Json { pretty }, &state.discovery.aggregated);
    Ok((
        StatusCode::OK,
        cache_headers,
        [(header::CONTENT_TYPE, DISCOVERY_V2)],
        body,
    )
        .into_response())
}

/// Whether `If-None-Match` names `etag` exactly (quotes included, recording 02a step 3).
fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|candidate| candidate.trim() == etag)
}

pub(crate) async fn api_group(
    State(state): State<AppState>,
    Path(group): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    match state.discovery.group(&group) {
        Some(doc) => finish(only_get(&method).and_then(|()| json_response(&headers, &uri, doc))),
        None => status::page_not_found(),
    }
}

pub(crate) async fn api_resources(
    State(state): State<AppState>,
    Path((group, version)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    match state.discovery.resource_list(&group, &version) {
        Some(doc) => finish(only_get(&method).and_then(|()| json_response(&headers, &uri, doc))),
        None => status::not_found(|g| state.discovery.group(g).is_some(), uri.path()),
    }
}

/// A cacheable JSON document with a quoted ETag, answering 304 when it is unchanged.
fn etagged(
    headers: &HeaderMap,
    uri: &Uri,
    value: &Value,
    etag: &str,
) -> Result<Response, HttpError> {
    if if_none_match(headers, etag) {
        return Ok((
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag), (header::VARY, "Accept")],
        )
            .into_response());
    }
    let mut response = json_response(headers, uri, value)?;
    if let Ok(value) = HeaderValue::from_str(etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    Ok(response)
}

pub(crate) async fn openapi_v2(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    finish(
        only_get(&method)
            .and_then(|()| etagged(&headers, &uri, &state.openapi.v2, &state.openapi.v2_etag)),
    )
}

pub(crate) async fn openapi_v3_index(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    finish(only_get(&method).and_then(|()| json_response(&headers, &uri, &state.openapi.v3_index)))
}

/// `/openapi/v3/apis/<g>/<v>`: with `?hash=` matching, immutable and cacheable; with a stale
/// hash, a redirect to the current one (as kube-openapi does).
pub(crate) async fn openapi_v3_doc(
    State(state): State<AppState>,
    Path(path): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let Some(doc) = state.openapi.v3(path.trim_end_matches('/')) else {
        return status::page_not_found();
    };
    if let Err(err) = only_get(&method) {
        return err.into_response();
    }
    let query = Query::parse(uri.query());
    let etag = format!("\"{}\"", doc.hash);
    match query.get("hash") {
        Some(hash) if !hash.is_empty() && hash != doc.hash => {
            let location = format!(
                "/openapi/v3/{}?hash={}",
                path.trim_end_matches('/'),
                doc.hash
            );
            (
                StatusCode::MOVED_PERMANENTLY,
                [(header::LOCATION, location)],
            )
                .into_response()
        }
        Some(hash) if !hash.is_empty() => {
            let mut response = finish(etagged(&headers, &uri, &doc.doc, &etag));
            let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 365))
                .strftime("%a, %d %b %Y %H:%M:%S GMT")
                .to_string();
            let h = response.headers_mut();
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable"),
            );
            if let Ok(value) = HeaderValue::from_str(&expires) {
                h.insert(header::EXPIRES, value);
            }
            response
        }
        _ => finish(etagged(&headers, &uri, &doc.doc, &etag)),
    }
}

/// version.Info, as `kubectl version` reads it.
pub(crate) fn version_info() -> Value {
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let minor = env!("CARGO_PKG_VERSION_MINOR");
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": super::version::git_version(),
        "gitCommit": option_env!("SVM_GIT_COMMIT").unwrap_or(""),
        "gitTreeState": "",
        "buildDate": option_env!("SVM_BUILD_DATE").unwrap_or(""),
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

/// Go's GOARCH name for the running architecture.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

pub(crate) async fn version(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    finish(only_get(&method).and_then(|()| json_response(&headers, &uri, &version_info())))
}

pub(crate) async fn metrics(State(state): State<AppState>, method: Method) -> Response {
    if let Err(err) = only_get(&method) {
        return err.into_response();
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
