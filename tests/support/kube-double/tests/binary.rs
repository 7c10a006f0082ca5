//! The `kube-double` binary: flags, preloading, faults and the admin API, as a benchmark
//! drives it from outside the test process.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn the_binary_serves_preloaded_objects_and_reports_counters() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-double"))
        .args([
            "--crd",
            "widgets.example.test=Widget:v1,v2",
            "--preload",
            "configmaps=50:64@bench",
            "--preload",
            "widgets.example.test=5@bench",
            "--fault",
            "verb=delete,resource=configmaps,fault=503",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the binary announces itself")
        .unwrap()
        .unwrap();
    let url = first
        .strip_prefix("listening on ")
        .expect(&first)
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"));
    assert!(std::fs::read_to_string(&kubeconfig).unwrap().contains(&url));

    let http = reqwest::Client::new();
    let get = |path: &str| {
        let req = http.get(format!("{url}{path}"));
        async move {
            let resp = req.send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let (status, page) = get("/api/v1/namespaces/bench/configmaps?limit=10").await;
    assert_eq!(status, 200);
    assert_eq!(page["items"].as_array().unwrap().len(), 10);
    assert_eq!(page["metadata"]["remainingItemCount"], 40);
    assert_eq!(
        page["items"][0]["data"]["payload"].as_str().unwrap().len(),
        64
    );
    let (_, widgets) = get("/apis/example.test/v2/namespaces/bench/widgets").await;
    assert_eq!(widgets["items"].as_array().unwrap().len(), 5);

    let deleted = http
        .delete(format!(
            "{url}/api/v1/namespaces/bench/configmaps/obj-00000"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 503);

    let (_, counters) = get("/_double/counters").await;
    assert_eq!(counters["totalRequests"], 3);
    assert_eq!(counters["requests"]["list configmaps"], 1);
    assert_eq!(counters["faultsInjected"], 1);
    let (_, encodings) = get("/_double/encodings/configmaps").await;
    let bench: u64 = encodings
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["encoding"] == "v1" && e["key"].is_null())
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    assert_eq!(bench, 51, "50 preloaded plus the authentication ConfigMap");
    let (_, stored) = get("/_double/stored/widgets.example.test/bench/obj-00001").await;
    assert_eq!(stored["encoding"], "example.test/v1");

    let moved = http
        .post(format!(
            "{url}/_double/storage-version/widgets.example.test/v2"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), 200);
    let (_, discovery) = get("/apis/example.test/v1").await;
    assert_eq!(
        discovery["resources"][0]["storageVersionHash"],
        "N5cUTqCK6wo="
    );

    child.kill().await.unwrap();
}
