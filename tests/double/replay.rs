//! The recordings replayed: every exchange in `tests/fixtures/recordings/` the double can be
//! put in the state for is sent to it, and its answer must match the real kube-apiserver's —
//! status code, media type, kind, a Status's reason/message/causes, an object's or list's
//! fields — so a change to the double that drifts from the real server fails here.
//!
//! Each file runs on a fresh double holding the recorder's world (namespace `demo`, ConfigMaps
//! cm1..cm5, Widgets w1..w3 of the widgets CRD). Values that differ between two servers by
//! nature (uids, resource versions, continue tokens) are bound: a value the recording saw in an
//! answer is replaced in later requests by the value the double gave at the same place.

use std::collections::{BTreeMap, BTreeSet};

use kube_double::KubeDouble;
use serde_json::{Value, json};

use crate::recordings::{self, Exchange};

/// Files not replayed, and why (each is covered by a purpose-built test of the double).
const NOT_REPLAYED: &[(&str, &str)] = &[
    (
        "05-",
        "compaction timing of the real etcd (tests/double/list.rs: expired continue tokens)",
    ),
    ("10a-", "watch streams over time (tests/double/watch.rs)"),
    ("10b-", "watch streams over time (tests/double/watch.rs)"),
    (
        "12-",
        "an apiserver restart (tests/double/apiservers.rs: identity leases)",
    ),
    (
        "15a-",
        "tokens signed by the recorder's cluster (tests/double/auth.rs: TokenReview)",
    ),
    (
        "16d-",
        "a 3 MiB body the recording shortens (tests/double/bad_input.rs)",
    ),
    (
        "19-",
        "certificatesigningrequests, which the double does not serve (tests/double/list.rs: \
         an empty metadata-only list has null items; the real-cluster suite's first start)",
    ),
    (
        "20",
        "protobuf, replayed with its bytes and compared field by field in \
         tests/double/protobuf_replay.rs (20e and 20f, our group on kube-apiserver, \
         against svm-apiserver: tests/api_server/protobuf_recordings.rs)",
    ),
    (
        "21-",
        "a watch cache filling and a saturated priority level, timing of the real server \
         (tests/double/faults.rs: the double's two 429s against these)",
    ),
    (
        "18-",
        "server-side apply of our own kind, replayed against svm-apiserver \
         (tests/api_server/server_side_apply.rs)",
    ),
];

/// Where the double knowingly answers otherwise, and why no test of ours depends on it. Each
/// entry must still differ (a fixed difference is taken off the list).
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    (
        "16b step 3",
        "Go's JSON syntax error text (\"invalid character 'o' in literal null\"): the double \
         words it as serde does",
    ),
    (
        "16c step 1 ",
        "field validation (Strict/Warn/Ignore) and pruning of unknown fields: the double keeps \
         them; svm-apiserver never sends a field the cluster does not know",
    ),
    (
        "16c step 2 ",
        "as 16c step 1: a duplicate key is not refused under Strict",
    ),
    (
        "16c step 3 ",
        "as 16c step 1: unknown fields are kept, not pruned",
    ),
    (
        "16c step 4 ",
        "as 16c step 1: unknown fields are kept, not pruned",
    ),
    (
        "16c step 5 ",
        "as 16c step 1: unknown fields are kept, not pruned",
    ),
    (
        "16c step 6 ",
        "as 16c step 1: a custom resource's unknown field under Strict",
    ),
];

