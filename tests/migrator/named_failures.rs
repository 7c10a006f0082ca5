//! Objects a validating webhook refuses (the test double plays that webhook's denial, the
//! way kube-apiserver relays it: `admission webhook "<name>" denied the request: …`) are
//! counted and named in `status.progress`, and the migration's
//! `storage.svm-apiserver.io/on-object-failure` policy decides how it ends: `Skip` finishes it
//! Succeeded with the condition `ObjectsSkipped` naming them, `Fail` (the default) fails it —
//! at once after ten, since a longer list would say no more. The condition messages carry the
//! counts, read (as the Table's wide column) in every served version. The real-cluster
//! suite shows the same against a real webhook (`tests/real_cluster/named_failures.rs`). The
//! policy's old spelling, `storagemigration.k8s.io/on-object-failure`, still skips.

use std::time::Duration;

use kube_double::{Fault, FaultRule, KubeDouble};
use serde_json::{Value, json};

use crate::harness::{Harness, condition, condition_field, double_with_configmaps_to_move};

const OBJECTS: usize = 800;
const REFUSED: [&str; 3] = ["cm-00250", "cm-00500", "cm-00750"];
/// The policy's name, and its old spelling (read until the old names are dropped).
const POLICY: &str = "storage.svm-apiserver.io/on-object-failure";
const OLD_POLICY: &str = "storagemigration.k8s.io/on-object-failure";

/// 800 configmaps to move to v2, three of them refused by a webhook (two 403s, one 422).
async fn double_refusing_three() -> KubeDouble {
    let double = double_with_configmaps_to_move(OBJECTS).await;
    for (i, name) in REFUSED.iter().enumerate() {
        let fault = if i == 1 {
            Fault::deny_invalid("policy.example.test", "data.size: too large")
        } else {
            Fault::deny("policy.example.test", "configmaps of team blue are frozen")
        };
        double.add_fault(FaultRule::new(fault).verb("patch").name(name));
    }
    double
}

async fn create(h: &Harness, name: &str, policy: Option<(&str, &str)>) {
    let mut body = json!({
        "apiVersion": "storagemigration.k8s.io/v1",
        "kind": "StorageVersionMigration",
        "metadata": {"name": name},
        "spec": {"resource": {"group": "", "resource": "configmaps"}},
    });
    if let Some((key, policy)) = policy {
        body["metadata"]["annotations"] = json!({ key: policy });
    }
    let resp = h
        .http
        .post(h.url(crate::harness::SVMS))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
}

fn finished(m: &Value) -> bool {
    condition(m, "Succeeded") == Some("True") || condition(m, "Failed") == Some("True")
}

