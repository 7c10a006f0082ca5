//! Starts the real `svm-apiserver` binary on a free loopback port for a test, with fresh dev
//! certificates and a fresh store, and stops it on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::wait::eventually_every;

/// How often a starting server is looked at: every test starts one (or several), so finer than
/// [`crate::wait::POLL`].
const START_POLL: Duration = Duration::from_millis(50);

/// Which store the server runs on.
pub enum Backend<'a> {
    /// The embedded store in a data directory under the server's temp dir.
    Embedded,
    /// A real etcd at this endpoint, under a fresh key prefix.
    Etcd(&'a str),
    /// A real etcd at this endpoint under the given prefix (replicas sharing one store).
    EtcdShared(&'a str, &'a str),
}

pub struct ServerProcess {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// `https://127.0.0.1:<port>`
    pub url: String,
    pub kubeconfig: PathBuf,
    args: Vec<String>,
}

impl ServerProcess {
    pub fn start(backend: Backend<'_>) -> ServerProcess {
        Self::start_with(backend, &[])
    }

    /// Start with extra flags for `svm-apiserver serve`.
    pub fn start_with(backend: Backend<'_>, extra: &[&str]) -> ServerProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            format!("--cert-dir={}", dir.path().join("certs").display()),
            format!("--write-kubeconfig={}", kubeconfig.display()),
            // Idle watches get a bookmark each second, so tests need not wait a minute.
            "--watch-bookmark-interval=1s".into(),
        ];
        match backend {
            Backend::Embedded => {
                args.push(format!("--data-dir={}", dir.path().join("data").display()))
            }
            Backend::Etcd(endpoint) => {
                args.push(format!("--etcd-servers={endpoint}"));
                args.push(format!("--etcd-prefix=/svm-test-{}", uuid::Uuid::new_v4()));
            }
            Backend::EtcdShared(endpoint, prefix) => {
                args.push(format!("--etcd-servers={endpoint}"));
                args.push(format!("--etcd-prefix={prefix}"));
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = ServerProcess {
            child: None,
            dir,
            url: String::new(),
            kubeconfig,
            args,
        };
        server.spawn();
        server
    }

    /// Runs the binary with these flags (as [`ServerProcess::start_with`] would) and waits up
    /// to `limit` for it to exit by itself: its exit status and its log. A server still running
    /// at the limit is killed, and `None` is its status.
    pub fn run_to_exit(
        backend: Backend<'_>,
        extra: &[&str],
        limit: Duration,
    ) -> (Option<std::process::ExitStatus>, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            format!("--cert-dir={}", dir.path().join("certs").display()),
            format!(
                "--write-kubeconfig={}",
                dir.path().join("kubeconfig").display()
            ),
        ];
        match backend {
            Backend::Embedded => {
                args.push(format!("--data-dir={}", dir.path().join("data").display()))
            }
            Backend::Etcd(endpoint) | Backend::EtcdShared(endpoint, _) => {
                args.push(format!("--etcd-servers={endpoint}"));
                args.push(format!("--etcd-prefix=/svm-test-{}", uuid::Uuid::new_v4()));
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).expect("log file");
        let mut child = Command::new(crate::svm_apiserver_binary())
            .args(&args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start svm-apiserver");
        // Not a wait for something to come true: a server still running at the limit is an
        // answer (`None`), not a failure.
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        keep_log("svm-apiserver", &log_path);
        (status, text)
    }

    fn spawn(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        let child = Command::new(crate::svm_apiserver_binary())
            .args(&self.args)
            .env("RUST_LOG", log_filter())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start svm-apiserver");
        self.child = Some(child);
        self.url = self.wait_for_kubeconfig();
        self.wait_ready();
    }

    /// Kill the process with SIGKILL (no graceful shutdown), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again with the same flags, the same store and the same port (after `kill`), as a
    /// restarted pod behind its Service.
    pub fn restart(&mut self) {
        self.kill();
        self.pin_port();
        self.spawn();
    }

    /// The port it serves on.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the server URL ends in its port")
    }

    /// `--secure-port=0` picked a free port at the first start: keep that one from now on.
    fn pin_port(&mut self) {
        let port = self.port();
        for arg in &mut self.args {
            if arg == "--secure-port=0" {
                *arg = format!("--secure-port={port}");
            }
        }
    }

    /// The `--etcd-prefix` it runs with, when on etcd.
    pub fn etcd_prefix(&self) -> Option<&str> {
        self.args
            .iter()
            .rev()
            .find_map(|arg| arg.strip_prefix("--etcd-prefix="))
    }

    /// The process id while it runs (benchmarks read its peak RSS from /proc).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        read_log(&self.log_path())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The dev CA the server generated, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("certs").join("ca.crt")).expect("dev CA")
    }

