//! A trial's processes: a real etcd — one member, or three as production runs it, the
//! replicas given every member's URL — the kube-apiserver test double (HTTPS on loopback, with
//! its fault injection), and two replicas of the real `svm-apiserver` binary sharing one etcd
//! prefix, with trigger and migrator on and fast leader-election timings; optionally each
//! replica behind a [`Gate`] of its own in front of etcd.

use std::time::Duration;

use kube_double::{KubeDouble, resources::storage_version_hash};
use serde_json::Value;
use svm_storage::Storage;
use svm_storage::etcd::{EtcdOptions, EtcdStorage};

use crate::gate::Gate;
use crate::support::etcd::{EtcdCluster, EtcdServer};
use crate::support::server::{Backend, ServerProcess};

/// The migrated resources and how many objects each holds (10^4 in all).
pub(crate) const RESOURCES: [(&str, usize); 2] =
    [("configmaps", 6_000), ("widgets.example.test", 4_000)];
/// The lease a paused leader is held past.
pub(crate) const LEASE: Duration = Duration::from_secs(3);

/// The trial's etcd.
pub(crate) enum Etcd {
    One(Box<EtcdServer>),
    Three(EtcdCluster),
}

impl Etcd {
    /// Every member's client URL.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        match self {
            Etcd::One(server) => vec![server.endpoint()],
            Etcd::Three(cluster) => cluster.endpoints(),
        }
    }
}

/// How a trial's etcd and replicas are laid out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// etcd members: 1 or 3.
    pub members: usize,
    /// Each replica reaches etcd through a [`Gate`] of its own (one member only).
    pub gates: bool,
}

