//! metav1.Status errors, shaped exactly as kube-apiserver writes them (recordings 05, 09a-09e,
//! 16a-17b and the README's cross-cutting observations).

use serde_json::{Map, Value, json};

use crate::resources::ResourceDef;

/// One `details.causes[]` entry of a 422 Invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {detail}", go_quote(value)),
        }
    }

    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message,
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }

    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let supported = supported
            .iter()
            .map(|s| go_quote(s))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!("Unsupported value: {value}: supported values: {supported}"),
        }
    }

    fn render(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// `%q` of Go for the strings we quote (JSON string escaping is the same for these).
pub fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// An error answer. Everything a handler can fail with ends up here and becomes a Status.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusError {
    pub code: u16,
    /// metav1.StatusReason; `None` for the reason-less 500s kube-apiserver sends.
    pub reason: Option<String>,
    pub message: String,
    pub details: Option<Box<Map<String, Value>>>,
    /// `metadata.continue` of the Status (the inconsistent token of a 410, recording 05).
    pub continue_token: Option<String>,
    /// Sent as the `Retry-After` header too.
    pub retry_after_seconds: Option<u64>,
}

impl StatusError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: Some(reason.to_string()),
            message: message.into(),
            details: None,
            continue_token: None,
            retry_after_seconds: None,
        }
    }

    pub fn with_details(mut self, details: Map<String, Value>) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 404 about an object: details.kind is the resource plural, group omitted for core
    /// (recording 09c).
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::not_found_in(&def.group, &def.plural, name)
    }

    pub fn not_found_in(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualify(group, resource);
        Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found"))
            .with_details(object_details(name, group, resource))
    }

    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        let qualified = def.qualified_resource();
        Self::new(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        )
        .with_details(object_details(name, &def.group, &def.plural))
    }

    /// 409 Conflict: "Operation cannot be fulfilled on <resource> "<name>": <why>" (09a, 09e).
    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> Self {
        let qualified = def.qualified_resource();
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        )
        .with_details(object_details(name, &def.group, &def.plural))
    }

    /// The optimistic-concurrency conflict of a stale resourceVersion (recording 09a).
    pub fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid: details.kind is the Kind; the message joins the distinct causes (Go's
    /// `ToAggregate` drops duplicates, the causes list keeps them — recording 09b).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let mut rendered: Vec<String> = Vec::new();
        for cause in &causes {
            let r = cause.render();
            if !rendered.contains(&r) {
                rendered.push(r);
            }
        }
        let joined = if rendered.len() == 1 {
            rendered.remove(0)
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let qualified = qualify(group, kind);
        let mut details = object_details(name, group, kind);
        details.insert(
            "causes".into(),
            Value::Array(
                causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect(),
            ),
        );
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {joined}"),
        )
        .with_details(details)
    }

    pub fn invalid_object(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> Self {
        Self::invalid(&def.group, &def.kind, name, causes)
    }

    /// 422 on request options (`ListOptions.meta.k8s.io "" is invalid: ...`, recordings 10b, 17a).
    pub fn invalid_options(kind: &str, causes: Vec<Cause>) -> Self {
        Self::invalid("meta.k8s.io", kind, "", causes)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// A built-in resource's PATCH with a Content-Type it does not consume: the route's own
    /// refusal, before any patch handler (a custom resource's says which types it takes).
    pub fn unsupported_patch_content_type() -> Self {
        Self::unsupported_media_type("415: Unsupported Media Type").with_details(Map::new())
    }

    /// What kube-apiserver answers for a path under a built-in group that serves nothing.
    pub fn no_such_resource() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(Map::new())
    }

    /// 429 from a resource's watch cache while it fills, its storage just rebuilt (a CRD's
    /// storage version moved): `storage is (re)initializing`, Retry-After 1 (recording 21,
    /// step 1). API Priority and Fairness's 429 is no Status: [`crate::http::apf_rejection`].
    pub fn storage_initializing() -> Self {
        let mut details = Map::new();
        details.insert("retryAfterSeconds".into(), json!(1));
        let mut err =
            Self::new(429, "TooManyRequests", "storage is (re)initializing").with_details(details);
        err.retry_after_seconds = Some(1);
        err
    }

    /// 500 InternalError ("Internal error occurred: ...").
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// The Status body.
    pub fn to_json(&self) -> Value {
        let mut metadata = Map::new();
        if let Some(token) = &self.continue_token {
            metadata.insert("continue".into(), Value::String(token.clone()));
        }
        let mut status = Map::new();
        status.insert("kind".into(), json!("Status"));
        status.insert("apiVersion".into(), json!("v1"));
        status.insert("metadata".into(), Value::Object(metadata));
        status.insert("status".into(), json!("Failure"));
        status.insert("message".into(), json!(self.message));
        if let Some(reason) = &self.reason {
            status.insert("reason".into(), json!(reason));
        }
        if let Some(details) = &self.details {
            status.insert("details".into(), Value::Object(Map::clone(details)));
        }
        status.insert("code".into(), json!(self.code));
        Value::Object(status)
    }
}

impl std::fmt::Display for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for StatusError {}

pub type ApiResult<T> = Result<T, StatusError>;

fn qualify(group: &str, name: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

fn object_details(name: &str, group: &str, kind: &str) -> Map<String, Value> {
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        details.insert("kind".into(), json!(kind));
    }
    details
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_message_lists_a_duplicated_cause_once() {
        let cause = Cause::invalid("metadata.uid", "wrong", "field is immutable");
        let err = StatusError::invalid("example.test", "Widget", "w2", vec![cause.clone(), cause]);
        assert_eq!(
            err.message,
            "Widget.example.test \"w2\" is invalid: metadata.uid: Invalid value: \"wrong\": field is immutable"
        );
        let body = err.to_json();
        assert_eq!(body["details"]["causes"].as_array().map(Vec::len), Some(2));
        assert_eq!(body["details"]["kind"], "Widget");
        assert_eq!(body["code"], 422);
    }

    #[test]
    fn core_group_is_omitted_from_details() {
        let body = StatusError::not_found_in("", "configmaps", "x").to_json();
        assert_eq!(body["message"], "configmaps \"x\" not found");
        assert!(body["details"].get("group").is_none());
        assert_eq!(body["details"]["kind"], "configmaps");
    }
}