fn failure_names(m: &Value) -> Vec<String> {
    let mut names: Vec<String> = m["status"]["progress"]["failures"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{}/{}",
                f["namespace"].as_str().unwrap(),
                f["name"].as_str().unwrap()
            )
        })
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_objects_are_named_counted_and_said_whether_streamed_or_paged() {
    // Streamed (the default), then paged (--watch-list-max-objects=0) with the policy under
    // its old spelling.
    for (flags, key) in [
        (&[][..], POLICY),
        (&["--watch-list-max-objects=0"][..], OLD_POLICY),
    ] {
        let double = double_refusing_three().await;
        let mut all = vec!["--qps=0", "--chunk-size=100"];
        all.extend_from_slice(flags);
        let h = Harness::start(double, &all);
        create(&h, "skipping", Some((key, "Skip"))).await;
        let m = h
            .wait_for("skipping", Duration::from_secs(60), finished)
            .await;
        assert_eq!(condition(&m, "Succeeded"), Some("True"), "{flags:?} {m:#}");
        assert_eq!(
            condition_field(&m, "Succeeded", "reason"),
            "MigrationSucceededWithSkips"
        );
        assert_eq!(
            condition_field(&m, "Succeeded", "message"),
            "migrated 798 of 801 objects (0 remaining, 3 failed)"
        );
        assert_eq!(condition(&m, "ObjectsSkipped"), Some("True"));
        let skipped = condition_field(&m, "ObjectsSkipped", "message");
        for part in [
            "3 objects of configmaps were not migrated",
            "demo/cm-00250 (403 Forbidden: admission webhook \"policy.example.test\" denied the request: configmaps of team blue are frozen)",
            "demo/cm-00500 (422 Invalid:",
            "demo/cm-00750",
        ] {
            assert!(skipped.contains(part), "{part:?} not in {skipped:?}");
        }
        let progress = &m["status"]["progress"];
        // 801 configmaps (800 and a kube-root-ca.crt), less the three refused.
        assert_eq!(progress["migratedObjects"], 798, "{m:#}");
        assert_eq!(progress["failedObjects"], 3);
        assert_eq!(
            failure_names(&m),
            ["demo/cm-00250", "demo/cm-00500", "demo/cm-00750"]
        );
        let webhook_422 = progress["failures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "cm-00500")
            .unwrap();
        assert_eq!(webhook_422["code"], 422);
        assert_eq!(webhook_422["reason"], "Invalid");
        // Every served version carries them: the conditions, and our progress.
        for version in ["v1alpha1", "v1beta1", "v1"] {
            let url = h.url(&format!(
                "/apis/storagemigration.k8s.io/{version}/storageversionmigrations/skipping"
            ));
            let seen: Value = h.http.get(url).send().await.unwrap().json().await.unwrap();
            assert_eq!(seen["status"]["progress"]["failedObjects"], 3, "{version}");
            assert_eq!(failure_names(&seen).len(), 3, "{version}");
            assert_eq!(
                condition(&seen, "ObjectsSkipped"),
                Some("True"),
                "{version}"
            );
        }
        // Never silent: a third Event (Warning ObjectsSkipped) beside Started and Succeeded;
        // the real-cluster test reads its text.
        // Events are published after the status write that ends the migration: wait for them.
        let events = crate::support::wait::eventually_async(
            Duration::from_secs(30),
            "the Started, Succeeded and ObjectsSkipped Events",
            async || match h
                .double
                .counters()
                .requests_for("create", "events.events.k8s.io")
            {
                created if created >= 3 => Ok(created),
                created => Err(format!("{created} created")),
            },
        )
        .await;
        assert_eq!(events, 3, "{flags:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_default_policy_ten_refusals_fail_the_migration_at_once() {
    let double = double_with_configmaps_to_move(OBJECTS).await;
    // Twelve objects from cm-00400 on are refused: the migration stops at the tenth refusal.
    let denials: Vec<u64> = (400..412)
        .map(|i| {
            double.add_fault(
                FaultRule::new(Fault::deny("policy.example.test", "frozen"))
                    .verb("patch")
                    .name(&format!("cm-{i:05}")),
            )
        })
        .collect();
    let h = Harness::start(
        double,
        &[
            "--qps=0",
            "--chunk-size=100",
            "--object-concurrency=1",
            "--watch-list-max-objects=0",
        ],
    );
    create(&h, "failing", None).await;
    let m = h
        .wait_for("failing", Duration::from_secs(60), finished)
        .await;
    assert_eq!(condition(&m, "Failed"), Some("True"), "{m:#}");
    assert_eq!(condition_field(&m, "Failed", "reason"), "ObjectsRejected");
    let message = condition_field(&m, "Failed", "message");
    // The counts are those of the last checkpoint, with the ten refusals.
    for part in [
        " of 801 objects (",
        ", 10 failed): the cluster refused 10 objects: demo/cm-00400 (403 Forbidden: admission webhook \"policy.example.test\" denied the request: frozen)",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    let refused: u64 = denials
        .iter()
        .map(|id| h.double.fault_injections(*id))
        .sum();
    assert_eq!(refused, 10, "stopped at the tenth");
    assert_eq!(m["status"]["progress"]["failedObjects"], 10, "{m:#}");
    assert_eq!(failure_names(&m).len(), 10);
}
