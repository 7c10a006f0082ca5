//! The Kubernetes protobuf wire format (`application/vnd.kubernetes.protobuf`), as
//! kube-apiserver v1.36.2 writes it (recordings 20a-20h):
//!
//! - a body is the magic `k8s\0` and a `runtime.Unknown` envelope (typeMeta apiVersion and
//!   kind, the message as `raw`, contentEncoding and contentType written empty);
//! - a watch stream is a sequence of frames, each a 4-byte big-endian length and a bare
//!   `metav1.WatchEvent` whose object is a whole body (magic and envelope included);
//! - every message is written as Go's generated marshallers write it: a plain field (a
//!   string, an int, a struct) always, even empty; a pointer, a slice or a map only when set.
//!   The zero time is an empty `Time` message, and Go never writes a time's nanoseconds.
//!
//! The double keeps objects as JSON; this module turns the JSON of the kinds it speaks
//! protobuf for (the `meta.k8s.io` forms, Status, ConfigMap) into k8s-pb's messages, and
//! reads ConfigMap bodies back.

use std::collections::BTreeMap;

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use prost::Message;
use serde_json::{Map, Value, json};

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// A whole body: the magic, then the envelope around `raw`.
pub fn body(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(&MAGIC);
    unknown.encode_raw(&mut out);
    out
}

/// One frame of a watch stream: the length, then a WatchEvent whose object is `object_body`.
pub fn watch_frame(event_type: &str, object_body: Vec<u8>) -> Vec<u8> {
    let event = meta::WatchEvent {
        r#type: Some(event_type.into()),
        object: Some(RawExtension {
            raw: Some(object_body),
        }),
    }
    .encode_to_vec();
    // A frame is a watch event of one object: far below 4 GiB.
    let length = u32::try_from(event.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(4 + event.len());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend(event);
    out
}

/// The whole protobuf body of a JSON value the double answers with, by its apiVersion and
/// kind: a Status, a PartialObjectMetadata(List), a ConfigMap(List). `None` for a kind the
/// double has no messages for.
pub fn encode(value: &Value) -> Option<Vec<u8>> {
    let api_version = value.get("apiVersion").and_then(Value::as_str)?;
    let kind = value.get("kind").and_then(Value::as_str)?;
    let raw = match (api_version, kind) {
        ("v1", "Status") => status(value).encode_to_vec(),
        (v, "PartialObjectMetadata") if v.starts_with("meta.k8s.io/") => {
            partial_object_metadata(value).encode_to_vec()
        }
        (v, "PartialObjectMetadataList") if v.starts_with("meta.k8s.io/") => {
            meta::PartialObjectMetadataList {
                metadata: Some(list_meta(value.get("metadata"))),
                items: items(value).map(partial_object_metadata).collect(),
            }
            .encode_to_vec()
        }
        ("v1", "ConfigMap") => config_map(value).encode_to_vec(),
        ("v1", "ConfigMapList") => core::ConfigMapList {
            metadata: Some(list_meta(value.get("metadata"))),
            items: items(value).map(config_map).collect(),
        }
        .encode_to_vec(),
        _ => return None,
    };
    Some(body(api_version, kind, raw))
}

/// Whether the double writes `kind` (of the core group) in protobuf.
pub fn speaks(api_version: &str, kind: &str) -> bool {
    matches!((api_version, kind), ("v1", "ConfigMap" | "ConfigMapList"))
}

fn items(list: &Value) -> impl Iterator<Item = &Value> {
    list.get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn text(value: Option<&Value>) -> Option<String> {
    Some(
        value
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    )
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// metav1.Time: whole seconds; the zero time (an absent field) is an empty message.
fn time(value: Option<&Value>) -> meta::Time {
    let seconds = value
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second());
    match seconds {
        Some(seconds) => meta::Time {
            seconds: Some(seconds),
            nanos: Some(0),
        },
        None => meta::Time::default(),
    }
}

/// A pointer to a metav1.Time: only when set.
fn time_pointer(value: Option<&Value>) -> Option<meta::Time> {
    value.filter(|v| v.is_string()).map(|v| time(Some(v)))
}

pub fn object_meta(value: Option<&Value>) -> meta::ObjectMeta {
    let empty = Map::new();
    let m = value.and_then(Value::as_object).unwrap_or(&empty);
    meta::ObjectMeta {
        name: text(m.get("name")),
        generate_name: text(m.get("generateName")),
        namespace: text(m.get("namespace")),
        self_link: text(m.get("selfLink")),
        uid: text(m.get("uid")),
        resource_version: text(m.get("resourceVersion")),
        generation: Some(m.get("generation").and_then(Value::as_i64).unwrap_or(0)),
        creation_timestamp: Some(time(m.get("creationTimestamp"))),
        deletion_timestamp: time_pointer(m.get("deletionTimestamp")),
        deletion_grace_period_seconds: m.get("deletionGracePeriodSeconds").and_then(Value::as_i64),
        labels: string_map(m.get("labels")),
        annotations: string_map(m.get("annotations")),
        owner_references: m
            .get("ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|o| meta::OwnerReference {
                api_version: text(o.get("apiVersion")),
                kind: text(o.get("kind")),
                name: text(o.get("name")),
                uid: text(o.get("uid")),
                controller: o.get("controller").and_then(Value::as_bool),
                block_owner_deletion: o.get("blockOwnerDeletion").and_then(Value::as_bool),
            })
            .collect(),
        finalizers: strings(m.get("finalizers")),
        managed_fields: m
            .get("managedFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|e| meta::ManagedFieldsEntry {
                manager: text(e.get("manager")),
                operation: text(e.get("operation")),
                api_version: text(e.get("apiVersion")),
                time: time_pointer(e.get("time")),
                fields_type: text(e.get("fieldsType")),
                fields_v1: e.get("fieldsV1").map(|f| meta::FieldsV1 {
                    raw: Some(serde_json::to_vec(f).unwrap_or_default()),
                }),
                subresource: text(e.get("subresource")),
            })
            .collect(),
    }
}

