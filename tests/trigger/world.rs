//! A trigger test's world: an etcd, the double, the server with the trigger on, and readers of
//! what the server recorded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube_double::KubeDouble;
use serde_json::Value;
use svm_storage::etcd::{EtcdOptions, EtcdStorage};
use svm_trigger::history::{HashHistory, HistoryEntry};

use crate::harness::{Harness, tail};
use crate::support::doubles::{Verdict, verdict};
use crate::support::etcd::EtcdServer;
use crate::support::server::Backend;
use crate::support::wait::eventually_async_every;

pub(crate) const STATES: &str = "/apis/storagemigration.k8s.io/v1/storagestates";
/// How long a scenario step may take (a hang guard, not a speed check).
pub(crate) const WAIT: Duration = Duration::from_secs(120);
/// How often a scenario's waits look: a quick migration overtakes intermediate states, and the
/// scenarios are quick, so finer than [`crate::support::wait::POLL`].
pub(crate) const TICK: Duration = Duration::from_millis(50);
pub(crate) const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

pub(crate) struct World {
    pub etcd: EtcdServer,
    pub prefix: String,
    pub h: Harness,
    history: HashHistory,
    storage: Arc<EtcdStorage>,
    /// Set by the safety checker when it saw a safe verdict with old objects stored, or could
    /// not read the StorageStates for longer than [`CHECKER_BLIND`].
    violation: Arc<std::sync::Mutex<Option<String>>>,
    /// What the checker did: polls, failed polls, safe verdicts judged against the double.
    checked: Arc<CheckerCounts>,
    /// `(name, resourceVersion)` of every StorageState version already judged: a verdict is
    /// judged once, when first seen — by the test's own wait (before it changes the cluster
    /// again) or by the background poll, whichever comes first. Judging an old verdict after
    /// the cluster moved on would blame the trigger for not being clairvoyant.
    judged: Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
    stop_checker: Arc<AtomicBool>,
}

/// Flags every trigger test runs with (fast polls, unthrottled migrations).
pub(crate) const FAST: &[&str] = &[
    "--controllers=trigger,migrator",
    "--discovery-interval=1s",
    "--qps=0",
    "--workers=4",
    "--chunk-size=100",
];

impl World {
    pub(crate) async fn start(double: KubeDouble, flags: &[&str]) -> World {
        let etcd = EtcdServer::start();
        let prefix = format!("/svm-trigger-{}", uuid::Uuid::new_v4());
        Self::start_on(etcd, prefix, double, flags).await
    }

    pub(crate) async fn start_on(
        etcd: EtcdServer,
        prefix: String,
        double: KubeDouble,
        flags: &[&str],
    ) -> World {
        let endpoint = etcd.endpoint();
        // The test's flags replace the fast defaults of the same name.
        let name = |flag: &str| flag.split('=').next().unwrap_or_default().to_string();
        let mut all: Vec<&str> = FAST
            .iter()
            .copied()
            .filter(|f| !flags.iter().any(|g| name(g) == name(f)))
            .collect();
        all.extend_from_slice(flags);
        let h = Harness::start_on(double, Backend::EtcdShared(&endpoint, &prefix), &all);
        let storage = EtcdStorage::connect(&[endpoint], EtcdOptions::default())
            .await
            .expect("etcd client");
        let storage = Arc::new(storage);
        let history = HashHistory::new(storage.clone(), &prefix);
        let world = World {
            etcd,
            prefix,
            h,
            history,
            storage,
            violation: Arc::default(),
            checked: Arc::default(),
            judged: Arc::default(),
            stop_checker: Arc::default(),
        };
        world.spawn_safety_checker();
        world
    }

