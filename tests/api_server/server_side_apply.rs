//! Server-side apply and managedFields against the real binary: recording 18 (kube-apiserver
//! v1.36.2 applying a v1beta1 StorageVersionMigration) replayed step by step, then what the
//! recording does not cover (both kinds, every version, `/status`, conversion between
//! versions, the controllers' writes, kube-rs `Patch::Apply`).

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::server::{Backend, ServerProcess};

const FIXTURE: &str = include_str!("../fixtures/18-server-side-apply.txt");

/// One request/response pair of a recording.
struct Exchange {
    title: String,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
    code: u16,
    response: Value,
}

/// Parse a recording (see the recordings' README: `### Step`, `--- REQUEST ---`,
/// `--- RESPONSE ---`, pretty-printed JSON bodies).
fn exchanges(text: &str) -> Vec<Exchange> {
    let mut out = Vec::new();
    for section in text.split("\n### ").skip(1) {
        let (title, rest) = section.split_once('\n').expect("title line");
        let (_, rest) = rest.split_once("--- REQUEST ---\n").expect("request");
        let (request, response) = rest.split_once("--- RESPONSE ---\n").expect("response");
        let (head, body) = request.split_once("\n\n").unwrap_or((request, ""));
        let mut lines = head.lines();
        let mut request_line = lines.next().expect("request line").split(' ');
        let method = request_line
            .next()
            .expect("method")
            .parse()
            .expect("method");
        let path = request_line.next().expect("path").to_string();
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // The recorder separates the body from the response with blank lines.
        let body = body.trim_end_matches('\n').to_string();
        let body = if body.is_empty() { body } else { body + "\n" };
        let (status_head, response_body) = response.split_once("\n\n").expect("response body");
        let code = status_head
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .expect("status code");
        let response = serde_json::from_str(response_body.trim()).expect("response JSON");
        out.push(Exchange {
            title: title.trim().to_string(),
            method,
            path,
            headers,
            body,
            code,
            response,
        });
    }
    out
}

/// Consistent renaming of what differs between two servers by nature (uids, resource
/// versions): a value seen first in the recording is bound to ours and must stay bound.
#[derive(Default)]
struct Bindings {
    recorded_to_ours: BTreeMap<String, String>,
}

impl Bindings {
    fn bind(&mut self, step: &str, field: &str, recorded: &Value, ours: &Value) {
        let (Some(recorded), Some(ours)) = (recorded.as_str(), ours.as_str()) else {
            assert_eq!(
                recorded.is_null(),
                ours.is_null(),
                "{step}: {field} presence"
            );
            return;
        };
        match self.recorded_to_ours.get(recorded) {
            Some(bound) => assert_eq!(
                bound, ours,
                "{step}: {field} {recorded} was {bound} on our server before, now {ours}"
            ),
            None => {
                assert!(
                    !self.recorded_to_ours.values().any(|v| v == ours),
                    "{step}: our {field} {ours} already stands for another recorded value"
                );
                self.recorded_to_ours
                    .insert(recorded.to_string(), ours.to_string());
            }
        }
    }

    /// The request body with recorded uids and resource versions replaced by ours.
    fn rewrite(&self, body: &str) -> String {
        let mut body = body.to_string();
        for (recorded, ours) in &self.recorded_to_ours {
            body = body.replace(&format!("\"{recorded}\""), &format!("\"{ours}\""));
        }
        body
    }
}

/// Timestamps the server chooses become `<time>` (their form is checked first).
fn normalize_times(value: &mut Value, step: &str) {
    let is_time = |v: &Value| {
        v.as_str().is_some_and(|s| {
            s.len() == 20 && s.ends_with('Z') && s.parse::<k8s_openapi::jiff::Timestamp>().is_ok()
        })
    };
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(created) = meta.get_mut("creationTimestamp") {
            assert!(is_time(created), "{step}: creationTimestamp {created}");
            *created = json!("<time>");
        }
        for entry in meta
            .get_mut("managedFields")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(time) = entry.get_mut("time") {
                assert!(is_time(time), "{step}: managedFields time {time}");
                *time = json!("<time>");
            }
        }
    }
}

async fn replay(server: &ServerProcess) {
    let client = server.http_client();
    let mut bindings = Bindings::default();
    for exchange in exchanges(FIXTURE) {
        let step = exchange.title.as_str();
        let mut request = client.request(
            exchange.method.clone(),
            format!("{}{}", server.url, exchange.path),
        );
        for (name, value) in &exchange.headers {
            request = request.header(name, value);
        }
        if !exchange.body.is_empty() {
            request = request.body(bindings.rewrite(&exchange.body));
        }
        let response = request.send().await.expect("request");
        let code = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = response.text().await.expect("body");
        assert_eq!(code, exchange.code, "{step}: code; body {text}");
        assert_eq!(content_type, "application/json", "{step}: content type");
        let mut ours: Value = serde_json::from_str(&text).expect("JSON body");
        let mut recorded = exchange.response.clone();
        if recorded["kind"] != "Status" {
            for field in ["uid", "resourceVersion"] {
                bindings.bind(
                    step,
                    field,
                    &recorded["metadata"][field],
                    &ours["metadata"][field],
                );
                for body in [&mut recorded, &mut ours] {
                    if !body["metadata"][field].is_null() {
                        body["metadata"][field] = json!(field);
                    }
                }
            }
            // Ours sets metadata.generation on every kind (a standing departure, README).
            if let Some(meta) = ours["metadata"].as_object_mut() {
                meta.shift_remove("generation");
            }
            normalize_times(&mut recorded, step);
            normalize_times(&mut ours, step);
        }
        assert_eq!(
            ours,
            recorded,
            "{step}: body differs\nours:     {}\nrecorded: {}",
            serde_json::to_string_pretty(&ours).unwrap_or_default(),
            serde_json::to_string_pretty(&recorded).unwrap_or_default()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_18_replays_step_by_step() {
    let exchanges = exchanges(FIXTURE);
    assert!(exchanges.len() >= 22, "the fixture parses into every step");
    let server = ServerProcess::start(Backend::Embedded);
    replay(&server).await;
}
