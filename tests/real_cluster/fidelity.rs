//! The test double beside the real kube-apiserver: the same requests to both, the answers
//! normalized to what clients read (status code, content type, kind and apiVersion, a
//! Status's reason and message, whether `items` is `null` or an array and how long, which list
//! metadata is present, an ETag, a watch's first event, a watch-list's initial events and
//! bookmark), and every difference reported. The double stands in for the real server wherever
//! a test needs faults or scale, so it must answer as the real one does wherever both answer.
//!
//! Protobuf too, as client-go asks for it (the migrator's metadata reads, typed reads and
//! errors): a protobuf answer is compared field by field, which fields are present included
//! (`support/protobuf_fields.rs`), with uids, resourceVersions, continue tokens and server-chosen
//! times masked; a protobuf watch frame by frame.
//!
//! Twice: kube-apiserver on etcd 3.5 (it serves watch-list; the double with watch-list on) and
//! on Debian bookworm's etcd 3.4.23 (it refuses watch-list with a 500 ERROR event, recording
//! 10a; the double with watch-list off), since clusters of both kinds are what the migrator
//! meets.

use std::time::Duration;

use futures::StreamExt;
use prost::Message;
use serde_json::{Value, json};

use crate::protobuf_fields::{self as pf, Masking};
use crate::support::control_plane::{Assets, ControlPlane, assets};
use crate::support::etcd::serves_watch_list;

/// One server under comparison: its URL and a client holding an identity in system:masters.
struct Target {
    name: &'static str,
    url: String,
    http: reqwest::Client,
}

/// One request.
struct Probe {
    what: &'static str,
    method: reqwest::Method,
    path: String,
    accept: &'static str,
    body: Option<Body>,
    read: Read,
}

/// How much of an answer is read.
#[derive(Clone, Copy, PartialEq)]
enum Read {
    Body,
    /// The first event of a watch stream.
    FirstEvent,
    /// A watch-list's events up to its bookmark (or its ERROR, or its end).
    InitialEvents,
}

