//! The registry's typed error. The HTTP edge (`server::status`) maps it, once, to a metav1.Status.

use svm_storage::StorageError;

/// One invalid field, as in a metav1.StatusCause of a 422 Invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueDuplicate`,
    /// `FieldValueForbidden`, `FieldValueTooLong`, ... (metav1.CauseType).
    pub reason: &'static str,
    /// JSON path of the field, e.g. `metadata.name` or `spec.resource.group`.
    pub field: String,
    /// The human text after the field path, e.g. `Invalid value: "X": must be ...`.
    pub message: String,
}

impl FieldError {
    /// `Required value` (FieldValueRequired), followed by `: <detail>` unless `detail` is
    /// empty.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: format!("Required value{detail}"),
        }
    }

    /// `Invalid value: "<value>": <detail>` (FieldValueInvalid).
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {value:?}: {detail}"),
        }
    }

    /// `Forbidden: <detail>` (FieldValueForbidden).
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }

    /// `Unsupported value: "<value>": supported values: "a", "b"` (FieldValueNotSupported).
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!("Unsupported value: {value:?}: supported values: {list}"),
        }
    }

    /// `Duplicate value: "<value>"` (FieldValueDuplicate).
    pub fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {value:?}"),
        }
    }

    /// `field: message`, the form kube-apiserver joins into an Invalid Status message.
    pub fn render(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// Every way a registry operation can fail. Variants map one-to-one onto metav1.Status reasons.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 BadRequest (malformed body, wrong apiVersion/kind, bad query parameter, ...).
    #[error("{0}")]
    BadRequest(String),
    /// 401 Unauthorized.
    #[error("{0}")]
    Unauthorized(String),
    /// 403 Forbidden.
    #[error("{0}")]
    Forbidden(String),
    /// 404 NotFound of a named object. `resource` is the plural (kube-apiserver puts it in
    /// details.kind).
    #[error("{} \"{name}\" not found", qualified(resource, group))]
    NotFound {
        /// The API group; empty for the core group.
        group: String,
        /// The resource's plural, e.g. `storageversionmigrations`.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// 404 for a path that names nothing we serve.
    #[error("the server could not find the requested resource")]
    UnknownPath,
    /// 405 MethodNotAllowed.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 406 NotAcceptable.
    #[error("{0}")]
    NotAcceptable(String),
    /// 409 AlreadyExists.
    #[error("{} \"{name}\" already exists", qualified(resource, group))]
    AlreadyExists {
        /// The API group; empty for the core group.
        group: String,
        /// The resource's plural.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// 409 Conflict (stale resourceVersion, failed precondition).
    #[error(
        "Operation cannot be fulfilled on {} \"{name}\": {message}",
        qualified(resource, group)
    )]
    Conflict {
        /// The API group; empty for the core group.
        group: String,
        /// The resource's plural.
        resource: String,
        /// The object's name.
        name: String,
        /// Why, the end of the Status message (e.g. `the object has been modified; ...`).
        message: String,
    },
    /// 409 Conflict of a server-side apply: fields another manager owns, one
    /// `FieldManagerConflict` cause each (no name or kind in the details, as upstream).
    #[error("{message}")]
    ApplyConflict {
        /// The whole Status message, naming every conflict.
        message: String,
        /// One `FieldManagerConflict` per conflicting field.
        causes: Vec<FieldError>,
    },
    /// 410 Expired (compacted resourceVersion, expired continue token).
    #[error("{message}")]
    Expired {
        /// The Status message, e.g. `too old resource version: ...`.
        message: String,
        /// For an expired continue token: a token that continues from the next key at the
        /// current revision (kube-apiserver's "inconsistent continue").
        continue_token: Option<String>,
    },
    /// 413 RequestEntityTooLarge.
    #[error("{0}")]
    TooLarge(String),
    /// 415 UnsupportedMediaType.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 415 UnsupportedMediaType from the route itself (go-restful's refusal of a Content-Type
    /// the route does not consume, before any handler): its bare text and empty details
    /// (recording 20g step 15).
    #[error("415: Unsupported Media Type")]
    RouteUnsupportedMediaType,
    /// 422 Invalid, with one cause per field error. `kind` is the Kind (not the plural).
    #[error(
        "{} \"{name}\" is invalid: {}",
        qualified(kind, group),
        render_causes(causes)
    )]
    Invalid {
        /// The API group; empty for the core group.
        group: String,
        /// The Kind, e.g. `StorageVersionMigration` (or `ListOptions` for a bad query).
        kind: String,
        /// The object's name; empty when it has none yet.
        name: String,
        /// One cause per invalid field.
        causes: Vec<FieldError>,
    },
    /// 429 TooManyRequests.
    #[error("{message}")]
    TooManyRequests {
        /// The Status message.
        message: String,
        /// When to try again: `details.retryAfterSeconds` and the `Retry-After` header.
        retry_after_seconds: u64,
    },
    /// 500 InternalError.
    #[error("Internal error occurred: {0}")]
    Internal(String),
    /// 500 with no reason: an error that is not an API status (upstream's
    /// `StatusReasonUnknown`), e.g. an apply configuration the schema does not type.
    #[error("{0}")]
    Unknown(String),
    /// 503 ServiceUnavailable.
    #[error("{0}")]
    ServiceUnavailable(String),
    /// 504 Timeout (e.g. a resourceVersion the store has not reached in time).
    #[error("{0}")]
    Timeout(String),
    /// A controller's write refused because its replica's leadership term is over
    /// (`registry::fence`): nothing was written and the controllers are stopping. Only
    /// controllers write under a fence, so no client sees it (it would be a 409 Conflict).
    #[error("{0}")]
    Fenced(String),
}

