//! The real kube-apiserver's exchanges in `tests/fixtures/recordings/` (format in its
//! README.md: a description line, then `### Step` sections with `--- REQUEST ---` and
//! `--- RESPONSE ---`; bodies pretty-printed, notes in `(...)`, `NOTE:` or `[recorder: ...]`).
//! Binary (protobuf) bodies are a hex dump in `hexdump -C` layout, after a size line that says
//! "hex dump", followed by the recorder's decoding between `[recorder: decoding below...]` and
//! `[recorder: end of decoding]`: [`Exchange::body_bytes`] and [`Exchange::response_bytes`]
//! hold their bytes.

use std::path::PathBuf;

use serde_json::Value;

/// One request and the real server's answer.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// `08-noop-merge-patch-rv-and-storage-reencode.txt`
    pub file: String,
    /// 1-based, in the file's order.
    pub step: usize,
    pub title: String,
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The request body as text; empty when it was binary (then see `body_bytes`).
    pub body: String,
    /// The request body's bytes when the recording shows it as a hex dump (protobuf).
    pub body_bytes: Option<Vec<u8>>,
    /// The status code; 0 when the server closed the connection without answering.
    pub code: u16,
    pub content_type: Option<String>,
    pub response_headers: Vec<(String, String)>,
    /// The body when it is one JSON value (watch streams, plain text and binary are `None`).
    pub response: Option<Value>,
    /// The response body's bytes when the recording shows it as a hex dump (protobuf; for a
    /// watch stream, every frame with its 4-byte length prefix, in order).
    pub response_bytes: Option<Vec<u8>>,
    /// The recorder elided or truncated the body: only its kind and apiVersion are whole.
    pub shortened: bool,
    /// The recording shows the body as empty (`(empty body...)`: a watch ended without a
    /// byte, a connection closed unanswered).
    pub empty_body: bool,
}

impl Exchange {
    pub fn response_header(&self, name: &str) -> Option<&str> {
        self.response_headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `08 step 2`, for messages.
    pub fn id(&self) -> String {
        let number = self.file.split('-').next().unwrap_or(&self.file);
        format!("{number} step {} ({})", self.step, self.title)
    }
}

pub fn directory() -> PathBuf {
    crate::repo_root().join("tests/fixtures/recordings")
}

/// Every recording's exchanges, files in name order.
pub fn all() -> Vec<Exchange> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(directory())
        .expect("tests/fixtures/recordings")
        .map(|entry| entry.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .to_string();
            let text = std::fs::read_to_string(path).expect("read a recording");
            parse(&name, &text)
        })
        .collect()
}

/// The exchanges of one recording.
pub fn parse(file: &str, text: &str) -> Vec<Exchange> {
    text.split("\n### ")
        .skip(1)
        .enumerate()
        .filter_map(|(i, section)| exchange(file, i + 1, section))
        .collect()
}

fn exchange(file: &str, step: usize, section: &str) -> Option<Exchange> {
    let (title, rest) = section.split_once('\n')?;
    let (_, rest) = rest.split_once("--- REQUEST ---\n")?;
    let (request, response) = rest.split_once("--- RESPONSE ---\n")?;
    let (head, body) = request.split_once("\n\n").unwrap_or((request, ""));
    let mut lines = head.lines();
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let path = request_line.next()?.to_string();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (status_head, response_body) = response.split_once("\n\n").unwrap_or((response, ""));
    let status_line = status_head.lines().next()?;
    let code = if status_line.starts_with("(no response") {
        0
    } else {
        status_line.split(' ').nth(1)?.parse().ok()?
    };
    let response_headers: Vec<(String, String)> = status_head
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let content_type = response_headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.clone());
    let body_bytes = hex_body(body);
    let response_bytes = hex_body(response_body);
    Some(Exchange {
        file: file.to_string(),
        step,
        title: title.trim().to_string(),
        method,
        path,
        headers,
        body: if body_bytes.is_some() {
            String::new()
        } else {
            request_body(body)
        },
        body_bytes,
        code,
        content_type,
        response_headers,
        response: if response_bytes.is_some() {
            None
        } else {
            first_json_value(response_body)
        },
        response_bytes,
        shortened: response_body.contains("elided") || response_body.contains("TRUNCATED"),
        empty_body: response_body.starts_with("(empty body"),
    })
}

