//! The protobuf recordings (20a-20d, 20g, 20h: kube-apiserver v1.36.2 answering client-go's
//! protobuf Accepts) replayed against the double, in the recorder's order on one double, as
//! the recorder ran them on one kube-apiserver: each file starts from the state the earlier
//! left (20a's pb-cm2 and pb-cm3, 20d's label, ...).
//!
//! Request bodies are the recording's bytes; only an object's uid, resourceVersion and
//! server-chosen times, and a DeleteOptions' preconditions, are bound to the double's (the
//! body then encoded again with prost), and paths get the double's resourceVersions and
//! continue tokens. Protobuf answers are compared field by field with presence
//! (`support/protobuf_fields.rs`), watches frame by frame (progress bookmarks, which each
//! server sends at its own pace, held to kube-apiserver's shape); JSON answers as the JSON
//! replay compares them (`recordings.rs`). Where the double answers otherwise, the difference
//! is listed with its reason, and one that disappears fails the test.

use kube_double::KubeDouble;
use serde_json::{Value, json};

use crate::protobuf_fields::{self as pf, Fields, KnownDifferences, Latest, Masking};
use crate::recordings::{self, Exchange};
use crate::replay::{Answer, compare};

/// The files replayed, in the recorder's order (hack/record-protobuf.sh; 20e and 20f, our
/// own group on kube-apiserver, are replayed against svm-apiserver instead:
/// tests/api_server/protobuf_recordings.rs).
const FILES: &[&str] = &["20a-", "20b-", "20c-", "20d-", "20g-", "20h-"];

/// Where the double answers otherwise, and why no test of ours depends on it: `(where,
/// field, why)`.
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    (
        "20b step 5",
        "<body>",
        "a watch from a resourceVersion a million ahead: kube-apiserver on etcd 3.5 keeps an \
         empty stream until timeoutSeconds, the double sends etcd 3.4's 504 \"Too large \
         resource version\" ERROR after 3 s (recording 10a); the migrator never watches ahead",
    ),
    (
        "20g step 14",
        "<code>",
        "a custom resource created with a protobuf body: kube-apiserver panics and closes the \
         connection unanswered; the double answers 415",
    ),
];

/// The recorder's world before 20a: namespace `demo`, the widgets CRD (v1 only, printer
/// columns Size and Age), Widgets w1 and w2, written by `kube-recorder` (the managedFields
/// manager the recordings show).
async fn recorders_world() -> KubeDouble {
    let double = crate::start().await;
    let http = crate::Http::new(&double);
    let created = http
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
        )
        .await;
    assert_eq!(created.status, 201);
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}}}});
    let created = http
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.test"},
                "spec": {"group": "example.test", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                        "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"]},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": schema},
                        "additionalPrinterColumns": [
                            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                            {"name": "Age", "type": "date",
                             "jsonPath": ".metadata.creationTimestamp"}]}]}}),
        )
        .await;
    assert_eq!(created.status, 201);
    for (name, size) in [("w1", 1), ("w2", 2)] {
        let created = http
            .post(
                crate::WIDGETS,
                &json!({"apiVersion": "example.test/v1", "kind": "Widget",
                    "metadata": {"name": name, "namespace": "demo"},
                    "spec": {"size": size, "color": "blue"}}),
            )
            .await;
        assert_eq!(created.status, 201);
    }
    // The recorder's etcd was written to and compacted before kube-apiserver started, so a
    // watch from resourceVersion 1 is too old (20b step 4).
    double.compact();
    double
}

/// A ConfigMap the recorder created without recording it, as its create of step 1 but for
/// `name` with `k: <name>` (20a: pb-cm2 and pb-cm3).
fn config_map_like(first_create: &Exchange, name: &str) -> Vec<u8> {
    use k8s_pb::api::core::v1::ConfigMap;
    use prost::Message;
    let opened = pf::open(first_create.body_bytes.as_deref().expect("a protobuf body"))
        .expect("an envelope");
    let mut config_map = ConfigMap::decode(&opened.raw[..]).expect("a ConfigMap");
    config_map.metadata.get_or_insert_default().name = Some(name.into());
    config_map.data = [("k".to_string(), name.to_string())].into();
    pf::envelope(
        &opened.api_version,
        &opened.kind,
        config_map.encode_to_vec(),
    )
}

