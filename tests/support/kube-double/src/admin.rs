//! `/_double/...`: the test-only control surface for a double running as its own process
//! (benchmarks read counters and read-backs here). kube-apiserver has no such paths; nothing
//! under them is counted or faulted.
//!
//! | request | effect |
//! |---|---|
//! | `GET /_double/counters` | counters (JSON) |
//! | `POST /_double/counters/reset` | zero the counters |
//! | `GET /_double/lists` | the LIST log |
//! | `POST /_double/compact` | compact at the current revision |
//! | `GET /_double/stored/<resource>/<namespace>/<name>` (or `<resource>/<name>`) | read-back |
//! | `GET /_double/encodings/<resource>` | object counts per (encoding, key) |
//! | `POST /_double/storage-version/<resource>/<version>` | move a storage version |
//! | `POST /_double/encryption-key/<resource>/<key or identity>` | rotate the write key |
//! | `POST /_double/faults` (body: a `--fault` spec) / `DELETE /_double/faults` | faults |

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::engine::Engine;
use crate::faults::FaultRule;
use crate::http::{Body, Query, json_response, plain_not_found};
use crate::resources::GroupResource;
use crate::status::StatusError;

pub fn handle(
    engine: &Engine,
    method: &Method,
    segments: &[String],
    _query: &Query,
    body: &Bytes,
) -> Response<Body> {
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let result: Result<Value, StatusError> = match (method, segs.as_slice()) {
        (&Method::GET, ["counters"]) => {
            Ok(serde_json::to_value(engine.metrics.snapshot()).unwrap_or_default())
        }
        (&Method::POST, ["counters", "reset"]) => {
            engine.metrics.reset();
            Ok(json!({}))
        }
        (&Method::GET, ["lists"]) => {
            Ok(serde_json::to_value(engine.metrics.lists()).unwrap_or_default())
        }
        (&Method::POST, ["compact"]) => {
            Ok(json!({"compacted": engine.store.compact(engine.store.revision())}))
        }
        (&Method::GET, ["stored", resource, rest @ ..]) if !rest.is_empty() && rest.len() <= 2 => {
            let (ns, name) = match rest {
                [ns, name] => (Some(*ns), *name),
                [name] => (None, *name),
                _ => (None, ""),
            };
            match engine.stored(&GroupResource::parse(resource), ns, name) {
                Some(info) => Ok(json!({
                    "encoding": info.encoding,
                    "key": info.key,
                    "modRevision": info.mod_revision,
                    "value": String::from_utf8_lossy(&info.bytes),
                })),
                None => Err(StatusError::not_found_in("", resource, name)),
            }
        }
        (&Method::GET, ["encodings", resource]) => {
            let summary = engine.stored_summary(&GroupResource::parse(resource));
            Ok(Value::Array(
                summary
                    .into_iter()
                    .map(|((encoding, key), count)| json!({"encoding": encoding, "key": key, "count": count}))
                    .collect(),
            ))
        }
        (&Method::POST, ["storage-version", resource, version]) => engine
            .set_storage_version(&GroupResource::parse(resource), version)
            .map(|_| json!({})),
        (&Method::POST, ["encryption-key", resource, key]) => {
            let key = (*key != "identity").then_some(*key);
            engine
                .set_encryption_key(&GroupResource::parse(resource), key)
                .map(|_| json!({}))
        }
        (&Method::POST, ["faults"]) => String::from_utf8_lossy(body)
            .trim()
            .parse::<FaultRule>()
            .map(|rule| json!({"id": engine.faults.add(rule)}))
            .map_err(StatusError::bad_request),
        (&Method::DELETE, ["faults"]) => {
            engine.faults.clear();
            Ok(json!({}))
        }
        _ => return plain_not_found(),
    };
    match result {
        Ok(v) => json_response(StatusCode::OK, &v, false),
        Err(e) => crate::http::status_response(&e, false),
    }
}
