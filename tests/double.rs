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
        .create_crd(crd_manifest(
            "example.test",
            "widgets",
            "Widget",
            &["v1", "v2"],
        ))
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
    assert!(
        core.get("apiVersion").is_none(),
        "core list has no apiVersion (03a)"
    );
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
    for path in [
        "/apis/nosuch.group/v1/namespaces/demo/things/x",
        "/apis/example.test/v1/namespaces/demo/gadgets/x",
    ] {
        let r = http.get(path).await;
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.body, b"404 page not found\n");
    }

    // Pretty printing for curl (00).
    let pretty = http
        .send("GET", "/api", &[("User-Agent", "curl/7.88.1")], None)
        .await;
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
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() == 130,
        "{etag}"
    );
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
    assert_eq!(
        res["responseKind"],
        json!({"group": "example.test", "version": "v2", "kind": "Widget"})
    );
    assert_eq!(
        res["verbs"],
        json!([
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch"
        ])
    );

    let cached = http
        .send(
            "GET",
            "/apis",
            &[("Accept", AGGREGATED), ("If-None-Match", &etag)],
            None,
        )
        .await;
    assert_eq!(cached.status, 304);
    assert!(cached.body.is_empty());
    assert_eq!(cached.header("etag"), Some(etag.as_str()));

    let unquoted = etag.trim_matches('"').to_string();
    let full = http
        .send(
            "GET",
            "/apis",
            &[("Accept", AGGREGATED), ("If-None-Match", &unquoted)],
            None,
        )
        .await;
    assert_eq!(full.status, 200);

    let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    assert_eq!(
        http.get_accept("/apis", v2beta1).await.json()["kind"],
        "APIGroupList"
    );

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
    assert_eq!(
        cms["responseKind"],
        json!({"group": "", "version": "", "kind": "ConfigMap"})
    );
    let core_again = http
        .send(
            "GET",
            "/api",
            &[("Accept", AGGREGATED), ("If-None-Match", &core_etag)],
            None,
        )
        .await;
    assert_eq!(core_again.status, 304);

    // A new CRD changes the document, so the old ETag no longer matches.
    double
        .create_crd(crd_manifest("example.test", "gadgets", "Gadget", &["v1"]))
        .unwrap();
    let changed = http
        .send(
            "GET",
            "/apis",
            &[("Accept", AGGREGATED), ("If-None-Match", &etag)],
            None,
        )
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
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    for v in ["v1", "v2"] {
        let doc = http.get(&format!("/apis/example.test/{v}")).await.json();
        assert_eq!(hash(doc, "widgets"), "N5cUTqCK6wo=");
    }
    assert_eq!(
        double
            .storage_version_hash("widgets.example.test")
            .as_deref(),
        Some("N5cUTqCK6wo=")
    );

    // A built-in resource moves too, as after an upgrade.
    double.set_storage_version("configmaps", "v2").unwrap();
    let doc = http.get("/api/v1").await.json();
    assert_eq!(
        hash(doc, "configmaps"),
        kube_double::resources::storage_version_hash("", "v2", "ConfigMap")
    );
    assert_ne!(
        double.storage_version_hash("configmaps").as_deref(),
        Some("qFsyl6wFWjQ=")
    );
}

#[tokio::test]
async fn the_kube_client_discovers_everything() {
    let double = start_with_widgets().await;
    let client = kube_client(&double).await;
    for discovery in [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .unwrap(),
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
            discovery
                .get("example.test")
                .unwrap()
                .preferred_version_or_latest(),
            "v2"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// CRDs and objects through the kube client (recording 11)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn crds_are_created_watched_switched_and_narrowed_with_kube() {
    let double = start().await;
    double.ensure_namespace("demo").unwrap();
    let client = kube_client(&double).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());

    let list = crds.list(&ListParams::default()).await.unwrap();
    let mut events = crds
        .watch(
            &WatchParams::default(),
            &list.metadata.resource_version.clone().unwrap(),
        )
        .await
        .unwrap()
        .boxed();

    let manifest: CustomResourceDefinition = serde_json::from_value(crd_manifest(
        "example.test",
        "widgets",
        "Widget",
        &["v1", "v2"],
    ))
    .unwrap();
    let created = crds
        .create(&PostParams::default(), &manifest)
        .await
        .unwrap();
    let status = created.status.clone().unwrap();
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    let conditions = status.conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    assert_eq!(created.metadata.generation, Some(1));

    let added = tokio::time::timeout(GUARD, events.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(added, Some(WatchEvent::Added(ref c)) if c.metadata.name.as_deref() == Some("widgets.example.test"))
    );

    // Custom resources are served at once.
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "demo", &widget_resource("v1"));
    let w1: DynamicObject = serde_json::from_value(widget("w1", 1)).unwrap();
    widgets.create(&PostParams::default(), &w1).await.unwrap();

    // Switch the storage version with a JSON patch, as recording 11 does.
    let http = Http::new(&double);
    let switched = http
        .patch(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.test",
            "application/json-patch+json",
            &json!([
                {"op": "replace", "path": "/spec/versions/0/storage", "value": false},
                {"op": "replace", "path": "/spec/versions/1/storage", "value": true}
            ]),
        )
        .await;
    assert_eq!(switched.status, 200);
    let switched = switched.json();
    assert_eq!(switched["status"]["storedVersions"], json!(["v1", "v2"]));
    assert_eq!(switched["metadata"]["generation"], 2);
    assert_eq!(
        double.storage_version("widgets.example.test").as_deref(),
        Some("v2")
    );

    let modified = tokio::time::timeout(GUARD, events.try_next())
        .await
        .unwrap()
        .unwrap();
    let Some(WatchEvent::Modified(crd)) = modified else {
        panic!("expected MODIFIED, got {modified:?}");
    };
    assert_eq!(
        crd.status.unwrap().stored_versions,
        Some(vec!["v1".into(), "v2".into()])
    );

    // /status may narrow storedVersions (what a finished migration does) ...
    let narrowed = crds
        .patch_status(
            "widgets.example.test",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"storedVersions": ["v2"]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        narrowed.status.unwrap().stored_versions,
        Some(vec!["v2".to_string()])
    );
    // ... but never drop the storage version.
    let err = crds
        .patch_status(
            "widgets.example.test",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"storedVersions": ["v1"]}})),
        )
        .await
        .unwrap_err();
    let status = kube_status(err);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));

    // Deleting the CRD takes its objects and its endpoints with it.
    crds.delete("widgets.example.test", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(http.get(WIDGETS).await.status, 404);
    assert!(
        double
            .stored("widgets.example.test", Some("demo"), "w1")
            .is_none()
    );
}

#[tokio::test]
async fn dynamic_objects_round_trip_through_kube() {
    let double = start_with_widgets().await;
    let client = kube_client(&double).await;
    let v1: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "demo", &widget_resource("v1"));
    let v2: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "demo", &widget_resource("v2"));

    let created = v1
        .create(
            &PostParams::default(),
            &serde_json::from_value(widget("w1", 1)).unwrap(),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let managed = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(managed.len(), 1);

    // Read through the other served version: same object, apiVersion converted.
    let through_v2 = v2.get("w1").await.unwrap();
    assert_eq!(
        through_v2.types.as_ref().unwrap().api_version,
        "example.test/v2"
    );
    assert_eq!(through_v2.metadata.uid.as_deref(), Some(uid.as_str()));

    let patched = v1
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["size"], 5);
    assert_eq!(patched.metadata.generation, Some(2));
    assert_ne!(
        patched.metadata.resource_version,
        created.metadata.resource_version
    );

    let listed = v2.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0].types.as_ref().unwrap().api_version,
        "example.test/v2"
    );

    // Built-in typed objects too.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("cm1".into());
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let mut got = cms.get("cm1").await.unwrap();
    got.data = Some([("k".to_string(), "v2".to_string())].into());
    let replaced = cms
        .replace("cm1", &PostParams::default(), &got)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "v2");

    let deleted = v1.delete("w1", &DeleteParams::default()).await.unwrap();
    let status = deleted
        .right()
        .expect("a Success Status for a custom resource");
    assert_eq!(status.details.unwrap().kind, "widgets");
    let err = v1.get("w1").await.unwrap_err();
    let status = kube_status(err);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "widgets.example.test \"w1\" not found");
}

