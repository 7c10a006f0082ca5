//! Protobuf bodies (`application/vnd.kubernetes.protobuf`) opened and flattened to their
//! fields, so two servers' answers can be compared field by field: the recordings' (the real
//! kube-apiserver, tests/fixtures/recordings/20*) and ours or the double's.
//!
//! A body is `k8s\0` and a runtime.Unknown envelope ([`open`]); a watch stream is 4-byte
//! big-endian lengths, each followed by a bare metav1.WatchEvent ([`frames`]). A message is
//! decoded with k8s-pb's types and flattened ([`fields`]) to one `path = value` line per field
//! *present on the wire* (`metadata.name = "x"`, `metadata.creationTimestamp = {}`): Go writes
//! every non-pointer field even when empty, so which fields are present is part of what is
//! compared. Bytes the k8s-pb type does not account for (an unknown field) show as
//! `<unknown fields>`.
//!
//! Values that differ between servers by nature are masked before the comparison
//! ([`Masking::mask`]): uids and resourceVersions are bound (a recorded uid stands for one of
//! ours throughout), continue tokens and server-chosen times become placeholders.

use std::collections::BTreeMap;

use k8s_pb::api::core::v1 as core;
use k8s_pb::api::storagemigration::v1beta1 as svm;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;

pub const MAGIC: &[u8; 4] = b"k8s\0";
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// A protobuf body's envelope, opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    pub api_version: String,
    pub kind: String,
    /// runtime.Unknown's contentEncoding and contentType: Go writes both, empty.
    pub content_encoding: Option<String>,
    pub content_type: Option<String>,
    pub raw: Vec<u8>,
}

/// Opens a whole protobuf body: the magic, then the runtime.Unknown envelope.
pub fn open(bytes: &[u8]) -> Result<Body, String> {
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| format!("no k8s\\0 magic: {}", hex(bytes, 16)))?;
    let unknown = Unknown::decode(rest).map_err(|e| format!("not a runtime.Unknown: {e}"))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    Ok(Body {
        api_version: type_meta.api_version.unwrap_or_default(),
        kind: type_meta.kind.unwrap_or_default(),
        content_encoding: unknown.content_encoding,
        content_type: unknown.content_type,
        raw: unknown.raw.unwrap_or_default(),
    })
}

/// A whole protobuf body around `raw`, as Go writes it (contentEncoding and contentType
/// present and empty).
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

/// The frames of a protobuf watch stream (each a bare WatchEvent message, prefix removed).
pub fn frames(stream: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut rest = stream;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let Some((prefix, tail)) = rest.split_first_chunk::<4>() else {
            return Err(format!("{} bytes after the last frame", rest.len()));
        };
        let length = u32::from_be_bytes(*prefix) as usize;
        if tail.len() < length {
            return Err(format!(
                "a frame of {length} bytes cut after {} (frame {})",
                tail.len(),
                out.len() + 1
            ));
        }
        let (frame, tail) = tail.split_at(length);
        out.push(frame.to_vec());
        rest = tail;
    }
    Ok(out)
}

/// `path = value` for every field present on the wire.
pub type Fields = BTreeMap<String, String>;

/// The fields of a whole body: the envelope's (`envelope.apiVersion`, ...) and its message's.
pub fn body_fields(bytes: &[u8]) -> Result<Fields, String> {
    let body = open(bytes)?;
    let mut flat = Flat::default();
    flat.envelope("envelope", &body);
    flat.message("", &body.kind, &body.raw)?;
    Ok(flat.out)
}

/// The fields of one watch frame: `type`, the object's envelope (`object.envelope.kind`, ...)
/// and message (`object.metadata.name`, ...).
pub fn frame_fields(frame: &[u8]) -> Result<Fields, String> {
    let event = meta::WatchEvent::decode(frame).map_err(|e| format!("not a WatchEvent: {e}"))?;
    let mut flat = Flat::default();
    flat.unknown_bytes("", frame.len(), event.encoded_len());
    flat.s("type", &event.r#type);
    let Some(object) = event.object else {
        return Ok(flat.out);
    };
    flat.present("object");
    let Some(raw) = object.raw else {
        return Ok(flat.out);
    };
    let body = open(&raw)?;
    flat.envelope("object.envelope", &body);
    flat.message("object.", &body.kind, &body.raw)?;
    Ok(flat.out)
}

/// The fields of a message of `kind` (the envelope's kind).
pub fn fields(kind: &str, raw: &[u8]) -> Result<Fields, String> {
    let mut flat = Flat::default();
    flat.message("", kind, raw)?;
    Ok(flat.out)
}

fn hex(bytes: &[u8], at_most: usize) -> String {
    bytes
        .iter()
        .take(at_most)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Default)]
