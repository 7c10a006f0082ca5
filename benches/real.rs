//! `make bench-real`: the migrator against the real kube-apiserver (KUBEBUILDER_ASSETS) and
//! etcd, rewriting custom resources whose CRD moved its storage version (every object is
//! written again), printed as tables and never asserted:
//!
//! 1. per object size (1 KiB, 10 KiB, 100 KiB): ours with `--object-concurrency auto`, ours
//!    hand-tuned (fixed 16 and 64), and the out-of-tree migrator's full-object strategy (full
//!    LIST pages, then GET + PUT of each object, 16 at a time) in the same run — wall time,
//!    objects/s, requests per object (kube-apiserver's `apiserver_request_total`), bytes per
//!    object (the client process's socket reads and writes, TLS included, from
//!    `/proc/<pid>/io`), our peak RSS, kube-apiserver's CPU seconds per 1 000 objects
//!    (`/proc/<pid>/stat`, user + system), and — for runs named `nb-…` — what the run costs
//!    others: the p50/p99 latency of a neighbour that GETs one ConfigMap every 100 ms
//!    meanwhile (other runs have the apiserver to themselves);
//! 2. at a QPS cap: wall time against N/QPS;
//! 3. a second client loading the apiserver mid-run (`load`: 8 full-object LISTs at a time,
//!    and the neighbour): the rate and the PATCH limit the adaptive migrator found, before and
//!    during the load; `lists` measures the neighbour under that second client with no
//!    migration running, the yardstick of what the migrator adds.
//!
//! kube-apiserver runs on the etcd of `KUBEBUILDER_ASSETS` (`make bench-real`: Debian trixie's
//! 3.5, which lets it serve watch-list), so ours reads each resource as one stream; the `paged`
//! run reads the same in metadata-only pages (`--watch-list-max-objects=0`). The `read`
//! column says which read our migrator made (from its `storage_migrator_core_migrator_reads`).
//!
//! `SVM_BENCH_REAL_OBJECTS` (default 10000) sets N; 100 KiB objects use N/10 (N of them
//! would pass etcd's 2 GiB quota once rewritten). `SVM_BENCH_REAL_SIZES` (KiB, default
//! `1,10,100`) picks the sizes, `SVM_BENCH_REAL_RUNS` (default `auto,16,64,getput,nb-auto,qps,load`)
//! the runs, in that order, repeats allowed: `auto` or a number is ours at that
//! `--object-concurrency`, `nb-…` the same with the neighbour, `paged` / `paged-<c>` the same read in pages, `json-…` the same with
//! JSON reads (`--kube-api-content-type=application/json`; ours read protobuf by default),
//! `own-…` the same as deploy/ runs it — its ServiceAccount, in the priority level of
//! deploy/base/flowcontrol.yaml (other runs are the cluster-admin's: `exempt`). `wire` adds a
//! table of kube-apiserver's CPU with our reads in protobuf against JSON, on N
//! ConfigMaps (built-in) and N custom resources of 1 KiB. `delay-…` runs ours through a
//! loopback TCP proxy that delays every byte `SVM_BENCH_REAL_DELAY_MS` (2) each way (a real
//! cluster's network; `real/delay.rs`). `writes` adds the table of what each way of writing an
//! object back unchanged costs kube-apiserver (`real/writes.rs`;
//! `SVM_BENCH_REAL_WRITE_OBJECTS`, 2000, per size). `metrics` adds, after the migrations, what
//! one reading of its `/metrics` costs it, text against protobuf. `SVM_BENCH_REAL_TRACE=1`
//! prints our PATCH limit, the shared verdict and the others-slowdown ratio every 0.5 s of
//! every run. Creating objects is the slow part (~a few thousand a second).

use support::stats::percentile;
use svm_test_support as support;

#[path = "real/delay.rs"]
mod delay;
#[path = "real/writes.rs"]
mod writes;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};
use support::control_plane::{ControlPlane, assets};
use support::server::{Backend, ServerProcess, metric_sum, sample};

const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";
const GROUP: &str = "example.test";
const NAMESPACE: &str = "bench";

struct Row {
    strategy: String,
    kib: usize,
    objects: usize,
    seconds: f64,
    requests: f64,
    bytes: u64,
    rss_kib: Option<u64>,
    kas_cpu: f64,
    /// The median of our PATCH limit sampled every 0.5 s (ours only).
    limit: Option<f64>,
    /// How the resource was read (see [`read_mode`]).
    read: String,
    /// A neighbour's GET latency during the run (p50, p99, in ms): what the run costs others
    /// (runs without the neighbour: none).
    neighbour: Option<(f64, f64)>,
}

