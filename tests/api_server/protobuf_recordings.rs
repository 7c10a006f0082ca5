//! The protobuf recordings replayed against our binary: recording 20e (the real
//! kube-apiserver v1.36.2 serving StorageVersionMigration v1beta1 in protobuf: create, get,
//! list, update, `/status`, watch, delete) exchange by exchange, and the Status errors of 20g
//! and 20h that have an analogue for our kind (404, 406, 409, 415, 422, bad bodies).
//!
//! Request bodies are the recording's bytes. Only where a value that differs between two
//! servers by nature must change inside one (the uid, resourceVersion and times of the object
//! it updates, a name, the kind of an analogue) is it decoded with k8s-pb, changed and encoded
//! again with prost. Answers are compared as clients read them: status code, Content-Type, the
//! envelope's apiVersion and kind (and its empty contentEncoding/contentType), and the message
//! field by field, which fields are present included (`support/protobuf_fields.rs`), with uids
//! and resourceVersions bound and server-chosen times masked; a watch frame by frame.
//!
//! Where we answer otherwise by nature, the difference is listed in [`KNOWN_DIFFERENCES`] with
//! the reason; an entry that no longer differs fails the test until it is taken off.

use std::collections::BTreeMap;

use k8s_pb::api::core::v1 as core_pb;
use k8s_pb::api::storagemigration::v1beta1 as svm_pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta_pb;
use prost::Message;
use reqwest::Method;
use serde_json::Value;

use crate::protobuf_fields::{
    self as pf, Difference, Fields, KnownDifferences, Masking, PROTOBUF, PROTOBUF_WATCH,
};
use crate::recordings::{self, Exchange};
use crate::support::server::{Backend, ServerProcess};

const GROUP: &str = "storagemigration.k8s.io";
const API_VERSION: &str = "storagemigration.k8s.io/v1beta1";
const KIND: &str = "StorageVersionMigration";
const COLLECTION: &str = "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations";

/// Where we answer otherwise than kube-apiserver by nature: `(where, field, why)` (see
/// `KnownDifferences`).
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    (
        "20e",
        "metadata.generation",
        "svm-apiserver sets metadata.generation on every kind (README, \"Departures\": \
         server-side apply); kube-apiserver's StorageVersionMigration has none, written as 0",
    ),
    (
        "20h step 7",
        "message.detail",
        "a Secret body sent to our kind: the decoder's detail names what the serving scheme \
         knows; kube-apiserver's knows v1 Secret (\"converting (v1.Secret) to \
         (core.ConfigMap): unknown conversion\"), ours, an aggregated server's, only its own \
         group (\"no kind \\\"Secret\\\" is registered for version \\\"v1\\\"\")",
    ),
];

