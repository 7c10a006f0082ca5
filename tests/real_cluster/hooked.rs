//! svm-apiserver as the real-cluster suite runs it (same flags, port, certificates and store),
//! started again with a controller's test hooks in its environment (`SVM_TEST_VOLUME_HOOKS`,
//! `SVM_TEST_DATA_PLANE_HOOKS`: test builds only), so that a crash test can stop it right after
//! a chosen write and then SIGKILL it. One of these serves every crash test that uses hooks.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::real_cluster::RealCluster;
use crate::support::wait::{POLL, eventually, eventually_async_every};

/// The hooked svm-apiserver; SIGKILLed by [`Hooked::kill`] or on drop.
pub(crate) struct Hooked {
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Hooked {
    /// Starts it with `flags` (the test's own) and `variable=hooks`, and waits until it
    /// answers `/readyz`.
    pub(crate) fn start(
        cluster: &RealCluster,
        flags: &[&str],
        variable: &str,
        hooks: &str,
    ) -> Hooked {
        let svm = &cluster.svm;
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("server.log");
        let mut args = vec![
            "serve".to_string(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", svm.port()),
            format!("--cert-dir={}", svm.dir().join("certs").display()),
            format!(
                "--write-kubeconfig={}",
                dir.path().join("kubeconfig").display()
            ),
            "--watch-bookmark-interval=1s".into(),
            format!("--etcd-servers={}", cluster.plane.etcd.endpoint()),
            format!(
                "--etcd-prefix={}",
                svm.etcd_prefix().expect("svm-apiserver on etcd")
            ),
            format!("--kubeconfig={}", cluster.svm_kubeconfig.display()),
        ];
        args.extend(flags.iter().map(|f| f.to_string()));
        let child = Command::new(crate::support::svm_apiserver_binary())
            .args(&args)
            .env("RUST_LOG", "info")
            .env(variable, hooks)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start svm-apiserver");
        let hooked = Hooked {
            child: Some(child),
            log,
            _dir: dir,
        };
        let (url, ca) = (svm.url.clone(), svm.ca_pem());
        eventually(
            Duration::from_secs(60),
            "the hooked svm-apiserver answering /readyz",
            || crate::support::server::probe_ready(&url, &ca).then_some(()),
            || hooked.read_log(),
        );
        hooked
    }

    pub(crate) fn read_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Until a line of its log holds both `needle` (what names the object: a span's fields)
    /// and `text`; a log that grows is progress for the wait.
    pub(crate) async fn wait_for(&self, needle: &str, text: &str, limit: Duration) {
        eventually_async_every(
            limit,
            POLL,
            &format!("{needle}: the hooked svm-apiserver logging {text:?}"),
            async || {
                let log = self.read_log();
                if log.lines().any(|l| l.contains(needle) && l.contains(text)) {
                    Ok(())
                } else {
                    Err(format!("not yet, in {} lines of log", log.lines().count()))
                }
            },
            async || self.read_log(),
        )
        .await;
    }

    /// SIGKILL, its log kept with the suite's.
    pub(crate) fn kill(mut self) {
        self.stop();
        crate::support::server::keep_log("svm-apiserver-hooked", &self.log);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Hooked {
    fn drop(&mut self) {
        self.stop();
    }
}