impl ApiError {
    /// The HTTP status code this error maps to.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized(_) => 401,
            ApiError::Forbidden(_) => 403,
            ApiError::NotFound { .. } | ApiError::UnknownPath => 404,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::NotAcceptable(_) => 406,
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::ApplyConflict { .. }
            | ApiError::Fenced(_) => 409,
            ApiError::Expired { .. } => 410,
            ApiError::TooLarge(_) => 413,
            ApiError::UnsupportedMediaType(_) | ApiError::RouteUnsupportedMediaType => 415,
            ApiError::Invalid { .. } => 422,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::Internal(_) | ApiError::Unknown(_) => 500,
            ApiError::ServiceUnavailable(_) => 503,
            ApiError::Timeout(_) => 504,
        }
    }

    /// The metav1.StatusReason.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized(_) => "Unauthorized",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::NotFound { .. } | ApiError::UnknownPath => "NotFound",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } | ApiError::Fenced(_) => {
                "Conflict"
            }
            ApiError::Expired { .. } => "Expired",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) | ApiError::RouteUnsupportedMediaType => {
                "UnsupportedMediaType"
            }
            ApiError::Invalid { .. } => "Invalid",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::Internal(_) => "InternalError",
            ApiError::Unknown(_) => "",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::Timeout(_) => "Timeout",
        }
    }

    /// Map a storage failure on a named object of a resource.
    pub fn from_storage(err: StorageError, group: &str, resource: &str, name: &str) -> Self {
        match err {
            StorageError::NotFound { .. } => ApiError::NotFound {
                group: group.into(),
                resource: resource.into(),
                name: name.into(),
            },
            StorageError::AlreadyExists { .. } => ApiError::AlreadyExists {
                group: group.into(),
                resource: resource.into(),
                name: name.into(),
            },
            StorageError::Conflict { .. } => ApiError::Conflict {
                group: group.into(),
                resource: resource.into(),
                name: name.into(),
                message: "the object has been modified; please apply your changes to the latest version and try again".into(),
            },
            StorageError::Compacted { .. } => ApiError::Expired {
                message: format!("too old resource version: {err}"),
                continue_token: None,
            },
            StorageError::FutureRevision { requested, .. } => ApiError::Timeout(format!(
                "Too large resource version: {requested}"
            )),
            StorageError::Unavailable { message, source } => {
                ApiError::ServiceUnavailable(with_cause(message, source.as_deref()))
            }
            StorageError::Corrupt(msg) => ApiError::Internal(msg),
            StorageError::Io(e) => ApiError::Internal(e.to_string()),
        }
    }
}

/// A storage failure's message with its cause's, as `message: cause`.
fn with_cause(message: String, cause: Option<&(dyn std::error::Error + Send + Sync)>) -> String {
    match cause {
        Some(cause) => format!("{message}: {cause}"),
        None => message,
    }
}

