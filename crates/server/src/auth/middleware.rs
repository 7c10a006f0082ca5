//! The tower layer in front of every route: authenticate, authorize, then hand the request on
//! with the caller's [`UserInfo`] in its extensions, or answer 401 / 403 / 500 with a
//! metav1.Status the way kube-apiserver does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{Request, StatusCode, header};
use serde_json::{Value, json};
use tower::{Layer, Service};

use super::Auth;
use super::attributes::RequestAttributes;
use super::user::UserInfo;
use svm_registry::ApiError;

/// Authentication and authorization for every request of a Router:
/// `router.layer(auth::layer(auth))`. Requests must carry [`super::PeerCertificates`] in their
/// extensions for client certificates to count (the accept loop puts them there).
pub fn layer(auth: Arc<Auth>) -> AuthLayer {
    AuthLayer {
        auth,
        step: Step::Both,
    }
}

/// Authentication alone: the caller's [`UserInfo`] into the extensions, or a 401.
pub fn authentication_layer(auth: Arc<Auth>) -> AuthLayer {
    AuthLayer {
        auth,
        step: Step::Authenticate,
    }
}

/// Authorization alone, of the [`UserInfo`] an [`authentication_layer`] in front put into the
/// extensions (a request without one is refused with 401).
pub fn authorization_layer(auth: Arc<Auth>) -> AuthLayer {
    AuthLayer {
        auth,
        step: Step::Authorize,
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Both,
    Authenticate,
    Authorize,
}

/// The tower layer of [`layer`], [`authentication_layer`] and [`authorization_layer`]: wraps a
/// service in an [`AuthService`] doing that step.
#[derive(Clone)]
pub struct AuthLayer {
    auth: Arc<Auth>,
    step: Step,
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            auth: self.auth.clone(),
            step: self.step,
            inner,
        }
    }
}

/// A service behind authentication, authorization or both: a request turned away is answered
/// here with its metav1.Status, an admitted one goes on to the inner service.
#[derive(Clone)]
pub struct AuthService<S> {
    auth: Arc<Auth>,
    step: Step,
    inner: S,
}

impl<S> Service<Request<Body>> for AuthService<S>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        // The clone that was polled ready serves this request; a fresh clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        let step = self.step;
        Box::pin(async move {
            let admitted = match step {
                Step::Both => auth.admit(&mut request).await.map(Some),
                Step::Authenticate => auth.authenticate(&mut request).await.map(Some),
                Step::Authorize => match request.extensions().get::<UserInfo>().cloned() {
                    Some(user) => auth.authorize(&user, &request).await.map(|()| None),
                    None => Err(Rejection::Unauthenticated),
                },
            };
            match admitted {
                Ok(user) => {
                    if let Some(user) = user {
                        request.extensions_mut().insert(user);
                    }
                    inner.call(request).await
                }
                Err(rejection) => Ok(rejection.into_response()),
            }
        })
    }
}

/// How long a client turned away for lack of TokenReview or SubjectAccessReview capacity is
/// asked to wait.
const REVIEW_RETRY_AFTER_SECONDS: u64 = 1;

/// Why a request was turned away.
#[derive(Debug)]
pub enum Rejection {
    /// 401: no acceptable credentials.
    Unauthenticated,
    /// 403, with kube-apiserver's message and the Status details naming the resource.
    Forbidden {
        /// kube-apiserver's wording (`<resource> is forbidden: User "<name>" cannot <verb> ...`),
        /// with the authorizer's reason.
        message: String,
        /// The Status's `details` naming the resource; `None` for a non-resource path.
        details: Option<Value>,
    },
    /// 500: the cluster could not be asked.
    AuthorizationError(String),
    /// 429: a new bearer token, while too many TokenReviews are already in flight or the
    /// TokenReview budget is spent (cached tokens are not affected).
    TooManyTokenReviews,
    /// 500 with `Retry-After`, as a failed authorization: a decision not in the cache, while
    /// too many SubjectAccessReviews are already in flight or their budget is spent (cached
    /// decisions are not affected).
    TooManyAccessReviews,
}

/// Why a request whose decision is not cached was not authorized while SubjectAccessReviews
/// are at their bound (the message of its 500).
const ACCESS_REVIEWS_BUSY: &str = "too many SubjectAccessReviews in flight, please try again later";

impl Rejection {
    /// The 403 for `user` denied `attributes`, for the given reason (possibly empty).
    pub fn forbidden(user: &UserInfo, attributes: &RequestAttributes, reason: &str) -> Self {
        let (message, details) = forbidden(user, attributes, reason);
        Rejection::Forbidden { message, details }
    }

    /// The metav1.Status body.
    pub fn to_status(&self) -> Value {
        match self {
            Rejection::Unauthenticated => ApiError::Unauthorized("Unauthorized".into()).to_status(),
            Rejection::AuthorizationError(err) => ApiError::Internal(err.clone()).to_status(),
            Rejection::TooManyTokenReviews => ApiError::TooManyRequests {
                message: "Too many requests, please try again later.".into(),
                retry_after_seconds: REVIEW_RETRY_AFTER_SECONDS,
            }
            .to_status(),
            Rejection::TooManyAccessReviews => {
                let mut status = ApiError::Internal(ACCESS_REVIEWS_BUSY.into()).to_status();
                status["details"] = json!({"retryAfterSeconds": REVIEW_RETRY_AFTER_SECONDS});
                status
            }
            Rejection::Forbidden { message, details } => {
                let mut status = ApiError::Forbidden(message.clone()).to_status();
                // ApiError::Forbidden carries only the message; kube-apiserver also names the
                // resource in details (as apierrors.NewForbidden does).
                if let Some(details) = details {
                    status["details"] = details.clone();
                }
                status
            }
        }
    }