fn print(title: &str, rows: &[Row]) {
    println!("\n{title}\n");
    println!(
        "| {:<34} | {:<12} | {:>4} | {:>6} | {:>7} | {:>6} | {:>8} | {:>9} | {:>9} | {:>14} | {:>11} | {:>19} |",
        "strategy",
        "read",
        "KiB",
        "N",
        "wall s",
        "obj/s",
        "req/obj",
        "bytes/obj",
        "our RSS",
        "kas CPU s/1000",
        "PATCH limit",
        "neighbour GET p50/p99"
    );
    println!("|{}|", ["-"; 12].map(|_| "----------").join("|"));
    for r in rows {
        let n = r.objects as f64;
        println!(
            "| {:<34} | {:<12} | {:>4} | {:>6} | {:>7.1} | {:>6.0} | {:>8.2} | {:>9.0} | {:>9} | {:>14.2} | {:>11} | {:>19} |",
            r.strategy,
            r.read,
            r.kib,
            r.objects,
            r.seconds,
            n / r.seconds,
            r.requests / n,
            r.bytes as f64 / n,
            r.rss_kib
                .map_or_else(|| "—".into(), |k| format!("{:.0} MiB", k as f64 / 1024.0)),
            r.kas_cpu / n * 1000.0,
            r.limit.map_or_else(|| "—".into(), |l| format!("{l:.0}")),
            r.neighbour.map_or_else(
                || "— (alone)".into(),
                |(p50, p99)| format!("{p50:.1} / {p99:.1} ms")
            ),
        );
    }
}

/// Which reads one migration made, from our `/metrics`: `stream`, `pages`, `stream→pages` (a
/// stream fell back), with the count when a read was opened more than once (a stream cut and
/// opened again).
fn read_mode(metrics: &str) -> String {
    let reads = |mode: &str| {
        let label = format!("mode=\"{mode}\"");
        metric_sum(
            metrics,
            "storage_migrator_core_migrator_reads_total",
            &[&label],
        )
    };
    let (streams, pages) = (reads("stream"), reads("pages"));
    let times = |n: f64| {
        if n > 1.0 {
            format!(" ×{n}")
        } else {
            String::new()
        }
    };
    match (streams > 0.0, pages > 0.0) {
        (true, false) => format!("stream{}", times(streams)),
        (false, true) => format!("pages{}", times(pages)),
        (true, true) => format!("stream{}→pages", times(streams)),
        (false, false) => "none counted".into(),
    }
}

/// CPU seconds (user + system) a process used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 (1-based); the rest starts at field 3.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // USER_HZ is 100 on Linux.
    ticks as f64 / 100.0
}

