//! [`KubeDouble`]: start a double on a loopback port and drive it from a test.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::{AccessRule, TokenUser};
use crate::control::StoredObject;
use crate::engine::{Engine, EngineOptions};
use crate::faults::FaultRule;
use crate::metrics::{CountersSnapshot, ListRecord};
use crate::pki::{CertPair, Pki};
use crate::resources::GroupResource;
use crate::server;
use crate::status::StatusError;

/// Why a double could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("generating certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("bootstrapping the cluster state: {0}")]
    Bootstrap(#[from] StatusError),
}

/// How to start a double.
#[derive(Clone, Debug)]
pub struct Builder {
    port: u16,
    tls: bool,
    hostname: String,
    options: EngineOptions,
    compaction_interval: Option<Duration>,
    lease_renewal: Option<Duration>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            port: 0,
            tls: false,
            hostname: "kube-double".into(),
            options: EngineOptions::default(),
            compaction_interval: None,
            lease_renewal: None,
        }
    }
}

impl Builder {
    /// Listen on this port (default: any free port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Serve HTTPS with a fresh CA (see [`KubeDouble::ca_pem`]) instead of plain HTTP.
    pub fn tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// Hostname of the first apiserver instance (its identity lease name derives from it).
    pub fn hostname(mut self, hostname: &str) -> Self {
        self.hostname = hostname.into();
        self
    }

    /// Serve watch-list (`sendInitialEvents`) as on etcd >= 3.5.13 (default), or answer it
    /// with etcd 3.4's 500 ERROR event (recording 10a).
    pub fn watch_list(mut self, enabled: bool) -> Self {
        self.options.watch_list = enabled;
        self
    }

    /// Serve the StorageVersion API (default on).
    pub fn storage_version_api(mut self, enabled: bool) -> Self {
        self.options.storage_version_api = enabled;
        self
    }

    /// Compact periodically like kube-apiserver's `--etcd-compaction-interval`: each tick
    /// compacts at the revision seen one tick earlier, so a continue token expires after one
    /// to two intervals. Off by default (tokens then expire only on [`KubeDouble::compact`]).
    pub fn compaction_interval(mut self, interval: Duration) -> Self {
        self.compaction_interval = Some(interval);
        self
    }

    /// Renew every apiserver's identity lease at this interval (kube-apiserver's identity
    /// lease controller renews every 10 s): a MODIFIED event with a new `renewTime` and the
    /// same holderIdentity. Off by default, so tests that count writes see only their own.
    pub fn lease_renewal(mut self, interval: Duration) -> Self {
        self.lease_renewal = Some(interval);
        self
    }

    pub async fn start(self) -> Result<KubeDouble, StartError> {
        let pki = Pki::generate()?;
        let tls = if self.tls {
            Some(tokio_rustls::TlsAcceptor::from(
                pki.server_config().map_err(StartError::Tls)?,
            ))
        } else {
            None
        };
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|source| StartError::Bind {
                port: self.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            port: self.port,
            source,
        })?;
        let engine = Arc::new(Engine::new(self.options.clone(), pki));
        let _ = engine.address.set(addr.to_string());
        let first_apiserver = engine.bootstrap(&self.hostname)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let server = tokio::spawn(server::serve(engine.clone(), listener, tls, shutdown_rx));
        let compactor = self
            .compaction_interval
            .map(|interval| tokio::spawn(compact_periodically(engine.clone(), interval)));
        let renewer = self
            .lease_renewal
            .map(|interval| tokio::spawn(renew_periodically(engine.clone(), interval)));
        // Bootstrap writes are setup, not traffic a test wants to count.
        engine.metrics.reset();
        Ok(KubeDouble {
            engine,
            addr,
            tls: self.tls,
            first_apiserver,
            shutdown,
            server,
            compactor,
            renewer,
        })
    }
}

/// kube-apiserver's identity lease controller: each instance renews its lease.
async fn renew_periodically(engine: Arc<Engine>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        for id in engine.apiserver_ids() {
            // A lease deleted by a concurrent restart is simply skipped this round.
            let _ = engine.renew_identity_lease(&id);
        }
    }
}

/// kube-apiserver's compactor: compact at the revision seen one interval ago.
async fn compact_periodically(engine: Arc<Engine>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut previous = engine.store.revision();
    loop {
        ticker.tick().await;
        engine.store.compact(previous);
        previous = engine.store.revision();
    }
}

