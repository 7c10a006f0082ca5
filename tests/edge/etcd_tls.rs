//! etcd with client-certificate authentication: the server works with the right certificates,
//! and with wrong ones it stops at start with a message that names the file to fix.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use svm_devcerts::Ca;

use crate::support::etcd::{EtcdServer, EtcdTls};
use crate::support::kubectl::Kubectl;
use crate::support::server::{Backend, ServerProcess};
use crate::support::wait::eventually_every;

/// The etcd PKI of a test, and a stranger's, written into a directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("dir");
        let etcd_ca = Ca::new("etcd-ca").expect("ca");
        let server = etcd_ca
            .issue_serving("etcd", &["127.0.0.1".into(), "localhost".into()])
            .expect("serving");
        let client = etcd_ca.issue_client("svm-apiserver", &[]).expect("client");
        let stranger_ca = Ca::new("stranger-ca").expect("ca");
        let stranger = stranger_ca
            .issue_client("svm-apiserver", &[])
            .expect("client");
        for (name, text) in [
            ("ca.crt", etcd_ca.cert_pem()),
            ("server.crt", server.cert_pem),
            ("server.key", server.key_pem),
            ("client.crt", client.cert_pem),
            ("client.key", client.key_pem),
            ("stranger-ca.crt", stranger_ca.cert_pem()),
            ("stranger.crt", stranger.cert_pem),
            ("stranger.key", stranger.key_pem),
        ] {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn etcd(&self) -> EtcdTls {
        EtcdTls {
            ca: self.path("ca.crt"),
            cert: self.path("server.crt"),
            key: self.path("server.key"),
        }
    }

    fn flags(&self, ca: &str, cert: Option<&str>, key: Option<&str>) -> Vec<String> {
        let mut flags = vec![format!("--etcd-cafile={}", self.path(ca).display())];
        if let Some(cert) = cert {
            flags.push(format!("--etcd-certfile={}", self.path(cert).display()));
        }
        if let Some(key) = key {
            flags.push(format!("--etcd-keyfile={}", self.path(key).display()));
        }
        flags
    }
}

/// Run `serve` expecting it to fail at start: its exit status and log.
fn fails_to_start(endpoint: &str, flags: &[String]) -> String {
    let dir = tempfile::tempdir().expect("dir");
    let child = Command::new(env!("CARGO_BIN_EXE_svm-apiserver"))
        .arg("serve")
        .arg("--secure-port=0")
        .arg(format!("--cert-dir={}", dir.path().join("certs").display()))
        .arg(format!(
            "--write-kubeconfig={}",
            dir.path().join("kubeconfig").display()
        ))
        .arg(format!("--etcd-servers={endpoint}"))
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start svm-apiserver");
    // Killed if the wait below fails (a server that did not stop is not left running).
    let mut child = KilledOnDrop(child);
    // A hang guard, not a speed check; polled as often as before (it stops within moments).
    let status = eventually_every(
        Duration::from_secs(120),
        Duration::from_millis(100),
        &format!("svm-apiserver stopping by itself with {flags:?}"),
        || child.0.try_wait().expect("wait"),
        || "it still runs; it is killed".to_string(),
    );
    let mut log = String::new();
    use std::io::Read;
    child
        .0
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut log)
        .expect("log");
    assert!(!status.success(), "started with {flags:?}:\n{log}");
    log
}

/// A child process killed when this is dropped (on a failed wait, too).
struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mentions(log: &str, fragments: &[&str]) {
    for fragment in fragments {
        assert!(
            log.contains(fragment),
            "the error lacks {fragment:?}:\n{log}"
        );
    }
}

fn file(pki: &Pki, name: &str) -> String {
    pki.path(name).display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_with_client_certificates_works_and_wrong_certificates_are_named_at_start() {
    let pki = Pki::new();
    let etcd = EtcdServer::start_tls(&pki.etcd());
    let endpoint = etcd.endpoint();
    assert!(endpoint.starts_with("https://"));

    // The right certificates: the server starts, stores and serves.
    let good = pki.flags("ca.crt", Some("client.crt"), Some("client.key"));
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    let server = ServerProcess::start_with(Backend::Etcd(&endpoint), &good);
    let created = server
        .http_client()
        .post(format!(
            "{}/apis/storagemigration.k8s.io/v1/storageversionmigrations",
            server.url
        ))
        .json(&json!({
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": "StorageVersionMigration",
            "metadata": {"name": "over-tls"},
            "spec": {"resource": {"group": "apps", "resource": "deployments"}}
        }))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let kubectl = Kubectl::new(&server.kubeconfig);
    let got = kubectl.run(&["get", "svm", "over-tls", "-o", "json"]);
    assert!(got.ok, "{}", got.stderr);
    let object: Value = serde_json::from_str(&got.stdout).expect("json");
    assert_eq!(object["metadata"]["name"], "over-tls");
    drop(server);

    // A CA that did not sign etcd's certificate.
    let log = fails_to_start(
        &endpoint,
        &pki.flags("stranger-ca.crt", Some("client.crt"), Some("client.key")),
    );
    mentions(
        &log,
        &[
            "not signed by the CA in --etcd-cafile",
            &file(&pki, "stranger-ca.crt"),
        ],
    );

    // A client certificate etcd does not trust.
    let log = fails_to_start(
        &endpoint,
        &pki.flags("ca.crt", Some("stranger.crt"), Some("stranger.key")),
    );
    mentions(
        &log,
        &[
            "refused the client certificate in --etcd-certfile",
            &file(&pki, "stranger.crt"),
        ],
    );

    // No client certificate for an etcd that requires one.
    let log = fails_to_start(&endpoint, &pki.flags("ca.crt", None, None));
    mentions(&log, &["requires a client certificate", "--etcd-certfile"]);

    // A key that is not the certificate's, a missing file, a plain http:// endpoint.
    let log = fails_to_start(
        &endpoint,
        &pki.flags("ca.crt", Some("client.crt"), Some("stranger.key")),
    );
    mentions(&log, &["does not belong", &file(&pki, "stranger.key")]);
    let log = fails_to_start(
        &endpoint,
        &pki.flags("no-such-ca.crt", Some("client.crt"), Some("client.key")),
    );
    mentions(&log, &["--etcd-cafile", &file(&pki, "no-such-ca.crt")]);
    let plain = endpoint.replace("https://", "http://");
    let log = fails_to_start(
        &plain,
        &pki.flags("ca.crt", Some("client.crt"), Some("client.key")),
    );
    mentions(&log, &["https://"]);
    // And TLS without any certificate flags.
    let log = fails_to_start(&endpoint, &[]);
    mentions(&log, &["--etcd-cafile"]);
    assert!(Path::new(&pki.path("ca.crt")).is_file());
}
