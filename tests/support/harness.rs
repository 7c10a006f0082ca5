//! A test double cluster plus the real server pointed at it with `--kubeconfig`.

use std::time::Duration;

use kube_double::KubeDouble;
use serde_json::{Value, json};

pub use crate::server::sample;
use crate::server::{Backend, ServerProcess};
use crate::wait::eventually_async_every;

pub const SVMS: &str = "/apis/storagemigration.k8s.io/v1/storageversionmigrations";

pub struct Harness {
    pub double: KubeDouble,
    pub server: ServerProcess,
    pub http: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// The double with a `demo` namespace and the `widgets.example.test` CRD (v1 and v2).
pub async fn double_with_widgets() -> KubeDouble {
    double_with_widgets_from(KubeDouble::builder()).await
}

/// [`double_with_widgets`] with `count` ConfigMaps of 64 bytes in `demo` (`cm-00000`, …)
/// whose storage version has moved to v2: every one of them is the migration's to rewrite.
pub async fn double_with_configmaps_to_move(count: usize) -> KubeDouble {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", count, 64)
        .expect("preload configmaps");
    double
        .set_storage_version("configmaps", "v2")
        .expect("move configmaps' storage version");
    double
}

/// As [`double_with_widgets`], from a configured builder.
pub async fn double_with_widgets_from(builder: kube_double::Builder) -> KubeDouble {
    crate::doubles::with_widgets(builder, "demo").await
}

impl Harness {
    /// The server with the migrator on, pointed at `double`, with extra `serve` flags.
    pub fn start(double: KubeDouble, flags: &[&str]) -> Harness {
        Self::start_on(double, Backend::Embedded, flags)
    }

    /// As [`Harness::start`], on a chosen store.
    pub fn start_on(double: KubeDouble, backend: Backend<'_>, flags: &[&str]) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("cluster.kubeconfig");
        std::fs::write(&kubeconfig, double.kubeconfig_yaml()).expect("kubeconfig");
        let server = start_server(backend, &kubeconfig, flags);
        let http = server.http_client();
        Harness {
            double,
            server,
            http,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url)
    }

    pub async fn create_migration(&self, name: &str, group: &str, resource: &str) -> Value {
        let body = json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": name},
            "spec": {"resource": {"group": group, "resource": resource}},
        });
        self.create(SVMS, &body).await
    }

    /// POSTs `body` to the collection at `path`; the created object (a 201, or the test fails).
    pub async fn create(&self, path: &str, body: &Value) -> Value {
        let resp = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("create");
        assert_eq!(
            resp.status(),
            201,
            "{}",
            resp.text().await.unwrap_or_default()
        );
        resp.json().await.expect("json")
    }

    pub async fn get_migration(&self, name: &str) -> Option<Value> {
        let resp = self
            .http
            .get(self.url(&format!("{SVMS}/{name}")))
            .send()
            .await
            .ok()?;
        if resp.status() == 404 {
            return None;
        }
        assert_eq!(resp.status(), 200);
        resp.json().await.ok()
    }

    pub async fn delete_migration(&self, name: &str) {
        let resp = self
            .http
            .delete(self.url(&format!("{SVMS}/{name}")))
            .send()
            .await
            .expect("delete");
        assert_eq!(resp.status(), 200);
    }

    /// Polls the migration (every 100 ms: migrations against the double take milliseconds)
    /// until `done` holds; panics with what it saw and the server log after `timeout`.
    pub async fn wait_for(
        &self,
        name: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        eventually_async_every(
            timeout,
            Duration::from_millis(100),
            &format!("migration {name} getting where the test waits for"),
            async || match self.get_migration(name).await {
                Some(m) if done(&m) => Ok(m),
                other => Err(format!("{other:#?}")),
            },
            async || format!("--- server log ---\n{}", tail(&self.server.log(), 60)),
        )
        .await
    }

    /// Waits for Succeeded (failing at once on Failed).
    pub async fn wait_succeeded(&self, name: &str, timeout: Duration) -> Value {
        let m = self
            .wait_for(name, timeout, |m| {
                condition(m, "Succeeded") == Some("True") || condition(m, "Failed") == Some("True")
            })
            .await;
        assert_eq!(
            condition(&m, "Succeeded"),
            Some("True"),
            "{m:#}\n--- server log ---\n{}",
            tail(&self.server.log(), 60)
        );
        m
    }

    pub async fn metrics(&self) -> String {
        self.server.scrape(&self.http).await
    }
}

/// `--kubeconfig=<file>` followed by `flags`. The migrator's tests run manual migrations
/// only (`--controllers=migrator`, as in-tree Kubernetes does) unless `flags` choose.
fn cluster_flags(kubeconfig: &std::path::Path, flags: &[&str]) -> Vec<String> {
    let mut args = vec![format!("--kubeconfig={}", kubeconfig.display())];
    if !flags.iter().any(|f| f.starts_with("--controllers")) {
        args.push("--controllers=migrator".into());
    }
    args.extend(flags.iter().map(|f| f.to_string()));
    args
}

fn start_server(
    backend: Backend<'_>,
    kubeconfig: &std::path::Path,
    flags: &[&str],
) -> ServerProcess {
    let args = cluster_flags(kubeconfig, flags);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServerProcess::start_with(backend, &args)
}

/// A second replica of `h`'s server: same cluster, same store (`backend`), its own process.
pub fn replica(h: &Harness, backend: Backend<'_>, flags: &[&str]) -> ServerProcess {
    start_server(backend, &h._dir.path().join("cluster.kubeconfig"), flags)
}

pub fn condition<'a>(m: &'a Value, type_: &str) -> Option<&'a str> {
    m["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

pub fn condition_field<'a>(m: &'a Value, type_: &str, field: &str) -> &'a str {
    m["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c[field].as_str())
        .unwrap_or("")
}

pub fn migrated(m: &Value) -> i64 {
    m["status"]["progress"]["migratedObjects"]
        .as_i64()
        .unwrap_or(0)
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
