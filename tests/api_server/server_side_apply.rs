//! Server-side apply and managedFields against the real binary: recording 18 (kube-apiserver
//! v1.36.2 applying a v1beta1 StorageVersionMigration) replayed step by step, then what the
//! recording does not cover (both kinds, every version, `/status`, conversion between
//! versions, the controllers' writes, kube-rs `Patch::Apply`).

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::server::{Backend, ServerProcess};

const FIXTURE: &str = include_str!("../fixtures/recordings/18-server-side-apply.txt");

/// One request/response pair of a recording.
struct Exchange {
    title: String,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
    code: u16,
    response: Value,
}

/// Parse a recording (see the recordings' README: `### Step`, `--- REQUEST ---`,
/// `--- RESPONSE ---`, pretty-printed JSON bodies).
fn exchanges(text: &str) -> Vec<Exchange> {
    let mut out = Vec::new();
    for section in text.split("\n### ").skip(1) {
        let (title, rest) = section.split_once('\n').expect("title line");
        let (_, rest) = rest.split_once("--- REQUEST ---\n").expect("request");
        let (request, response) = rest.split_once("--- RESPONSE ---\n").expect("response");
        let (head, body) = request.split_once("\n\n").unwrap_or((request, ""));
        let mut lines = head.lines();
        let mut request_line = lines.next().expect("request line").split(' ');
        let method = request_line
            .next()
            .expect("method")
            .parse()
            .expect("method");
        let path = request_line.next().expect("path").to_string();
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // The recorder separates the body from the response with blank lines.
        let body = body.trim_end_matches('\n').to_string();
        let body = if body.is_empty() { body } else { body + "\n" };
        let (status_head, response_body) = response.split_once("\n\n").expect("response body");
        let code = status_head
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .expect("status code");
        let response = serde_json::from_str(response_body.trim()).expect("response JSON");
        out.push(Exchange {
            title: title.trim().to_string(),
            method,
            path,
            headers,
            body,
            code,
            response,
        });
    }
    out
}

/// Consistent renaming of what differs between two servers by nature (uids, resource
/// versions): a value seen first in the recording is bound to ours and must stay bound.
#[derive(Default)]
struct Bindings {
    recorded_to_ours: BTreeMap<String, String>,
}

impl Bindings {
    fn bind(&mut self, step: &str, field: &str, recorded: &Value, ours: &Value) {
        let (Some(recorded), Some(ours)) = (recorded.as_str(), ours.as_str()) else {
            assert_eq!(
                recorded.is_null(),
                ours.is_null(),
                "{step}: {field} presence"
            );
            return;
        };
        match self.recorded_to_ours.get(recorded) {
            Some(bound) => assert_eq!(
                bound, ours,
                "{step}: {field} {recorded} was {bound} on our server before, now {ours}"
            ),
            None => {
                assert!(
                    !self.recorded_to_ours.values().any(|v| v == ours),
                    "{step}: our {field} {ours} already stands for another recorded value"
                );
                self.recorded_to_ours
                    .insert(recorded.to_string(), ours.to_string());
            }
        }
    }

    /// The request body with recorded uids and resource versions replaced by ours.
    fn rewrite(&self, body: &str) -> String {
        let mut body = body.to_string();
        for (recorded, ours) in &self.recorded_to_ours {
            body = body.replace(&format!("\"{recorded}\""), &format!("\"{ours}\""));
        }
        body
    }
}

/// Timestamps the server chooses become `<time>` (their form is checked first). Entries are
/// sorted by operation, then time, then manager: the recording's fell in one second, ours
/// may straddle two, so the order is checked here and then compared without the times.
fn normalize_times(value: &mut Value, step: &str) {
    if let Some(entries) = value
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    {
        let key = |e: &Value| {
            (
                e["operation"].as_str().unwrap_or_default().to_string(),
                e["time"].as_str().unwrap_or_default().to_string(),
            )
        };
        let keys: Vec<(String, String)> = entries.iter().map(key).collect();
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "{step}: managedFields not sorted by operation and time: {keys:?}"
        );
        entries.sort_by_key(|e| {
            (
                e["operation"].as_str().unwrap_or_default().to_string(),
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["subresource"].as_str().unwrap_or_default().to_string(),
            )
        });
    }
    let is_time = |v: &Value| {
        v.as_str().is_some_and(|s| {
            s.len() == 20 && s.ends_with('Z') && s.parse::<k8s_openapi::jiff::Timestamp>().is_ok()
        })
    };
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(created) = meta.get_mut("creationTimestamp") {
            assert!(is_time(created), "{step}: creationTimestamp {created}");
            *created = json!("<time>");
        }
        for entry in meta
            .get_mut("managedFields")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(time) = entry.get_mut("time") {
                assert!(is_time(time), "{step}: managedFields time {time}");
                *time = json!("<time>");
            }
        }
    }
}