pub fn list_meta(value: Option<&Value>) -> meta::ListMeta {
    let field = |name: &str| value.and_then(|m| m.get(name));
    meta::ListMeta {
        self_link: text(field("selfLink")),
        resource_version: text(field("resourceVersion")),
        r#continue: text(field("continue")),
        remaining_item_count: field("remainingItemCount").and_then(Value::as_i64),
    }
}

fn partial_object_metadata(value: &Value) -> meta::PartialObjectMetadata {
    meta::PartialObjectMetadata {
        metadata: Some(object_meta(value.get("metadata"))),
    }
}

/// metav1.Status; `details` only when the JSON has them (a pointer in Go).
pub fn status(value: &Value) -> meta::Status {
    meta::Status {
        metadata: Some(list_meta(value.get("metadata"))),
        status: text(value.get("status")),
        message: text(value.get("message")),
        reason: text(value.get("reason")),
        details: value
            .get("details")
            .filter(|d| d.is_object())
            .map(|d| meta::StatusDetails {
                name: text(d.get("name")),
                group: text(d.get("group")),
                kind: text(d.get("kind")),
                uid: text(d.get("uid")),
                causes: d
                    .get("causes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| meta::StatusCause {
                        reason: text(c.get("reason")),
                        message: text(c.get("message")),
                        field: text(c.get("field")),
                    })
                    .collect(),
                retry_after_seconds: Some(
                    d.get("retryAfterSeconds")
                        .and_then(Value::as_i64)
                        .and_then(|s| i32::try_from(s).ok())
                        .unwrap_or(0),
                ),
            }),
        code: Some(
            value
                .get("code")
                .and_then(Value::as_i64)
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(0),
        ),
    }
}

fn config_map(value: &Value) -> core::ConfigMap {
    use base64::Engine as _;
    core::ConfigMap {
        metadata: Some(object_meta(value.get("metadata"))),
        immutable: value.get("immutable").and_then(Value::as_bool),
        data: string_map(value.get("data")),
        binary_data: value
            .get("binaryData")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str()?)
                    .ok()?;
                Some((k.clone(), bytes))
            })
            .collect(),
    }
}

