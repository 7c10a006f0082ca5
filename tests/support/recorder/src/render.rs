//! The recordings' text format (tests/fixtures/recordings/README.md): JSON bodies as the
//! earlier files show them, binary bodies as a hex dump in `hexdump -C` layout followed by the
//! recorder's decoding of them (marked as not part of the wire).

use std::fmt::{Debug, Write as _};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::storagemigration::v1beta1 as svm;
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;

use crate::http::Exchange;

/// Every Kubernetes protobuf envelope starts with these four bytes, then a runtime.Unknown.
pub(crate) const MAGIC: [u8; 4] = *b"k8s\0";

pub(crate) const BEGIN_DECODING: &str =
    "[recorder: decoding below, the recorder's rendering with k8s-pb, not part of the wire]";
pub(crate) const END_DECODING: &str = "[recorder: end of decoding]";

/// `bytes` in `hexdump -C` layout: an 8-digit hex offset (counted from `base`), two spaces, 16
/// bytes in hex (an extra space after the eighth), two spaces, the bytes as ASCII between `|`
/// (`.` for anything not printable). No closing offset line.
pub(crate) fn hexdump(bytes: &[u8], base: usize) -> String {
    let mut out = String::new();
    for (i, line) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{:08x}  ", base + i * 16);
        for j in 0..16 {
            match line.get(j) {
                Some(b) => {
                    let _ = write!(out, "{b:02x} ");
                }
                None => out.push_str("   "),
            }
            if j == 7 {
                out.push(' ');
            }
        }
        out.push_str(" |");
        out.extend(line.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out.push_str("|\n");
    }
    out
}

/// The envelope of a Kubernetes protobuf body: magic, then runtime.Unknown.
pub(crate) fn encode_envelope<M: Message>(api_version: &str, kind: &str, message: &M) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        // client-go's generated marshalling always writes these two, empty.
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The runtime.Unknown of an envelope.
pub(crate) fn decode_unknown(bytes: &[u8]) -> Result<Unknown> {
    let rest = bytes
        .strip_prefix(&MAGIC)
        .context("no k8s\\0 magic at the start")?;
    Unknown::decode(rest).context("runtime.Unknown")
}

/// The message inside an envelope.
pub(crate) fn decode_envelope<M: Message + Default>(bytes: &[u8]) -> Result<M> {
    let unknown = decode_unknown(bytes)?;
    M::decode(unknown.raw.unwrap_or_default().as_slice()).context("the envelope's raw message")
}

/// The recorder's rendering of a protobuf body (no hex): the envelope's fields and the message
/// decoded by its kind.
pub(crate) fn describe_envelope(bytes: &[u8]) -> String {
    let Some(rest) = bytes.strip_prefix(&MAGIC) else {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return format!(
            "no k8s\\0 magic (the first bytes are {}): not a Kubernetes protobuf envelope\n",
            head.join(" ")
        );
    };
    let unknown = match Unknown::decode(rest) {
        Ok(unknown) => unknown,
        Err(e) => {
            return format!(
                "magic 6b 38 73 00 (\"k8s\\0\"), then {} bytes that do not decode as runtime.Unknown: {e}\n",
                rest.len()
            );
        }
    };
    let type_meta = unknown.type_meta.clone().unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.clone().unwrap_or_default();
    let mut out = format!(
        "magic 6b 38 73 00 (\"k8s\\0\"), then runtime.Unknown ({} bytes):\n  typeMeta.apiVersion: {:?}\n  typeMeta.kind: {:?}\n  raw: {} bytes (below)\n  contentEncoding: {}\n  contentType: {}\n",
        rest.len(),
        api_version,
        kind,
        raw.len(),
        present(&unknown.content_encoding),
        present(&unknown.content_type),
    );
    out.push_str(&describe_message(&api_version, &kind, &raw));
    out
}

fn present(field: &Option<String>) -> String {
    match field {
        Some(value) => format!("{value:?}"),
        None => "(absent)".into(),
    }
}

