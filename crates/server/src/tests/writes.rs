//! Create, update, patch, delete: codes, bodies and error order.

use super::*;

#[tokio::test]
async fn create_accepts_json_and_yaml_and_answers_201() {
    let app = app();
    let reply = post_json(&app, THINGS, &thing("a", 1)).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    assert!(
        reply.json()["metadata"]["uid"]
            .as_str()
            .is_some_and(|uid| !uid.is_empty())
    );
    let yaml = send(
        &app,
        req("POST", THINGS)
            .header(header::CONTENT_TYPE, "application/yaml")
            .body(Body::from(
                "apiVersion: test.example.io/v1\nkind: Thing\nmetadata:\n  name: y\nspec:\n  size: 4\n",
            ))
            .expect("request"),
    )
    .await;
    assert_eq!(yaml.status, StatusCode::CREATED, "{}", yaml.text());
    assert_eq!(yaml.json()["spec"]["size"], 4);
    let again = post_json(&app, THINGS, &thing("a", 1)).await;
    assert_status(&again, 409, Some("AlreadyExists"));
}

#[tokio::test]
async fn create_errors_in_kube_apiserver_order() {
    let app = app();
    let unsupported = send(
        &app,
        req("POST", THINGS)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from(thing("a", 1)))
            .expect("request"),
    )
    .await;
    assert_status(&unsupported, 415, Some("UnsupportedMediaType"));

    let malformed = post_json(&app, THINGS, r#"{"apiVersion":"test.example.io/v1","#).await;
    let status = assert_status(&malformed, 400, Some("BadRequest"));
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("the object provided is unrecognized (must be of type Thing): couldn't get version/kind; json parse error: unexpected end of JSON input"),
        "{status}"
    );

    let dry_run = post_json(&app, &format!("{THINGS}?dryRun=Foo"), &thing("a", 1)).await;
    let status = assert_status(&dry_run, 422, Some("Invalid"));
    assert_eq!(status["details"]["kind"], "CreateOptions");
    assert_eq!(status["details"]["group"], "meta.k8s.io");

    let validation = post_json(
        &app,
        &format!("{THINGS}?fieldValidation=Loud"),
        &thing("a", 1),
    )
    .await;
    assert_status(&validation, 422, Some("Invalid"));

    // Nothing was created by any of these.
    let list = get(&app, THINGS).await.json();
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let state = state_with(HealthSwitch::new(true)).with_max_request_body_bytes(64);
    let app = router(state);
    let big = json!({"metadata": {"name": "big"}, "pad": "x".repeat(100)}).to_string();
    let reply = post_json(&app, THINGS, &big).await;
    let status = assert_status(&reply, 413, Some("RequestEntityTooLarge"));
    assert_eq!(status["message"], "Request entity too large: limit is 64");
    // Also without a Content-Length (a streamed body).
    let streamed = send(
        &app,
        req("POST", THINGS)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(futures::stream::iter(vec![Ok::<
                _,
                std::io::Error,
            >(
                bytes::Bytes::from(big.clone()),
            )])))
            .expect("request"),
    )
    .await;
    assert_status(&streamed, 413, Some("RequestEntityTooLarge"));
}