struct Flat {
    out: Fields,
}

fn decode<M: Message + Default>(what: &str, raw: &[u8]) -> Result<M, String> {
    M::decode(raw).map_err(|e| format!("not a {what}: {e}"))
}

impl Flat {
    fn put(&mut self, path: &str, value: String) {
        self.out.insert(path.to_string(), value);
    }

    fn present(&mut self, path: &str) {
        self.put(path, "{}".into());
    }

    fn s(&mut self, path: &str, value: &Option<String>) {
        if let Some(v) = value {
            self.put(path, format!("{v:?}"));
        }
    }

    fn i<T: std::fmt::Display>(&mut self, path: &str, value: Option<T>) {
        if let Some(v) = value {
            self.put(path, v.to_string());
        }
    }

    fn bytes(&mut self, path: &str, value: &Option<Vec<u8>>) {
        if let Some(v) = value {
            self.put(path, format!("{:?}", String::from_utf8_lossy(v)));
        }
    }

    fn strings(&mut self, path: &str, values: &[String]) {
        for (i, v) in values.iter().enumerate() {
            self.put(&format!("{path}[{i}]"), format!("{v:?}"));
        }
    }

    fn map(&mut self, path: &str, values: &BTreeMap<String, String>) {
        for (k, v) in values {
            self.put(&format!("{path}[{k:?}]"), format!("{v:?}"));
        }
    }

    /// Bytes on the wire that the type's fields do not account for: an unknown field (or a
    /// field encoded otherwise than prost re-encodes it).
    fn unknown_bytes(&mut self, prefix: &str, on_the_wire: usize, accounted: usize) {
        if on_the_wire != accounted {
            self.put(
                &format!("{prefix}<unknown fields>"),
                format!("{} bytes", on_the_wire as i64 - accounted as i64),
            );
        }
    }

    fn envelope(&mut self, path: &str, body: &Body) {
        self.put(
            &format!("{path}.apiVersion"),
            format!("{:?}", body.api_version),
        );
        self.put(&format!("{path}.kind"), format!("{:?}", body.kind));
        self.s(&format!("{path}.contentEncoding"), &body.content_encoding);
        self.s(&format!("{path}.contentType"), &body.content_type);
    }

    /// `prefix` is `""` or ends with `.`.
    fn message(&mut self, prefix: &str, kind: &str, raw: &[u8]) -> Result<(), String> {
        let p = |field: &str| format!("{prefix}{field}");
        let accounted = match kind {
            "StorageVersionMigration" => {
                let m: svm::StorageVersionMigration = decode(kind, raw)?;
                self.migration(prefix, &m);
                m.encoded_len()
            }
            "StorageVersionMigrationList" => {
                let m: svm::StorageVersionMigrationList = decode(kind, raw)?;
                self.list_meta(&p("metadata"), &m.metadata);
                for (i, item) in m.items.iter().enumerate() {
                    self.migration(&p(&format!("items[{i}].")), item);
                }
                m.encoded_len()
            }
            "ConfigMap" => {
                let m: core::ConfigMap = decode(kind, raw)?;
                self.config_map(prefix, &m);
                m.encoded_len()
            }
            "ConfigMapList" => {
                let m: core::ConfigMapList = decode(kind, raw)?;
                self.list_meta(&p("metadata"), &m.metadata);
                for (i, item) in m.items.iter().enumerate() {
                    self.config_map(&p(&format!("items[{i}].")), item);
                }
                m.encoded_len()
            }
            "PartialObjectMetadata" => {
                let m: meta::PartialObjectMetadata = decode(kind, raw)?;
                self.object_meta(&p("metadata"), &m.metadata);
                m.encoded_len()
            }
            "PartialObjectMetadataList" => {
                let m: meta::PartialObjectMetadataList = decode(kind, raw)?;
                self.list_meta(&p("metadata"), &m.metadata);
                for (i, item) in m.items.iter().enumerate() {
                    self.present(&p(&format!("items[{i}]")));
                    self.object_meta(&p(&format!("items[{i}].metadata")), &item.metadata);
                }
                m.encoded_len()
            }
            "Status" => {
                let m: meta::Status = decode(kind, raw)?;
                self.status(prefix, &m);
                m.encoded_len()
            }
            "DeleteOptions" => {
                let m: meta::DeleteOptions = decode(kind, raw)?;
                self.i(&p("gracePeriodSeconds"), m.grace_period_seconds);
                if let Some(pre) = &m.preconditions {
                    self.present(&p("preconditions"));
                    self.s(&p("preconditions.uid"), &pre.uid);
                    self.s(&p("preconditions.resourceVersion"), &pre.resource_version);
                }
                self.i(&p("orphanDependents"), m.orphan_dependents);
                self.s(&p("propagationPolicy"), &m.propagation_policy);
                self.strings(&p("dryRun"), &m.dry_run);
                m.encoded_len()
            }
            other => return Err(format!("no flattening for a {other} message")),
        };
        self.unknown_bytes(prefix, raw.len(), accounted);
        Ok(())
    }

