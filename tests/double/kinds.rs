//! Built-in kinds, deletion, finalizers.

use super::*;

#[tokio::test]
async fn built_in_kinds_keep_their_rules() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);

    // Secrets fold stringData into base64 data and default their type.
    let secret = http
        .post("/api/v1/namespaces/demo/secrets", &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "hi"}}))
        .await
        .json();
    assert_eq!(secret["data"]["a"], "aGk=");
    assert_eq!(secret["type"], "Opaque");
    assert!(secret.get("stringData").is_none());

    // Deployments: generation follows the spec, status only moves through /status.
    let deploy = "/apis/apps/v1/namespaces/demo/deployments";
    let created = http
        .post(deploy, &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"replicas": 5}}))
        .await
        .json();
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(created.get("status").is_none());
    let scaled = http
        .merge_patch(
            &format!("{deploy}/d"),
            &json!({"spec": {"replicas": 3}, "status": {"replicas": 9}}),
        )
        .await
        .json();
    assert_eq!(scaled["metadata"]["generation"], 2);
    assert!(scaled.get("status").is_none());
    let status = http
        .merge_patch(
            &format!("{deploy}/d/status"),
            &json!({"spec": {"replicas": 7}, "status": {"replicas": 3}}),
        )
        .await
        .json();
    assert_eq!(status["status"]["replicas"], 3);
    assert_eq!(status["spec"]["replicas"], 3);
    assert_eq!(status["metadata"]["generation"], 2);
    let managers: Vec<&str> = status["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["subresource"] == "status")
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["kube-recorder"]);

    // Leases may be created by PUT (leader election relies on it).
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader", "namespace": "demo"}, "spec": {"holderIdentity": "a"}});
    let put = http
        .put(
            "/apis/coordination.k8s.io/v1/namespaces/demo/leases/leader",
            &lease,
        )
        .await;
    assert_eq!(put.status, 201);
    // ConfigMaps may not.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nope", "namespace": "demo"}});
    assert_eq!(
        http.put("/api/v1/namespaces/demo/configmaps/nope", &cm)
            .await
            .status,
        404
    );
    // A name mismatch between body and URL is a 400.
    assert_eq!(
        http.put("/api/v1/namespaces/demo/configmaps/other", &cm)
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn deletion_honours_preconditions_finalizers_and_namespaces() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    let base = "/api/v1/namespaces/demo/configmaps";
    let held = http
        .post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}))
        .await
        .json();
    let uid = held["metadata"]["uid"].as_str().unwrap();

    let wrong = http
        .send(
            "DELETE",
            &format!("{base}/held"),
            &[("Content-Type", "application/json")],
            Some(
                json!({"preconditions": {"uid": "not-it"}})
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await;
    assert_eq!(wrong.status, 409);
    assert_eq!(
        wrong.json()["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"held\": Precondition failed: UID in precondition: not-it, UID in object meta: {uid}"
        )
    );

    // Finalizers hold the object with a deletionTimestamp until they are removed.
    let deleting = http.delete(&format!("{base}/held")).await;
    assert_eq!(deleting.status, 200);
    assert!(deleting.json()["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(http.get(&format!("{base}/held")).await.status, 200);
    let released = http
        .merge_patch(
            &format!("{base}/held"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(released.status, 200);
    assert_eq!(http.get(&format!("{base}/held")).await.status, 404);

    // A plain delete answers with a Success Status naming the resource.
    http.post(
        base,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
    )
    .await;
    let gone = http.delete(&format!("{base}/plain")).await.json();
    assert_eq!(gone["status"], "Success");
    assert_eq!(gone["details"]["kind"], "configmaps");
    assert_eq!(http.delete(&format!("{base}/plain")).await.status, 404);

    // deletecollection with a label selector.
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        http.post(base, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"tier": tier}}})).await;
    }
    let removed = http
        .delete(&format!("{base}?labelSelector=tier%3Dx"))
        .await
        .json();
    assert_eq!(removed["items"].as_array().unwrap().len(), 2);
    assert_eq!(http.get(&format!("{base}/c")).await.status, 200);

    // Deleting a namespace takes its objects with it.
    http.post(WIDGETS, &widget("w1", 1)).await;
    let ns = http.delete("/api/v1/namespaces/demo").await;
    assert_eq!(ns.status, 200);
    assert_eq!(ns.json()["kind"], "Namespace");
    assert_eq!(http.get(&format!("{base}/c")).await.status, 404);
    assert_eq!(http.get(&format!("{WIDGETS}/w1")).await.status, 404);
}