async fn replay(server: &ServerProcess) {
    let client = server.http_client();
    let mut bindings = Bindings::default();
    for exchange in exchanges(FIXTURE) {
        let step = exchange.title.as_str();
        let mut request = client.request(
            exchange.method.clone(),
            format!("{}{}", server.url, exchange.path),
        );
        for (name, value) in &exchange.headers {
            request = request.header(name, value);
        }
        if !exchange.body.is_empty() {
            request = request.body(bindings.rewrite(&exchange.body));
        }
        let response = request.send().await.expect("request");
        let code = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = response.text().await.expect("body");
        assert_eq!(code, exchange.code, "{step}: code; body {text}");
        assert_eq!(content_type, "application/json", "{step}: content type");
        let mut ours: Value = serde_json::from_str(&text).expect("JSON body");
        let mut recorded = exchange.response.clone();
        if recorded["kind"] != "Status" {
            for field in ["uid", "resourceVersion"] {
                bindings.bind(
                    step,
                    field,
                    &recorded["metadata"][field],
                    &ours["metadata"][field],
                );
                for body in [&mut recorded, &mut ours] {
                    if !body["metadata"][field].is_null() {
                        body["metadata"][field] = json!(field);
                    }
                }
            }
            // Ours sets metadata.generation on every kind (a standing departure, README).
            if let Some(meta) = ours["metadata"].as_object_mut() {
                meta.shift_remove("generation");
            }
            normalize_times(&mut recorded, step);
            normalize_times(&mut ours, step);
        }
        assert_eq!(
            ours,
            recorded,
            "{step}: body differs\nours:     {}\nrecorded: {}",
            serde_json::to_string_pretty(&ours).unwrap_or_default(),
            serde_json::to_string_pretty(&recorded).unwrap_or_default()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_18_replays_step_by_step() {
    let exchanges = exchanges(FIXTURE);
    assert!(exchanges.len() >= 22, "the fixture parses into every step");
    let server = ServerProcess::start(Backend::Embedded);
    replay(&server).await;
}

const GROUP: &str = "storagemigration.k8s.io";

fn url(server: &ServerProcess, version: &str, plural: &str, name: &str, query: &str) -> String {
    format!(
        "{}/apis/{GROUP}/{version}/{plural}/{name}{query}",
        server.url
    )
}

/// PATCH with an apply body; the answer's code and JSON.
async fn apply(
    client: &reqwest::Client,
    target: &str,
    body: &str,
    user_agent: &str,
) -> (u16, Value) {
    let response = client
        .patch(target)
        .header("Content-Type", "application/apply-patch+yaml")
        .header("User-Agent", user_agent)
        .body(body.to_string())
        .send()
        .await
        .expect("apply");
    let code = response.status().as_u16();
    (code, response.json().await.expect("JSON"))
}

/// `(manager, operation, apiVersion, subresource)` of each managedFields entry.
fn entries(object: &Value) -> Vec<(String, String, String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (
                text("manager"),
                text("operation"),
                text("apiVersion"),
                text("subresource"),
            )
        })
        .collect()
}

fn fields_of(object: &Value, manager: &str) -> Value {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

/// Every served version of both kinds takes an apply (create, then a no-op re-apply), its
/// `/status` too, and the entries name the version and subresource they were written with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_kinds_every_version_and_status() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    for version in ["v1", "v1beta1", "v1alpha1"] {
        let name = format!("svm-{version}");
        let spec = if version == "v1alpha1" {
            "  resource: {group: apps, version: v1, resource: deployments}"
        } else {
            "  resource: {group: apps, resource: deployments}"
        };
        let body = format!(
            "apiVersion: {GROUP}/{version}\nkind: StorageVersionMigration\nmetadata:\n  name: {name}\n  labels: {{team: a}}\nspec:\n{spec}\n"
        );
        let target = url(
            &server,
            version,
            "storageversionmigrations",
            &name,
            "?fieldManager=alice",
        );
        let (code, created) = apply(&client, &target, &body, "test/1").await;
        assert_eq!(code, 201, "{version}: {created}");
        let (code, again) = apply(&client, &target, &body, "test/1").await;
        assert_eq!(code, 200, "{version}: {again}");
        assert_eq!(
            again["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
            "{version}: a re-apply writes nothing"
        );
        let time_field = if version == "v1alpha1" {
            "lastUpdateTime"
        } else {
            "lastTransitionTime"
        };
        let status = format!(
            "apiVersion: {GROUP}/{version}\nkind: StorageVersionMigration\nmetadata:\n  name: {name}\nstatus:\n  conditions:\n  - type: Running\n    status: \"True\"\n    reason: Started\n    message: started\n    {time_field}: \"2026-11-23T10:00:00Z\"\n"
        );
        let status_target = url(
            &server,
            version,
            "storageversionmigrations",
            &format!("{name}/status"),
            "?fieldManager=ctrl",
        );
        let (code, with_status) = apply(&client, &status_target, &status, "test/1").await;
        assert_eq!(code, 200, "{version}: {with_status}");
        assert_eq!(with_status["status"]["conditions"][0]["type"], "Running");
        let api_version = format!("{GROUP}/{version}");
        assert_eq!(
            entries(&with_status),
            vec![
                (
                    "alice".into(),
                    "Apply".into(),
                    api_version.clone(),
                    String::new()
                ),
                (
                    "ctrl".into(),
                    "Apply".into(),
                    api_version.clone(),
                    "status".into()
                ),
            ],
            "{version}"
        );
        // Status applied to the main resource is not the applier's, and does not change.
        let (code, main) = apply(
            &client,
            &url(
                &server,
                version,
                "storageversionmigrations",
                &name,
                "?fieldManager=bob",
            ),
            &status.replace("Started", "Other"),
            "test/1",
        )
        .await;
        assert_eq!(code, 200, "{version}: {main}");
        assert_eq!(main["status"]["conditions"][0]["reason"], "Started");
        assert!(entries(&main).iter().all(|e| e.0 != "bob"), "{main}");

        // StorageState: create by apply, status by apply (persisted hashes are atomic).
        let state = "deployments.apps";
        let body = format!(
            "apiVersion: {GROUP}/{version}\nkind: StorageState\nmetadata:\n  name: {state}-{version}\nspec:\n  resource: {{group: apps, resource: deployments}}\n"
        );
        let target = url(
            &server,
            version,
            "storagestates",
            &format!("{state}-{version}"),
            "?fieldManager=alice",
        );
        let (code, created) = apply(&client, &target, &body, "test/1").await;
        // The name must be <resource>.<group>: a 422 from validation, after the apply.
        assert_eq!(code, 422, "{version}: {created}");
        let target = url(
            &server,
            version,
            "storagestates",
            state,
            "?fieldManager=alice",
        );
        let (code, created) = apply(
            &client,
            &target,
            &body.replace(&format!("{state}-{version}"), state),
            "test/1",
        )
        .await;
        assert!(code == 201 || code == 200, "{version}: {created}");
        let status = format!(
            "apiVersion: {GROUP}/{version}\nkind: StorageState\nmetadata:\n  name: {state}\nstatus:\n  currentStorageVersionHash: abc\n  persistedStorageVersionHashes: [abc]\n"
        );
        let target = url(
            &server,
            version,
            "storagestates",
            &format!("{state}/status"),
            "?fieldManager=trigger-test&force=true",
        );
        let (code, with_status) = apply(&client, &target, &status, "test/1").await;
        assert_eq!(code, 200, "{version}: {with_status}");
        assert_eq!(
            with_status["status"]["persistedStorageVersionHashes"],
            json!(["abc"])
        );
        assert_eq!(
            fields_of(&with_status, "trigger-test"),
            json!({"f:status": {"f:currentStorageVersionHash": {}, "f:persistedStorageVersionHashes": {}}})
        );
    }
    // Apply to the status of a missing object is a 404 (no create through /status).
    let (code, missing) = apply(
        &client,
        &url(
            &server,
            "v1",
            "storageversionmigrations",
            "nope/status",
            "?fieldManager=a",
        ),
        &format!(
            "apiVersion: {GROUP}/v1\nkind: StorageVersionMigration\nmetadata:\n  name: nope\n"
        ),
        "test/1",
    )
    .await;
    assert_eq!(code, 404, "{missing}");
}

/// Managed fields stay meaningful across versions: every entry keeps the version its paths
/// are in, and ownership is compared in that version (through conversion), as upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ownership_is_compared_in_each_managers_version() {
    let server = ServerProcess::start(Backend::Embedded);
    let client = server.http_client();
    let name = "cross";
    let alpha = format!(
        "apiVersion: {GROUP}/v1alpha1\nkind: StorageVersionMigration\nmetadata:\n  name: {name}\n  labels: {{team: a}}\nspec:\n  resource: {{group: apps, version: v1, resource: deployments}}\n"
    );
    let (code, created) = apply(
        &client,
        &url(
            &server,
            "v1alpha1",
            "storageversionmigrations",
            name,
            "?fieldManager=alice",
        ),
        &alpha,
        "test/1",
    )
    .await;
    assert_eq!(code, 201, "{created}");
    // Read in v1, alice's entry still speaks v1alpha1 (spec.resource.version is there).
    let v1: Value = client
        .get(url(&server, "v1", "storageversionmigrations", name, ""))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(entries(&v1)[0].2, format!("{GROUP}/v1alpha1"));
    assert_eq!(
        fields_of(&v1, "alice"),
        json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:resource": {"f:group": {}, "f:resource": {}, "f:version": {}}}})
    );
    // bob applies a different label through v1: the conflict is found in alice's version.
    let beta = format!(
        "apiVersion: {GROUP}/v1\nkind: StorageVersionMigration\nmetadata:\n  name: {name}\n  labels: {{team: b}}\n"
    );
    let target = url(
        &server,
        "v1",
        "storageversionmigrations",
        name,
        "?fieldManager=bob",
    );
    let (code, conflict) = apply(&client, &target, &beta, "test/1").await;
    assert_eq!(code, 409, "{conflict}");
    assert_eq!(
        conflict["message"],
        "Apply failed with 1 conflict: conflict with \"alice\": .metadata.labels.team"
    );
    // A v1 status update of a condition alice applied through v1alpha1 /status takes the
    // converted field (lastTransitionTime is v1alpha1's lastUpdateTime) from her.
    let status = format!(
        "apiVersion: {GROUP}/v1alpha1\nkind: StorageVersionMigration\nmetadata:\n  name: {name}\nstatus:\n  conditions:\n  - {{type: Running, status: \"True\", lastUpdateTime: \"2026-11-23T10:00:00Z\"}}\n"
    );
    let (code, applied) = apply(
        &client,
        &url(
            &server,
            "v1alpha1",
            "storageversionmigrations",
            &format!("{name}/status"),
            "?fieldManager=alice",
        ),
        &status,
        "test/1",
    )
    .await;
    assert_eq!(code, 200, "{applied}");
    let mut updated = v1.clone();
    updated["metadata"]["resourceVersion"] = applied["metadata"]["resourceVersion"].clone();
    updated["status"] = json!({"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": "2026-11-23T11:00:00Z", "reason": "Moved", "message": "m"}]});
    let response = client
        .put(url(
            &server,
            "v1",
            "storageversionmigrations",
            &format!("{name}/status"),
            "",
        ))
        .header("User-Agent", "editor/1.0")
        .json(&updated)
        .send()
        .await
        .expect("put");
    assert_eq!(response.status().as_u16(), 200);
    let after: Value = response.json().await.expect("json");
    let alice_status = after["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == "alice" && e["subresource"] == "status")
        .map(|e| e["fieldsV1"].clone())
        .expect("alice's status entry");
    assert_eq!(
        alice_status,
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Running\"}": {".": {}, "f:status": {}, "f:type": {}}}}}),
        "alice keeps the condition but not its time: {after}"
    );
    let editor = after["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == "editor")
        .expect("editor's entry");
    assert_eq!(editor["apiVersion"], format!("{GROUP}/v1"));
    assert_eq!(editor["subresource"], "status");
}

