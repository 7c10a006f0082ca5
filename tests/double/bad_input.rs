//! Bad input.

use super::*;

#[tokio::test]
async fn bad_input_gets_a_status_and_changes_nothing() {
    let double = start_with_widgets().await;
    let http = Http::new(&double);
    http.post(WIDGETS, &widget("w1", 1)).await;
    http.post(
        "/api/v1/namespaces/demo/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}),
    )
    .await;
    let revision = double.revision();
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let cm = "/api/v1/namespaces/demo/configmaps/cm";
    let json_ct = "application/json";
    let merge = "application/merge-patch+json";
    let jsonpatch = "application/json-patch+json";
    let apply = "application/apply-patch+yaml";
    let cases: Vec<(&str, String, &str, Vec<u8>)> = vec![
        ("POST", crds.into(), json_ct, br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"x.y"},"spec":"nonsense"}"#.to_vec()),
        ("POST", crds.into(), json_ct, br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"a.b"},"spec":{"group":"b","names":{"plural":"a","kind":"A"},"scope":"Namespaced","versions":["v1"]}}"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), json_ct, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), json_ct, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"l","labels":{"a":1}}}"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), json_ct, br#"[1,2,3]"#.to_vec()),
        ("POST", "/api/v1/namespaces/demo/configmaps".into(), "application/vnd.kubernetes.protobuf", b"k8s\0".to_vec()),
        ("POST", "/api/v1/namespaces/demo/secrets".into(), json_ct, br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"a":"not base64!"}}"#.to_vec()),
        ("PATCH", cm.into(), jsonpatch, br#"[{"op":"replace","path":"","value":5}]"#.to_vec()),
        ("PATCH", cm.into(), jsonpatch, br#"{"not":"a list"}"#.to_vec()),
        ("PATCH", cm.into(), merge, br#""just a string""#.to_vec()),
        ("PATCH", cm.into(), merge, br#"{"metadata":{"name":"renamed"}}"#.to_vec()),
        ("PATCH", cm.into(), merge, br#"{"metadata":{"resourceVersion":"abc"}}"#.to_vec()),
        ("PATCH", cm.into(), merge, br#"{"data":{"k":["list"]}}"#.to_vec()),
        ("PATCH", cm.into(), merge, b"{not json".to_vec()),
        ("PATCH", format!("{WIDGETS}/w1?fieldManager=m"), apply, b"- just\n- a list\n".to_vec()),
        ("PATCH", format!("{WIDGETS}/w1?fieldManager=m"), apply, b"{\"metadata\":{}}".to_vec()),
        ("PATCH", format!("{WIDGETS}/w1?dryRun=Sometimes"), merge, b"{}".to_vec()),
        ("PUT", cm.into(), json_ct, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"elsewhere"}}"#.to_vec()),
        ("DELETE", cm.into(), json_ct, b"{garbage".to_vec()),
        ("GET", "/api/v1/namespaces/demo/configmaps?limit=abc".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?labelSelector=a%20in%20(".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?fieldSelector=spec.x%3D1".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?resourceVersion=banana&resourceVersionMatch=Exact".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?resourceVersion=1&resourceVersionMatch=Sometimes".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?limit=1&continue=eyJ2IjoieCJ9&resourceVersion=5".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?watch=1&resourceVersion=banana".into(), json_ct, Vec::new()),
        ("GET", "/api/v1/namespaces/demo/configmaps?watch=1&timeoutSeconds=-3".into(), json_ct, Vec::new()),
        ("POST", "/api/v1/namespaces/demo/configmaps/cm".into(), json_ct, b"{}".to_vec()),
        ("PUT", "/api/v1/namespaces/demo/configmaps".into(), json_ct, b"{}".to_vec()),
        ("PATCH", "/api/v1/namespaces/demo/configmaps".into(), merge, b"{}".to_vec()),
        ("GET", "/api/v1/namespaces/demo/configmaps/cm".into(), json_ct, Vec::new()),
    ];
    for (method, path, content_type, body) in cases {
        let accept = if path.ends_with("/cm") && method == "GET" {
            // No protobuf Table (recording 20g step 3: a 406, in JSON).
            "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"
        } else {
            "application/json"
        };
        let r = http
            .send(
                method,
                &path,
                &[("Content-Type", content_type), ("Accept", accept)],
                Some(body.clone()),
            )
            .await;
        let shown = format!("{method} {path} {}", String::from_utf8_lossy(&body));
        assert!(
            (400..500).contains(&r.status),
            "{shown}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        let status = r.json();
        assert_eq!(status["kind"], "Status", "{shown}");
        assert_eq!(status["status"], "Failure", "{shown}");
        assert_eq!(status["code"], r.status, "{shown}");
    }
    // A continue token may not escape its list.
    let escape = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":-1,"start":"../kube-system/extension-apiserver-authentication"}"#)
    };
    assert_eq!(
        http.get(&format!(
            "/api/v1/namespaces/demo/configmaps?limit=1&continue={escape}"
        ))
        .await
        .status,
        400
    );

    assert_eq!(double.revision(), revision, "nothing was written");
    assert_eq!(http.get(cm).await.status, 200, "the server still answers");
}
