//! svm-apiserver's store on three etcd members, as production runs etcd: `--etcd-servers`
//! with every member's URL (kube-apiserver keeps its own etcd). Mid-migration of a CRD storage
//! move, a follower svm-apiserver's client is connected to is killed, restarted once the next
//! checkpoint has landed; later the raft leader is killed and restarted the same way. The
//! migration succeeds, every object is re-encoded in etcd, the StorageState ends safe, and
//! the migration counted each object once.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::crashes::{move_storage_to, progress, stored_versions};
use crate::support::control_plane::{ControlPlane, assets};
use crate::support::etcd::EtcdCluster;
use crate::support::real_cluster::{
    NAMESPACE, RealCluster, Registration, SERVICE_ACCOUNT, install_rbac,
};
use crate::support::server::{Backend, ServerProcess, metric_sum};
use crate::world::{
    describe_state, failed, install_widgets, is_safe, migrations_of, name, storage_state,
    stored_json_objects, succeeded, wait_for_migrations,
};

const WIDGETS: usize = 1_000;
const STATE: &str = "widgets.example.test";
const WIDGETS_PREFIX: &str = "/registry/example.test/widgets/demo/";
/// Objects between checkpoints (`--chunk-size`).
const CHUNK: i64 = 100;

#[derive(Clone, Copy, Debug)]
enum Member {
    /// A follower svm-apiserver's etcd client holds a connection to.
    ConnectedFollower,
    /// The raft leader.
    Leader,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_survives_killing_the_connected_etcd_member_and_the_leader() {
    let test = "a_migration_survives_killing_the_connected_etcd_member_and_the_leader";
    let Some(assets) = assets(test) else {
        return;
    };
    // Dropped last: svm-apiserver (in the cluster below) stops before its store does.
    let mut members = EtcdCluster::start_binary(&assets.etcd);
    let plane = ControlPlane::start(&assets, &[]);
    install_rbac(&plane);
    let svm_kubeconfig = plane.service_account_kubeconfig(NAMESPACE, SERVICE_ACCOUNT);
    let flags = [
        format!("--kubeconfig={}", svm_kubeconfig.display()),
        // Slow enough to be caught mid-way twice, with a checkpoint every CHUNK objects.
        "--qps=100".into(),
        "--burst=10".into(),
        format!("--chunk-size={CHUNK}"),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let servers = members.servers_flag();
    let svm = ServerProcess::start_with(Backend::Etcd(&servers), &flags);
    let cluster = RealCluster {
        svm,
        plane,
        svm_kubeconfig,
        registration: Registration::Owner,
    };
    cluster.register();
    eprintln!(
        "svm-apiserver on {} members of {}: --etcd-servers={servers}",
        members.endpoints().len(),
        members.version()
    );
    let kubectl = cluster.kubectl();
    install_widgets(&cluster.plane, &["v1", "v2", "v3"], WIDGETS).await;
    wait_for_migrations(
        &cluster,
        Duration::from_secs(120),
        "the widgets StorageState safe on v1",
        || storage_state(&cluster, STATE).filter(is_safe),
        || describe_state(&cluster, STATE),
    );
    let migrated_metric = async || {
        metric_sum(
            &cluster.metrics().await,
            "storage_migrator_core_migrator_migrated_objects",
            &[&format!("resource=\"{STATE}\"")],
        )
    };
    let metric_before = migrated_metric().await;
    let before: Vec<String> = migrations_of(&cluster, STATE).iter().map(name).collect();
    let new = |m: &Value| !before.contains(&name(m));
    move_storage_to(&cluster, 1);

    let pid = cluster.svm.pid().expect("svm-apiserver runs");
    let mut figures = Vec::new();
    for (member, share) in [(Member::ConnectedFollower, 4), (Member::Leader, 2)] {
        // Mid-migration: past a share of the objects, not finished.
        let at = wait_for_migrations(
            &cluster,
            Duration::from_secs(300),
            "the move's migration part-way",
            || {
                migrations_of(&cluster, STATE)
                    .into_iter()
                    .find(|m| new(m) && !succeeded(m) && progress(m) >= WIDGETS as i64 / share)
                    .map(|m| progress(&m))
            },
            || kubectl.run(&["get", "svm", "-o", "wide"]).stdout,
        );
        let leader = members.wait_leader();
        let connected = members.connected(pid);
        let victim = match member {
            Member::Leader => leader,
            Member::ConnectedFollower => *connected
                .iter()
                .find(|m| **m != leader)
                .unwrap_or_else(|| panic!("no follower connected: {connected:?}")),
        };
        let victim_name = members.members()[victim].name().to_string();
        members.kill(victim);
        let killed = Instant::now();
        // The next checkpoint lands with the member down (read through the aggregator, so
        // svm-apiserver's reads go through the survivors too).
        let next = wait_for_migrations(
            &cluster,
            Duration::from_secs(120),
            "a checkpoint with the member down",
            || {
                migrations_of(&cluster, STATE)
                    .into_iter()
                    .find(|m| new(m) && (progress(m) > at || succeeded(m)))
                    .map(|m| progress(&m))
            },
            || {
                format!(
                    "{}\nsvm-apiserver log:\n{}\n{}",
                    kubectl.run(&["get", "svm", "-o", "wide"]).stdout,
                    cluster.svm.log(),
                    members.logs()
                )
            },
        );
        let recovered = killed.elapsed();
        members.restart(victim);
        let rejoined = killed.elapsed();
        figures.push(format!(
            "{victim_name} ({member:?}; svm-apiserver connected to {:?}, leader {}) killed at \
             {at}/{WIDGETS}: next checkpoint ({next}) {:.2}s after the kill, member back and \
             healthy {:.2}s after",
            connected
                .iter()
                .map(|m| members.members()[*m].name())
                .collect::<Vec<_>>(),
            members.members()[leader].name(),
            recovered.as_secs_f64(),
            rejoined.as_secs_f64()
        ));
    }

    let state = wait_for_migrations(
        &cluster,
        Duration::from_secs(300),
        "the move migrated after the kills",
        || {
            let state = storage_state(&cluster, STATE)?;
            let done = migrations_of(&cluster, STATE)
                .iter()
                .any(|m| new(m) && succeeded(m));
            let narrowed = stored_versions(&cluster) == json!(["v2"]);
            (done && narrowed && is_safe(&state)).then_some(state)
        },
        || describe_state(&cluster, STATE),
    );
    let all = migrations_of(&cluster, STATE);
    assert!(!all.iter().any(failed), "{all:#?}");
    let done: Vec<&Value> = all.iter().filter(|m| new(m)).collect();
    assert_eq!(done.len(), 1, "one migration of the move: {done:#?}");
    assert!(succeeded(done[0]));
    // Every object counted once: the migration's own count is the resource's size.
    assert_eq!(
        progress(done[0]),
        WIDGETS as i64,
        "objects the migration counted: {:#}",
        done[0]["status"]
    );
    assert_eq!(
        stored_json_objects(&cluster, WIDGETS_PREFIX, "example.test/v2").await,
        WIDGETS,
        "every widget re-encoded in v2 with two etcd members killed in turn"
    );
    // PATCHes the migrator counted beyond the migration's count: objects done again after a
    // checkpoint whose outcome a kill left unknown (the migration resumes from the stored one).
    let patched = (migrated_metric().await - metric_before) as i64;
    assert!(patched >= WIDGETS as i64, "{patched} objects PATCHed");
    for figure in &figures {
        eprintln!("{figure}");
    }
    eprintln!(
        "2 etcd members killed in turn, 2 survived; the migration succeeded with {} objects \
         counted ({} PATCHed, {} again), state current {}",
        progress(done[0]),
        patched,
        patched - WIDGETS as i64,
        state["status"]["currentStorageVersionHash"]
    );
}
