//! Tests of the kube-apiserver test double (`tests/support/kube-double`): every faked
//! behaviour, over real HTTP, driven by plain requests (to check the wire format against the
//! recordings in tests/fixtures/recordings/) and by the real `kube` client.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion;
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::Discovery;
use kube::runtime::watcher;
use kube_double::apiservers::identity_lease_name;
use kube_double::{AccessRule, Fault, FaultRule, KubeDouble, TokenUser, crd_manifest};
use serde_json::{Value, json};

mod apiservers;
mod auth;
mod bad_input;
mod counters;
mod discovery;
mod faults;
mod https;
mod kinds;
mod list;
mod objects;
use svm_test_support::{protobuf_fields, recordings};
mod protobuf_replay;
mod replay;
mod scale;
mod watch;
mod writes;

// ---------------------------------------------------------------------------------------------
// Helpers shared by the sections
// ---------------------------------------------------------------------------------------------

const AGGREGATED: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const METADATA_ONE: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const WIDGETS: &str = "/apis/example.test/v1/namespaces/demo/widgets";
/// Liveness guard for streams: a test fails instead of hanging if an event never comes.
const GUARD: Duration = Duration::from_secs(30);

async fn start() -> KubeDouble {
    KubeDouble::start().await.expect("the double starts")
}

/// A double with namespace `demo` and the widgets CRD (v1 storage, v2 served).
async fn start_with_widgets() -> KubeDouble {
    let double = start().await;
    double.ensure_namespace("demo").unwrap();
    double.create_crd(kube_double::crd::widgets()).unwrap();
    double
}

async fn kube_client(double: &KubeDouble) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(&double.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn widget_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.test", version, "Widget"),
        "widgets",
    )
}

fn widget(name: &str, size: i64) -> Value {
    json!({
        "apiVersion": "example.test/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"color": "blue", "size": size}
    })
}

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Plain HTTP requests with the recordings' User-Agent.
struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    fn new(double: &KubeDouble) -> Self {
        Self {
            client: reqwest::Client::builder()
                .user_agent("kube-recorder/1.0")
                .build()
                .unwrap(),
            base: double.url(),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let resp = req.send().await.expect("request completes");
        Reply {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.bytes().await.unwrap().to_vec(),
        }
    }

    async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[], None).await
    }

    async fn get_accept(&self, path: &str, accept: &str) -> Reply {
        self.send("GET", path, &[("Accept", accept)], None).await
    }

    async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    async fn put(&self, path: &str, body: &Value) -> Reply {
        self.send(
            "PUT",
            path,
            &[("Content-Type", "application/json")],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    async fn patch(&self, path: &str, content_type: &str, body: &Value) -> Reply {
        self.send(
            "PATCH",
            path,
            &[("Content-Type", content_type)],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    async fn merge_patch(&self, path: &str, body: &Value) -> Reply {
        self.patch(path, "application/merge-patch+json", body).await
    }

    async fn delete(&self, path: &str) -> Reply {
        self.send("DELETE", path, &[], None).await
    }
}

fn decode_token(token: &str) -> Value {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

fn kube_status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other}"),
    }
}

/// Reads newline-delimited watch events until `done` says stop or the stream ends.
async fn read_events(
    resp: reqwest::Response,
    mut done: impl FnMut(&[Value]) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    let mut buf = Vec::new();
    let mut stream = resp.bytes_stream();
    let collected = tokio::time::timeout(GUARD, async {
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk.unwrap());
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                events.push(serde_json::from_slice::<Value>(&line).unwrap());
                if done(&events) {
                    return;
                }
            }
        }
    })
    .await;
    assert!(collected.is_ok(), "watch stalled; got {events:?}");
    events
}

async fn watch_request(double: &KubeDouble, path_and_query: &str) -> reqwest::Response {
    let resp = reqwest::Client::new()
        .get(format!("{}{path_and_query}", double.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_string())
        .collect()
}
