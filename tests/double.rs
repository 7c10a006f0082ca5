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
        .watch(&WatchParams::default(), &list.metadata.resource_version.clone().unwrap())
        .await
        .unwrap()
        .boxed();

    let manifest: CustomResourceDefinition =
        serde_json::from_value(crd_manifest("example.test", "widgets", "Widget", &["v1", "v2"])).unwrap();
    let created = crds.create(&PostParams::default(), &manifest).await.unwrap();
    let status = created.status.clone().unwrap();
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    let conditions = status.conditions.unwrap();
    assert!(conditions.iter().any(|c| c.type_ == "Established" && c.status == "True"));
    assert_eq!(created.metadata.generation, Some(1));

    let added = tokio::time::timeout(GUARD, events.try_next()).await.unwrap().unwrap();
    assert!(matches!(added, Some(WatchEvent::Added(ref c)) if c.metadata.name.as_deref() == Some("widgets.example.test")));

    // Custom resources are served at once.
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "demo", &widget_resource("v1"));
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
    assert_eq!(double.storage_version("widgets.example.test").as_deref(), Some("v2"));

    let modified = tokio::time::timeout(GUARD, events.try_next()).await.unwrap().unwrap();
    let Some(WatchEvent::Modified(crd)) = modified else {
        panic!("expected MODIFIED, got {modified:?}");
    };
    assert_eq!(crd.status.unwrap().stored_versions, Some(vec!["v1".into(), "v2".into()]));

    // /status may narrow storedVersions (what a finished migration does) ...
    let narrowed = crds
        .patch_status(
            "widgets.example.test",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"storedVersions": ["v2"]}})),
        )
        .await
        .unwrap();
    assert_eq!(narrowed.status.unwrap().stored_versions, Some(vec!["v2".to_string()]));
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
    assert!(double.stored("widgets.example.test", Some("demo"), "w1").is_none());
}

#[tokio::test]
async fn dynamic_objects_round_trip_through_kube() {
    let double = start_with_widgets().await;
    let client = kube_client(&double).await;
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), "demo", &widget_resource("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), "demo", &widget_resource("v2"));

    let created = v1
        .create(&PostParams::default(), &serde_json::from_value(widget("w1", 1)).unwrap())
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let managed = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(managed.len(), 1);

    // Read through the other served version: same object, apiVersion converted.
    let through_v2 = v2.get("w1").await.unwrap();
    assert_eq!(through_v2.types.as_ref().unwrap().api_version, "example.test/v2");
    assert_eq!(through_v2.metadata.uid.as_deref(), Some(uid.as_str()));

    let patched = v1
        .patch("w1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 5}})))
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["size"], 5);
    assert_eq!(patched.metadata.generation, Some(2));
    assert_ne!(patched.metadata.resource_version, created.metadata.resource_version);

    let listed = v2.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].types.as_ref().unwrap().api_version, "example.test/v2");

    // Built-in typed objects too.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("cm1".into());
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let mut got = cms.get("cm1").await.unwrap();
    got.data = Some([("k".to_string(), "v2".to_string())].into());
    let replaced = cms.replace("cm1", &PostParams::default(), &got).await.unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "v2");

    let deleted = v1.delete("w1", &DeleteParams::default()).await.unwrap();
    let status = deleted.right().expect("a Success Status for a custom resource");
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
    let fields: Vec<&str> = body["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
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
        .send("POST", cms, &[("Content-Type", "application/json")], Some(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":1}}"#.to_vec()))
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
        .post(&format!("{cms}?dryRun=Foo"), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry2"}}))
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
    let nameless = http.post(cms, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})).await;
    assert_eq!(nameless.status, 422);

    // Duplicate -> 409 AlreadyExists with the plural in details.kind.
    let again = http.post(cms, &generated).await;
    assert_eq!(again.status, 500, "a resourceVersion in a create body is refused");
    let mut copy = generated.clone();
    copy["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let dup = http.post(cms, &copy).await;
    assert_eq!(dup.status, 409);
    assert_eq!(dup.json()["reason"], "AlreadyExists");
    assert_eq!(dup.json()["details"]["kind"], "configmaps");

    // A namespace that does not exist: 404 about the namespace on create, about the object on get.
    let nowhere = http
        .post("/api/v1/namespaces/no-such-ns/configmaps", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}))
        .await;
    assert_eq!(nowhere.status, 404);
    assert_eq!(nowhere.json()["details"]["kind"], "namespaces");
    let missing = http.get("/api/v1/namespaces/no-such-ns/configmaps/x").await.json();
    assert_eq!(missing["message"], "configmaps \"x\" not found");

    // A body over 3 MiB: 413.
    let huge = vec![b'x'; 3 * 1024 * 1024 + 10];
    let r = http.send("POST", cms, &[("Content-Type", "application/json")], Some(huge)).await;
    assert_eq!(r.status, 413);

    // Custom resources need kind and apiVersion in the body.
    let kindless = http.post(WIDGETS, &json!({"apiVersion": "example.test/v1", "metadata": {"name": "k"}})).await;
    assert_eq!(kindless.status, 400);
}