pub(crate) struct Cluster {
    pub replicas: Vec<ServerProcess>,
    /// `gates[i]` stands between replica `i` and etcd (when the layout asks for gates).
    pub gates: Vec<Gate>,
    pub etcd: Etcd,
    pub double: KubeDouble,
    pub prefix: String,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// etcd, the double with [`RESOURCES`] stored in v1, and two replicas on it.
    pub(crate) async fn start(qps: u32, layout: Layout) -> Cluster {
        let etcd = match layout.members {
            1 => Etcd::One(Box::new(EtcdServer::start())),
            3 => Etcd::Three(tokio::task::block_in_place(EtcdCluster::start)),
            n => panic!("{n} etcd members: a trial runs 1 or 3"),
        };
        let double = crate::support::doubles::with_widgets(
            KubeDouble::builder().lease_renewal(Duration::from_millis(200)),
            "demo",
        )
        .await;
        for (resource, count) in RESOURCES {
            double
                .preload(resource, Some("demo"), "obj", count, 64)
                .expect("preload");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("cluster.kubeconfig");
        std::fs::write(&kubeconfig, double.kubeconfig_yaml()).expect("kubeconfig");
        let prefix = format!("/svm-chaos-{}", uuid::Uuid::new_v4());
        let flags: Vec<String> = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            "--controllers=trigger,migrator".into(),
            "--discovery-interval=1s".into(),
            format!("--qps={qps}"),
            format!("--burst={}", qps / 10),
            "--chunk-size=250".into(),
            "--object-concurrency=8".into(),
            format!("--leader-elect-lease-duration={}s", LEASE.as_secs()),
            "--leader-elect-renew-deadline=2s".into(),
            "--leader-elect-retry-period=250ms".into(),
            // The ledger reads the whole history; nothing may be compacted under it.
            "--compaction-interval=0".into(),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut gates = Vec::new();
        if layout.gates {
            let [endpoint] = &etcd.endpoints()[..] else {
                panic!("gates stand before one etcd member");
            };
            for _ in 0..2 {
                gates.push(Gate::start(endpoint).await);
            }
        }
        // `--etcd-servers`: every member's URL (comma-separated), or the replica's gate.
        let servers: Vec<String> = match &gates[..] {
            [] => vec![etcd.endpoints().join(","); 2],
            gates => gates.iter().map(Gate::endpoint).collect(),
        };
        let replicas = servers
            .iter()
            .map(|servers| ServerProcess::start_with(Backend::EtcdShared(servers, &prefix), &flags))
            .collect();
        Cluster {
            replicas,
            gates,
            etcd,
            double,
            prefix,
            _dir: dir,
        }
    }

    /// A fresh client of the trial's etcd, given every member (a fresh one each time: etcd
    /// restarts).
    pub(crate) async fn etcd_client(&self) -> Option<EtcdStorage> {
        let options = EtcdOptions {
            request_timeout: Duration::from_secs(5),
            ..EtcdOptions::default()
        };
        tokio::time::timeout(
            Duration::from_secs(5),
            EtcdStorage::connect(&self.etcd.endpoints(), options),
        )
        .await
        .ok()?
        .ok()
    }

    /// A stored object of ours, decoded (`storagestates/configmaps`).
    pub(crate) async fn stored(&self, path: &str) -> Option<Value> {
        let client = self.etcd_client().await?;
        let kv = client
            .get(&format!("{}/{path}", self.prefix))
            .await
            .ok()??;
        serde_json::from_slice(&kv.value).ok()
    }

    /// The replica holding the lease now (its index), found by the identity its log printed
    /// when it became the leader.
    pub(crate) async fn leader(&self) -> Option<usize> {
        let record = self.stored("leader").await?;
        let holder = record["holderIdentity"].as_str()?.to_string();
        self.replicas
            .iter()
            .position(|r| r.log().contains(&format!("identity={holder}")))
    }

    /// Waits (up to 30 s) for a leader.
    pub(crate) async fn wait_leader(&self) -> Option<usize> {
        for _ in 0..300 {
            if let Some(found) = self.leader().await {
                return Some(found);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// Objects of `resource` not yet stored in `version`.
    pub(crate) fn old_objects(&self, resource: &str, version: &str) -> usize {
        let expected = match resource.split_once('.') {
            Some((_, group)) => format!("{group}/{version}"),
            None => version.to_string(),
        };
        self.double
            .stored_summary(resource)
            .into_iter()
            .filter(|((encoding, _), _)| *encoding != expected)
            .map(|(_, n)| n)
            .sum()
    }

    /// Objects of every migrated resource not yet in v2.
    pub(crate) fn old_total(&self) -> usize {
        RESOURCES
            .iter()
            .map(|(resource, _)| self.old_objects(resource, "v2"))
            .sum()
    }

    /// Whether StorageState `name` says safe at the storage version hash of `resource` in v2.
    pub(crate) async fn safe_at_v2(&self, resource: &str) -> bool {
        let Some(state) = self.stored(&format!("storagestates/{resource}")).await else {
            return false;
        };
        let v2 = match resource.split_once('.') {
            Some((plural, group)) => storage_version_hash(group, "v2", &kind_of(plural)),
            None => storage_version_hash("", "v2", "ConfigMap"),
        };
        state["status"]["currentStorageVersionHash"] == v2.as_str()
            && state["status"]["persistedStorageVersionHashes"] == serde_json::json!([v2])
    }

    /// Fenced writes etcd refused, by the replicas' logs: each refused transaction logs "a
    /// write was refused" with `what` naming the write ("writing …"; a read of the term
    /// record that finds it over says "checking leadership", and is not counted).
    pub(crate) fn refusals(&self) -> usize {
        (0..self.replicas.len()).map(|i| self.refusals_of(i)).sum()
    }

    /// [`Cluster::refusals`] of replica `index`.
    pub(crate) fn refusals_of(&self, index: usize) -> usize {
        self.replicas[index]
            .log()
            .lines()
            .filter(|l| l.contains("a write was refused") && l.contains("\"writing "))
            .count()
    }

    /// The last lines of each replica's log.
    pub(crate) fn logs_tail(&self, lines: usize) -> String {
        self.replicas
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let log = r.log();
                let all: Vec<&str> = log.lines().collect();
                format!(
                    "--- replica {i} ---\n{}",
                    all[all.len().saturating_sub(lines)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn kind_of(plural: &str) -> String {
    match plural {
        "widgets" => "Widget".into(),
        other => other.into(),
    }
}

/// A process stopped with SIGSTOP; SIGCONT when dropped (whatever happens in between).
pub(crate) struct Stopped {
    pid: u32,
}

impl Stopped {
    pub(crate) fn stop(pid: u32) -> Stopped {
        signal(pid, "-STOP");
        Stopped { pid }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.pid, "-CONT");
    }
}

fn signal(pid: u32, which: &str) {
    let status = std::process::Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid} failed");
}