    fn time(&mut self, path: &str, time: &Option<meta::Time>) {
        if let Some(t) = time {
            self.present(path);
            self.i(&format!("{path}.seconds"), t.seconds);
            self.i(&format!("{path}.nanos"), t.nanos);
        }
    }

    fn object_meta(&mut self, path: &str, meta: &Option<meta::ObjectMeta>) {
        let Some(m) = meta else { return };
        self.present(path);
        let p = |field: &str| format!("{path}.{field}");
        self.s(&p("name"), &m.name);
        self.s(&p("generateName"), &m.generate_name);
        self.s(&p("namespace"), &m.namespace);
        self.s(&p("selfLink"), &m.self_link);
        self.s(&p("uid"), &m.uid);
        self.s(&p("resourceVersion"), &m.resource_version);
        self.i(&p("generation"), m.generation);
        self.time(&p("creationTimestamp"), &m.creation_timestamp);
        self.time(&p("deletionTimestamp"), &m.deletion_timestamp);
        self.i(
            &p("deletionGracePeriodSeconds"),
            m.deletion_grace_period_seconds,
        );
        self.map(&p("labels"), &m.labels);
        self.map(&p("annotations"), &m.annotations);
        for (i, owner) in m.owner_references.iter().enumerate() {
            let o = |field: &str| format!("{path}.ownerReferences[{i}].{field}");
            self.s(&o("apiVersion"), &owner.api_version);
            self.s(&o("kind"), &owner.kind);
            self.s(&o("name"), &owner.name);
            self.s(&o("uid"), &owner.uid);
            self.i(&o("controller"), owner.controller);
            self.i(&o("blockOwnerDeletion"), owner.block_owner_deletion);
        }
        self.strings(&p("finalizers"), &m.finalizers);
        for (i, entry) in m.managed_fields.iter().enumerate() {
            let e = |field: &str| format!("{path}.managedFields[{i}].{field}");
            self.s(&e("manager"), &entry.manager);
            self.s(&e("operation"), &entry.operation);
            self.s(&e("apiVersion"), &entry.api_version);
            self.time(&e("time"), &entry.time);
            self.s(&e("fieldsType"), &entry.fields_type);
            if let Some(fields) = &entry.fields_v1 {
                self.present(&e("fieldsV1"));
                self.bytes(&e("fieldsV1.raw"), &fields.raw);
            }
            self.s(&e("subresource"), &entry.subresource);
        }
    }