/// The envelope of a request body.
#[derive(Debug)]
pub struct Envelope {
    pub api_version: String,
    pub kind: String,
    pub raw: Vec<u8>,
}

/// Opens a request body: the magic, then the envelope. An error is why the body is not an
/// envelope at all, in kube-apiserver's words (recording 20h: "the object provided is
/// unrecognized (must be of type <Kind>): <this> (<the body's first bytes>)").
pub fn open(bytes: &[u8]) -> Result<Envelope, String> {
    if bytes.is_empty() {
        return Err("empty data".into());
    }
    let Some(message) = bytes.strip_prefix(&MAGIC) else {
        return Err(
            "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
                .into(),
        );
    };
    let unknown = Unknown::decode(message).map_err(|e| go_decode_error(message, &e))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    if raw.is_empty() {
        return Err("empty body".into());
    }
    Ok(Envelope {
        api_version: type_meta.api_version.unwrap_or_default(),
        kind: type_meta.kind.unwrap_or_default(),
        raw,
    })
}

/// A ConfigMap message as the double's JSON (apiVersion and kind set; Go's empty values
/// absent, as Go's JSON leaves them out). Unknown fields are skipped, as Go's decoder skips
/// them (recording 20h step 8: no warning either).
pub fn config_map_json(raw: &[u8]) -> Result<Value, String> {
    use base64::Engine as _;
    let m = core::ConfigMap::decode(raw).map_err(|e| go_decode_error(raw, &e))?;
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    object["metadata"] = object_meta_json(m.metadata.unwrap_or_default());
    if let Some(immutable) = m.immutable {
        object["immutable"] = json!(immutable);
    }
    if !m.data.is_empty() {
        object["data"] = json!(m.data);
    }
    if !m.binary_data.is_empty() {
        let encoded: BTreeMap<String, String> = m
            .binary_data
            .into_iter()
            .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v)))
            .collect();
        object["binaryData"] = json!(encoded);
    }
    Ok(object)
}

/// A DeleteOptions message as the JSON a client would have sent.
pub fn delete_options_json(raw: &[u8]) -> Result<Value, String> {
    let m = meta::DeleteOptions::decode(raw).map_err(|e| go_decode_error(raw, &e))?;
    let mut out = json!({});
    if let Some(p) = m.preconditions {
        let mut pre = json!({});
        if let Some(uid) = p.uid {
            pre["uid"] = json!(uid);
        }
        if let Some(rv) = p.resource_version {
            pre["resourceVersion"] = json!(rv);
        }
        out["preconditions"] = pre;
    }
    if !m.dry_run.is_empty() {
        out["dryRun"] = json!(m.dry_run);
    }
    if let Some(s) = m.grace_period_seconds {
        out["gracePeriodSeconds"] = json!(s);
    }
    if let Some(p) = m.propagation_policy {
        out["propagationPolicy"] = json!(p);
    }
    if let Some(o) = m.orphan_dependents {
        out["orphanDependents"] = json!(o);
    }
    Ok(out)
}

