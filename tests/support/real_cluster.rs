//! svm-apiserver installed on a real control plane, as `deploy/` installs it on a cluster:
//! its namespace, ServiceAccount and RBAC from `deploy/base`, a kubeconfig holding that
//! ServiceAccount's token, the real binary started with it, a Service and an EndpointSlice
//! (`addressType: FQDN`, `127.0.0.1`: an IP slice may not hold a loopback address) that the
//! aggregator routes to, and the APIServices of `apiservice/` with the serving CA as caBundle.
//! Every request of a test goes through the aggregator, as a user's would.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;

use crate::control_plane::{Assets, ControlPlane, assets};
use crate::kubectl::Kubectl;
use crate::server::{Backend, ServerProcess};
use crate::wait::eventually;

pub const NAMESPACE: &str = "svm-system";
pub const SERVICE_ACCOUNT: &str = "svm-apiserver";
pub const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// How long the APIServices get to become Available (a hang guard).
const AVAILABLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Which APIServices svm-apiserver is registered with, as `deploy/` (owner mode: every
/// version of storagemigration.k8s.io and the project group) or `deploy/companion/` (the
/// project group only) installs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    Owner,
    Companion,
}

/// The project group's APIService.
pub const PROJECT_APISERVICE: &str = "v1alpha1.storage.svm-apiserver.io";

impl Registration {
    /// `(manifest, APIService name)` of each APIService it registers.
    fn apiservices(self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        if self == Registration::Owner {
            for version in VERSIONS {
                out.push((
                    format!("apiservice/{version}.yaml"),
                    format!("{version}.storagemigration.k8s.io"),
                ));
            }
        }
        out.push((
            "apiservice/project/v1alpha1.yaml".into(),
            PROJECT_APISERVICE.into(),
        ));
        out
    }
}

/// Fields drop in order: svm-apiserver stops before the control plane it talks to.
pub struct RealCluster {
    pub svm: ServerProcess,
    pub plane: ControlPlane,
    /// The ServiceAccount kubeconfig svm-apiserver runs with.
    pub svm_kubeconfig: PathBuf,
    pub registration: Registration,
}

impl RealCluster {
    /// A control plane with `kas_flags`, and svm-apiserver on it with `svm_flags` (its store in
    /// the control plane's etcd under a prefix of its own). `None` only when the run was
    /// knowingly made without a kube-apiserver (see [`assets`]).
    pub fn start(test: &str, kas_flags: &[&str], svm_flags: &[&str]) -> Option<RealCluster> {
        let assets = assets(test)?;
        Some(Self::start_with(&assets, kas_flags, svm_flags))
    }

    pub fn start_with(assets: &Assets, kas_flags: &[&str], svm_flags: &[&str]) -> RealCluster {
        Self::start_registered(assets, kas_flags, svm_flags, Registration::Owner)
    }

    /// As [`RealCluster::start`], registered as `deploy/companion/` registers it (the project
    /// group only), for a control plane that serves storagemigration.k8s.io itself.
    pub fn start_companion(
        test: &str,
        kas_flags: &[&str],
        svm_flags: &[&str],
    ) -> Option<RealCluster> {
        let assets = assets(test)?;
        Some(Self::start_registered(
            &assets,
            kas_flags,
            svm_flags,
            Registration::Companion,
        ))
    }

    pub fn start_registered(
        assets: &Assets,
        kas_flags: &[&str],
        svm_flags: &[&str],
        registration: Registration,
    ) -> RealCluster {
        Self::start_registered_after(assets, kas_flags, registration, |_| {
            svm_flags.iter().map(|s| s.to_string()).collect()
        })
    }

    /// As [`RealCluster::start_registered`], svm-apiserver's flags decided once kube-apiserver
    /// serves (from what it serves, say).
    pub fn start_registered_after(
        assets: &Assets,
        kas_flags: &[&str],
        registration: Registration,
        svm_flags: impl FnOnce(&ControlPlane) -> Vec<String>,
    ) -> RealCluster {
        let plane = ControlPlane::start(assets, kas_flags);
        install_rbac(&plane);
        let svm_kubeconfig = plane.service_account_kubeconfig(NAMESPACE, SERVICE_ACCOUNT);
        let mut flags = vec![format!("--kubeconfig={}", svm_kubeconfig.display())];
        flags.extend(svm_flags(&plane));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let etcd = plane.etcd.endpoint();
        let svm = ServerProcess::start_with(Backend::Etcd(&etcd), &flags);
        let cluster = RealCluster {
            plane,
            svm,
            svm_kubeconfig,
            registration,
        };
        cluster.register();
        cluster
    }

    /// kubectl as the cluster admin, through kube-apiserver (and so the aggregator).
    pub fn kubectl(&self) -> Kubectl {
        self.plane.kubectl()
    }

