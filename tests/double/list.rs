//! LIST: paging, snapshots, expiry, metadata-only (recordings 04-06).

use super::*;

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

#[tokio::test]
async fn an_empty_metadata_only_list_has_null_items_and_a_typed_one_an_empty_array() {
    // Recording 19: Go encodes the metadata-only list's nil slice as null.
    let double = start().await;
    let http = Http::new(&double);
    let path = "/apis/apps/v1/deployments?limit=500";
    let metadata = http.get_accept(path, METADATA_LIST).await.json();
    assert_eq!(metadata["kind"], "PartialObjectMetadataList");
    assert!(metadata["items"].is_null(), "{metadata}");
    let typed = http.get(path).await.json();
    assert_eq!(typed["kind"], "DeploymentList");
    assert_eq!(typed["items"], json!([]));
}
