//! The first start of the trigger on a fresh cluster: every tracked resource — empty ones
//! included — is migrated once, and every StorageState ends safe. On etcd 3.5 every resource
//! is read as one watch-list stream; on Debian bookworm's etcd 3.4.23 kube-apiserver refuses
//! watch-list (a 500 ERROR event) and every read falls back to metadata-only pages.

use std::time::{Duration, Instant};

use crate::support::control_plane::{Assets, assets};
use crate::support::etcd::serves_watch_list;
use crate::support::real_cluster::RealCluster;
use crate::support::server::metric_sum;
use crate::world::{is_safe, items, name, true_conditions, wait_for_migrations};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_streams_every_resource_and_every_state_ends_safe() {
    let Some(assets) = assets("first_start_streams_every_resource_and_every_state_ends_safe")
    else {
        return;
    };
    first_start(&assets, Read::Stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_on_etcd_3_4_pages_every_resource_and_every_state_ends_safe() {
    let Some(assets) =
        assets("first_start_on_etcd_3_4_pages_every_resource_and_every_state_ends_safe")
    else {
        return;
    };
    first_start(&assets.with_system_etcd(), Read::Pages).await;
}

/// How every resource must have been read.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Read {
    Stream,
    Pages,
}

async fn first_start(assets: &Assets, read: Read) {
    let started = Instant::now();
    let cluster = RealCluster::start_with(assets, &[], &["--qps=50"]);
    let etcd = cluster.plane.etcd.version();
    assert_eq!(
        serves_watch_list(&etcd),
        read == Read::Stream,
        "this test expects {read:?} on {etcd}"
    );
    let svm_started = Instant::now();

    let (states, migrations) = wait_for_migrations(
        &cluster,
        Duration::from_secs(300),
        "every StorageState safe and every migration finished",
        || {
            let states = items(&cluster, "storagestates");
            let migrations = items(&cluster, "storageversionmigrations");
            let finished = migrations.iter().all(|m| {
                let done = true_conditions(m);
                done.iter().any(|c| c == "Succeeded" || c == "Failed")
            });
            let settled = !states.is_empty()
                && states.iter().all(is_safe)
                && migrations.len() >= states.len()
                && finished;
            let failed = migrations
                .iter()
                .any(|m| true_conditions(m).iter().any(|c| c == "Failed"));
            (settled || failed).then_some((states, migrations))
        },
        || {
            format!(
                "{}\n{}\nsvm-apiserver log:\n{}",
                cluster.kubectl().run(&["get", "storagestates"]).stdout,
                cluster.kubectl().run(&["get", "svm"]).stdout,
                cluster.svm.log()
            )
        },
    );
    let failed: Vec<String> = migrations
        .iter()
        .filter(|m| true_conditions(m).iter().any(|c| c == "Failed"))
        .map(|m| format!("{}: {}", name(m), m["status"]["conditions"]))
        .collect();
    assert!(failed.is_empty(), "failed migrations: {failed:#?}");
    for state in &states {
        assert!(is_safe(state), "not safe: {state}");
        let migrated = migrations.iter().any(|m| {
            name(m).starts_with(&format!("{}-", name(state)))
                && true_conditions(m).iter().any(|c| c == "Succeeded")
        });
        assert!(migrated, "{} was never migrated", name(state));
    }
    // One read per migration, each of the kind this etcd allows (a stream refused on etcd 3.4
    // counts as a page read only: the refusal comes before anything is read).
    let metrics = cluster.metrics().await;
    let reads = "storage_migrator_core_migrator_reads_total";
    let paged = metric_sum(&metrics, reads, &["mode=\"pages\""]);
    let streamed = metric_sum(&metrics, reads, &["mode=\"stream\""]);
    let (all, none) = match read {
        Read::Stream => (streamed, paged),
        Read::Pages => (paged, streamed),
    };
    assert_eq!(
        none, 0.0,
        "{etcd}: {read:?} expected for every read: {metrics}"
    );
    assert!(
        all >= states.len() as f64,
        "{etcd}: {all} {read:?} reads for {} resources: {metrics}",
        states.len()
    );
    eprintln!("{etcd}: {paged} reads in pages, {streamed} streamed");
    eprintln!(
        "first start on a real kube-apiserver ({etcd}) at --qps 50: {} resources tracked, {} \
         migrations succeeded, 0 failed, settled {:.1} s after svm-apiserver started ({:.1} s \
         with the control plane)",
        states.len(),
        migrations.len(),
        svm_started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