#[tokio::test]
async fn creates_validate_like_kube_apiserver() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let cms = "/api/v1/namespaces/demo/configmaps";

    // 16a: invalid name and data key -> 422 with one cause each.
    let r = http
        .post(cms, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name!"}, "data": {"k": "v", "bad key": "x"}}))
        .await;
    assert_eq!(r.status, 422);
    let body = r.json();
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(body["details"]["kind"], "ConfigMap");
    let fields: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["metadata.name", "data[bad key]"]);

    // 16b: malformed, ill-typed, not JSON, wrong kind -> 400.
    for body in [
        &b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"x\"},"[..],
        &b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"x\"},\"data\":{\"k\":1}}"[..],
        &b"not json at all"[..],
        &b"{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"x\"}}"[..],
    ] {
        let r = http
            .send("POST", cms, &[("Content-Type", "application/json")], Some(body.to_vec()))
            .await;
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(body));
        assert_eq!(r.json()["reason"], "BadRequest");
    }
    let wrong_type = http
        .send(
            "POST",
            cms,
            &[("Content-Type", "application/json")],
            Some(
                br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":1}}"#
                    .to_vec(),
            ),
        )
        .await;
    assert_eq!(
        wrong_type.json()["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    );

    // 17a: dry run creates nothing, but conflicts are still found; bad values are 422.
    let dry = http
        .post(&format!("{cms}?dryRun=All"), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry1"}, "data": {"k": "v"}}))
        .await;
    assert_eq!(dry.status, 201);
    let dry = dry.json();
    assert!(dry["metadata"]["uid"].is_string());
    assert!(dry["metadata"].get("resourceVersion").is_none());
    assert_eq!(http.get(&format!("{cms}/dry1")).await.status, 404);
    let bad_dry = http
        .post(
            &format!("{cms}?dryRun=Foo"),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry2"}}),
        )
        .await;
    assert_eq!(bad_dry.status, 422);
    assert_eq!(
        bad_dry.json()["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: [\"Foo\"]: supported values: \"All\""
    );

    // 17b: generateName adds five characters and is kept; neither name nor generateName: 422.
    let generated = http
        .post(cms, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}, "data": {"k": "v"}}))
        .await
        .json();
    let name = generated["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert_eq!(generated["metadata"]["generateName"], "gen-");
    let nameless = http
        .post(
            cms,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
        )
        .await;
    assert_eq!(nameless.status, 422);

    // Duplicate -> 409 AlreadyExists with the plural in details.kind.
    let again = http.post(cms, &generated).await;
    assert_eq!(
        again.status, 500,
        "a resourceVersion in a create body is refused"
    );
    let mut copy = generated.clone();
    copy["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let dup = http.post(cms, &copy).await;
    assert_eq!(dup.status, 409);
    assert_eq!(dup.json()["reason"], "AlreadyExists");
    assert_eq!(dup.json()["details"]["kind"], "configmaps");

    // A namespace that does not exist: 404 about the namespace on create, about the object on get.
    let nowhere = http
        .post(
            "/api/v1/namespaces/no-such-ns/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(nowhere.status, 404);
    assert_eq!(nowhere.json()["details"]["kind"], "namespaces");
    let missing = http
        .get("/api/v1/namespaces/no-such-ns/configmaps/x")
        .await
        .json();
    assert_eq!(missing["message"], "configmaps \"x\" not found");

    // A body over 3 MiB: 413.
    let huge = vec![b'x'; 3 * 1024 * 1024 + 10];
    let r = http
        .send(
            "POST",
            cms,
            &[("Content-Type", "application/json")],
            Some(huge),
        )
        .await;
    assert_eq!(r.status, 413);

    // Custom resources need kind and apiVersion in the body.
    let kindless = http
        .post(
            WIDGETS,
            &json!({"apiVersion": "example.test/v1", "metadata": {"name": "k"}}),
        )
        .await;
    assert_eq!(kindless.status, 400);
}

// ---------------------------------------------------------------------------------------------
// LIST: paging, snapshots, expiry, metadata-only (recordings 04-06)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn lists_page_with_continue_tokens_over_a_consistent_snapshot() {
    let double = start().await;
    double.ensure_namespace("page").unwrap();
    double
        .preload("configmaps", Some("page"), "obj", 25, 16)
        .unwrap();
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/page/configmaps";

    let first = http.get(&format!("{base}?limit=10")).await.json();
    assert_eq!(first["kind"], "ConfigMapList");
    assert_eq!(first["apiVersion"], "v1");
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rv, double.revision().to_string());
    assert_eq!(first["metadata"]["remainingItemCount"], 15);
    let items = first["items"].as_array().unwrap();
    assert_eq!(items.len(), 10);
    // Built-in list items carry no kind/apiVersion (README observations).
    assert!(items[0].get("kind").is_none() && items[0].get("apiVersion").is_none());
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let decoded = decode_token(&token);
    assert_eq!(
        decoded,
        json!({"v": "meta.k8s.io/v1", "rv": rv.parse::<i64>().unwrap(), "start": "obj-00009\u{0}"})
    );

    // Changes after the first page do not show in the snapshot.
    double
        .create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "obj-00010a", "namespace": "page"}}))
        .unwrap();
    http.merge_patch(
        &format!("{base}/obj-00012"),
        &json!({"data": {"payload": "changed"}}),
    )
    .await;

    let second = http
        .get(&format!("{base}?limit=10&continue={token}"))
        .await
        .json();
    assert_eq!(second["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(second["metadata"]["remainingItemCount"], 5);
    let names: Vec<&str> = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"obj-00010"));
    assert!(!names.contains(&"obj-00010a"));
    let twelve = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "obj-00012")
        .unwrap();
    assert_ne!(twelve["data"]["payload"], "changed");

    let third = http
        .get(&format!(
            "{base}?limit=10&continue={}",
            second["metadata"]["continue"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(third["items"].as_array().unwrap().len(), 5);
    assert!(third["metadata"].get("continue").is_none());
    assert!(third["metadata"].get("remainingItemCount").is_none());

    // All namespaces: keys are namespace/name and tokens say so (recording 04).
    let all = http.get("/api/v1/configmaps?limit=1").await.json();
    let start_key = decode_token(all["metadata"]["continue"].as_str().unwrap())["start"].clone();
    assert_eq!(
        start_key,
        "kube-system/extension-apiserver-authentication\u{0}"
    );

    // Exact resourceVersion serves the old snapshot; NotOlderThan the current state.
    let exact = http
        .get(&format!(
            "{base}?limit=100&resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .await
        .json();
    assert_eq!(exact["items"].as_array().unwrap().len(), 25);
    let newer = http
        .get(&format!(
            "{base}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"
        ))
        .await
        .json();
    assert_eq!(newer["items"].as_array().unwrap().len(), 26);
    // A resourceVersion the store has not reached: 504 Too large resource version.
    let ahead = http
        .get(&format!(
            "{base}?resourceVersion=999999&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(ahead.status, 504);
    assert_eq!(
        ahead.json()["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );

    // Invalid option combinations: 422 on ListOptions (recording 10b step 6).
    let invalid = http.get(&format!("{base}?allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(invalid.status, 422);
    assert_eq!(
        invalid.json()["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"
    );
    assert_eq!(
        http.get(&format!("{base}?continue=garbage!")).await.status,
        400
    );

    // The kube client pages the same way.
    let client = kube_client(&double).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "page");
    let mut seen = 0;
    let mut params = ListParams::default().limit(7);
    loop {
        let page = api.list(&params).await.unwrap();
        seen += page.items.len();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen, 26);
}

#[tokio::test]
async fn expired_continue_tokens_get_410_with_an_inconsistent_token() {
    let double = start().await;
    double.ensure_namespace("page").unwrap();
    double
        .preload("configmaps", Some("page"), "obj", 6, 8)
        .unwrap();
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/page/configmaps";

    let first = http.get(&format!("{base}?limit=2")).await.json();
    let rv: u64 = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();

    // A write, then compaction past the token's revision (recording 05).
    double
        .create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "obj-00001a", "namespace": "page"}}))
        .unwrap();
    double.compact();

    let expired = http.get(&format!("{base}?limit=2&continue={token}")).await;
    assert_eq!(expired.status, 410);
    let status = expired.json();
    assert_eq!(status["reason"], "Expired");
    assert_eq!(status["code"], 410);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old")
    );
    let inconsistent = status["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(
        decode_token(&inconsistent),
        json!({"v": "meta.k8s.io/v1", "rv": -1, "start": "obj-00001\u{0}"})
    );

    // The inconsistent token continues after the same key, in the current state.
    let next = http
        .get(&format!("{base}?limit=2&continue={inconsistent}"))
        .await
        .json();
    let new_rv: u64 = next["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(new_rv > rv);
    let names: Vec<&str> = next["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["obj-00001a", "obj-00002"]);
    assert_eq!(next["metadata"]["remainingItemCount"], 3);

    // Exact reads of the compacted revision: 410 without a token.
    let old = http
        .get(&format!(
            "{base}?limit=2&resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(old.status, 410);
    assert_eq!(
        old.json()["message"],
        "The resourceVersion for the provided list is too old."
    );

    // The kube client surfaces the 410 as an Expired API error.
    let client = kube_client(&double).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "page");
    let err = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap_err();
    let status = kube_status(err);
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn continue_tokens_expire_with_periodic_compaction() {
    let double = KubeDouble::builder()
        .compaction_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    double.ensure_namespace("page").unwrap();
    double
        .preload("configmaps", Some("page"), "obj", 4, 8)
        .unwrap();
    let http = Http::new(&double);
    let first = http
        .get("/api/v1/namespaces/page/configmaps?limit=1")
        .await
        .json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // Keep writing until the compactor has passed the token's revision.
    let outcome = tokio::time::timeout(GUARD, async {
        let mut n = 0;
        loop {
            n += 1;
            double
                .create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w{n}"), "namespace": "page"}}))
                .unwrap();
            let r = http.get(&format!("/api/v1/namespaces/page/configmaps?limit=1&continue={token}")).await;
            if r.status != 200 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the compactor expires the token");
    assert_eq!(outcome.status, 410);
    assert!(outcome.json()["metadata"]["continue"].is_string());
}

#[tokio::test]
async fn metadata_only_lists_and_gets() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    for i in 1..=3 {
        assert_eq!(
            http.post(WIDGETS, &widget(&format!("w{i}"), i))
                .await
                .status,
            201
        );
    }

    let list = http.get_accept(WIDGETS, METADATA_LIST).await;
    assert_eq!(list.header("content-type"), Some("application/json"));
    let list = list.json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    let item = &list["items"][0];
    assert_eq!(item["kind"], "PartialObjectMetadata");
    assert_eq!(item["apiVersion"], "meta.k8s.io/v1");
    assert!(item.get("spec").is_none());
    assert!(item["metadata"]["managedFields"].is_array());

    double
        .create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1", "namespace": "demo"}}))
        .unwrap();
    let paged = http
        .get_accept("/api/v1/configmaps?limit=1", METADATA_LIST)
        .await
        .json();
    assert!(paged["metadata"]["continue"].is_string());
    assert!(paged["metadata"]["remainingItemCount"].is_number());

    let one = http
        .get_accept(&format!("{WIDGETS}/w1"), METADATA_ONE)
        .await
        .json();
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert_eq!(one["metadata"]["name"], "w1");

    let beta = http
        .get_accept(
            WIDGETS,
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1",
        )
        .await
        .json();
    assert_eq!(beta["items"][0]["apiVersion"], "meta.k8s.io/v1beta1");

    // The mismatched cases of recording 06.
    let wrong_single = http
        .get_accept(&format!("{WIDGETS}/w1"), METADATA_LIST)
        .await;
    assert_eq!(wrong_single.status, 500);
    let status = wrong_single.json();
    assert_eq!(status["message"], "content is not a list");
    assert!(status.get("reason").is_none());
    let wrong_list = http.get_accept(WIDGETS, METADATA_ONE).await;
    assert_eq!(wrong_list.status, 406);
    assert_eq!(
        wrong_list.json()["message"],
        "you requested PartialObjectMetadata, but the requested object is a list (*unstructured.UnstructuredList)"
    );

    // The kube client's metadata API.
    let client = kube_client(&double).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "demo", &widget_resource("v1"));
    let metas = widgets
        .list_metadata(&ListParams::default().limit(2))
        .await
        .unwrap();
    assert_eq!(metas.items.len(), 2);
    assert!(metas.metadata.continue_.is_some());
    assert_eq!(metas.metadata.remaining_item_count, Some(1));
    let meta = widgets.get_metadata("w2").await.unwrap();
    assert_eq!(meta.metadata.name.as_deref(), Some("w2"));
}

// ---------------------------------------------------------------------------------------------
// Writes: the no-op rule, re-encoding, preconditions (recordings 08-09e)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn identical_writes_are_skipped_and_old_encodings_are_rewritten() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let created = http.post(WIDGETS, &widget("w1", 1)).await.json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let before = double
        .stored("widgets.example.test", Some("demo"), "w1")
        .unwrap();
    assert_eq!(before.encoding, "example.test/v1");
    assert!(before.key.is_none());
    assert!(
        before
            .bytes
            .starts_with(b"{\"apiVersion\":\"example.test/v1\"")
    );
    assert!(before.bytes.ends_with(b"\n"));
    assert!(
        before.json().unwrap()["metadata"]
            .get("resourceVersion")
            .is_none()
    );
    double.reset_counters();

    // 08 A3: nothing changes -> same resourceVersion, no write.
    let noop = http
        .merge_patch(
            &format!("{WIDGETS}/w1"),
            &json!({"metadata": {"resourceVersion": rv}}),
        )
        .await;
    assert_eq!(noop.status, 200);
    assert_eq!(noop.json()["metadata"]["resourceVersion"], rv.as_str());
    let after = double
        .stored("widgets.example.test", Some("demo"), "w1")
        .unwrap();
    assert_eq!(after.mod_revision, before.mod_revision);
    let counters = double.counters();
    assert_eq!(counters.writes_skipped_for("widgets.example.test"), 1);
    assert_eq!(counters.writes_performed_for("widgets.example.test"), 0);

    // A PUT of the object as read is a no-op too.
    let current = http.get(&format!("{WIDGETS}/w1")).await.json();
    let put = http.put(&format!("{WIDGETS}/w1"), &current).await;
    assert_eq!(put.json()["metadata"]["resourceVersion"], rv.as_str());

    // 08 B2: after the storage switch the same patch re-encodes (new resourceVersion), and
    // the response looks otherwise identical.
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    let reencoded = http
        .merge_patch(
            &format!("{WIDGETS}/w1"),
            &json!({"metadata": {"resourceVersion": rv}}),
        )
        .await;
    assert_eq!(reencoded.status, 200);
    let reencoded = reencoded.json();
    let new_rv = reencoded["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_rv, rv);
    assert_eq!(
        reencoded["metadata"]["managedFields"],
        current["metadata"]["managedFields"]
    );
    assert_eq!(
        reencoded["metadata"]["generation"],
        current["metadata"]["generation"]
    );
    let stored = double
        .stored("widgets.example.test", Some("demo"), "w1")
        .unwrap();
    assert_eq!(stored.encoding, "example.test/v2");
    assert!(
        stored
            .bytes
            .starts_with(b"{\"apiVersion\":\"example.test/v2\"")
    );
    assert_eq!(stored.create_revision, before.create_revision);
    assert_eq!(
        double
            .counters()
            .writes_performed_for("widgets.example.test"),
        1
    );

    // Once migrated, the same patch is a no-op again.
    let again = http
        .merge_patch(
            &format!("{WIDGETS}/w1"),
            &json!({"metadata": {"resourceVersion": new_rv}}),
        )
        .await;
    assert_eq!(again.json()["metadata"]["resourceVersion"], new_rv.as_str());

    // Key rotation: objects under the old key (or none) are rewritten under the new one.
    let cm = http
        .post("/api/v1/namespaces/demo/configmaps", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "secretish"}, "data": {"k": "v"}}))
        .await
        .json();
    let cm_rv = cm["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    double
        .set_encryption_key("configmaps", Some("key2"))
        .unwrap();
    let rotated = http
        .merge_patch(
            "/api/v1/namespaces/demo/configmaps/secretish",
            &json!({"metadata": {"resourceVersion": cm_rv}}),
        )
        .await
        .json();
    assert_ne!(rotated["metadata"]["resourceVersion"], cm_rv.as_str());
    let stored = double
        .stored("configmaps", Some("demo"), "secretish")
        .unwrap();
    assert_eq!(stored.key.as_deref(), Some("key2"));
    assert!(stored.bytes.starts_with(b"k8s:enc:aescbc:v1:key2:"));
    assert_eq!(stored.json().unwrap()["data"]["k"], "v");
    let summary = double.stored_summary("configmaps");
    assert_eq!(
        summary.get(&("v1".to_string(), Some("key2".to_string()))),
        Some(&1)
    );
    // Reads decrypt transparently.
    let read = http
        .get("/api/v1/namespaces/demo/configmaps/secretish")
        .await
        .json();
    assert_eq!(read["data"]["k"], "v");
}

#[tokio::test]
async fn preconditions_conflict_like_kube_apiserver() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let created = http.post(WIDGETS, &widget("w2", 2)).await.json();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    http.merge_patch(&format!("{WIDGETS}/w2"), &json!({"spec": {"size": 3}}))
        .await;

    // 09a: a stale resourceVersion -> 409 Conflict, details.kind is the plural.
    let stale = http
        .merge_patch(
            &format!("{WIDGETS}/w2"),
            &json!({"metadata": {"resourceVersion": rv}, "spec": {"size": 23}}),
        )
        .await;
    assert_eq!(stale.status, 409);
    assert_eq!(
        stale.json(),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Operation cannot be fulfilled on widgets.example.test \"w2\": the object has been modified; please apply your changes to the latest version and try again",
            "reason": "Conflict",
            "details": {"name": "w2", "group": "example.test", "kind": "widgets"},
            "code": 409
        })
    );

    // 09b: a uid in a patch is not a precondition: 422 field is immutable, cause listed twice.
    let wrong_uid = http
        .merge_patch(
            &format!("{WIDGETS}/w2"),
            &json!({"metadata": {"uid": "wrong"}}),
        )
        .await;
    assert_eq!(wrong_uid.status, 422);
    let body = wrong_uid.json();
    assert_eq!(
        body["message"],
        "Widget.example.test \"w2\" is invalid: metadata.uid: Invalid value: \"wrong\": field is immutable"
    );
    assert_eq!(body["details"]["causes"].as_array().unwrap().len(), 2);
    assert_eq!(body["details"]["kind"], "Widget");
    let right_uid = http
        .merge_patch(
            &format!("{WIDGETS}/w2"),
            &json!({"metadata": {"uid": uid}, "spec": {"size": 2}}),
        )
        .await;
    assert_eq!(right_uid.status, 200);

    // A uid in a PUT body is a precondition: 409.
    let mut current = http.get(&format!("{WIDGETS}/w2")).await.json();
    current["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    let put = http.put(&format!("{WIDGETS}/w2"), &current).await;
    assert_eq!(put.status, 409);
    assert!(
        put.json()["message"]
            .as_str()
            .unwrap()
            .contains("Precondition failed: UID in precondition")
    );

    // Custom resources need a resourceVersion on PUT.
    let mut unconditional = http.get(&format!("{WIDGETS}/w2")).await.json();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(
        http.put(&format!("{WIDGETS}/w2"), &unconditional)
            .await
            .status,
        422
    );

    // The same on a ConfigMap: core group omitted from details.
    http.post("/api/v1/namespaces/demo/configmaps", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": {"k": "v1"}}))
        .await;
    let cm_stale = http
        .merge_patch(
            "/api/v1/namespaces/demo/configmaps/cm1",
            &json!({"metadata": {"resourceVersion": "1"}, "data": {"k": "changed"}}),
        )
        .await
        .json();
    assert_eq!(
        cm_stale["details"],
        json!({"name": "cm1", "kind": "configmaps"})
    );
    // ConfigMaps may be replaced without a resourceVersion.
    let mut cm = http
        .get("/api/v1/namespaces/demo/configmaps/cm1")
        .await
        .json();
    cm["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    cm["data"]["k"] = json!("v2");
    assert_eq!(
        http.put("/api/v1/namespaces/demo/configmaps/cm1", &cm)
            .await
            .status,
        200
    );

    // 09c/09d: missing objects are 404; strategic merge on a CR is 415.
    assert_eq!(
        http.merge_patch(&format!("{WIDGETS}/gone"), &json!({"spec": {}}))
            .await
            .status,
        404
    );
    let smp = http
        .patch(
            &format!("{WIDGETS}/w2"),
            "application/strategic-merge-patch+json",
            &json!({"spec": {"size": 5}}),
        )
        .await;
    assert_eq!(smp.status, 415);
    assert_eq!(
        smp.json()["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    assert_eq!(
        http.patch(&format!("{WIDGETS}/w2"), "text/plain", &json!({}))
            .await
            .status,
        415
    );
    // Strategic merge is accepted on built-in types.
    let smp_cm = http
        .patch(
            "/api/v1/namespaces/demo/configmaps/cm1",
            "application/strategic-merge-patch+json",
            &json!({"data": {"extra": "1"}}),
        )
        .await;
    assert_eq!(smp_cm.status, 200);
    assert_eq!(smp_cm.json()["data"]["extra"], "1");

    // JSON patch errors: 422 from the patch handler.
    let bad_json_patch = http
        .patch(
            &format!("{WIDGETS}/w2"),
            "application/json-patch+json",
            &json!([{"op": "replace", "path": "/spec/nope/deeper", "value": 1}]),
        )
        .await;
    assert_eq!(bad_json_patch.status, 422);
}

#[tokio::test]
async fn server_side_apply_of_the_migrator_body() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let created = http.post(WIDGETS, &widget("w3", 3)).await.json();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let apply = |version: &str, uid: &str, rv: &str| json!({"apiVersion": format!("example.test/{version}"), "kind": "Widget", "metadata": {"uid": uid, "resourceVersion": rv}});
    let path_v2 = "/apis/example.test/v2/namespaces/demo/widgets";
    let ssa = |path: String, body: Value| {
        let http = &http;
        async move {
            http.send(
                "PATCH",
                &path,
                &[("Content-Type", "application/apply-patch+yaml")],
                Some(body.to_string().into_bytes()),
            )
            .await
        }
    };

    // 09e A1: unchanged storage version -> 200, same resourceVersion, no managedFields entry.
    let a1 = ssa(
        format!("{WIDGETS}/w3?fieldManager=x"),
        apply("v1", &uid, &rv),
    )
    .await;
    assert_eq!(a1.status, 200);
    let a1 = a1.json();
    assert_eq!(a1["metadata"]["resourceVersion"], rv.as_str());
    assert!(
        !a1["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "x")
    );

    // B1: after the switch, re-encoded with a new resourceVersion.
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    let b1 = ssa(
        format!("{path_v2}/w3?fieldManager=storage-version-migrator-controller"),
        apply("v2", &uid, &rv),
    )
    .await;
    assert_eq!(b1.status, 200);
    let b1 = b1.json();
    assert_eq!(b1["apiVersion"], "example.test/v2");
    assert_ne!(b1["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(
        double
            .stored("widgets.example.test", Some("demo"), "w3")
            .unwrap()
            .encoding,
        "example.test/v2"
    );

    // B3: stale -> 409; B4: wrong uid -> 422 twice; B5: gone with a uid -> 409 uid mismatch.
    let b3 = ssa(
        format!("{path_v2}/w3?fieldManager=m"),
        apply("v2", &uid, &rv),
    )
    .await;
    assert_eq!(b3.status, 409);
    let current_rv = b1["metadata"]["resourceVersion"].as_str().unwrap();
    let zero = "00000000-0000-0000-0000-000000000000";
    let b4 = ssa(
        format!("{path_v2}/w3?fieldManager=m"),
        apply("v2", zero, current_rv),
    )
    .await;
    assert_eq!(b4.status, 422);
    assert_eq!(b4.json()["details"]["causes"].as_array().unwrap().len(), 2);
    let b5 = ssa(
        format!("{path_v2}/gone?fieldManager=m"),
        apply("v2", &uid, "1"),
    )
    .await;
    assert_eq!(b5.status, 409);
    assert_eq!(
        b5.json()["message"],
        format!(
            "Operation cannot be fulfilled on widgets.example.test \"gone\": uid mismatch: the provided object specified uid {uid}, and no existing object was found"
        )
    );
    // Without a fieldManager an apply is refused; without a uid it creates.
    let no_manager = ssa(format!("{path_v2}/w3"), apply("v2", &uid, current_rv)).await;
    assert_eq!(no_manager.status, 422);
    let create = ssa(
        format!("{path_v2}/fresh?fieldManager=m"),
        json!({"apiVersion": "example.test/v2", "kind": "Widget", "spec": {"size": 1}}),
    )
    .await;
    assert_eq!(create.status, 201);
    let fresh = create.json();
    assert_eq!(fresh["metadata"]["managedFields"][0]["operation"], "Apply");

    // The kube client's apply works the same way.
    let client = kube_client(&double).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "demo", &widget_resource("v2"));
    let applied = widgets
        .patch(
            "fresh",
            &PatchParams::apply("kube-test"),
            &Patch::Apply(
                json!({"apiVersion": "example.test/v2", "kind": "Widget", "spec": {"size": 2}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.data["spec"]["size"], 2);
}

// ---------------------------------------------------------------------------------------------
// WATCH (recordings 10a, 10b)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn watch_from_a_list_revision_sees_live_events_and_a_closing_bookmark() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    let rv = http.get(base).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = watch_request(
        &double,
        &format!("{base}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"),
    )
    .await;

    http.post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "live2"}, "data": {"x": "1"}})).await;
    // Another namespace's object is not this watch's business.
    double.ensure_namespace("other").unwrap();
    double.create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere", "namespace": "other"}})).unwrap();
    http.merge_patch(&format!("{base}/live2"), &json!({"data": {"x": "2"}}))
        .await;
    http.delete(&format!("{base}/live2")).await;

    let events = read_events(resp, |e| e.len() == 3).await;
    assert_eq!(types(&events), ["ADDED", "MODIFIED", "DELETED"]);
    let added = &events[0]["object"];
    assert_eq!(added["kind"], "ConfigMap");
    assert_eq!(added["apiVersion"], "v1");
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        rvs[0] < rvs[1] && rvs[1] < rvs[2],
        "DELETED carries a new resourceVersion: {rvs:?}"
    );
    assert_eq!(events[2]["object"]["data"]["x"], "2");

    // At timeoutSeconds the server closes the stream after a BOOKMARK with the last
    // resourceVersion it sent.
    let now = double.revision();
    let resp = watch_request(
        &double,
        &format!("{base}?watch=1&resourceVersion={now}&allowWatchBookmarks=true&timeoutSeconds=1"),
    )
    .await;
    let events = read_events(resp, |_| false).await;
    assert_eq!(
        events,
        vec![
            json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": now.to_string()}}})
        ]
    );
}

#[tokio::test]
async fn watches_replay_from_old_revisions_and_expire_after_compaction() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let start_rv = double.revision();
    for i in 0..3 {
        http.post(WIDGETS, &widget(&format!("r{i}"), i)).await;
    }
    http.merge_patch(&format!("{WIDGETS}/r1"), &json!({"spec": {"size": 9}}))
        .await;
    let resp = watch_request(
        &double,
        &format!("{WIDGETS}?watch=true&resourceVersion={start_rv}"),
    )
    .await;
    let events = read_events(resp, |e| e.len() == 4).await;
    assert_eq!(types(&events), ["ADDED", "ADDED", "ADDED", "MODIFIED"]);
    assert_eq!(events[3]["object"]["spec"]["size"], 9);
    assert_eq!(events[3]["object"]["apiVersion"], "example.test/v1");

    // A label selector sees objects entering and leaving it.
    let labelled = watch_request(
        &double,
        &format!(
            "{WIDGETS}?watch=1&resourceVersion={}&labelSelector=tier%3Dgold",
            double.revision()
        ),
    )
    .await;
    http.merge_patch(
        &format!("{WIDGETS}/r0"),
        &json!({"metadata": {"labels": {"tier": "gold"}}}),
    )
    .await;
    http.merge_patch(&format!("{WIDGETS}/r2"), &json!({"spec": {"size": 7}}))
        .await;
    http.merge_patch(
        &format!("{WIDGETS}/r0"),
        &json!({"metadata": {"labels": {"tier": "silver"}}}),
    )
    .await;
    let events = read_events(labelled, |e| e.len() == 2).await;
    assert_eq!(types(&events), ["ADDED", "DELETED"]);
    assert_eq!(events[1]["object"]["metadata"]["name"], "r0");

    // After compaction an old revision gets one ERROR event with a 410 Status (10a step 2).
    double.compact();
    let resp = watch_request(
        &double,
        &format!("{WIDGETS}?watch=1&resourceVersion={start_rv}"),
    )
    .await;
    let events = read_events(resp, |_| false).await;
    assert_eq!(types(&events), ["ERROR"]);
    let status = &events[0]["object"];
    assert_eq!(
        (status["code"].as_u64(), status["reason"].as_str()),
        (Some(410), Some("Expired"))
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("too old resource version: {start_rv} ("))
    );

    // Through kube, the same surfaces as WatchEvent::Error.
    let client = kube_client(&double).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "demo", &widget_resource("v1"));
    let mut stream = widgets
        .watch(&WatchParams::default(), &start_rv.to_string())
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(GUARD, stream.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, Some(WatchEvent::Error(ref e)) if e.code == 410),
        "{first:?}"
    );
}

#[tokio::test]
async fn watch_lists_end_their_initial_events_with_a_bookmark() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    for name in ["cm1", "cm2"] {
        http.post(
            base,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
        )
        .await;
    }
    let list_rv = double.revision();

    // 10b step 1 and, by defaulting, step 2 (a plain watch with bookmarks).
    for query in [
        "watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        "watch=1&allowWatchBookmarks=true",
    ] {
        let resp = watch_request(&double, &format!("{base}?{query}")).await;
        let events = read_events(resp, |e| e.len() == 3).await;
        assert_eq!(types(&events), ["ADDED", "ADDED", "BOOKMARK"]);
        assert_eq!(events[0]["object"]["metadata"]["name"], "cm1");
        assert_eq!(
            events[2]["object"]["metadata"],
            json!({"resourceVersion": list_rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}})
        );
    }

    // Without bookmarks the initial events come but no end marker (step 4); the legacy watch
    // (10a step 4) sends synthetic ADDED events and then live ones.
    let resp = watch_request(&double, &format!("{base}?watch=1&timeoutSeconds=1")).await;
    let events = read_events(resp, |_| false).await;
    assert_eq!(types(&events), ["ADDED", "ADDED"]);

    // Invalid combinations are a 422 response, not an event (step 5).
    let invalid = http
        .get(&format!(
            "{base}?watch=1&allowWatchBookmarks=true&sendInitialEvents=true"
        ))
        .await;
    assert_eq!(invalid.status, 422);
    assert_eq!(
        invalid.json()["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );

    // The kube runtime watcher, both with list+watch and with streaming lists.
    let client = kube_client(&double).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "demo");
    for config in [
        watcher::Config::default(),
        watcher::Config::default().streaming_lists(),
    ] {
        let mut stream = watcher(api.clone(), config).boxed();
        let mut initial = Vec::new();
        tokio::time::timeout(GUARD, async {
            while let Some(event) = stream.try_next().await.unwrap() {
                match event {
                    watcher::Event::InitApply(cm) => initial.push(cm.metadata.name.unwrap()),
                    watcher::Event::InitDone => break,
                    _ => {}
                }
            }
        })
        .await
        .unwrap();
        initial.sort();
        assert_eq!(initial, ["cm1", "cm2"]);
    }
}

