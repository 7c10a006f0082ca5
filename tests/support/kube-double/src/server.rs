//! The listener: HTTP/1.1 and HTTP/2 over plain TCP or TLS on a loopback port, one task per
//! connection, and the per-request pipeline (count, inject faults, route, answer).

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::admin;
use crate::discovery;
use crate::engine::Engine;
use crate::faults::{Fault, RequestFacts};
use crate::http::{
    Body, CountingBody, Query, apf_rejection, plain_not_found, plain_text, status_response,
    wants_pretty,
};
use crate::negotiate::{Encoding, Output, error_encoding, negotiate};
use crate::objects::{self, Call};
use crate::protobuf;
use crate::route::{self, Route, counter_name};
use crate::status::StatusError;

/// Returned by the service to make hyper close the connection without answering.
#[derive(Debug)]
pub struct DroppedByFault;

impl std::fmt::Display for DroppedByFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by fault injection")
    }
}

impl std::error::Error for DroppedByFault {}

/// Accepts connections until `shutdown` flips; dropping the task set aborts every
/// connection (watches included) when the double goes away.
pub async fn serve(
    engine: Arc<Engine>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let engine = engine.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve_connection(engine, TokioIo::new(stream)).await;
                            }
                        }
                        None => serve_connection(engine, TokioIo::new(stream)).await,
                    }
                });
            }
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection<I>(engine: Arc<Engine>, io: I)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let engine = engine.clone();
        async move {
            handle(engine.clone(), req)
                .await
                .map(|resp| resp.map(|body| BodyExt::boxed(CountingBody::new(body, engine))))
        }
    });
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection_with_upgrades(io, service)
        .await;
}

async fn handle(
    engine: Arc<Engine>,
    req: Request<Incoming>,
) -> Result<Response<Body>, DroppedByFault> {
    let (parts, body) = req.into_parts();
    let query = Query::parse(parts.uri.query());
    let pretty = wants_pretty(&parts.headers, &query);
    let path = parts.uri.path().to_string();
    let route = route::route(&engine.catalog, &path);

    // What the counters and the fault rules see.
    let (verb, counted, facts_resource) = match &route {
        Route::Resource(r) => {
            let verb = route::verb(&parts.method, r, &query.as_map());
            (
                verb.to_string(),
                counter_name(&r.def.group_resource(), r.subresource.as_deref()),
                Some(r.def.group_resource()),
            )
        }
        _ => (
            parts.method.as_str().to_ascii_lowercase(),
            path.clone(),
            None,
        ),
    };
    // A response body to cut short after this many frames (`Fault::CutStream`).
    let mut cut = None;
    // A dry run is counted apart (`patch-dry-run`), as kube-apiserver's
    // apiserver_request_total labels it: the counters of a verb are the requests that can
    // write. Fault rules still see the verb (a webhook judges dry runs too).
    let counted_verb = if query.get("dryRun").is_some() {
        format!("{verb}-dry-run")
    } else {
        verb.clone()
    };
    if !matches!(route, Route::Admin(_)) {
        engine.metrics.request(&counted_verb, &counted);
        let (namespace, name) = match &route {
            Route::Resource(r) => (r.namespace.clone(), r.name.clone()),
            _ => (None, None),
        };
        let decision = engine.faults.decide(&RequestFacts {
            verb: &verb,
            resource: facts_resource.as_ref(),
            namespace: namespace.as_deref(),
            name: name.as_deref(),
            path: &path,
        });
        if !decision.latency.is_zero() {
            tokio::time::sleep(decision.latency).await;
        }
        if let Some(Fault::CutStream { after_frames }) = decision.fault {
            engine.metrics.fault_injected();
            cut = Some(after_frames);
        } else if let Some(fault) = decision.fault {
            engine.metrics.fault_injected();
            return match fault {
                Fault::DropConnection => Err(DroppedByFault),
                Fault::Forbidden => Ok(status_response(
                    &rbac_forbidden(&verb, facts_resource.as_ref(), namespace.as_deref(), &path),
                    pretty,
                )),
                Fault::TooManyRequests {
                    retry_after_seconds,
                } => Ok(apf_rejection(retry_after_seconds)),
                other => Ok(status_response(&fault_status(&other), pretty)),
            };
        }
    }

    let limit = engine.options.max_body_bytes;
    let body: Bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(status_response(
                &StatusError::too_large("the request is too large (limit: 3145728 bytes)"),
                pretty,
            ));
        }
    };
    engine.metrics.bytes_in(body.len() as u64);

    let counts_response = !matches!(route, Route::Admin(_));
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let response = match route {
        Route::NotFound => plain_not_found(),
        Route::UnknownBuiltIn => status_response(&StatusError::no_such_resource(), pretty),
        Route::Health(which) => match which.as_str() {
            "version" => crate::http::json_response(
                StatusCode::OK,
                &serde_json::json!({
                    "major": "1", "minor": "36", "gitVersion": "v1.36.2-kube-double",
                    "platform": "linux/amd64"
                }),
                pretty,
            ),
            _ => plain_text(StatusCode::OK, "ok"),
        },
        Route::Admin(segments) => admin::handle(&engine, &parts.method, &segments, &query, &body),
        Route::CoreVersions | Route::Groups if parts.method != Method::GET => {
            method_not_allowed(pretty)
        }
        Route::CoreVersions => match negotiate(accept.as_deref(), true) {
            Some(Output::AggregatedDiscovery) => {
                discovery::aggregated_response(&discovery::aggregated_core(&engine), &parts.headers)
            }
            Some(_) => discovery::legacy_response(&discovery::api_versions(&engine), pretty),
            None => not_acceptable(pretty),
        },
        Route::Groups => match negotiate(accept.as_deref(), true) {
            Some(Output::AggregatedDiscovery) => discovery::aggregated_response(
                &discovery::aggregated_groups(&engine),
                &parts.headers,
            ),
            Some(_) => discovery::legacy_response(&discovery::api_group_list(&engine), pretty),
            None => not_acceptable(pretty),
        },
        Route::Group(group) => match discovery::api_group(&engine, &group) {
            Some(doc) => discovery::legacy_response(&doc, pretty),
            None => plain_not_found(),
        },
        Route::ResourceList { group, version } => discovery::legacy_response(
            &discovery::api_resource_list(&engine, &group, &version),
            pretty,
        ),
        Route::Resource(resource_route) => {
            let verb = route::verb(&parts.method, &resource_route, &query.as_map());
            objects::handle(Call {
                engine: &engine,
                route: resource_route,
                verb,
                query,
                headers: parts.headers,
                body,
                pretty,
            })
            .await
        }
    };
    let response = if counts_response {
        errors_as_negotiated(response, accept.as_deref()).await
    } else {
        response
    };
    if counts_response {
        engine
            .metrics
            .response(&counted_verb, &counted, response.status().as_u16());
    }
    Ok(match cut {
        Some(frames) => response.map(|body| cut_after(body, frames)),
        None => response,
    })
}