    fn list_meta(&mut self, path: &str, meta: &Option<meta::ListMeta>) {
        let Some(m) = meta else { return };
        self.present(path);
        self.s(&format!("{path}.selfLink"), &m.self_link);
        self.s(&format!("{path}.resourceVersion"), &m.resource_version);
        self.s(&format!("{path}.continue"), &m.r#continue);
        self.i(
            &format!("{path}.remainingItemCount"),
            m.remaining_item_count,
        );
    }

    fn migration(&mut self, prefix: &str, m: &svm::StorageVersionMigration) {
        let p = |field: &str| format!("{prefix}{field}");
        self.object_meta(&p("metadata"), &m.metadata);
        if let Some(spec) = &m.spec {
            self.present(&p("spec"));
            if let Some(resource) = &spec.resource {
                self.present(&p("spec.resource"));
                self.s(&p("spec.resource.group"), &resource.group);
                self.s(&p("spec.resource.resource"), &resource.resource);
            }
        }
        if let Some(status) = &m.status {
            self.present(&p("status"));
            for (i, c) in status.conditions.iter().enumerate() {
                let c_ = |field: &str| p(&format!("status.conditions[{i}].{field}"));
                self.s(&c_("type"), &c.r#type);
                self.s(&c_("status"), &c.status);
                self.i(&c_("observedGeneration"), c.observed_generation);
                self.time(&c_("lastTransitionTime"), &c.last_transition_time);
                self.s(&c_("reason"), &c.reason);
                self.s(&c_("message"), &c.message);
            }
            self.s(&p("status.resourceVersion"), &status.resource_version);
        }
    }

    fn config_map(&mut self, prefix: &str, m: &core::ConfigMap) {
        let p = |field: &str| format!("{prefix}{field}");
        self.object_meta(&p("metadata"), &m.metadata);
        self.i(&p("immutable"), m.immutable);
        self.map(&p("data"), &m.data);
        for (k, v) in &m.binary_data {
            self.put(&p(&format!("binaryData[{k:?}]")), hex(v, usize::MAX));
        }
    }

    fn status(&mut self, prefix: &str, m: &meta::Status) {
        let p = |field: &str| format!("{prefix}{field}");
        self.list_meta(&p("metadata"), &m.metadata);
        self.s(&p("status"), &m.status);
        self.s(&p("message"), &m.message);
        self.s(&p("reason"), &m.reason);
        if let Some(d) = &m.details {
            self.present(&p("details"));
            self.s(&p("details.name"), &d.name);
            self.s(&p("details.group"), &d.group);
            self.s(&p("details.kind"), &d.kind);
            self.s(&p("details.uid"), &d.uid);
            for (i, cause) in d.causes.iter().enumerate() {
                let c = |field: &str| p(&format!("details.causes[{i}].{field}"));
                self.s(&c("reason"), &cause.reason);
                self.s(&c("message"), &cause.message);
                self.s(&c("field"), &cause.field);
            }
            self.i(&p("details.retryAfterSeconds"), d.retry_after_seconds);
        }
        self.i(&p("code"), m.code);
    }
}

/// One field that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub path: String,
    pub text: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Every field of `real` missing from `ours` or different there, and every field of `ours`
/// the real answer does not have.
pub fn compare(real: &Fields, ours: &Fields) -> Vec<Difference> {
    let mut out = Vec::new();
    for (path, theirs) in real {
        match ours.get(path) {
            None => out.push(Difference {
                path: path.clone(),
                text: format!("{path}: absent (real: {theirs})"),
            }),
            Some(mine) if mine != theirs => out.push(Difference {
                path: path.clone(),
                text: format!("{path}: {mine} (real: {theirs})"),
            }),
            Some(_) => {}
        }
    }
    for (path, mine) in ours {
        if !real.contains_key(path) {
            out.push(Difference {
                path: path.clone(),
                text: format!("{path}: {mine}, not in the real answer"),
            });
        }
    }
    out
}

/// Whether a frame is a progress BOOKMARK (not the one that ends a watch-list's initial
/// events, annotated `k8s.io/initial-events-end`).
pub fn is_progress_bookmark(frame: &Fields) -> bool {
    frame.get("type").map(String::as_str) == Some("\"BOOKMARK\"")
        && !frame.contains_key("object.metadata.annotations[\"k8s.io/initial-events-end\"]")
}

/// What every BOOKMARK frame has whatever its kind: the event type, the envelope's empty
/// fields, and an ObjectMeta that holds only a resourceVersion (Go's other plain fields
/// empty, an empty creationTimestamp: recording 20b).
fn bookmark_shape(frame: &Fields) -> Fields {
    frame
        .iter()
        .filter(|(path, _)| {
            [
                "type",
                "object",
                "object.envelope.contentEncoding",
                "object.envelope.contentType",
            ]
            .contains(&path.as_str())
                || path.starts_with("object.metadata")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Two watch streams, frame by frame. Progress BOOKMARKs come at each server's own pace
/// (kube-apiserver's about once a minute and 2 s before `timeoutSeconds`, when the watch
/// cache's timer allows; ours at `--watch-bookmark-interval`, the double's at the close), so
/// they are set aside: the other frames are compared in order, and each progress bookmark of
/// ours is held to the shape of `bookmark`, a real one (of any kind), and must name the
/// stream's kind.
pub fn compare_streams(
    real: &[u8],
    ours: &[u8],
    masking: &mut Masking,
    bookmark: &Fields,
) -> Vec<Difference> {
    let difference = |path: &str, text: String| Difference {
        path: path.into(),
        text,
    };
    let parse = |stream: &[u8]| -> Result<Vec<Fields>, String> {
        frames(stream)?
            .iter()
            .map(|frame| frame_fields(frame))
            .collect()
    };
    let real = parse(real).expect("the recorded stream");
    let ours = match parse(ours) {
        Ok(frames) => frames,
        Err(err) => return vec![difference("<frames>", format!("our stream: {err}"))],
    };
    // The stream's kind: its first event's that is not an ERROR.
    let expected_kind = real
        .iter()
        .find(|f| f.get("type").map(String::as_str) != Some("\"ERROR\""))
        .map(|f| {
            (
                f.get("object.envelope.apiVersion").cloned(),
                f.get("object.envelope.kind").cloned(),
            )
        });
    let (real_events, real_bookmarks): (Vec<Fields>, Vec<Fields>) =
        real.into_iter().partition(|f| !is_progress_bookmark(f));
    let (our_events, our_bookmarks): (Vec<_>, Vec<_>) =
        ours.into_iter().partition(|f| !is_progress_bookmark(f));
    let mut out = Vec::new();
    if real_events.len() != our_events.len() {
        out.push(difference(
            "<frames>",
            format!(
                "{} frames besides progress bookmarks (real: {})",
                our_events.len(),
                real_events.len()
            ),
        ));
    }
    for (i, (mut theirs, mut mine)) in real_events.into_iter().zip(our_events).enumerate() {
        let mut found = masking.mask(&mut theirs, &mut mine);
        found.extend(compare(&theirs, &mine));
        out.extend(found.into_iter().map(|d| Difference {
            path: format!("frame[{i}].{}", d.path),
            text: format!("frame {}: {}", i + 1, d.text),
        }));
    }
    for (i, mine) in our_bookmarks.iter().enumerate() {
        let mut theirs = bookmark_shape(bookmark);
        let mut shape = bookmark_shape(mine);
        let mut found = masking.mask(&mut theirs, &mut shape);
        found.extend(compare(&theirs, &shape));
        let named = (
            mine.get("object.envelope.apiVersion").cloned(),
            mine.get("object.envelope.kind").cloned(),
        );
        if let Some(expected) = &expected_kind
            && *expected != named
        {
            found.push(difference(
                "object.envelope.kind",
                format!("{named:?} (the stream's: {expected:?})"),
            ));
        }
        out.extend(found.into_iter().map(|d| Difference {
            path: format!("bookmark[{i}].{}", d.path),
            text: format!("progress bookmark {}: {}", i + 1, d.text),
        }));
    }
    // A client resumes from the last resourceVersion it saw, a bookmark's too: the last
    // bookmarks of the two streams stand for each other.
    let rv = |frame: Option<&Fields>| {
        frame
            .and_then(|f| f.get("object.metadata.resourceVersion"))
            .map(|v| unquote(v))
            .filter(|v| !v.is_empty())
    };
    if let (Some(theirs), Some(mine)) = (rv(real_bookmarks.last()), rv(our_bookmarks.last())) {
        masking.bound.insert(theirs, mine);
    }
    out
}

/// Values that differ between two servers by nature, masked on both sides before a
/// comparison: each recorded uid or resourceVersion is bound to ours at the same place (and
/// must stay bound to it), continue tokens and server-chosen times (creationTimestamp, a
/// managedFields entry's time) become placeholders. Zero, empty and absent values are kept as
/// they are: their presence is compared.
#[derive(Debug, Default)]
pub struct Masking {
    /// A recorded uid or resourceVersion -> ours.
    pub bound: BTreeMap<String, String>,
}

impl Masking {
    /// Masks both sides; a uid bound otherwise than before (a recorded uid that stood for
    /// another of ours, or ours for another recorded one) is a difference.
    pub fn mask(&mut self, real: &mut Fields, ours: &mut Fields) -> Vec<Difference> {
        let mut out = Vec::new();
        let paths: std::collections::BTreeSet<String> =
            real.keys().chain(ours.keys()).cloned().collect();
        for path in paths {
            let last = path.rsplit('.').next().unwrap_or(&path);
            if last == "message" {
                for side in [&mut *real, &mut *ours] {
                    if let Some(value) = side.get_mut(&path) {
                        *value = mask_message(value);
                    }
                }
                continue;
            }
            let placeholder = match last {
                "uid" | "resourceVersion" | "continue" => "<bound>",
                "seconds"
                    if path.contains("creationTimestamp.")
                        || path.contains("deletionTimestamp.")
                        || (path.contains("managedFields[") && path.ends_with(".time.seconds")) =>
                {
                    "<time>"
                }
                _ => continue,
            };
            let empty = |v: &String| v == "\"\"" || v == "0";
            if placeholder == "<bound>"
                && let (Some(theirs), Some(mine)) = (real.get(&path), ours.get(&path))
                && !empty(theirs)
                && !empty(mine)
            {
                let (theirs, mine) = (unquote(theirs), unquote(mine));
                if last == "uid" {
                    // A uid names one object on each side, throughout.
                    let other = self
                        .bound
                        .iter()
                        .find(|(r, o)| (**r == theirs) != (**o == mine));
                    if let Some((r, o)) = other {
                        out.push(Difference {
                            path: path.clone(),
                            text: format!(
                                "{path}: our {mine} for the real {theirs}, but the real {r} \
                                 stood for our {o} before"
                            ),
                        });
                    }
                }
                // A resourceVersion (or continue token) is bound to the latest of ours seen
                // for it (a list's and an object's may be one revision there and two here).
                self.bound.insert(theirs, mine);
            }
            for side in [&mut *real, &mut *ours] {
                if let Some(value) = side.get_mut(&path)
                    && !empty(value)
                {
                    *value = placeholder.to_string();
                }
            }
        }
        out
    }

    /// One answer's fields with what differs between servers by nature masked, on its own
    /// (nothing bound): for comparing two servers' answers to the same request.
    pub fn masked(mut fields: Fields) -> Fields {
        let mut twin = fields.clone();
        Masking::default().mask(&mut fields, &mut twin);
        fields
    }

    /// `text` (a path and query) with every bound recorded value replaced by ours (longest
    /// first, so a value is never replaced inside another).
    pub fn rewrite(&self, text: &str) -> String {
        let mut pairs: Vec<_> = self.bound.iter().collect();
        pairs.sort_by_key(|(r, _)| std::cmp::Reverse(r.len()));
        pairs
            .into_iter()
            .fold(text.to_string(), |acc, (r, o)| acc.replace(r.as_str(), o))
    }
}

fn unquote(value: &str) -> String {
    value.trim_matches('"').to_string()
}

/// A Status message with what differs by nature masked: numbers (resource versions) and
/// uids (as the JSON replay masks them).
fn mask_message(value: &str) -> String {
    let mut out = String::new();
    let mut token = String::new();
    for c in value.chars().chain(std::iter::once('\u{0}')) {
        if c.is_ascii_alphanumeric() || c == '-' {
            token.push(c);
            continue;
        }
        let uuid = token.len() == 36 && token.matches('-').count() == 4;
        let number = !token.is_empty() && token.chars().all(|c| c.is_ascii_digit());
        out.push_str(match (uuid, number) {
            (true, _) => "<uid>",
            (_, true) => "<n>",
            _ => &token,
        });
        token.clear();
        if c != '\u{0}' {
            out.push(c);
        }
    }
    out
}

/// The metadata of each object of ours, by name, as last answered: what a request body that
/// carries an object the real server answered with (an update of "the object of step 2")
/// must carry here instead.
#[derive(Debug, Default)]
pub struct Latest {
    metadata: BTreeMap<String, meta::ObjectMeta>,
}

impl Latest {
    /// Remembers the object of an answer of ours (a StorageVersionMigration or a ConfigMap).
    pub fn learn(&mut self, body: &[u8]) {
        let Ok(opened) = open(body) else { return };
        let metadata = match opened.kind.as_str() {
            "StorageVersionMigration" => svm::StorageVersionMigration::decode(&opened.raw[..])
                .ok()
                .and_then(|m| m.metadata),
            "ConfigMap" => core::ConfigMap::decode(&opened.raw[..])
                .ok()
                .and_then(|m| m.metadata),
            _ => None,
        };
        if let Some(metadata) = metadata
            && let Some(name) = metadata.name.clone()
        {
            self.metadata.insert(name, metadata);
        }
    }

    /// A recorded request body as it must be sent here: an object's uid and resourceVersion
    /// that the recording had seen in an answer ([`Masking`]) and its server-chosen times
    /// become ours for the object of that name; a DeleteOptions' preconditions are bound
    /// likewise. The body is encoded again only when something changed, and only when prost
    /// encodes the recorded message to the recorded bytes (so nothing else can change); any
    /// other body is sent byte for byte.
    pub fn rewrite(&self, recorded: &[u8], masking: &Masking) -> Vec<u8> {
        let Ok(opened) = open(recorded) else {
            return recorded.to_vec();
        };
        let raw = match opened.kind.as_str() {
            "StorageVersionMigration" => {
                let Ok(mut m) = svm::StorageVersionMigration::decode(&opened.raw[..]) else {
                    return recorded.to_vec();
                };
                if m.encode_to_vec() != opened.raw {
                    // Bytes prost would not write again (an unknown field): as recorded.
                    return recorded.to_vec();
                }
                let changed = m
                    .metadata
                    .as_mut()
                    .is_some_and(|meta| self.bind_metadata(meta, masking));
                changed.then(|| m.encode_to_vec())
            }
            "ConfigMap" => {
                let Ok(mut m) = core::ConfigMap::decode(&opened.raw[..]) else {
                    return recorded.to_vec();
                };
                if m.encode_to_vec() != opened.raw {
                    // Bytes prost would not write again (an unknown field): as recorded.
                    return recorded.to_vec();
                }
                let changed = m
                    .metadata
                    .as_mut()
                    .is_some_and(|meta| self.bind_metadata(meta, masking));
                changed.then(|| m.encode_to_vec())
            }
            "DeleteOptions" => {
                let Ok(mut m) = meta::DeleteOptions::decode(&opened.raw[..]) else {
                    return recorded.to_vec();
                };
                let before = m.clone();
                if let Some(pre) = m.preconditions.as_mut() {
                    for field in [&mut pre.uid, &mut pre.resource_version] {
                        if let Some(bound) = field.as_ref().and_then(|v| masking.bound.get(v)) {
                            *field = Some(bound.clone());
                        }
                    }
                }
                (m != before).then(|| m.encode_to_vec())
            }
            _ => None,
        };
        match raw {
            Some(raw) => envelope(&opened.api_version, &opened.kind, raw),
            None => recorded.to_vec(),
        }
    }

    /// Whether anything changed.
    fn bind_metadata(&self, metadata: &mut meta::ObjectMeta, masking: &Masking) -> bool {
        let before = metadata.clone();
        if let Some(uid) = metadata.uid.as_ref().and_then(|u| masking.bound.get(u)) {
            metadata.uid = Some(uid.clone());
        }
        let seen = metadata
            .resource_version
            .as_ref()
            .is_some_and(|rv| masking.bound.contains_key(rv));
        if let Some(ours) = metadata.name.as_ref().and_then(|n| self.metadata.get(n)) {
            // A resourceVersion the real server had answered with was the object's current
            // one: ours is; one it never gave (a stale "1") is sent as it is.
            if seen {
                metadata.resource_version.clone_from(&ours.resource_version);
            }
            if metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|t| t.seconds.unwrap_or(0) != 0)
            {
                metadata
                    .creation_timestamp
                    .clone_from(&ours.creation_timestamp);
            }
            for (entry, mine) in metadata.managed_fields.iter_mut().zip(&ours.managed_fields) {
                if entry.time.is_some() {
                    entry.time.clone_from(&mine.time);
                }
            }
        }
        *metadata != before
    }
}

/// A recorded answer, for [`differences`].
pub struct Recorded<'a> {
    pub code: u16,
    pub content_type: Option<&'a str>,
    /// The protobuf body (a watch: its whole stream).
    pub bytes: Option<&'a [u8]>,
    /// The recording shows an empty body.
    pub empty: bool,
}

/// Our answer's code, Content-Type and protobuf body (or stream) against the recorded one's,
/// values masked. A JSON body is not looked at (the caller compares it).
pub fn differences(
    recorded: &Recorded<'_>,
    code: u16,
    content_type: Option<&str>,
    body: &[u8],
    masking: &mut Masking,
    bookmark: &Fields,
) -> Vec<Difference> {
    let difference = |path: &str, text: String| Difference {
        path: path.into(),
        text,
    };
    if code != recorded.code {
        let shown: String = String::from_utf8_lossy(body).chars().take(300).collect();
        return vec![difference(
            "<code>",
            format!("code {code} (real: {}): {shown}", recorded.code),
        )];
    }
    if content_type != recorded.content_type {
        return vec![difference(
            "<content-type>",
            format!(
                "Content-Type {content_type:?} (real: {:?})",
                recorded.content_type
            ),
        )];
    }
    if recorded.empty && !body.is_empty() {
        return vec![difference(
            "<body>",
            format!("{} bytes (real: an empty body)", body.len()),
        )];
    }
    let Some(real) = recorded.bytes else {
        return Vec::new();
    };
    if recorded.content_type == Some(PROTOBUF_WATCH) {
        return compare_streams(real, body, masking, bookmark);
    }
    let mut theirs = body_fields(real).expect("the recorded body");
    let mut mine = match body_fields(body) {
        Ok(fields) => fields,
        Err(err) => return vec![difference("<body>", format!("our body: {err}"))],
    };
    let mut out = masking.mask(&mut theirs, &mut mine);
    out.extend(compare(&theirs, &mine));
    out
}

/// Known differences of one replay: `(where, path, why)`. `where` is an exchange id's start
/// (`"20e step 1"`, or `"20e"` for a whole file), `path` a field path's end
/// (`"metadata.generation"` matches `items[0].metadata.generation` too). Every entry must
/// still match a difference: one that matches none is reported, so a fixed difference is
/// taken off the list.
pub struct KnownDifferences {
    entries: &'static [(&'static str, &'static str, &'static str)],
    used: Vec<bool>,
}

impl KnownDifferences {
    pub fn new(entries: &'static [(&'static str, &'static str, &'static str)]) -> Self {
        Self {
            entries,
            used: vec![false; entries.len()],
        }
    }

    /// The differences at exchange `id` that no entry explains.
    pub fn unexplained(&mut self, id: &str, differences: Vec<Difference>) -> Vec<Difference> {
        differences
            .into_iter()
            .filter(|d| {
                let known = self.entries.iter().position(|(at, path, _)| {
                    id.starts_with(at) && (d.path == *path || d.path.ends_with(&format!(".{path}")))
                });
                if let Some(i) = known {
                    self.used[i] = true;
                }
                known.is_none()
            })
            .collect()
    }

    /// Entries that explained nothing.
    pub fn unused(&self) -> Vec<String> {
        self.entries
            .iter()
            .zip(&self.used)
            .filter(|(_, used)| !**used)
            .map(|((at, path, _), _)| {
                format!("{at}: {path}: now matches: take it off the known differences")
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_fields_show_presence_and_mask_what_differs_by_nature() {
        let object =
            |uid: &str, generation: Option<i64>, seconds: i64| meta::PartialObjectMetadata {
                metadata: Some(meta::ObjectMeta {
                    name: Some("a".into()),
                    namespace: Some(String::new()),
                    uid: Some(uid.into()),
                    generation,
                    creation_timestamp: Some(meta::Time {
                        seconds: Some(seconds),
                        nanos: Some(0),
                    }),
                    ..Default::default()
                }),
            };
        let body = |m: meta::PartialObjectMetadata| {
            envelope("meta.k8s.io/v1", "PartialObjectMetadata", m.encode_to_vec())
        };
        let mut real = body_fields(&body(object("u-real", Some(0), 100))).expect("real");
        let mut ours = body_fields(&body(object("u-ours", None, 200))).expect("ours");
        assert_eq!(real["metadata.namespace"], "\"\"");
        assert_eq!(real["envelope.contentType"], "\"\"");
        let mut masking = Masking::default();
        assert!(masking.mask(&mut real, &mut ours).is_empty());
        assert_eq!(masking.bound["u-real"], "u-ours");
        assert_eq!(real["metadata.creationTimestamp.seconds"], "<time>");
        let differences = compare(&real, &ours);
        assert_eq!(differences.len(), 1, "{differences:?}");
        assert_eq!(differences[0].path, "metadata.generation");
        // A recorded uid stands for one of ours throughout.
        let mut again_real = body_fields(&body(object("u-real", Some(0), 100))).expect("real");
        let mut again_ours = body_fields(&body(object("u-other", Some(0), 100))).expect("ours");
        assert_eq!(masking.mask(&mut again_real, &mut again_ours).len(), 1);

        let mut known = KnownDifferences::new(&[
            ("20x", "metadata.generation", "why"),
            ("20x step 2", "metadata.name", "why"),
        ]);
        assert!(known.unexplained("20x step 1 (t)", differences).is_empty());
        assert_eq!(known.unused().len(), 1);

        // An unknown field is seen, not skipped.
        let mut raw = object("u", None, 1).encode_to_vec();
        raw.extend([0xd2, 0x02, 0x01, b'x']);
        let flat = fields("PartialObjectMetadata", &raw).expect("decodes");
        assert_eq!(flat["<unknown fields>"], "4 bytes");

        let mut stream = Vec::new();
        for t in ["ADDED", "BOOKMARK"] {
            let frame = meta::WatchEvent {
                r#type: Some(t.into()),
                object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension {
                    raw: Some(body(object("u", None, 1))),
                }),
            }
            .encode_to_vec();
            stream.extend((frame.len() as u32).to_be_bytes());
            stream.extend(frame);
        }
        let frames = frames(&stream).expect("frames");
        assert_eq!(frames.len(), 2);
        let second = frame_fields(&frames[1]).expect("a frame");
        assert_eq!(second["type"], "\"BOOKMARK\"");
        assert_eq!(second["object.envelope.kind"], "\"PartialObjectMetadata\"");
        assert!(super::frames(&stream[..stream.len() - 1]).is_err());
    }
}
