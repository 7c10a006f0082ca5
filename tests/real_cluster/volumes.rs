//! VolumeClaimMigrations on the real kube-apiserver, whose validation is what matters here:
//! expansion only where the StorageClass allows it (the PersistentVolumeClaimResize admission),
//! no request below a claim's capacity — with Kubernetes' own controllers around them: the real
//! kube-controller-manager runs [`CONTROLLERS`] with its defaults otherwise (protobuf to every
//! API, ours included). Its StatefulSet controller makes each `db`'s claims and pods from the
//! templates, re-creates the pods our controller deletes and adopts the pods of a re-created
//! StatefulSet; its garbage collector orphans them on the orphan delete; its
//! PVC-protection controller lets a deleted claim go; its ResourceQuota controller counts a
//! quota's usage; its service-account controller makes each namespace's `default`
//! ServiceAccount that pods need. The scenarios assert what those controllers did (who created
//! a pod or a claim, uids kept on adoption).
//!
//! What no component of the suite can do stays played by [`Node`], in each namespace: the
//! kubelet (there is no node and no scheduler: a pod is marked Running and Ready once its claims
//! are bound; for chosen claims the file-system resize finishes only once the pod was
//! re-created), the PV binder and provisioner (the StorageClasses name a provisioner that does
//! not exist, so a claim is bound at its request by patching its status), the external resizer
//! (a grown request becomes the claim's capacity, or is declared infeasible), and, for the
//! Advanced StatefulSet, OpenKruise's controller (its pods and claims). Pods are never
//! scheduled, so kube-apiserver deletes them at once (no grace period to wait out) and the
//! PVC-protection controller sees no pod using a claim.
//!
//! One cluster and one kube-controller-manager serve every scenario, each in its own namespace;
//! [`collection`] adds the garbage collector and namespace controller working on our own kind.
//! Each scenario's wall time is printed (never asserted).

mod collection;
mod crashes;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::support::audit::AuditLog;
use crate::support::kubectl::Kubectl;
use crate::support::real_cluster::RealCluster;
use crate::support::wait::{eventually_async, eventually_async_every};

const TEST: &str = "volume_claim_migrations_resize_claims_as_the_real_apiserver_allows";
/// A hang guard, not a speed check.
const LIMIT: Duration = Duration::from_secs(240);
/// How often the waits on the played node and on kube-controller-manager's doing look: the
/// played components' own period ([`run`]), finer than [`crate::support::wait::POLL`].
const STEP: Duration = Duration::from_millis(100);

/// kube-controller-manager's controllers the scenarios need: the StatefulSet controller (pods
/// and claims from the templates, pods re-created, adoption), the garbage collector (orphan and
/// cascading deletes, owner references to and from our kind), the namespace controller, the
/// service-account controller (each namespace's `default` ServiceAccount, which pods need), the
/// PVC-protection controller (a deleted claim's `kubernetes.io/pvc-protection` finalizer) and
/// the ResourceQuota controller (a quota's `status.used`, which its admission needs).
const CONTROLLERS: [&str; 6] = [
    "statefulset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "persistentvolumeclaim-protection-controller",
    "resourcequota-controller",
];

/// kube-controller-manager's user in the suite (`ControllerManager`'s client certificate).
const KCM_USER: &str = "system:kube-controller-manager";

/// What kube-apiserver's audit log keeps: every request kube-controller-manager makes to our
/// groups (through the aggregator), discovery included; nothing else.
const AUDIT_RULES: &str = r#"- level: Metadata
  users: ["system:kube-controller-manager"]
  resources:
  - group: storage.svm-apiserver.io
  - group: storagemigration.k8s.io