/// `resource.group`, or just `resource` for the core group (kube-apiserver's GroupResource text).
fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// One cause as `field: message`; several as `[a, b]` (upstream's ErrorList aggregate).
fn render_causes(causes: &[FieldError]) -> String {
    match causes {
        [one] => one.render(),
        many => format!(
            "[{}]",
            many.iter()
                .map(FieldError::render)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl ApiError {
    /// The metav1.Status body for this error, as kube-apiserver writes it (see the recordings'
    /// cross-cutting observations: NotFound/AlreadyExists/Conflict put the resource plural in
    /// `details.kind`, Invalid the Kind; `details.group` is omitted for the core group).
    pub fn to_status(&self) -> serde_json::Value {
        use serde_json::{Value, json};
        let details = self.status_details();
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.status_metadata(),
            "status": "Failure",
            "message": self.to_string(),
        });
        if !self.reason().is_empty() {
            status["reason"] = json!(self.reason());
        }
        // go-restful's 404 for an unknown path and its 415 carry empty details; others omit
        // them.
        if !details.is_empty()
            || matches!(
                self,
                ApiError::UnknownPath | ApiError::RouteUnsupportedMediaType
            )
        {
            status["details"] = Value::Object(details);
        }
        status["code"] = json!(self.code());
        status
    }

    /// The Status's `details`: the object the error is about, the field causes, and how long
    /// to wait before retrying — each only when the error has it.
    fn status_details(&self) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::{Map, Value, json};
        let mut details = Map::new();
        if let Some((group, kind, name)) = self.subject() {
            // Empty parts are left out: the core group has no `group`, a list no `name`.
            for (key, value) in [("name", name), ("group", group), ("kind", kind)] {
                if !value.is_empty() {
                    details.insert(key.to_string(), Value::String(value.to_string()));
                }
            }
        }
        if let ApiError::Invalid { causes, .. } | ApiError::ApplyConflict { causes, .. } = self {
            let causes: Vec<Value> = causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let ApiError::TooManyRequests {
            retry_after_seconds,
            ..
        } = self
        {
            details.insert("retryAfterSeconds".into(), json!(retry_after_seconds));
        }
        details
    }

    /// The object the error is about, as `(group, kind, name)` for `details`: `kind` is the
    /// resource plural for NotFound, AlreadyExists and Conflict, but the Kind for Invalid —
    /// as kube-apiserver writes them.
    fn subject(&self) -> Option<(&str, &str, &str)> {
        match self {
            ApiError::NotFound {
                group,
                resource,
                name,
            }
            | ApiError::AlreadyExists {
                group,
                resource,
                name,
            }
            | ApiError::Conflict {
                group,
                resource,
                name,
                ..
            } => Some((group.as_str(), resource.as_str(), name.as_str())),
            ApiError::Invalid {
                group, kind, name, ..
            } => Some((group.as_str(), kind.as_str(), name.as_str())),
            _ => None,
        }
    }

    /// The Status's `metadata`: the fresh `continue` token of an expired list, which lets the
    /// client start again from where it stood.
    fn status_metadata(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut metadata = serde_json::Map::new();
        if let ApiError::Expired {
            continue_token: Some(token),
            ..
        } = self
        {
            metadata.insert("continue".into(), serde_json::Value::String(token.clone()));
        }
        metadata
    }
}

/// The result of a registry operation.
pub type ApiResult<T> = std::result::Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_names_the_plural_and_omits_the_core_group() {
        let err = ApiError::NotFound {
            group: String::new(),
            resource: "configmaps".into(),
            name: "cm-x".into(),
        };
        let status = err.to_status();
        assert_eq!(status["message"], "configmaps \"cm-x\" not found");
        assert_eq!(
            status["details"],
            serde_json::json!({"name": "cm-x", "kind": "configmaps"})
        );
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
    }

    #[test]
    fn the_routes_own_415_has_empty_details() {
        let status = ApiError::RouteUnsupportedMediaType.to_status();
        assert_eq!(status["message"], "415: Unsupported Media Type");
        assert_eq!(status["reason"], "UnsupportedMediaType");
        assert_eq!(status["details"], serde_json::json!({}));
        assert_eq!(status["code"], 415);
        let handler = ApiError::UnsupportedMediaType("the body ...".into()).to_status();
        assert!(handler.get("details").is_none());
    }

    #[test]
    fn invalid_status_lists_causes_and_brackets_several() {
        let err = ApiError::Invalid {
            group: "storagemigration.k8s.io".into(),
            kind: "StorageVersionMigration".into(),
            name: "Bad".into(),
            causes: vec![
                FieldError::invalid("metadata.name", "Bad", "must be lowercase"),
                FieldError::required("spec.resource.resource", ""),
            ],
        };
        let status = err.to_status();
        assert_eq!(
            status["message"],
            "StorageVersionMigration.storagemigration.k8s.io \"Bad\" is invalid: [metadata.name: Invalid value: \"Bad\": must be lowercase, spec.resource.resource: Required value]"
        );
        assert_eq!(status["details"]["kind"], "StorageVersionMigration");
        assert_eq!(
            status["details"]["causes"][1]["field"],
            "spec.resource.resource"
        );
        assert_eq!(status["code"], 422);
    }

    #[test]
    fn expired_continue_carries_the_inconsistent_token() {
        let err = ApiError::Expired {
            message: "The provided continue parameter is too old".into(),
            continue_token: Some("abc".into()),
        };
        let status = err.to_status();
        assert_eq!(status["metadata"]["continue"], "abc");
        assert_eq!(status["code"], 410);
        assert_eq!(status["reason"], "Expired");
    }
}
