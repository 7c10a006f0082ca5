//! Tests of the kube-apiserver test double (`tests/support/kube-double`): every faked
//! behaviour, over real HTTP, driven by plain requests (to check the wire format against the
//! recordings in ../shared/kube-apiserver-recordings/) and by the real `kube` client.

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

// ---------------------------------------------------------------------------------------------
// Helpers
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
    double
        .create_crd(crd_manifest("example.test", "widgets", "Widget", &["v1", "v2"]))
        .unwrap();
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
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&self.body))
        })
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
async fn read_events(resp: reqwest::Response, mut done: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
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

// ---------------------------------------------------------------------------------------------
// Discovery (recordings 00-03b)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn legacy_discovery_documents_follow_kube_apiserver() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);

    let api = http.get("/api").await;
    assert_eq!(api.status, 200);
    assert_eq!(api.header("cache-control"), Some("no-cache, private"));
    let api = api.json();
    assert_eq!(api["kind"], "APIVersions");
    assert_eq!(api["versions"], json!(["v1"]));
    assert_eq!(
        api["serverAddressByClientCIDRs"][0]["serverAddress"],
        double.addr().to_string()
    );

    let groups = http.get("/apis").await.json();
    assert_eq!(groups["kind"], "APIGroupList");
    let example = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "example.test")
        .unwrap();
    // v2 sorts above v1 and is preferred (recording 01).
    assert_eq!(example["versions"][0]["groupVersion"], "example.test/v2");
    assert_eq!(example["preferredVersion"]["version"], "v2");

    let core = http.get("/api/v1").await.json();
    assert_eq!(core["kind"], "APIResourceList");
    assert!(core.get("apiVersion").is_none(), "core list has no apiVersion (03a)");
    let resources = core["resources"].as_array().unwrap();
    let by_name = |n: &str| resources.iter().find(|r| r["name"] == n).cloned().unwrap();
    assert_eq!(by_name("configmaps")["storageVersionHash"], "qFsyl6wFWjQ=");
    assert_eq!(by_name("secrets")["storageVersionHash"], "S6u1pOWzb84=");
    assert_eq!(by_name("namespaces")["storageVersionHash"], "Q3oi5N2YM8M=");
    assert_eq!(by_name("configmaps")["shortNames"], json!(["cm"]));
    let status = by_name("namespaces/status");
    assert_eq!(status["singularName"], "");
    assert!(status.get("storageVersionHash").is_none());

    let apps = http.get("/apis/apps/v1").await.json();
    assert_eq!(apps["apiVersion"], "v1");
    assert_eq!(apps["groupVersion"], "apps/v1");
    let group = http.get("/apis/example.test").await.json();
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(group["preferredVersion"]["groupVersion"], "example.test/v2");

    // Unknown group or resource: plain text, not a Status (09c).
    for path in ["/apis/nosuch.group/v1/namespaces/demo/things/x", "/apis/example.test/v1/namespaces/demo/gadgets/x"] {
        let r = http.get(path).await;
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.body, b"404 page not found\n");
    }

    // Pretty printing for curl (00).
    let pretty = http.send("GET", "/api", &[("User-Agent", "curl/7.88.1")], None).await;
    assert!(String::from_utf8_lossy(&pretty.body).contains("\n  \"kind\": \"APIVersions\""));
}