/// An error answer (a Status, written as JSON where it is made) as the request's `Accept`
/// negotiates errors: protobuf when the first clause without `as=` is protobuf (client-go's
/// typed clients, `application/vnd.kubernetes.protobuf, */*`), indented JSON when no clause
/// is acceptable (recordings 06 steps 5-6, 20g steps 1-3, 10-11).
async fn errors_as_negotiated(response: Response<Body>, accept: Option<&str>) -> Response<Body> {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if response.status().as_u16() < 400 || !is_json {
        return response;
    }
    let encoding = error_encoding(accept);
    if encoding == Some(Encoding::Json) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let status = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(|v| v["kind"] == "Status");
    let (bytes, content_type) = match (status, encoding) {
        (Some(status), Some(Encoding::Protobuf)) => match protobuf::encode(&status) {
            Some(body) => (Bytes::from(body), protobuf::MEDIA_TYPE),
            None => (bytes, "application/json"),
        },
        (Some(status), None) => (
            Bytes::from(crate::http::json_bytes(&status, true)),
            "application/json",
        ),
        _ => (bytes, "application/json"),
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    parts
        .headers
        .insert(header::CONTENT_LENGTH, bytes.len().into());
    Response::from_parts(parts, crate::http::full(bytes))
}

/// `body`, ending after its first `frames` frames.
fn cut_after(body: Body, frames: usize) -> Body {
    use futures::StreamExt;
    let kept = http_body_util::BodyStream::new(body).take(frames);
    BodyExt::boxed(http_body_util::StreamBody::new(kept))
}

fn method_not_allowed(pretty: bool) -> Response<Body> {
    status_response(
        &StatusError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ),
        pretty,
    )
}

fn not_acceptable(pretty: bool) -> Response<Body> {
    status_response(
        &StatusError::not_acceptable(
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        ),
        pretty,
    )
}

/// What the RBAC authorizer answers a request it does not allow (the clients' user is
/// whoever the test's kubeconfig names; the double does not authenticate, so it says "the
/// client").
fn rbac_forbidden(
    verb: &str,
    resource: Option<&crate::resources::GroupResource>,
    namespace: Option<&str>,
    path: &str,
) -> StatusError {
    let user = "User \"system:serviceaccount:svm-system:svm-apiserver\"";
    let message = match resource {
        Some(gr) => {
            let scope = match namespace {
                Some(ns) => format!(" in the namespace \"{ns}\""),
                None => " at the cluster scope".to_string(),
            };
            format!(
                "{gr} is forbidden: {user} cannot {verb} resource \"{}\" in API group \"{}\"{scope}",
                gr.resource, gr.group
            )
        }
        None => format!("forbidden: {user} cannot {verb} path \"{path}\""),
    };
    StatusError::forbidden(message)
}

/// The Status a fault answers with.
fn fault_status(fault: &Fault) -> StatusError {
    match fault {
        Fault::ServerError { code } => match code {
            503 => StatusError::service_unavailable(
                "the server is currently unable to handle the request",
            ),
            504 => StatusError::new(
                504,
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still be processing the request",
            ),
            500 => StatusError::internal("injected fault"),
            other => StatusError::new(*other, "InternalError", format!("injected {other} fault")),
        },
        Fault::StorageInitializing => StatusError::storage_initializing(),
        // `webhookerrors.ToStatusErr`: the webhook's code and reason, the message prefixed.
        Fault::Deny {
            webhook,
            code,
            reason,
            message,
        } => StatusError::new(
            (*code).max(400),
            reason,
            format!("admission webhook \"{webhook}\" denied the request: {message}"),
        ),
        Fault::TooManyRequests { .. }
        | Fault::Latency(_)
        | Fault::DropConnection
        | Fault::Forbidden
        | Fault::CutStream { .. } => StatusError::internal("unexpected fault"),
    }
}