/// Bytes a process read and wrote through syscalls (its sockets here: TLS to kube-apiserver).
fn io_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .filter(|l| l.starts_with("rchar:") || l.starts_with("wchar:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// kube-apiserver's `/metrics`.
async fn kas_metrics(client: &kube::Client) -> String {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    client
        .request_text(request)
        .await
        .expect("kube-apiserver /metrics")
}

/// kube-apiserver's counters for one resource, read from one `/metrics` scrape.
struct KasCounters {
    /// `apiserver_request_total`, all verbs and codes.
    requests: f64,
    /// Watchers kube-apiserver closed for not keeping up (a stream we held back too long).
    terminated_watchers: f64,
}

impl KasCounters {
    async fn read(client: &kube::Client, resource: &str) -> KasCounters {
        let metrics = kas_metrics(client).await;
        let exact = format!("resource=\"{resource}\"");
        let prefix = format!("resource=\"{resource}");
        KasCounters {
            requests: metric_sum(&metrics, "apiserver_request_total", &[&exact]),
            terminated_watchers: metric_sum(
                &metrics,
                "apiserver_terminated_watchers_total",
                &[&prefix],
            ),
        }
    }
}

/// Another client of the apiserver during a run: it GETs one ConfigMap every 100 ms (a light
/// operator's tool) and keeps each latency, so a run shows what its load costs others.
struct Neighbour {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<f64>>,
}

const NEIGHBOUR: &str = "neighbour";
/// The second client: full LISTs of `api` in pages of 500, 8 at a time, while `go_on` says so.
async fn second_client(api: &Api<DynamicObject>, go_on: impl Fn() -> bool) {
    futures::stream::iter(0..)
        .take_while(|_| futures::future::ready(go_on()))
        .for_each_concurrent(8, |_| async {
            let _ = api.list(&ListParams::default().limit(500)).await;
        })
        .await;
}

/// How long the `lists` run loads the apiserver with the second client alone.
const LISTS_ALONE: Duration = Duration::from_secs(20);

impl Neighbour {
    fn start(client: &kube::Client) -> Neighbour {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let task = tokio::spawn(async move {
            let mut millis = Vec::new();
            while !halt.load(Ordering::Relaxed) {
                let sent = Instant::now();
                if api.get(NEIGHBOUR).await.is_ok() {
                    millis.push(sent.elapsed().as_secs_f64() * 1000.0);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            millis
        });
        Neighbour { stop, task }
    }

    /// The p50 and p99 of its GETs, in ms.
    async fn finish(self) -> (f64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        let millis = self.task.await.unwrap_or_default();
        let at = |q: f64| percentile(&millis, q).unwrap_or(f64::NAN);
        (at(0.50), at(0.99))
    }
}

struct Bench {
    plane: ControlPlane,
    kas_pid: u32,
    client: kube::Client,
    /// deploy/'s ServiceAccount's kubeconfig, once its RBAC and FlowSchema are applied.
    own_level: std::sync::OnceLock<std::path::PathBuf>,
}

/// One resource of `kib`-KiB objects, stored in `v1` or `v2`.
struct Blobs {
    plural: String,
    kind: String,
    kib: usize,
    objects: usize,
    stored_in_v2: bool,
}

/// What one run of ours migrates.
struct Target {
    group: String,
    plural: String,
    kib: usize,
    objects: usize,
}

impl Blobs {
    fn target(&self) -> Target {
        Target {
            group: GROUP.into(),
            plural: self.plural.clone(),
            kib: self.kib,
            objects: self.objects,
        }
    }
}

/// The ConfigMaps of the wire-format comparison.
const CONFIGMAPS_NAMESPACE: &str = "bench-configmaps";

impl Bench {
    /// A CRD `<name><kib>k` (kind `<Name><kib>k`) holding `objects` objects of `kib` KiB.
    async fn install(&self, name: &str, kib: usize, objects: usize) -> Blobs {
        let plural = format!("{name}s{kib}k");
        let kind = format!("{}{}{kib}k", name[..1].to_uppercase(), &name[1..]);
        let crd = kube_double::crd::manifest(GROUP, &plural, &kind, &["v1", "v2"]);
        let kubectl = self.plane.kubectl();
        kubectl.ok_stdin(&["apply", "-f", "-"], &crd.to_string());
        kubectl.ok(&[
            "wait",
            &format!("crd/{plural}.{GROUP}"),
            "--for=condition=Established",
            "--timeout=60s",
        ]);
        let api = self.api(&plural, &kind);
        let payload = "x".repeat(kib * 1024);
        let started = Instant::now();
        let params = PostParams::default();
        // Counted as they come, not collected: at 10^6 the answers would hold a GiB.
        let failed = futures::stream::iter((0..objects).map(|i| {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{GROUP}/v1"), "kind": kind,
                "metadata": {"name": format!("b-{i:07}")},
                "spec": {"data": payload},
            }))
            .expect("object");
            let (api, params) = (&api, &params);
            async move { api.create(params, &object).await }
        }))
        .buffer_unordered(32)
        .filter(|result| futures::future::ready(result.is_err()))
        .count()
        .await;
        assert_eq!(failed, 0, "creates failed");
        eprintln!(
            "created {objects} objects of {kib} KiB in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        Blobs {
            plural,
            kind,
            kib,
            objects,
            stored_in_v2: false,
        }
    }

    /// `objects` ConfigMaps of `kib` KiB: a built-in kind, which kube-apiserver can answer in
    /// protobuf.
    async fn install_configmaps(&self, kib: usize, objects: usize) -> Target {
        self.plane
            .kubectl()
            .ok(&["create", "namespace", CONFIGMAPS_NAMESPACE]);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), CONFIGMAPS_NAMESPACE);
        let payload = "x".repeat(kib * 1024);
        let params = PostParams::default();
        let failed = futures::stream::iter((0..objects).map(|i| {
            let object: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("cm-{i:07}")},
                "data": {"payload": payload},
            }))
            .expect("object");
            let (api, params) = (&api, &params);
            async move { api.create(params, &object).await }
        }))
        .buffer_unordered(32)
        .filter(|result| futures::future::ready(result.is_err()))
        .count()
        .await;
        assert_eq!(failed, 0, "creates failed");
        Target {
            group: String::new(),
            plural: "configmaps".into(),
            kib,
            objects,
        }
    }

    fn api(&self, plural: &str, kind: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(GROUP, "v1", kind);
        let mut resource = ApiResource::from_gvk(&gvk);
        resource.plural = plural.to_string();
        Api::namespaced_with(self.client.clone(), NAMESPACE, &resource)
    }

    /// Moves the CRD's storage to the other version: every object is then due for a rewrite.
    fn flip(&self, blobs: &mut Blobs) {
        blobs.stored_in_v2 = !blobs.stored_in_v2;
        let (v1, v2) = (!blobs.stored_in_v2, blobs.stored_in_v2);
        self.plane.kubectl().ok(&[
            "patch",
            "crd",
            &format!("{}.{GROUP}", blobs.plural),
            "--type=json",
            "-p",
            &format!(
                r#"[{{"op":"replace","path":"/spec/versions/0/storage","value":{v1}}},
                    {{"op":"replace","path":"/spec/versions/1/storage","value":{v2}}}]"#
            ),
        ]);
        // The apiserver swaps the CRD's storage asynchronously.
        std::thread::sleep(Duration::from_secs(3));
    }

    /// Ours, a fresh process with `flags`; with `load`, a second client runs beside the
    /// migration. Samples of our `/metrics` (every 0.5 s: migrated, PATCH limit, loaded) come
    /// back.
    async fn ours(
        &self,
        blobs: &mut Blobs,
        label: &str,
        flags: &[&str],
        company: Company,
    ) -> (Row, Vec<(f64, f64, bool)>) {
        self.flip(blobs);
        let loader = company.lists.then(|| self.api(&blobs.plural, &blobs.kind));
        self.run_ours(&blobs.target(), label, flags, company.neighbour, loader)
            .await
    }

    /// Ours on `target`, a fresh process with `flags`; with `neighbour`, the neighbour GETs
    /// meanwhile; with a `loader`, a second client lists it in full pages from 8 s on.
    async fn run_ours(
        &self,
        target: &Target,
        label: &str,
        flags: &[&str],
        neighbour: bool,
        loader: Option<Api<DynamicObject>>,
    ) -> (Row, Vec<(f64, f64, bool)>) {
        let kubeconfig = format!("--kubeconfig={}", self.plane.kubeconfig.display());
        let mut all = vec!["--controllers=migrator"];
        // A run through the delay proxy names its own kubeconfig.
        if !flags.iter().any(|f| f.starts_with("--kubeconfig=")) {
            all.push(kubeconfig.as_str());
        }
        all.extend_from_slice(flags);
        let server = ServerProcess::start_with(Backend::Embedded, &all);
        let pid = server.pid().expect("pid");
        let http = server.http_client();
        let (kas, cpu, io) = (
            KasCounters::read(&self.client, &target.plural).await,
            cpu_seconds(self.kas_pid),
            io_bytes(pid),
        );
        let neighbour = neighbour.then(|| Neighbour::start(&self.client));
        let started = Instant::now();
        let name = format!("m-{}", started.elapsed().as_nanos());
        let resp = http
            .post(format!("{}{SVMS}", server.url))
            .json(&json!({
                "apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
                "metadata": {"name": name},
                "spec": {"resource": {"group": target.group, "resource": target.plural}},
            }))
            .send()
            .await
            .expect("create");
        assert_eq!(resp.status(), 201);
        let loading = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let loader = loader.map(|api| {
            let (loading, stop) = (loading.clone(), stop.clone());
            tokio::spawn(async move {
                // A quarter into a typical run, another client starts reading every object
                // in full pages, 8 at a time, until the migration ends.
                tokio::time::sleep(Duration::from_secs(8)).await;
                loading.store(true, Ordering::Relaxed);
                second_client(&api, || !stop.load(Ordering::Relaxed)).await;
            })
        });
        let mut samples = Vec::new();
        loop {
            let m: Value = http
                .get(format!("{}{SVMS}/{name}", server.url))
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("json");
            let done = m["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| {
                    (c["type"] == "Succeeded" || c["type"] == "Failed") && c["status"] == "True"
                })
            });
            if done {
                assert!(m.to_string().contains("\"Succeeded\""), "{m:#}");
                break;
            }
            let metrics = server.scrape(&http).await;
            let limit = sample(&metrics, "svm_migrator_patch_concurrency ");
            if std::env::var_os("SVM_BENCH_REAL_TRACE").is_some() {
                eprintln!(
                    "{label} t={:.1}s migrated={} limit={limit} shared={} others_slowdown={}",
                    started.elapsed().as_secs_f64(),
                    m["status"]["progress"]["migratedObjects"],
                    sample(&metrics, "svm_migrator_apiserver_shared "),
                    sample(&metrics, "svm_migrator_others_slowdown_ratio "),
                );
            }
            let migrated = m["status"]["progress"]["migratedObjects"]
                .as_f64()
                .unwrap_or(0.0);
            samples.push((migrated, limit, loading.load(Ordering::Relaxed)));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        let neighbour = match neighbour {
            Some(n) => Some(n.finish().await),
            None => None,
        };
        let scrape = server.scrape(&http).await;
        let read = read_mode(&scrape);
        let readings = |account: &str| {
            let label = format!("account=\"{account}\"");
            metric_sum(&scrape, "svm_migrator_apiserver_readings_total", &[&label])
        };
        let (dumps, scrapes) = (readings("priority-levels"), readings("metrics"));
        stop.store(true, Ordering::Relaxed);
        if let Some(loader) = loader {
            let _ = loader.await;
        }
        let kas_after = KasCounters::read(&self.client, &target.plural).await;
        let terminated = kas_after.terminated_watchers - kas.terminated_watchers;
        eprintln!(
            "{label}: read {read}; watchers kube-apiserver terminated: {terminated}; \
             kube-apiserver's counts read: {dumps} priority levels, {scrapes} /metrics"
        );
        let mut limits: Vec<f64> = samples.iter().map(|(_, limit, _)| *limit).collect();
        limits.sort_by(f64::total_cmp);
        let row = Row {
            limit: limits.get(limits.len() / 2).copied(),
            strategy: label.to_string(),
            kib: target.kib,
            objects: target.objects,
            seconds,
            requests: kas_after.requests - kas.requests,
            bytes: io_bytes(pid) - io,
            rss_kib: peak_rss_kib(pid),
            kas_cpu: cpu_seconds(self.kas_pid) - cpu,
            read,
            neighbour,
        };
        (row, samples)
    }

    /// What the second client alone (8 full-object LISTs of `blobs` at a time, no migration)
    /// costs the neighbour over [`LISTS_ALONE`]: its GET p50 and p99, in ms.
    async fn lists_alone(&self, blobs: &Blobs) -> (f64, f64) {
        let api = self.api(&blobs.plural, &blobs.kind);
        let neighbour = Neighbour::start(&self.client);
        let deadline = Instant::now() + LISTS_ALONE;
        second_client(&api, || Instant::now() < deadline).await;
        neighbour.finish().await
    }

    /// The out-of-tree migrator's way, in this process: full LIST pages of 500, then a GET
    /// and a PUT of each object, 16 at a time.
    async fn get_put(&self, blobs: &mut Blobs) -> Row {
        self.flip(blobs);
        let api = self.api(&blobs.plural, &blobs.kind);
        let me = std::process::id();
        let (requests, cpu, io) = (
            KasCounters::read(&self.client, &blobs.plural)
                .await
                .requests,
            cpu_seconds(self.kas_pid),
            io_bytes(me),
        );
        let started = Instant::now();
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(500);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            let page = api.list(&params).await.expect("list");
            futures::stream::iter(page.items)
                .for_each_concurrent(16, |item| {
                    let api = &api;
                    async move {
                        let name = item.metadata.name.clone().unwrap_or_default();
                        let current = api.get(&name).await.expect("get");
                        let _ = api.replace(&name, &PostParams::default(), &current).await;
                    }
                })
                .await;
            match page.metadata.continue_ {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        Row {
            strategy: "full LIST + GET + PUT, 16 (out-of-tree)".into(),
            kib: blobs.kib,
            objects: blobs.objects,
            seconds,
            neighbour: None,
            requests: KasCounters::read(&self.client, &blobs.plural)
                .await
                .requests
                - requests,
            bytes: io_bytes(me) - io,
            rss_kib: None,
            kas_cpu: cpu_seconds(self.kas_pid) - cpu,
            limit: None,
            read: "full pages".into(),
        }
    }
}