/// The bytes of a body shown as a hex dump: its first line is the recorder's size line
/// `(raw body: N bytes, ...hex dump...)`; every line in `hexdump -C` layout after it counts,
/// in order, except inside the recorder's decodings. `None` for any other body, or when the
/// dump's offsets or size do not add up.
fn hex_body(text: &str) -> Option<Vec<u8>> {
    let first = text.lines().next()?;
    if !first.starts_with("(raw body: ") || !first.contains("hex dump") {
        return None;
    }
    let size: usize = first
        .strip_prefix("(raw body: ")?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    let mut bytes = Vec::with_capacity(size);
    let mut in_decoding = false;
    for line in text.lines().skip(1) {
        if line.starts_with("[recorder: decoding below") {
            in_decoding = true;
        } else if line.starts_with("[recorder: end of decoding]") {
            in_decoding = false;
        } else if !in_decoding && let Some((offset, line_bytes)) = hex_line(line) {
            if offset != bytes.len() {
                return None;
            }
            bytes.extend(line_bytes);
        }
    }
    (bytes.len() == size).then_some(bytes)
}

/// One `hexdump -C` line: `00000010  6b 38 73 00 ...  76 31 ...  |k8s...|` -> its offset and
/// bytes.
fn hex_line(line: &str) -> Option<(usize, Vec<u8>)> {
    let offset = line.get(..8)?;
    if !offset.bytes().all(|b| b.is_ascii_hexdigit()) || line.get(8..10)? != "  " {
        return None;
    }
    let offset = usize::from_str_radix(offset, 16).ok()?;
    let hex = line.get(10..)?.split("  |").next()?;
    let bytes = hex
        .split_whitespace()
        .map(|b| {
            (b.len() == 2)
                .then(|| u8::from_str_radix(b, 16).ok())
                .flatten()
        })
        .collect::<Option<Vec<u8>>>()?;
    (!bytes.is_empty() && bytes.len() <= 16).then_some((offset, bytes))
}

/// The request body as sent: the recorder ends it with blank lines and may add notes.
fn request_body(text: &str) -> String {
    let body: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("NOTE:") && !l.starts_with("[recorder"))
        .collect();
    body.join("\n").trim().to_string()
}

/// The body's JSON value, after the recorder's `(raw body: ...)` line; `None` for a stream of
/// several values (a watch) or text.
fn first_json_value(text: &str) -> Option<Value> {
    // The body starts on the first line that opens a value (notes before it may quote JSON).
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        if line.starts_with('{') || line.starts_with('[') {
            start = Some(offset);
            break;
        }
        offset += line.len();
    }
    let start = start?;
    let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    let first = values.next()?.ok()?;
    // A watch shows one event per line: more than one value is a stream, not a body.
    match values.next() {
        Some(Ok(_)) => None,
        _ => Some(first),
    }
}

#[cfg(test)]
mod tests {
    use k8s_pb::api::core::v1::ConfigMap;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
    use k8s_pb::apimachinery::pkg::runtime::Unknown;
    use prost::Message;

    use super::*;

