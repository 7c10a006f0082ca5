//! A real control plane for a test: etcd and the real kube-apiserver from `KUBEBUILDER_ASSETS`
//! (the envtest layout: a directory holding `kube-apiserver`, `etcd` and `kubectl`), on free
//! 127.0.0.1 ports, with a PKI made for it, RBAC on, the aggregation layer on (a front-proxy CA
//! of its own and aggregator routing to endpoints), stopped and removed on drop.
//!
//! `make test` points `KUBEBUILDER_ASSETS` at `.dev/envtest`, unpacked from `../shared/envtest`.
//! Without it a real-cluster test fails, unless `SVM_REAL_CLUSTER=skip` says the run was
//! knowingly made without one: then [`assets`] prints a banner and the test returns.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use svm_devcerts::Ca;

use crate::etcd::{EtcdServer, free_port, system_etcd};
use crate::kubectl::Kubectl;
use crate::wait::eventually;

/// How long kube-apiserver gets to become ready (a hang guard; it takes ~10 s idle).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// A port found free can be taken by another process before kube-apiserver binds it: then
/// start again (on a fresh port for a first start, on the same one for a restart).
const START_ATTEMPTS: usize = 5;

/// The binaries of the envtest layout.
#[derive(Clone, Debug)]
pub struct Assets {
    pub kube_apiserver: PathBuf,
    /// The etcd kube-apiserver runs on (`make test`: Debian trixie's 3.5, `hack/etcd-for-kube.sh`;
    /// bookworm's 3.4.23 cannot serve watch-list).
    pub etcd: PathBuf,
    pub kubectl: PathBuf,
    /// The same build's kube-controller-manager (`hack/envtest.sh` unpacks it beside
    /// kube-apiserver), for tests that run Kubernetes' own controllers: checked when one is
    /// started (`support::controller_manager`), so a layout without it still runs the rest.
    pub kube_controller_manager: PathBuf,
}

impl Assets {
    /// The same binaries with the system's etcd (Debian bookworm's 3.4.23) under
    /// kube-apiserver: a cluster on which watch-list is refused.
    pub fn with_system_etcd(self) -> Assets {
        Assets {
            etcd: system_etcd(),
            ..self
        }
    }
}

/// The assets, or `None` when this run was knowingly made without them (`SVM_REAL_CLUSTER=skip`,
/// after a loud banner). Without them and without that, the test fails: a real-cluster suite
/// never passes silently.
pub fn assets(test: &str) -> Option<Assets> {
    match std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from) {
        Some(dir) => {
            let assets = Assets {
                kube_apiserver: dir.join("kube-apiserver"),
                etcd: dir.join("etcd"),
                kubectl: dir.join("kubectl"),
                kube_controller_manager: dir.join("kube-controller-manager"),
            };
            for binary in [&assets.kube_apiserver, &assets.etcd] {
                assert!(
                    binary.is_file(),
                    "KUBEBUILDER_ASSETS={} has no {}",
                    dir.display(),
                    binary.display()
                );
            }
            Some(assets)
        }
        None if std::env::var("SVM_REAL_CLUSTER").as_deref() == Ok("skip") => {
            eprintln!(
                "\n{bar}\nREAL-CLUSTER TEST NOT RUN: {test}\nKUBEBUILDER_ASSETS is not set \
                 (SVM_REAL_CLUSTER=skip). This run says nothing about a real kube-apiserver.\n{bar}\n",
                bar = "!".repeat(78)
            );
            None
        }
        None => panic!(
            "KUBEBUILDER_ASSETS is not set: the real-cluster suite needs a kube-apiserver binary \
             (run `make test`, which unpacks ../shared/envtest into .dev/envtest; or set \
             SVM_REAL_CLUSTER=skip to run knowingly without it)"
        ),
    }
}

/// The files of the control plane's PKI.
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub front_proxy_ca_cert: PathBuf,
    pub front_proxy_client_cert: PathBuf,
    pub front_proxy_client_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_public_key: PathBuf,
    /// Kept to issue more client certificates (users of the tests).
    ca: Ca,
    front_proxy_ca: Ca,
}