fn object_meta_json(m: meta::ObjectMeta) -> Value {
    let mut out = Map::new();
    let mut put = |key: &str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.insert(key.into(), json!(v));
        }
    };
    put("name", m.name);
    put("generateName", m.generate_name);
    put("namespace", m.namespace);
    put("uid", m.uid);
    put("resourceVersion", m.resource_version);
    if let Some(g) = m.generation.filter(|g| *g != 0) {
        out.insert("generation".into(), json!(g));
    }
    let rfc3339 = |t: meta::Time| {
        let seconds = t.seconds.unwrap_or(0);
        (seconds != 0)
            .then(|| jiff::Timestamp::from_second(seconds).ok())
            .flatten()
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    };
    if let Some(t) = m.creation_timestamp.and_then(rfc3339) {
        out.insert("creationTimestamp".into(), json!(t));
    }
    if let Some(t) = m.deletion_timestamp.and_then(rfc3339) {
        out.insert("deletionTimestamp".into(), json!(t));
    }
    if let Some(s) = m.deletion_grace_period_seconds {
        out.insert("deletionGracePeriodSeconds".into(), json!(s));
    }
    if !m.labels.is_empty() {
        out.insert("labels".into(), json!(m.labels));
    }
    if !m.annotations.is_empty() {
        out.insert("annotations".into(), json!(m.annotations));
    }
    if !m.owner_references.is_empty() {
        let owners: Vec<Value> = m
            .owner_references
            .into_iter()
            .map(|o| {
                let mut owner = json!({
                    "apiVersion": o.api_version.unwrap_or_default(),
                    "kind": o.kind.unwrap_or_default(),
                    "name": o.name.unwrap_or_default(),
                    "uid": o.uid.unwrap_or_default(),
                });
                if let Some(c) = o.controller {
                    owner["controller"] = json!(c);
                }
                if let Some(b) = o.block_owner_deletion {
                    owner["blockOwnerDeletion"] = json!(b);
                }
                owner
            })
            .collect();
        out.insert("ownerReferences".into(), json!(owners));
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    if !m.managed_fields.is_empty() {
        let entries: Vec<Value> = m
            .managed_fields
            .into_iter()
            .map(|e| {
                let mut entry = Map::new();
                for (key, value) in [
                    ("manager", e.manager),
                    ("operation", e.operation),
                    ("apiVersion", e.api_version),
                    ("fieldsType", e.fields_type),
                    ("subresource", e.subresource),
                ] {
                    if let Some(v) = value.filter(|v| !v.is_empty()) {
                        entry.insert(key.into(), json!(v));
                    }
                }
                if let Some(t) = e.time.and_then(rfc3339) {
                    entry.insert("time".into(), json!(t));
                }
                if let Some(fields) = e
                    .fields_v1
                    .and_then(|f| f.raw)
                    .and_then(|raw| serde_json::from_slice::<Value>(&raw).ok())
                {
                    entry.insert("fieldsV1".into(), fields);
                }
                Value::Object(entry)
            })
            .collect();
        out.insert("managedFields".into(), json!(entries));
    }
    Value::Object(out)
}

/// Go's words for bytes that do not decode (its generated `Unmarshal`): the top-level fields
/// walked as Go walks them (a declared length of 2^63 or more is "negative" to Go, one past
/// the end an `unexpected EOF`), else prost's error for a nested field in Go's words.
fn go_decode_error(message: &[u8], err: &prost::DecodeError) -> String {
    if let Some(found) = go_wire_error(message) {
        return found;
    }
    let text = err.to_string();
    if text.ends_with("buffer underflow") || text.ends_with("invalid varint") {
        return "unexpected EOF".into();
    }
    text
}

fn go_wire_error(message: &[u8]) -> Option<String> {
    const EOF: &str = "unexpected EOF";
    fn varint(rest: &mut &[u8]) -> Result<u64, String> {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            if shift >= 64 {
                return Err("proto: integer overflow".into());
            }
            let Some((&byte, tail)) = rest.split_first() else {
                return Err(EOF.into());
            };
            *rest = tail;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
    }
    fn skip(rest: &mut &[u8], length: u64) -> Result<(), String> {
        match usize::try_from(length) {
            Ok(length) if length <= rest.len() => {
                *rest = &rest[length..];
                Ok(())
            }
            _ => Err(EOF.into()),
        }
    }
    let mut rest = message;
    let walked = (|| {
        while !rest.is_empty() {
            let key = varint(&mut rest)?;
            match key & 7 {
                0 => {
                    varint(&mut rest)?;
                }
                1 => skip(&mut rest, 8)?,
                2 => {
                    let length = varint(&mut rest)?;
                    if i64::try_from(length).is_err() {
                        return Err("proto: negative length found during unmarshaling".into());
                    }
                    skip(&mut rest, length)?;
                }
                5 => skip(&mut rest, 4)?,
                3 | 4 => return Ok(()),
                other => return Err(format!("proto: illegal wireType {other}")),
            }
        }
        Ok(())
    })();
    walked.err()
}