/// A running kube-apiserver double. Dropping it stops the server and closes every
/// connection.
pub struct KubeDouble {
    engine: Arc<Engine>,
    addr: SocketAddr,
    tls: bool,
    first_apiserver: String,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    compactor: Option<JoinHandle<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl Drop for KubeDouble {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.server.abort();
        if let Some(r) = &self.renewer {
            r.abort();
        }
        if let Some(c) = &self.compactor {
            c.abort();
        }
    }
}

fn gr(resource: &str) -> GroupResource {
    GroupResource::parse(resource)
}

impl KubeDouble {
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Starts a plain-HTTP double on a free port with default behaviour.
    pub async fn start() -> Result<Self, StartError> {
        Builder::default().start().await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` or `https://...`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The engine behind the server, for hooks not wrapped here.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// PEM of the CA that signs the serving certificate and client certificates.
    pub fn ca_pem(&self) -> &str {
        &self.engine.pki.cluster_ca_pem
    }

    /// The admin client certificate (CN=kubernetes-admin, O=system:masters).
    pub fn admin_client(&self) -> &CertPair {
        &self.engine.pki.admin_client
    }

    /// The front-proxy CA published as `requestheader-client-ca-file`.
    pub fn front_proxy_ca_pem(&self) -> &str {
        &self.engine.pki.front_proxy_ca_pem
    }

    /// The `front-proxy-client` certificate an aggregator presents.
    pub fn front_proxy_client(&self) -> &CertPair {
        &self.engine.pki.front_proxy_client
    }

    /// A kubeconfig for this double (`kube::Config::from_custom_kubeconfig` reads it).
    pub fn kubeconfig_yaml(&self) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let (ca, user) = if self.tls {
            (
                format!("    certificate-authority-data: {}\n", b64(self.ca_pem())),
                format!(
                    "  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
                    b64(&self.admin_client().cert_pem),
                    b64(&self.admin_client().key_pem)
                ),
            )
        } else {
            (String::new(), "  user: {}\n".to_string())
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-double\n  cluster:\n    server: {url}\n{ca}users:\n- name: admin\n{user}contexts:\n- name: kube-double\n  context:\n    cluster: kube-double\n    user: admin\ncurrent-context: kube-double\n",
            url = self.url(),
        )
    }

    // --- objects -------------------------------------------------------------------------

    /// Creates an object from a manifest (`resource` like `configmaps`,
    /// `widgets.example.test`).
    pub fn create(&self, resource: &str, manifest: Value) -> Result<Value, StatusError> {
        self.engine.create_manifest(&gr(resource), manifest)
    }