/// Who else uses the apiserver during one of our runs.
#[derive(Clone, Copy, Default)]
struct Company {
    /// The neighbour GETs a ConfigMap every 100 ms (and its latency is the run's `neighbour`).
    neighbour: bool,
    /// A second client lists the migrated resource in full pages, 8 at a time, from 8 s on.
    lists: bool,
}

/// A run of ours, named `[nb-][paged-][json-][delay-]<concurrency>` (`auto` when no number is
/// given): `nb` with the neighbour GETting meanwhile (without it the migrator is alone),
/// `paged` reads in pages instead of a stream, `json` asks kube-apiserver for JSON instead of
/// protobuf (`--kube-api-content-type`).
struct OurRun {
    concurrency: String,
    paged: bool,
    json: bool,
    /// Through the loopback delay proxy ([`delay`]).
    delay: bool,
    neighbour: bool,
    /// As deploy/ runs it: its ServiceAccount, in the priority level of its FlowSchema.
    own_level: bool,
}

impl OurRun {
    fn parse(name: &str) -> OurRun {
        let parts: Vec<&str> = name.split('-').collect();
        OurRun {
            concurrency: parts
                .iter()
                .find(|p| !matches!(**p, "paged" | "json" | "delay" | "nb" | "own"))
                .map_or_else(|| "auto".into(), |c| c.to_string()),
            paged: parts.contains(&"paged"),
            json: parts.contains(&"json"),
            delay: parts.contains(&"delay"),
            neighbour: parts.contains(&"nb"),
            own_level: parts.contains(&"own"),
        }
    }