    /// Polls every StorageState; whenever one says safe, the double's read-back must show
    /// every object of the resource in the current storage version. A poll that fails (the
    /// server restarting) is counted; failing for longer than [`CHECKER_BLIND`] in a row is a
    /// violation, since verdicts may have gone unjudged.
    fn spawn_safety_checker(&self) {
        let http = self.h.http.clone();
        let url = self.h.url(STATES);
        let judge = self.judge();
        let stop = self.stop_checker.clone();
        let checked = self.checked.clone();
        let violation = self.violation.clone();
        tokio::spawn(async move {
            let mut failing_since: Option<Instant> = None;
            while !stop.load(Ordering::Relaxed) {
                checked.polls.fetch_add(1, Ordering::Relaxed);
                match list_items(&http, &url).await {
                    Ok(items) => {
                        failing_since = None;
                        for state in &items {
                            judge(state);
                        }
                    }
                    Err(err) => {
                        checked.failed_polls.fetch_add(1, Ordering::Relaxed);
                        let since = *failing_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > CHECKER_BLIND {
                            violation.lock().unwrap().get_or_insert(format!(
                                "the safety checker could not list StorageStates for {CHECKER_BLIND:?}: {err}"
                            ));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }

    /// Judges a StorageState version the first time it is seen.
    fn judge(&self) -> impl Fn(&Value) + Send + Sync + 'static {
        let engine = self.h.double.engine().clone();
        let violation = self.violation.clone();
        let judged = self.judged.clone();
        let checked = self.checked.clone();
        move |state: &Value| {
            let key = (
                state["metadata"]["name"].as_str().unwrap_or("").to_string(),
                state["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
            if !judged.lock().unwrap().insert(key) {
                return;
            }
            match verdict(&engine, state) {
                Verdict::NotSafe | Verdict::ClusterMovedOn => {}
                Verdict::Safe => {
                    checked.safe_judged.fetch_add(1, Ordering::Relaxed);
                }
                Verdict::Unsafe(problem) => {
                    checked.safe_judged.fetch_add(1, Ordering::Relaxed);
                    violation.lock().unwrap().get_or_insert(problem);
                }
            }
        }
    }

    /// The double's read-back: every object of `resource` is encoded as `encoding`.
    pub(crate) fn assert_all_stored_in(&self, resource: &str, encoding: &str) {
        let summary = self.h.double.stored_summary(resource);
        assert!(
            summary.keys().all(|(e, _)| e == encoding),
            "{resource}: not all in {encoding}: {summary:?}"
        );
    }

    /// Fails the test if the checker ever saw a safe verdict over old objects, went blind,
    /// or never judged a safe verdict at all (then it proved nothing).
    pub(crate) fn assert_never_unsafe(&self) {
        let counts = self.checked.summary();
        eprintln!("safety checker: {counts}");
        if let Some(problem) = self.violation.lock().unwrap().clone() {
            panic!(
                "{problem}\n({counts})\n--- server log ---\n{}",
                tail(&self.h.server.log(), 80)
            );
        }
        assert!(
            self.checked.safe_judged.load(Ordering::Relaxed) > 0,
            "the safety checker judged no safe verdict against the double ({counts})"
        );
    }

    /// The items of the list at `path` on our server.
    async fn items(&self, path: &str) -> Vec<Value> {
        let list: Value = self
            .h
            .http
            .get(self.h.url(path))
            .send()
            .await
            .expect("list")
            .json()
            .await
            .expect("json");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    pub(crate) async fn states(&self) -> Vec<Value> {
        self.items(STATES).await
    }

    pub(crate) async fn state(&self, name: &str) -> Option<Value> {
        let resp = self
            .h
            .http
            .get(self.h.url(&format!("{STATES}/{name}")))
            .send()
            .await
            .ok()?;
        if resp.status() == 404 {
            return None;
        }
        resp.json().await.ok()
    }

    pub(crate) async fn migrations(&self) -> Vec<Value> {
        self.items(SVMS).await
    }

    /// Migrations of `group/resource`, by name.
    pub(crate) async fn migrations_of(
        &self,
        group: &str,
        resource: &str,
    ) -> BTreeMap<String, Value> {
        self.migrations()
            .await
            .into_iter()
            .filter(|m| {
                m["spec"]["resource"]["group"] == group
                    && m["spec"]["resource"]["resource"] == resource
            })
            .map(|m| (m["metadata"]["name"].as_str().unwrap_or("").to_string(), m))
            .collect()
    }

    pub(crate) async fn history(&self, group: &str, resource: &str) -> Vec<HistoryEntry> {
        self.history.read(group, resource).await.expect("history")
    }

    /// Polls until `done(state)` holds for StorageState `name`.
    pub(crate) async fn wait_state(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let judge = self.judge();
        eventually_async_every(
            timeout,
            TICK,
            &format!("StorageState {name} — {what}"),
            async || match self.state(name).await {
                Some(state) if done(&state) => {
                    judge(&state);
                    Ok(state)
                }
                other => Err(format!("{other:#?}")),
            },
            async || {
                format!(
                    "migrations: {:#?}\n--- server log ---\n{}",
                    self.migrations()
                        .await
                        .iter()
                        .map(|m| (
                            m["metadata"]["name"].clone(),
                            m["status"]["conditions"].clone()
                        ))
                        .collect::<Vec<_>>(),
                    tail(&self.h.server.log(), 80)
                )
            },
        )
        .await
    }

    /// Deletes the trigger's observer record (`<prefix>/trigger/observer`) from etcd.
    pub(crate) async fn delete_observer_record(&self) {
        use svm_storage::{Op, Storage, Txn};
        let key = format!("{}/trigger/observer", self.prefix);
        assert!(
            self.storage.get(&key).await.expect("get").is_some(),
            "no observer record"
        );
        self.storage
            .txn(Txn {
                compares: vec![],
                ops: vec![Op::Delete(key)],
            })
            .await
            .expect("delete");
    }

    /// Polls the hash history of `group/resource` until `done(entries)` holds. (Intermediate
    /// StorageState values can be overtaken by a quick migration; the history cannot.)
    pub(crate) async fn wait_history(
        &self,
        group: &str,
        resource: &str,
        what: &str,
        done: impl Fn(&[HistoryEntry]) -> bool,
    ) -> Vec<HistoryEntry> {
        eventually_async_every(
            WAIT,
            TICK,
            &format!("history of {resource}.{group} — {what}"),
            async || {
                let entries = self.history(group, resource).await;
                if done(&entries) {
                    Ok(entries)
                } else {
                    Err(format!("{entries:#?}"))
                }
            },
            async || format!("--- server log ---\n{}", tail(&self.h.server.log(), 60)),
        )
        .await
    }

    /// Waits until StorageState `name` is gone.
    pub(crate) async fn wait_state_gone(&self, name: &str, timeout: Duration) {
        eventually_async_every(
            timeout,
            TICK,
            &format!("StorageState {name} gone"),
            async || match self.state(name).await {
                None => Ok(()),
                Some(state) => Err(format!("{state:#}")),
            },
            async || format!("--- server log ---\n{}", tail(&self.h.server.log(), 60)),
        )
        .await
    }

    /// Waits until StorageState `name` is safe at `hash`.
    pub(crate) async fn wait_safe(&self, name: &str, hash: &str, timeout: Duration) -> Value {
        self.wait_state(name, timeout, &format!("safe at {hash}"), |s| {
            current(s) == hash && persisted(s) == [hash]
        })
        .await
    }
}

/// How long the checker may fail to list StorageStates in a row (a restart takes seconds).
const CHECKER_BLIND: Duration = Duration::from_secs(60);

#[derive(Default)]
struct CheckerCounts {
    polls: std::sync::atomic::AtomicU64,
    failed_polls: std::sync::atomic::AtomicU64,
    /// Safe verdicts compared with the double's read-back.
    safe_judged: std::sync::atomic::AtomicU64,
}

impl CheckerCounts {
    fn summary(&self) -> String {
        format!(
            "{} polls, {} failed, {} safe verdicts judged against the double",
            self.polls.load(Ordering::Relaxed),
            self.failed_polls.load(Ordering::Relaxed),
            self.safe_judged.load(Ordering::Relaxed)
        )
    }
}

/// The items of a list, or why there are none (a transport error, a non-200, a body that is
/// not a list).
async fn list_items(http: &reqwest::Client, url: &str) -> Result<Vec<Value>, String> {
    let resp = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {body}"));
    }
    body["items"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("not a list: {body}"))
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop_checker.store(true, Ordering::Relaxed);
    }
}

/// The storage-version hash of `group/version/kind`, as discovery publishes it.
pub(crate) fn hash(group: &str, version: &str, kind: &str) -> String {
    kube_double::resources::storage_version_hash(group, version, kind)
}

/// How often the doubles of these tests renew identity leases (kube-apiserver: 10 s). The
/// trigger accounts for an apiserver instance by renewals after a look, so faster here.
const LEASE_RENEWAL: Duration = Duration::from_millis(200);

/// A double without the StorageVersion API (most clusters), with the `demo` namespace.
pub(crate) async fn double_without_storage_version_api() -> KubeDouble {
    let double = KubeDouble::builder()
        .storage_version_api(false)
        .lease_renewal(LEASE_RENEWAL)
        .start()
        .await
        .expect("start the double");
    double.ensure_namespace("demo").expect("namespace");
    double
}

/// A double with the StorageVersion API, the `demo` namespace and the
/// `widgets.example.test` CRD (v1 and v2).
pub(crate) async fn double_with_widgets() -> KubeDouble {
    crate::support::doubles::with_widgets(
        KubeDouble::builder().lease_renewal(LEASE_RENEWAL),
        "demo",
    )
    .await
}

pub(crate) fn current(state: &Value) -> &str {
    state["status"]["currentStorageVersionHash"]
        .as_str()
        .unwrap_or("")
}

pub(crate) fn persisted(state: &Value) -> Vec<&str> {
    state["status"]["persistedStorageVersionHashes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub(crate) fn hashes(entries: &[HistoryEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.hash.as_str()).collect()
}