#[tokio::test]
async fn etcd_34_mode_refuses_watch_lists_with_an_error_event() {
    let double = KubeDouble::builder()
        .watch_list(false)
        .start()
        .await
        .unwrap();
    double.ensure_namespace("demo").unwrap();
    let resp = watch_request(
        &double,
        "/api/v1/namespaces/demo/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=3",
    )
    .await;
    let events = read_events(resp, |_| false).await;
    assert_eq!(
        events,
        vec![json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled",
            "reason": "InternalError", "code": 500
        }})]
    );
}

#[tokio::test]
async fn metadata_watches_carry_partial_object_metadata() {
    let double = start_with_widgets().await;
    let client = kube_client(&double).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "demo", &widget_resource("v1"));
    let mut stream = widgets
        .watch_metadata(&WatchParams::default(), &double.revision().to_string())
        .await
        .unwrap()
        .boxed();
    Http::new(&double).post(WIDGETS, &widget("m1", 1)).await;
    let event = tokio::time::timeout(GUARD, stream.try_next())
        .await
        .unwrap()
        .unwrap();
    let Some(WatchEvent::Added(meta)) = event else {
        panic!("expected ADDED, got {event:?}");
    };
    assert_eq!(meta.metadata.name.as_deref(), Some("m1"));
}