    fn code(&self) -> StatusCode {
        match self {
            Rejection::Unauthenticated => StatusCode::UNAUTHORIZED,
            Rejection::Forbidden { .. } => StatusCode::FORBIDDEN,
            Rejection::AuthorizationError(_) | Rejection::TooManyAccessReviews => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Rejection::TooManyTokenReviews => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let mut response = crate::status_response(self.code().as_u16(), &self.to_status());
        if let Rejection::TooManyTokenReviews | Rejection::TooManyAccessReviews = self {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                http::HeaderValue::from(REVIEW_RETRY_AFTER_SECONDS),
            );
        }
        response
    }
}

/// kube-apiserver's Forbidden message (`responsewriters.Forbidden` + `apierrors.NewForbidden`)
/// and the Status details naming the resource.
fn forbidden(
    user: &UserInfo,
    attributes: &RequestAttributes,
    reason: &str,
) -> (String, Option<Value>) {
    let Some(resource) = &attributes.resource else {
        let message = format!(
            "User {:?} cannot {} path {:?}",
            user.name, attributes.verb, attributes.path
        );
        return (format!("forbidden: {}", with_reason(message, reason)), None);
    };
    let mut what = resource.resource.clone();
    if !resource.subresource.is_empty() {
        what = format!("{what}/{}", resource.subresource);
    }
    let scope = if resource.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", resource.namespace)
    };
    let cannot = format!(
        "User {:?} cannot {} resource {:?} in API group {:?} {scope}",
        user.name, attributes.verb, what, resource.group
    );
    let cannot = with_reason(cannot, reason);
    let qualified = if resource.group.is_empty() {
        resource.resource.clone()
    } else {
        format!("{}.{}", resource.resource, resource.group)
    };
    let message = match (qualified.is_empty(), resource.name.is_empty()) {
        (true, _) => format!("forbidden: {cannot}"),
        (false, true) => format!("{qualified} is forbidden: {cannot}"),
        (false, false) => format!("{qualified} {:?} is forbidden: {cannot}", resource.name),
    };
    let mut details = serde_json::Map::new();
    for (key, value) in [
        ("name", &resource.name),
        ("group", &resource.group),
        ("kind", &resource.resource),
    ] {
        if !value.is_empty() {
            details.insert(key.into(), json!(value));
        }
    }
    let details = (!details.is_empty()).then_some(Value::Object(details));
    (message, details)
}

fn with_reason(message: String, reason: &str) -> String {
    if reason.is_empty() {
        message
    } else {
        format!("{message}: {reason}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn jane() -> UserInfo {
        UserInfo {
            name: "jane".into(),
            ..UserInfo::default()
        }
    }

    #[test]
    fn forbidden_messages_read_like_kube_apiservers() {
        let list = RequestAttributes::from_request(
            &Method::GET,
            "/apis/storagemigration.k8s.io/v1/storageversionmigrations",
            None,
        );
        let rejection = Rejection::forbidden(&jane(), &list, "");
        let status = rejection.to_status();
        assert_eq!(
            status["message"],
            "storageversionmigrations.storagemigration.k8s.io is forbidden: User \"jane\" cannot list resource \"storageversionmigrations\" in API group \"storagemigration.k8s.io\" at the cluster scope"
        );
        assert_eq!(
            status["details"],
            json!({"group": "storagemigration.k8s.io", "kind": "storageversionmigrations"})
        );
        assert_eq!(status["code"], 403);
        assert_eq!(status["reason"], "Forbidden");

        let status_update = RequestAttributes::from_request(
            &Method::PUT,
            "/api/v1/namespaces/demo/pods/p1/status",
            None,
        );
        let status =
            Rejection::forbidden(&jane(), &status_update, "no RBAC policy matched").to_status();
        assert_eq!(
            status["message"],
            "pods \"p1\" is forbidden: User \"jane\" cannot update resource \"pods/status\" in API group \"\" in the namespace \"demo\": no RBAC policy matched"
        );
        assert_eq!(status["details"], json!({"name": "p1", "kind": "pods"}));

        let path = RequestAttributes::from_request(&Method::GET, "/openapi/v2", None);
        let status = Rejection::forbidden(&jane(), &path, "").to_status();
        assert_eq!(
            status["message"],
            "forbidden: User \"jane\" cannot get path \"/openapi/v2\""
        );
        assert!(status.get("details").is_none());
    }

    #[test]
    fn unauthorized_is_the_bare_kube_apiserver_status() {
        assert_eq!(
            Rejection::Unauthenticated.to_status(),
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "Unauthorized",
                "reason": "Unauthorized",
                "code": 401
            })
        );
    }
}