    fn flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--qps=0".to_string(),
            format!("--object-concurrency={}", self.concurrency),
        ];
        if self.paged {
            flags.push("--watch-list-max-objects=0".into());
        }
        if self.json {
            flags.push("--kube-api-content-type=application/json".into());
        }
        flags
    }

    fn label(&self) -> String {
        let wire = if self.json { "JSON" } else { "protobuf" };
        let delay = if self.delay { ", +2×delay" } else { "" };
        let neighbour = if self.neighbour { ", a neighbour" } else { "" };
        let level = if self.own_level {
            ", deploy's identity and level"
        } else {
            ""
        };
        format!(
            "ours, {}, {wire} reads{delay}{neighbour}{level}",
            self.concurrency
        )
    }
}

impl Bench {
    /// The kubeconfig of a run: the admin's (`exempt` from API Priority and Fairness), or
    /// deploy/'s ServiceAccount's in the priority level of deploy/base/flowcontrol.yaml; through
    /// the delay proxy for a `delay` run.
    async fn kubeconfig(&self, run: &OurRun) -> std::path::PathBuf {
        let identity = if run.own_level {
            self.own_level_kubeconfig()
        } else {
            self.plane.kubeconfig.clone()
        };
        if run.delay {
            self.delayed_kubeconfig(&identity).await
        } else {
            identity
        }
    }

