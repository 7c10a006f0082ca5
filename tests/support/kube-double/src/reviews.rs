//! TokenReview and SubjectAccessReview: answered, never stored; 201 Created with the review
//! echoed back, its status filled in and managedFields of the caller (recordings 15a, 15b).

use http::StatusCode;
use serde_json::{Value, json};

use crate::engine::{Engine, Writer};
use crate::object::{ManagerWrite, update_managed_fields};
use crate::resources::ResourceDef;
use crate::status::{ApiResult, Cause, StatusError};

fn echo(def: &ResourceDef, version: &str, body: &Value, writer: &Writer, status: Value) -> Value {
    let mut review = json!({
        "kind": def.kind,
        "apiVersion": def.group_version(version),
        "metadata": {},
        "spec": body.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    update_managed_fields(
        None,
        &mut review,
        &ManagerWrite {
            manager: &writer.manager,
            operation: "Update",
            api_version: &def.group_version(version),
            subresource: None,
            applied: None,
            typed: !def.is_custom(),
        },
    );
    review["status"] = status;
    review
}

pub fn token_review(
    engine: &Engine,
    def: &ResourceDef,
    version: &str,
    mut body: Value,
    writer: &Writer,
) -> ApiResult<(StatusCode, Value)> {
    engine.check_body_type(def, version, &mut body)?;
    if body["spec"]["token"].as_str().is_none_or(str::is_empty) {
        return Err(StatusError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let status = engine
        .auth
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .token_review_status(&body["spec"]);
    Ok((
        StatusCode::CREATED,
        echo(def, version, &body, writer, status),
    ))
}

pub fn subject_access_review(
    engine: &Engine,
    def: &ResourceDef,
    version: &str,
    mut body: Value,
    writer: &Writer,
) -> ApiResult<(StatusCode, Value)> {
    engine.check_body_type(def, version, &mut body)?;
    let spec = &body["spec"];
    let mut causes = Vec::new();
    let no_user = spec["user"].as_str().is_none_or(str::is_empty);
    let no_groups = spec["groups"].as_array().is_none_or(Vec::is_empty);
    if no_user && no_groups {
        causes.push(Cause::invalid(
            "spec.user",
            "",
            "at least one of user or group must be specified",
        ));
    }
    let has_resource = spec["resourceAttributes"].is_object();
    let has_non_resource = spec["nonResourceAttributes"].is_object();
    if has_resource == has_non_resource {
        causes.push(Cause::invalid(
            "spec.resourceAttributes",
            "",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    if !causes.is_empty() {
        // Recording 15b: an empty kind and name give the odd `.authorization.k8s.io ""` prefix.
        return Err(StatusError::invalid("authorization.k8s.io", "", "", causes));
    }
    let status = engine
        .auth
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .access_review_status(spec);
    Ok((
        StatusCode::CREATED,
        echo(def, version, &body, writer, status),
    ))
}