/// A body's first 30 bytes in hex, ` ...` when cut (how kube-apiserver quotes a protobuf body
/// it cannot read; `<empty>` for none).
pub fn summarize(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "<empty>".into();
    }
    let hex: String = bytes.iter().take(30).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 30 {
        format!("{hex} ...")
    } else {
        hex
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_written_with_gos_plain_fields() {
        let body = encode(&json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"x\" not found", "reason": "NotFound",
            "details": {"name": "x", "kind": "configmaps"}, "code": 404
        }))
        .expect("a Status has messages");
        assert_eq!(&body[..4], b"k8s\0");
        let unknown = Unknown::decode(&body[4..]).expect("an envelope");
        assert_eq!(unknown.content_type.as_deref(), Some(""));
        let status = meta::Status::decode(&unknown.raw.unwrap_or_default()[..]).expect("Status");
        let details = status.details.expect("details");
        assert_eq!(details.group.as_deref(), Some(""));
        assert_eq!(details.retry_after_seconds, Some(0));
        assert_eq!(
            status.metadata.and_then(|m| m.r#continue).as_deref(),
            Some("")
        );
        assert_eq!(status.code, Some(404));
        // No details in the JSON: none in the message (406, recording 20g step 10).
        let bare = status_of(&json!({"kind": "Status", "apiVersion": "v1", "code": 406}));
        assert!(bare.details.is_none());
        assert_eq!(bare.reason.as_deref(), Some(""));
    }

    fn status_of(value: &Value) -> meta::Status {
        status(value)
    }

    #[test]
    fn object_meta_writes_empty_plain_fields_and_whole_seconds() {
        let m = object_meta(Some(&json!({
            "name": "a", "creationTimestamp": "2026-11-26T07:54:36Z",
            "managedFields": [{"manager": "m", "operation": "Update", "time": "2026-11-26T07:54:36Z",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}}}}]
        })));
        assert_eq!(m.namespace.as_deref(), Some(""));
        assert_eq!(m.generation, Some(0));
        assert_eq!(m.creation_timestamp.and_then(|t| t.nanos), Some(0));
        assert!(m.deletion_timestamp.is_none());
        let entry = &m.managed_fields[0];
        assert_eq!(entry.subresource.as_deref(), Some(""));
        assert_eq!(
            entry.fields_v1.as_ref().and_then(|f| f.raw.clone()),
            Some(br#"{"f:data":{".":{}}}"#.to_vec())
        );
        // A bookmark's metadata: the zero time is an empty message.
        let bookmark = object_meta(Some(&json!({"resourceVersion": "7"})));
        assert_eq!(bookmark.creation_timestamp, Some(meta::Time::default()));
    }

    #[test]
    fn a_config_map_round_trips_and_bad_bodies_read_as_go_reads_them() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "demo", "labels": {"x": "y"}},
            "data": {"k": "v"}, "binaryData": {"b": "AAE="}});
        let bytes = encode(&cm).expect("a ConfigMap has messages");
        let envelope = open(&bytes).expect("opens");
        assert_eq!(
            (envelope.api_version.as_str(), envelope.kind.as_str()),
            ("v1", "ConfigMap")
        );
        assert_eq!(config_map_json(&envelope.raw).expect("decodes"), cm);

        assert!(matches!(open(b""), Err(m) if m == "empty data"));
        assert!(matches!(open(b"k8s\0"), Err(m) if m == "empty body"));
        assert!(matches!(open(b"{}"), Err(m) if m.starts_with("provided data")));
        let cut = &bytes[..bytes.len() / 2];
        assert!(matches!(open(cut), Err(m) if m == "unexpected EOF"));
        let mut negative = b"k8s\0".to_vec();
        negative.push(0x12);
        negative.extend([0xff; 9]);
        negative.extend([0x01, 0x0a]);
        assert!(matches!(open(&negative), Err(m) if m.starts_with("proto: negative length")));
        assert_eq!(summarize(&[0x6b; 31]).len(), 64);
    }
}