    /// deploy/base's namespace, ServiceAccount, RBAC and FlowSchema, applied as shipped (on the
    /// first call), and a kubeconfig with the ServiceAccount's token.
    fn own_level_kubeconfig(&self) -> std::path::PathBuf {
        self.own_level
            .get_or_init(|| {
                support::real_cluster::install_rbac(&self.plane);
                support::real_cluster::install_flowcontrol(&self.plane);
                self.plane
                    .service_account_kubeconfig(support::real_cluster::NAMESPACE, "svm-apiserver")
            })
            .clone()
    }

    /// `kubeconfig` with its server a loopback proxy delaying every byte by
    /// `SVM_BENCH_REAL_DELAY_MS` (2) each way; one proxy per call (a run's process connects
    /// afresh).
    async fn delayed_kubeconfig(&self, kubeconfig: &std::path::Path) -> std::path::PathBuf {
        let ms: u64 = std::env::var("SVM_BENCH_REAL_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2);
        let url = self.plane.url();
        let upstream: std::net::SocketAddr = url
            .trim_start_matches("https://")
            .parse()
            .expect("kube-apiserver's address");
        let proxy = delay::start(upstream, Duration::from_millis(ms)).await;
        let yaml = std::fs::read_to_string(kubeconfig).expect("a kubeconfig");
        let path = self
            .plane
            .dir()
            .join(format!("delayed-{}.kubeconfig", proxy.port()));
        std::fs::write(&path, yaml.replace(&url, &format!("https://{proxy}")))
            .expect("delayed kubeconfig");
        eprintln!("delay proxy {proxy} → {upstream}, {ms} ms each way");
        path
    }

    /// Our reads in protobuf against JSON, alternated twice, streamed and paged: on ConfigMaps
    /// (built-in: kube-apiserver answers protobuf) and on a custom resource (1 KiB each, the
    /// objects already current, so only the reads and the no-op PATCHes' answers differ).
    async fn wire_formats(&self, n: usize) {
        let configmaps = self.install_configmaps(1, n).await;
        let mut rows = Vec::new();
        for name in ["auto", "json", "auto", "json", "paged", "paged-json"] {
            let run = OurRun::parse(name);
            let flags = run.flags();
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let label = format!("{} (configmaps)", run.label());
            rows.push(
                self.run_ours(&configmaps, &label, &flags, false, None)
                    .await
                    .0,
            );
        }
        let blobs = self.install("wire", 1, n).await;
        for name in ["auto", "json", "auto", "json"] {
            let run = OurRun::parse(name);
            let flags = run.flags();
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let label = format!("{} (custom)", run.label());
            rows.push(
                self.run_ours(&blobs.target(), &label, &flags, false, None)
                    .await
                    .0,
            );
        }
        print(
            "Our reads in protobuf and in JSON (objects current: reads and no-op PATCHes only)",
            &rows,
        );
        println!(
            "\nThe metadata reads alone, {READ_ROUNDS} full reads each way, alternated (kube-apiserver CPU per 1 000 objects read, bytes per object on the wire)\n"
        );
        println!("| resource | read | wire | kas CPU s/1000 | bytes/obj |");
        println!("|---|---|---|---|---|");
        for target in [&configmaps, &blobs.target()] {
            for stream in [false, true] {
                for wire in [Wire::Protobuf, Wire::Json, Wire::Protobuf, Wire::Json] {
                    let (cpu, bytes) = self.read_cost(target, wire, stream).await;
                    println!(
                        "| {} | {} | {wire:?} | {cpu:.3} | {bytes:.0} |",
                        target.plural,
                        if stream { "stream" } else { "pages of 500" }
                    );
                }
            }
        }
    }

    /// What one reading of kube-apiserver's `/metrics` costs it (what `--object-concurrency
    /// auto` reads to tell whether anyone else is working): CPU seconds and bytes per reading,
    /// in the text format the migrator asks for and in Prometheus's protobuf, alternated.
    async fn metrics_cost(&self) {
        const READINGS: usize = 10;
        const TEXT: &str = "text/plain";
        const PROTOBUF: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";
        println!("\nOne reading of kube-apiserver's /metrics, {READINGS} each way, alternated\n");
        println!("| format | kas CPU ms/reading | wall ms/reading | bytes/reading |");
        println!("|---|---|---|---|");
        for accept in [TEXT, PROTOBUF, TEXT, PROTOBUF] {
            let cpu = cpu_seconds(self.kas_pid);
            let started = Instant::now();
            let mut bytes = 0;
            for _ in 0..READINGS {
                let request = http::Request::get("/metrics")
                    .header("Accept", accept)
                    .body(Vec::new())
                    .expect("request");
                let response = self
                    .client
                    .send(request.map(kube::client::Body::from))
                    .await
                    .expect("GET /metrics");
                bytes += response
                    .into_body()
                    .collect()
                    .await
                    .expect("body")
                    .to_bytes()
                    .len();
            }
            let per = |total: f64| total / READINGS as f64 * 1000.0;
            println!(
                "| {} | {:.0} | {:.0} | {} |",
                if accept == TEXT { "text" } else { "protobuf" },
                per(cpu_seconds(self.kas_pid) - cpu),
                per(started.elapsed().as_secs_f64()),
                bytes / READINGS
            );
        }
    }

    /// kube-apiserver's CPU seconds per 1 000 objects, and the bytes per object of the answers,
    /// for [`READ_ROUNDS`] metadata-only reads of every object of `target`: LIST pages of 500,
    /// or one watch-list stream up to its initial-events-end bookmark.
    async fn read_cost(&self, target: &Target, wire: Wire, stream: bool) -> (f64, f64) {
        let path = if target.group.is_empty() {
            format!("/api/v1/{}", target.plural)
        } else {
            let version = "v1";
            format!("/apis/{}/{version}/{}", target.group, target.plural)
        };
        let cpu = cpu_seconds(self.kas_pid);
        let mut bytes = 0usize;
        for _ in 0..READ_ROUNDS {
            bytes += if stream {
                self.read_stream(&path, wire).await
            } else {
                self.read_pages(&path, wire).await
            };
        }
        let objects = (target.objects * READ_ROUNDS) as f64;
        (
            (cpu_seconds(self.kas_pid) - cpu) / objects * 1000.0,
            bytes as f64 / objects,
        )
    }

    async fn read_pages(&self, path: &str, wire: Wire) -> usize {
        let mut bytes = 0;
        let mut token = String::new();
        loop {
            let mut uri = format!("{path}?limit=500");
            if !token.is_empty() {
                uri.push_str(&format!("&continue={token}"));
            }
            let request = http::Request::get(uri)
                .header("Accept", wire.list_accept())
                .body(Vec::new())
                .expect("request");
            let response = self
                .client
                .send(request.map(kube::client::Body::from))
                .await;
            let body = response
                .expect("LIST")
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            bytes += body.len();
            // The continue token is a base64 string in either encoding: find it by its field.
            token = continue_token(&body, wire);
            if token.is_empty() {
                return bytes;
            }
        }
    }

    async fn read_stream(&self, path: &str, wire: Wire) -> usize {
        let uri = format!(
            "{path}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=120"
        );
        let request = http::Request::get(uri)
            .header("Accept", wire.object_accept())
            .body(kube::client::Body::empty())
            .expect("request");
        let response = self.client.send(request).await.expect("watch-list");
        let mut body = response.into_body().into_data_stream();
        let (mut bytes, mut tail) = (0, Vec::new());
        while let Some(chunk) = body.next().await {
            let chunk = chunk.expect("stream");
            bytes += chunk.len();
            tail.extend_from_slice(&chunk);
            let end = b"k8s.io/initial-events-end";
            if tail.windows(end.len()).any(|w| w == end) {
                return bytes;
            }
            let keep = tail.len().saturating_sub(end.len());
            tail.drain(..keep);
        }
        panic!("the watch-list stream ended before its bookmark");
    }
}

/// Full metadata reads per resource, wire format and read in [`Bench::read_cost`].
const READ_ROUNDS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Wire {
    Protobuf,
    Json,
}

impl Wire {
    fn list_accept(self) -> &'static str {
        match self {
            Wire::Protobuf => {
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            }
            Wire::Json => {
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            }
        }
    }