/// An answer of our server.
struct Answer {
    code: u16,
    content_type: Option<String>,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(
    client: &reqwest::Client,
    server: &ServerProcess,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<Vec<u8>>,
) -> Answer {
    let method = Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = client.request(method, format!("{}{path}", server.url));
    for (name, value) in headers {
        if !["host", "content-length"].contains(&name.to_ascii_lowercase().as_str()) {
            request = request.header(name, value);
        }
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request.send().await.expect("an answer");
    let code = response.status().as_u16();
    let headers = response.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // A watch ends at its timeoutSeconds, as the recorded one did.
    let body = response.bytes().await.expect("the whole body").to_vec();
    Answer {
        code,
        content_type,
        headers,
        body,
    }
}

/// Every difference between the recorded answer and ours, values masked.
fn differences(exchange: &Exchange, ours: &Answer, masking: &mut Masking) -> Vec<Difference> {
    let recorded = pf::Recorded {
        code: exchange.code,
        content_type: exchange.content_type.as_deref(),
        bytes: exchange.response_bytes.as_deref(),
        empty: exchange.empty_body,
    };
    pf::differences(
        &recorded,
        ours.code,
        ours.content_type.as_deref(),
        &ours.body,
        masking,
        &reference_bookmark(),
    )
}

/// A progress BOOKMARK as kube-apiserver writes one (recording 20b: a ConfigMap watch's, the
/// one recorded; 20e's 3 s watch had none).
fn reference_bookmark() -> Fields {
    let watch = recording("20b-")
        .into_iter()
        .find(|e| e.content_type.as_deref() == Some(PROTOBUF_WATCH))
        .expect("20b's watch");
    let stream = watch.response_bytes.expect("its frames");
    pf::frames(&stream)
        .expect("frames")
        .iter()
        .map(|f| pf::frame_fields(f).expect("a frame"))
        .find(pf::is_progress_bookmark)
        .expect("a recorded progress bookmark")
}

/// The recording's first create, for an object of another name (an object the recording
/// made without showing it).
fn created_as(exchanges: &[Exchange], name: &str) -> Vec<u8> {
    let create = exchanges
        .iter()
        .find(|e| e.method == "POST")
        .and_then(|e| e.body_bytes.as_ref())
        .expect("a recorded create");
    let opened = pf::open(create).expect("an envelope");
    let mut object = svm_pb::StorageVersionMigration::decode(&opened.raw[..]).expect("a message");
    object.metadata.get_or_insert_default().name = Some(name.into());
    pf::envelope(&opened.api_version, &opened.kind, object.encode_to_vec())
}

fn recording(prefix: &str) -> Vec<Exchange> {
    let exchanges: Vec<Exchange> = recordings::all()
        .into_iter()
        .filter(|e| e.file.starts_with(prefix))
        .collect();
    assert!(!exchanges.is_empty(), "recording {prefix} not found");
    exchanges
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_20e_replays_against_our_server_field_by_field() {
    let exchanges = recording("20e-");
    assert_eq!(exchanges.len(), 8, "20e parses into its eight steps");
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let mut masking = Masking::default();
    let mut latest = pf::Latest::default();
    let mut known = KnownDifferences::new(KNOWN_DIFFERENCES);
    let mut unexplained = Vec::new();
    for exchange in &exchanges {
        assert!(
            exchange.path.starts_with(COLLECTION),
            "{}: a path of our group",
            exchange.id()
        );
        if exchange.title.contains("not shown") {
            // An object the recorder made in protobuf without recording it: made here from the
            // recording's create, under its name.
            let name = exchange.path.rsplit('/').next().unwrap_or_default();
            let made = send(
                &client,
                &server,
                "POST",
                COLLECTION,
                &exchanges[0].headers,
                Some(created_as(&exchanges, name)),
            )
            .await;
            assert_eq!(made.code, 201, "{}: {}", exchange.id(), made.text());
        }
        let body = exchange
            .body_bytes
            .as_deref()
            .map(|b| latest.rewrite(b, &masking));
        let path = masking.rewrite(&exchange.path);
        let answer = send(
            &client,
            &server,
            &exchange.method,
            &path,
            &exchange.headers,
            body,
        )
        .await;
        let found = differences(exchange, &answer, &mut masking);
        unexplained.extend(
            known
                .unexplained(&exchange.id(), found)
                .into_iter()
                .map(|d| format!("{}: {d}", exchange.id())),
        );
        latest.learn(&answer.body);
    }
    let known_but_gone: Vec<String> = known
        .unused()
        .into_iter()
        .filter(|entry| entry.starts_with("20e"))
        .collect();
    assert!(
        unexplained.is_empty() && known_but_gone.is_empty(),
        "our server answers 20e unlike kube-apiserver:\n{}",
        unexplained
            .iter()
            .chain(&known_but_gone)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// How a ConfigMap Status of the recordings reads for our kind.
struct Translation {
    /// Causes of fields our kind does not have (`data`) are left out, and the message rebuilt
    /// from the others as Go's `ToAggregate` writes it.
    drop_causes_under: Option<&'static str>,
}

impl Translation {
    /// The recorded Status fields, as they would read for our kind: resource and kind names,
    /// the group.
    fn translate(&self, mut fields: Fields) -> Fields {
        let renames = [
            // 20h steps 13-14: the recorded message in an envelope of ours.
            (
                "ConfigMap in version \"v1\"",
                format!("{KIND} in version \"v1beta1\""),
            ),
            (
                "configmaps \"",
                format!("storageversionmigrations.{GROUP} \""),
            ),
            ("ConfigMap \"", format!("{KIND}.{GROUP} \"")),
            (
                "must be of type ConfigMap",
                format!("must be of type {KIND}"),
            ),
            ("as a ConfigMap", format!("as a {KIND}")),
        ];
        let about_an_object = fields
            .get("details.kind")
            .is_some_and(|kind| kind != "\"\"");
        for (path, value) in fields.iter_mut() {
            match path.as_str() {
                "message" => {
                    let mut text = unquoted(value);
                    for (theirs, ours) in &renames {
                        text = text.replace(theirs, ours);
                    }
                    *value = format!("{text:?}");
                }
                "details.group" if about_an_object => *value = format!("{GROUP:?}"),
                "details.kind" if value == "\"configmaps\"" => {
                    *value = "\"storageversionmigrations\"".into();
                }
                "details.kind" if value == "\"ConfigMap\"" => *value = format!("{KIND:?}"),
                _ => {}
            }
        }
        let Some(prefix) = self.drop_causes_under else {
            return fields;
        };
        let mut kept = Vec::new();
        let mut i = 0;
        while let Some(field) = fields.get(&format!("details.causes[{i}].field")).cloned() {
            let take = |name: &str| fields.get(&format!("details.causes[{i}].{name}")).cloned();
            if !field.trim_matches('"').starts_with(prefix) {
                kept.push((take("reason"), take("message"), field));
            }
            i += 1;
        }
        fields.retain(|path, _| !path.starts_with("details.causes["));
        let mut rendered = Vec::new();
        for (n, (reason, message, field)) in kept.into_iter().enumerate() {
            let at = |name: &str| format!("details.causes[{n}].{name}");
            if let Some(reason) = reason {
                fields.insert(at("reason"), reason);
            }
            if let Some(message) = &message {
                fields.insert(at("message"), message.clone());
            }
            rendered.push(format!(
                "{}: {}",
                unquoted(&field),
                unquoted(message.as_deref().unwrap_or("\"\""))
            ));
            fields.insert(at("field"), field);
        }
        if let Some(message) = fields.get_mut("message") {
            let text = unquoted(message);
            let head = text.split(" is invalid: ").next().unwrap_or_default();
            let joined = match rendered.as_slice() {
                [one] => one.clone(),
                many => format!("[{}]", many.join(", ")),
            };
            *message = format!("{:?}", format!("{head} is invalid: {joined}"));
        }
        fields
    }
}

/// "<Kind> in version "v" cannot be handled as a <Kind>: <detail>": the detail, Go's decoder's
/// words, compared as a field of its own (`message.detail`).
fn split_decoder_detail(fields: &mut Fields) {
    const HANDLED: &str = " cannot be handled as a ";
    let Some(message) = fields.get("message").map(|m| unquoted(m)) else {
        return;
    };
    let Some(at) = message.find(HANDLED) else {
        return;
    };
    let Some(colon) = message[at..].find(": ").map(|c| at + c + 2) else {
        return;
    };
    let (head, detail) = message.split_at(colon);
    fields.insert("message".into(), format!("{head:?}"));
    fields.insert("message.detail".into(), format!("{detail:?}"));
}

/// A string field's value as flattened (`"a \"b\""`), unquoted.
fn unquoted(value: &str) -> String {
    serde_json::from_str::<String>(value).unwrap_or_else(|_| value.to_string())
}

/// An error of 20g or 20h asked of our kind: the recorded step, and our request.
struct Analogue {
    step: &'static str,
    method: &'static str,
    path: String,
    body: Option<Vec<u8>>,
}

/// Our kind's message for a ConfigMap message of the recordings: its metadata, and
/// `spec.resource` configmaps.
fn as_migration(config_map_body: &[u8]) -> Vec<u8> {
    let opened = pf::open(config_map_body).expect("a ConfigMap envelope");
    let config_map = core_pb::ConfigMap::decode(&opened.raw[..]).expect("a ConfigMap");
    let mut metadata = config_map.metadata.unwrap_or_default();
    metadata.namespace = None;
    let object = svm_pb::StorageVersionMigration {
        metadata: Some(metadata),
        spec: Some(svm_pb::StorageVersionMigrationSpec {
            resource: Some(meta_pb::GroupResource {
                group: Some(String::new()),
                resource: Some("configmaps".into()),
            }),
        }),
        status: None,
    };
    pf::envelope(API_VERSION, KIND, object.encode_to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protobuf_errors_of_20g_and_20h_read_alike_for_our_kind() {
    let mut by_step: BTreeMap<String, Exchange> = BTreeMap::new();
    for exchange in recording("20g-").into_iter().chain(recording("20h-")) {
        let id = exchange.id();
        let key = id.split(" (").next().unwrap_or(&id).to_string();
        by_step.insert(key, exchange);
    }
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    // The recordings' pb-cm2 and pb-cm3, as migrations.
    for name in ["pb-cm2", "pb-cm3"] {
        let mut object = svm_pb::StorageVersionMigration::decode(
            &pf::open(&created_as(&recording("20e-"), name))
                .expect("an envelope")
                .raw[..],
        )
        .expect("a message");
        object.metadata.get_or_insert_default().name = Some(name.into());
        let made = send(
            &client,
            &server,
            "POST",
            COLLECTION,
            &[
                ("Accept".into(), PROTOBUF.into()),
                ("Content-Type".into(), PROTOBUF.into()),
            ],
            Some(pf::envelope(API_VERSION, KIND, object.encode_to_vec())),
        )
        .await;
        assert_eq!(made.code, 201, "{}", made.text());
    }
    let recorded_body = |step: &str| {
        by_step[step]
            .body_bytes
            .clone()
            .unwrap_or_else(|| panic!("{step}: a recorded body"))
    };
    let item = |name: &str| format!("{COLLECTION}/{name}");
    let analogue = |step, method, path: String, body: Option<Vec<u8>>| Analogue {
        step,
        method,
        path,
        body,
    };
    let mut stale = svm_pb::StorageVersionMigration::decode(
        &pf::open(&as_migration(&recorded_body("20h step 2")))
            .expect("an envelope")
            .raw[..],
    )
    .expect("a message");
    stale.metadata.get_or_insert_default().uid = None;
    let stale = pf::envelope(API_VERSION, KIND, stale.encode_to_vec());
    // 20h steps 13-14: the same inner bytes, in an envelope of our kind.
    let rewrapped = |step: &str| {
        let opened = pf::open(&recorded_body(step)).expect("an envelope");
        pf::envelope(API_VERSION, KIND, opened.raw)
    };
    // 20h steps 8-9: our message with a field it does not have (tag 99, a string), as the
    // recorder added one to a ConfigMap.
    let with_unknown_field = |step: &str| {
        let mut raw = pf::open(&as_migration(&recorded_body(step)))
            .expect("an envelope")
            .raw;
        prost::encoding::string::encode(99, &"surprise".to_string(), &mut raw);
        pf::envelope(API_VERSION, KIND, raw)
    };
    let cases = vec![
        analogue("20g step 1", "GET", item("does-not-exist"), None),
        analogue("20g step 2", "GET", item("does-not-exist"), None),
        analogue("20g step 3", "GET", item("pb-cm2"), None),
        analogue("20g step 4", "GET", COLLECTION.into(), None),
        analogue("20g step 5", "GET", item("pb-cm2"), None),
        analogue("20g step 6", "GET", item("pb-cm2"), None),
        analogue("20g step 7", "GET", item("pb-cm2"), None),
        analogue("20g step 8", "GET", item("pb-cm2"), None),
        analogue("20g step 9", "GET", item("pb-cm2"), None),
        analogue(
            "20g step 15",
            "PATCH",
            item("pb-cm2"),
            Some(as_migration(&recorded_body("20g step 15"))),
        ),
        analogue(
            "20h step 1",
            "POST",
            COLLECTION.into(),
            Some(as_migration(&recorded_body("20h step 1"))),
        ),
        analogue("20h step 2", "PUT", item("pb-cm3"), Some(stale)),
        analogue(
            "20h step 3",
            "POST",
            COLLECTION.into(),
            Some(as_migration(&recorded_body("20h step 3"))),
        ),
        // The recorded bytes themselves: each is refused before its kind is read.
        analogue(
            "20h step 4",
            "POST",
            COLLECTION.into(),
            Some(recorded_body("20h step 4")),
        ),
        analogue(
            "20h step 5",
            "POST",
            COLLECTION.into(),
            Some(recorded_body("20h step 5")),
        ),
        analogue(
            "20h step 6",
            "POST",
            COLLECTION.into(),
            Some(recorded_body("20h step 6")),
        ),
        analogue(
            "20h step 7",
            "POST",
            COLLECTION.into(),
            Some(recorded_body("20h step 7")),
        ),
        analogue(
            "20h step 8",
            "POST",
            COLLECTION.into(),
            Some(with_unknown_field("20h step 8")),
        ),
        analogue(
            "20h step 9",
            "POST",
            format!("{COLLECTION}?fieldValidation=Strict"),
            Some(with_unknown_field("20h step 9")),
        ),
        analogue("20h step 10", "POST", COLLECTION.into(), Some(Vec::new())),
        analogue(
            "20h step 11",
            "POST",
            COLLECTION.into(),
            Some(recorded_body("20h step 11")),
        ),
        analogue(
            "20h step 12",
            "POST",
            COLLECTION.into(),
            Some(recorded_body("20h step 12")),
        ),
        analogue(
            "20h step 13",
            "POST",
            COLLECTION.into(),
            Some(rewrapped("20h step 13")),
        ),
        analogue(
            "20h step 14",
            "POST",
            COLLECTION.into(),
            Some(rewrapped("20h step 14")),
        ),
    ];
    let mut known = KnownDifferences::new(KNOWN_DIFFERENCES);
    let mut unexplained = Vec::new();
    for case in cases {
        let exchange = &by_step[case.step];
        let answer = send(
            &client,
            &server,
            case.method,
            &case.path,
            &exchange.headers,
            case.body,
        )
        .await;
        let mut found = Vec::new();
        let warned = |headers: &[(String, String)]| {
            headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("warning"))
        };
        let our_warnings: Vec<(String, String)> = answer
            .headers
            .get_all("warning")
            .iter()
            .map(|v| {
                (
                    "Warning".to_string(),
                    v.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        if warned(&exchange.response_headers) != warned(&our_warnings) {
            found.push(Difference {
                path: "<warning>".into(),
                text: format!("Warning headers {our_warnings:?} (real: none)"),
            });
        }
        if answer.code != exchange.code || answer.content_type != exchange.content_type {
            found.push(Difference {
                path: "<code>".into(),
                text: format!(
                    "{} {:?} (real: {} {:?}): {}",
                    answer.code,
                    answer.content_type,
                    exchange.code,
                    exchange.content_type,
                    answer.text()
                ),
            });
        } else if let Some(recorded) = &exchange.response_bytes {
            let recorded = pf::body_fields(recorded).expect("the recorded body");
            let kind = recorded.get("envelope.kind").cloned().unwrap_or_default();
            let ours = pf::body_fields(&answer.body).expect("our protobuf body");
            if kind == "\"Status\"" {
                let translation = Translation {
                    drop_causes_under: (case.step == "20h step 3").then_some("data"),
                };
                let mut expected = translation.translate(recorded);
                let mut ours = ours;
                split_decoder_detail(&mut expected);
                split_decoder_detail(&mut ours);
                found.extend(pf::compare(&expected, &ours));
            } else {
                // An object (20g step 8): ours, in protobuf, of our kind.
                let expected = format!("{KIND:?}");
                if ours.get("envelope.kind") != Some(&expected) {
                    found.push(Difference {
                        path: "envelope.kind".into(),
                        text: format!("envelope kind {:?}", ours.get("envelope.kind")),
                    });
                }
            }
        } else if let Some(real) = &exchange.response {
            let mine: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
            let expected_kind = match real["kind"].as_str() {
                Some("ConfigMap") => KIND,
                other => other.unwrap_or_default(),
            };
            if mine["kind"] != expected_kind {
                found.push(Difference {
                    path: "kind".into(),
                    text: format!("kind {} (real: {})", mine["kind"], real["kind"]),
                });
            }
            if real["kind"] == "Status" {
                for field in ["status", "message", "reason", "code", "details"] {
                    if mine[field] != real[field] {
                        found.push(Difference {
                            path: field.into(),
                            text: format!("{field} {} (real: {})", mine[field], real[field]),
                        });
                    }
                }
            }
        }
        unexplained.extend(
            known
                .unexplained(case.step, found)
                .into_iter()
                .map(|d| format!("{}: {d}", exchange.id())),
        );
    }
    let known_but_gone: Vec<String> = known
        .unused()
        .into_iter()
        .filter(|entry| entry.starts_with("20g") || entry.starts_with("20h"))
        .collect();
    assert!(
        unexplained.is_empty() && known_but_gone.is_empty(),
        "our Statuses read unlike kube-apiserver's:\n{}",
        unexplained
            .iter()
            .chain(&known_but_gone)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
