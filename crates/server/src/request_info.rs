//! The request's attributes (verb, group, version, resource, subresource, namespace, name),
//! resolved once, in the outermost layer, into the request's extensions: metrics and
//! authorization read them from there (`RequestAttributes::of`), as kube-apiserver's
//! `WithRequestInfo` filter does for its handler chain.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::auth::RequestAttributes;

/// Middleware: resolves the request's attributes and keeps them in its extensions.
pub(crate) async fn resolve(mut request: Request, next: Next) -> Response {
    let attributes = RequestAttributes::from_request(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    request.extensions_mut().insert(attributes);
    next.run(request).await
}