/// kube-rs `Patch::Apply` on both kinds: create, conflict, force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_patch_apply_on_both_kinds() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let server = ServerProcess::start(Backend::Embedded);
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let client = kube::Client::try_from(config).expect("client");
    for (kind, plural, name, spec) in [
        (
            "StorageVersionMigration",
            "storageversionmigrations",
            "kube-rs",
            json!({"resource": {"group": "apps", "resource": "deployments"}}),
        ),
        (
            "StorageState",
            "storagestates",
            "deployments.apps",
            json!({"resource": {"group": "apps", "resource": "deployments"}}),
        ),
    ] {
        let gvk = GroupVersionKind::gvk(GROUP, "v1", kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let desired = json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": kind,
            "metadata": {"name": name, "labels": {"owner": "kube-rs"}},
            "spec": spec,
        });
        let params = PatchParams::apply("kube-rs-test");
        let created = api
            .patch(name, &params, &Patch::Apply(&desired))
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let managed = created.metadata.managed_fields.clone().unwrap_or_default();
        assert_eq!(managed.len(), 1, "{kind}: {managed:?}");
        assert_eq!(managed[0].manager.as_deref(), Some("kube-rs-test"));
        assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
        let mut other = desired.clone();
        other["metadata"]["labels"]["owner"] = json!("someone-else");
        let err = api
            .patch(name, &PatchParams::apply("other"), &Patch::Apply(&other))
            .await
            .expect_err("conflict");
        match err {
            kube::Error::Api(status) => {
                assert_eq!(status.code, 409, "{kind}");
                assert_eq!(status.reason, "Conflict");
            }
            other => panic!("{kind}: {other}"),
        }
        let forced = api
            .patch(
                name,
                &PatchParams::apply("other").force(),
                &Patch::Apply(&other),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            forced
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("owner"))
                .map(String::as_str),
            Some("someone-else")
        );
        let managers: Vec<String> = forced
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        assert_eq!(managers, vec!["kube-rs-test", "other"], "{kind}");
    }
}