    /// Point the Service's endpoints at svm-apiserver's port and register its APIServices;
    /// wait until the aggregator reports every one Available.
    pub fn register(&self) {
        let port = self.svm.port();
        let kubectl = self.kubectl();
        kubectl.ok_stdin(&["apply", "-f", "-"], &service_and_endpoints(port));
        let ca = base64::engine::general_purpose::STANDARD.encode(self.svm.ca_pem());
        for (manifest, name) in self.registration.apiservices() {
            kubectl.ok(&["apply", "-f", &repo_file(&manifest)]);
            kubectl.ok(&[
                "patch",
                "apiservice",
                &name,
                "--type=merge",
                "-p",
                &format!(r#"{{"spec":{{"caBundle":"{ca}"}}}}"#),
            ]);
        }
        self.wait_available();
    }

    /// The documented move from `deploy/` to `deploy/companion/`: delete our APIServices of
    /// storagemigration.k8s.io (kubectl apply never deletes), keep the project group's.
    pub fn register_as_companion(&mut self) {
        let names: Vec<String> = VERSIONS
            .iter()
            .map(|v| format!("{v}.storagemigration.k8s.io"))
            .collect();
        let mut args = vec!["delete", "apiservice", "--ignore-not-found"];
        args.extend(names.iter().map(String::as_str));
        self.kubectl().ok(&args);
        self.registration = Registration::Companion;
        self.register();
    }

    /// Wait until the aggregator marks every APIService of ours Available.
    pub fn wait_available(&self) {
        let kubectl = self.kubectl();
        let wanted: Vec<String> = self
            .registration
            .apiservices()
            .into_iter()
            .map(|(_, name)| name)
            .collect();
        let availability = || {
            kubectl.run(&[
                "get",
                "apiservices",
                "-o",
                r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Available")].status}{"\n"}{end}"#,
            ])
        };
        eventually(
            AVAILABLE_TIMEOUT,
            &format!("APIServices {wanted:?} Available"),
            || {
                let out = availability();
                let available = wanted
                    .iter()
                    .filter(|name| out.stdout.lines().any(|l| *l == format!("{name}=True")))
                    .count();
                (out.ok && available == wanted.len()).then_some(())
            },
            || {
                let out = availability();
                format!(
                    "{}{}\n{}\nsvm-apiserver log:\n{}",
                    out.stdout,
                    out.stderr,
                    kubectl.run(&["get", "apiservices", "-o", "yaml"]).stdout,
                    self.svm.log()
                )
            },
        );
    }

    /// svm-apiserver's `/metrics`, asked directly as the aggregator would ask for a cluster
    /// admin (front-proxy certificate, user in headers).
    pub async fn metrics(&self) -> String {
        let answer = self
            .front_proxy_client("front-proxy-client")
            .get(format!("{}/metrics", self.svm.url))
            .header("X-Remote-User", "metrics-reader")
            .header("X-Remote-Group", "system:masters")
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(answer.status(), 200);
        answer.text().await.expect("metrics text")
    }

    /// A client straight to svm-apiserver holding a front-proxy CA certificate with this CN,
    /// as the aggregator holds one.
    pub fn front_proxy_client(&self, common_name: &str) -> reqwest::Client {
        let (cert, key) = self.plane.pki.front_proxy_identity(common_name);
        self.svm_client_builder()
            .identity(
                reqwest::Identity::from_pem(format!("{key}{cert}").as_bytes()).expect("identity"),
            )
            .build()
            .expect("client")
    }

    /// A client builder trusting svm-apiserver's serving CA.
    pub fn svm_client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder().add_root_certificate(
            reqwest::Certificate::from_pem(&self.svm.ca_pem()).expect("svm CA"),
        )
    }

    /// Restart svm-apiserver after a kill (same port, store and flags) and wait until the
    /// aggregator reaches it again.
    pub fn restart_svm(&mut self) {
        self.svm.restart();
        self.wait_available();
    }
}

/// `deploy/base`'s namespace, ServiceAccount and RBAC, applied as they are shipped: the suite
/// checks that they are enough on a real RBAC authorizer.
pub fn install_rbac(plane: &ControlPlane) {
    let kubectl = plane.kubectl();
    for file in [
        "namespace.yaml",
        "serviceaccount.yaml",
        "rbac-delegation.yaml",
        "rbac-migrator.yaml",
        "rbac-trigger.yaml",
        "rbac-volumes.yaml",
        "rbac-data-plane.yaml",
        "rbac-companion.yaml",
    ] {
        kubectl.ok(&["apply", "-f", &repo_file(&format!("deploy/base/{file}"))]);
    }
}

/// `deploy/base/flowcontrol.yaml` as shipped: the migrator's FlowSchema and priority level.
pub fn install_flowcontrol(plane: &ControlPlane) {
    plane
        .kubectl()
        .ok(&["apply", "-f", &repo_file("deploy/base/flowcontrol.yaml")]);
}

/// A Service without a selector (no controller runs here to fill endpoints) and its one
/// EndpointSlice, pointing at svm-apiserver on 127.0.0.1.
fn service_and_endpoints(port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: svm-apiserver, namespace: {NAMESPACE}}}
spec:
  ports: [{{name: https, port: 443, targetPort: {port}, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: svm-apiserver-loopback
  namespace: {NAMESPACE}
  labels: {{kubernetes.io/service-name: svm-apiserver}}
addressType: FQDN
endpoints: [{{addresses: ["127.0.0.1"], conditions: {{ready: true}}}}]
ports: [{{name: https, port: {port}, protocol: TCP}}]
"#
    )
}

fn repo_file(path: &str) -> String {
    crate::repo_root().join(path).display().to_string()
}
