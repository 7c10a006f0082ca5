//! PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge
//! patch, parsed once and applied to the current object (in the requested version) on every
//! attempt of the update loop.

pub(crate) mod strategic;

use serde_json::Value;

pub(crate) use strategic::MergeRules;

use super::error::{ApiError, FieldError};
use super::rest::PatchType;

/// kube-apiserver's cap on the operations of one JSON patch.
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// A decoded patch body.
#[derive(Debug, Clone)]
pub(crate) enum Patch {
    Json(json_patch::Patch),
    Merge(Value),
    Strategic(Value),
}

impl Patch {
    /// Decode a body of `patch_type`. Malformed bodies are 400.
    pub(crate) fn parse(patch_type: PatchType, body: &[u8]) -> Result<Self, ApiError> {
        match patch_type {
            PatchType::Json => {
                let patch: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
                if patch.0.len() > MAX_JSON_PATCH_OPERATIONS {
                    return Err(ApiError::TooLarge(format!(
                        "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                        patch.0.len()
                    )));
                }
                Ok(Patch::Json(patch))
            }
            PatchType::Merge => serde_json::from_slice(body)
                .map(Patch::Merge)
                .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}"))),
            PatchType::StrategicMerge => {
                let value: Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
                if !value.is_object() {
                    return Err(ApiError::BadRequest(
                        "error decoding patch: json: cannot unmarshal non-object into Go value of type map[string]interface {}".into(),
                    ));
                }
                Ok(Patch::Strategic(value))
            }
            // Server-side apply is not a patch of the stored object: the store hands it to
            // the field manager (`Store::apply`).
            PatchType::Apply => Err(ApiError::Internal(
                "an apply patch is applied by the field manager, not as a patch".into(),
            )),
        }
    }

    /// Apply to `current` (the object as its version encodes it).
    pub(crate) fn apply(&self, current: &Value, rules: &MergeRules) -> Result<Value, ApiError> {
        match self {
            Patch::Json(patch) => {
                let mut doc = current.clone();
                json_patch::patch(&mut doc, patch).map_err(|e| invalid_patch(&e.to_string()))?;
                Ok(doc)
            }
            Patch::Merge(patch) => {
                let mut doc = current.clone();
                json_patch::merge(&mut doc, patch);
                Ok(doc)
            }
            Patch::Strategic(patch) => strategic::apply(current, patch, rules),
        }
    }
}

/// A patch that does not apply (a failed `test`, a missing path): 422, as upstream.
fn invalid_patch(detail: &str) -> ApiError {
    ApiError::Invalid {
        group: String::new(),
        kind: String::new(),
        name: String::new(),
        causes: vec![FieldError {
            reason: "FieldValueInvalid",
            field: "patch".into(),
            message: detail.to_string(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules() -> MergeRules {
        MergeRules::default()
    }

    #[test]
    fn json_patch_applies_and_reports_failures_as_422() {
        let patch = Patch::parse(
            PatchType::Json,
            br#"[{"op":"replace","path":"/spec/size","value":3},{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#,
        )
        .expect("valid json patch");
        let current = json!({"metadata": {"name": "x"}, "spec": {"size": 1}});
        assert_eq!(
            patch.apply(&current, &rules()).expect("applies"),
            json!({"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"size": 3}})
        );
        let failing = Patch::parse(
            PatchType::Json,
            br#"[{"op":"test","path":"/spec/size","value":9}]"#,
        )
        .expect("valid json patch");
        assert_eq!(
            failing
                .apply(&current, &rules())
                .expect_err("test fails")
                .code(),
            422
        );
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let patch = Patch::parse(PatchType::Merge, br#"{"spec":{"size":null,"color":"red"}}"#)
            .expect("valid merge patch");
        assert_eq!(
            patch
                .apply(&json!({"spec": {"size": 1}, "keep": 1}), &rules())
                .expect("applies"),
            json!({"spec": {"color": "red"}, "keep": 1})
        );
    }

    #[test]
    fn malformed_bodies_are_400() {
        for (patch_type, body) in [
            (PatchType::Json, &b"{not json"[..]),
            (PatchType::Json, &br#"{"op":"add"}"#[..]),
            (PatchType::Merge, &b"nope"[..]),
            (PatchType::StrategicMerge, &b"[]"[..]),
            (PatchType::StrategicMerge, &b""[..]),
        ] {
            let err = Patch::parse(patch_type, body).expect_err("malformed");
            assert_eq!(
                err.code(),
                400,
                "{patch_type:?} {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
