//! Content negotiation: encodings, metadata-only forms, Tables.

use super::*;

#[tokio::test]
async fn get_object_in_each_encoding() {
    let app = app_with_things(&["a"]).await;
    let compact = get(&app, &format!("{THINGS}/a")).await;
    assert_eq!(compact.status, StatusCode::OK);
    assert_eq!(compact.body.last(), Some(&b'\n'));
    assert!(!compact.text().contains("\n "));
    assert_eq!(compact.json()["metadata"]["name"], "a");

    let curl = send(
        &app,
        req("GET", &format!("{THINGS}/a"))
            .header(header::USER_AGENT, "curl/8.0")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert!(curl.text().contains("\n  \"apiVersion\""));
    assert_ne!(curl.body.last(), Some(&b'\n'));

    let yaml = get_as(&app, &format!("{THINGS}/a"), "application/yaml").await;
    assert_eq!(yaml.header("content-type"), "application/yaml");
    let parsed: Value = serde_norway::from_slice(&yaml.body).expect("yaml");
    assert_eq!(parsed["spec"]["size"], 1);

    let protobuf = get_as(
        &app,
        &format!("{THINGS}/a"),
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    // A kind without protobuf messages refuses a protobuf-only Accept as kube-apiserver
    // refuses it for a custom resource: 406, the Status itself in protobuf (recording 20g,
    // step 10).
    assert_eq!(protobuf.status.as_u16(), 406);
    assert_eq!(
        protobuf.header("content-type"),
        "application/vnd.kubernetes.protobuf"
    );
    let envelope = svm_registry::protobuf::decode_body(&protobuf.body).expect("protobuf");
    let status = svm_registry::protobuf::meta::status_from_pb(&envelope.raw).expect("a Status");
    assert_eq!(status["reason"], "NotAcceptable");
    assert_eq!(
        status["message"],
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
}

#[tokio::test]
async fn missing_object_is_a_not_found_status() {
    let reply = get(&app(), &format!("{THINGS}/nope")).await;
    let status = assert_status(&reply, 404, Some("NotFound"));
    assert_eq!(
        status["message"],
        "things.test.example.io \"nope\" not found"
    );
    assert_eq!(
        status["details"],
        json!({"name": "nope", "group": GROUP, "kind": "things"})
    );
}

#[tokio::test]
async fn metadata_forms_and_their_mismatches() {
    let app = app_with_things(&["a", "b"]).await;
    let list = get_as(
        &app,
        THINGS,
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(list.header("content-type"), "application/json");
    let list = list.json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][1]["kind"], "PartialObjectMetadata");
    assert!(list["items"][1].get("spec").is_none());

    let one = get_as(
        &app,
        &format!("{THINGS}/a"),
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(one.json()["metadata"]["name"], "a");

    let single_as_list = get_as(
        &app,
        &format!("{THINGS}/a"),
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    let status = assert_status(&single_as_list, 500, None);
    assert_eq!(status["message"], "content is not a list");

    let list_as_single = get_as(
        &app,
        THINGS,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_status(&list_as_single, 406, Some("NotAcceptable"));
}

#[tokio::test]
async fn tables_for_lists_and_objects() {
    let app = app_with_things(&["a", "b"]).await;
    let reply = get_as(&app, &format!("{THINGS}?includeObject=None&limit=1"), TABLE).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    let table = reply.json();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["columnDefinitions"][1]["name"], "Size");
    assert_eq!(table["rows"], json!([{"cells": ["a", 1], "object": null}]));
    assert!(
        table["metadata"]["continue"]
            .as_str()
            .is_some_and(|token| !token.is_empty()),
        "{table}"
    );
    assert_eq!(table["metadata"]["remainingItemCount"], 1);

    let one = get_as(&app, &format!("{THINGS}/b"), TABLE).await.json();
    assert_eq!(one["rows"][0]["cells"], json!(["b", 2]));
    assert_eq!(one["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        one["metadata"]["resourceVersion"],
        one["rows"][0]["object"]["metadata"]["resourceVersion"]
    );

    let bad = get_as(&app, &format!("{THINGS}?includeObject=All"), TABLE).await;
    assert_status(&bad, 422, Some("Invalid"));
}
