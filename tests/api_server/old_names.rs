//! Our labels and annotations moved out of `storagemigration.k8s.io/` (Kubernetes' domain) to
//! `storage.svm-apiserver.io/`: a write that uses an old spelling is answered with a
//! `Warning: 299` header naming the new name (as kube-apiserver warns of deprecated names),
//! which kubectl prints; the old spelling still counts; a write in the new names, or one that
//! brings no old name of its own, gets no warning.

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::support::fixtures::svm;
use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

const POLICY_WARNING: &str = r#"299 - "metadata.annotations[storagemigration.k8s.io/on-object-failure]: deprecated, and no longer read from svm-apiserver 0.3.0; use \"storage.svm-apiserver.io/on-object-failure\" instead""#;
const LABEL_WARNING: &str = r#"299 - "metadata.labels[storagemigration.k8s.io/encryption-rotation]: deprecated, and no longer read from svm-apiserver 0.3.0; use \"storage.svm-apiserver.io/encryption-rotation\" instead""#;

/// The `Warning` headers of an answer, after checking its status.
async fn warnings(response: Response, status: StatusCode) -> (Vec<String>, Value) {
    let headers: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(response.status(), status);
    (headers, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_names_are_read_and_warned_about() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let base = &server.url;
    let merge = |name: &str, patch: Value| {
        client
            .patch(format!("{base}{SVMS}/{name}"))
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
    };

    // A create under the old policy name: warned, stored as given, and still the policy (a
    // typo under it is still refused).
    let mut old = svm("old-policy");
    old["metadata"]["annotations"] = json!({"storagemigration.k8s.io/on-object-failure": "Skip"});
    let sent = client.post(format!("{base}{SVMS}")).json(&old).send();
    let (headers, created) = warnings(sent.await.unwrap(), StatusCode::CREATED).await;
    assert_eq!(headers, [POLICY_WARNING]);
    assert_eq!(
        created["metadata"]["annotations"]["storagemigration.k8s.io/on-object-failure"],
        "Skip"
    );
    let mut typo = svm("typo");
    typo["metadata"]["annotations"] = json!({"storagemigration.k8s.io/on-object-failure": "skip"});
    let refused = client.post(format!("{base}{SVMS}")).json(&typo).send();
    let (_, status) = warnings(refused.await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "metadata.annotations[storagemigration.k8s.io/on-object-failure]"
    );

    // The new name: no warning.
    let mut new = svm("new-policy");
    new["metadata"]["annotations"] = json!({"storage.svm-apiserver.io/on-object-failure": "Skip"});
    let sent = client.post(format!("{base}{SVMS}")).json(&new).send();
    let (headers, _) = warnings(sent.await.unwrap(), StatusCode::CREATED).await;
    assert!(headers.is_empty(), "{headers:?}");

    // A patch that adds an old label is warned; one that leaves the stored old names as they
    // are is not (an older trigger's migrations carry them: they must not warn every edit).
    let label =
        json!({"metadata": {"labels": {"storagemigration.k8s.io/encryption-rotation": "true"}}});
    let (headers, _) = warnings(merge("new-policy", label).await.unwrap(), StatusCode::OK).await;
    assert_eq!(headers, [LABEL_WARNING]);
    let other = json!({"metadata": {"labels": {"team": "storage"}}});
    let (headers, _) = warnings(merge("old-policy", other).await.unwrap(), StatusCode::OK).await;
    assert!(headers.is_empty(), "{headers:?}");

    // kubectl prints the warning, and the StorageState (annotated by users too) warns alike.
    let kubectl = Kubectl::new(&server.kubeconfig);
    let annotated = kubectl.run(&[
        "annotate",
        "svm",
        "new-policy",
        "storagemigration.k8s.io/on-object-failure=Fail",
    ]);
    assert!(annotated.ok, "{}", annotated.stderr);
    assert!(
        annotated.stderr.contains(
            "Warning: metadata.annotations[storagemigration.k8s.io/on-object-failure]: deprecated, \
             and no longer read from svm-apiserver 0.3.0; use \"storage.svm-apiserver.io/on-object-failure\" instead"
        ),
        "{}",
        annotated.stderr
    );
    let state = json!({
        "apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageState",
        "metadata": {"name": "deployments.apps",
            "annotations": {"storagemigration.k8s.io/on-object-failure": "Skip"}},
        "spec": {"resource": {"group": "apps", "resource": "deployments"}},
    });
    let sent = client
        .post(format!(
            "{base}/apis/storagemigration.k8s.io/v1/storagestates"
        ))
        .json(&state)
        .send();
    let (headers, _) = warnings(sent.await.unwrap(), StatusCode::CREATED).await;
    assert_eq!(headers, [POLICY_WARNING]);
}
