//! A real etcd for a test: `/usr/bin/etcd` (or `etcd` on PATH), or a binary the caller names
//! (the real-cluster suite's, from `KUBEBUILDER_ASSETS`), on free 127.0.0.1 ports with a
//! temporary data directory, stopped and removed on drop.

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
    client_port: u16,
    peer_port: u16,
    /// Health is read here over plain HTTP (the client port may speak TLS only).
    metrics_port: u16,
    tls: Option<EtcdTls>,
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
            let dir = tempfile::tempdir().expect("temp dir for etcd");
            let client_port = free_port();
            let peer_port = free_port();
            let metrics_port = free_port();
            let ports = Ports {
                client: client_port,
                peer: peer_port,
                metrics: metrics_port,
            };
            let mut server = EtcdServer {
                child: Some(spawn(&binary, &dir, ports, tls)),
                binary: binary.clone(),
                dir,
                client_port,
                peer_port,
                metrics_port,
                tls: tls.cloned(),
            };
            if server.wait_ready() {
                return server;
            }
            last_log = server.log();
        }
        panic!("etcd did not start after {START_ATTEMPTS} attempts; its last log:\n{last_log}");
    }

    /// The client URL, `http://127.0.0.1:<port>` (`https://` with TLS).
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// Start etcd again on the same ports and data (after `kill`), as a restarted member.
    pub fn restart(&mut self) {
        self.kill();
        let ports = Ports {
            client: self.client_port,
            peer: self.peer_port,
            metrics: self.metrics_port,
        };
        self.child = Some(spawn(&self.binary, &self.dir, ports, self.tls.as_ref()));
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
            if healthy(self.metrics_port) {
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

struct Ports {
    client: u16,
    peer: u16,
    metrics: u16,
}

fn spawn(binary: &Path, dir: &tempfile::TempDir, ports: Ports, tls: Option<&EtcdTls>) -> Child {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let client = format!("{scheme}://127.0.0.1:{}", ports.client);
    let peer = format!("http://127.0.0.1:{}", ports.peer);
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
        .arg("--name=test")
        .arg(format!("--data-dir={}", dir.path().join("data").display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=test={peer}"))
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

/// `GET /health` on the metrics port answers `{"health":"true"}` once etcd serves requests.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200") && response.contains("\"health\":\"true\"")
}
