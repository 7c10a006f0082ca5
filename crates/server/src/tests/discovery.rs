//! Discovery documents and unknown paths.

use super::*;

#[tokio::test]
async fn apis_serves_the_legacy_group_list_by_default() {
    let reply = get_as(&app(), "/apis", "*/*").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    assert_eq!(reply.header("cache-control"), "no-cache, private");
    assert_eq!(reply.body.last(), Some(&b'\n'));
    let list = reply.json();
    assert_eq!(list["kind"], "APIGroupList");
    assert_eq!(
        list["groups"][0]["preferredVersion"]["groupVersion"],
        "test.example.io/v1"
    );
}

#[tokio::test]
async fn aggregated_discovery_has_etag_and_answers_304() {
    let app = app();
    let reply = get_as(&app, "/apis", DISCOVERY_ACCEPT).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.header("content-type"),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(reply.header("cache-control"), "public");
    assert_eq!(reply.header("vary"), "Accept");
    let etag = reply.header("etag").to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    assert_eq!(reply.json()["kind"], "APIGroupDiscoveryList");

    let cached = send(
        &app,
        req("GET", "/apis")
            .header(header::ACCEPT, DISCOVERY_ACCEPT)
            .header(header::IF_NONE_MATCH, &etag)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    assert!(cached.body.is_empty());
    assert_eq!(cached.header("etag"), etag);

    let unquoted = send(
        &app,
        req("GET", "/apis")
            .header(header::ACCEPT, DISCOVERY_ACCEPT)
            .header(header::IF_NONE_MATCH, etag.trim_matches('"'))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(unquoted.status, StatusCode::OK);

    let beta = get_as(
        &app,
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    )
    .await;
    assert_eq!(beta.header("content-type"), "application/json");
    assert_eq!(beta.json()["kind"], "APIGroupList");
}

#[tokio::test]
async fn group_and_version_documents() {
    let app = app();
    let group = get(&app, "/apis/test.example.io").await;
    assert_eq!(group.json()["kind"], "APIGroup");
    let resources = get(&app, V1).await;
    assert_eq!(resources.status, StatusCode::OK);
    let list = resources.json();
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["resources"][1]["name"], "things/status");
}

#[tokio::test]
async fn unknown_paths_outside_our_group_get_the_plain_404() {
    let app = app();
    for uri in [
        "/apis/nosuch.group",
        "/apis/nosuch.group/v1/things/x",
        "/api",
        "/api/v1",
        "/nothing/here/at/all",
    ] {
        assert_plain_404(&get(&app, uri).await);
    }
}

/// As kube-apiserver's go-restful container: under a served group every unknown path is a
/// NotFound Status, whatever the method.
#[tokio::test]
async fn unknown_paths_under_our_group_get_a_not_found_status() {
    let app = app_with_things(&["a"]).await;
    for uri in [
        "/apis/test.example.io/v9",
        "/apis/test.example.io/v9/things",
        "/apis/test.example.io/v1/gadgets/x",
        "/apis/test.example.io/v1/things/a/scale",
        "/apis/test.example.io/v1/things/missing/unknown",
        "/apis/test.example.io/v1/things/a/status/x",
        "/apis/test.example.io/v1/things/a/status/x/y/z",
    ] {
        for method in ["GET", "PUT", "POST", "DELETE"] {
            let reply = send(&app, req(method, uri).body(Body::empty()).expect("request")).await;
            assert_status(&reply, 404, Some("NotFound"));
            assert_eq!(
                reply.json()["message"],
                "the server could not find the requested resource",
                "{method} {uri}"
            );
            assert_eq!(
                reply.json()["details"],
                serde_json::json!({}),
                "{method} {uri}"
            );
        }
    }
}

#[tokio::test]
async fn wrong_methods_are_405_statuses() {
    let app = app();
    for (method, uri) in [
        ("PUT", THINGS),
        ("POST", "/apis"),
        ("POST", V1),
        ("DELETE", "/version"),
    ] {
        let reply = send(&app, req(method, uri).body(Body::empty()).expect("request")).await;
        assert_status(&reply, 405, Some("MethodNotAllowed"));
    }
    let status_post = send(
        &app,
        req("POST", &format!("{THINGS}/a/status"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_status(&status_post, 405, Some("MethodNotAllowed"));
}
