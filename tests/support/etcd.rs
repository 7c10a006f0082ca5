//! A real etcd for a test: `/usr/bin/etcd` (or `etcd` on PATH), or a binary the caller names
//! (the real-cluster suite's, from `KUBEBUILDER_ASSETS`), on free 127.0.0.1 ports with a
//! temporary data directory, stopped and removed on drop. One member ([`EtcdServer`]), or a
//! cluster of three ([`EtcdCluster`]: client and peer URLs all on loopback), as production runs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd gets to answer its health endpoint (a hang guard, not a speed check).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Fresh ports can be taken by someone else between our probe and etcd's bind: try again then.
const START_ATTEMPTS: usize = 5;

pub struct EtcdServer {
    binary: PathBuf,
    child: Option<Child>,
    dir: tempfile::TempDir,
    ports: Ports,
    tls: Option<EtcdTls>,
    /// Its name and the cluster it belongs to (itself alone, or an [`EtcdCluster`]).
    membership: Membership,
}

/// Serve clients over TLS with `--client-cert-auth`: the serving certificate and key, and the
/// CA whose client certificates are admitted.
#[derive(Clone)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl EtcdServer {
    /// Start etcd and wait until it answers. Panics (failing the test) when there is no etcd
    /// binary or it does not come up.
    pub fn start() -> EtcdServer {
        Self::start_with(system_etcd(), None)
    }

    /// etcd serving its clients over TLS and admitting only client certificates of `tls.ca`.
    pub fn start_tls(tls: &EtcdTls) -> EtcdServer {
        Self::start_with(system_etcd(), Some(tls))
    }

    /// This etcd binary rather than the system's (kube-apiserver wants a newer one).
    pub fn start_binary(binary: &Path) -> EtcdServer {
        assert!(binary.is_file(), "no etcd binary at {}", binary.display());
        Self::start_with(binary.to_path_buf(), None)
    }

    /// `etcd --version`'s first line, e.g. `etcd Version: 3.5.16`.
    pub fn version(&self) -> String {
        let output = Command::new(&self.binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{} --version: {e}", self.binary.display()));
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    fn start_with(binary: PathBuf, tls: Option<&EtcdTls>) -> EtcdServer {
        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            let ports = Ports::free();
            let membership = Membership {
                name: "test".into(),
                initial_cluster: format!("test={}", ports.peer_url()),
                token: "etcd-cluster".into(),
            };
            let mut server = EtcdServer::spawned(&binary, ports, tls, membership);
            if server.wait_ready() {
                return server;
            }
            last_log = server.log();
        }
        panic!("etcd did not start after {START_ATTEMPTS} attempts; its last log:\n{last_log}");
    }

    /// A process started on `ports` with a fresh data directory (not yet known to be ready).
    fn spawned(
        binary: &Path,
        ports: Ports,
        tls: Option<&EtcdTls>,
        membership: Membership,
    ) -> EtcdServer {
        let dir = tempfile::tempdir().expect("temp dir for etcd");
        EtcdServer {
            child: Some(spawn(binary, &dir, &ports, tls, &membership)),
            binary: binary.to_path_buf(),
            dir,
            ports,
            tls: tls.cloned(),
            membership,
        }
    }

    /// The client URL, `http://127.0.0.1:<port>` (`https://` with TLS).
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.ports.client)
    }

    /// The port its clients connect to.
    pub fn client_port(&self) -> u16 {
        self.ports.client
    }

    /// Its member name (`test` alone; `m0`, `m1`, `m2` in an [`EtcdCluster`]).
    pub fn name(&self) -> &str {
        &self.membership.name
    }

    /// Whether its process runs (it was not killed, or was restarted since).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Start etcd again on the same ports and data (after `kill`), as a restarted member.
    pub fn restart(&mut self) {
        self.kill();
        self.child = Some(spawn(
            &self.binary,
            &self.dir,
            &self.ports,
            self.tls.as_ref(),
            &self.membership,
        ));
        assert!(
            self.wait_ready(),
            "etcd did not come back; its log:\n{}",
            self.log()
        );
    }

    /// Stop etcd now (SIGKILL, as a crash), e.g. to test what clients do without it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// etcd's own log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Poll `/health` until etcd reports healthy; false when it exits or never gets there.
    ///
    /// Its own loop, not [`crate::wait::eventually`]: reaching the limit is not a failure here
    /// but an answer (false, as an exit is), on which the starts ([`EtcdServer::start`] and the
    /// others) try again on fresh ports and [`EtcdServer::restart`] fails with the log;
    /// `eventually` would panic at the limit instead, and take away those attempts.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            let running = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
            let exited = !running;
            if exited {
                self.kill();
                return false;
            }
            if healthy(self.ports.metrics) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three etcd members on loopback (client, peer and metrics ports all free 127.0.0.1 ports),