// ---------------------------------------------------------------------------------------------
// Apiserver identities and the StorageVersion API (recordings 12, 13)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn identity_leases_change_object_on_restart() {
    let double = KubeDouble::builder().hostname("vm").start().await.unwrap();
    let client = kube_client(&double).await;
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    let selector = ListParams::default().labels("apiserver.kubernetes.io/identity=kube-apiserver");

    let before = leases.list(&selector).await.unwrap().items;
    assert_eq!(before.len(), 1);
    let lease = &before[0];
    // The name recording 12 shows for hostname "vm".
    assert_eq!(
        lease.metadata.name.as_deref(),
        Some("apiserver-wlv32tlttr4jl3gtroqexyxapa")
    );
    assert_eq!(
        double.first_apiserver(),
        "apiserver-wlv32tlttr4jl3gtroqexyxapa"
    );
    let labels = lease.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "vm");
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(3600));
    let holder = spec.holder_identity.unwrap();
    assert!(holder.starts_with("apiserver-wlv32tlttr4jl3gtroqexyxapa_"));

    double.restart_apiserver(double.first_apiserver()).unwrap();
    let after = leases.list(&selector).await.unwrap().items;
    assert_eq!(after.len(), 1, "the old lease is deleted, not left behind");
    assert_eq!(after[0].metadata.name, lease.metadata.name);
    assert_ne!(after[0].metadata.uid, lease.metadata.uid);
    assert_ne!(
        after[0].spec.clone().unwrap().holder_identity.unwrap(),
        holder
    );

    let second = double.add_apiserver("vm2").unwrap();
    assert_eq!(second, identity_lease_name("vm2"));
    assert_eq!(leases.list(&selector).await.unwrap().items.len(), 2);
    double.remove_apiserver(&second).unwrap();
    assert_eq!(leases.list(&selector).await.unwrap().items.len(), 1);
    // Other leases are not identity leases.
    let other = leases
        .list(&ListParams::default().labels("apiserver.kubernetes.io/identity!=kube-apiserver"))
        .await
        .unwrap();
    assert!(other.items.is_empty());
}