impl Pki {
    fn generate(dir: &Path) -> Pki {
        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).expect("write a PKI file");
            path
        };
        let ca = Ca::new("kubernetes-test-ca").expect("cluster CA");
        let serving = ca
            .issue_serving(
                "kube-apiserver",
                &["127.0.0.1".into(), "localhost".into(), "kubernetes".into()],
            )
            .expect("serving cert");
        let admin = ca
            .issue_client("kubernetes-admin", &["system:masters"])
            .expect("admin cert");
        let front_proxy_ca = Ca::new("front-proxy-test-ca").expect("front-proxy CA");
        let front_proxy = front_proxy_ca
            .issue_client("front-proxy-client", &[])
            .expect("front-proxy client cert");
        let service_account =
            rcgen::KeyPair::generate().expect("service-account signing key (ECDSA P-256)");
        Pki {
            ca_cert: write("ca.crt", &ca.cert_pem()),
            serving_cert: write("apiserver.crt", &serving.cert_pem),
            serving_key: write("apiserver.key", &serving.key_pem),
            admin_cert: write("admin.crt", &admin.cert_pem),
            admin_key: write("admin.key", &admin.key_pem),
            front_proxy_ca_cert: write("front-proxy-ca.crt", &front_proxy_ca.cert_pem()),
            front_proxy_client_cert: write("front-proxy-client.crt", &front_proxy.cert_pem),
            front_proxy_client_key: write("front-proxy-client.key", &front_proxy.key_pem),
            service_account_key: write("sa.key", &service_account.serialize_pem()),
            service_account_public_key: write("sa.pub", &service_account.public_key_pem()),
            ca,
            front_proxy_ca,
        }
    }

    /// A client certificate of the cluster CA: `(cert PEM, key PEM)`.
    pub fn client_identity(&self, user: &str, groups: &[&str]) -> (String, String) {
        let issued = self.ca.issue_client(user, groups).expect("client cert");
        (issued.cert_pem, issued.key_pem)
    }

    /// A client certificate of the front-proxy CA with this CN (as the aggregator holds).
    pub fn front_proxy_identity(&self, common_name: &str) -> (String, String) {
        let issued = self
            .front_proxy_ca
            .issue_client(common_name, &[])
            .expect("front-proxy client cert");
        (issued.cert_pem, issued.key_pem)
    }
}

/// etcd + kube-apiserver.
pub struct ControlPlane {
    pub etcd: EtcdServer,
    apiserver: Option<Child>,
    dir: tempfile::TempDir,
    pub pki: Pki,
    port: u16,
    assets: Assets,
    /// Flags beyond the base set, as of the last (re)start.
    extra_flags: Vec<String>,
    /// The admin kubeconfig (cluster CA, admin client certificate in system:masters).
    pub kubeconfig: PathBuf,
}

impl ControlPlane {
    /// Start etcd and kube-apiserver with the base flags plus `extra_flags`, and wait until
    /// kube-apiserver is ready.
    pub fn start(assets: &Assets, extra_flags: &[&str]) -> ControlPlane {
        let dir = tempfile::tempdir().expect("temp dir");
        let pki = Pki::generate(dir.path());
        let kubeconfig = dir.path().join("admin.kubeconfig");
        let mut plane = ControlPlane {
            etcd: EtcdServer::start_binary(&assets.etcd),
            apiserver: None,
            dir,
            pki,
            port: 0,
            assets: assets.clone(),
            extra_flags: extra_flags.iter().map(|s| s.to_string()).collect(),
            kubeconfig,
        };
        for _ in 0..START_ATTEMPTS {
            plane.port = free_port();
            plane.write_admin_kubeconfig();
            if plane.spawn_until_bound() {
                return plane;
            }
        }
        panic!("kube-apiserver found its port taken {START_ATTEMPTS} times in a row");
    }

    fn write_admin_kubeconfig(&self) {
        let yaml = kubeconfig_yaml(
            &self.url(),
            &self.pki.ca_cert,
            User::Cert(&self.pki.admin_cert, &self.pki.admin_key),
        );
        std::fs::write(&self.kubeconfig, yaml).expect("admin kubeconfig");
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The binaries it was started from.
    pub fn assets(&self) -> &Assets {
        &self.assets
    }

    /// kube-apiserver's process id while it runs.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.as_ref().map(Child::id)
    }

    /// kube-apiserver's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }

    /// kubectl as the cluster admin.
    pub fn kubectl(&self) -> Kubectl {
        Kubectl::new(&self.kubeconfig)
    }