#[tokio::test]
async fn warnings_become_warning_headers_and_strict_duplicates_fail() {
    let app = app();
    let body = r#"{"apiVersion":"test.example.io/v1","kind":"Thing","metadata":{"name":"w"},"spec":{"size":1,"size":2},"bogus":1}"#;
    let reply = post_json(&app, THINGS, body).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let warnings: Vec<&str> = reply
        .headers
        .get_all(header::WARNING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(
        warnings,
        vec![
            r#"299 - "duplicate field \"spec.size\"""#,
            r#"299 - "unknown field \"bogus\"""#
        ]
    );
    let strict = post_json(
        &app,
        &format!("{THINGS}?fieldValidation=Strict"),
        &body.replace("\"w\"", "\"s\""),
    )
    .await;
    let status = assert_status(&strict, 400, Some("BadRequest"));
    assert_eq!(
        status["message"],
        "Thing in version \"v1\" cannot be handled as a Thing: strict decoding error: duplicate field \"spec.size\""
    );
    let ignore = post_json(
        &app,
        &format!("{THINGS}?fieldValidation=Ignore"),
        &body.replace("\"w\"", "\"i\""),
    )
    .await;
    assert_eq!(ignore.status, StatusCode::CREATED);
    // Ignore is silent (recording 16c, step 5).
    assert_eq!(ignore.headers.get_all(header::WARNING).iter().count(), 0);
}

#[tokio::test]
async fn update_checks_the_name_and_serves_status() {
    let app = app_with_things(&["a"]).await;
    let mismatch = send(
        &app,
        req("PUT", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(thing("b", 3)))
            .expect("request"),
    )
    .await;
    let status = assert_status(&mismatch, 400, Some("BadRequest"));
    assert_eq!(
        status["message"],
        "the name of the object (b) does not match the name on the URL (a)"
    );
    // An update carries the resourceVersion it read (the store's precondition).
    let read = get(&app, &format!("{THINGS}/a")).await.json();
    let mut update: Value = serde_json::from_str(&thing("a", 3)).expect("json");
    update["metadata"]["resourceVersion"] = read["metadata"]["resourceVersion"].clone();
    let ok = send(
        &app,
        req("PUT", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(update.to_string()))
            .expect("request"),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    let updated = ok.json();
    assert_eq!(updated["spec"]["size"], 3);
    let status_body = json!({"metadata": {"name": "a",
                                          "resourceVersion": updated["metadata"]["resourceVersion"]},
                             "status": {"phase": "Done"}, "spec": {"size": 99}});
    let status_put = send(
        &app,
        req("PUT", &format!("{THINGS}/a/status"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(status_body.to_string()))
            .expect("request"),
    )
    .await;
    assert_eq!(status_put.status, StatusCode::OK, "{}", status_put.text());
    let object = status_put.json();
    assert_eq!(object["status"]["phase"], "Done");
    assert_eq!(object["spec"]["size"], 3);
    let read_status = get(&app, &format!("{THINGS}/a/status")).await;
    assert_eq!(read_status.json()["status"]["phase"], "Done");
}

#[tokio::test]
async fn patch_types_come_from_content_type() {
    let app = app_with_things(&["a"]).await;
    let merge = send(
        &app,
        req("PATCH", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/merge-patch+json")
            .body(Body::from(r#"{"spec":{"size":7}}"#))
            .expect("request"),
    )
    .await;
    assert_eq!(merge.status, StatusCode::OK);
    assert_eq!(merge.json()["spec"]["size"], 7);
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let reply = send(
            &app,
            req("PATCH", &format!("{THINGS}/a"))
                .header(header::CONTENT_TYPE, content_type)
                .body(Body::from(r#"{"spec":{"size":5}}"#))
                .expect("request"),
        )
        .await;
        let status = assert_status(&reply, 415, Some("UnsupportedMediaType"));
        assert_eq!(
            status["message"],
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
        );
    }
    let apply = send(
        &app,
        req("PATCH", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/apply-patch+yaml")
            .body(Body::from("spec:\n  size: 1\n"))
            .expect("request"),
    )
    .await;
    let status = assert_status(&apply, 422, Some("Invalid"));
    assert_eq!(status["details"]["kind"], "PatchOptions");
}

#[tokio::test]
async fn delete_answers_a_success_status_or_the_held_object() {
    let app = app_with_things(&["a"]).await;
    let uid = get(&app, &format!("{THINGS}/a")).await.json()["metadata"]["uid"].clone();
    let held = post_json(
        &app,
        THINGS,
        r#"{"apiVersion":"test.example.io/v1","kind":"Thing","metadata":{"name":"f","finalizers":["x"]}}"#,
    )
    .await;
    assert_eq!(held.status, StatusCode::CREATED);

    let gone = send(
        &app,
        req("DELETE", &format!("{THINGS}/a"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}"#,
            ))
            .expect("request"),
    )
    .await;
    assert_eq!(gone.status, StatusCode::OK);
    assert_eq!(
        gone.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "details": {"name": "a", "group": GROUP, "kind": "things", "uid": uid}})
    );

    let finalizing = send(
        &app,
        req("DELETE", &format!("{THINGS}/f"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(finalizing.status, StatusCode::OK);
    let object = finalizing.json();
    assert_eq!(object["kind"], "Thing");
    assert!(object["metadata"]["deletionTimestamp"].is_string());

    let bad_policy = send(
        &app,
        req("DELETE", &format!("{THINGS}/f?propagationPolicy=Sideways"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_status(&bad_policy, 422, Some("Invalid"));

    let missing = send(
        &app,
        req("DELETE", &format!("{THINGS}/zzz"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_status(&missing, 404, Some("NotFound"));
}

#[tokio::test]
async fn delete_collection_returns_the_deleted_list() {
    let app = app_with_things(&["a", "b"]).await;
    let reply = send(
        &app,
        req("DELETE", THINGS).body(Body::empty()).expect("request"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(get(&app, THINGS).await.json()["items"], json!([]));
}