- level: Metadata
  users: ["system:kube-controller-manager"]
  nonResourceURLs:
  - /apis/storage.svm-apiserver.io
  - /apis/storage.svm-apiserver.io/*
  - /apis/storagemigration.k8s.io
  - /apis/storagemigration.k8s.io/*
- level: None"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_claim_migrations_resize_claims_as_the_real_apiserver_allows() {
    let audit = AuditLog::with_rules(AUDIT_RULES);
    let audit_flags = audit.flags();
    let audit_flags: Vec<&str> = audit_flags.iter().map(String::as_str).collect();
    let Some(cluster) = RealCluster::start(
        TEST,
        &audit_flags,
        &[
            "--enable-volume-claim-migrations",
            "--volume-resync-interval=1s",
            "--controllers=volumes",
        ],
    ) else {
        return;
    };
    let kubectl = cluster.kubectl();
    kubectl.ok_stdin(&["apply", "-f", "-"], STORAGE_CLASSES);
    // OpenKruise's StatefulSet CRD before kube-controller-manager starts, so that its garbage
    // collector and quota monitors know the kind from their first discovery (they look again
    // only every 30 s).
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kruise/statefulsets.apps.kruise.io.yaml"
    );
    kubectl.ok(&["apply", "-f", crd]);
    crate::world::wait_established(&kubectl, &["crd/statefulsets.apps.kruise.io"]);
    let kcm = crate::world::start_controller_manager(&cluster.plane, &CONTROLLERS, &[]);
    let client = cluster.plane.client().await;

    timed(
        "rolling update, 5 replicas x 2 templates",
        rolling_update_ordinal_by_ordinal(&cluster, &kubectl, &client),
    )
    .await;
    timed(
        "a class without expansion",
        a_class_without_expansion_is_refused_up_front(&kubectl, &client),
    )
    .await;
    timed(
        "OnDelete",
        on_delete_waits_for_a_recreated_claim(&kubectl, &client),
    )
    .await;
    timed(
        "a quota",
        a_quota_stops_the_rollout_until_it_is_raised(&kubectl, &client),
    )
    .await;
    timed(
        "a size lowered after a failure",
        a_size_lowered_after_a_failure_is_honoured(&kubectl, &client),
    )
    .await;
    timed(
        "recreateStatefulSet",
        an_apps_v1_statefulset_is_recreated_keeping_pods_and_claims(&kubectl, &client),
    )
    .await;
    timed(
        "an Advanced StatefulSet",
        an_advanced_statefulset_is_resized_to_its_own_templates(&kubectl, &client),
    )
    .await;
    timed(
        "a namespace holding our objects deleted",
        collection::a_namespace_holding_our_objects_is_deleted(&cluster, &kubectl, &client, &audit),
    )
    .await;
    timed(
        "owner references to and from our objects",
        collection::owner_references_to_and_from_our_objects(&kubectl, &client),
    )
    .await;
    collection::what_kube_controller_manager_was_answered(&cluster, &audit, &kcm).await;
}

/// Run one scenario and print its wall time.
async fn timed(scenario: &str, run: impl Future<Output = ()>) {
    let started = Instant::now();
    run.await;
    println!(
        "scenario {scenario}: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// 5 replicas, 2 templates, `OnPodRollingUpdate`: ordinal by ordinal from the highest, one
/// claim's file system resized through a pod restart (our controller deletes pod `db-1`, the
/// StatefulSet controller makes it again); kubectl sees it all.
async fn rolling_update_ordinal_by_ordinal(
    cluster: &RealCluster,
    kubectl: &Kubectl,
    client: &kube::Client,
) {
    let ns = "rolling";
    let node = Node::start(client, kubectl, ns, 5, &["data", "logs"], "expandable").await;
    node.file_system_resize_for("data-db-1");
    let pod_before = node.pod_uid("db-1").await;
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &migration(
            ns,
            "grow",
            "OnPodRollingUpdate",
            &[("data", "20Gi"), ("logs", "20Gi")],
        ),
    );
    let done = kubectl.run(&[
        "wait",
        "-n",
        ns,
        "--for=condition=Succeeded",
        "vcm/grow",
        "--timeout=240s",
    ]);
    assert!(
        done.ok,
        "kubectl wait: {}{}\n{}\n{}",
        done.stdout,
        done.stderr,
        kubectl
            .run(&["get", "vcm", "-n", ns, "grow", "-o", "yaml"])
            .stdout,
        cluster.svm.log()
    );
    // Ordinals were resized from the highest, one at a time (maxUnavailable 1): every claim of
    // an ordinal was asked before any claim of the next.
    let order = node.resize_order();
    println!("resized in this order: {order:?}");
    let ordinals: Vec<char> = order
        .iter()
        .map(|claim| claim.chars().last().unwrap_or('?'))
        .collect();
    let mut sorted = ordinals.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ordinals, sorted, "resize order: {order:?}");
    assert_eq!(order.len(), 10, "{order:?}");
    for claim in node.claims().await {
        assert_eq!(
            claim.1,
            ("20Gi".to_string(), "20Gi".to_string()),
            "{}",
            claim.0
        );
    }
    assert_ne!(node.pod_uid("db-1").await, pod_before, "db-1 was restarted");
    let restarted = node.pods.get("db-1").await.expect("pod db-1");
    assert_eq!(
        crate::world::creator(&restarted.metadata),
        "kube-controller-manager",
        "db-1 made again by the StatefulSet controller: {:?}",
        restarted.metadata
    );
    assert_eq!(
        controller_uid(&restarted),
        node.statefulset_uid().await,
        "{:?}",
        restarted.metadata
    );

    let table = kubectl.ok(&["get", "vcm", "-n", ns]);
    println!("{table}");
    for column in [
        "NAME",
        "TARGET",
        "TEMPLATES",
        "COMPATIBLE",
        "READY",
        "STATUS",
        "AGE",
    ] {
        assert!(table.contains(column), "{table}");
    }
    assert!(table.contains("Succeeded"), "{table}");
    let described = kubectl.ok(&["describe", "vcm", "-n", ns, "grow"]);
    for reason in ["ResizeStarted", "PodRestarted", "Succeeded"] {
        assert!(described.contains(reason), "{described}");
    }
    let on_statefulset = kubectl.ok(&["describe", "statefulset", "-n", ns, "db"]);
    assert!(on_statefulset.contains("ResizeStarted"), "{on_statefulset}");
    node.stop();
}

/// A StorageClass without `allowVolumeExpansion`: refused before any claim is patched.
async fn a_class_without_expansion_is_refused_up_front(kubectl: &Kubectl, client: &kube::Client) {
    let ns = "refused";
    let node = Node::start(client, kubectl, ns, 2, &["data"], "fixed").await;
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &migration(ns, "grow", "OnPodRollingUpdate", &[("data", "20Gi")]),
    );
    let vcm = wait_until(kubectl, ns, "grow", |vcm| {
        condition(vcm, "Failed") == Some(("True".into(), "ExpansionNotAllowed".into()))
    })
    .await;
    assert!(
        condition_message(&vcm, "Failed").contains("fixed"),
        "{vcm:#}"
    );
    for (name, sizes) in node.claims().await {
        assert_eq!(sizes.0, "10Gi", "{name} was patched");
    }
    assert!(node.resize_order().is_empty());
    node.stop();
}

/// `OnDelete`: nothing is touched until a claim is deleted and re-created; then only that one.
/// As a person does it: the claim and its pod deleted, the StatefulSet controller makes both
/// again (the claim from its template, at 10Gi), the played binder binds the claim.
async fn on_delete_waits_for_a_recreated_claim(kubectl: &Kubectl, client: &kube::Client) {
    let ns = "ondelete";
    let node = Node::start(client, kubectl, ns, 2, &["data"], "expandable").await;
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &migration(ns, "grow", "OnDelete", &[("data", "20Gi")]),
    );
    // Its status says it saw both claims (their uids remembered), and nothing was patched.
    let vcm = wait_until(kubectl, ns, "grow", |vcm| {
        vcm["status"]["claims"]
            .as_array()
            .is_some_and(|c| c.len() == 2 && c.iter().all(|c| c["uid"].is_string()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(node.resize_order().is_empty(), "{vcm:#}");
    let before = node.claim_uids().await;
    node.delete_claim("data-db-0").await;
    node.kubectl
        .ok(&["delete", "pod", "-n", ns, "db-0", "--wait=false"]);
    let again = node
        .claim_made_again("data-db-0", &before["data-db-0"])
        .await;
    assert_eq!(
        crate::world::creator(&again.metadata),
        "kube-controller-manager",
        "data-db-0 made again by the StatefulSet controller: {:?}",
        again.metadata
    );
    wait_until(kubectl, ns, "grow", |vcm| {
        vcm["status"]["claims"].as_array().is_some_and(|claims| {
            claims
                .iter()
                .any(|c| c["name"] == "data-db-0" && c["phase"] == "Resized")
        })
    })
    .await;
    assert_eq!(node.resize_order(), vec!["data-db-0".to_string()]);
    let claims = node.claims().await;
    assert_eq!(
        claims["data-db-1"].0, "10Gi",
        "the other claim is untouched"
    );
    node.stop();
}

/// A ResourceQuota refuses ordinal 1's PATCH (kube-apiserver's quota admission): the rollout
/// stops there with a Warning Event, ordinal 0 untouched, and resumes once the quota is raised.
async fn a_quota_stops_the_rollout_until_it_is_raised(kubectl: &Kubectl, client: &kube::Client) {
    let ns = "quota";
    let node = Node::start(client, kubectl, ns, 3, &["data"], "expandable").await;
    // 30Gi used; room for one claim to grow by 10Gi. The ResourceQuota controller counts the
    // usage (kube-apiserver's quota admission refuses to judge a quota it has not counted).
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "storage", "namespace": ns},
                "spec": {"hard": {"requests.storage": "45Gi"}}})
        .to_string(),
    );
    wait_for_quota(kubectl, ns, "45Gi", "30Gi").await;
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &migration(ns, "grow", "OnPodRollingUpdate", &[("data", "20Gi")]),
    );
    let blocked = wait_until(kubectl, ns, "grow", |vcm| {
        condition(vcm, "Running") == Some(("False".into(), "Blocked".into()))
    })
    .await;
    let message = condition_message(&blocked, "Running");
    assert!(
        message.contains("data-db-1") && message.contains("exceeded quota"),
        "{blocked:#}"
    );
    let claims = node.claims().await;
    assert_eq!(claims["data-db-2"].1, "20Gi", "{claims:?}");
    assert_eq!(
        claims["data-db-0"].0, "10Gi",
        "ordinal 0 untouched: {claims:?}"
    );
    let described = kubectl.ok(&["describe", "vcm", "-n", ns, "grow"]);
    assert!(
        described.contains("Warning") && described.contains("ResizeFailed"),
        "{described}"
    );
    kubectl.ok(&[
        "patch",
        "resourcequota",
        "storage",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"hard":{"requests.storage":"100Gi"}}}"#,
    ]);
    wait_until(kubectl, ns, "grow", |vcm| {
        condition(vcm, "Succeeded") == Some(("True".into(), "Resized".into()))
    })
    .await;
    let described = kubectl.ok(&["describe", "vcm", "-n", ns, "grow"]);
    assert!(described.contains("Resumed"), "{described}");
    node.stop();
}

/// 100Gi asked; ordinal 1's resize is infeasible (the resizer says so). The migration is
/// lowered to 20Gi: with RecoverVolumeExpansionFailure (GA) kube-apiserver lets the request come
/// down to any size ≥ the capacity, so ordinal 1 goes to 20Gi, ordinal 2 keeps its 100Gi and
/// ordinal 0 goes to 20Gi.
async fn a_size_lowered_after_a_failure_is_honoured(kubectl: &Kubectl, client: &kube::Client) {
    let ns = "recover";
    let node = Node::start(client, kubectl, ns, 3, &["data"], "expandable").await;
    node.infeasible_at("data-db-1", "100Gi");
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &migration(ns, "grow", "OnPodRollingUpdate", &[("data", "100Gi")]),
    );
    let blocked = wait_until(kubectl, ns, "grow", |vcm| {
        condition(vcm, "Running") == Some(("False".into(), "Blocked".into()))
    })
    .await;
    assert!(
        condition_message(&blocked, "Running").contains("Infeasible"),
        "{blocked:#}"
    );
    kubectl.ok(&[
        "patch",
        "vcm",
        "grow",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"templates":[{"name":"data","storage":"20Gi"}]}}"#,
    ]);
    wait_until(kubectl, ns, "grow", |vcm| {
        condition(vcm, "Succeeded") == Some(("True".into(), "Resized".into()))
    })
    .await;
    let claims = node.claims().await;
    assert_eq!(
        claims["data-db-2"],
        ("100Gi".into(), "100Gi".into()),
        "{claims:?}"
    );
    assert_eq!(
        claims["data-db-1"],
        ("20Gi".into(), "20Gi".into()),
        "{claims:?}"
    );
    assert_eq!(
        claims["data-db-0"],
        ("20Gi".into(), "20Gi".into()),
        "{claims:?}"
    );
    node.stop();
}

/// Until the ResourceQuota controller has written `hard` and `used` of the quota `storage`.
async fn wait_for_quota(kubectl: &Kubectl, ns: &str, hard: &str, used: &str) {
    eventually_async(
        LIMIT,
        &format!("the ResourceQuota controller counting {hard}/{used}"),
        async || {
            let out = kubectl.run(&[
                "get",
                "resourcequota",
                "storage",
                "-n",
                ns,
                "-o",
                "jsonpath={.status.hard.requests\\.storage}/{.status.used.requests\\.storage}",
            ]);
            if out.stdout.trim() == format!("{hard}/{used}") {
                Ok(())
            } else {
                Err(format!("{out:?}"))
            }
        },
    )
    .await
}

/// `recreateStatefulSet`: once every claim is resized the StatefulSet is deleted with orphan
/// cascade and created again with the new sizes. kube-apiserver adds the `orphan` finalizer;
/// the real garbage collector takes the StatefulSet's owner references off its pods (a
/// cascading deletion would have taken the pods) and removes the finalizer; the real
/// StatefulSet controller adopts the pods for the new StatefulSet. Every pod and claim keeps
/// its uid.
async fn an_apps_v1_statefulset_is_recreated_keeping_pods_and_claims(
    kubectl: &Kubectl,
    client: &kube::Client,
) {
    let ns = "recreate";
    let node = Node::start(client, kubectl, ns, 3, &["data"], "expandable").await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let old = statefulsets.get("db").await.expect("statefulset");
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    // One hang guard for the pods coming and, after the re-creation, being adopted.
    let deadline = Instant::now() + LIMIT;
    let pods_before = eventually_async(LIMIT, "the 3 pods of StatefulSet db", async || {
        let pods = node.owned_pods(&old_uid).await;
        if pods.len() >= 3 {
            Ok(pods)
        } else {
            Err(format!("{pods:?}"))
        }
    })
    .await;
    let claims_before = node.claim_uids().await;
    let mut vcm: Value = serde_json::from_str(&migration(
        ns,
        "grow",
        "OnPodRollingUpdate",
        &[("data", "20Gi")],
    ))
    .expect("migration");
    vcm["spec"]["recreateStatefulSet"] = json!(true);
    kubectl.ok_stdin(&["create", "-f", "-"], &vcm.to_string());
    let done = wait_until(kubectl, ns, "grow", |vcm| {
        condition(vcm, "Succeeded") == Some(("True".into(), "Resized".into()))
    })
    .await;
    assert_eq!(done["status"]["recreate"]["phase"], "Recreated", "{done:#}");
    let new = statefulsets
        .get("db")
        .await
        .expect("re-created statefulset");
    let new_uid = new.metadata.uid.clone().unwrap_or_default();
    assert_ne!(new_uid, old_uid, "a new object");
    let spec = new.spec;
    assert_eq!(spec.replicas, Some(3));
    let sizes: Vec<String> = spec
        .volume_claim_templates
        .unwrap_or_default()
        .iter()
        .filter_map(|t| {
            let requests = t.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?;
            Some(requests.get("storage")?.0.clone())
        })
        .collect();
    assert_eq!(sizes, ["20Gi"]);
    // What the watch saw: the old StatefulSet deleting with the `orphan` finalizer, then gone;
    // each pod without an owner in between (the garbage collector's patch).
    assert_eq!(
        node.orphaned(),
        vec![old_uid.clone()],
        "deleted with orphan cascade"
    );
    assert!(node.gone().contains(&old_uid), "{:?}", node.gone());
    let pod_names: BTreeSet<String> = pods_before.keys().cloned().collect();
    assert_eq!(
        node.released(),
        pod_names,
        "orphaned by the garbage collector"
    );
    assert_eq!(node.claim_uids().await, claims_before, "claims kept");
    eventually_async(
        deadline.saturating_duration_since(Instant::now()),
        "the pods kept and adopted by the new StatefulSet",
        async || {
            let owned = node.owned_pods(&new_uid).await;
            if owned == pods_before {
                Ok(())
            } else {
                Err(format!("{pods_before:?} vs {owned:?}"))
            }
        },
    )
    .await;
    let described = kubectl.ok(&["describe", "vcm", "-n", ns, "grow"]);
    assert!(
        described.contains("RecreatingStatefulSet") && described.contains("StatefulSetRecreated"),
        "{described}"
    );
    node.stop();
}

/// OpenKruise's Advanced StatefulSet (its CRD in tests/fixtures/kruise, installed at the start):
/// its templates may be edited, so the migration names no sizes and reads them from the target;
/// 3 replicas, 2 templates, highest ordinal first. Re-creating is refused for it (nothing to
/// re-create). No OpenKruise controller runs: the played one makes its claims and pods.
async fn an_advanced_statefulset_is_resized_to_its_own_templates(
    kubectl: &Kubectl,
    client: &kube::Client,
) {
    let ns = "kruise";
    let shape = Shape {
        api_version: "apps.kruise.io/v1beta1",
        replicas: 3,
        templates: &["data", "logs"],
        class: "expandable",
    };
    let node = Node::start_as(client, kubectl, ns, &shape).await;
    let grow = r#"[
        {"op": "replace", "path": "/spec/volumeClaimTemplates/0/spec/resources/requests/storage", "value": "20Gi"},
        {"op": "replace", "path": "/spec/volumeClaimTemplates/1/spec/resources/requests/storage", "value": "30Gi"}]"#;
    kubectl.ok(&[
        "patch",
        "statefulsets.apps.kruise.io",
        "db",
        "-n",
        ns,
        "--type=json",
        "-p",
        grow,
    ]);
    let mut vcm = json!({
        "apiVersion": "storage.svm-apiserver.io/v1alpha1",
        "kind": "VolumeClaimMigration",
        "metadata": {"name": "grow", "namespace": ns},
        "spec": {
            "target": {"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet", "name": "db"},
            "volumeClaimUpdateStrategy": "OnPodRollingUpdate",
            "recreateStatefulSet": true,
        }
    });
    let refused = kubectl.run_with_stdin(&["create", "-f", "-"], Some(&vcm.to_string()));
    assert!(
        !refused.ok && refused.stderr.contains("spec.recreateStatefulSet"),
        "{refused:?}"
    );
    vcm["spec"]["recreateStatefulSet"] = json!(false);
    kubectl.ok_stdin(&["create", "-f", "-"], &vcm.to_string());
    let done = wait_until(kubectl, ns, "grow", |vcm| {
        condition(vcm, "Succeeded") == Some(("True".into(), "Resized".into()))
    })
    .await;
    let counts: Vec<(String, i64, i64)> = done["status"]["templates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let n = |k: &str| t[k].as_i64().unwrap_or(-1);
            let name = t["templateName"].as_str().unwrap_or_default().to_string();
            (name, n("compatibleReplicas"), n("compatibleReadyReplicas"))
        })
        .collect();
    assert_eq!(
        counts,
        [("data".into(), 3, 3), ("logs".into(), 3, 3)],
        "{done:#}"
    );
    let claims = node.claims().await;
    for ordinal in 0..3 {
        assert_eq!(
            claims[&format!("data-db-{ordinal}")].1,
            "20Gi",
            "{claims:?}"
        );
        assert_eq!(
            claims[&format!("logs-db-{ordinal}")].1,
            "30Gi",
            "{claims:?}"
        );
    }
    let order = node.resize_order();
    let ordinals: Vec<&str> = order.iter().filter_map(|c| c.rsplit('-').next()).collect();
    assert_eq!(ordinals, ["2", "2", "1", "1", "0", "0"], "{order:?}");
    let table = kubectl.ok(&["get", "vcm", "-n", ns]);
    assert!(
        table.contains("StatefulSet/db") && table.contains("<target's>"),
        "{table}"
    );
    let described = kubectl.ok(&["describe", "statefulsets.apps.kruise.io", "-n", ns, "db"]);
    assert!(
        described.contains("ResizeStarted"),
        "events on the target: {described}"
    );
    node.stop();
}

const STORAGE_CLASSES: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: expandable}
provisioner: example.test/fake
allowVolumeExpansion: true
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fixed}
provisioner: example.test/fake
"#;

fn migration(ns: &str, name: &str, strategy: &str, sizes: &[(&str, &str)]) -> String {
    let templates: Vec<Value> = sizes
        .iter()
        .map(|(name, storage)| json!({"name": name, "storage": storage}))
        .collect();
    json!({
        "apiVersion": "storage.svm-apiserver.io/v1alpha1",
        "kind": "VolumeClaimMigration",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "target": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"},
            "templates": templates,
            "volumeClaimUpdateStrategy": strategy,
            "maxWaitTime": "120s",
        }
    })
    .to_string()
}

async fn wait_until(
    kubectl: &Kubectl,
    ns: &str,
    name: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    eventually_async(
        LIMIT,
        &format!("VolumeClaimMigration {ns}/{name} where the test waits for it"),
        async || {
            let out = kubectl.run(&["get", "vcm", "-n", ns, name, "-o", "json"]);
            let vcm: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
            if done(&vcm) {
                Ok(vcm)
            } else {
                Err(format!("{vcm:#}"))
            }
        },
    )
    .await
}

fn condition(vcm: &Value, type_: &str) -> Option<(String, String)> {
    vcm["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

fn condition_message(vcm: &Value, type_: &str) -> String {
    vcm["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// What the suite lacks, for one namespace's StatefulSet `db`: the kubelet, the PV binder and
/// provisioner, the external resizer and, for an Advanced StatefulSet, OpenKruise's controller,
/// played every 100 ms; and a watch of the namespace's StatefulSets and pods that records what
/// kube-controller-manager did to them.
struct Node {
    ns: String,
    statefulsets: Api<DynamicObject>,
    claims: Api<PersistentVolumeClaim>,
    pods: Api<Pod>,
    kubectl: Kubectl,
    class: String,
    state: Arc<Mutex<NodeState>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct NodeState {
    /// Claims in the order the resizer saw their request grow (or shrink).
    resized: Vec<String>,
    /// Claims whose next resize needs the pod restarted, and the pod uid seen when it did.
    file_system: BTreeMap<String, Option<String>>,
    /// Claims whose resize to the given size the resizer declares infeasible.
    infeasible: BTreeMap<String, String>,
    /// StatefulSets the watch saw deleting with the `orphan` finalizer (an orphan delete).
    orphaned: Vec<String>,
    /// StatefulSets the watch saw go.
    gone: Vec<String>,
    /// Each StatefulSet the watch saw, in order, with `spec.replicas` as first seen: what it
    /// was created with (a re-create that reverted an edit would show the old count here).
    first_seen: Vec<(String, Option<i64>)>,
    /// Pods the watch saw without a controller (their owner references taken off).
    released: BTreeSet<String>,
}

impl Node {
    /// An apps/v1 StatefulSet `db`, its pods and claims made by the real StatefulSet
    /// controller; returns once every pod is Ready and every claim bound.
    async fn start(
        client: &kube::Client,
        kubectl: &Kubectl,
        ns: &str,
        replicas: i32,
        templates: &[&str],
        class: &str,
    ) -> Node {
        let shape = Shape {
            api_version: "apps/v1",
            replicas,
            templates,
            class,
        };
        Node::start_as(client, kubectl, ns, &shape).await
    }

    async fn start_as(
        client: &kube::Client,
        kubectl: &Kubectl,
        ns: &str,
        shape: &Shape<'_>,
    ) -> Node {
        let Shape {
            api_version,
            replicas,
            templates,
            class,
        } = *shape;
        crate::world::namespace_for_pods(client, kubectl, ns, LIMIT).await;
        kubectl.ok_stdin(&["create", "-f", "-"], &statefulset(ns, shape));
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = GroupVersionKind::gvk(group, version, "StatefulSet");
        let mut node = Node {
            ns: ns.to_string(),
            statefulsets: Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&kind)),
            claims: Api::namespaced(client.clone(), ns),
            pods: Api::namespaced(client.clone(), ns),
            kubectl: kubectl.clone(),
            class: class.to_string(),
            state: Arc::default(),
            tasks: Vec::new(),
        };
        let kruise = api_version != "apps/v1";
        if kruise {
            // OpenKruise's controller, played: the claims first, as it makes them.
            for ordinal in 0..replicas {
                for template in templates {
                    node.create_claim(&format!("{template}-db-{ordinal}")).await;
                }
            }
        }
        node.tasks.push(tokio::spawn(watch_statefulsets(
            node.statefulsets.clone(),
            node.state.clone(),
        )));
        node.tasks.push(tokio::spawn(watch_pods(
            node.pods.clone(),
            node.state.clone(),
        )));
        node.tasks.push(tokio::spawn(run(
            kruise.then(|| (node.statefulsets.clone(), replicas)),
            node.claims.clone(),
            node.pods.clone(),
            node.state.clone(),
        )));
        node.wait_running(replicas, templates).await;
        if !kruise {
            for pod in node.pods.list(&ListParams::default()).await.expect("pods") {
                assert_eq!(
                    crate::world::creator(&pod.metadata),
                    "kube-controller-manager",
                    "pods made by the StatefulSet controller: {:?}",
                    pod.metadata
                );
            }
            for claim in node
                .claims
                .list(&ListParams::default())
                .await
                .expect("claims")
            {
                assert_eq!(
                    crate::world::creator(&claim.metadata),
                    "kube-controller-manager",
                    "claims made by the StatefulSet controller: {:?}",
                    claim.metadata
                );
            }
        }
        node
    }

    /// Until every pod `db-<ordinal>` is Ready and every claim of the templates is bound.
    async fn wait_running(&self, replicas: i32, templates: &[&str]) {
        eventually_async_every(
            LIMIT,
            STEP,
            &format!("{}: StatefulSet db running", self.ns),
            async || {
                let pods = self.pods.list(&ListParams::default()).await.expect("pods");
                let claims = self
                    .claims
                    .list(&ListParams::default())
                    .await
                    .expect("claims");
                let ready: BTreeSet<String> = pods
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                let bound = bound_claims(&claims.items);
                let all = (0..replicas).all(|ordinal| {
                    ready.contains(&format!("db-{ordinal}"))
                        && templates
                            .iter()
                            .all(|t| bound.contains(&format!("{t}-db-{ordinal}")))
                });
                if all {
                    Ok(())
                } else {
                    Err(format!("pods ready {ready:?}, claims bound {bound:?}"))
                }
            },
            async || self.table(),
        )
        .await
    }

    /// `kubectl get statefulset,pods,pvc -o wide` in the namespace (for failure messages).
    fn table(&self) -> String {
        self.kubectl
            .run(&["get", "statefulset,pods,pvc", "-n", &self.ns, "-o", "wide"])
            .stdout
    }

    fn file_system_resize_for(&self, claim: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.file_system.insert(claim.to_string(), None);
        }
    }

    fn infeasible_at(&self, claim: &str, size: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.infeasible.insert(claim.to_string(), size.to_string());
        }
    }

    fn orphaned(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.orphaned.clone())
            .unwrap_or_default()
    }

    fn gone(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.gone.clone())
            .unwrap_or_default()
    }

    /// `spec.replicas` of StatefulSet `uid` as the watch first saw it.
    fn first_seen_replicas(&self, uid: &str) -> Option<i64> {
        self.state.lock().ok().and_then(|s| {
            s.first_seen
                .iter()
                .find(|(seen, _)| seen == uid)
                .and_then(|(_, replicas)| *replicas)
        })
    }

    fn released(&self) -> BTreeSet<String> {
        self.state
            .lock()
            .map(|s| s.released.clone())
            .unwrap_or_default()
    }

    /// The uid of StatefulSet `db` while it exists.
    async fn statefulset_uid(&self) -> Option<String> {
        self.statefulsets
            .get_opt("db")
            .await
            .ok()
            .flatten()
            .and_then(|s| s.metadata.uid)
    }

    /// Pod name → uid of the pods whose controller is the StatefulSet `owner`.
    async fn owned_pods(&self, owner: &str) -> BTreeMap<String, String> {
        let list = self.pods.list(&ListParams::default()).await.expect("pods");
        list.items
            .into_iter()
            .filter(|p| controller_uid(p).as_deref() == Some(owner))
            .map(|p| {
                (
                    p.metadata.name.unwrap_or_default(),
                    p.metadata.uid.unwrap_or_default(),
                )
            })
            .collect()
    }

    async fn claim_uids(&self) -> BTreeMap<String, String> {
        let list = self
            .claims
            .list(&ListParams::default())
            .await
            .expect("claims");
        list.items
            .into_iter()
            .map(|c| {
                (
                    c.metadata.name.unwrap_or_default(),
                    c.metadata.uid.unwrap_or_default(),
                )
            })
            .collect()
    }

    fn resize_order(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.resized.clone())
            .unwrap_or_default()
    }

    /// A claim of 10Gi as OpenKruise's controller makes it (the played binder binds it).
    async fn create_claim(&self, name: &str) {
        let claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.ns, "labels": {"app": "db"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": self.class,
                "resources": {"requests": {"storage": "10Gi"}},
            }
        });
        self.kubectl
            .ok_stdin(&["create", "-f", "-"], &claim.to_string());
    }

    /// Deleted, and gone: the real PVC-protection controller removes the
    /// `kubernetes.io/pvc-protection` finalizer the admission added (no scheduled pod uses the
    /// claim: nothing is ever scheduled here).
    async fn delete_claim(&self, name: &str) {
        self.kubectl
            .ok(&["delete", "pvc", "-n", &self.ns, name, "--wait=false"]);
        eventually_async_every(
            LIMIT,
            STEP,
            &format!("claim {name} gone"),
            async || match self.claims.get_opt(name).await {
                Ok(Some(claim)) => Err(format!("{claim:?}")),
                _ => Ok(()),
            },
            async || String::new(),
        )
        .await;
    }

    /// Until claim `name` exists again with another uid than `old_uid`, bound.
    async fn claim_made_again(&self, name: &str, old_uid: &str) -> PersistentVolumeClaim {
        eventually_async_every(
            LIMIT,
            STEP,
            &format!("claim {name} made again (a uid other than {old_uid}) and bound"),
            async || match self.claims.get_opt(name).await {
                Ok(Some(claim))
                    if claim.metadata.uid.as_deref() != Some(old_uid)
                        && bound_claims(std::slice::from_ref(&claim)).contains(name) =>
                {
                    Ok(claim)
                }
                Ok(Some(claim)) => Err(format!(
                    "uid {:?}, phase {:?}",
                    claim.metadata.uid,
                    claim.status.and_then(|s| s.phase)
                )),
                other => Err(format!("{other:?}")),
            },
            async || self.table(),
        )
        .await
    }

    /// Each claim's (request, capacity).
    async fn claims(&self) -> BTreeMap<String, (String, String)> {
        let list = self
            .claims
            .list(&ListParams::default())
            .await
            .expect("claims");
        list.items
            .into_iter()
            .map(|c| {
                let size = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
                    q.map(|q| q.0.clone()).unwrap_or_default()
                };
                let spec = c.spec.as_ref().and_then(|s| s.resources.as_ref());
                let requested = size(spec.and_then(|r| r.requests.as_ref()?.get("storage")));
                let status = c.status.as_ref().and_then(|s| s.capacity.as_ref());
                let capacity = size(status.and_then(|c| c.get("storage")));
                (c.metadata.name.unwrap_or_default(), (requested, capacity))
            })
            .collect()
    }

    async fn pod_uid(&self, name: &str) -> String {
        eventually_async(LIMIT, &format!("pod {name}"), async || {
            match self.pods.get(name).await {
                Ok(pod) if pod.metadata.deletion_timestamp.is_none() => {
                    Ok(pod.metadata.uid.unwrap_or_default())
                }
                Ok(pod) => Err(format!(
                    "being deleted ({:?})",
                    pod.metadata.deletion_timestamp
                )),
                Err(err) => Err(err.to_string()),
            }
        })
        .await
    }

    fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn bound_claims(claims: &[PersistentVolumeClaim]) -> BTreeSet<String> {
    claims
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// The StatefulSet `db` of a Node.
#[derive(Clone, Copy)]
struct Shape<'a> {
    api_version: &'a str,
    replicas: i32,
    templates: &'a [&'a str],
    class: &'a str,
}

fn statefulset(ns: &str, shape: &Shape<'_>) -> String {
    let Shape {
        api_version,
        replicas,
        templates,
        class,
    } = *shape;
    let claims: Vec<Value> = templates
        .iter()
        .map(|t| {
            json!({
                "metadata": {"name": t},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class,
                    "resources": {"requests": {"storage": "10Gi"}},
                }
            })
        })
        .collect();
    json!({
        "apiVersion": api_version,
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": ns},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "example.test/db:1"}]},
            },
            "volumeClaimTemplates": claims,
        }
    })
    .to_string()
}

/// The loop of the played components, every 100 ms: OpenKruise's controller (for an Advanced
/// StatefulSet `kruise`: the target and its replicas), the binder, the kubelet, the resizer.
async fn run(
    kruise: Option<(Api<DynamicObject>, i32)>,
    claims: Api<PersistentVolumeClaim>,
    pods: Api<Pod>,
    state: Arc<Mutex<NodeState>>,
) {
    loop {
        if let Some((statefulsets, replicas)) = &kruise {
            keep_kruise_pods(statefulsets, &pods, *replicas).await;
        }
        bind(&claims).await;
        run_pods(&pods, &claims).await;
        resize(&claims, &pods, &state).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The namespace's StatefulSets as the watch sees them: deleting with the `orphan` finalizer,
/// gone.
async fn watch_statefulsets(statefulsets: Api<DynamicObject>, state: Arc<Mutex<NodeState>>) {
    let mut events = watcher::watcher(statefulsets, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let Ok(mut state) = state.lock() else {
            return;
        };
        match event {
            Ok(watcher::Event::Apply(sts) | watcher::Event::InitApply(sts)) => {
                let uid = sts.metadata.uid.clone().unwrap_or_default();
                if !state.first_seen.iter().any(|(seen, _)| *seen == uid) {
                    let replicas = sts.data.pointer("/spec/replicas").and_then(Value::as_i64);
                    state.first_seen.push((uid.clone(), replicas));
                }
                let orphan = sts
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == "orphan");
                if sts.metadata.deletion_timestamp.is_some()
                    && orphan
                    && !state.orphaned.contains(&uid)
                {
                    state.orphaned.push(uid);
                }
            }
            Ok(watcher::Event::Delete(sts)) => {
                state.gone.push(sts.metadata.uid.unwrap_or_default());
            }
            _ => {}
        }
    }
}

/// The namespace's pods as the watch sees them: without a controller.
async fn watch_pods(pods: Api<Pod>, state: Arc<Mutex<NodeState>>) {
    let mut events = watcher::watcher(pods, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event
            && controller_uid(&pod).is_none()
            && let Ok(mut state) = state.lock()
        {
            state.released.insert(pod.metadata.name.unwrap_or_default());
        }
    }
}

fn controller_uid(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// OpenKruise's controller, played: every pod of the Advanced StatefulSet exists, owned by it.
async fn keep_kruise_pods(statefulsets: &Api<DynamicObject>, pods: &Api<Pod>, replicas: i32) {
    let Ok(Some(owner)) = statefulsets.get_opt("db").await else {
        return;
    };
    if owner.metadata.deletion_timestamp.is_some() {
        return;
    }
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return;
    };
    let api_version = owner
        .types
        .as_ref()
        .map(|t| t.api_version.clone())
        .unwrap_or_default();
    let reference = json!([{"apiVersion": api_version, "kind": "StatefulSet", "name": "db",
                            "uid": owner.metadata.uid, "controller": true,
                            "blockOwnerDeletion": true}]);
    let present: BTreeSet<String> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    for ordinal in 0..replicas {
        let name = format!("db-{ordinal}");
        if present.contains(&name) {
            continue;
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "db"}, "ownerReferences": reference},
            "spec": {"containers": [{"name": "db", "image": "example.test/db:1"}]},
        }))
        .expect("pod");
        let _ = pods.create(&Default::default(), &pod).await;
    }
}

/// The PV binder and a provisioner, played: a claim not yet bound gets a volume name and is
/// bound at its request.
async fn bind(claims: &Api<PersistentVolumeClaim>) {
    let Ok(list) = claims.list(&ListParams::default()).await else {
        return;
    };
    let bound = bound_claims(&list.items);
    for claim in &list.items {
        let name = claim.metadata.name.clone().unwrap_or_default();
        if bound.contains(&name) || claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let spec = claim.spec.clone().unwrap_or_default();
        let Some(requested) = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref()?.get("storage").cloned())
        else {
            continue;
        };
        if spec.volume_name.is_none() {
            let namespace = claim.metadata.namespace.clone().unwrap_or_default();
            let volume = json!({"spec": {"volumeName": format!("pv-{namespace}-{name}")}});
            if claims
                .patch(&name, &PatchParams::default(), &Patch::Merge(&volume))
                .await
                .is_err()
            {
                continue;
            }
        }
        let status = json!({"status": {"phase": "Bound", "accessModes": spec.access_modes,
                                       "capacity": {"storage": requested.0}}});
        let _ = claims
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
}

/// The kubelet, played: a pod whose claims are all bound is Running and Ready.
async fn run_pods(pods: &Api<Pod>, claims: &Api<PersistentVolumeClaim>) {
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return;
    };
    let waiting: Vec<&Pod> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !is_ready(p))
        .collect();
    if waiting.is_empty() {
        return;
    }
    let Ok(all_claims) = claims.list(&ListParams::default()).await else {
        return;
    };
    let bound = bound_claims(&all_claims.items);
    for pod in waiting {
        let needs_bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .all(|c| bound.contains(&c.claim_name));
        if !needs_bound {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ready = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}
        ]}});
        let _ = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&ready))
            .await;
    }
}

/// The external resizer and the kubelet's file-system resize.
async fn resize(
    claims: &Api<PersistentVolumeClaim>,
    pods: &Api<Pod>,
    state: &Arc<Mutex<NodeState>>,
) {
    let Ok(list) = claims.list(&ListParams::default()).await else {
        return;
    };
    for claim in list.items {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let requested = claim.spec.as_ref().and_then(|s| {
            s.resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("storage")
                .cloned()
        });
        let capacity = claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref()?.get("storage").cloned());
        let (Some(requested), Some(capacity)) = (requested, capacity) else {
            continue;
        };
        let pending_fs = state
            .lock()
            .ok()
            .and_then(|s| s.file_system.get(&name).cloned());
        let infeasible = state
            .lock()
            .ok()
            .and_then(|s| s.infeasible.get(&name).cloned())
            .is_some_and(|size| size == requested.0);
        let said_infeasible = claim
            .status
            .as_ref()
            .and_then(|s| {
                s.allocated_resource_statuses
                    .as_ref()?
                    .get("storage")
                    .cloned()
            })
            .is_some();
        if infeasible {
            if !said_infeasible {
                let status = json!({"status": {
                    "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"},
                    "conditions": [{"type": "ControllerResizeError", "status": "True",
                                    "message": "the backend has no room for this size"}]
                }});
                let _ = claims
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
            }
            continue;
        }
        if requested != capacity {
            if let Ok(mut s) = state.lock() {
                s.resized.push(name.clone());
            }
            let mut status = json!({"status": {
                "capacity": {"storage": requested.0},
                "allocatedResourceStatuses": null,
                "conditions": null,
            }});
            if pending_fs.is_some() {
                // The volume grew; the file system waits for the pod to restart.
                status["status"]["conditions"] =
                    json!([{"type": "FileSystemResizePending", "status": "True"}]);
                let pod = pod_of(&name);
                let uid = pods.get(&pod).await.ok().and_then(|p| p.metadata.uid);
                if let Ok(mut s) = state.lock() {
                    s.file_system.insert(name.clone(), uid);
                }
            }
            let _ = claims
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
            continue;
        }
        if let Some(Some(old_uid)) = pending_fs {
            let now = pods
                .get(&pod_of(&name))
                .await
                .ok()
                .and_then(|p| p.metadata.uid);
            if now.is_some_and(|uid| uid != old_uid) {
                let done = json!({"status": {"conditions": []}});
                if claims
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&done))
                    .await
                    .is_ok()
                    && let Ok(mut s) = state.lock()
                {
                    s.file_system.remove(&name);
                }
            }
        }
    }
}

/// `data-db-1` → `db-1`.
fn pod_of(claim: &str) -> String {
    let ordinal = claim.rsplit('-').next().unwrap_or_default();
    format!("db-{ordinal}")
}
