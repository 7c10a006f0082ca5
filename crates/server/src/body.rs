//! Request bodies: read under the size limit (413), parse JSON or YAML into a JSON object with
//! kube-apiserver's error texts (400, recording 16b), and find duplicate JSON keys, which only the
//! raw bytes show (`fieldValidation`, recording 16c).

use std::fmt;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::negotiate::BodyFormat;
use svm_registry::ApiError;

/// Read the whole body, failing with 413 once it exceeds `limit` bytes.
pub(crate) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::TooLarge(format!("Request entity too large: limit is {limit}"));
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(err) => Err(ApiError::BadRequest(format!(
            "unable to read the request body: {err}"
        ))),
    }
}

/// A decoded object body.
#[derive(Debug)]
pub(crate) struct DecodedBody {
    pub object: Value,
    /// Dotted paths of JSON keys given more than once (the last value wins, as in Go).
    pub duplicate_fields: Vec<String>,
}

/// Parse a create/update body of a resource whose Kind is `kind`.
pub(crate) fn decode_object(
    bytes: &[u8],
    format: BodyFormat,
    kind: &str,
) -> Result<DecodedBody, ApiError> {
    let unrecognized = |detail: String| {
        ApiError::BadRequest(format!(
            "the object provided is unrecognized (must be of type {kind}): {detail} ({})",
            summarize(bytes)
        ))
    };
    let (object, duplicate_fields) = match format {
        BodyFormat::Json => {
            let mut deserializer = serde_json::Deserializer::from_slice(bytes);
            let mut duplicates = Vec::new();
            let value = TrackedValue {
                path: String::new(),
                duplicates: &mut duplicates,
            }
            .deserialize(&mut deserializer)
            .and_then(|value| deserializer.end().map(|()| value))
            .map_err(|err| {
                unrecognized(format!(
                    "couldn't get version/kind; json parse error: {}",
                    go_like_json_error(&err)
                ))
            })?;
            (value, duplicates)
        }
        BodyFormat::Yaml => {
            let value: Value = serde_norway::from_slice(bytes).map_err(|err| {
                unrecognized(format!("error converting YAML to JSON: yaml: {err}"))
            })?;
            (value, Vec::new())
        }
        // Read by the kind's messages (handlers::decode_protobuf_object), never as text.
        BodyFormat::Protobuf => {
            return Err(unrecognized("a protobuf body is not JSON or YAML".into()));
        }
    };
    if !object.is_object() {
        return Err(unrecognized(
            "couldn't get version/kind; json parse error: the body is not a JSON object".into(),
        ));
    }
    Ok(DecodedBody {
        object,
        duplicate_fields,
    })
}

/// Parse an optional JSON/YAML options body (DeleteOptions); empty means none.
pub(crate) fn decode_options(
    bytes: &[u8],
    format: BodyFormat,
    kind: &str,
) -> Result<Option<Value>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    decode_object(bytes, format, kind).map(|decoded| Some(decoded.object))
}

/// Go's wording for the most common parse failure; serde's text otherwise.
fn go_like_json_error(err: &serde_json::Error) -> String {
    if err.is_eof() {
        "unexpected end of JSON input".into()
    } else {
        err.to_string()
    }
}

/// kube-apiserver's `summarizeData`: the first 30 bytes, as text for `{...}`, else as hex.
pub(crate) fn summarize(bytes: &[u8]) -> String {
    const MAX: usize = 30;
    if bytes.is_empty() {
        return "<empty>".into();
    }
    let (head, more) = if bytes.len() > MAX {
        (&bytes[..MAX], " ...")
    } else {
        (bytes, "")
    };
    if bytes[0] == b'{' {
        format!("{}{more}", String::from_utf8_lossy(head))
    } else {
        let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}{more}")
    }
}

/// Deserializes a JSON value like `serde_json::Value`, recording the path of every object key
/// that occurs twice.
struct TrackedValue<'a> {
    path: String,
    duplicates: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for TrackedValue<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TrackedValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let seed = TrackedValue {
                path: format!("{}[{}]", self.path, items.len()),
                duplicates: &mut *self.duplicates,
            };
            match seq.next_element_seed(seed)? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            let value = map.next_value_seed(TrackedValue {
                path: path.clone(),
                duplicates: &mut *self.duplicates,
            })?;
            if object.insert(key, value).is_some() {
                self.duplicates.push(path);
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_json_reads_like_kube_apiserver() {
        let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"#;
        let err = decode_object(body, BodyFormat::Json, "ConfigMap").unwrap_err();
        assert_eq!(err.code(), 400);
        assert_eq!(
            err.to_string(),
            "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: unexpected end of JSON input ({\"apiVersion\":\"v1\",\"kind\":\"Con ...)"
        );
    }

    #[test]
    fn non_json_is_summarized_as_hex() {
        let err = decode_object(b"not json at all", BodyFormat::Json, "ConfigMap").unwrap_err();
        let text = err.to_string();
        assert!(text.ends_with("(6e6f74206a736f6e20617420616c6c)"), "{text}");
        let empty = decode_object(b"", BodyFormat::Json, "ConfigMap").unwrap_err();
        assert!(empty.to_string().ends_with("(<empty>)"));
    }

    #[test]
    fn a_non_object_body_is_rejected() {
        let err = decode_object(b"[1,2]", BodyFormat::Json, "Thing").unwrap_err();
        assert_eq!(err.code(), 400);
    }

    #[test]
    fn duplicate_keys_are_found_with_their_paths() {
        let body = br#"{"kind":"ConfigMap","data":{"k":"v","k":"w"},"items":[{"a":1,"a":2}]}"#;
        let decoded = decode_object(body, BodyFormat::Json, "ConfigMap").expect("ok");
        assert_eq!(decoded.duplicate_fields, vec!["data.k", "items[0].a"]);
        assert_eq!(decoded.object["data"]["k"], "w");
    }

    #[test]
    fn yaml_bodies_become_json() {
        let decoded = decode_object(
            b"kind: Thing\nspec:\n  size: 3\n",
            BodyFormat::Yaml,
            "Thing",
        )
        .expect("ok");
        assert_eq!(
            decoded.object,
            serde_json::json!({"kind": "Thing", "spec": {"size": 3}})
        );
        let err = decode_object(b"kind: [", BodyFormat::Yaml, "Thing").unwrap_err();
        assert_eq!(err.code(), 400);
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_413() {
        let headers = HeaderMap::new();
        let err = read_limited(&headers, Body::from(vec![b'x'; 11]), 10)
            .await
            .unwrap_err();
        assert_eq!(err.code(), 413);
        assert_eq!(err.to_string(), "Request entity too large: limit is 10");
        let ok = read_limited(&headers, Body::from(vec![b'x'; 10]), 10)
            .await
            .expect("at the limit");
        assert_eq!(ok.len(), 10);
    }
}