#[tokio::test]
async fn aggregated_discovery_has_etags_and_304s() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);

    let first = http.get_accept("/apis", AGGREGATED).await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("content-type"),
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    );
    assert_eq!(first.header("cache-control"), Some("public"));
    assert_eq!(first.header("vary"), Some("Accept"));
    let etag = first.header("etag").unwrap().to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"') && etag.len() == 130, "{etag}");
    let doc = first.json();
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    let example = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "example.test")
        .unwrap();
    assert_eq!(example["versions"][0]["version"], "v2");
    let res = &example["versions"][0]["resources"][0];
    assert_eq!(res["responseKind"], json!({"group": "example.test", "version": "v2", "kind": "Widget"}));
    assert_eq!(res["verbs"], json!(["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]));

    let cached = http
        .send("GET", "/apis", &[("Accept", AGGREGATED), ("If-None-Match", &etag)], None)
        .await;
    assert_eq!(cached.status, 304);
    assert!(cached.body.is_empty());
    assert_eq!(cached.header("etag"), Some(etag.as_str()));

    let unquoted = etag.trim_matches('"').to_string();
    let full = http
        .send("GET", "/apis", &[("Accept", AGGREGATED), ("If-None-Match", &unquoted)], None)
        .await;
    assert_eq!(full.status, 200);

    let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    assert_eq!(http.get_accept("/apis", v2beta1).await.json()["kind"], "APIGroupList");

    // The core group: one item without a name, built-in responseKinds with empty group/version.
    let core = http.get_accept("/api", AGGREGATED).await;
    let core_etag = core.header("etag").unwrap().to_string();
    let core = core.json();
    assert_eq!(core["items"][0]["metadata"], json!({}));
    let cms = core["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "configmaps")
        .cloned()
        .unwrap();
    assert_eq!(cms["responseKind"], json!({"group": "", "version": "", "kind": "ConfigMap"}));
    let core_again = http
        .send("GET", "/api", &[("Accept", AGGREGATED), ("If-None-Match", &core_etag)], None)
        .await;
    assert_eq!(core_again.status, 304);

    // A new CRD changes the document, so the old ETag no longer matches.
    double
        .create_crd(crd_manifest("example.test", "gadgets", "Gadget", &["v1"]))
        .unwrap();
    let changed = http
        .send("GET", "/apis", &[("Accept", AGGREGATED), ("If-None-Match", &etag)], None)
        .await;
    assert_eq!(changed.status, 200);
    assert_ne!(changed.header("etag"), Some(etag.as_str()));
}

#[tokio::test]
async fn storage_version_hash_follows_the_storage_version() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let hash = |doc: Value, name: &str| {
        doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["storageVersionHash"].clone())
            .unwrap()
    };
    // Same hash in every served version: it names the storage version (03b).
    for v in ["v1", "v2"] {
        let doc = http.get(&format!("/apis/example.test/{v}")).await.json();
        assert_eq!(hash(doc, "widgets"), "zHyf2mNf1TY=");
    }
    double.set_storage_version("widgets.example.test", "v2").unwrap();
    for v in ["v1", "v2"] {
        let doc = http.get(&format!("/apis/example.test/{v}")).await.json();
        assert_eq!(hash(doc, "widgets"), "N5cUTqCK6wo=");
    }
    assert_eq!(double.storage_version_hash("widgets.example.test").as_deref(), Some("N5cUTqCK6wo="));

    // A built-in resource moves too, as after an upgrade.
    double.set_storage_version("configmaps", "v2").unwrap();
    let doc = http.get("/api/v1").await.json();
    assert_eq!(hash(doc, "configmaps"), kube_double::resources::storage_version_hash("", "v2", "ConfigMap"));
    assert_ne!(double.storage_version_hash("configmaps").as_deref(), Some("qFsyl6wFWjQ="));
}

#[tokio::test]
async fn the_kube_client_discovers_everything() {
    let double = start_with_widgets().await;
    let client = kube_client(&double).await;
    for discovery in [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone()).run_aggregated().await.unwrap(),
    ] {
        let (ar, caps) = discovery
            .resolve_gvk(&GroupVersionKind::gvk("example.test", "v2", "Widget"))
            .expect("widgets are discovered");
        assert_eq!(ar.plural, "widgets");
        assert!(caps.supports_operation("list"));
        assert!(discovery.has_group("apps"));
        assert!(discovery.has_group("coordination.k8s.io"));
        assert!(discovery.has_group("internal.apiserver.k8s.io"));
        assert!(
            discovery
                .resolve_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
                .is_some()
        );
        assert_eq!(
            discovery.get("example.test").unwrap().preferred_version_or_latest(),
            "v2"
        );
    }
}
