//! The real kube-controller-manager beside a [`ControlPlane`]: the same build as kube-apiserver
//! (`kube-controller-manager` in `KUBEBUILDER_ASSETS`, unpacked by `hack/envtest.sh` from
//! `../shared/envtest`), for tests that need Kubernetes' own controllers instead of playing them.
//!
//! What it does: runs the controllers a test names (`--controllers`, nothing else: the rest of
//! kube-controller-manager's defaults are left alone — in particular `--kube-api-content-type`,
//! so its clients speak protobuf as on a real cluster, and `--kube-api-qps`/`--kube-api-burst`),
//! with a kubeconfig of its own (a client certificate of the cluster CA, user
//! `system:kube-controller-manager` in `system:masters`, `--use-service-account-credentials=false`),
//! `--leader-elect=false`, the cluster's service-account signing key and root CA (the
//! service-account token controller needs them), HTTPS on a free 127.0.0.1 port whose
//! `/healthz` is waited for, and `--v=2` so that a controller's failed sync and its retry are in
//! the log. The log is kept like kube-apiserver's ([`keep_log`] with `SVM_TEST_LOG_DIR`); the
//! process is SIGKILLed on drop.
//!
//! What it does not do: there is no kubelet, no scheduler and no cloud provider, so nothing runs
//! pods and nothing that needs a node makes progress (the PVC expander has no volume plugin to
//! resize with, the volume resizer of a CSI driver is absent): tests that need those still play
//! them. It does not sign CSRs (no `--cluster-signing-*`). The build carries one downstream
//! addition (`service-ca-certificate-publisher-controller`, only with `--controllers=*`): name
//! the controllers needed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::control_plane::ControlPlane;
use crate::etcd::free_port;
use crate::server::keep_log;
use crate::wait::eventually;

/// How long kube-controller-manager gets to serve `/healthz` (a hang guard; it takes ~2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// A port found free can be taken by another process before it binds: then start again.
const START_ATTEMPTS: usize = 5;

/// The controllers the storage-version-migrator-controller needs: itself and the garbage
/// collector, whose metadata informers it reads the objects to migrate from.
pub const STORAGE_VERSION_MIGRATOR: [&str; 2] = [
    "storage-version-migrator-controller",
    "garbage-collector-controller",
];

/// The feature gate the storage-version-migrator-controller needs, on kube-apiserver and on
/// kube-controller-manager alike.
pub const STORAGE_VERSION_MIGRATOR_GATE: &str = "--feature-gates=StorageVersionMigrator=true";

/// kube-controller-manager, running until dropped.
pub struct ControllerManager {
    child: Option<Child>,
    dir: tempfile::TempDir,
    binary: PathBuf,
    port: u16,
    /// Every flag it runs with.
    flags: Vec<String>,
    /// Its kubeconfig (cluster CA, client certificate in system:masters).
    pub kubeconfig: PathBuf,
}

impl ControllerManager {
    /// Start kube-controller-manager against `plane` with `--controllers=<controllers>` and
    /// `extra_flags` (feature gates, for instance), and wait until it serves `/healthz`.
    pub fn start(
        plane: &ControlPlane,
        controllers: &[&str],
        extra_flags: &[&str],
    ) -> ControllerManager {
        let binary = plane.assets().kube_controller_manager.clone();
        assert!(
            binary.is_file(),
            "no kube-controller-manager at {}: KUBEBUILDER_ASSETS must hold it beside \
             kube-apiserver (`hack/envtest.sh` unpacks ../shared/envtest/kube-controller-manager.xz \
             into .dev/envtest)",
            binary.display()
        );
        assert!(!controllers.is_empty(), "name the controllers to run");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig =
            plane.user_kubeconfig("system:kube-controller-manager", &["system:masters"]);
        let p = &plane.pki;
        let mut flags = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--controllers={}", controllers.join(",")),
            "--leader-elect=false".into(),
            "--use-service-account-credentials=false".into(),
            format!(
                "--service-account-private-key-file={}",
                p.service_account_key.display()
            ),
            format!("--root-ca-file={}", p.ca_cert.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--cert-dir={}", dir.path().join("certs").display()),
            "--v=2".into(),
        ];
        flags.extend(extra_flags.iter().map(|s| s.to_string()));
        let mut kcm = ControllerManager {
            child: None,
            dir,
            binary,
            port: 0,
            flags,
            kubeconfig,
        };
        for _ in 0..START_ATTEMPTS {
            kcm.port = free_port();
            if kcm.spawn_until_bound() {
                return kcm;
            }
        }
        panic!("kube-controller-manager found its port taken {START_ATTEMPTS} times in a row");
    }

    /// Every flag it runs with (`--secure-port` aside).
    pub fn flags(&self) -> &[String] {
        &self.flags
    }

    /// `https://127.0.0.1:<port>`, its secure port (`/healthz`, `/metrics`).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("kube-controller-manager.log")
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The error lines of its log (klog's `E<date>` lines: failed syncs, refused requests).
    pub fn errors(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|line| {
                line.starts_with('E') && line[1..].starts_with(|c: char| c.is_ascii_digit())
            })
            .map(str::to_string)
            .collect()
    }

    /// SIGKILL it (as a crash; also what drop does).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it and wait for `/healthz`: false when it exited because its port was taken;
    /// any other exit panics with its log.
    fn spawn_until_bound(&mut self) -> bool {
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("kube-controller-manager log");
        let earlier_log = log.metadata().map_or(0, |m| m.len() as usize);
        let child = Command::new(&self.binary)
            .args(&self.flags)
            .arg(format!("--secure-port={}", self.port))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.binary.display()));
        self.child = Some(child);
        let url = self.url();
        eventually(
            READY_TIMEOUT,
            "kube-controller-manager serving /healthz",
            || {
                if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                    self.child = None;
                    let this_run = self.log().get(earlier_log..).unwrap_or_default().to_owned();
                    assert!(
                        this_run.contains("address already in use"),
                        "kube-controller-manager exited ({status}); its log:\n{}",
                        tail(&this_run, 60)
                    );
                    eprintln!(
                        "kube-controller-manager: port {} was taken before it could bind it; \
                         trying again",
                        self.port
                    );
                    return Some(false);
                }
                healthz_ok(&url).then_some(true)
            },
            || {
                format!(
                    "its log:\n{}",
                    tail(&std::fs::read_to_string(&log_path).unwrap_or_default(), 60)
                )
            },
        )
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        self.kill();
        keep_log("kube-controller-manager", &self.log_path());
    }
}

/// One GET of `/healthz` on its own serving certificate (self-signed in `--cert-dir`, so not
/// verified: loopback, readiness only). On a thread of its own, as callers may be inside a
/// tokio runtime.
fn healthz_ok(url: &str) -> bool {
    let url = format!("{url}/healthz");
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return false;
        };
        rt.block_on(async {
            let Ok(client) = reqwest::Client::builder()
                .danger_accept_invalid_certs(true)
                .timeout(Duration::from_secs(5))
                .build()
            else {
                return false;
            };
            match client.get(&url).send().await {
                Ok(answer) if answer.status().is_success() => {
                    answer.text().await.is_ok_and(|body| body.trim() == "ok")
                }
                _ => false,
            }
        })
    })
    .join()
    .unwrap_or(false)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