#[tokio::test]
async fn every_recorded_exchange_the_double_can_replay_gets_the_real_servers_answer() {
    let all = recordings::all();
    assert!(
        all.len() > 100,
        "the recordings were not found or not parsed"
    );
    let mut by_file: BTreeMap<String, Vec<Exchange>> = BTreeMap::new();
    for exchange in all {
        by_file
            .entry(exchange.file.clone())
            .or_default()
            .push(exchange);
    }
    let mut differences = Vec::new();
    let mut replayed = 0;
    for (file, exchanges) in &by_file {
        if NOT_REPLAYED
            .iter()
            .any(|(prefix, _)| file.starts_with(prefix))
        {
            continue;
        }
        let double = recorders_world().await;
        let mut bindings = Bindings::default();
        let mut switched = false;
        for exchange in exchanges {
            if exchange.title.starts_with("Step B") && !switched {
                // The recorder switched the widgets' storage version between its A and B steps.
                double
                    .set_storage_version("widgets.example.test", "v2")
                    .expect("switch");
                switched = true;
            }
            let answer = replay(&double, exchange, &mut bindings).await;
            replayed += 1;
            let id = exchange.id();
            let found = compare(exchange, &answer);
            match KNOWN_DIFFERENCES
                .iter()
                .find(|(prefix, _)| id.starts_with(prefix))
            {
                Some(_) if found.is_empty() => {
                    differences.push(format!("{id}: now matches: take it off KNOWN_DIFFERENCES"))
                }
                Some(_) => {}
                None => differences.extend(found.iter().map(|d| format!("{id}: {d}"))),
            }
            bindings.learn(exchange, &answer);
        }
    }
    println!(
        "replayed {replayed} exchanges of {} files",
        by_file.len() - NOT_REPLAYED.len()
    );
    assert!(
        differences.is_empty(),
        "the double answers unlike the real kube-apiserver:\n{}",
        differences.join("\n")
    );
}

/// A broken double is caught: an answer of the double altered as a regression would alter it
/// differs from the recording.
#[tokio::test]
async fn a_double_answer_unlike_the_recording_is_reported() {
    let exchange = recordings::all()
        .into_iter()
        .find(|e| e.file.starts_with("09c-") && e.step == 1)
        .expect("09c step 1: a missing ConfigMap");
    let double = recorders_world().await;
    let mut answer = replay(&double, &exchange, &mut Bindings::default()).await;
    assert!(
        compare(&exchange, &answer).is_empty(),
        "the real answer matches"
    );
    if let Some(Value::Object(status)) = &mut answer.json {
        status.insert("reason".into(), json!("Gone"));
    }
    let differences = compare(&exchange, &answer);
    assert_eq!(differences.len(), 1, "{differences:?}");
    assert!(differences[0].contains("reason"), "{differences:?}");

    // A list whose items come back as `null` where the real server said `[]` (or the reverse:
    // the bug the real-cluster suite found first) is caught by its type.
    let list = recordings::all()
        .into_iter()
        .find(|e| e.file.starts_with("04-") && e.step == 1)
        .expect("04 step 1: a list of ConfigMaps");
    let mut answer = replay(&double, &list, &mut Bindings::default()).await;
    assert!(
        compare(&list, &answer).is_empty(),
        "the real answer matches"
    );
    if let Some(Value::Object(body)) = &mut answer.json {
        body.insert("items".into(), Value::Null);
    }
    let differences = compare(&list, &answer);
    assert!(
        differences
            .iter()
            .any(|d| d == "items is null (real: an array)"),
        "{differences:?}"
    );
}

/// Namespace `demo`, ConfigMaps cm1..cm5 (created) and Widgets w1..w3 (applied), as the
/// recordings had them.
async fn recorders_world() -> KubeDouble {
    let double = crate::start().await;
    double.ensure_namespace("demo").expect("namespace");
    double
        .create_crd(applied(kube_double::crd::widgets()))
        .expect("the widgets CRD");
    for i in 1..=5 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm{i}"), "namespace": "demo"},
            "data": {"key": format!("value{i}")}});
        double.create("configmaps", cm).expect("a ConfigMap");
    }
    // w1..w3 as the recordings name them, and two more: the recorder's namespace held five.
    for name in ["w1", "w2", "w3", "w-4", "w-5"] {
        let widget = applied(crate::widget(name, 1));
        double
            .create("widgets.example.test", widget)
            .expect("a Widget");
    }
    double
}

/// The recorder created its objects with `kubectl apply`, which leaves an annotation.
fn applied(mut manifest: Value) -> Value {
    let last_applied = manifest.to_string();
    manifest["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": last_applied});
    manifest
}

