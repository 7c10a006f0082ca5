//! The real kube-apiserver's exchanges in `tests/fixtures/recordings/` (format in its
//! README.md: a description line, then `### Step` sections with `--- REQUEST ---` and
//! `--- RESPONSE ---`; bodies pretty-printed, notes in `(...)`, `NOTE:` or `[recorder: ...]`).

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
    pub body: String,
    pub code: u16,
    pub content_type: Option<String>,
    pub response_headers: Vec<(String, String)>,
    /// The body when it is one JSON value (watch streams and plain text are `None`).
    pub response: Option<Value>,
    /// The recorder elided or truncated the body: only its kind and apiVersion are whole.
    pub shortened: bool,
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
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recordings")
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
    let code = status_head
        .lines()
        .next()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()?;
    let response_headers: Vec<(String, String)> = status_head
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let content_type = response_headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.clone());
    Some(Exchange {
        file: file.to_string(),
        step,
        title: title.trim().to_string(),
        method,
        path,
        headers,
        body: request_body(body),
        code,
        content_type,
        response_headers,
        response: first_json_value(response_body),
        shortened: response_body.contains("elided") || response_body.contains("TRUNCATED"),
    })
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
