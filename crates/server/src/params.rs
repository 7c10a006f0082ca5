//! Query parameters, parsed and validated the way kube-apiserver's handlers do: type errors are
//! 400 BadRequest; invalid option values are 422 Invalid on the options kind
//! (`ListOptions.meta.k8s.io`, `CreateOptions.meta.k8s.io`, ...; recordings 10b and 17a).

use serde_json::Value;

use svm_registry::rest::{
    DeleteOptions, FieldValidation, GetOptions, ListParams, PatchType, Preconditions, WatchParams,
    WriteOptions,
};
use svm_registry::{ApiError, FieldError};

/// The raw query string as ordered (name, value) pairs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(raw: Option<&str>) -> Self {
        Query(
            form_urlencoded::parse(raw.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A non-empty string parameter.
    fn string(&self, name: &str) -> Option<String> {
        self.get(name).filter(|v| !v.is_empty()).map(str::to_string)
    }

    /// A boolean the way apimachinery converts query parameters: only `0` and `false` (any
    /// case) are false; any other given value is true.
    pub(crate) fn flag(&self, name: &str) -> bool {
        match self.get(name) {
            None => false,
            Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
        }
    }

    fn optional_flag(&self, name: &str) -> Option<bool> {
        self.get(name).map(|_| self.flag(name))
    }

    fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(raw) => raw.parse::<i64>().map(Some).map_err(|_| {
                ApiError::BadRequest(format!("strconv.ParseInt: parsing {raw:?}: invalid syntax"))
            }),
        }
    }

    /// `watch=true|1|...`: the list endpoint streams instead.
    pub(crate) fn is_watch(&self) -> bool {
        self.flag("watch")
    }
}

fn invalid_options(kind: &str, causes: Vec<FieldError>) -> ApiError {
    ApiError::Invalid {
        group: "meta.k8s.io".into(),
        kind: kind.into(),
        name: String::new(),
        causes,
    }
}

fn forbidden(field: &str, detail: &str) -> FieldError {
    FieldError::forbidden(field, detail)
}

/// A Go string slice as `field.NotSupported` prints it: `["a", "b"]`.
fn go_slice(values: &[&str]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", items.join(", "))
}