pub(crate) struct Answer {
    pub(crate) code: u16,
    pub(crate) content_type: Option<String>,
    pub(crate) etag: Option<String>,
    pub(crate) json: Option<Value>,
}

async fn replay(double: &KubeDouble, exchange: &Exchange, bindings: &mut Bindings) -> Answer {
    let path = bindings.apply(&exchange.path);
    let mut body = bindings.apply(&exchange.body);
    if (200..300).contains(&exchange.code) {
        body = current_preconditions(double, &path, &body).await;
    }
    let headers: Vec<(String, String)> = exchange
        .headers
        .iter()
        .filter(|(k, _)| !["host", "content-length"].contains(&k.to_ascii_lowercase().as_str()))
        .map(|(k, v)| (k.clone(), bindings.apply(v)))
        .collect();
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let body = (!body.is_empty() || exchange.method != "GET").then(|| body.into_bytes());
    let reply = crate::Http::new(double)
        .send(&exchange.method, &path, &headers, body)
        .await;
    Answer {
        code: reply.status,
        content_type: reply.header("content-type").map(str::to_string),
        etag: reply.header("etag").map(str::to_string),
        json: serde_json::from_slice(&reply.body).ok(),
    }
}

/// A uid or resourceVersion the real server accepted was that object's current one: ours is
/// another value, so the request carries ours.
async fn current_preconditions(double: &KubeDouble, path: &str, body: &str) -> String {
    let Ok(mut patch) = serde_json::from_str::<Value>(body) else {
        return body.to_string();
    };
    let wants = ["uid", "resourceVersion"]
        .into_iter()
        .filter(|field| patch["metadata"][*field].is_string())
        .collect::<Vec<_>>();
    if wants.is_empty() {
        return body.to_string();
    }
    let object_path = path.split('?').next().unwrap_or(path);
    let current = crate::Http::new(double).get(object_path).await;
    if current.status != 200 {
        return body.to_string();
    }
    let current = current.json();
    for field in wants {
        patch["metadata"][field] = current["metadata"][field].clone();
    }
    patch.to_string()
}

/// What must match, as readable differences (empty: the answers agree).
pub(crate) fn compare(exchange: &Exchange, answer: &Answer) -> Vec<String> {
    let mut out = Vec::new();
    if answer.code != exchange.code {
        out.push(format!("code {} (real: {})", answer.code, exchange.code));
        return out;
    }
    if let Some(recorded) = &exchange.content_type {
        let ours = answer.content_type.as_deref().map(media_type);
        if ours != Some(media_type(recorded)) {
            out.push(format!("content type {ours:?} (real: {recorded})"));
        }
    }
    match (&exchange.response, &answer.json) {
        (Some(recorded), Some(ours)) if exchange.shortened => {
            for field in ["kind", "apiVersion"] {
                if recorded[field] != ours[field] {
                    out.push(format!(
                        "{field} {} (real: {})",
                        ours[field], recorded[field]
                    ));
                }
            }
        }
        (Some(recorded), Some(ours)) => compare_bodies(recorded, ours, &mut out),
        (Some(_), None) => out.push("no JSON body (real: JSON)".into()),
        _ => {}
    }
    out
}

fn compare_bodies(recorded: &Value, ours: &Value, out: &mut Vec<String>) {
    for field in ["kind", "apiVersion"] {
        if recorded[field] != ours[field] {
            out.push(format!(
                "{field} {} (real: {})",
                ours[field], recorded[field]
            ));
        }
    }
    if recorded["kind"] == "Status" {
        compare_statuses(recorded, ours, out);
        return;
    }
    compare_keys("", recorded, ours, out);
    compare_keys("metadata.", &recorded["metadata"], &ours["metadata"], out);
    if recorded["items"][0].is_object() && ours["items"][0].is_object() {
        compare_keys("items[0].", &recorded["items"][0], &ours["items"][0], out);
    }
}