// ---------------------------------------------------------------------------------------------
// LIST: paging, snapshots, expiry, metadata-only (recordings 04-06)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn lists_page_with_continue_tokens_over_a_consistent_snapshot() {
    let double = start().await;
    double.ensure_namespace("page").unwrap();
    double.preload("configmaps", Some("page"), "obj", 25, 16).unwrap();
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/page/configmaps";

    let first = http.get(&format!("{base}?limit=10")).await.json();
    assert_eq!(first["kind"], "ConfigMapList");
    assert_eq!(first["apiVersion"], "v1");
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_string();
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
    http.merge_patch(&format!("{base}/obj-00012"), &json!({"data": {"payload": "changed"}}))
        .await;

    let second = http.get(&format!("{base}?limit=10&continue={token}")).await.json();
    assert_eq!(second["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(second["metadata"]["remainingItemCount"], 5);
    let names: Vec<&str> = second["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"obj-00010"));
    assert!(!names.contains(&"obj-00010a"));
    let twelve = second["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == "obj-00012").unwrap();
    assert_ne!(twelve["data"]["payload"], "changed");

    let third = http
        .get(&format!("{base}?limit=10&continue={}", second["metadata"]["continue"].as_str().unwrap()))
        .await
        .json();
    assert_eq!(third["items"].as_array().unwrap().len(), 5);
    assert!(third["metadata"].get("continue").is_none());
    assert!(third["metadata"].get("remainingItemCount").is_none());

    // All namespaces: keys are namespace/name and tokens say so (recording 04).
    let all = http.get("/api/v1/configmaps?limit=1").await.json();
    let start_key = decode_token(all["metadata"]["continue"].as_str().unwrap())["start"].clone();
    assert_eq!(start_key, "kube-system/extension-apiserver-authentication\u{0}");

    // Exact resourceVersion serves the old snapshot; NotOlderThan the current state.
    let exact = http.get(&format!("{base}?limit=100&resourceVersion={rv}&resourceVersionMatch=Exact")).await.json();
    assert_eq!(exact["items"].as_array().unwrap().len(), 25);
    let newer = http.get(&format!("{base}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan")).await.json();
    assert_eq!(newer["items"].as_array().unwrap().len(), 26);
    // A resourceVersion the store has not reached: 504 Too large resource version.
    let ahead = http.get(&format!("{base}?resourceVersion=999999&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(ahead.status, 504);
    assert_eq!(ahead.json()["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");

    // Invalid option combinations: 422 on ListOptions (recording 10b step 6).
    let invalid = http.get(&format!("{base}?allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(invalid.status, 422);
    assert_eq!(
        invalid.json()["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"
    );
    assert_eq!(http.get(&format!("{base}?continue=garbage!")).await.status, 400);

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
    double.preload("configmaps", Some("page"), "obj", 6, 8).unwrap();
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/page/configmaps";

    let first = http.get(&format!("{base}?limit=2")).await.json();
    let rv: u64 = first["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
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
    assert!(status["message"].as_str().unwrap().starts_with("The provided continue parameter is too old"));
    let inconsistent = status["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(
        decode_token(&inconsistent),
        json!({"v": "meta.k8s.io/v1", "rv": -1, "start": "obj-00001\u{0}"})
    );

    // The inconsistent token continues after the same key, in the current state.
    let next = http.get(&format!("{base}?limit=2&continue={inconsistent}")).await.json();
    let new_rv: u64 = next["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(new_rv > rv);
    let names: Vec<&str> = next["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["obj-00001a", "obj-00002"]);
    assert_eq!(next["metadata"]["remainingItemCount"], 3);

    // Exact reads of the compacted revision: 410 without a token.
    let old = http.get(&format!("{base}?limit=2&resourceVersion={rv}&resourceVersionMatch=Exact")).await;
    assert_eq!(old.status, 410);
    assert_eq!(old.json()["message"], "The resourceVersion for the provided list is too old.");

    // The kube client surfaces the 410 as an Expired API error.
    let client = kube_client(&double).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "page");
    let err = api.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap_err();
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
    double.preload("configmaps", Some("page"), "obj", 4, 8).unwrap();
    let http = Http::new(&double);
    let first = http.get("/api/v1/namespaces/page/configmaps?limit=1").await.json();
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
        assert_eq!(http.post(WIDGETS, &widget(&format!("w{i}"), i)).await.status, 201);
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

    let one = http.get_accept(&format!("{WIDGETS}/w1"), METADATA_ONE).await.json();
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert_eq!(one["metadata"]["name"], "w1");

    let beta = http
        .get_accept(WIDGETS, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1")
        .await
        .json();
    assert_eq!(beta["items"][0]["apiVersion"], "meta.k8s.io/v1beta1");

    // The mismatched cases of recording 06.
    let wrong_single = http.get_accept(&format!("{WIDGETS}/w1"), METADATA_LIST).await;
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
    let metas = widgets.list_metadata(&ListParams::default().limit(2)).await.unwrap();
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
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let before = double.stored("widgets.example.test", Some("demo"), "w1").unwrap();
    assert_eq!(before.encoding, "example.test/v1");
    assert!(before.key.is_none());
    assert!(before.bytes.starts_with(b"{\"apiVersion\":\"example.test/v1\""));
    assert!(before.bytes.ends_with(b"\n"));
    assert!(before.json().unwrap()["metadata"].get("resourceVersion").is_none());
    double.reset_counters();

    // 08 A3: nothing changes -> same resourceVersion, no write.
    let noop = http.merge_patch(&format!("{WIDGETS}/w1"), &json!({"metadata": {"resourceVersion": rv}})).await;
    assert_eq!(noop.status, 200);
    assert_eq!(noop.json()["metadata"]["resourceVersion"], rv.as_str());
    let after = double.stored("widgets.example.test", Some("demo"), "w1").unwrap();
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
    double.set_storage_version("widgets.example.test", "v2").unwrap();
    let reencoded = http.merge_patch(&format!("{WIDGETS}/w1"), &json!({"metadata": {"resourceVersion": rv}})).await;
    assert_eq!(reencoded.status, 200);
    let reencoded = reencoded.json();
    let new_rv = reencoded["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    assert_ne!(new_rv, rv);
    assert_eq!(reencoded["metadata"]["managedFields"], current["metadata"]["managedFields"]);
    assert_eq!(reencoded["metadata"]["generation"], current["metadata"]["generation"]);
    let stored = double.stored("widgets.example.test", Some("demo"), "w1").unwrap();
    assert_eq!(stored.encoding, "example.test/v2");
    assert!(stored.bytes.starts_with(b"{\"apiVersion\":\"example.test/v2\""));
    assert_eq!(stored.create_revision, before.create_revision);
    assert_eq!(double.counters().writes_performed_for("widgets.example.test"), 1);

    // Once migrated, the same patch is a no-op again.
    let again = http.merge_patch(&format!("{WIDGETS}/w1"), &json!({"metadata": {"resourceVersion": new_rv}})).await;
    assert_eq!(again.json()["metadata"]["resourceVersion"], new_rv.as_str());

    // Key rotation: objects under the old key (or none) are rewritten under the new one.
    let cm = http
        .post("/api/v1/namespaces/demo/configmaps", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "secretish"}, "data": {"k": "v"}}))
        .await
        .json();
    let cm_rv = cm["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    double.set_encryption_key("configmaps", Some("key2")).unwrap();
    let rotated = http
        .merge_patch("/api/v1/namespaces/demo/configmaps/secretish", &json!({"metadata": {"resourceVersion": cm_rv}}))
        .await
        .json();
    assert_ne!(rotated["metadata"]["resourceVersion"], cm_rv.as_str());
    let stored = double.stored("configmaps", Some("demo"), "secretish").unwrap();
    assert_eq!(stored.key.as_deref(), Some("key2"));
    assert!(stored.bytes.starts_with(b"k8s:enc:aescbc:v1:key2:"));
    assert_eq!(stored.json().unwrap()["data"]["k"], "v");
    let summary = double.stored_summary("configmaps");
    assert_eq!(summary.get(&("v1".to_string(), Some("key2".to_string()))), Some(&1));
    // Reads decrypt transparently.
    let read = http.get("/api/v1/namespaces/demo/configmaps/secretish").await.json();
    assert_eq!(read["data"]["k"], "v");
}

#[tokio::test]
async fn preconditions_conflict_like_kube_apiserver() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let created = http.post(WIDGETS, &widget("w2", 2)).await.json();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    http.merge_patch(&format!("{WIDGETS}/w2"), &json!({"spec": {"size": 3}})).await;

    // 09a: a stale resourceVersion -> 409 Conflict, details.kind is the plural.
    let stale = http
        .merge_patch(&format!("{WIDGETS}/w2"), &json!({"metadata": {"resourceVersion": rv}, "spec": {"size": 23}}))
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
    let wrong_uid = http.merge_patch(&format!("{WIDGETS}/w2"), &json!({"metadata": {"uid": "wrong"}})).await;
    assert_eq!(wrong_uid.status, 422);
    let body = wrong_uid.json();
    assert_eq!(
        body["message"],
        "Widget.example.test \"w2\" is invalid: metadata.uid: Invalid value: \"wrong\": field is immutable"
    );
    assert_eq!(body["details"]["causes"].as_array().unwrap().len(), 2);
    assert_eq!(body["details"]["kind"], "Widget");
    let right_uid = http
        .merge_patch(&format!("{WIDGETS}/w2"), &json!({"metadata": {"uid": uid}, "spec": {"size": 2}}))
        .await;
    assert_eq!(right_uid.status, 200);

    // A uid in a PUT body is a precondition: 409.
    let mut current = http.get(&format!("{WIDGETS}/w2")).await.json();
    current["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    let put = http.put(&format!("{WIDGETS}/w2"), &current).await;
    assert_eq!(put.status, 409);
    assert!(put.json()["message"].as_str().unwrap().contains("Precondition failed: UID in precondition"));

    // Custom resources need a resourceVersion on PUT.
    let mut unconditional = http.get(&format!("{WIDGETS}/w2")).await.json();
    unconditional["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    assert_eq!(http.put(&format!("{WIDGETS}/w2"), &unconditional).await.status, 422);

    // The same on a ConfigMap: core group omitted from details.
    http.post("/api/v1/namespaces/demo/configmaps", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": {"k": "v1"}}))
        .await;
    let cm_stale = http
        .merge_patch("/api/v1/namespaces/demo/configmaps/cm1", &json!({"metadata": {"resourceVersion": "1"}, "data": {"k": "changed"}}))
        .await
        .json();
    assert_eq!(cm_stale["details"], json!({"name": "cm1", "kind": "configmaps"}));
    // ConfigMaps may be replaced without a resourceVersion.
    let mut cm = http.get("/api/v1/namespaces/demo/configmaps/cm1").await.json();
    cm["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    cm["data"]["k"] = json!("v2");
    assert_eq!(http.put("/api/v1/namespaces/demo/configmaps/cm1", &cm).await.status, 200);

    // 09c/09d: missing objects are 404; strategic merge on a CR is 415.
    assert_eq!(http.merge_patch(&format!("{WIDGETS}/gone"), &json!({"spec": {}})).await.status, 404);
    let smp = http
        .patch(&format!("{WIDGETS}/w2"), "application/strategic-merge-patch+json", &json!({"spec": {"size": 5}}))
        .await;
    assert_eq!(smp.status, 415);
    assert_eq!(
        smp.json()["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    assert_eq!(http.patch(&format!("{WIDGETS}/w2"), "text/plain", &json!({})).await.status, 415);
    // Strategic merge is accepted on built-in types.
    let smp_cm = http
        .patch("/api/v1/namespaces/demo/configmaps/cm1", "application/strategic-merge-patch+json", &json!({"data": {"extra": "1"}}))
        .await;
    assert_eq!(smp_cm.status, 200);
    assert_eq!(smp_cm.json()["data"]["extra"], "1");

    // JSON patch errors: 422 from the patch handler.
    let bad_json_patch = http
        .patch(&format!("{WIDGETS}/w2"), "application/json-patch+json", &json!([{"op": "replace", "path": "/spec/nope/deeper", "value": 1}]))
        .await;
    assert_eq!(bad_json_patch.status, 422);
}

#[tokio::test]
async fn server_side_apply_of_the_migrator_body() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let created = http.post(WIDGETS, &widget("w3", 3)).await.json();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let apply = |version: &str, uid: &str, rv: &str| {
        json!({"apiVersion": format!("example.test/{version}"), "kind": "Widget", "metadata": {"uid": uid, "resourceVersion": rv}})
    };
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
    let a1 = ssa(format!("{WIDGETS}/w3?fieldManager=x"), apply("v1", &uid, &rv)).await;
    assert_eq!(a1.status, 200);
    let a1 = a1.json();
    assert_eq!(a1["metadata"]["resourceVersion"], rv.as_str());
    assert!(!a1["metadata"]["managedFields"].as_array().unwrap().iter().any(|m| m["manager"] == "x"));

    // B1: after the switch, re-encoded with a new resourceVersion.
    double.set_storage_version("widgets.example.test", "v2").unwrap();
    let b1 = ssa(format!("{path_v2}/w3?fieldManager=storage-version-migrator-controller"), apply("v2", &uid, &rv)).await;
    assert_eq!(b1.status, 200);
    let b1 = b1.json();
    assert_eq!(b1["apiVersion"], "example.test/v2");
    assert_ne!(b1["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(double.stored("widgets.example.test", Some("demo"), "w3").unwrap().encoding, "example.test/v2");

    // B3: stale -> 409; B4: wrong uid -> 422 twice; B5: gone with a uid -> 409 uid mismatch.
    let b3 = ssa(format!("{path_v2}/w3?fieldManager=m"), apply("v2", &uid, &rv)).await;
    assert_eq!(b3.status, 409);
    let current_rv = b1["metadata"]["resourceVersion"].as_str().unwrap();
    let zero = "00000000-0000-0000-0000-000000000000";
    let b4 = ssa(format!("{path_v2}/w3?fieldManager=m"), apply("v2", zero, current_rv)).await;
    assert_eq!(b4.status, 422);
    assert_eq!(b4.json()["details"]["causes"].as_array().unwrap().len(), 2);
    let b5 = ssa(format!("{path_v2}/gone?fieldManager=m"), apply("v2", &uid, "1")).await;
    assert_eq!(b5.status, 409);
    assert_eq!(
        b5.json()["message"],
        format!("Operation cannot be fulfilled on widgets.example.test \"gone\": uid mismatch: the provided object specified uid {uid}, and no existing object was found")
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
            &Patch::Apply(json!({"apiVersion": "example.test/v2", "kind": "Widget", "spec": {"size": 2}})),
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
    let rv = http.get(base).await.json()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let resp = watch_request(&double, &format!("{base}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true")).await;

    http.post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "live2"}, "data": {"x": "1"}})).await;
    // Another namespace's object is not this watch's business.
    double.ensure_namespace("other").unwrap();
    double.create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere", "namespace": "other"}})).unwrap();
    http.merge_patch(&format!("{base}/live2"), &json!({"data": {"x": "2"}})).await;
    http.delete(&format!("{base}/live2")).await;

    let events = read_events(resp, |e| e.len() == 3).await;
    assert_eq!(types(&events), ["ADDED", "MODIFIED", "DELETED"]);
    let added = &events[0]["object"];
    assert_eq!(added["kind"], "ConfigMap");
    assert_eq!(added["apiVersion"], "v1");
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(rvs[0] < rvs[1] && rvs[1] < rvs[2], "DELETED carries a new resourceVersion: {rvs:?}");
    assert_eq!(events[2]["object"]["data"]["x"], "2");

    // At timeoutSeconds the server closes the stream after a BOOKMARK with the last
    // resourceVersion it sent.
    let now = double.revision();
    let resp = watch_request(&double, &format!("{base}?watch=1&resourceVersion={now}&allowWatchBookmarks=true&timeoutSeconds=1")).await;
    let events = read_events(resp, |_| false).await;
    assert_eq!(
        events,
        vec![json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": now.to_string()}}})]
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
    http.merge_patch(&format!("{WIDGETS}/r1"), &json!({"spec": {"size": 9}})).await;
    let resp = watch_request(&double, &format!("{WIDGETS}?watch=true&resourceVersion={start_rv}")).await;
    let events = read_events(resp, |e| e.len() == 4).await;
    assert_eq!(types(&events), ["ADDED", "ADDED", "ADDED", "MODIFIED"]);
    assert_eq!(events[3]["object"]["spec"]["size"], 9);
    assert_eq!(events[3]["object"]["apiVersion"], "example.test/v1");

    // A label selector sees objects entering and leaving it.
    let labelled = watch_request(
        &double,
        &format!("{WIDGETS}?watch=1&resourceVersion={}&labelSelector=tier%3Dgold", double.revision()),
    )
    .await;
    http.merge_patch(&format!("{WIDGETS}/r0"), &json!({"metadata": {"labels": {"tier": "gold"}}})).await;
    http.merge_patch(&format!("{WIDGETS}/r2"), &json!({"spec": {"size": 7}})).await;
    http.merge_patch(&format!("{WIDGETS}/r0"), &json!({"metadata": {"labels": {"tier": "silver"}}})).await;
    let events = read_events(labelled, |e| e.len() == 2).await;
    assert_eq!(types(&events), ["ADDED", "DELETED"]);
    assert_eq!(events[1]["object"]["metadata"]["name"], "r0");

    // After compaction an old revision gets one ERROR event with a 410 Status (10a step 2).
    double.compact();
    let resp = watch_request(&double, &format!("{WIDGETS}?watch=1&resourceVersion={start_rv}")).await;
    let events = read_events(resp, |_| false).await;
    assert_eq!(types(&events), ["ERROR"]);
    let status = &events[0]["object"];
    assert_eq!((status["code"].as_u64(), status["reason"].as_str()), (Some(410), Some("Expired")));
    assert!(status["message"].as_str().unwrap().starts_with(&format!("too old resource version: {start_rv} (")));

    // Through kube, the same surfaces as WatchEvent::Error.
    let client = kube_client(&double).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "demo", &widget_resource("v1"));
    let mut stream = widgets
        .watch(&WatchParams::default(), &start_rv.to_string())
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(GUARD, stream.try_next()).await.unwrap().unwrap();
    assert!(matches!(first, Some(WatchEvent::Error(ref e)) if e.code == 410), "{first:?}");
}

#[tokio::test]
async fn watch_lists_end_their_initial_events_with_a_bookmark() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    for name in ["cm1", "cm2"] {
        http.post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})).await;
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
    let invalid = http.get(&format!("{base}?watch=1&allowWatchBookmarks=true&sendInitialEvents=true")).await;
    assert_eq!(invalid.status, 422);
    assert_eq!(
        invalid.json()["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );

    // The kube runtime watcher, both with list+watch and with streaming lists.
    let client = kube_client(&double).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "demo");
    for config in [watcher::Config::default(), watcher::Config::default().streaming_lists()] {
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
    let double = KubeDouble::builder().watch_list(false).start().await.unwrap();
    double.ensure_namespace("demo").unwrap();
    let resp = watch_request(&double, "/api/v1/namespaces/demo/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=3").await;
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
    let event = tokio::time::timeout(GUARD, stream.try_next()).await.unwrap().unwrap();
    let Some(WatchEvent::Added(meta)) = event else {
        panic!("expected ADDED, got {event:?}");
    };
    assert_eq!(meta.metadata.name.as_deref(), Some("m1"));
}
