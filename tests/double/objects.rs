//! CRDs and objects through the kube client (recording 11).

use super::*;

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

    let manifest: CustomResourceDefinition =
        serde_json::from_value(kube_double::crd::widgets()).unwrap();
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
