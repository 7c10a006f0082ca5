//! Authentication and authorization on the real thing: svm-apiserver learns the front proxy's
//! CA from the cluster (kube-system/extension-apiserver-authentication), reviews tokens and
//! asks for every decision through the real kube-apiserver, as the aggregator and RBAC expect.

use std::time::Duration;

use crate::support::real_cluster::RealCluster;
use crate::world::wait_for;

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_authenticated_and_authorized_by_the_cluster() {
    let Some(cluster) = RealCluster::start(
        "requests_are_authenticated_and_authorized_by_the_cluster",
        &[],
        &["--controllers="],
    ) else {
        return;
    };
    let direct = format!("{}{SVMS}", cluster.svm.url);

    // The aggregator's own identity: the front-proxy client certificate with the user in
    // headers. Accepted directly, as from the aggregator.
    let front_proxy = cluster.front_proxy_client("front-proxy-client");
    let as_admin = front_proxy
        .get(&direct)
        .header("X-Remote-User", "front-proxied-admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .expect("request");
    assert_eq!(as_admin.status(), 200);

    // A front-proxy certificate whose CN is not an allowed name may not assert a user.
    let wrong_name = cluster.front_proxy_client("someone-else");
    let refused = wrong_name
        .get(&direct)
        .header("X-Remote-User", "front-proxied-admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .expect("request");
    assert_eq!(refused.status(), 401, "{:?}", refused.text().await);

    // The same headers without the certificate: anonymous, 401 Status.
    let anonymous = cluster.svm_client_builder().build().expect("client");
    let answer = anonymous
        .get(&direct)
        .header("X-Remote-User", "front-proxied-admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .expect("request");
    assert_eq!(answer.status(), 401);
    let status: serde_json::Value = answer.json().await.expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Unauthorized");

    // A user without RBAC, through the aggregator: 403, then allowed once granted.
    let bob = crate::support::kubectl::Kubectl::new(&cluster.plane.user_kubeconfig("bob", &[]));
    let denied = bob.run(&["get", "storageversionmigrations"]);
    assert!(!denied.ok, "{}", denied.stdout);
    assert!(
        denied.stderr.contains("Forbidden") || denied.stderr.contains("forbidden"),
        "{}",
        denied.stderr
    );
    assert!(denied.stderr.contains("bob"), "{}", denied.stderr);
    let admin = cluster.kubectl();
    admin.ok(&[
        "create",
        "clusterrole",
        "svm-reader",
        "--verb=get,list,watch",
        "--resource=storageversionmigrations.storagemigration.k8s.io",
    ]);
    admin.ok(&[
        "create",
        "clusterrolebinding",
        "bob-reads-svm",
        "--clusterrole=svm-reader",
        "--user=bob",
    ]);
    // A denial is cached for --authorization-webhook-cache-unauthorized-ttl (10 s).
    wait_for(
        Duration::from_secs(60),
        "bob allowed once granted",
        || {
            bob.run(&["get", "storageversionmigrations"])
                .ok
                .then_some(())
        },
        || bob.run(&["get", "storageversionmigrations"]).stderr,
    );
    // Reading is all bob was granted.
    let still_denied = bob.run_with_stdin(
        &["create", "-f", "-"],
        Some(
            r#"{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration",
                "metadata":{"name":"by-bob"},"spec":{"resource":{"group":"","resource":"secrets"}}}"#,
        ),
    );
    assert!(
        !still_denied.ok && still_denied.stderr.contains("forbidden"),
        "{}",
        still_denied.stderr
    );

    // A ServiceAccount's token, straight to svm-apiserver: a TokenReview authenticates it and a
    // SubjectAccessReview authorizes it.
    admin.ok(&["create", "serviceaccount", "reader", "-n", "default"]);
    admin.ok(&[
        "create",
        "clusterrolebinding",
        "reader-reads-svm",
        "--clusterrole=svm-reader",
        "--serviceaccount=default:reader",
    ]);
    let token = admin.ok(&["create", "token", "reader", "-n", "default"]);
    let with_token = anonymous
        .get(&direct)
        .bearer_auth(token.trim())
        .send()
        .await
        .expect("request");
    assert_eq!(with_token.status(), 200);
    let forged = anonymous
        .get(&direct)
        .bearer_auth(format!("{}x", token.trim()))
        .send()
        .await
        .expect("request");
    assert_eq!(forged.status(), 401);
    let unbound = {
        admin.ok(&["create", "serviceaccount", "nobody", "-n", "default"]);
        let token = admin.ok(&["create", "token", "nobody", "-n", "default"]);
        anonymous
            .get(&direct)
            .bearer_auth(token.trim())
            .send()
            .await
            .expect("request")
    };
    assert_eq!(unbound.status(), 403);
    let status: serde_json::Value = unbound.json().await.expect("a Status");
    assert_eq!(status["reason"], "Forbidden");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("system:serviceaccount:default:nobody")),
        "{status}"
    );
}
