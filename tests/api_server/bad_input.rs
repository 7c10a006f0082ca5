//! Every kind of bad input gets the right metav1.Status and changes nothing: after each request
//! the collection, and the store revision it was read at, are exactly as before.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::fixtures::svm;
use crate::support::server::{Backend, ServerProcess};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
const STATES: &str = "/apis/storagemigration.k8s.io/v1/storagestates";

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    code: u16,
    /// Expected metav1.Status reason; `None` where kube-apiserver answers a plain-text 404 (a
    /// path outside every group it serves).
    reason: Option<&'static str>,
    /// A fragment the Status message must contain.
    message: &'static str,
}

fn case(
    name: &'static str,
    method: Method,
    path: impl Into<String>,
    content_type: &'static str,
    body: impl Into<Vec<u8>>,
    (code, reason, message): (u16, Option<&'static str>, &'static str),
) -> Case {
    Case {
        name,
        method,
        path: path.into(),
        content_type,
        body: body.into(),
        code,
        reason,
        message,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_status_and_changes_nothing() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let base = server.url.clone();

    // One existing object to aim updates at.
    let created: Value = client
        .post(format!("{base}{SVMS}"))
        .json(&svm("existing"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let mut immutable = created.clone();
    immutable["spec"]["resource"]["resource"] = json!("statefulsets");
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["metadata"]["labels"] = json!({"a": "b"});
    let mut no_rv = created.clone();
    no_rv["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    no_rv["metadata"]["labels"] = json!({"a": "b"});
    let mut other_name = created.clone();
    other_name["metadata"]["name"] = json!("another");
    let mut unknown = svm("strict-one");
    unknown["spec"]["bogus"] = json!(1);
    let mut wrong_kind = svm("wrong-kind");
    wrong_kind["kind"] = json!("ConfigMap");
    let mut wrong_version = svm("wrong-version");
    wrong_version["apiVersion"] = json!("apps/v1");
    let huge = vec![b' '; 3 * 1024 * 1024 + 10];
    let existing = format!("{SVMS}/existing");
    let j = |v: &Value| serde_json::to_vec(v).unwrap();

    let cases = vec![
        case(
            "truncated JSON",
            Method::POST,
            SVMS,
            "application/json",
            &b"{\"apiVersion\":"[..],
            (400, Some("BadRequest"), ""),
        ),
        case(
            "not JSON at all",
            Method::POST,
            SVMS,
            "application/json",
            &b"hello"[..],
            (400, Some("BadRequest"), ""),
        ),
        case(
            "malformed YAML",
            Method::POST,
            SVMS,
            "application/yaml",
            &b"metadata: [unclosed\n  name: x"[..],
            (400, Some("BadRequest"), ""),
        ),
        case(
            "a field of the wrong type",
            Method::POST,
            SVMS,
            "application/json",
            j(
                &json!({"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"typed"},"spec":{"resource":"deployments"}}),
            ),
            (400, Some("BadRequest"), ""),
        ),
        case(
            "the wrong kind",
            Method::POST,
            SVMS,
            "application/json",
            j(&wrong_kind),
            (400, Some("BadRequest"), "ConfigMap"),
        ),
        case(
            "the wrong apiVersion",
            Method::POST,
            SVMS,
            "application/json",
            j(&wrong_version),
            (400, Some("BadRequest"), "apps/v1"),
        ),
        case(
            "an unknown field under Strict",
            Method::POST,
            format!("{SVMS}?fieldValidation=Strict"),
            "application/json",
            j(&unknown),
            (400, Some("BadRequest"), "unknown field \"spec.bogus\""),
        ),
        case(
            "an invalid fieldValidation (422 like upstream ValidateCreateOptions)",
            Method::POST,
            format!("{SVMS}?fieldValidation=Sometimes"),
            "application/json",
            j(&svm("fv")),
            (422, Some("Invalid"), "fieldValidation"),
        ),
        case(
            "an invalid name",
            Method::POST,
            SVMS,
            "application/json",
            j(&svm("Bad_Name!")),
            (422, Some("Invalid"), "metadata.name"),
        ),
        case(
            "no name at all",
            Method::POST,
            SVMS,
            "application/json",
            j(
                &json!({"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{},"spec":{"resource":{"resource":"deployments"}}}),
            ),
            (422, Some("Invalid"), "name"),
        ),
        case(
            "a missing resource",
            Method::POST,
            SVMS,
            "application/json",
            j(
                &json!({"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"nores"},"spec":{"resource":{"group":"apps"}}}),
            ),
            (422, Some("Invalid"), "spec.resource.resource"),
        ),
        case(
            "a duplicate name",
            Method::POST,
            SVMS,
            "application/json",
            j(&svm("existing")),
            (409, Some("AlreadyExists"), "already exists"),
        ),
        case(
            "a changed immutable spec",
            Method::PUT,
            existing.clone(),
            "application/json",
            j(&immutable),
            (422, Some("Invalid"), "immutable"),
        ),
        case(
            "a stale resourceVersion",
            Method::PUT,
            existing.clone(),
            "application/json",
            j(&stale),
            (409, Some("Conflict"), "the object has been modified"),
        ),
        case(
            "an update without resourceVersion",
            Method::PUT,
            existing.clone(),
            "application/json",
            j(&no_rv),
            (422, Some("Invalid"), "resourceVersion"),
        ),
        case(
            "a body name unlike the URL's",
            Method::PUT,
            existing.clone(),
            "application/json",
            j(&other_name),
            (400, Some("BadRequest"), "does not match"),
        ),
        case(
            "an update of a missing object",
            Method::PUT,
            format!("{SVMS}/missing"),
            "application/json",
            j(&svm("missing")),
            (404, Some("NotFound"), "not found"),
        ),
        case(
            "a get of a missing object",
            Method::GET,
            format!("{SVMS}/missing"),
            "",
            Vec::new(),
            (
                404,
                Some("NotFound"),
                "storageversionmigrations.storagemigration.k8s.io \"missing\" not found",
            ),
        ),
        case(
            "a delete of a missing object",
            Method::DELETE,
            format!("{SVMS}/missing"),
            "",
            Vec::new(),
            (404, Some("NotFound"), "not found"),
        ),
        case(
            "a delete with a wrong uid precondition",
            Method::DELETE,
            existing.clone(),
            "application/json",
            j(
                &json!({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}),
            ),
            (409, Some("Conflict"), "does not match the UID in record"),
        ),
        case(
            "an oversized body",
            Method::POST,
            SVMS,
            "application/json",
            huge,
            (413, Some("RequestEntityTooLarge"), ""),
        ),
        case(
            "an unsupported media type",
            Method::POST,
            SVMS,
            "text/plain",
            j(&svm("plain")),
            (415, Some("UnsupportedMediaType"), ""),
        ),
        case(
            "an unsupported patch type",
            Method::PATCH,
            existing.clone(),
            "text/plain",
            &b"{}"[..],
            (415, Some("UnsupportedMediaType"), ""),
        ),
        case(
            "a malformed JSON patch",
            Method::PATCH,
            existing.clone(),
            "application/json-patch+json",
            &b"{\"op\":"[..],
            (400, Some("BadRequest"), ""),
        ),
        case(
            "a JSON patch changing spec",
            Method::PATCH,
            existing.clone(),
            "application/json-patch+json",
            &br#"[{"op":"replace","path":"/spec/resource/resource","value":"pods"}]"#[..],
            (422, Some("Invalid"), "immutable"),
        ),
        case(
            "a patch with a stale resourceVersion",
            Method::PATCH,
            existing.clone(),
            "application/merge-patch+json",
            &br#"{"metadata":{"resourceVersion":"1","labels":{"x":"y"}}}"#[..],
            (409, Some("Conflict"), ""),
        ),
        case(
            "a patch of a missing object",
            Method::PATCH,
            format!("{SVMS}/missing"),
            "application/merge-patch+json",
            &br#"{"metadata":{"labels":{"x":"y"}}}"#[..],
            (404, Some("NotFound"), ""),
        ),
        case(
            "an invalid label selector",
            Method::GET,
            format!("{SVMS}?labelSelector=a%20in%20(b"),
            "",
            Vec::new(),
            (400, Some("BadRequest"), ""),
        ),
        case(
            "an unsupported field selector",
            Method::GET,
            format!("{SVMS}?fieldSelector=spec.nothing%3Dx"),
            "",
            Vec::new(),
            (400, Some("BadRequest"), ""),
        ),
        case(
            "a non-numeric limit",
            Method::GET,
            format!("{SVMS}?limit=abc"),
            "",
            Vec::new(),
            (400, Some("BadRequest"), ""),
        ),
        case(
            "a garbage continue token",
            Method::GET,
            format!("{SVMS}?limit=1&continue=%%%"),
            "",
            Vec::new(),
            (400, Some("BadRequest"), ""),
        ),
        case(
            "a StorageState named unlike its resource",
            Method::POST,
            STATES,
            "application/json",
            j(
                &json!({"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageState","metadata":{"name":"wrong"},"spec":{"resource":{"group":"apps","resource":"deployments"}}}),
            ),
            (422, Some("Invalid"), "metadata.name"),
        ),
        case(
            "an unknown resource in our group (a Status, as kube-apiserver's generic servers)",
            Method::GET,
            "/apis/storagemigration.k8s.io/v1/widgets",
            "",
            Vec::new(),
            (
                404,
                Some("NotFound"),
                "the server could not find the requested resource",
            ),
        ),
        case(
            "an unknown version",
            Method::GET,
            "/apis/storagemigration.k8s.io/v9/storageversionmigrations",
            "",
            Vec::new(),
            (
                404,
                Some("NotFound"),
                "the server could not find the requested resource",
            ),
        ),
        case(
            "an unknown subresource of an object, with a body",
            Method::POST,
            format!("{SVMS}/existing/unknown"),
            "application/json",
            j(&svm("existing")),
            (
                404,
                Some("NotFound"),
                "the server could not find the requested resource",
            ),
        ),
        case(
            "a path below /status",
            Method::PUT,
            format!("{SVMS}/existing/status/x"),
            "application/json",
            j(&svm("existing")),
            (
                404,
                Some("NotFound"),
                "the server could not find the requested resource",
            ),
        ),
        case(
            "an unknown group",
            Method::GET,
            "/apis/example.test/v1/widgets",
            "",
            Vec::new(),
            (404, None, ""),
        ),
        case(
            "a method the collection does not allow",
            Method::PUT,
            SVMS,
            "application/json",
            j(&svm("put-collection")),
            (405, Some("MethodNotAllowed"), ""),
        ),
    ];

    let snapshot = |client: reqwest::Client| {
        let base = base.clone();
        async move {
            let mut out = Vec::new();
            for path in [SVMS, STATES] {
                let list: Value = client
                    .get(format!("{base}{path}"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                out.push(list);
            }
            out
        }
    };
    let before = snapshot(client.clone()).await;
    assert_eq!(before[0]["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        before[0]["items"][0]["metadata"]["resourceVersion"],
        rv.as_str()
    );

    for c in cases {
        let mut req = client.request(c.method.clone(), format!("{base}{}", c.path));
        if !c.content_type.is_empty() {
            req = req.header("Content-Type", c.content_type);
        }
        if !c.body.is_empty() {
            req = req.body(c.body.clone());
        }
        let resp = req.send().await.unwrap();
        let code = resp.status();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = resp.text().await.unwrap();
        assert_eq!(
            code,
            StatusCode::from_u16(c.code).unwrap(),
            "{}: {text}",
            c.name
        );
        match c.reason {
            Some(reason) => {
                assert!(
                    content_type.starts_with("application/json"),
                    "{}: {content_type}",
                    c.name
                );
                let status: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: not a Status ({e}): {text}", c.name));
                assert_eq!(status["kind"], "Status", "{}", c.name);
                assert_eq!(status["apiVersion"], "v1", "{}", c.name);
                assert_eq!(status["status"], "Failure", "{}", c.name);
                assert_eq!(status["reason"], reason, "{}: {text}", c.name);
                assert_eq!(status["code"], c.code, "{}", c.name);
                let message = status["message"].as_str().unwrap_or("");
                assert!(!message.is_empty(), "{}: empty message", c.name);
                assert!(
                    message.contains(c.message),
                    "{}: {message:?} lacks {:?}",
                    c.name,
                    c.message
                );
                if reason == "Invalid" {
                    let causes = status["details"]["causes"].as_array();
                    assert!(
                        causes.is_some_and(|c| !c.is_empty()),
                        "{}: no causes: {text}",
                        c.name
                    );
                }
            }
            None => assert_eq!(text.trim(), "404 page not found", "{}", c.name),
        }
        let after = snapshot(client.clone()).await;
        assert_eq!(after, before, "{} changed the store", c.name);
    }

    // The server is still healthy after all of it.
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert!(ready.status().is_success());
}
