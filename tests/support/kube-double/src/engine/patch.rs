//! The patch formats: merge-patch (and strategic merge, applied as a merge patch), JSON
//! patch, and server-side apply.

use serde_json::{Value, json};

use crate::negotiate::PatchType;
use crate::status::{ApiResult, StatusError};

pub(super) enum ParsedPatch {
    Merge(Value),
    Json(json_patch::Patch),
    Apply(Value),
}

impl ParsedPatch {
    pub(super) fn parse(patch_type: PatchType, body: &[u8]) -> ApiResult<Self> {
        match patch_type {
            PatchType::Merge | PatchType::StrategicMerge => serde_json::from_slice(body)
                .map(ParsedPatch::Merge)
                .map_err(|e| StatusError::bad_request(format!("error decoding patch: {e}"))),
            PatchType::Json => serde_json::from_slice(body)
                .map(ParsedPatch::Json)
                .map_err(|e| StatusError::bad_request(format!("error decoding patch: {e}"))),
            PatchType::Apply => {
                let value: Value = serde_norway::from_slice(body)
                    .map_err(|e| StatusError::bad_request(format!("error decoding YAML: {e}")))?;
                if !value.is_object() {
                    return Err(StatusError::bad_request(
                        "error decoding YAML: an apply patch must be an object",
                    ));
                }
                Ok(ParsedPatch::Apply(value))
            }
        }
    }

    pub(super) fn apply_to(&self, doc: &mut Value) -> ApiResult<()> {
        match self {
            ParsedPatch::Merge(patch) => {
                json_patch::merge(doc, patch);
                Ok(())
            }
            ParsedPatch::Json(patch) => json_patch::patch(doc, patch).map_err(|e| {
                // NewGenericServerResponse(422, ...) as the patch handler answers.
                let mut details = serde_json::Map::new();
                details.insert(
                    "causes".into(),
                    json!([{"reason": "UnexpectedServerResponse", "message": e.to_string()}]),
                );
                StatusError::new(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                )
                .with_details(details)
            }),
            ParsedPatch::Apply(applied) => {
                deep_merge(doc, applied);
                Ok(())
            }
        }
    }
}

/// Server-side apply's effect on the fields the applier sets: maps merge, everything else is
/// replaced. (Field ownership conflicts are not modelled.)
fn deep_merge(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    continue;
                }
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v)
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_merges_maps_and_replaces_the_rest() {
        let mut live = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"list": [1, 2], "keep": true}});
        let applied =
            json!({"metadata": {"labels": {"y": "2"}}, "spec": {"list": [3]}, "ignored": null});
        deep_merge(&mut live, &applied);
        assert_eq!(
            live,
            json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "spec": {"list": [3], "keep": true}})
        );
    }

    #[test]
    fn patch_errors_are_400_to_parse_and_422_to_apply() {
        assert_eq!(
            ParsedPatch::parse(PatchType::Merge, b"{oops")
                .err()
                .map(|e| e.code),
            Some(400)
        );
        assert_eq!(
            ParsedPatch::parse(PatchType::Apply, b"- a\n- b\n")
                .err()
                .map(|e| e.code),
            Some(400)
        );
        let bad =
            ParsedPatch::parse(PatchType::Json, br#"[{"op":"remove","path":"/nope"}]"#).unwrap();
        let mut doc = json!({});
        assert_eq!(bad.apply_to(&mut doc).err().map(|e| e.code), Some(422));
        let yaml = ParsedPatch::parse(
            PatchType::Apply,
            b"apiVersion: v1\nkind: ConfigMap\ndata:\n  k: v\n",
        )
        .unwrap();
        let mut cm = json!({"data": {"a": "b"}});
        yaml.apply_to(&mut cm).unwrap();
        assert_eq!(cm["data"], json!({"a": "b", "k": "v"}));
    }
}
