//! WATCH (recordings 10a, 10b).

use super::*;

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