    /// A kube client as the cluster admin.
    pub async fn client(&self) -> kube::Client {
        client_from(&self.kubeconfig).await
    }

    /// SIGKILL kube-apiserver, as a crash.
    pub fn kill_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stop kube-apiserver (SIGTERM, as an upgrade would) and start it
    /// again with the base flags plus `extra_flags`, on the same port and etcd.
    pub fn restart_apiserver(&mut self, extra_flags: &[&str]) {
        self.stop_apiserver();
        self.extra_flags = extra_flags.iter().map(|s| s.to_string()).collect();
        self.spawn_on_same_port();
    }

    /// Start kube-apiserver again after [`ControlPlane::kill_apiserver`], with the same flags.
    pub fn start_apiserver_again(&mut self) {
        self.spawn_on_same_port();
    }

    fn stop_apiserver(&mut self) {
        let Some(mut child) = self.apiserver.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        // It deletes its identity lease at once, then waits up to a minute for open watches
        // (ours among them) to end before it exits: that wait is of no interest here. Not a
        // wait for something to come true: at the limit it is killed, not a failure.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Clients already hold this port: if someone took it while kube-apiserver was down, wait
    /// for it to be released rather than move.
    fn spawn_on_same_port(&mut self) {
        for _ in 0..START_ATTEMPTS {
            if self.spawn_until_bound() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        panic!(
            "kube-apiserver found port {} taken {START_ATTEMPTS} times in a row",
            self.port
        );
    }

    /// Start kube-apiserver and wait until it is ready: false when it exited because its
    /// port was taken (the caller decides where to try again); any other exit panics.
    fn spawn_until_bound(&mut self) -> bool {
        let log_path = self.dir.path().join("kube-apiserver.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("kube-apiserver log");
        // Where this run's part of the log starts (it is appended to across restarts).
        let earlier_log = log.metadata().map_or(0, |m| m.len() as usize);
        let child = Command::new(&self.assets.kube_apiserver)
            .args(self.flags())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.assets.kube_apiserver.display()));
        self.apiserver = Some(child);
        match self.wait_ready() {
            Ok(()) => true,
            Err(status) => {
                let this_run = self.log().get(earlier_log..).unwrap_or_default().to_owned();
                assert!(
                    this_run.contains("address already in use"),
                    "kube-apiserver exited ({status}); its log:\n{}",
                    tail(&this_run, 60)
                );
                eprintln!(
                    "kube-apiserver: port {} was taken before it could bind it; trying again",
                    self.port
                );
                false
            }
        }
    }

    /// What any control plane needs (envtest's README), on loopback: a serving certificate,
    /// a client CA, a separate front-proxy CA for the aggregation layer, service-account keys,
    /// RBAC, and a loopback service range with aggregator routing, so that an aggregated
    /// server on 127.0.0.1 is reached through an EndpointSlice.
    fn flags(&self) -> Vec<String> {
        let p = &self.pki;
        let file = |path: &PathBuf| path.display().to_string();
        let mut flags = vec![
            format!("--etcd-servers={}", self.etcd.endpoint()),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", self.port),
            format!("--cert-dir={}", self.dir.path().join("kas-certs").display()),
            format!("--tls-cert-file={}", file(&p.serving_cert)),
            format!("--tls-private-key-file={}", file(&p.serving_key)),
            format!("--client-ca-file={}", file(&p.ca_cert)),
            format!(
                "--requestheader-client-ca-file={}",
                file(&p.front_proxy_ca_cert)
            ),
            "--requestheader-allowed-names=front-proxy-client".into(),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            format!(
                "--proxy-client-cert-file={}",
                file(&p.front_proxy_client_cert)
            ),
            format!(
                "--proxy-client-key-file={}",
                file(&p.front_proxy_client_key)
            ),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!(
                "--service-account-key-file={}",
                file(&p.service_account_public_key)
            ),
            format!(
                "--service-account-signing-key-file={}",
                file(&p.service_account_key)
            ),
            "--authorization-mode=Node,RBAC".into(),
            "--service-cluster-ip-range=127.96.0.0/16".into(),
            "--enable-aggregator-routing=true".into(),
            // The `kubernetes` Service's endpoints would be 127.0.0.1, which an Endpoints object
            // may not hold: don't reconcile them (nothing here uses that Service).
            "--endpoint-reconciler-type=none".into(),
            "--profiling=false".into(),
        ];
        flags.extend(self.extra_flags.iter().cloned());
        flags
    }

    /// Poll `/readyz` until it says ok; the exit status if kube-apiserver exits first.
    fn wait_ready(&mut self) -> Result<(), std::process::ExitStatus> {
        let kubectl = self.kubectl();
        let readyz = || kubectl.run(&["get", "--raw=/readyz", "--request-timeout=5s"]);
        let log = self.dir.path().join("kube-apiserver.log");
        eventually(
            READY_TIMEOUT,
            "kube-apiserver's /readyz saying ok",
            || {
                if let Some(Ok(Some(status))) = self.apiserver.as_mut().map(Child::try_wait) {
                    self.apiserver = None;
                    return Some(Err(status));
                }
                let out = readyz();
                (out.ok && out.stdout.trim() == "ok").then_some(Ok(()))
            },
            || {
                let out = readyz();
                format!(
                    "/readyz: {}{}\nits log:\n{}",
                    out.stdout,
                    out.stderr,
                    tail(&std::fs::read_to_string(&log).unwrap_or_default(), 60)
                )
            },
        )
    }

    /// A kubeconfig for a ServiceAccount, with a token from the TokenRequest API (as a pod's
    /// projected token).
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token =
            self.kubectl()
                .ok(&["create", "token", name, "-n", namespace, "--duration=24h"]);
        let path = self
            .dir
            .path()
            .join(format!("sa-{namespace}-{name}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig_yaml(&self.url(), &self.pki.ca_cert, User::Token(token.trim())),
        )
        .expect("write a ServiceAccount kubeconfig");
        path
    }

    /// A kubeconfig for a user with a client certificate of the cluster CA.
    pub fn user_kubeconfig(&self, user: &str, groups: &[&str]) -> PathBuf {
        let (cert, key) = self.pki.client_identity(user, groups);
        let cert_path = self.dir.path().join(format!("user-{user}.crt"));
        let key_path = self.dir.path().join(format!("user-{user}.key"));
        std::fs::write(&cert_path, cert).expect("user cert");
        std::fs::write(&key_path, key).expect("user key");
        let path = self.dir.path().join(format!("user-{user}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig_yaml(
                &self.url(),
                &self.pki.ca_cert,
                User::Cert(&cert_path, &key_path),
            ),
        )
        .expect("write a user kubeconfig");
        path
    }

    /// Every key under `prefix` in the control plane's etcd with its value, read in pages of
    /// 16 keys (one answer of them all would pass the client's 4 MiB message limit at 10 KiB
    /// objects; 16 of 100 KiB stay under it).
    pub async fn etcd_get_prefix(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        let mut client = etcd_client::Client::connect([self.etcd.endpoint()], None)
            .await
            .expect("connect to etcd");
        let end = prefix_end(prefix.as_bytes());
        let mut from = prefix.as_bytes().to_vec();
        let mut all = Vec::new();
        loop {
            let options = etcd_client::GetOptions::new()
                .with_range(end.clone())
                .with_limit(16);
            let answer = client
                .get(from.clone(), Some(options))
                .await
                .expect("etcd range read");
            for kv in answer.kvs() {
                all.push((
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.value().to_vec(),
                ));
            }
            match answer.kvs().last() {
                Some(last) if answer.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return all,
            }
        }
    }
}

/// The first key after every key starting with `prefix` (etcd's range end of a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.kill_apiserver();
        crate::server::keep_log(
            "kube-apiserver",
            &self.dir.path().join("kube-apiserver.log"),
        );
    }
}

enum User<'a> {
    Cert(&'a Path, &'a Path),
    Token(&'a str),
}

fn kubeconfig_yaml(server: &str, ca: &Path, user: User<'_>) -> String {
    let user = match user {
        User::Cert(cert, key) => format!(
            "client-certificate: {}\n    client-key: {}",
            cert.display(),
            key.display()
        ),
        User::Token(token) => format!("token: {token}"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    \
         certificate-authority: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    \
         user: test\ncurrent-context: test\nusers:\n- name: test\n  user:\n    {user}\n",
        ca.display()
    )
}

/// A kube client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .expect("load kubeconfig");
    kube::Client::try_from(config).expect("kube client")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