/// What the recorder's second connection did during a watch of 20b (pb-live1 created,
/// merge-patched, deleted), done here before the watch: the watch from the list's
/// resourceVersion replays the same three events, so nothing depends on timing.
async fn live_events(double: &KubeDouble, name: &str) {
    let http = crate::Http::new(double);
    let path = "/api/v1/namespaces/demo/configmaps";
    let created = http
        .post(
            path,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "demo"}, "data": {"x": "1"}}),
        )
        .await;
    assert_eq!(created.status, 201);
    let patched = http
        .merge_patch(&format!("{path}/{name}"), &json!({"data": {"x": "2"}}))
        .await;
    assert_eq!(patched.status, 200);
    assert_eq!(http.delete(&format!("{path}/{name}")).await.status, 200);
}

/// A progress BOOKMARK as kube-apiserver writes one (20b's).
fn reference_bookmark(exchanges: &[Exchange]) -> Fields {
    exchanges
        .iter()
        .filter(|e| e.content_type.as_deref() == Some(pf::PROTOBUF_WATCH))
        .filter_map(|e| e.response_bytes.as_deref())
        .flat_map(|stream| pf::frames(stream).expect("frames"))
        .map(|frame| pf::frame_fields(&frame).expect("a frame"))
        .find(pf::is_progress_bookmark)
        .expect("a recorded progress bookmark")
}

#[tokio::test]
async fn the_protobuf_recordings_replay_against_the_double() {
    let exchanges: Vec<Exchange> = recordings::all()
        .into_iter()
        .filter(|e| FILES.iter().any(|f| e.file.starts_with(f)))
        .collect();
    let files: std::collections::BTreeSet<&str> =
        exchanges.iter().map(|e| e.file.as_str()).collect();
    assert_eq!(files.len(), FILES.len(), "every file found: {files:?}");
    let bookmark = reference_bookmark(&exchanges);
    let double = recorders_world().await;
    let http = crate::Http::new(&double);
    let mut masking = Masking::default();
    let mut latest = Latest::default();
    let mut known = KnownDifferences::new(KNOWN_DIFFERENCES);
    let mut unexplained = Vec::new();
    for exchange in &exchanges {
        let id = exchange.id();
        if exchange.title.contains("(pb-live1 created") {
            live_events(&double, "pb-live1").await;
        } else if exchange.title.contains("(pb-live2 created") {
            live_events(&double, "pb-live2").await;
        }
        let path = masking.rewrite(&exchange.path);
        let body = match (&exchange.body_bytes, exchange.body.is_empty()) {
            (Some(bytes), _) => Some(latest.rewrite(bytes, &masking)),
            (None, false) => Some(exchange.body.clone().into_bytes()),
            (None, true) if exchange.method != "GET" => Some(Vec::new()),
            (None, true) => None,
        };
        let headers: Vec<(&str, &str)> = exchange
            .headers
            .iter()
            .filter(|(k, _)| !["host", "content-length"].contains(&k.to_ascii_lowercase().as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let reply = http.send(&exchange.method, &path, &headers, body).await;
        let content_type = reply.header("content-type").map(str::to_string);
        let recorded = pf::Recorded {
            code: exchange.code,
            content_type: exchange.content_type.as_deref(),
            bytes: exchange.response_bytes.as_deref(),
            empty: exchange.empty_body,
        };
        let mut found = pf::differences(
            &recorded,
            reply.status,
            content_type.as_deref(),
            &reply.body,
            &mut masking,
            &bookmark,
        );
        if found.is_empty() && exchange.response.is_some() {
            // A JSON answer, compared as the JSON replay compares one.
            let answer = Answer {
                code: reply.status,
                content_type,
                etag: reply.header("etag").map(str::to_string),
                json: serde_json::from_slice::<Value>(&reply.body).ok(),
            };
            found.extend(
                compare(exchange, &answer)
                    .into_iter()
                    .map(|text| pf::Difference {
                        path: "<json>".into(),
                        text,
                    }),
            );
        }
        unexplained.extend(
            known
                .unexplained(&id, found)
                .into_iter()
                .map(|d| format!("{id}: {d}")),
        );
        latest.learn(&reply.body);
        if exchange.file.starts_with("20a-") && exchange.step == 1 {
            // "pb-cm2 and pb-cm3 were created in protobuf between steps 1 and 2 (not shown)".
            for name in ["pb-cm2", "pb-cm3"] {
                let made = http
                    .send(
                        "POST",
                        &exchange.path,
                        &headers,
                        Some(config_map_like(exchange, name)),
                    )
                    .await;
                assert_eq!(made.status, 201, "{name}");
            }
        }
    }
    let mut report = unexplained;
    report.extend(known.unused());
    println!(
        "replayed {} protobuf exchanges of {} files",
        exchanges.len(),
        files.len()
    );
    assert!(
        report.is_empty(),
        "the double answers unlike the real kube-apiserver:\n{}",
        report.join("\n")
    );
}