    fn object_accept(self) -> &'static str {
        match self {
            Wire::Protobuf => {
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
            }
            Wire::Json => {
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
            }
        }
    }
}

/// The continue token of a metadata-only LIST page, in JSON or protobuf.
fn continue_token(body: &[u8], wire: Wire) -> String {
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta_pb;
    use prost::Message;
    match wire {
        Wire::Json => {
            serde_json::from_slice::<Value>(body).expect("a JSON list")["metadata"]["continue"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
        Wire::Protobuf => {
            let message = body.strip_prefix(b"k8s\0").expect("a protobuf list");
            let envelope =
                k8s_pb::apimachinery::pkg::runtime::Unknown::decode(message).expect("an envelope");
            let list = meta_pb::PartialObjectMetadataList::decode(
                envelope.raw.unwrap_or_default().as_slice(),
            )
            .expect("a metadata list");
            list.metadata.and_then(|m| m.r#continue).unwrap_or_default()
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(assets) = assets("bench real") else {
        eprintln!("no kube-apiserver (KUBEBUILDER_ASSETS): the real-apiserver bench is NOT RUN");
        std::process::exit(1);
    };
    let n: usize = std::env::var("SVM_BENCH_REAL_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let sizes: Vec<usize> = std::env::var("SVM_BENCH_REAL_SIZES")
        .unwrap_or_else(|_| "1,10,100".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs: Vec<String> = std::env::var("SVM_BENCH_REAL_RUNS")
        .unwrap_or_else(|_| "auto,16,64,getput,nb-auto,qps,load".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let run = |name: &str| runs.iter().any(|r| r == name);
    let plane = ControlPlane::start(&assets, &[]);
    let kas_pid = plane.apiserver_pid().expect("kube-apiserver pid");
    let client = plane.client().await;
    plane.kubectl().ok(&["create", "namespace", NAMESPACE]);
    plane.kubectl().ok(&[
        "create",
        "configmap",
        NEIGHBOUR,
        "-n",
        NAMESPACE,
        "--from-literal=k=v",
    ]);
    let bench = Bench {
        plane,
        kas_pid,
        client,
        own_level: std::sync::OnceLock::new(),
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average at start: {load}");
    // What the neighbour's GET costs when nothing else runs: the yardstick of its column.
    let idle = Neighbour::start(&bench.client);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (p50, p99) = idle.finish().await;
    println!("\nNeighbour GET, idle apiserver (5 s): p50 {p50:.1} ms, p99 {p99:.1} ms");

    if run("writes") {
        let n: usize = std::env::var("SVM_BENCH_REAL_WRITE_OBJECTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000);
        bench.writes(&sizes, n).await;
    }
    let migrations = runs
        .iter()
        .any(|r| !matches!(r.as_str(), "writes" | "wire" | "metrics"));
    let mut rows = Vec::new();
    let mut loaded = None;
    let mut lists_alone = None;
    for kib in sizes.iter().copied().filter(|_| migrations) {
        let objects = if kib >= 100 { n / 10 } else { n };
        let mut blobs = bench.install("blob", kib, objects).await;
        // In the order given, repeats allowed (to alternate runs against drift): a run named
        // `auto` or a number is ours at that --object-concurrency, read as a stream; `paged`
        // (or `paged-<c>`) the same read in pages; `getput` the full-object strategy.
        for name in &runs {
            if name == "getput" {
                rows.push(bench.get_put(&mut blobs).await);
                continue;
            }
            if name == "qps" || name == "load" || name == "lists" {
                continue;
            }
            if name == "wire" || name == "writes" || name == "metrics" {
                continue;
            }
            let run = OurRun::parse(name);
            let mut flags = run.flags();
            if run.delay || run.own_level {
                let path = bench.kubeconfig(&run).await;
                flags.push(format!("--kubeconfig={}", path.display()));
            }
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let company = Company {
                neighbour: run.neighbour,
                lists: false,
            };
            let (row, _) = bench.ours(&mut blobs, &run.label(), &flags, company).await;
            rows.push(row);
        }
        print(
            "Migration on the real kube-apiserver (every object rewritten; unthrottled)",
            &rows,
        );
        if kib == 1 && run("qps") {
            let qps = 200;
            let (row, _) = bench
                .ours(
                    &mut blobs,
                    "ours, auto, --qps 200 --burst 10",
                    &["--qps=200", "--burst=10"],
                    Company::default(),
                )
                .await;
            println!(
                "\nAt a QPS cap: {} objects at --qps {qps}: {:.1} s against N/QPS = {:.1} s\n",
                row.objects,
                row.seconds,
                row.objects as f64 / qps as f64
            );
        }
        if kib == 1 && run("load") {
            let (row, samples) = bench
                .ours(
                    &mut blobs,
                    "ours, auto, a second client from 8 s",
                    &["--qps=0"],
                    Company {
                        neighbour: true,
                        lists: true,
                    },
                )
                .await;
            loaded = Some((row, samples));
        }
        if kib == 1 && run("lists") {
            lists_alone = Some(bench.lists_alone(&blobs).await);
        }
    }
    if run("wire") {
        bench.wire_formats(n).await;
    }
    if run("metrics") {
        bench.metrics_cost().await;
    }
    if let Some((p50, p99)) = lists_alone {
        println!(
            "\nThe second client alone (8 full-object LISTs at a time, no migration, {} s): neighbour GET p50 {p50:.1} ms, p99 {p99:.1} ms",
            LISTS_ALONE.as_secs()
        );
    }
    if let Some((row, samples)) = loaded {
        print(
            "A second client (8 full-object LISTs at a time) from 8 s on",
            &[row],
        );
        println!("\n| t (0.5 s) | migrated | PATCH limit | second client |");
        println!("|---|---|---|---|");
        for (i, (migrated, limit, loading)) in samples.iter().enumerate() {
            println!(
                "| {i} | {migrated:.0} | {limit:.0} | {} |",
                if *loading { "on" } else { "" }
            );
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average at end: {load}");
}