    pub fn get(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StatusError> {
        let def = self.engine.def(&gr(resource))?;
        self.engine.get(&def, namespace, name)
    }

    /// Deletes an object as a client's DELETE would (a CRD takes its resource and objects
    /// with it).
    pub fn delete(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), StatusError> {
        let def = self.engine.def(&gr(resource))?;
        self.engine
            .delete(
                &def,
                namespace,
                name,
                &Default::default(),
                &crate::engine::Writer::system(),
            )
            .map(|_| ())
    }

    /// Creates a CRD (served at once) and returns it.
    pub fn create_crd(&self, crd: Value) -> Result<Value, StatusError> {
        self.engine.create_manifest(
            &GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions"),
            crd,
        )
    }

    pub fn ensure_namespace(&self, namespace: &str) -> Result<(), StatusError> {
        self.engine.ensure_namespace(namespace)
    }

    /// Creates `count` objects `<prefix>-NNNNN` with `payload_bytes` of data each.
    pub fn preload(
        &self,
        resource: &str,
        namespace: Option<&str>,
        prefix: &str,
        count: usize,
        payload_bytes: usize,
    ) -> Result<(), StatusError> {
        self.engine
            .preload(&gr(resource), namespace, prefix, count, payload_bytes)
    }

    // --- storage versions, keys, read-back ---------------------------------------------------

    /// Moves a resource's storage version (discovery's hash follows).
    pub fn set_storage_version(&self, resource: &str, version: &str) -> Result<(), StatusError> {
        self.engine.set_storage_version(&gr(resource), version)
    }

    /// The version new writes of `resource` are encoded in.
    pub fn storage_version(&self, resource: &str) -> Option<String> {
        self.engine
            .catalog
            .get(&gr(resource))
            .map(|d| d.storage_version.clone())
    }

    /// The storageVersionHash discovery shows for `resource`.
    pub fn storage_version_hash(&self, resource: &str) -> Option<String> {
        self.engine
            .catalog
            .get(&gr(resource))
            .map(|d| d.storage_version_hash())
    }

    /// Rotates the encryption key new writes use (`None`: identity).
    pub fn set_encryption_key(&self, resource: &str, key: Option<&str>) -> Result<(), StatusError> {
        self.engine.set_encryption_key(&gr(resource), key)
    }

    /// How one object is stored, like `etcdctl get`.
    pub fn stored(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<StoredObject> {
        self.engine.stored(&gr(resource), namespace, name)
    }

    /// Object counts per (encoding, encryption key).
    pub fn stored_summary(&self, resource: &str) -> BTreeMap<(String, Option<String>), usize> {
        self.engine.stored_summary(&gr(resource))
    }

    /// The store's current revision.
    pub fn revision(&self) -> u64 {
        self.engine.store.revision()
    }

    /// Compacts at the current revision: continue tokens and watches from older revisions
    /// expire (410).
    pub fn compact(&self) -> u64 {
        self.engine.store.compact(self.engine.store.revision())
    }

    // --- apiserver instances ---------------------------------------------------------------

    /// The instance started with the double.
    pub fn first_apiserver(&self) -> &str {
        &self.first_apiserver
    }

    pub fn apiserver_ids(&self) -> Vec<String> {
        self.engine.apiserver_ids()
    }

    pub fn add_apiserver(&self, hostname: &str) -> Result<String, StatusError> {
        self.engine.add_apiserver(hostname)
    }

    pub fn restart_apiserver(&self, id: &str) -> Result<(), StatusError> {
        self.engine.restart_apiserver(id)
    }

    pub fn remove_apiserver(&self, id: &str) -> Result<(), StatusError> {
        self.engine.remove_apiserver(id)
    }

    /// Makes instance `id` encode `resource` in `version` (others keep theirs).
    pub fn set_apiserver_storage_version(
        &self,
        id: &str,
        resource: &str,
        version: &str,
    ) -> Result<(), StatusError> {
        self.engine
            .set_apiserver_encoding(id, &gr(resource), version)
    }

    /// Sends requests to instance `id` (discovery and writes follow its versions).
    pub fn serve_from(&self, id: &str) -> Result<(), StatusError> {
        self.engine.serve_from(id)
    }

    // --- authentication and authorization ---------------------------------------------------

    /// TokenReview answers `user` for `token`.
    pub fn add_token(&self, token: &str, user: TokenUser) {
        self.engine
            .auth
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .tokens
            .insert(token.into(), user);
    }

    /// Replaces the SubjectAccessReview rules (tried in order; system:masters always allowed).
    pub fn set_access_rules(&self, rules: Vec<AccessRule>) {
        self.engine
            .auth
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .rules = rules;
    }

    // --- faults -------------------------------------------------------------------------------

    /// Adds a fault rule; returns its id.
    pub fn add_fault(&self, rule: FaultRule) -> u64 {
        self.engine.faults.add(rule)
    }

    pub fn remove_fault(&self, id: u64) {
        self.engine.faults.remove(id);
    }

    pub fn clear_faults(&self) {
        self.engine.faults.clear();
    }

    /// How often rule `id` fired.
    pub fn fault_injections(&self, id: u64) -> u64 {
        self.engine.faults.injected(id)
    }

    // --- counters -----------------------------------------------------------------------------

    pub fn counters(&self) -> CountersSnapshot {
        self.engine.metrics.snapshot()
    }

    pub fn reset_counters(&self) {
        self.engine.metrics.reset();
    }

    /// Every LIST served since the last reset, in order.
    pub fn list_log(&self) -> Vec<ListRecord> {
        self.engine.metrics.lists()
    }

    /// The LISTs of one resource (`configmaps`, `widgets.example.test`) since the last reset,
    /// in order: what a migration of it read, without the server's other reads.
    pub fn list_log_of(&self, resource: &str) -> Vec<ListRecord> {
        let mut log = self.list_log();
        log.retain(|l| l.resource == resource);
        log
    }

    /// [`Self::list_log_of`] less the reads of one object from the start (`limit=1`, no
    /// continue token): what a migration read to do its work — preflight's sample and its pages
    /// — without the reads `--object-concurrency auto` times to see what others wait beside it
    /// (`crates/migrator/src/probe.rs`; the double has no `/metrics`, so nothing is
    /// known of others and the migrator measures).
    pub fn pages_of(&self, resource: &str) -> Vec<ListRecord> {
        let mut log = self.list_log_of(resource);
        log.retain(|l| !(l.limit == Some(1) && l.continue_token.is_none()));
        log
    }
}