fn compare_statuses(recorded: &Value, ours: &Value, out: &mut Vec<String>) {
    for field in ["status", "reason", "code"] {
        if recorded[field] != ours[field] {
            out.push(format!(
                "{field} {} (real: {})",
                ours[field], recorded[field]
            ));
        }
    }
    let (real, our) = (message(recorded), message(ours));
    if real != our {
        out.push(format!("message {our:?} (real: {real:?})"));
    }
    for field in ["name", "group", "kind"] {
        if recorded["details"][field] != ours["details"][field] {
            let (a, b) = (&ours["details"][field], &recorded["details"][field]);
            out.push(format!("details.{field} {a} (real: {b})"));
        }
    }
    let (real, our) = (causes(recorded), causes(ours));
    if real != our {
        out.push(format!("details.causes {our:?} (real: {real:?})"));
    }
}

/// The message with what differs by nature (uids, numbers such as resource versions) masked.
fn message(status: &Value) -> String {
    let text = status["message"].as_str().unwrap_or_default();
    let mut out = String::new();
    let mut token = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '-' {
            token.push(c);
            continue;
        }
        out.push_str(&mask(&token));
        token.clear();
        out.push(c);
    }
    out.trim_end().to_string()
}

fn mask(token: &str) -> String {
    let uuid = token.len() == 36 && token.matches('-').count() == 4;
    let number = !token.is_empty() && token.chars().all(|c| c.is_ascii_digit());
    match (uuid, number) {
        (true, _) => "<uid>".into(),
        (_, true) => "<n>".into(),
        _ => token.to_string(),
    }
}

fn causes(status: &Value) -> BTreeSet<(String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (text(&c["reason"]), text(&c["field"])))
        .collect()
}

fn compare_keys(prefix: &str, recorded: &Value, ours: &Value, out: &mut Vec<String>) {
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (real, our) = (keys(recorded), keys(ours));
    let missing: Vec<_> = real.difference(&our).collect();
    let extra: Vec<_> = our.difference(&real).collect();
    let place = if prefix.is_empty() {
        "the body"
    } else {
        prefix
    };
    if !missing.is_empty() || !extra.is_empty() {
        out.push(format!(
            "fields of {place}: missing {missing:?}, not in the real answer {extra:?}"
        ));
    }
    // Values differ between runs, but not their JSON type: `"items": null` is not `[]`.
    for key in real.intersection(&our) {
        let (theirs, mine) = (json_type(&recorded[key]), json_type(&ours[key]));
        if theirs != mine {
            out.push(format!("{prefix}{key} is {mine} (real: {theirs})"));
        }
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Recorded value → the double's, for values that differ between servers by nature.
#[derive(Default)]
struct Bindings {
    recorded_to_ours: BTreeMap<String, String>,
}

impl Bindings {
    fn learn(&mut self, exchange: &Exchange, answer: &Answer) {
        if let (Some(recorded), Some(ours)) = (exchange.response_header("etag"), &answer.etag) {
            // Bound without quotes: the recorder also sent the ETag unquoted.
            self.bind_text(recorded.trim_matches('"'), ours.trim_matches('"'));
        }
        let (Some(recorded), Some(ours)) = (&exchange.response, &answer.json) else {
            return;
        };
        for field in ["resourceVersion", "uid", "continue"] {
            self.bind(&recorded["metadata"][field], &ours["metadata"][field]);
        }
    }

    fn bind(&mut self, recorded: &Value, ours: &Value) {
        if let (Some(r), Some(o)) = (recorded.as_str(), ours.as_str()) {
            self.bind_text(r, o);
        }
    }

    fn bind_text(&mut self, recorded: &str, ours: &str) {
        // Short values ("1") would be replaced where they are not a resource version.
        if recorded.len() >= 3 {
            self.recorded_to_ours
                .insert(recorded.to_string(), ours.to_string());
        }
    }

    /// `text` with every bound value replaced (longest first, so a token is never replaced
    /// inside another).
    fn apply(&self, text: &str) -> String {
        let mut pairs: Vec<_> = self.recorded_to_ours.iter().collect();
        pairs.sort_by_key(|(r, _)| std::cmp::Reverse(r.len()));
        pairs
            .into_iter()
            .fold(text.to_string(), |acc, (r, o)| acc.replace(r.as_str(), o))
    }
}
