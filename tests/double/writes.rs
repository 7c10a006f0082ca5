//! Writes: the no-op rule, re-encoding, preconditions (recordings 08-09e).

use super::*;

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