enum Body {
    /// This content type and text.
    Fixed(&'static str, String),
    /// This content type and bytes (a protobuf body).
    Bytes(&'static str, Vec<u8>),
    /// A no-op merge patch naming the object's resourceVersion on the server asked.
    OwnResourceVersion,
}

const JSON: &str = "application/json";
const METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const METADATA_ONE: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
const AGGREGATED: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
const MERGE: &str = "application/merge-patch+json";
/// client-go's typed clients configured for protobuf.
const PROTOBUF_ANY: &str = "application/vnd.kubernetes.protobuf, */*";
const PROTOBUF_ONLY: &str = "application/vnd.kubernetes.protobuf";
/// client-go's metadata client (what the migrator sends): protobuf first.
const PB_METADATA_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const PB_METADATA_ONE: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const PB_TABLE: &str = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1";
const WATCH_LIST: &str =
    "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_double_answers_as_the_real_kube_apiserver_on_etcd_3_5_does() {
    let Some(assets) = assets("the_double_answers_as_the_real_kube_apiserver_on_etcd_3_5_does")
    else {
        return;
    };
    compare(&assets, WatchList::Served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_double_answers_as_the_real_kube_apiserver_on_etcd_3_4_does() {
    let Some(assets) = assets("the_double_answers_as_the_real_kube_apiserver_on_etcd_3_4_does")
    else {
        return;
    };
    compare(&assets.with_system_etcd(), WatchList::Refused).await;
}

/// Whether the control plane's etcd lets kube-apiserver serve watch-list (≥ 3.4.31, ≥ 3.5.13).
#[derive(Clone, Copy, PartialEq, Debug)]
enum WatchList {
    Served,
    Refused,
}

async fn compare(assets: &Assets, watch_list: WatchList) {
    let plane = ControlPlane::start(assets, &[]);
    let etcd = plane.etcd.version();
    assert_eq!(
        serves_watch_list(&etcd),
        watch_list == WatchList::Served,
        "this comparison is for an etcd on which watch-list is {watch_list:?}; the control \
         plane runs {etcd}"
    );
    let double = kube_double::KubeDouble::builder()
        .tls(true)
        .watch_list(watch_list == WatchList::Served)
        .start()
        .await
        .expect("start the double");
    let real = Target {
        name: "kube-apiserver",
        url: plane.url(),
        http: client(
            &std::fs::read_to_string(&plane.pki.ca_cert).expect("CA"),
            &std::fs::read_to_string(&plane.pki.admin_cert).expect("cert"),
            &std::fs::read_to_string(&plane.pki.admin_key).expect("key"),
        ),
    };
    let fake = Target {
        name: "kube-double",
        url: double.url(),
        http: client(
            double.ca_pem(),
            &double.admin_client().cert_pem,
            &double.admin_client().key_pem,
        ),
    };
    for target in [&real, &fake] {
        set_up(target, &plane).await;
    }

    let mut differences = Vec::new();
    let mut compared = 0;
    for probe in probes() {
        let want = answer(&real, &probe).await;
        let got = answer(&fake, &probe).await;
        compared += 1;
        if want != got {
            differences.push(format!(
                "{} ({} {}, Accept {}):\n  kube-apiserver: {want}\n  kube-double:    {got}",
                probe.what, probe.method, probe.path, probe.accept
            ));
        }
    }
    assert!(compared >= 20, "only {compared} requests compared");
    assert!(
        differences.is_empty(),
        "the double differs from kube-apiserver ({etcd}) in {} of {compared} answers:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

fn client(ca: &str, cert: &str, key: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"))
        .identity(reqwest::Identity::from_pem(format!("{key}{cert}").as_bytes()).expect("id"))
        .user_agent("svm-fidelity/1.0")
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The same objects on both: a namespace, the widgets CRD (v1 stored, v2 served), three
/// ConfigMaps and three Widgets.
async fn set_up(target: &Target, plane: &ControlPlane) {
    let post = |path: &'static str, body: Value| {
        let request = target
            .http
            .post(format!("{}{path}", target.url))
            .header("content-type", JSON)
            .body(body.to_string());
        async move {
            let answer = request.send().await.expect("create");
            assert!(
                answer.status().is_success(),
                "{}: {path}: {}",
                target.name,
                answer.text().await.unwrap_or_default()
            );
        }
    };
    post(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
    )
    .await;
    post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        kube_double::crd::widgets(),
    )
    .await;
    if target.name == "kube-apiserver" {
        crate::world::wait_established(&plane.kubectl(), &["crd/widgets.example.test"]);
    }
    for i in 1..=3 {
        post(
            "/api/v1/namespaces/demo/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm{i}")}, "data": {"k": "v"}}),
        )
        .await;
    }
    // The CRD's REST endpoint may lag its Established condition a moment.
    for i in 1..=3 {
        let body = json!({"apiVersion": "example.test/v1", "kind": "Widget",
                          "metadata": {"name": format!("w{i}")}, "spec": {"size": i}});
        let mut tries = 0;
        loop {
            let answer = target
                .http
                .post(format!(
                    "{}/apis/example.test/v1/namespaces/demo/widgets",
                    target.url
                ))
                .header("content-type", JSON)
                .body(body.to_string())
                .send()
                .await
                .expect("create a widget");
            if answer.status().is_success() {
                break;
            }
            tries += 1;
            assert!(
                tries < 50,
                "{}: widget w{i}: {}",
                target.name,
                answer.status()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// What is compared. Objects are addressed by name; resourceVersions and uids, which differ
/// between the two, are read from each server where a request needs them.
fn probes() -> Vec<Probe> {
    let get = |what, path: &str, accept| Probe {
        what,
        method: reqwest::Method::GET,
        path: path.to_string(),
        accept,
        body: None,
        read: Read::Body,
    };
    let patch = |what, path: &str, content_type, body: String| Probe {
        what,
        method: reqwest::Method::PATCH,
        path: path.to_string(),
        accept: METADATA_ONE,
        body: Some(Body::Fixed(content_type, body)),
        read: Read::Body,
    };
    let no_op_patch = |what, path: &str, accept| Probe {
        what,
        method: reqwest::Method::PATCH,
        path: path.to_string(),
        accept,
        body: Some(Body::OwnResourceVersion),
        read: Read::Body,
    };
    let send_protobuf = |what, method, path: &str, body: Vec<u8>| Probe {
        what,
        method,
        path: path.to_string(),
        accept: PROTOBUF_ANY,
        body: Some(Body::Bytes(pf::PROTOBUF, body)),
        read: Read::Body,
    };
    let create = |what, path: &str, content_type, body: &str| Probe {
        what,
        method: reqwest::Method::POST,
        path: path.to_string(),
        accept: JSON,
        body: Some(Body::Fixed(content_type, body.to_string())),
        read: Read::Body,
    };
    let watch = |what, path: &str, accept, read| Probe {
        what,
        method: reqwest::Method::GET,
        path: path.to_string(),
        accept,
        body: None,
        read,
    };
    let cms = "/api/v1/namespaces/demo/configmaps";
    let widgets = "/apis/example.test/v1/namespaces/demo/widgets";
    // A stale resourceVersion: "1", never an object's on either server.
    vec![
        get("typed list, first page", &format!("{cms}?limit=2"), JSON),
        get("typed list, all", cms, JSON),
        get(
            "metadata-only list",
            &format!("{cms}?limit=2"),
            METADATA_LIST,
        ),
        get(
            "metadata-only list of a CR",
            &format!("{widgets}?limit=2"),
            METADATA_LIST,
        ),
        get("CR list", &format!("{widgets}?limit=500"), JSON),
        get(
            "empty metadata-only list",
            "/apis/apps/v1/deployments?limit=500",
            METADATA_LIST,
        ),
        get(
            "empty typed list",
            "/apis/apps/v1/deployments?limit=500",
            JSON,
        ),
        get(
            "empty metadata-only CR list",
            "/apis/example.test/v1/namespaces/other/widgets",
            METADATA_LIST,
        ),
        get("metadata-only object", &format!("{cms}/cm1"), METADATA_ONE),
        get("typed object", &format!("{cms}/cm1"), JSON),
        get("missing object", &format!("{cms}/nope"), JSON),
        get("missing CR", &format!("{widgets}/nope"), JSON),
        get(
            "missing namespace's object",
            "/api/v1/namespaces/nowhere/configmaps/x",
            JSON,
        ),
        get("unknown resource", "/api/v1/foos", JSON),
        get("unknown group", "/apis/nowhere.test/v1/things", JSON),
        get("table of configmaps", cms, TABLE),
        get("table of widgets", widgets, TABLE),
        get("core discovery", "/api/v1", JSON),
        get("CR group discovery", "/apis/example.test/v1", JSON),
        get("aggregated discovery (core)", "/api", AGGREGATED),
        get("aggregated discovery (groups)", "/apis", AGGREGATED),
        no_op_patch(
            "no-op merge patch with the resourceVersion",
            &format!("{cms}/cm1"),
            METADATA_ONE,
        ),
        no_op_patch(
            "no-op merge patch of a CR with the resourceVersion",
            &format!("{widgets}/w1"),
            METADATA_ONE,
        ),
        patch(
            "merge patch with a stale resourceVersion",
            &format!("{cms}/cm2"),
            MERGE,
            json!({"metadata": {"resourceVersion": "1"}}).to_string(),
        ),
        patch(
            "merge patch with a wrong uid",
            &format!("{cms}/cm2"),
            MERGE,
            json!({"metadata": {"uid": "wrong"}}).to_string(),
        ),
        patch(
            "merge patch of a missing object",
            &format!("{cms}/nope"),
            MERGE,
            json!({"metadata": {"resourceVersion": "5"}}).to_string(),
        ),
        patch(
            "strategic merge patch of a CR",
            &format!("{widgets}/w1"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"size": 9}}).to_string(),
        ),
        patch(
            "text/plain patch",
            &format!("{cms}/cm1"),
            "text/plain",
            "{}".to_string(),
        ),
        create("malformed JSON", cms, JSON, "{\"apiVersion\": "),
        create(
            "invalid name",
            cms,
            JSON,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Not_Valid"}}"#,
        ),
        create(
            "already exists",
            cms,
            JSON,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm1"}}"#,
        ),
        watch(
            "watch-list of metadata (the migrator's read)",
            &format!("{cms}?{WATCH_LIST}"),
            METADATA_ONE,
            Read::InitialEvents,
        ),
        watch(
            "watch-list of a custom resource's metadata",
            &format!("{widgets}?{WATCH_LIST}"),
            METADATA_ONE,
            Read::InitialEvents,
        ),
        watch(
            "watch-list asking for a list's metadata",
            &format!("{cms}?{WATCH_LIST}"),
            METADATA_LIST,
            Read::FirstEvent,
        ),
        watch(
            "watch from a resourceVersion too old",
            &format!("{cms}?watch=1&resourceVersion=1"),
            JSON,
            Read::FirstEvent,
        ),
        // Protobuf, as client-go asks: the migrator's metadata reads first.
        get(
            "metadata-only list in protobuf (the migrator's page)",
            &format!("{cms}?limit=2"),
            PB_METADATA_LIST,
        ),
        get(
            "metadata-only list of a CR in protobuf",
            &format!("{widgets}?limit=2"),
            PB_METADATA_LIST,
        ),
        get(
            "empty metadata-only list in protobuf",
            "/apis/apps/v1/deployments?limit=500",
            PB_METADATA_LIST,
        ),
        get(
            "metadata-only object in protobuf",
            &format!("{cms}/cm1"),
            PB_METADATA_ONE,
        ),
        no_op_patch(
            "no-op merge patch, answer in protobuf (the migrator's write)",
            &format!("{cms}/cm2"),
            PB_METADATA_ONE,
        ),
        no_op_patch(
            "no-op merge patch of a CR, answer in protobuf",
            &format!("{widgets}/w2"),
            PB_METADATA_ONE,
        ),
        watch(
            "watch-list of metadata in protobuf (the migrator's read)",
            &format!("{cms}?{WATCH_LIST}"),
            PB_METADATA_ONE,
            Read::InitialEvents,
        ),
        watch(
            "watch-list of a custom resource's metadata in protobuf",
            &format!("{widgets}?{WATCH_LIST}"),
            PB_METADATA_ONE,
            Read::InitialEvents,
        ),
        watch(
            "watch-list asking for a list's metadata in protobuf",
            &format!("{cms}?{WATCH_LIST}"),
            PB_METADATA_LIST,
            Read::FirstEvent,
        ),
        // client-go's typed clients.
        get(
            "typed object in protobuf",
            &format!("{cms}/cm1"),
            PROTOBUF_ANY,
        ),
        get(
            "typed list in protobuf, first page",
            &format!("{cms}?limit=2"),
            PROTOBUF_ANY,
        ),
        get(
            "missing object, protobuf accepted",
            &format!("{cms}/nope"),
            PROTOBUF_ANY,
        ),
        get("CR, protobuf only", &format!("{widgets}/w1"), PROTOBUF_ONLY),
        get(
            "CR, protobuf then anything",
            &format!("{widgets}/w1"),
            PROTOBUF_ANY,
        ),
        get("protobuf Table alone", &format!("{cms}/cm1"), PB_TABLE),
        get(
            "unknown resource, protobuf accepted",
            "/api/v1/foos",
            PROTOBUF_ANY,
        ),
        Probe {
            accept: PROTOBUF_ANY,
            ..patch(
                "merge patch with a stale resourceVersion, protobuf accepted",
                &format!("{cms}/cm2"),
                MERGE,
                json!({"metadata": {"resourceVersion": "1"}}).to_string(),
            )
        },
        Probe {
            accept: PROTOBUF_ANY,
            ..patch(
                "a protobuf PATCH body",
                &format!("{cms}/cm2"),
                pf::PROTOBUF,
                String::new(),
            )
        },
        send_protobuf(
            "a protobuf create",
            reqwest::Method::POST,
            cms,
            config_map_body("pb-made"),
        ),
        send_protobuf(
            "a protobuf create of an existing name",
            reqwest::Method::POST,
            cms,
            config_map_body("cm1"),
        ),
        send_protobuf(
            "a protobuf body cut short",
            reqwest::Method::POST,
            cms,
            config_map_body("pb-cut")[..20].to_vec(),
        ),
        send_protobuf(
            "a protobuf body without the magic",
            reqwest::Method::POST,
            cms,
            config_map_body("pb-bare")[4..].to_vec(),
        ),
        send_protobuf(
            "a protobuf Secret posted to configmaps",
            reqwest::Method::POST,
            cms,
            pf::envelope(
                "v1",
                "Secret",
                k8s_pb::api::core::v1::Secret {
                    metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some("pb-secret".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
                .encode_to_vec(),
            ),
        ),
        send_protobuf(
            "a protobuf delete with DeleteOptions",
            reqwest::Method::DELETE,
            &format!("{cms}/pb-made"),
            pf::envelope(
                "v1",
                "DeleteOptions",
                k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions {
                    propagation_policy: Some("Background".into()),
                    ..Default::default()
                }
                .encode_to_vec(),
            ),
        ),
        watch(
            "watch from a resourceVersion too old, in protobuf",
            &format!("{cms}?watch=1&resourceVersion=1"),
            PROTOBUF_ANY,
            Read::FirstEvent,
        ),
        watch(
            "watch-list of ConfigMaps in protobuf",
            &format!("{cms}?{WATCH_LIST}"),
            PROTOBUF_ANY,
            Read::InitialEvents,
        ),
    ]
}

/// A ConfigMap `name` in namespace demo as client-go's typed client encodes it.
fn config_map_body(name: &str) -> Vec<u8> {
    let config_map = k8s_pb::api::core::v1::ConfigMap {
        metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            ..Default::default()
        }),
        data: [("k".to_string(), "v".to_string())].into(),
        ..Default::default()
    };
    pf::envelope("v1", "ConfigMap", config_map.encode_to_vec())
}

async fn resource_version(target: &Target, path: &str) -> String {
    let object: Value = target
        .http
        .get(format!("{}{path}", target.url))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The normalized answer.
async fn answer(target: &Target, probe: &Probe) -> Value {
    let mut request = target
        .http
        .request(
            probe.method.clone(),
            format!("{}{}", target.url, probe.path),
        )
        .header("accept", probe.accept);
    request = match &probe.body {
        None => request,
        Some(Body::Fixed(content_type, text)) => request
            .header("content-type", *content_type)
            .body(text.clone()),
        Some(Body::Bytes(content_type, bytes)) => request
            .header("content-type", *content_type)
            .body(bytes.clone()),
        Some(Body::OwnResourceVersion) => {
            let rv = resource_version(target, &probe.path).await;
            request
                .header("content-type", MERGE)
                .body(json!({"metadata": {"resourceVersion": rv}}).to_string())
        }
    };
    let response = request.send().await.expect("request");
    let code = response.status().as_u16();
    let headers = response.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    let etag = headers.contains_key("etag");
    let mut shape = json!({"code": code, "contentType": content_type, "etag": etag});
    if content_type == pf::PROTOBUF {
        return protobuf_shape(shape, response, probe.read).await;
    }
    if probe.read == Read::InitialEvents {
        shape["events"] = json!(initial_events(response).await);
        return shape;
    }
    let bytes = match probe.read {
        Read::FirstEvent => first_line(response).await,
        _ => response.bytes().await.expect("body").to_vec(),
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value) if probe.read == Read::FirstEvent => {
            shape["event"] = json!(value["type"]);
            shape["object"] = body_shape(&value["object"]);
        }
        Ok(value) => shape["body"] = body_shape(&value),
        Err(_) => shape["text"] = json!(String::from_utf8_lossy(&bytes).trim()),
    }
    shape
}

/// A watch-list's events, normalized, up to and including its bookmark (or an ERROR, or the
/// end of the stream, or a 5 s limit): the type, the object's shape, and a bookmark's
/// annotations (`k8s.io/initial-events-end`).
async fn initial_events(response: reqwest::Response) -> Vec<Value> {
    let mut stream = response.bytes_stream();
    let mut buffer = Vec::new();
    let mut events = Vec::new();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                    events.push(json!({"text": String::from_utf8_lossy(&line).trim()}));
                    return;
                };
                let mut shape =
                    json!({"type": event["type"], "object": body_shape(&event["object"])});
                if event["type"] == "BOOKMARK" {
                    shape["annotations"] = event["object"]["metadata"]["annotations"].clone();
                }
                events.push(shape);
                if event["type"] == "BOOKMARK" || event["type"] == "ERROR" {
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .is_err()
    {
        events.push(json!("no bookmark within 5 s"));
    }
    events
}

/// A protobuf answer: its fields with what differs by nature masked (`support/protobuf_fields`),
/// or, for a watch, each frame's up to the first (FirstEvent) or up to the bookmark that ends
/// the initial events (InitialEvents) or an ERROR, within 5 s.
async fn protobuf_shape(mut shape: Value, response: reqwest::Response, read: Read) -> Value {
    let as_json = |fields: pf::Fields| json!(Masking::masked(fields));
    if read == Read::Body {
        let bytes = response.bytes().await.expect("body");
        shape["fields"] = match pf::body_fields(&bytes) {
            Ok(fields) => as_json(fields),
            Err(err) => json!(err),
        };
        return shape;
    }
    let mut stream = response.bytes_stream();
    let mut buffer = Vec::new();
    let mut events = Vec::new();
    let read_frames = async {
        while let Some(Ok(chunk)) = stream.next().await {
            buffer.extend_from_slice(&chunk);
            while let Some((prefix, rest)) = buffer.split_first_chunk::<4>() {
                let length = u32::from_be_bytes(*prefix) as usize;
                if rest.len() < length {
                    break;
                }
                let frame: Vec<u8> = buffer.drain(..4 + length).skip(4).collect();
                let fields = match pf::frame_fields(&frame) {
                    Ok(fields) => fields,
                    Err(err) => {
                        events.push(json!(err));
                        return;
                    }
                };
                let kind = fields.get("type").cloned().unwrap_or_default();
                events.push(as_json(fields));
                if read == Read::FirstEvent || kind == "\"BOOKMARK\"" || kind == "\"ERROR\"" {
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(5), read_frames)
        .await
        .is_err()
    {
        events.push(json!("nothing more within 5 s"));
    }
    shape["frames"] = json!(events);
    shape
}

/// The first line of a watch stream (its first event), or what came before a 5 s limit.
async fn first_line(response: reqwest::Response) -> Vec<u8> {
    let mut stream = response.bytes_stream();
    let mut line = Vec::new();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            line.extend_from_slice(&chunk);
            if let Some(end) = line.iter().position(|b| *b == b'\n') {
                line.truncate(end);
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    line
}

/// What clients read of a body.
fn body_shape(value: &Value) -> Value {
    let mut shape = json!({"kind": value["kind"], "apiVersion": value["apiVersion"]});
    if value["kind"] == "Status" {
        shape["status"] = value["status"].clone();
        shape["reason"] = value["reason"].clone();
        shape["code"] = value["code"].clone();
        shape["message"] = value["message"].clone();
        shape["details"] = value["details"].clone();
    }
    if value["kind"] == "APIGroupDiscoveryList" {
        // The double serves fewer groups: compare the ones both serve the test's kinds in.
        shape["groups"] = json!(
            value["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| ["", "example.test"].contains(&g["metadata"]["name"].as_str().unwrap_or("")))
                .map(|g| json!({
                    "name": g["metadata"]["name"],
                    "versions": g["versions"].as_array().into_iter().flatten().map(|v| json!({
                        "version": v["version"],
                        "freshness": v["freshness"],
                        "resources": v["resources"].as_array().into_iter().flatten()
                            .filter(|r| ["configmaps", "widgets"].contains(&r["resource"].as_str().unwrap_or("")))
                            .cloned()
                            .collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                }))
                .collect::<Vec<_>>()
        );
        return shape;
    }
    if let Some(items) = value.get("items") {
        shape["items"] = match items {
            Value::Array(list) => json!({
                "len": list.len(),
                "firstKind": list.first().map(|i| i["kind"].clone()),
                "firstApiVersion": list.first().map(|i| i["apiVersion"].clone()),
            }),
            other => other.clone(),
        };
        let mut keys: Vec<&String> = value["metadata"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        keys.sort();
        shape["listMetadata"] = json!(keys);
        if let Some(remaining) = value["metadata"].get("remainingItemCount") {
            shape["remainingItemCount"] = remaining.clone();
        }
    }
    if value["kind"] == "Table" {
        shape["columns"] = json!(
            value["columnDefinitions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["name"].clone())
                .collect::<Vec<_>>()
        );
        shape["rows"] = json!(value["rows"].as_array().map_or(0, Vec::len));
    }
    if value["kind"] == "APIResourceList" {
        shape["resources"] = json!(
            value["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| ["configmaps", "widgets"].contains(&r["name"].as_str().unwrap_or("")))
                .map(|r| json!({"name": r["name"], "hash": r["storageVersionHash"], "verbs": r["verbs"], "namespaced": r["namespaced"]}))
                .collect::<Vec<_>>()
        );
    }
    if value["kind"] == "ConfigMap" || value["kind"] == "PartialObjectMetadata" {
        shape["name"] = value["metadata"]["name"].clone();
    }
    shape
}
