//! Pieces both kinds share: decoding a served body, encoding with type meta, the age column,
//! and name rules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use svm_registry::{ApiError, ApiResult, TableColumn};

/// The Name column every table starts with (kube-apiserver's text).
pub(crate) fn name_column() -> TableColumn {
    TableColumn {
        name: "Name",
        type_: "string",
        format: "name",
        description: "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        priority: 0,
    }
}

/// The Age column every table ends with: a `string` cell like `4m43s`, as built-ins have it
/// (recording 07).
pub(crate) fn age_column() -> TableColumn {
    TableColumn {
        name: "Age",
        type_: "string",
        format: "",
        description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
        priority: 0,
    }
}

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

pub(crate) fn unknown_version(kind: &str, version: &str) -> ApiError {
    ApiError::BadRequest(format!(
        "{kind} in version {version:?} cannot be handled: version {version:?} is not served"
    ))
}

/// The Age cell: time since `created`, in kubectl's short form (`4m43s`, `3h`, `12d`), as
/// kube-apiserver's table convertors write it (apimachinery's `HumanDuration`).
pub(crate) fn age(created: Option<&Time>) -> String {
    let Some(created) = created else {
        return "<unknown>".to_string();
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let seconds = now.as_second() - created.0.as_second();
    human_duration(seconds)
}

/// apimachinery `duration.HumanDuration` for whole seconds.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    let s = seconds.max(0);
    let minutes = s / 60;
    let hours = s / 3600;
    let days = hours / 24;
    let years = days / 365;
    let with = |major: i64, unit: &str, minor: i64, minor_unit: &str| {
        if minor == 0 {
            format!("{major}{unit}")
        } else {
            format!("{major}{unit}{minor}{minor_unit}")
        }
    };
    if s < 120 {
        format!("{s}s")
    } else if minutes < 10 {
        with(minutes, "m", s % 60, "s")
    } else if hours < 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        with(hours, "h", minutes % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        with(days, "d", hours % 24, "h")
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        with(years, "y", days % 365, "d")
    } else {
        format!("{years}y")
    }
}

/// RFC 1123 DNS label errors (resource names such as `deployments`).
pub(crate) use svm_registry::validation::dns1123_label_errors as dns_label_errors;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_kubectl() {
        for (seconds, want) in [
            (-5, "<invalid>"),
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (283, "4m43s"),
            (300, "5m"),
            (1800, "30m"),
            (3 * 3600 + 60, "3h1m"),
            (5 * 3600, "5h"),
            (30 * 3600, "30h"),
            (3 * 86400 + 7200, "3d2h"),
            (20 * 86400, "20d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (10 * 365 * 86400, "10y"),
        ] {
            assert_eq!(human_duration(seconds), want, "{seconds}s");
        }
    }

    #[test]
    fn dns_labels() {
        assert!(dns_label_errors("deployments").is_empty());
        assert!(dns_label_errors("a-1").is_empty());
        assert!(!dns_label_errors("Deployments").is_empty());
        assert!(!dns_label_errors("-x").is_empty());
        assert!(!dns_label_errors("").is_empty());
        assert!(!dns_label_errors("a.b").is_empty());
        assert!(!dns_label_errors(&"a".repeat(64)).is_empty());
    }
}