#[tokio::test]
async fn storage_versions_report_agreement_and_disagreement() {
    let double = start_with_widgets().await;
    let client = kube_client(&double).await;
    let svs: Api<StorageVersion> = Api::all(client.clone());
    let first = double.first_apiserver().to_string();

    let cm = svs.get("core.configmaps").await.unwrap();
    let status = cm.status.clone().unwrap();
    assert_eq!(status.common_encoding_version.as_deref(), Some("v1"));
    let entries = status.storage_versions.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].api_server_id, first);
    assert_eq!(entries[0].encoding_version, "v1");
    let condition = &status.conditions.unwrap()[0];
    assert_eq!(
        (condition.type_.as_str(), condition.status.as_str()),
        ("AllEncodingVersionsEqual", "True")
    );
    assert_eq!(condition.reason, "CommonEncodingVersionSet");

    // CRDs are stored as apiextensions.k8s.io/v1beta1 (13); leases decode v1beta1 too.
    let crds = svs
        .get("apiextensions.k8s.io.customresourcedefinitions")
        .await
        .unwrap();
    assert_eq!(
        crds.status.unwrap().common_encoding_version.as_deref(),
        Some("apiextensions.k8s.io/v1beta1")
    );
    let leases = svs.get("coordination.k8s.io.leases").await.unwrap();
    assert_eq!(
        leases.status.unwrap().storage_versions.unwrap()[0].decodable_versions,
        vec![
            "coordination.k8s.io/v1".to_string(),
            "coordination.k8s.io/v1beta1".to_string()
        ]
    );
    // Custom resources have no entry.
    let err = svs.get("example.test.widgets").await.unwrap_err();
    assert_eq!(kube_status(err).code, 404);

    // A rolling upgrade: a second instance already encodes configmaps as v2.
    let second = double.add_apiserver("upgraded").unwrap();
    double
        .set_apiserver_storage_version(&second, "configmaps", "v2")
        .unwrap();
    let split = svs.get("core.configmaps").await.unwrap().status.unwrap();
    assert_eq!(split.common_encoding_version, None);
    assert_eq!(split.storage_versions.unwrap().len(), 2);
    let condition = &split.conditions.unwrap()[0];
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "CommonEncodingVersionUnset")
    );
    // Discovery still answers from the first instance ...
    assert_eq!(double.storage_version("configmaps").as_deref(), Some("v1"));
    // ... until requests land on the upgraded one.
    double.serve_from(&second).unwrap();
    assert_eq!(double.storage_version("configmaps").as_deref(), Some("v2"));
    let created = double
        .create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new", "namespace": "demo"}}))
        .unwrap();
    assert_eq!(created["metadata"]["name"], "new");
    assert_eq!(
        double
            .stored("configmaps", Some("demo"), "new")
            .unwrap()
            .encoding,
        "v2"
    );

    // The upgrade completes: everyone agrees again.
    double.set_storage_version("configmaps", "v2").unwrap();
    let agreed = svs.get("core.configmaps").await.unwrap().status.unwrap();
    assert_eq!(agreed.common_encoding_version.as_deref(), Some("v2"));
    assert_eq!(agreed.conditions.unwrap()[0].status, "True");

    // A restart keeps the id, so the entries stay.
    double.restart_apiserver(&first).unwrap();
    assert_eq!(
        svs.get("core.configmaps")
            .await
            .unwrap()
            .status
            .unwrap()
            .storage_versions
            .unwrap()
            .len(),
        2
    );

    // Without the API the group is not served at all.
    let without = KubeDouble::builder()
        .storage_version_api(false)
        .start()
        .await
        .unwrap();
    assert_eq!(
        Http::new(&without)
            .get("/apis/internal.apiserver.k8s.io/v1alpha1/storageversions")
            .await
            .status,
        404
    );
}