/// one cluster, as production runs etcd: a client is given every member's URL
/// (`--etcd-servers=<a>,<b>,<c>`), and the cluster keeps serving while one member is down.
/// Members are killed and restarted one by one ([`EtcdCluster::kill`],
/// [`EtcdCluster::restart`]); dropped, all stop and their data go.
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

/// How many members [`EtcdCluster`] runs.
pub const MEMBERS: usize = 3;

impl EtcdCluster {
    /// Three members of the system's etcd.
    pub fn start() -> EtcdCluster {
        Self::start_with(&system_etcd())
    }

    /// Three members of this etcd binary (the real-cluster suite's, from `KUBEBUILDER_ASSETS`).
    pub fn start_binary(binary: &Path) -> EtcdCluster {
        assert!(binary.is_file(), "no etcd binary at {}", binary.display());
        Self::start_with(binary)
    }

    fn start_with(binary: &Path) -> EtcdCluster {
        let mut last_logs = String::new();
        for _ in 0..START_ATTEMPTS {
            let ports: Vec<Ports> = (0..MEMBERS).map(|_| Ports::free()).collect();
            let initial_cluster = ports
                .iter()
                .enumerate()
                .map(|(i, p)| format!("m{i}={}", p.peer_url()))
                .collect::<Vec<_>>()
                .join(",");
            let token = format!("svm-test-{}", uuid::Uuid::new_v4());
            // All three start before any is waited for: a member is healthy only once the
            // cluster has elected a leader, which takes a quorum.
            let mut members: Vec<EtcdServer> = ports
                .into_iter()
                .enumerate()
                .map(|(i, ports)| {
                    let membership = Membership {
                        name: format!("m{i}"),
                        initial_cluster: initial_cluster.clone(),
                        token: token.clone(),
                    };
                    EtcdServer::spawned(binary, ports, None, membership)
                })
                .collect();
            let ready = members.iter_mut().all(|member| member.wait_ready());
            if ready {
                return EtcdCluster { members };
            }
            last_logs = members
                .iter()
                .map(|m| format!("--- {} ---\n{}", m.name(), m.log()))
                .collect::<Vec<_>>()
                .join("\n");
        }
        panic!(
            "a {MEMBERS}-member etcd did not start after {START_ATTEMPTS} attempts; the last \
             logs:\n{last_logs}"
        );
    }