    /// The dev admin client identity (CN=svm-apiserver-admin, O=system:masters), PEM key + cert.
    pub fn admin_identity_pem(&self) -> Vec<u8> {
        let certs = self.dir.path().join("certs");
        let mut pem = std::fs::read(certs.join("admin.key")).expect("admin key");
        pem.extend(std::fs::read(certs.join("admin.crt")).expect("admin cert"));
        pem
    }

    /// A reqwest client trusting the server's dev CA and authenticating as the dev admin.
    pub fn http_client(&self) -> reqwest::Client {
        self.http_client_builder()
            .identity(reqwest::Identity::from_pem(&self.admin_identity_pem()).expect("identity"))
            .build()
            .expect("http client")
    }

    /// `/metrics`, read with `http` (a client of [`ServerProcess::http_client`], kept by the
    /// caller so that polling does not set up TLS each time).
    pub async fn scrape(&self, http: &reqwest::Client) -> String {
        http.get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// A reqwest client trusting the server's dev CA, with no client certificate (anonymous).
    pub fn anonymous_http_client(&self) -> reqwest::Client {
        self.http_client_builder().build().expect("http client")
    }

    /// A reqwest client builder as the dev admin, to configure further (protocol, pool).
    pub fn admin_http_client_builder(&self) -> reqwest::ClientBuilder {
        self.http_client_builder()
            .identity(reqwest::Identity::from_pem(&self.admin_identity_pem()).expect("identity"))
    }

    /// A reqwest client builder trusting the dev CA, without a client certificate.
    pub fn http_client_builder(&self) -> reqwest::ClientBuilder {
        let ca = reqwest::Certificate::from_pem(&self.ca_pem()).expect("CA pem");
        reqwest::Client::builder().add_root_certificate(ca)
    }

    fn wait_for_kubeconfig(&mut self) -> String {
        let log = self.log_path();
        let kubeconfig = self.kubeconfig.clone();
        eventually_every(
            Duration::from_secs(60),
            START_POLL,
            "svm-apiserver writing its kubeconfig",
            || {
                let url = std::fs::read_to_string(&kubeconfig).ok().and_then(|text| {
                    text.lines()
                        .find_map(|l| l.trim().strip_prefix("server: "))
                        .map(|s| s.trim().trim_matches('"').to_string())
                });
                if url.is_none() {
                    self.assert_running();
                }
                url
            },
            || format!("log:\n{}", read_log(&log)),
        )
    }

    fn wait_ready(&mut self) {
        let log = self.log_path();
        let ca = self.ca_pem();
        eventually_every(
            Duration::from_secs(30),
            START_POLL,
            "svm-apiserver answering /readyz with 200",
            || {
                if probe_ready(&self.url, &ca) {
                    return Some(());
                }
                self.assert_running();
                None
            },
            || format!("log:\n{}", read_log(&log)),
        );
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn assert_running(&mut self) {
        if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
            panic!(
                "svm-apiserver exited early ({status}); log:\n{}",
                self.log()
            );
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
        keep_log("svm-apiserver", &self.log_path());
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The servers' `RUST_LOG`: `info`, or `SVM_TEST_RUST_LOG` (e.g.
/// `info,svm_migrator=debug` to see why the migrator chose what it chose).
fn log_filter() -> String {
    std::env::var("SVM_TEST_RUST_LOG").unwrap_or_else(|_| "info".into())
}

/// With `SVM_TEST_LOG_DIR` set, a stopped process's log is kept there (its temp dir is
/// removed), for reading after a failed or slow run.
pub fn keep_log(what: &str, log: &Path) {
    let Some(dir) = std::env::var_os("SVM_TEST_LOG_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test").replace("::", ".");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::copy(log, dir.join(format!("{test}.{what}.{stamp}.log")));
}

/// One GET of `/readyz`, trusting the dev CA. Test support runs outside any async runtime, so
/// it drives its own small one.
pub fn probe_ready(url: &str, ca_pem: &[u8]) -> bool {
    // On its own thread: callers may be inside a tokio runtime, which cannot nest another.
    let (url, ca_pem) = (url.to_string(), ca_pem.to_vec());
    std::thread::spawn(move || probe_ready_blocking(&url, &ca_pem))
        .join()
        .unwrap_or(false)
}

fn probe_ready_blocking(url: &str, ca_pem: &[u8]) -> bool {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return false;
    };
    rt.block_on(async {
        let Ok(ca) = reqwest::Certificate::from_pem(ca_pem) else {
            return false;
        };
        let Ok(client) = reqwest::Client::builder().add_root_certificate(ca).build() else {
            return false;
        };
        matches!(client.get(format!("{url}/readyz")).send().await, Ok(r) if r.status().is_success())
    })
}

/// The value of a sample in Prometheus text (`name{labels} value`), summed over the lines
/// starting with `prefix`; 0 when there are none.
pub fn sample(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of a metric's samples whose labels include every `label="value"` given.
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, sample| sum + sample)
}
