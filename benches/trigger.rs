//! `make bench` (trigger tables): what the trigger costs an idle cluster, and how fast it
//! sees a storage-version move, against the kube-apiserver test double (in this process) with
//! 200 tracked resources (the built-ins plus CRDs in 20 groups). Figures come from the
//! double's counters and the server's API; nothing is asserted.

// A benchmark that cannot run stops with a panic: unwrap is how it says so.
#![allow(clippy::unwrap_used)]

use support::stats::percentile;
use svm_test_support as support;

use std::time::{Duration, Instant};

use kube_double::{Fault, FaultRule, KubeDouble};
use serde_json::Value;
use support::server::{Backend, ServerProcess};
use support::wait::{eventually_async, eventually_async_every};

const STATES: &str = "/apis/storagemigration.k8s.io/v1/storagestates";
const RESOURCES: usize = 200;

struct Cluster {
    double: KubeDouble,
    server: ServerProcess,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// The double with `crds` CRDs, each with versions v1 and v2, spread over 20 groups.
async fn double_with_crds(crds: usize, storage_version_api: bool) -> KubeDouble {
    // Identity leases renewed every 10 s, as kube-apiserver does: their watch events are part
    // of what an idle cluster costs the trigger.
    let double = KubeDouble::builder()
        .storage_version_api(storage_version_api)
        .lease_renewal(Duration::from_secs(10))
        .start()
        .await
        .expect("double");
    for i in 0..crds {
        let group = format!("g{}.bench.test", i % 20);
        double
            .create_crd(kube_double::crd::manifest(
                &group,
                &format!("things{i}"),
                &format!("Thing{i}"),
                &["v1", "v2"],
            ))
            .expect("crd");
    }
    double
}

fn start(double: KubeDouble, flags: &[&str]) -> Cluster {
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = dir.path().join("cluster.kubeconfig");
    std::fs::write(&kubeconfig, double.kubeconfig_yaml()).expect("kubeconfig");
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--controllers=trigger,migrator".to_string(),
        "--qps=0".to_string(),
        "--workers=8".to_string(),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = ServerProcess::start_with(Backend::Embedded, &args);
    let http = server.http_client();
    Cluster {
        double,
        server,
        http,
        _dir: dir,
    }
}

impl Cluster {
    async fn states(&self) -> Vec<Value> {
        let list: Value = self
            .http
            .get(format!("{}{STATES}", self.server.url))
            .send()
            .await
            .expect("list")
            .json()
            .await
            .expect("json");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    async fn state(&self, name: &str) -> Value {
        self.http
            .get(format!("{}{STATES}/{name}", self.server.url))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    /// Waits until `count` StorageStates exist and all are safe.
    async fn settle(&self, count: usize) {
        eventually_async(
            Duration::from_secs(600),
            &format!("{count} StorageStates or more, all safe"),
            async || {
                let states = self.states().await;
                let safe = states
                    .iter()
                    .filter(|s| {
                        let current = &s["status"]["currentStorageVersionHash"];
                        s["status"]["persistedStorageVersionHashes"]
                            == Value::Array(vec![current.clone()])
                    })
                    .count();
                if states.len() >= count && safe == states.len() {
                    Ok(())
                } else {
                    Err(format!("{safe}/{} safe", states.len()))
                }
            },
        )
        .await
    }

    /// Seconds from `started` until StorageState `name` shows `hash` as current (polled every
    /// 5 ms: the poll is the measurement's resolution).
    async fn seconds_until_current(&self, name: &str, hash: &str, started: Instant) -> f64 {
        eventually_async_every(
            // A hang guard counted from `started`.
            Duration::from_secs(120).saturating_sub(started.elapsed()),
            Duration::from_millis(5),
            &format!("StorageState {name} current at {hash}"),
            async || {
                let state = self.state(name).await;
                if state["status"]["currentStorageVersionHash"] == hash {
                    Ok(started.elapsed().as_secs_f64())
                } else {
                    Err(format!("{}", state["status"]))
                }
            },
            async || String::new(),
        )
        .await
    }
}

fn hash(group: &str, version: &str, kind: &str) -> String {
    kube_double::resources::storage_version_hash(group, version, kind)
}

fn discovery_requests(counters: &kube_double::CountersSnapshot) -> u64 {
    counters
        .requests
        .iter()
        .filter(|(k, _)| k.starts_with("get /api"))
        .map(|(_, n)| n)
        .sum()
}

async fn idle_cost() {
    // 7 built-ins are tracked (configmaps, namespaces, secrets, deployments, CRDs, leases,
    // storageversions): the CRDs make up the rest.
    let double = double_with_crds(RESOURCES - 7, true).await;
    let cluster = start(double, &["--discovery-interval=1s"]);
    cluster.settle(RESOURCES).await;
    let tracked = cluster.states().await.len();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // A full look: what a restart of the apiserver costs (the lease watch makes it look).
    cluster.double.reset_counters();
    let first = cluster.double.first_apiserver().to_string();
    cluster.double.restart_apiserver(&first).expect("restart");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let look = cluster.double.counters();
    let look_requests = discovery_requests(&look);
    let look_bytes = look.bytes_out;

    // Idle: polls only.
    cluster.double.reset_counters();
    let window = Duration::from_secs(30);
    tokio::time::sleep(window).await;
    let idle = cluster.double.counters();
    let not_modified =
        idle.responses_for("get", "/api", 304) + idle.responses_for("get", "/apis", 304);
    let polls = not_modified as f64 / 2.0;
    let per_poll_requests = idle.total_requests as f64 / polls;
    let per_poll_bytes = (idle.bytes_in + idle.bytes_out) as f64 / polls;

    println!();
    println!(
        "Trigger on an idle cluster of {tracked} tracked resources (20 CRD groups + built-ins)"
    );
    println!("| {:<58} | {:>14} | {:>16} |", "", "requests", "body bytes");
    println!("|{}|{}|{}|", "-".repeat(60), "-".repeat(16), "-".repeat(18));
    println!(
        "| {:<58} | {:>14.2} | {:>16.0} |",
        format!(
            "one poll (measured over {}s, {polls:.0} polls)",
            window.as_secs()
        ),
        per_poll_requests,
        per_poll_bytes
    );
    println!(
        "| {:<58} | {:>14.0} | {:>16.0} |",
        "per hour at --discovery-interval=10s (360 polls)",
        per_poll_requests * 360.0,
        per_poll_bytes * 360.0
    );
    println!(
        "| {:<58} | {:>14} | {:>16} |",
        "one full look (after an apiserver restart)", look_requests, look_bytes
    );
    println!(
        "| {:<58} | {:>14.0} | {:>16.0} |",
        "per hour if every poll were a full look (10s)",
        look_requests as f64 * 360.0,
        look_bytes as f64 * 360.0
    );
    println!(
        "(all {} idle requests answered 304: {}; bytes are response bodies, the identity-lease watch events included; HTTP headers not counted)",
        idle.total_requests,
        idle.total_requests == not_modified
    );
}

async fn detection_latency() {
    let rounds = 5;
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();

    // CRD watch and identity-lease watch, with polls an hour apart (they cannot be what sees).
    let double = double_with_crds(1, false).await;
    let cluster = start(double, &["--discovery-interval=1h"]);
    // configmaps, namespaces, secrets, deployments, CRDs, leases and the one CRD's resource.
    cluster.settle(7).await;
    let mut crd = Vec::new();
    let mut lease = Vec::new();
    for round in 0..rounds {
        let version = if round % 2 == 0 { "v2" } else { "v1" };
        let started = Instant::now();
        cluster
            .double
            .set_storage_version("things0.g0.bench.test", version)
            .expect("move");
        crd.push(
            cluster
                .seconds_until_current(
                    "things0.g0.bench.test",
                    &hash("g0.bench.test", version, "Thing0"),
                    started,
                )
                .await,
        );
        let started = Instant::now();
        cluster
            .double
            .set_storage_version("configmaps", version)
            .expect("move");
        lease.push(
            cluster
                .seconds_until_current("configmaps", &hash("", version, "ConfigMap"), started)
                .await,
        );
    }
    rows.push(("CRD storage move (CRD watch)".into(), crd));
    rows.push((
        "built-in move, apiserver restart (lease watch)".into(),
        lease,
    ));
    drop(cluster);

    // No lease watch (RBAC refuses it), no StorageVersion API: only the poll at the default
    // 10 s interval.
    let double = double_with_crds(0, false).await;
    for verb in ["list", "watch"] {
        double.add_fault(
            FaultRule::new(Fault::Forbidden)
                .verb(verb)
                .resource("leases.coordination.k8s.io")
                .namespace("kube-system"),
        );
    }
    let cluster = start(double, &["--discovery-interval=10s"]);
    cluster.settle(6).await;
    let mut poll = Vec::new();
    for round in 0..3 {
        let version = if round % 2 == 0 { "v2" } else { "v1" };
        let started = Instant::now();
        cluster
            .double
            .set_storage_version("configmaps", version)
            .expect("move");
        poll.push(
            cluster
                .seconds_until_current("configmaps", &hash("", version, "ConfigMap"), started)
                .await,
        );
    }
    rows.push((
        "built-in move, poll only (--discovery-interval=10s)".into(),
        poll,
    ));

    println!();
    println!(
        "Detection latency: from the move to the StorageState's new current hash (a migration is created in the same pass)"
    );
    println!(
        "| {:<54} | {:>7} | {:>9} | {:>9} |",
        "path", "samples", "p50 (s)", "max (s)"
    );
    println!(
        "|{}|{}|{}|{}|",
        "-".repeat(56),
        "-".repeat(9),
        "-".repeat(11),
        "-".repeat(11)
    );
    for (name, samples) in rows {
        let max = samples.iter().copied().fold(0.0, f64::max);
        println!(
            "| {:<54} | {:>7} | {:>9.3} | {:>9.3} |",
            name,
            samples.len(),
            percentile(&samples, 0.5).unwrap_or(f64::NAN),
            max
        );
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    idle_cost().await;
    detection_latency().await;
}