/// A message of this kind decoded and shown with `{:#?}` (byte fields shown as `b"..."`).
pub(crate) fn describe_message(api_version: &str, kind: &str, raw: &[u8]) -> String {
    fn show<M: Message + Default + Debug + 'static>(name: &str, raw: &[u8]) -> String {
        match M::decode(raw) {
            Ok(message) => {
                let mut text = format!("{name} ");
                text.push_str(&compact_bytes(&format!("{message:#?}")));
                text.push('\n');
                if let Some(events) = watch_event_object(&message) {
                    text.push_str(&events);
                }
                text
            }
            Err(e) => format!("{name}: does not decode: {e}\n"),
        }
    }
    match (api_version, kind) {
        (_, "ConfigMap") => show::<core::ConfigMap>("core::v1::ConfigMap", raw),
        (_, "ConfigMapList") => show::<core::ConfigMapList>("core::v1::ConfigMapList", raw),
        (_, "Secret") => show::<core::Secret>("core::v1::Secret", raw),
        (_, "Namespace") => show::<core::Namespace>("core::v1::Namespace", raw),
        (_, "Status") => show::<meta::Status>("meta::v1::Status", raw),
        (_, "DeleteOptions") => show::<meta::DeleteOptions>("meta::v1::DeleteOptions", raw),
        (_, "PartialObjectMetadata") => {
            show::<meta::PartialObjectMetadata>("meta::v1::PartialObjectMetadata", raw)
        }
        (_, "PartialObjectMetadataList") => {
            show::<meta::PartialObjectMetadataList>("meta::v1::PartialObjectMetadataList", raw)
        }
        (_, "WatchEvent") => show::<meta::WatchEvent>("meta::v1::WatchEvent", raw),
        ("storagemigration.k8s.io/v1beta1", "StorageVersionMigration") => {
            show::<svm::StorageVersionMigration>(
                "storagemigration::v1beta1::StorageVersionMigration",
                raw,
            )
        }
        ("storagemigration.k8s.io/v1beta1", "StorageVersionMigrationList") => {
            show::<svm::StorageVersionMigrationList>(
                "storagemigration::v1beta1::StorageVersionMigrationList",
                raw,
            )
        }
        (_, "CustomResourceDefinition") => show::<apiextensions::CustomResourceDefinition>(
            "apiextensions::v1::CustomResourceDefinition",
            raw,
        ),
        _ => format!(
            "(no k8s-pb type for {api_version:?} {kind:?} here; the raw bytes as text: {})\n",
            escape(raw)
        ),
    }
}

/// For a WatchEvent, its embedded object rendered too.
fn watch_event_object<M: Debug + 'static>(message: &M) -> Option<String> {
    let event = (message as &dyn std::any::Any).downcast_ref::<meta::WatchEvent>()?;
    let raw = event.object.as_ref()?.raw.as_ref()?;
    let mut out = format!("object.raw ({} bytes) decoded:\n", raw.len());
    out.push_str(&indent(&describe_envelope(raw), "  "));
    Some(out)
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}\n")).collect()
}

/// `b"..."` for bytes (ASCII kept, the rest `\xNN`).
pub(crate) fn escape(bytes: &[u8]) -> String {
    let mut out = String::from("b\"");
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
    out
}

