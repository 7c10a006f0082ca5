//! A 401/403 is final only from an apiserver that says it is ready. Right after a
//! kube-apiserver restart its RBAC authorizer refuses for a few seconds what it allows a moment
//! later (seen on the real-cluster suite's restarts); a migration must ride that out, and
//! still fail at once on a refusal from a ready apiserver.

use std::time::Duration;

use kube_double::{Fault, FaultRule};

use crate::harness::{Harness, condition, condition_field, double_with_widgets, migrated};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_from_an_apiserver_that_is_not_ready_is_retried() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 50, 16)
        .unwrap();
    double.set_storage_version("configmaps", "v2").unwrap();
    // Three refusals of the list (pages only: --watch-list-max-objects=0), while /readyz
    // says the authorizer is not synced.
    let forbidden = double.add_fault(
        FaultRule::new(Fault::Forbidden)
            .verb("list")
            .resource("configmaps")
            .times(3),
    );
    let not_ready = double.add_fault(
        FaultRule::new(Fault::ServerError { code: 500 })
            .path("/readyz")
            .times(3),
    );
    let h = Harness::start(double, &["--qps=0", "--watch-list-max-objects=0"]);
    h.create_migration("restarting", "", "configmaps").await;
    let m = h
        .wait_succeeded("restarting", Duration::from_secs(120))
        .await;
    assert_eq!(h.double.fault_injections(forbidden), 3);
    assert_eq!(h.double.fault_injections(not_ready), 3);
    assert!(migrated(&m) >= 50, "{m}");
    assert_eq!(condition(&m, "Failed"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_from_a_ready_apiserver_fails_the_migration_at_once() {
    let double = double_with_widgets().await;
    double
        .preload("configmaps", Some("demo"), "cm", 10, 16)
        .unwrap();
    let forbidden = double.add_fault(
        FaultRule::new(Fault::Forbidden)
            .verb("list")
            .resource("configmaps"),
    );
    let h = Harness::start(double, &["--qps=0", "--watch-list-max-objects=0"]);
    h.create_migration("refused", "", "configmaps").await;
    let m = h
        .wait_for("refused", Duration::from_secs(60), |m| {
            condition(m, "Failed") == Some("True")
        })
        .await;
    let message = condition_field(&m, "Failed", "message");
    assert!(message.contains("403"), "{message}");
    assert_eq!(h.double.fault_injections(forbidden), 1, "never retried");
    assert_eq!(h.double.counters().requests_for("get", "/readyz"), 1);
}