// ---------------------------------------------------------------------------------------------
// Authentication: the auth ConfigMap, TokenReview, SubjectAccessReview (14, 15a, 15b)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_authentication_configmap_is_published() {
    let double = start().await;
    let client = kube_client(&double).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let cm = cms.get("extension-apiserver-authentication").await.unwrap();
    let data = cm.data.unwrap();
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    assert_eq!(
        data["requestheader-client-ca-file"],
        double.front_proxy_ca_pem()
    );
    assert_eq!(data["client-ca-file"], double.ca_pem());
    assert!(
        double
            .front_proxy_client()
            .cert_pem
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    assert_eq!(
        cm.metadata.managed_fields.unwrap()[0].manager.as_deref(),
        Some("kube-apiserver")
    );
}

#[tokio::test]
async fn token_and_access_reviews_follow_the_configured_policy() {
    let double = start().await;
    double.add_token(
        "sa-token",
        TokenUser::new(
            "system:serviceaccount:default:default",
            &["system:serviceaccounts", "system:authenticated"],
        ),
    );
    double.set_access_rules(vec![
        AccessRule::allow()
            .user("system:serviceaccount:kube-system:svm")
            .verb("patch")
            .api_group("example.test")
            .resource("widgets")
            .reason("RBAC: allowed by ClusterRoleBinding \"svm\""),
        AccessRule::deny()
            .user("mallory")
            .reason("blocked by policy"),
    ]);
    let http = Http::new(&double);
    let reviews = "/apis/authentication.k8s.io/v1/tokenreviews";

    let invalid = http
        .post(reviews, &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-valid-token"}}))
        .await;
    assert_eq!(invalid.status, 201);
    let invalid = invalid.json();
    assert_eq!(
        invalid["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
    assert_eq!(invalid["spec"]["token"], "not-a-valid-token");
    assert_eq!(
        invalid["metadata"]["managedFields"][0]["manager"],
        "kube-recorder"
    );
    assert!(invalid["metadata"].get("name").is_none());

    let client = kube_client(&double).await;
    let tokens: Api<TokenReview> = Api::all(client.clone());
    let review: TokenReview = serde_json::from_value(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "sa-token"}})).unwrap();
    let answered = tokens
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let status = answered.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(
        status.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:default:default")
    );

    let sars: Api<SubjectAccessReview> = Api::all(client);
    let ask = |user: &str,
               groups: Vec<&str>,
               verb: &str,
               group: &str,
               resource: &str|
     -> SubjectAccessReview {
        serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": "demo"}}
        }))
        .unwrap()
    };
    let allowed = sars
        .create(
            &PostParams::default(),
            &ask(
                "system:serviceaccount:kube-system:svm",
                vec![],
                "patch",
                "example.test",
                "widgets",
            ),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(allowed.allowed);
    assert_eq!(
        allowed.reason.as_deref(),
        Some("RBAC: allowed by ClusterRoleBinding \"svm\"")
    );
    let not_allowed = sars
        .create(
            &PostParams::default(),
            &ask("jane", vec![], "get", "", "pods"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!not_allowed.allowed);
    assert_eq!((not_allowed.denied, not_allowed.reason), (None, None));
    let masters = sars
        .create(
            &PostParams::default(),
            &ask("alice", vec!["system:masters"], "delete", "", "secrets"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(masters.allowed);
    let denied = sars
        .create(
            &PostParams::default(),
            &ask("mallory", vec![], "get", "", "pods"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(denied.denied, Some(true));

    let no_user = http
        .post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}),
        )
        .await;
    assert_eq!(no_user.status, 422);
    assert_eq!(
        no_user.json()["message"],
        ".authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
    );
    // Reviews are never stored: no list verb.
    assert_eq!(http.get(reviews).await.status, 405);
}

// ---------------------------------------------------------------------------------------------
// Built-in kinds, deletion, finalizers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn built_in_kinds_keep_their_rules() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);

    // Secrets fold stringData into base64 data and default their type.
    let secret = http
        .post("/api/v1/namespaces/demo/secrets", &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "hi"}}))
        .await
        .json();
    assert_eq!(secret["data"]["a"], "aGk=");
    assert_eq!(secret["type"], "Opaque");
    assert!(secret.get("stringData").is_none());

    // Deployments: generation follows the spec, status only moves through /status.
    let deploy = "/apis/apps/v1/namespaces/demo/deployments";
    let created = http
        .post(deploy, &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"replicas": 5}}))
        .await
        .json();
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(created.get("status").is_none());
    let scaled = http
        .merge_patch(
            &format!("{deploy}/d"),
            &json!({"spec": {"replicas": 3}, "status": {"replicas": 9}}),
        )
        .await
        .json();
    assert_eq!(scaled["metadata"]["generation"], 2);
    assert!(scaled.get("status").is_none());
    let status = http
        .merge_patch(
            &format!("{deploy}/d/status"),
            &json!({"spec": {"replicas": 7}, "status": {"replicas": 3}}),
        )
        .await
        .json();
    assert_eq!(status["status"]["replicas"], 3);
    assert_eq!(status["spec"]["replicas"], 3);
    assert_eq!(status["metadata"]["generation"], 2);
    let managers: Vec<&str> = status["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["subresource"] == "status")
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["kube-recorder"]);

    // Leases may be created by PUT (leader election relies on it).
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader", "namespace": "demo"}, "spec": {"holderIdentity": "a"}});
    let put = http
        .put(
            "/apis/coordination.k8s.io/v1/namespaces/demo/leases/leader",
            &lease,
        )
        .await;
    assert_eq!(put.status, 201);
    // ConfigMaps may not.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nope", "namespace": "demo"}});
    assert_eq!(
        http.put("/api/v1/namespaces/demo/configmaps/nope", &cm)
            .await
            .status,
        404
    );
    // A name mismatch between body and URL is a 400.
    assert_eq!(
        http.put("/api/v1/namespaces/demo/configmaps/other", &cm)
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn deletion_honours_preconditions_finalizers_and_namespaces() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    let held = http
        .post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}))
        .await
        .json();
    let uid = held["metadata"]["uid"].as_str().unwrap();

    let wrong = http
        .send(
            "DELETE",
            &format!("{base}/held"),
            &[("Content-Type", "application/json")],
            Some(
                json!({"preconditions": {"uid": "not-it"}})
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await;
    assert_eq!(wrong.status, 409);
    assert_eq!(
        wrong.json()["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"held\": Precondition failed: UID in precondition: not-it, UID in object meta: {uid}"
        )
    );

    // Finalizers hold the object with a deletionTimestamp until they are removed.
    let deleting = http.delete(&format!("{base}/held")).await;
    assert_eq!(deleting.status, 200);
    assert!(deleting.json()["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(http.get(&format!("{base}/held")).await.status, 200);
    let released = http
        .merge_patch(
            &format!("{base}/held"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(released.status, 200);
    assert_eq!(http.get(&format!("{base}/held")).await.status, 404);

    // A plain delete answers with a Success Status naming the resource.
    http.post(
        base,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
    )
    .await;
    let gone = http.delete(&format!("{base}/plain")).await.json();
    assert_eq!(gone["status"], "Success");
    assert_eq!(gone["details"]["kind"], "configmaps");
    assert_eq!(http.delete(&format!("{base}/plain")).await.status, 404);

    // deletecollection with a label selector.
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        http.post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"tier": tier}}})).await;
    }
    let removed = http
        .delete(&format!("{base}?labelSelector=tier%3Dx"))
        .await
        .json();
    assert_eq!(removed["items"].as_array().unwrap().len(), 2);
    assert_eq!(http.get(&format!("{base}/c")).await.status, 200);

    // Deleting a namespace takes its objects with it.
    http.post(WIDGETS, &widget("w1", 1)).await;
    let ns = http.delete("/api/v1/namespaces/demo").await;
    assert_eq!(ns.status, 200);
    assert_eq!(ns.json()["kind"], "Namespace");
    assert_eq!(http.get(&format!("{base}/c")).await.status, 404);
    assert_eq!(http.get(&format!("{WIDGETS}/w1")).await.status, 404);
}