/// `{:#?}` prints a `Vec<u8>` one number a line; this folds each such list into `b"..."`.
fn compact_bytes(debug: &str) -> String {
    let lines: Vec<&str> = debug.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(head) = line.strip_suffix('[') {
            let mut bytes = Vec::new();
            let mut j = i + 1;
            while let Some(b) = lines
                .get(j)
                .and_then(|l| l.trim().strip_suffix(','))
                .and_then(|n| n.parse::<u8>().ok())
            {
                bytes.push(b);
                j += 1;
            }
            let closing = lines.get(j).map(|l| l.trim());
            if !bytes.is_empty()
                && let Some(close) = closing.filter(|c| c.starts_with(']'))
            {
                let _ = writeln!(out, "{head}{}{}", escape(&bytes), &close[1..]);
                i = j + 1;
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
        i += 1;
    }
    compact_scalars(out.trim_end())
}

/// `{:#?}` prints `Some(\n    "x",\n)` on three lines; this puts a scalar inside `Some(...)`
/// on one.
fn compact_scalars(debug: &str) -> String {
    let lines: Vec<&str> = debug.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.ends_with("Some(")
            && let (Some(value), Some(close)) = (lines.get(i + 1), lines.get(i + 2))
            && let Some(value) = value.trim().strip_suffix(',')
            && !value.ends_with(['{', '[', '('])
            && close.trim().starts_with(')')
        {
            let _ = writeln!(out, "{line}{value}{}", close.trim());
            i += 3;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        i += 1;
    }
    out.trim_end().to_string()
}

/// A protobuf body: the size line, the hex dump, the decoding.
pub(crate) fn protobuf_body(bytes: &[u8]) -> String {
    let mut out = format!("(raw body: {} bytes, protobuf; hex dump)\n", bytes.len());
    out.push_str(&hexdump(bytes, 0));
    out.push_str(BEGIN_DECODING);
    out.push('\n');
    out.push_str(&describe_envelope(bytes));
    out.push_str(END_DECODING);
    out.push('\n');
    out
}

/// A protobuf watch stream: each frame (a 4-byte big-endian length, then that many bytes) on
/// its own, with its decoding.
pub(crate) fn protobuf_stream(bytes: &[u8]) -> String {
    let frames = split_frames(bytes);
    let mut out = format!(
        "(raw body: {} bytes, protobuf watch stream of {} length-prefixed frame{}; hex dump per frame, offsets from the start of the body)\n",
        bytes.len(),
        frames.len(),
        if frames.len() == 1 { "" } else { "s" }
    );
    for (n, frame) in frames.iter().enumerate() {
        let payload = frame.payload;
        let _ = writeln!(
            out,
            "[recorder: frame {} at offset {}: length prefix {} = {} bytes, then the WatchEvent{}]",
            n + 1,
            frame.offset,
            bytes[frame.offset..frame.offset + 4.min(bytes.len() - frame.offset)]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" "),
            frame.declared,
            if frame.declared == payload.len() {
                String::new()
            } else {
                format!(" (only {} bytes came)", payload.len())
            }
        );
        out.push_str(&hexdump(
            &bytes[frame.offset..frame.offset + 4 + payload.len()],
            frame.offset,
        ));
        out.push_str(BEGIN_DECODING);
        out.push('\n');
        if payload.starts_with(&MAGIC) {
            out.push_str(&describe_envelope(payload));
        } else {
            out.push_str("no k8s\\0 magic: the frame is a bare WatchEvent message\n");
            out.push_str(&describe_message("meta.k8s.io/v1", "WatchEvent", payload));
        }
        out.push_str(END_DECODING);
        out.push('\n');
    }
    out
}

pub(crate) struct Frame<'a> {
    pub offset: usize,
    pub declared: usize,
    pub payload: &'a [u8],
}

pub(crate) fn split_frames(bytes: &[u8]) -> Vec<Frame<'_>> {
    let mut frames = Vec::new();
    let mut offset = 0;
    while offset + 4 <= bytes.len() {
        let mut length = [0u8; 4];
        length.copy_from_slice(&bytes[offset..offset + 4]);
        let declared = u32::from_be_bytes(length) as usize;
        let end = (offset + 4 + declared).min(bytes.len());
        frames.push(Frame {
            offset,
            declared,
            payload: &bytes[offset + 4..end],
        });
        offset = end;
    }
    frames
}

/// The frames' WatchEvents (the bare message of each frame).
pub(crate) fn watch_events(bytes: &[u8]) -> Vec<meta::WatchEvent> {
    split_frames(bytes)
        .iter()
        .filter_map(|f| meta::WatchEvent::decode(f.payload).ok())
        .collect()
}