    fn recording(name: &str) -> Vec<Exchange> {
        let text = std::fs::read_to_string(directory().join(name)).expect("a recording");
        parse(name, &text)
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// magic `k8s\0`, then a runtime.Unknown: its kind and message bytes.
    fn envelope(bytes: &[u8]) -> (String, Vec<u8>) {
        let rest = bytes.strip_prefix(b"k8s\0").expect("the protobuf magic");
        let unknown = Unknown::decode(rest).expect("a runtime.Unknown");
        let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
        (kind, unknown.raw.unwrap_or_default())
    }

    #[test]
    fn recordings_hex_dumps_parse_as_the_bytes_on_the_wire() {
        let crud = recording("20a-protobuf-configmap-crud.txt");
        let create = &crud[0];
        assert_eq!(create.method, "POST");
        let sent = create.body_bytes.as_ref().expect("a hex request body");
        assert!(create.body.is_empty(), "no text body beside the bytes");
        assert_eq!(
            Some(sent.len().to_string().as_str()),
            header(&create.headers, "content-length")
        );
        let (kind, raw) = envelope(sent);
        assert_eq!(kind, "ConfigMap");
        let config_map = ConfigMap::decode(raw.as_slice()).expect("a ConfigMap");
        assert_eq!(
            config_map.metadata.and_then(|m| m.name).as_deref(),
            Some("pb-cm1")
        );

        assert_eq!(create.code, 201);
        assert_eq!(
            create.content_type.as_deref(),
            Some("application/vnd.kubernetes.protobuf")
        );
        assert!(create.response.is_none(), "a binary body is not JSON");
        let answered = create.response_bytes.as_ref().expect("a hex response body");
        assert_eq!(
            Some(answered.len().to_string().as_str()),
            create.response_header("content-length")
        );
        let (kind, raw) = envelope(answered);
        assert_eq!(kind, "ConfigMap");
        let created = ConfigMap::decode(raw.as_slice()).expect("the created ConfigMap");
        assert!(created.metadata.and_then(|m| m.uid).is_some());

        // A watch stream: every frame (4-byte big-endian length, then a bare WatchEvent whose
        // object is an envelope) and nothing else.
        let watch = &recording("20b-protobuf-watch-configmaps.txt")[1];
        assert!(watch.path.contains("watch=1"));
        let mut stream = watch.response_bytes.as_deref().expect("a hex stream");
        let mut types = Vec::new();
        while !stream.is_empty() {
            let (length, rest) = stream.split_at(4);
            let length = u32::from_be_bytes(length.try_into().expect("4 bytes")) as usize;
            let (frame, rest) = rest.split_at(length);
            let event = WatchEvent::decode(frame).expect("a WatchEvent");
            let object = event
                .object
                .and_then(|o| o.raw)
                .expect("the event's object");
            assert_eq!(envelope(&object).0, "ConfigMap");
            types.push(event.r#type.unwrap_or_default());
            stream = rest;
        }
        assert_eq!(types[..3], ["ADDED", "MODIFIED", "DELETED"], "{types:?}");
        assert_eq!(types.last().map(String::as_str), Some("BOOKMARK"));

        // A connection closed without an answer (20g) is code 0; JSON recordings are as before.
        let negotiation = recording("20g-protobuf-negotiation.txt");
        assert!(
            negotiation
                .iter()
                .any(|e| e.code == 0 && e.method == "POST")
        );
        let malformed = &recording("16b-create-malformed-json-400.txt")[0];
        assert!(malformed.body.starts_with('{') && malformed.body_bytes.is_none());
        assert!(malformed.response.is_some() && malformed.response_bytes.is_none());
    }

    #[test]
    fn recordings_hex_lines_are_read_as_hexdump_c_prints_them() {
        let full = "00000010  6b 38 73 00 0a 0f 0a 02  76 31 12 09 43 6f 6e 66  |k8s.....v1..Conf|";
        let (offset, bytes) = hex_line(full).expect("a full line");
        assert_eq!((offset, bytes.len(), bytes[0]), (16, 16, 0x6b));
        let short = "00000030  1a 00 22 00                                       |..\".|";
        assert_eq!(hex_line(short), Some((48, vec![0x1a, 0x00, 0x22, 0x00])));
        assert_eq!(hex_line("core::v1::ConfigMap ConfigMap {"), None);
        // The offsets must follow on and the size line must match.
        let text = "(raw body: 4 bytes, protobuf; hex dump)\n00000000  1a 00 22 00  |..\".|\n";
        assert_eq!(hex_body(text), Some(vec![0x1a, 0x00, 0x22, 0x00]));
        let wrong = "(raw body: 5 bytes, protobuf; hex dump)\n00000000  1a 00 22 00  |..\".|\n";
        assert_eq!(hex_body(wrong), None);
    }
}