// ---------------------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn faults_are_injected_per_route() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    http.post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "v"}})).await;
    http.post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "protected"}, "data": {"k": "v"}})).await;

    // Half of the GETs of configmaps fail with a 500, exactly.
    let half = double.add_fault(
        FaultRule::new(Fault::ServerError { code: 500 })
            .verb("get")
            .resource("configmaps")
            .fraction(0.5),
    );
    let mut codes = Vec::new();
    for _ in 0..10 {
        codes.push(http.get(&format!("{base}/x")).await.status);
    }
    assert_eq!(codes.iter().filter(|c| **c == 500).count(), 5);
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 5);
    assert_eq!(double.fault_injections(half), 5);
    // Other routes are untouched.
    assert_eq!(http.get(base).await.status, 200);
    double.remove_fault(half);

    // 503 with its reason.
    let unavailable = double.add_fault(
        FaultRule::new(Fault::ServerError { code: 503 })
            .resource("widgets.example.test")
            .times(1),
    );
    let r = http.get(WIDGETS).await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str().map(str::to_string)),
        (503, Some("ServiceUnavailable".into()))
    );
    assert_eq!(http.get(WIDGETS).await.status, 200);
    double.remove_fault(unavailable);

    // 429 with Retry-After, once.
    double.add_fault(
        FaultRule::new(Fault::TooManyRequests {
            retry_after_seconds: 2,
        })
        .verb("list")
        .times(1),
    );
    let throttled = http.get(base).await;
    assert_eq!(throttled.status, 429);
    assert_eq!(throttled.header("retry-after"), Some("2"));
    let body = throttled.json();
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(body["details"]["retryAfterSeconds"], 2);
    assert_eq!(http.get(base).await.status, 200);

    // Latency delays but does not fail.
    let slow = double.add_fault(
        FaultRule::new(Fault::Latency(Duration::from_millis(20)))
            .verb("get")
            .name("x")
            .times(1),
    );
    assert_eq!(http.get(&format!("{base}/x")).await.status, 200);
    assert_eq!(double.fault_injections(slow), 1);

    // A dropped connection: no answer at all.
    double.add_fault(
        FaultRule::new(Fault::DropConnection)
            .verb("get")
            .name("x")
            .times(1),
    );
    let fresh = reqwest::Client::new();
    let dropped = fresh.get(format!("{}{base}/x", double.url())).send().await;
    assert!(dropped.is_err(), "{dropped:?}");
    assert_eq!(
        fresh
            .get(format!("{}{base}/x", double.url()))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    // Webhook denials for chosen objects: 403 and 422, nothing written.
    double.add_fault(
        FaultRule::new(Fault::deny("policy.example.com", "no changes allowed"))
            .verb("patch")
            .name("protected"),
    );
    let before = double
        .stored("configmaps", Some("demo"), "protected")
        .unwrap();
    let denied = http
        .merge_patch(
            &format!("{base}/protected"),
            &json!({"data": {"k": "changed"}}),
        )
        .await;
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.json()["message"],
        "admission webhook \"policy.example.com\" denied the request: no changes allowed"
    );
    assert_eq!(
        double
            .stored("configmaps", Some("demo"), "protected")
            .unwrap(),
        before
    );
    assert_eq!(
        http.merge_patch(&format!("{base}/x"), &json!({"data": {"k": "ok"}}))
            .await
            .status,
        200
    );
    double.clear_faults();
    double.add_fault(
        FaultRule::new(Fault::deny_invalid("validate.example.com", "size too big"))
            .verb("patch")
            .resource("widgets.example.test"),
    );
    http.post(WIDGETS, &widget("w1", 1)).await;
    let invalid = http
        .merge_patch(&format!("{WIDGETS}/w1"), &json!({"spec": {"size": 100}}))
        .await;
    assert_eq!(
        (
            invalid.status,
            invalid.json()["reason"].as_str().map(str::to_string)
        ),
        (422, Some("Invalid".into()))
    );

    // The kube client sees the same errors.
    double.clear_faults();
    double.add_fault(
        FaultRule::new(Fault::ServerError { code: 500 })
            .verb("patch")
            .times(1),
    );
    let client = kube_client(&double).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    let err = cms
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "again"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(kube_status(err).code, 500);
    assert!(double.counters().faults_injected >= 1);
}

// ---------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn counters_track_requests_bytes_writes_and_list_pages() {
    let double = start_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "obj", 5, 32)
        .unwrap();
    double.reset_counters();
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    let mut bytes_in = 0;
    let mut bytes_out = 0;

    for _ in 0..3 {
        bytes_out += http.get(&format!("{base}/obj-00000")).await.body.len();
    }
    let first = http.get(&format!("{base}?limit=2")).await;
    bytes_out += first.body.len();
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let second = http.get(&format!("{base}?limit=2&continue={token}")).await;
    bytes_out += second.body.len();
    let change = json!({"data": {"payload": "changed"}});
    bytes_in += change.to_string().len();
    bytes_out += http
        .merge_patch(&format!("{base}/obj-00001"), &change)
        .await
        .body
        .len();
    bytes_in += change.to_string().len();
    bytes_out += http
        .merge_patch(&format!("{base}/obj-00001"), &change)
        .await
        .body
        .len();
    bytes_out += http.get("/apis").await.body.len();

    let c = double.counters();
    assert_eq!(c.requests_for("get", "configmaps"), 3);
    assert_eq!(c.requests_for("list", "configmaps"), 2);
    assert_eq!(c.requests_for("patch", "configmaps"), 2);
    assert_eq!(c.requests_for("get", "/apis"), 1);
    assert_eq!(c.total_requests, 8);
    assert_eq!(c.writes_performed_for("configmaps"), 1);
    assert_eq!(c.writes_skipped_for("configmaps"), 1);
    assert_eq!(c.bytes_in, bytes_in as u64);
    assert_eq!(c.bytes_out, bytes_out as u64);
    assert!(c.peak_requests_per_second >= 1 && c.peak_requests_per_second <= 8);

    let log = double.list_log();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].start_key, None);
    assert_eq!(log[0].next_continue.as_deref(), Some(token.as_str()));
    assert_eq!(log[1].continue_token.as_deref(), Some(token.as_str()));
    assert_eq!(log[1].start_key.as_deref(), Some("obj-00001"));
    assert_eq!(
        log[1].token_revision,
        log[0].resource_version.map(|r| r as i64)
    );
    assert_eq!((log[1].items, log[1].code), (2, 200));

    // The same numbers over the admin API, which does not count itself.
    let admin = http.get("/_double/counters").await.json();
    assert_eq!(admin["requests"]["get configmaps"], 3);
    assert_eq!(admin["writesSkipped"], 1);
    assert_eq!(double.counters().total_requests, 8);
}

