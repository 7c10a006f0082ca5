//! Preflight on the kube-apiserver double (it plays RBAC's 403 and a webhook's denial as
//! kube-apiserver relays them, dry runs included): a refusal every sampled dry run meets stops
//! the migration before any write; a refusal of one sampled object does not. The real-cluster
//! suite shows a real webhook and an unreachable conversion webhook
//! (`tests/real_cluster/preflight.rs`).

use std::time::Duration;

use kube_double::{Fault, FaultRule};

use crate::harness::{Harness, condition, condition_field, double_with_configmaps_to_move};

const OBJECTS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_refusing_patch_stops_the_migration_at_preflight_with_nothing_written() {
    let double = double_with_configmaps_to_move(OBJECTS).await;
    double.reset_counters();
    let forbidden = double.add_fault(
        FaultRule::new(Fault::Forbidden)
            .verb("patch")
            .resource("configmaps"),
    );
    let h = Harness::start(double, &["--qps=0"]);
    h.create_migration("no-patch", "", "configmaps").await;
    let m = h
        .wait_for("no-patch", Duration::from_secs(60), |m| {
            condition(m, "Failed") == Some("True")
        })
        .await;
    assert_eq!(condition_field(&m, "Failed", "reason"), "PreflightFailed");
    let message = condition_field(&m, "Failed", "message");
    for part in [
        "cannot patch resource",
        "grant the migrator's identity patch on configmaps",
        "Nothing was written",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    let counters = h.double.counters();
    let dry_runs = counters.requests_for("patch-dry-run", "configmaps");
    assert_eq!(counters.requests_for("patch", "configmaps"), 0);
    assert_eq!(counters.requests_for("watch", "configmaps"), 0);
    assert_eq!(counters.writes_performed_for("configmaps"), 0);
    assert_eq!(
        dry_runs, 5,
        "5 sampled, each refused once (a 403 is not retried)"
    );
    assert_eq!(h.double.fault_injections(forbidden), dry_runs);
    eprintln!(
        "preflight, RBAC without patch: Failed (PreflightFailed) after {dry_runs} dry runs, 0 \
         PATCHes, 0 writes of {OBJECTS} configmaps\n  {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sampled_object_refused_is_not_taken_for_every_write() {
    let double = double_with_configmaps_to_move(OBJECTS).await;
    let total: usize = double.stored_summary("configmaps").values().sum();
    double.reset_counters();
    // The first object in key order (demo/cm-00000) is always in the sample.
    let deny = double.add_fault(
        FaultRule::new(Fault::deny("policy.example.test", "this one is frozen"))
            .verb("patch")
            .namespace("demo")
            .name("cm-00000"),
    );
    let h = Harness::start(double, &["--qps=0"]);
    h.create_migration("one-refused", "", "configmaps").await;
    let m = h
        .wait_for("one-refused", Duration::from_secs(60), |m| {
            condition(m, "Failed") == Some("True") || condition(m, "Succeeded") == Some("True")
        })
        .await;
    // The run went on past preflight: every object was PATCHed, and the one refused is named
    // under the default policy (Fail), not taken for a preflight failure.
    assert_eq!(
        condition_field(&m, "Failed", "reason"),
        "ObjectsRejected",
        "{m:#}"
    );
    let message = condition_field(&m, "Failed", "message");
    assert!(message.contains("demo/cm-00000"), "{message}");
    let counters = h.double.counters();
    assert_eq!(counters.requests_for("patch", "configmaps"), total as u64);
    assert_eq!(
        counters.writes_performed_for("configmaps"),
        total as u64 - 1
    );
    // Refused once in the sample (dry run) and once for real.
    assert_eq!(h.double.fault_injections(deny), 2);
    eprintln!(
        "preflight, one sampled object refused: {} dry runs, then {} PATCHes of {total} \
         configmaps; Failed (ObjectsRejected) naming demo/cm-00000",
        counters.requests_for("patch-dry-run", "configmaps"),
        counters.requests_for("patch", "configmaps")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_answer_to_a_dry_run_is_retried_not_taken_for_a_refusal() {
    let double = double_with_configmaps_to_move(OBJECTS).await;
    let total: usize = double.stored_summary("configmaps").values().sum();
    double.reset_counters();
    // The first three PATCHes the double sees are preflight's dry runs (it runs before any
    // write): each gets a 503.
    let unavailable = double.add_fault(
        FaultRule::new(Fault::ServerError { code: 503 })
            .verb("patch")
            .resource("configmaps")
            .times(3),
    );
    let h = Harness::start(double, &["--qps=0"]);
    h.create_migration("flaky-preflight", "", "configmaps")
        .await;
    let m = h
        .wait_succeeded("flaky-preflight", Duration::from_secs(60))
        .await;
    assert_eq!(condition(&m, "Failed"), None, "{m:#}");
    let counters = h.double.counters();
    let dry_runs = counters.requests_for("patch-dry-run", "configmaps");
    assert_eq!(h.double.fault_injections(unavailable), 3);
    assert_eq!(dry_runs, 5 + 3, "5 sampled, 3 of them sent again");
    assert_eq!(counters.requests_for("patch", "configmaps"), total as u64);
    eprintln!(
        "preflight, three 503s to dry runs: retried ({dry_runs} dry runs), then {} PATCHes of \
         {total} configmaps, Succeeded",
        counters.requests_for("patch", "configmaps")
    );
}
