//! Fault injection.

use super::*;

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
    assert_answers_as_recorded(&http.get(base).await, &recorded_429(2));
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

    // Non-resource routes (discovery) by path.
    double.clear_faults();
    double.add_fault(
        FaultRule::new(Fault::ServerError { code: 503 })
            .path("/apis")
            .times(1),
    );
    assert_eq!(http.get_accept("/apis", AGGREGATED).await.status, 503);
    assert_eq!(http.get_accept("/apis", AGGREGATED).await.status, 200);
    assert_eq!(http.get("/api").await.status, 200);

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

#[tokio::test]
async fn forbidden_answers_with_rbacs_text() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    double.add_fault(
        FaultRule::new(Fault::Forbidden)
            .resource("leases.coordination.k8s.io")
            .namespace("kube-system"),
    );
    let r = http
        .get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
        .await;
    assert_eq!(r.status, 403);
    let status = r.json();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:svm-system:svm-apiserver\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"kube-system\""
    );
    // Elsewhere, no fault.
    assert_eq!(
        http.get("/apis/coordination.k8s.io/v1/namespaces/default/leases")
            .await
            .status,
        200
    );
    let parsed: FaultRule = "resource=leases.coordination.k8s.io,fault=forbidden"
        .parse()
        .unwrap();
    assert_eq!(parsed.fault, Some(Fault::Forbidden));
}

#[tokio::test]
async fn a_cut_stream_ends_a_watch_list_before_its_bookmark() {
    let double = start_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 10, 16)
        .unwrap();
    let cut = double.add_fault(
        "verb=watch,resource=configmaps,fault=cut:4,times=1"
            .parse()
            .unwrap(),
    );
    let base = "/api/v1/namespaces/demo/configmaps";
    let query =
        "watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
    // The stream ends (the server closes it) after four events: no initial-events-end.
    let resp = watch_request(&double, &format!("{base}?{query}")).await;
    let events = read_events(resp, |_| false).await;
    assert_eq!(types(&events), ["ADDED"; 4]);
    assert_eq!(double.fault_injections(cut), 1);
    // Once: the next watch-list is whole.
    let resp = watch_request(&double, &format!("{base}?{query}")).await;
    let events = read_events(resp, |e| e.len() == 11).await;
    assert_eq!(types(&events).last().map(String::as_str), Some("BOOKMARK"));
}

/// Recording 21: step 1, the watch cache still filling; step 2, API Priority and Fairness.
fn recorded_429(step: usize) -> recordings::Exchange {
    recordings::all()
        .into_iter()
        .find(|e| e.file.starts_with("21-") && e.step == step)
        .expect("recording 21")
}

/// The double's 429 answers as kube-apiserver's: code, media type, Retry-After, APF's
/// headers, and the body — the Status, or the filter's plain text.
fn assert_answers_as_recorded(reply: &Reply, recorded: &recordings::Exchange) {
    let id = recorded.id();
    assert_eq!(reply.status, recorded.code, "{id}");
    for header in [
        "Content-Type",
        "Retry-After",
        "X-Content-Type-Options",
        "Cache-Control",
    ] {
        assert_eq!(
            reply.header(header),
            recorded.response_header(header),
            "{id}: {header}"
        );
    }
    for header in [
        "X-Kubernetes-Pf-Flowschema-Uid",
        "X-Kubernetes-Pf-Prioritylevel-Uid",
    ] {
        assert!(recorded.response_header(header).is_some(), "{id}: {header}");
        assert!(reply.header(header).is_some(), "{id}: {header}");
    }
    match &recorded.response {
        Some(status) => assert_eq!(&reply.json(), status, "{id}"),
        None => assert_eq!(
            String::from_utf8_lossy(&reply.body),
            "Too many requests, please try again later.\n",
            "{id}"
        ),
    }
}

#[tokio::test]
async fn a_filling_watch_cache_answers_as_recorded() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    double.add_fault(
        FaultRule::new(Fault::StorageInitializing)
            .verb("watch")
            .resource("widgets.example.test")
            .times(1),
    );
    let watch_list = format!(
        "{WIDGETS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
    );
    assert_answers_as_recorded(&http.get(&watch_list).await, &recorded_429(1));
    assert_eq!(http.get(&watch_list).await.status, 200, "once");
}