// ---------------------------------------------------------------------------------------------
// HTTPS
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn https_with_the_kube_client_and_a_fresh_ca() {
    let double = KubeDouble::builder().tls(true).start().await.unwrap();
    assert!(double.url().starts_with("https://127.0.0.1:"));
    let client = kube_client(&double).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    assert_eq!(
        leases
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let discovery = Discovery::new(client).run_aggregated().await.unwrap();
    assert!(discovery.has_group("apiextensions.k8s.io"));

    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(double.ca_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let api = http
        .get(format!("{}/api", double.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
    // Plain HTTP on the TLS port is not served.
    let plain = reqwest::get(format!("http://{}/api", double.addr())).await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);
}

// ---------------------------------------------------------------------------------------------
// At the migrator's scale
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn twenty_thousand_objects_page_and_migrate() {
    let double = start_with_widgets().await;
    double
        .preload("widgets.example.test", Some("demo"), "w", 20_000, 64)
        .unwrap();
    double
        .set_storage_version("widgets.example.test", "v2")
        .unwrap();
    double.reset_counters();
    let http = Http::new(&double);

    // A storage migration's pass: metadata-only pages of 500; the first page's objects get
    // the migrator's patch (only their resourceVersion), which re-encodes them into v2.
    let mut token: Option<String> = None;
    let mut seen = 0usize;
    let mut expected_remaining = 20_000usize;
    loop {
        let path = match &token {
            Some(t) => format!("{WIDGETS}?limit=500&continue={t}"),
            None => format!("{WIDGETS}?limit=500"),
        };
        let first_page = token.is_none();
        let page = http.get_accept(&path, METADATA_LIST).await.json();
        let items = page["items"].as_array().unwrap();
        seen += items.len();
        expected_remaining -= items.len();
        for item in items.iter().filter(|_| first_page) {
            let name = item["metadata"]["name"].as_str().unwrap();
            let rv = item["metadata"]["resourceVersion"].as_str().unwrap();
            let r = http
                .merge_patch(
                    &format!("{WIDGETS}/{name}"),
                    &json!({"metadata": {"resourceVersion": rv}}),
                )
                .await;
            assert_eq!(r.status, 200);
        }
        match page["metadata"]["continue"].as_str() {
            Some(t) => {
                assert_eq!(page["metadata"]["remainingItemCount"], expected_remaining);
                token = Some(t.to_string());
            }
            None => break,
        }
    }
    assert_eq!(seen, 20_000);
    let counters = double.counters();
    assert_eq!(counters.requests_for("list", "widgets.example.test"), 40);
    assert_eq!(counters.writes_performed_for("widgets.example.test"), 500);
    let summary = double.stored_summary("widgets.example.test");
    assert_eq!(
        summary.get(&("example.test/v2".to_string(), None)),
        Some(&500)
    );
    assert_eq!(
        summary.get(&("example.test/v1".to_string(), None)),
        Some(&19_500)
    );

    // The page log shows where each page started (what a crash-resume test checks).
    let log = double.list_log();
    assert_eq!(log.len(), 40);
    assert_eq!(log[1].start_key.as_deref(), Some("w-00499"));
    assert!(log.iter().all(|l| l.metadata_only && l.items == 500));
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn bad_input_gets_a_status_and_changes_nothing() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    http.post(WIDGETS, &widget("w1", 1)).await;
    http.post(
        "/api/v1/namespaces/demo/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}),
    )
    .await;
    let revision = double.revision();
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let cm = "/api/v1/namespaces/demo/configmaps/cm";
    let json_ct = "application/json";
    let merge = "application/merge-patch+json";
    let jsonpatch = "application/json-patch+json";
    let apply = "application/apply-patch+yaml";
    let cases: Vec<(&str, String, &str, Vec<u8>)> = vec![
        ("POST", crds.into(), json_ct, br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"x.y"},"spec":"nonsense"}"#.to_vec()),
        ("POST", crds.into(), json_ct, br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"a.b"},"spec":{"group":"b","names":{"plural":"a","kind":"A"},"scope":"Namespaced","versions":["v1"]}}"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), json_ct, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), json_ct, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"l","labels":{"a":1}}}"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), json_ct, br#"[1,2,3]"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), "application/vnd.kubernetes.protobuf", b"k8s\0".to_vec()),
        ("POST", "/api/v1/namespaces/demo/secrets".into(), json_ct, br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"a":"not base64!"}}"#.to_vec()),
        ("PATCH", cm.into(), jsonpatch, br#"[{"op":"replace","path":"","value":5}]"#.to_vec()),
        ("PATCH", cm.into(), jsonpatch, br#"{"not":"a list"}"#.to_vec()),
        ("PATCH", cm.into(), merge, br#""just a string""#.to_vec()),
        ("PATCH", cm.into(), merge, br#"{"metadata":{"name":"renamed"}}"#.to_vec()),
        ("PATCH", cm.into(), merge, br#"{"metadata":{"resourceVersion":"abc"}}"#.to_vec()),
        ("PATCH", cm.into(), merge, br#"{"data":{"k":["list"]}}"#.to_vec()),
        ("PATCH", cm.into(), merge, b"{not json".to_vec()),
        ("PATCH", format!("{WIDGETS}/w1?fieldManager=m"), apply, b"- just\n- a list\n".to_vec()),
        ("PATCH", format!("{WIDGETS}/w1?fieldManager=m"), apply, b"{\"metadata\":{}}".to_vec()),
        ("PATCH", format!("{WIDGETS}/w1?dryRun=Sometimes"), merge, b"{}".to_vec()),
        ("PUT", cm.into(), json_ct, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"elsewhere"}}"#.to_vec()),
        ("DELETE", cm.into(), json_ct, b"{garbage".to_vec()),
        ("GET", "/api/v1/namespaces/demo/configmaps?limit=abc".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?labelSelector=a%20in%20(".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?fieldSelector=spec.x%3D1".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?resourceVersion=banana&resourceVersionMatch=Exact".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?resourceVersion=1&resourceVersionMatch=Sometimes".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?limit=1&continue=eyJ2IjoieCJ9&resourceVersion=5".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?watch=1&resourceVersion=banana".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?watch=1&timeoutSeconds=-3".into(), json_ct, Vec::new()),
        ("POST", "/api/v1/namespaces/demo/configmaps/cm".into(), json_ct, b"{}".to_vec()),
        ("PUT", "/api/v1/namespaces/demo/configmaps".into(), json_ct, b"{}".to_vec()),
        ("PATCH", "/api/v1/namespaces/demo/configmaps".into(), merge, b"{}".to_vec()),
        ("GET", "/api/v1/namespaces/demo/configmaps/cm".into(), json_ct, Vec::new()),
    ];
    for (method, path, content_type, body) in cases {
        let accept = if path.ends_with("/cm") && method == "GET" {
            "application/vnd.kubernetes.protobuf"
        } else {
            "application/json"
        };
        let r = http
            .send(
                method,
                &path,
                &[("Content-Type", content_type), ("Accept", accept)],
                Some(body.clone()),
            )
            .await;
        let shown = format!("{method} {path} {}", String::from_utf8_lossy(&body));
        assert!(
            (400..500).contains(&r.status),
            "{shown}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        let status = r.json();
        assert_eq!(status["kind"], "Status", "{shown}");
        assert_eq!(status["status"], "Failure", "{shown}");
        assert_eq!(status["code"], r.status, "{shown}");
    }
    // A continue token may not escape its list.
    let escape = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":-1,"start":"../kube-system/extension-apiserver-authentication"}"#)
    };
    assert_eq!(
        http.get(&format!(
            "/api/v1/namespaces/demo/configmaps?limit=1&continue={escape}"
        ))
        .await
        .status,
        400
    );

    assert_eq!(double.revision(), revision, "nothing was written");
    assert_eq!(http.get(cm).await.status, 200, "the server still answers");
}
