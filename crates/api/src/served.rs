//! The served JSON of a kind: decoding a body of one of its versions, encoding one with its
//! type meta first, and the 400 for a version it does not serve. Every kind's conversions use
//! them, so the three kinds answer bad bodies in one set of words.

use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use svm_registry::{ApiError, ApiResult, ResourceInfo};

/// Deserialize the body of `kind` in `version` (apiVersion/kind already checked by the store).
/// A body that does not fit is a 400 with kube-apiserver's wording (recording 16b).
pub(crate) fn decode_body<T: DeserializeOwned>(
    kind: &str,
    version: &str,
    mut value: Value,
) -> ApiResult<T> {
    if let Value::Object(map) = &mut value {
        map.shift_remove("apiVersion");
        map.shift_remove("kind");
    }
    serde_json::from_value(value).map_err(|err| {
        ApiError::BadRequest(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {err}"
        ))
    })
}

/// Serialize `object` with `apiVersion` and `kind` first, as kube-apiserver orders built-ins.
pub(crate) fn encode_body<T: Serialize>(kind: &str, version: &str, object: &T) -> ApiResult<Value> {
    encode_body_in(super::GROUP, kind, version, object)
}

/// [`encode_body`] for a kind of `group`.
pub(crate) fn encode_body_in<T: Serialize>(
    group: &str,
    kind: &str,
    version: &str,
    object: &T,
) -> ApiResult<Value> {
    let body = serde_json::to_value(object).map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(kind.to_string()));
    out.insert(
        "apiVersion".into(),
        Value::String(format!("{group}/{version}")),
    );
    if let Value::Object(fields) = body {
        out.extend(fields);
    }
    Ok(Value::Object(out))
}

/// `Ok` when `info` serves `version`; the kind's "not served" error otherwise.
pub(crate) fn check_version(info: &ResourceInfo, version: &str) -> ApiResult<()> {
    if info.versions.contains(&version) {
        Ok(())
    } else {
        Err(unknown_version(info.kind, version))
    }
}

pub(crate) fn unknown_version(kind: &str, version: &str) -> ApiError {
    ApiError::BadRequest(format!(
        "{kind} in version {version:?} cannot be handled: version {version:?} is not served"
    ))
}