/// `resourceVersionMatch` etc. of a list, validated as kube-apiserver's ValidateListOptions.
pub(crate) fn list_params(query: &Query) -> Result<ListParams, ApiError> {
    let params = ListParams {
        label_selector: query.string("labelSelector"),
        field_selector: query.string("fieldSelector"),
        limit: query.int("limit")?,
        continue_token: query.string("continue"),
        resource_version: query.string("resourceVersion"),
        resource_version_match: query.string("resourceVersionMatch"),
    };
    let mut causes = Vec::new();
    if let Some(rv_match) = params.resource_version_match.as_deref() {
        if params.resource_version.is_none() {
            causes.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if params.continue_token.is_some() {
            causes.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if rv_match != "Exact" && rv_match != "NotOlderThan" {
            causes.push(FieldError::not_supported(
                "resourceVersionMatch",
                rv_match,
                &["", "Exact", "NotOlderThan"],
            ));
        }
        if rv_match == "Exact" && params.resource_version.as_deref() == Some("0") {
            causes.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if query.get("sendInitialEvents").is_some() {
        causes.push(forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    if causes.is_empty() {
        Ok(params)
    } else {
        Err(invalid_options("ListOptions", causes))
    }
}

/// Watch parameters, validated and defaulted as kube-apiserver 1.36 does with WatchList on: a
/// watch with bookmarks from resourceVersion "" or "0" becomes a watch-list request
/// (`sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`; recording 10b, step 2).
pub(crate) fn watch_params(query: &Query) -> Result<WatchParams, ApiError> {
    let timeout = query.int("timeoutSeconds")?;
    let mut params = WatchParams {
        label_selector: query.string("labelSelector"),
        field_selector: query.string("fieldSelector"),
        resource_version: query.string("resourceVersion"),
        resource_version_match: query.string("resourceVersionMatch"),
        allow_watch_bookmarks: query.flag("allowWatchBookmarks"),
        send_initial_events: query.optional_flag("sendInitialEvents"),
        timeout_seconds: timeout.map(|t| t.max(0) as u64),
    };
    let mut causes = Vec::new();
    let rv_match = params.resource_version_match.as_deref();
    if params.send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
        causes.push(forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if let Some(rv_match) = rv_match {
        if params.send_initial_events.is_none() {
            causes.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if rv_match != "NotOlderThan" {
            causes.push(FieldError::not_supported(
                "resourceVersionMatch",
                rv_match,
                &["NotOlderThan"],
            ));
        }
        if query.string("continue").is_some() {
            causes.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    if !causes.is_empty() {
        return Err(invalid_options("ListOptions", causes));
    }
    let legacy_rv = matches!(params.resource_version.as_deref(), None | Some("0"));
    if params.allow_watch_bookmarks
        && legacy_rv
        && params.send_initial_events.is_none()
        && params.resource_version_match.is_none()
    {
        params.send_initial_events = Some(true);
        params.resource_version_match = Some("NotOlderThan".into());
    }
    Ok(params)
}

pub(crate) fn get_options(query: &Query) -> GetOptions {
    GetOptions {
        resource_version: query.string("resourceVersion"),
    }
}

/// Which write a set of options belongs to (names the options kind in a 422).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteVerb {
    Create,
    Update,
    Patch(PatchType),
}

/// Options of create / update / patch, validated as ValidateCreateOptions & co.
pub(crate) fn write_options(query: &Query, verb: WriteVerb) -> Result<WriteOptions, ApiError> {
    let mut causes = Vec::new();
    let dry_run = dry_run(query, &mut causes);
    let field_manager = query.string("fieldManager");
    if let Some(manager) = field_manager.as_deref() {
        validate_field_manager(manager, &mut causes);
    }
    let field_validation = match query.get("fieldValidation").unwrap_or("") {
        // Apply validates strictly unless told otherwise, as upstream.
        "" if verb == WriteVerb::Patch(PatchType::Apply) => FieldValidation::Strict,
        "" | "Warn" => FieldValidation::Warn,
        "Ignore" => FieldValidation::Ignore,
        "Strict" => FieldValidation::Strict,
        other => {
            causes.push(FieldError::not_supported(
                "fieldValidation",
                other,
                &["", "Ignore", "Strict", "Warn"],
            ));
            FieldValidation::Warn
        }
    };
    let force = query.get("force").map(|_| query.flag("force"));
    match verb {
        WriteVerb::Patch(PatchType::Apply) if field_manager.is_none() => {
            causes.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        WriteVerb::Patch(PatchType::Apply) => {}
        WriteVerb::Patch(_) if force.is_some() => {
            causes.push(forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
        _ => {}
    }
    if !causes.is_empty() {
        let kind = match verb {
            WriteVerb::Create => "CreateOptions",
            WriteVerb::Update => "UpdateOptions",
            WriteVerb::Patch(_) => "PatchOptions",
        };
        return Err(invalid_options(kind, causes));
    }
    Ok(WriteOptions {
        dry_run,
        field_validation,
        field_manager,
        force: force.unwrap_or(false),
        user_agent: None,
    })
}

/// `dryRun`: every value must be `All` (recording 17a, step 5).
fn dry_run(query: &Query, causes: &mut Vec<FieldError>) -> bool {
    let values = query.all("dryRun");
    if values.iter().any(|v| *v != "All") {
        causes.push(FieldError {
            reason: "FieldValueNotSupported",
            field: "dryRun".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"All\"",
                go_slice(&values)
            ),
        });
    }
    !values.is_empty()
}

fn validate_field_manager(manager: &str, causes: &mut Vec<FieldError>) {
    const MAX: usize = 128;
    if manager.len() > MAX {
        causes.push(FieldError {
            reason: "FieldValueTooLong",
            field: "fieldManager".into(),
            message: format!("Too long: may not be more than {MAX} bytes"),
        });
    }
    if let Some((i, c)) = manager.char_indices().find(|(_, c)| c.is_control()) {
        causes.push(FieldError::invalid(
            "fieldManager",
            manager,
            &format!("invalid character U+{:04X} (at position {i})", c as u32),
        ));
    }
}

/// DeleteOptions from the query and an optional body (query values win where both are given,
/// as apimachinery decodes the body first and the query over it).
pub(crate) fn delete_options(
    query: &Query,
    body: Option<&Value>,
) -> Result<DeleteOptions, ApiError> {
    let mut causes = Vec::new();
    let mut opts = match body {
        Some(body) => delete_options_of_body(body, &mut causes),
        None => DeleteOptions::default(),
    };
    if !query.all("dryRun").is_empty() {
        opts.dry_run = dry_run(query, &mut causes);
    }
    if let Some(policy) = query.string("propagationPolicy") {
        opts.propagation_policy = Some(policy);
    }
    if let Some(grace) = query.int("gracePeriodSeconds")? {
        opts.grace_period_seconds = Some(grace);
    }
    validate_delete_options(&opts, &mut causes);
    if causes.is_empty() {
        Ok(opts)
    } else {
        Err(invalid_options("DeleteOptions", causes))
    }
}

/// The DeleteOptions a request body gives; an unsupported `dryRun` value is a cause.
fn delete_options_of_body(body: &Value, causes: &mut Vec<FieldError>) -> DeleteOptions {
    let text = |pointer: &str| {
        body.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut opts = DeleteOptions {
        preconditions: Preconditions {
            uid: text("/preconditions/uid"),
            resource_version: text("/preconditions/resourceVersion"),
        },
        propagation_policy: body
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string),
        grace_period_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
        ..DeleteOptions::default()
    };
    if let Some(values) = body.get("dryRun").and_then(Value::as_array) {
        let values: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
        if values.iter().any(|v| *v != "All") {
            causes.push(FieldError {
                reason: "FieldValueNotSupported",
                field: "dryRun".into(),
                message: format!(
                    "Unsupported value: {}: supported values: \"All\"",
                    go_slice(&values)
                ),
            });
        }
        opts.dry_run = !values.is_empty();
    }
    opts
}

/// The propagation policy must be one upstream knows, and the grace period not negative.
fn validate_delete_options(opts: &DeleteOptions, causes: &mut Vec<FieldError>) {
    if let Some(policy) = opts.propagation_policy.as_deref()
        && !matches!(policy, "Orphan" | "Background" | "Foreground")
    {
        causes.push(FieldError::not_supported(
            "propagationPolicy",
            policy,
            &["Foreground", "Background", "Orphan", "nil"],
        ));
    }
    if let Some(grace) = opts.grace_period_seconds.filter(|g| *g < 0) {
        causes.push(FieldError::invalid(
            "gracePeriodSeconds",
            &grace.to_string(),
            "must be greater than or equal to 0",
        ));
    }
}

/// `includeObject` of a Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

pub(crate) fn include_object(query: &Query) -> Result<IncludeObject, ApiError> {
    match query.get("includeObject").unwrap_or("") {
        "" | "Metadata" => Ok(IncludeObject::Metadata),
        "None" => Ok(IncludeObject::None),
        "Object" => Ok(IncludeObject::Object),
        other => Err(invalid_options(
            "TableOptions",
            vec![FieldError::invalid(
                "includeObject",
                other,
                "must be 'Metadata', 'Object', 'None', or empty",
            )],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(raw: &str) -> Query {
        Query::parse(Some(raw))
    }

    #[test]
    fn bad_limit_is_a_bad_request() {
        let err = list_params(&q("limit=abc")).unwrap_err();
        assert_eq!(err.code(), 400);
        assert_eq!(
            err.to_string(),
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        assert_eq!(list_params(&q("limit=5")).expect("ok").limit, Some(5));
    }

    #[test]
    fn list_rejects_send_initial_events_and_unanchored_match() {
        let err = list_params(&q(
            "allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        ))
        .unwrap_err();
        let status = err.to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(
            status["message"],
            "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"
        );
        assert_eq!(status["details"]["group"], "meta.k8s.io");
        assert_eq!(status["details"]["kind"], "ListOptions");
    }

    #[test]
    fn watch_list_requires_not_older_than() {
        let err = watch_params(&q(
            "watch=1&allowWatchBookmarks=true&sendInitialEvents=true",
        ))
        .unwrap_err();
        assert_eq!(
            err.to_status()["message"],
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
        );
    }

    #[test]
    fn bookmark_watch_from_nothing_defaults_to_watch_list() {
        let p = watch_params(&q("watch=1&allowWatchBookmarks=true")).expect("ok");
        assert_eq!(p.send_initial_events, Some(true));
        assert_eq!(p.resource_version_match.as_deref(), Some("NotOlderThan"));
        // Without bookmarks, or from a concrete revision, it stays a plain watch.
        let legacy = watch_params(&q("watch=1")).expect("ok");
        assert_eq!(legacy.send_initial_events, None);
        let from_rv =
            watch_params(&q("watch=1&allowWatchBookmarks=1&resourceVersion=42")).expect("ok");
        assert_eq!(from_rv.send_initial_events, None);
        assert_eq!(from_rv.resource_version.as_deref(), Some("42"));
    }

    #[test]
    fn dry_run_values_other_than_all_are_invalid() {
        let err = write_options(&q("dryRun=Foo"), WriteVerb::Create).unwrap_err();
        let status = err.to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(
            status["message"],
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: [\"Foo\"]: supported values: \"All\""
        );
        assert!(
            write_options(&q("dryRun=All"), WriteVerb::Create)
                .expect("ok")
                .dry_run
        );
    }

    #[test]
    fn field_validation_values() {
        let opts = write_options(&q(""), WriteVerb::Create).expect("ok");
        assert_eq!(opts.field_validation, FieldValidation::Warn);
        let strict = write_options(&q("fieldValidation=Strict"), WriteVerb::Update).expect("ok");
        assert_eq!(strict.field_validation, FieldValidation::Strict);
        let err = write_options(&q("fieldValidation=Loud"), WriteVerb::Update).unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(err.to_status()["details"]["kind"], "UpdateOptions");
    }

    #[test]
    fn apply_needs_a_field_manager_and_force_only_for_apply() {
        let err = write_options(&q(""), WriteVerb::Patch(PatchType::Apply)).unwrap_err();
        assert!(
            err.to_string()
                .contains("fieldManager: Required value: is required for apply patch")
        );
        let ok = write_options(
            &q("fieldManager=kubectl&force=true"),
            WriteVerb::Patch(PatchType::Apply),
        )
        .expect("ok");
        assert!(ok.force);
        let err = write_options(&q("force=true"), WriteVerb::Patch(PatchType::Merge)).unwrap_err();
        assert_eq!(err.code(), 422);
    }

    #[test]
    fn delete_options_merge_body_and_query() {
        let body = serde_json::json!({
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
            "preconditions": {"uid": "u1", "resourceVersion": "7"}
        });
        let opts = delete_options(&q("dryRun=All"), Some(&body)).expect("ok");
        assert!(opts.dry_run);
        assert_eq!(opts.propagation_policy.as_deref(), Some("Background"));
        assert_eq!(opts.preconditions.uid.as_deref(), Some("u1"));
        assert_eq!(opts.preconditions.resource_version.as_deref(), Some("7"));
        let err = delete_options(&q("propagationPolicy=Sideways"), None).unwrap_err();
        assert_eq!(err.code(), 422);
    }

    #[test]
    fn include_object_values() {
        assert_eq!(include_object(&q("")).expect("ok"), IncludeObject::Metadata);
        assert_eq!(
            include_object(&q("includeObject=None")).expect("ok"),
            IncludeObject::None
        );
        assert_eq!(
            include_object(&q("includeObject=bad")).unwrap_err().code(),
            422
        );
    }

    #[test]
    fn flags_follow_apimachinery() {
        assert!(q("watch=true").is_watch());
        assert!(q("watch=1").is_watch());
        assert!(!q("watch=false").is_watch());
        assert!(!q("watch=0").is_watch());
        assert!(!q("").is_watch());
    }
}
