//! The protobuf wire format (`application/vnd.kubernetes.protobuf`) as client-go's typed
//! clients and kube-controller-manager speak it, against the real binary over HTTPS: every
//! verb in every served version, the metadata client's forms, protobuf Statuses, and bad
//! protobuf bodies answered with a Status that changes nothing.
//!
//! Request bodies are assembled here from k8s-pb's messages (upstream's generated.proto) and a
//! copy of upstream's v1alpha1 messages of the test's own, not with the server's encoders, so
//! a wrong field number on either side fails. The real kube-controller-manager is the other
//! witness (tests/real_cluster).

use k8s_pb::api::storagemigration::v1beta1 as svm_pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta_pb;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::server::{Backend, ServerProcess};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What client-go's typed clients send when they prefer protobuf.
const CLIENT_GO_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";
/// What client-go's metadata client sends on a list and a watch.
const METADATA_LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// What client-go's metadata client sends on a get, a patch and a watch.
const METADATA_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const GROUP: &str = "storagemigration.k8s.io";

/// Upstream's v1alpha1 messages (k8s.io/api/storagemigration/v1alpha1/generated.proto,
/// Kubernetes 1.30–1.34), which k8s-pb no longer carries: the test's own copy.
mod alpha {
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta_pb;

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct StorageVersionMigration {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<meta_pb::ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<Spec>,
        #[prost(message, optional, tag = "3")]
        pub status: Option<Status>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct StorageVersionMigrationList {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<meta_pb::ListMeta>,
        #[prost(message, repeated, tag = "2")]
        pub items: Vec<StorageVersionMigration>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Spec {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<GroupVersionResource>,
        #[prost(string, optional, tag = "2")]
        pub continue_token: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GroupVersionResource {
        #[prost(string, optional, tag = "1")]
        pub group: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub version: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub resource: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Status {
        #[prost(message, repeated, tag = "1")]
        pub conditions: Vec<MigrationCondition>,
        #[prost(string, optional, tag = "2")]
        pub resource_version: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct MigrationCondition {
        #[prost(string, optional, tag = "1")]
        pub r#type: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub status: Option<String>,
        #[prost(message, optional, tag = "3")]
        pub last_update_time: Option<meta_pb::Time>,
        #[prost(string, optional, tag = "4")]
        pub reason: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub message: Option<String>,
    }
}

/// A whole protobuf body: `k8s\0`, then a runtime.Unknown around the message.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

/// `(apiVersion, kind, message)` of a protobuf body.
fn open(body: &[u8]) -> (String, String, Vec<u8>) {
    let message = body.strip_prefix(b"k8s\0").expect("the protobuf magic");
    let unknown = Unknown::decode(message).expect("a runtime.Unknown envelope");
    let type_meta = unknown.type_meta.unwrap_or_default();
    (
        type_meta.api_version.unwrap_or_default(),
        type_meta.kind.unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    )
}

/// The one shape the test handles in every version: the object's metadata, resource and
/// conditions (type, status, message), whatever the version's messages.
#[derive(Debug, Clone, Default, PartialEq)]
struct Migration {
    metadata: meta_pb::ObjectMeta,
    group: String,
    resource: String,
    conditions: Vec<(String, String, String)>,
}

impl Migration {
    fn new(name: &str) -> Migration {
        Migration {
            metadata: meta_pb::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            group: "apps".into(),
            resource: "deployments".into(),
            conditions: Vec::new(),
        }
    }

    fn encode(&self, version: &str) -> Vec<u8> {
        let raw = if version == "v1alpha1" {
            alpha::StorageVersionMigration {
                metadata: Some(self.metadata.clone()),
                spec: Some(alpha::Spec {
                    resource: Some(alpha::GroupVersionResource {
                        group: Some(self.group.clone()),
                        version: Some("v1".into()),
                        resource: Some(self.resource.clone()),
                    }),
                    continue_token: Some(String::new()),
                }),
                status: Some(alpha::Status {
                    conditions: self
                        .conditions
                        .iter()
                        .map(|(t, s, m)| alpha::MigrationCondition {
                            r#type: Some(t.clone()),
                            status: Some(s.clone()),
                            last_update_time: Some(now()),
                            reason: Some("Test".into()),
                            message: Some(m.clone()),
                        })
                        .collect(),
                    resource_version: Some(String::new()),
                }),
            }
            .encode_to_vec()
        } else {
            svm_pb::StorageVersionMigration {
                metadata: Some(self.metadata.clone()),
                spec: Some(svm_pb::StorageVersionMigrationSpec {
                    resource: Some(meta_pb::GroupResource {
                        group: Some(self.group.clone()),
                        resource: Some(self.resource.clone()),
                    }),
                }),
                status: Some(svm_pb::StorageVersionMigrationStatus {
                    conditions: self
                        .conditions
                        .iter()
                        .map(|(t, s, m)| meta_pb::Condition {
                            r#type: Some(t.clone()),
                            status: Some(s.clone()),
                            observed_generation: Some(1),
                            last_transition_time: Some(now()),
                            reason: Some("Test".into()),
                            message: Some(m.clone()),
                        })
                        .collect(),
                    resource_version: Some(String::new()),
                }),
            }
            .encode_to_vec()
        };
        envelope(
            &format!("{GROUP}/{version}"),
            "StorageVersionMigration",
            raw,
        )
    }

    fn decode(version: &str, raw: &[u8]) -> Migration {
        if version == "v1alpha1" {
            let m = alpha::StorageVersionMigration::decode(raw).expect("a v1alpha1 message");
            let resource = m.spec.unwrap_or_default().resource.unwrap_or_default();
            Migration {
                metadata: m.metadata.unwrap_or_default(),
                group: resource.group.unwrap_or_default(),
                resource: resource.resource.unwrap_or_default(),
                conditions: m
                    .status
                    .unwrap_or_default()
                    .conditions
                    .into_iter()
                    .map(|c| {
                        (
                            c.r#type.unwrap_or_default(),
                            c.status.unwrap_or_default(),
                            c.message.unwrap_or_default(),
                        )
                    })
                    .collect(),
            }
        } else {
            let m = svm_pb::StorageVersionMigration::decode(raw).expect("a v1beta1/v1 message");
            let resource = m.spec.unwrap_or_default().resource.unwrap_or_default();
            Migration {
                metadata: m.metadata.unwrap_or_default(),
                group: resource.group.unwrap_or_default(),
                resource: resource.resource.unwrap_or_default(),
                conditions: m
                    .status
                    .unwrap_or_default()
                    .conditions
                    .into_iter()
                    .map(|c| {
                        (
                            c.r#type.unwrap_or_default(),
                            c.status.unwrap_or_default(),
                            c.message.unwrap_or_default(),
                        )
                    })
                    .collect(),
            }
        }
    }

    fn decode_list(version: &str, raw: &[u8]) -> (meta_pb::ListMeta, Vec<Migration>) {
        if version == "v1alpha1" {
            let list = alpha::StorageVersionMigrationList::decode(raw).expect("a list");
            let items = list
                .items
                .into_iter()
                .map(|i| Migration::decode(version, &i.encode_to_vec()))
                .collect();
            (list.metadata.unwrap_or_default(), items)
        } else {
            let list = svm_pb::StorageVersionMigrationList::decode(raw).expect("a list");
            let items = list
                .items
                .into_iter()
                .map(|i| Migration::decode(version, &i.encode_to_vec()))
                .collect();
            (list.metadata.unwrap_or_default(), items)
        }
    }

    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

fn now() -> meta_pb::Time {
    meta_pb::Time {
        seconds: Some(1_790_000_000),
        nanos: Some(0),
    }
}

struct Answer {
    status: StatusCode,
    content_type: String,
    body: Vec<u8>,
}

impl Answer {
    /// The answer's protobuf Status.
    fn status_message(&self) -> meta_pb::Status {
        assert_eq!(self.content_type, PROTOBUF, "a protobuf Status");
        let (api_version, kind, raw) = open(&self.body);
        assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Status"));
        meta_pb::Status::decode(&raw[..]).expect("a Status message")
    }

    fn object(&self, version: &str) -> Migration {
        assert_eq!(self.content_type, PROTOBUF, "{}", self.text());
        let (api_version, kind, raw) = open(&self.body);
        assert_eq!(api_version, format!("{GROUP}/{version}"));
        assert_eq!(kind, "StorageVersionMigration");
        Migration::decode(version, &raw)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(
    client: &reqwest::Client,
    method: Method,
    url: String,
    accept: &str,
    body: Option<(&str, Vec<u8>)>,
) -> Answer {
    let mut request = client.request(method, url).header("Accept", accept);
    if let Some((content_type, bytes)) = body {
        request = request.header("Content-Type", content_type).body(bytes);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = response.bytes().await.expect("a body").to_vec();
    Answer {
        status,
        content_type,
        body,
    }
}

/// The events of a protobuf watch: `(type, apiVersion, kind, message)` per frame.
struct Frames {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Frames {
    async fn next(&mut self) -> Option<(String, String, String, Vec<u8>)> {
        loop {
            if self.buffer.len() >= 4 {
                let length = u32::from_be_bytes([
                    self.buffer[0],
                    self.buffer[1],
                    self.buffer[2],
                    self.buffer[3],
                ]) as usize;
                if self.buffer.len() >= 4 + length {
                    let frame: Vec<u8> = self.buffer.drain(..4 + length).skip(4).collect();
                    let event = meta_pb::WatchEvent::decode(&frame[..]).expect("a WatchEvent");
                    let object = event.object.and_then(|o| o.raw).unwrap_or_default();
                    let (api_version, kind, raw) = open(&object);
                    return Some((event.r#type.unwrap_or_default(), api_version, kind, raw));
                }
            }
            let chunk =
                tokio::time::timeout(std::time::Duration::from_secs(10), self.response.chunk())
                    .await
                    .expect("a watch event within 10 s")
                    .expect("the watch stream")?;
            self.buffer.extend_from_slice(&chunk);
        }
    }
}

async fn watch(client: &reqwest::Client, url: String, accept: &str) -> Frames {
    let response = client
        .get(url)
        .header("Accept", accept)
        .send()
        .await
        .expect("a watch");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    Frames {
        response,
        buffer: Vec::new(),
    }
}

/// create, get, update, `/status`, list, watch (and watch-list), the metadata client's list,
/// and delete with a protobuf DeleteOptions, in each served version; then the 404 Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_speaks_protobuf_in_every_version() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    for version in ["v1", "v1beta1", "v1alpha1"] {
        let collection = format!(
            "{}/apis/{GROUP}/{version}/storageversionmigrations",
            server.url
        );
        let name = format!("pb-{version}");
        let item = format!("{collection}/{name}");

        let created = send(
            &client,
            Method::POST,
            collection.clone(),
            CLIENT_GO_ACCEPT,
            Some((PROTOBUF, Migration::new(&name).encode(version))),
        )
        .await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
        let created = created.object(version);
        assert_eq!(created.name(), name);
        assert_eq!(
            (created.group.as_str(), created.resource.as_str()),
            ("apps", "deployments")
        );
        let uid = created.metadata.uid.clone().expect("a uid");
        assert_eq!(created.metadata.generation, Some(1));

        let got = send(&client, Method::GET, item.clone(), CLIENT_GO_ACCEPT, None).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(
            got.object(version).metadata.uid.as_deref(),
            Some(uid.as_str())
        );

        // Update: a label added; the status part of an update is ignored.
        let mut labelled = got.object(version);
        labelled
            .metadata
            .labels
            .insert("team".into(), "storage".into());
        let updated = send(
            &client,
            Method::PUT,
            item.clone(),
            CLIENT_GO_ACCEPT,
            Some((PROTOBUF, labelled.encode(version))),
        )
        .await;
        assert_eq!(updated.status, StatusCode::OK, "{}", updated.text());
        let updated = updated.object(version);
        assert_eq!(
            updated.metadata.labels.get("team").map(String::as_str),
            Some("storage")
        );

        // Watch from here, then write the status: the watcher sees it.
        let rv = updated
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let mut frames = watch(
            &client,
            format!("{collection}?watch=true&resourceVersion={rv}"),
            CLIENT_GO_ACCEPT,
        )
        .await;
        let mut running = updated.clone();
        running.conditions = vec![("Running".into(), "True".into(), "migrated 0".into())];
        let status = send(
            &client,
            Method::PUT,
            format!("{item}/status"),
            CLIENT_GO_ACCEPT,
            Some((PROTOBUF, running.encode(version))),
        )
        .await;
        assert_eq!(status.status, StatusCode::OK, "{}", status.text());
        let status = status.object(version);
        assert_eq!(
            status.conditions,
            vec![("Running".into(), "True".into(), "migrated 0".into())]
        );
        let (event, api_version, kind, raw) = frames.next().await.expect("an event");
        assert_eq!(event, "MODIFIED");
        assert_eq!(
            (api_version, kind),
            (
                format!("{GROUP}/{version}"),
                "StorageVersionMigration".into()
            )
        );
        assert_eq!(
            Migration::decode(version, &raw).conditions,
            status.conditions
        );

        let listed = send(
            &client,
            Method::GET,
            collection.clone(),
            CLIENT_GO_ACCEPT,
            None,
        )
        .await;
        assert_eq!(listed.status, StatusCode::OK);
        let (api_version, kind, raw) = open(&listed.body);
        assert_eq!(api_version, format!("{GROUP}/{version}"));
        assert_eq!(kind, "StorageVersionMigrationList");
        let (list_meta, items) = Migration::decode_list(version, &raw);
        assert!(list_meta.resource_version.is_some_and(|rv| !rv.is_empty()));
        assert!(
            items
                .iter()
                .any(|i| i.name() == name && i.conditions == status.conditions)
        );

        // A watch-list: the initial events, then the bookmark that ends them.
        let mut frames = watch(
            &client,
            format!(
                "{collection}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
            ),
            CLIENT_GO_ACCEPT,
        )
        .await;
        let mut initial = Vec::new();
        loop {
            let (event, _, _, raw) = frames.next().await.expect("an event");
            if event == "BOOKMARK" {
                let bookmark = Migration::decode(version, &raw);
                assert_eq!(
                    bookmark
                        .metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                break;
            }
            assert_eq!(event, "ADDED");
            initial.push(Migration::decode(version, &raw).name().to_string());
        }
        assert!(initial.contains(&name), "{initial:?}");

        // The metadata client: PartialObjectMetadataList in protobuf.
        let metadata = send(
            &client,
            Method::GET,
            collection.clone(),
            METADATA_LIST_ACCEPT,
            None,
        )
        .await;
        assert_eq!(metadata.content_type, PROTOBUF);
        let (api_version, kind, raw) = open(&metadata.body);
        assert_eq!(
            (api_version.as_str(), kind.as_str()),
            ("meta.k8s.io/v1", "PartialObjectMetadataList")
        );
        let list = meta_pb::PartialObjectMetadataList::decode(&raw[..]).expect("a metadata list");
        assert!(
            list.items.iter().any(|i| {
                i.metadata.as_ref().and_then(|m| m.uid.as_deref()) == Some(uid.as_str())
            })
        );

        // Delete with a protobuf DeleteOptions naming the uid.
        let options = meta_pb::DeleteOptions {
            preconditions: Some(meta_pb::Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let deleted = send(
            &client,
            Method::DELETE,
            item.clone(),
            CLIENT_GO_ACCEPT,
            Some((
                PROTOBUF,
                envelope("meta.k8s.io/v1", "DeleteOptions", options.encode_to_vec()),
            )),
        )
        .await;
        assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text());
        assert_eq!(deleted.content_type, PROTOBUF);

        let gone = send(&client, Method::GET, item.clone(), CLIENT_GO_ACCEPT, None).await;
        assert_eq!(gone.status, StatusCode::NOT_FOUND);
        let status = gone.status_message();
        assert_eq!(status.reason.as_deref(), Some("NotFound"));
        assert_eq!(status.code, Some(404));
        assert_eq!(
            status.details.and_then(|d| d.name),
            Some(name.clone()),
            "{version}"
        );
    }
}

/// A 422 in protobuf carries its causes; a kind without messages (StorageState) is JSON, as
/// kube-apiserver serves a custom resource, while its metadata forms still speak protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_and_kinds_without_messages() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let base = &server.url;
    let collection = format!("{base}/apis/{GROUP}/v1/storageversionmigrations");

    let mut invalid = Migration::new("invalid");
    invalid.resource = String::new();
    let answer = send(
        &client,
        Method::POST,
        collection.clone(),
        CLIENT_GO_ACCEPT,
        Some((PROTOBUF, invalid.encode("v1"))),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    let status = answer.status_message();
    assert_eq!(status.reason.as_deref(), Some("Invalid"));
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert!(
        causes
            .iter()
            .any(|c| c.field.as_deref() == Some("spec.resource.resource")),
        "{causes:?}"
    );

    // The metadata client's Accept: an error is JSON (the `as=` forms do not apply to errors).
    let missing = send(
        &client,
        Method::GET,
        format!("{collection}/missing"),
        METADATA_LIST_ACCEPT,
        None,
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.content_type, "application/json");

    let states = format!("{base}/apis/{GROUP}/v1/storagestates");
    let state = json!({
        "apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageState",
        "metadata": {"name": "deployments.apps"},
        "spec": {"resource": {"group": "apps", "resource": "deployments"}}
    });
    let created = client.post(&states).json(&state).send().await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let json_fallback = send(&client, Method::GET, states.clone(), CLIENT_GO_ACCEPT, None).await;
    assert_eq!(json_fallback.status, StatusCode::OK);
    assert_eq!(json_fallback.content_type, "application/json");
    let only_protobuf = send(&client, Method::GET, states.clone(), PROTOBUF, None).await;
    assert_eq!(only_protobuf.status, StatusCode::NOT_ACCEPTABLE);
    let metadata = send(
        &client,
        Method::GET,
        states.clone(),
        METADATA_LIST_ACCEPT,
        None,
    )
    .await;
    assert_eq!(metadata.content_type, PROTOBUF);
    let (_, kind, raw) = open(&metadata.body);
    assert_eq!(kind, "PartialObjectMetadataList");
    let list = meta_pb::PartialObjectMetadataList::decode(&raw[..]).expect("a metadata list");
    assert_eq!(list.items.len(), 1);
    // client-go's metadata client patches with the singular metadata Accept: the answer is a
    // PartialObjectMetadata in protobuf, for any kind (recording 20d, steps 3 and 8).
    let patched = send(
        &client,
        Method::PATCH,
        format!("{states}/deployments.apps"),
        METADATA_ACCEPT,
        Some((
            "application/merge-patch+json",
            br#"{"metadata":{"labels":{"gc":"seen"}}}"#.to_vec(),
        )),
    )
    .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text());
    assert_eq!(patched.content_type, PROTOBUF);
    let (api_version, kind, raw) = open(&patched.body);
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    let object = meta_pb::PartialObjectMetadata::decode(&raw[..]).expect("metadata");
    let labels = object.metadata.unwrap_or_default().labels;
    assert_eq!(labels.get("gc").map(String::as_str), Some("seen"));
    let refused = send(
        &client,
        Method::POST,
        states.clone(),
        CLIENT_GO_ACCEPT,
        Some((
            PROTOBUF,
            envelope("storagemigration.k8s.io/v1", "StorageState", vec![]),
        )),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A protobuf DeleteOptions is read for every kind (the namespace and garbage collectors
    // send one).
    let options = meta_pb::DeleteOptions {
        propagation_policy: Some("Background".into()),
        ..Default::default()
    };
    let deleted = send(
        &client,
        Method::DELETE,
        format!("{states}/deployments.apps"),
        METADATA_LIST_ACCEPT,
        Some((
            PROTOBUF,
            envelope("meta.k8s.io/v1", "DeleteOptions", options.encode_to_vec()),
        )),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text());
}

/// A protobuf body that must be refused, and how.
struct BadBody {
    what: &'static str,
    method: Method,
    url: String,
    body: Vec<u8>,
    code: u16,
    reason: &'static str,
    /// The start of the Status message (kube-apiserver's texts, recordings 20g and 20h).
    message: &'static str,
}

/// Every bad protobuf body gets a Status in protobuf, and nothing changes: the collection, and
/// the revision it is read at, are as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_protobuf_bodies_get_a_status_and_change_nothing() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let collection = format!("{}/apis/{GROUP}/v1/storageversionmigrations", server.url);
    let created = send(
        &client,
        Method::POST,
        collection.clone(),
        CLIENT_GO_ACCEPT,
        Some((PROTOBUF, Migration::new("existing").encode("v1"))),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let item = format!("{collection}/existing");
    let snapshot = || async {
        let listed = send(
            &client,
            Method::GET,
            collection.clone(),
            CLIENT_GO_ACCEPT,
            None,
        )
        .await;
        let (_, _, raw) = open(&listed.body);
        Migration::decode_list("v1", &raw)
    };
    let before = snapshot().await;

    let good = Migration::new("new").encode("v1");
    // Wire type 7 does not exist.
    let mut bad_wire_type = good.clone();
    bad_wire_type.push(0x0f);
    let secret = envelope("v1", "Secret", vec![0x0a, 0x03, 0x0a, 0x01, b's']);
    let beta_at_v1 = Migration::new("beta").encode("v1beta1");
    let too_large = vec![b'k'; 4 << 20];
    const UNRECOGNIZED: &str =
        "the object provided is unrecognized (must be of type StorageVersionMigration): ";
    let bad = |what, method, url: &String, body, code, reason, message| BadBody {
        what,
        method,
        url: url.clone(),
        body,
        code,
        reason,
        message,
    };
    let post = Method::POST;
    let cases = [
        bad(
            "empty",
            post.clone(),
            &collection,
            vec![],
            400,
            "BadRequest",
            "the object provided is unrecognized (must be of type StorageVersionMigration): empty data (<empty>)",
        ),
        bad(
            "no magic",
            post.clone(),
            &collection,
            b"{\"kind\":\"StorageVersionMigration\"}".to_vec(),
            400,
            "BadRequest",
            "the object provided is unrecognized (must be of type StorageVersionMigration): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] ({\"kind\"",
        ),
        bad(
            "only the magic",
            post.clone(),
            &collection,
            b"k8s\0".to_vec(),
            400,
            "BadRequest",
            "the object provided is unrecognized (must be of type StorageVersionMigration): empty body (6b387300)",
        ),
        bad(
            "truncated",
            post.clone(),
            &collection,
            good[..good.len() / 2].to_vec(),
            400,
            "BadRequest",
            UNRECOGNIZED,
        ),
        bad(
            "a length past the end",
            post.clone(),
            &collection,
            vec![b'k', b'8', b's', 0, 0x12, 0xff, 0xff, 0xff, 0x7f],
            400,
            "BadRequest",
            UNRECOGNIZED,
        ),
        bad(
            "a wire type that does not exist",
            post.clone(),
            &collection,
            bad_wire_type,
            400,
            "BadRequest",
            UNRECOGNIZED,
        ),
        bad(
            "a message cut inside the envelope's raw",
            post.clone(),
            &collection,
            envelope(
                "storagemigration.k8s.io/v1",
                "StorageVersionMigration",
                vec![0x0a, 0x7f, 0x0a],
            ),
            400,
            "BadRequest",
            "StorageVersionMigration in version \"v1\" cannot be handled as a StorageVersionMigration: ",
        ),
        bad(
            "another kind",
            post.clone(),
            &collection,
            secret,
            400,
            "BadRequest",
            "Secret in version \"v1\" cannot be handled as a StorageVersionMigration: no kind \"Secret\" is registered for version \"v1\"",
        ),
        bad(
            "another version",
            post.clone(),
            &collection,
            beta_at_v1,
            400,
            "BadRequest",
            "the API version in the data (storagemigration.k8s.io/v1beta1) does not match the expected API version (storagemigration.k8s.io/v1)",
        ),
        bad(
            "too large",
            post.clone(),
            &collection,
            too_large,
            413,
            "RequestEntityTooLarge",
            "Request entity too large",
        ),
        bad(
            "protobuf patch",
            Method::PATCH,
            &item,
            good.clone(),
            415,
            "UnsupportedMediaType",
            "415: Unsupported Media Type",
        ),
        bad(
            "bad DeleteOptions",
            Method::DELETE,
            &item,
            envelope("meta.k8s.io/v1", "DeleteOptions", vec![0x12, 0x05, 0x0a]),
            400,
            "BadRequest",
            "the object provided is unrecognized (must be of type DeleteOptions): ",
        ),
        bad(
            "DeleteOptions of another kind",
            Method::DELETE,
            &item,
            envelope("v1", "Secret", vec![]),
            400,
            "BadRequest",
            "Secret in version \"v1\" cannot be handled as a DeleteOptions",
        ),
    ];
    for case in cases {
        let answer = send(
            &client,
            case.method,
            case.url,
            CLIENT_GO_ACCEPT,
            Some((PROTOBUF, case.body)),
        )
        .await;
        let what = case.what;
        assert_eq!(
            answer.status.as_u16(),
            case.code,
            "{what}: {}",
            answer.text()
        );
        let status = answer.status_message();
        assert_eq!(status.reason.as_deref(), Some(case.reason), "{what}");
        let message = status.message.unwrap_or_default();
        assert!(
            !message.is_empty() && message.starts_with(case.message),
            "{what}: {message:?} does not start with {:?}",
            case.message
        );
    }
    assert_eq!(snapshot().await, before, "nothing changed");
}

/// A body with an unknown field inside the message is created with the fields it knows, as
/// Go's decoder skips what it does not know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_inside_a_message_are_skipped() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let collection = format!(
        "{}/apis/{GROUP}/v1beta1/storageversionmigrations",
        server.url
    );
    let mut message = svm_pb::StorageVersionMigration {
        metadata: Some(meta_pb::ObjectMeta {
            name: Some("skips".into()),
            ..Default::default()
        }),
        spec: Some(svm_pb::StorageVersionMigrationSpec {
            resource: Some(meta_pb::GroupResource {
                group: Some(String::new()),
                resource: Some("configmaps".into()),
            }),
        }),
        status: None,
    }
    .encode_to_vec();
    // Field 42 (length-delimited) of the migration: no such field upstream.
    message.extend([0xd2, 0x02, 0x02, b'h', b'i']);
    let answer = send(
        &client,
        Method::POST,
        collection,
        CLIENT_GO_ACCEPT,
        Some((
            PROTOBUF,
            envelope(
                "storagemigration.k8s.io/v1beta1",
                "StorageVersionMigration",
                message,
            ),
        )),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    assert_eq!(answer.object("v1beta1").resource, "configmaps");
}

/// `status.progress` is our field, in no client's types: a status write without it keeps the
/// stored one, whatever the encoding (JSON, YAML, protobuf in upstream's messages, which have
/// no field 1000) and served version (docs/api.md). A bad protobuf body on `/status` is still
/// a protobuf Status and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_without_progress_keep_it_in_every_encoding() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let item = |version: &str| {
        format!(
            "{}/apis/{GROUP}/{version}/storageversionmigrations/kept",
            server.url
        )
    };
    let created = send(
        &client,
        Method::POST,
        format!("{}/apis/{GROUP}/v1/storageversionmigrations", server.url),
        CLIENT_GO_ACCEPT,
        Some((PROTOBUF, Migration::new("kept").encode("v1"))),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    let get_json = |version: &str| {
        let url = format!("{}/status", item(version));
        let client = client.clone();
        async move {
            let answer = send(&client, Method::GET, url, "application/json", None).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
            serde_json::from_slice::<serde_json::Value>(&answer.body).expect("JSON")
        }
    };
    // The migrator's checkpoint, written as JSON.
    let checkpoint =
        json!({"migratedObjects": 500, "remainingObjects": 500, "continueToken": "next"});
    let mut body = get_json("v1").await;
    body["status"]["progress"] = checkpoint.clone();
    let written = send(
        &client,
        Method::PUT,
        format!("{}/status", item("v1")),
        "application/json",
        Some(("application/json", body.to_string().into_bytes())),
    )
    .await;
    assert_eq!(written.status, StatusCode::OK, "{}", written.text());

    for version in ["v1", "v1beta1", "v1alpha1"] {
        // Each write changes a condition's message, so none is a no-op.
        let message = |encoding: &str| format!("written back in {encoding} at {version}");
        let time = if version == "v1alpha1" {
            "lastUpdateTime"
        } else {
            "lastTransitionTime"
        };
        for (encoding, content_type) in [("JSON", "application/json"), ("YAML", "application/yaml")]
        {
            let mut body = get_json(version).await;
            body["status"]
                .as_object_mut()
                .expect("status")
                .remove("progress");
            body["status"]["conditions"] = json!([{
                "type": "Running", "status": "True", "reason": "Test",
                "message": message(encoding), time: "2026-01-01T00:00:00Z",
            }]);
            let bytes = if encoding == "YAML" {
                serde_norway::to_string(&body).expect("YAML").into_bytes()
            } else {
                body.to_string().into_bytes()
            };
            let answer = send(
                &client,
                Method::PUT,
                format!("{}/status", item(version)),
                "application/json",
                Some((content_type, bytes)),
            )
            .await;
            assert_eq!(
                answer.status,
                StatusCode::OK,
                "{encoding} at {version}: {}",
                answer.text()
            );
            let stored = get_json("v1").await;
            assert_eq!(
                stored["status"]["progress"], checkpoint,
                "{encoding} at {version}"
            );
            assert_eq!(
                stored["status"]["conditions"][0]["message"],
                message(encoding),
                "{encoding} at {version}: the rest of the write is taken"
            );
        }

        // client-go's round trip: read in protobuf into upstream's messages, written back.
        let read = send(&client, Method::GET, item(version), CLIENT_GO_ACCEPT, None).await;
        let mut theirs = read.object(version);
        theirs.conditions = vec![("Running".into(), "True".into(), message("protobuf"))];
        let answer = send(
            &client,
            Method::PUT,
            format!("{}/status", item(version)),
            CLIENT_GO_ACCEPT,
            Some((PROTOBUF, theirs.encode(version))),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "protobuf at {version}: {}",
            answer.text()
        );
        let stored = get_json("v1").await;
        assert_eq!(
            stored["status"]["progress"], checkpoint,
            "protobuf at {version}"
        );
        assert_eq!(
            stored["status"]["conditions"][0]["message"],
            message("protobuf")
        );
    }

    // A bad body on /status: a Status, and the checkpoint and the object as they were.
    let before = get_json("v1").await;
    let read = send(
        &client,
        Method::GET,
        item("v1beta1"),
        CLIENT_GO_ACCEPT,
        None,
    )
    .await;
    let good = read.object("v1beta1").encode("v1beta1");
    for (what, body) in [
        ("truncated", good[..good.len() / 2].to_vec()),
        ("no magic", b"{\"status\":{}}".to_vec()),
        ("only the magic", b"k8s\0".to_vec()),
    ] {
        let answer = send(
            &client,
            Method::PUT,
            format!("{}/status", item("v1beta1")),
            CLIENT_GO_ACCEPT,
            Some((PROTOBUF, body)),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{what}: {}",
            answer.text()
        );
        let status = answer.status_message();
        assert_eq!(status.reason.as_deref(), Some("BadRequest"), "{what}");
        assert!(
            status
                .message
                .unwrap_or_default()
                .starts_with("the object provided is unrecognized"),
            "{what}"
        );
    }
    assert_eq!(get_json("v1").await, before, "nothing changed");
}
