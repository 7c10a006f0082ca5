//! Authentication: the auth ConfigMap, TokenReview, SubjectAccessReview (14, 15a, 15b).

use super::*;

#[tokio::test]
async fn the_authentication_configmap_is_published() {
    let double = start().await;
    let client = kube_client(&double).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let cm = cms.get("extension-apiserver-authentication").await.unwrap();
    let data = cm.data.unwrap();
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    assert_eq!(
        data["requestheader-client-ca-file"],
        double.front_proxy_ca_pem()
    );
    assert_eq!(data["client-ca-file"], double.ca_pem());
    assert!(
        double
            .front_proxy_client()
            .cert_pem
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    assert_eq!(
        cm.metadata.managed_fields.unwrap()[0].manager.as_deref(),
        Some("kube-apiserver")
    );
}

#[tokio::test]
async fn token_and_access_reviews_follow_the_configured_policy() {
    let double = start().await;
    double.add_token(
        "sa-token",
        TokenUser::new(
            "system:serviceaccount:default:default",
            &["system:serviceaccounts", "system:authenticated"],
        ),
    );
    double.set_access_rules(vec![
        AccessRule::allow()
            .user("system:serviceaccount:kube-system:svm")
            .verb("patch")
            .api_group("example.test")
            .resource("widgets")
            .reason("RBAC: allowed by ClusterRoleBinding \"svm\""),
        AccessRule::deny()
            .user("mallory")
            .reason("blocked by policy"),
    ]);
    let http = Http::new(&double);
    let reviews = "/apis/authentication.k8s.io/v1/tokenreviews";

    let invalid = http
        .post(reviews, &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-valid-token"}}))
        .await;
    assert_eq!(invalid.status, 201);
    let invalid = invalid.json();
    assert_eq!(
        invalid["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
    assert_eq!(invalid["spec"]["token"], "not-a-valid-token");
    assert_eq!(
        invalid["metadata"]["managedFields"][0]["manager"],
        "kube-recorder"
    );
    assert_eq!(
        invalid["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:spec": {"f:token": {}}})
    );
    assert!(invalid["metadata"].get("name").is_none());

    let client = kube_client(&double).await;
    let tokens: Api<TokenReview> = Api::all(client.clone());
    let review: TokenReview = serde_json::from_value(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "sa-token"}})).unwrap();
    let answered = tokens
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let status = answered.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(
        status.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:default:default")
    );

    let sars: Api<SubjectAccessReview> = Api::all(client);
    let ask = |user: &str,
               groups: Vec<&str>,
               verb: &str,
               group: &str,
               resource: &str|
     -> SubjectAccessReview {
        serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": "demo"}}
        }))
        .unwrap()
    };
    let allowed = sars
        .create(
            &PostParams::default(),
            &ask(
                "system:serviceaccount:kube-system:svm",
                vec![],
                "patch",
                "example.test",
                "widgets",
            ),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(allowed.allowed);
    assert_eq!(
        allowed.reason.as_deref(),
        Some("RBAC: allowed by ClusterRoleBinding \"svm\"")
    );
    let not_allowed = sars
        .create(
            &PostParams::default(),
            &ask("jane", vec![], "get", "", "pods"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!not_allowed.allowed);
    assert_eq!((not_allowed.denied, not_allowed.reason), (None, None));
    let masters = sars
        .create(
            &PostParams::default(),
            &ask("alice", vec!["system:masters"], "delete", "", "secrets"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(masters.allowed);
    let denied = sars
        .create(
            &PostParams::default(),
            &ask("mallory", vec![], "get", "", "pods"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(denied.denied, Some(true));

    let no_user = http
        .post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}),
        )
        .await;
    assert_eq!(no_user.status, 422);
    assert_eq!(
        no_user.json()["message"],
        ".authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
    );
    // Reviews are never stored: no list verb.
    assert_eq!(http.get(reviews).await.status, 405);
}