/// Any other body, as the earlier recordings show it.
fn text_body(bytes: &[u8], content_type: &str) -> String {
    if bytes.is_empty() {
        return "(empty body)\n".into();
    }
    let ends = if bytes.ends_with(b"\n") {
        "ends with \"\\n\""
    } else {
        "no final \"\\n\""
    };
    let Ok(text) = std::str::from_utf8(bytes) else {
        let mut out = format!("(raw body: {} bytes, binary; hex dump)\n", bytes.len());
        out.push_str(&hexdump(bytes, 0));
        return out;
    };
    let single = !text.trim_end().contains('\n');
    if content_type.contains("json")
        && single
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
        && let Ok(pretty) = serde_json::to_string_pretty(&value)
    {
        return format!(
            "(raw body: {} bytes, compact single-line JSON, {ends}; shown pretty-printed)\n{pretty}\n",
            bytes.len()
        );
    }
    format!("({} bytes, raw)\n{text}\n", bytes.len())
}

/// A response or request body by its Content-Type; `stream`: a watch, answered in this time.
pub(crate) fn body(bytes: &[u8], content_type: &str, stream: Option<Duration>) -> String {
    let text =
        if content_type.starts_with("application/vnd.kubernetes.protobuf") && !bytes.is_empty() {
            if stream.is_some() {
                protobuf_stream(bytes)
            } else {
                protobuf_body(bytes)
            }
        } else {
            text_body(bytes, content_type)
        };
    match stream {
        // The size line, with when the server ended the stream.
        Some(elapsed) => match text.split_once(")\n") {
            Some((line, rest)) => format!(
                "{line}; the server ended the stream {:.1} s after the request)\n{rest}",
                elapsed.as_secs_f64()
            ),
            None => text,
        },
        None => text,
    }
}

/// One recording file being written.
pub(crate) struct Recording {
    file: String,
    text: String,
    steps: usize,
}

impl Recording {
    pub(crate) fn new(file: &str, description: &str) -> Recording {
        Recording {
            file: file.into(),
            text: format!("{description}\n"),
            steps: 0,
        }
    }

    /// A step: the request as written, the response as received (Audit-Id left out).
    pub(crate) fn step(&mut self, title: &str, exchange: &Exchange) {
        self.steps += 1;
        let _ = write!(
            self.text,
            "\n### Step {}: {title}\n--- REQUEST ---\n{}\n\n",
            self.steps, exchange.request_head
        );
        if let Some(body) = &exchange.request.body
            && !body.is_empty()
        {
            let content_type = exchange.request.content_type.as_deref().unwrap_or("");
            if content_type.starts_with("application/vnd.kubernetes.protobuf") {
                self.text.push_str(&protobuf_body(body));
            } else {
                match std::str::from_utf8(body) {
                    Ok(text) => self.text.push_str(text),
                    Err(_) => self.text.push_str(&protobuf_body(body)),
                }
                self.text.push('\n');
            }
            self.text.push('\n');
        }
        self.text.push_str("--- RESPONSE ---\n");
        self.text.push_str(&exchange.status_line);
        self.text.push('\n');
        for (name, value) in &exchange.headers {
            if !name.eq_ignore_ascii_case("Audit-Id") {
                let _ = writeln!(self.text, "{name}: {value}");
            }
        }
        self.text.push('\n');
        let stream = exchange
            .request
            .path
            .contains("watch=")
            .then_some(exchange.elapsed);
        self.text
            .push_str(&body(&exchange.body, exchange.content_type(), stream));
    }

    /// A `NOTE:` paragraph after the last step's body.
    pub(crate) fn note(&mut self, text: &str) {
        let _ = writeln!(self.text, "\nNOTE: {text}");
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(&self.file);
        std::fs::write(&path, &self.text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("recorder: wrote {} ({} steps)", path.display(), self.steps);
        Ok(())
    }
}