    /// Every member's client URL, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::endpoint).collect()
    }

    /// The members' client URLs as one `--etcd-servers` value (comma-separated).
    pub fn servers_flag(&self) -> String {
        self.endpoints().join(",")
    }

    /// The members, in order (`m0`, `m1`, `m2`).
    pub fn members(&self) -> &[EtcdServer] {
        &self.members
    }

    /// `etcd --version`'s first line.
    pub fn version(&self) -> String {
        self.members[0].version()
    }

    /// The member that is the raft leader now (by each running member's
    /// `etcd_server_is_leader`), if one says so.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            m.is_running() && metric(m.ports.metrics, "etcd_server_is_leader") == Some(1.0)
        })
    }

    /// Waits (a hang guard of a minute) until a member says it leads: its index.
    pub fn wait_leader(&self) -> usize {
        crate::wait::eventually_every(
            Duration::from_secs(60),
            Duration::from_millis(50),
            "an etcd member leading",
            || self.leader(),
            || self.logs(),
        )
    }

    /// The members that process `pid` holds an established TCP connection to (its etcd
    /// client's), read from `/proc`.
    pub fn connected(&self, pid: u32) -> Vec<usize> {
        let ports = connected_ports(pid);
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| ports.contains(&m.ports.client))
            .map(|(i, _)| i)
            .collect()
    }

    /// SIGKILL member `index`, as a crash; the others go on.
    pub fn kill(&mut self, index: usize) {
        self.members[index].kill();
    }

    /// Start member `index` again on its ports and data (after [`EtcdCluster::kill`]); waits
    /// until it is healthy (it has rejoined the cluster).
    pub fn restart(&mut self, index: usize) {
        self.members[index].restart();
    }

    /// Every member's log, for a failure message.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let log = m.log();
                let lines: Vec<&str> = log.lines().collect();
                format!(
                    "--- etcd {} ---\n{}",
                    m.name(),
                    lines[lines.len().saturating_sub(30)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The remote ports of the established IPv4 TCP connections process `pid` holds to 127.0.0.1
/// (from `/proc/<pid>/fd` and `/proc/<pid>/net/tcp`); empty when it has none or is gone.
pub fn connected_ports(pid: u32) -> Vec<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: Vec<String> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            target
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .map(str::to_string)
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let mut ports: Vec<u16> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (remote, state, inode) = (fields.get(2)?, fields.get(3)?, fields.get(9)?);
            let (address, port) = remote.split_once(':')?;
            // 01: ESTABLISHED; 0100007F: 127.0.0.1 in the kernel's byte order.
            (*state == "01" && address == "0100007F" && inodes.iter().any(|i| i == inode))
                .then(|| u16::from_str_radix(port, 16).ok())
                .flatten()
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Whether kube-apiserver serves watch-list on an etcd whose `--version` said `version`
/// ([`EtcdServer::version`]): its RequestWatchProgress check (k8s.io/apiserver's feature
/// support checker) wants ≥ 3.4.31 in 3.4, ≥ 3.5.13 in 3.5.
pub fn serves_watch_list(version: &str) -> bool {
    let numbers: Vec<u32> = version
        .trim_start_matches("etcd Version: ")
        .split('.')
        .map_while(|part| part.parse().ok())
        .collect();
    match numbers[..] {
        [3, 4, patch, ..] => patch >= 31,
        [3, 5, patch, ..] => patch >= 13,
        [3, minor, ..] => minor > 5,
        [major, ..] => major > 3,
        _ => panic!("etcd --version said {version:?}"),
    }
}

/// The system's etcd (Debian bookworm's `etcd-server`, 3.4.23, for `make test`).
pub fn system_etcd() -> PathBuf {
    find_etcd().unwrap_or_else(|| {
        panic!(
            "no etcd binary found (looked for /usr/bin/etcd and `etcd` on PATH); \
             run `make test`, which installs it"
        )
    })
}

fn find_etcd() -> Option<PathBuf> {
    let system = PathBuf::from("/usr/bin/etcd");
    if system.is_file() {
        return Some(system);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    })
}

/// A loopback port free now (someone may take it before it is bound: callers retry).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

#[derive(Clone, Copy, Debug)]
struct Ports {
    client: u16,
    peer: u16,
    /// Health and metrics are read here over plain HTTP (the client port may speak TLS only).
    metrics: u16,
}

impl Ports {
    fn free() -> Ports {
        Ports {
            client: free_port(),
            peer: free_port(),
            metrics: free_port(),
        }
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer)
    }
}

/// A member's name, and the cluster it was started into (`--initial-cluster`, its token).
#[derive(Clone, Debug)]
struct Membership {
    name: String,
    initial_cluster: String,
    token: String,
}

fn spawn(
    binary: &Path,
    dir: &tempfile::TempDir,
    ports: &Ports,
    tls: Option<&EtcdTls>,
    membership: &Membership,
) -> Child {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let client = format!("{scheme}://127.0.0.1:{}", ports.client);
    let peer = ports.peer_url();
    // Appended to, so a restarted member's log follows the first one's.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("etcd.log"))
        .expect("etcd log file");
    let mut command = Command::new(binary);
    if let Some(tls) = tls {
        command
            .arg("--client-cert-auth=true")
            .arg(format!("--trusted-ca-file={}", tls.ca.display()))
            .arg(format!("--cert-file={}", tls.cert.display()))
            .arg(format!("--key-file={}", tls.key.display()));
    }
    command
        .arg(format!(
            "--listen-metrics-urls=http://127.0.0.1:{}",
            ports.metrics
        ))
        .arg(format!("--name={}", membership.name))
        .arg(format!("--data-dir={}", dir.path().join("data").display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster={}", membership.initial_cluster))
        .arg(format!("--initial-cluster-token={}", membership.token))
        // Ignored once the data directory exists: a restarted member rejoins its cluster.
        .arg("--initial-cluster-state=new")
        // 8 GiB (etcd's largest recommended) instead of 2: `make bench-real` at 10^6 objects
        // holds more than 2 GiB between kube-apiserver's compactions while it rewrites them.
        .arg("--quota-backend-bytes=8589934592")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()))
}

/// `GET <path>` on a member's metrics port in HTTP/1.0 (so the body is never chunked): the
/// whole response, or `None` when nothing answers.
fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    Some(response)
}

/// The value of an unlabelled metric on a member's `/metrics`.
fn metric(port: u16, name: &str) -> Option<f64> {
    let response = get(port, "/metrics")?;
    response.lines().find_map(|line| {
        let (metric, value) = line.split_once(' ')?;
        (metric == name)
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// `GET /health` on the metrics port answers `{"health":"true"}` once etcd serves requests.
fn healthy(port: u16) -> bool {
    get(port, "/health").is_some_and(|response| {
        response
            .lines()
            .next()
            .is_some_and(|status| status.contains(" 200 "))
            && response.contains("\"health\":\"true\"")
    })
}
