//! Discovery (recordings 00-03b).

use super::*;

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
