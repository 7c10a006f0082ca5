//! VolumeClaimMigrations on the real kube-apiserver, whose validation is what matters here:
//! expansion only where the StorageClass allows it (the PersistentVolumeClaimResize admission),
//! no request below a claim's capacity. The suite has no kube-controller-manager, scheduler or
//! kubelet, so [`Node`] plays them in each namespace: the StatefulSet controller (pods
//! `<sts>-<ordinal>`, re-created when deleted, Ready), the PV binder (claims bound at their
//! size) and the external resizer and kubelet (a grown request becomes the claim's capacity;
//! for chosen claims first `FileSystemResizePending`, finished only once the pod was
//! re-created). One cluster serves every scenario, each in its own namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use crate::support::kubectl::Kubectl;
use crate::support::real_cluster::RealCluster;

const TEST: &str = "volume_claim_migrations_resize_claims_as_the_real_apiserver_allows";
/// A hang guard, not a speed check.
const LIMIT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_claim_migrations_resize_claims_as_the_real_apiserver_allows() {
    let Some(cluster) = RealCluster::start(
        TEST,
        &[],
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
    let client = cluster.plane.client().await;

    rolling_update_ordinal_by_ordinal(&cluster, &kubectl, &client).await;
    a_class_without_expansion_is_refused_up_front(&kubectl, &client).await;
    on_delete_waits_for_a_recreated_claim(&kubectl, &client).await;
    a_quota_stops_the_rollout_until_it_is_raised(&kubectl, &client).await;
    a_size_lowered_after_a_failure_is_honoured(&kubectl, &client).await;
    an_apps_v1_statefulset_is_recreated_keeping_pods_and_claims(&kubectl, &client).await;
    an_advanced_statefulset_is_resized_to_its_own_templates(&kubectl, &client).await;
}

/// 5 replicas, 2 templates, `OnPodRollingUpdate`: ordinal by ordinal from the highest, one
/// claim's file system resized through a pod restart; kubectl sees it all.
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
    node.delete_claim("data-db-0").await;
    node.create_claim("data-db-0").await;
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
    // 30Gi used; room for one claim to grow by 10Gi. No quota controller runs here, so the
    // test writes the quota's status as it would.
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "storage", "namespace": ns},
                "spec": {"hard": {"requests.storage": "45Gi"}}})
        .to_string(),
    );
    let quota_status = |hard: &str| {
        json!({"status": {"hard": {"requests.storage": hard}, "used": {"requests.storage": "30Gi"}}})
            .to_string()
    };
    kubectl.ok(&[
        "patch",
        "resourcequota",
        "storage",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &quota_status("45Gi"),
    ]);
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
    kubectl.ok(&[
        "patch",
        "resourcequota",
        "storage",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &quota_status("100Gi"),
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

/// `recreateStatefulSet`: once every claim is resized the StatefulSet is deleted with orphan
/// cascade (the played garbage collector sees the `orphan` finalizer kube-apiserver adds for
/// it; a cascading deletion would have taken the pods) and created again with the new sizes.
/// Every pod and claim keeps its uid; the new StatefulSet adopts the pods.
async fn an_apps_v1_statefulset_is_recreated_keeping_pods_and_claims(
    kubectl: &Kubectl,
    client: &kube::Client,
) {
    let ns = "recreate";
    let node = Node::start(client, kubectl, ns, 3, &["data"], "expandable").await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let old = statefulsets.get("db").await.expect("statefulset");
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    let deadline = Instant::now() + LIMIT;
    let mut pods_before = node.owned_pods(&old_uid).await;
    while pods_before.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "pods never came: {pods_before:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        pods_before = node.owned_pods(&old_uid).await;
    }
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
    assert_eq!(
        node.orphaned(),
        vec![old_uid.clone()],
        "deleted with orphan cascade"
    );
    assert_eq!(node.claim_uids().await, claims_before, "claims kept");
    while node.owned_pods(&new_uid).await != pods_before {
        assert!(
            Instant::now() < deadline,
            "pods kept and adopted: {pods_before:?} vs {:?}",
            node.owned_pods(&new_uid).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let described = kubectl.ok(&["describe", "vcm", "-n", ns, "grow"]);
    assert!(
        described.contains("RecreatingStatefulSet") && described.contains("StatefulSetRecreated"),
        "{described}"
    );
    node.stop();
}

/// OpenKruise's Advanced StatefulSet (its CRD in tests/fixtures/kruise): its templates may be
/// edited, so the migration names no sizes and reads them from the target; 3 replicas, 2
/// templates, highest ordinal first. Re-creating is refused for it (nothing to re-create).
async fn an_advanced_statefulset_is_resized_to_its_own_templates(
    kubectl: &Kubectl,
    client: &kube::Client,
) {
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kruise/statefulsets.apps.kruise.io.yaml"
    );
    kubectl.ok(&["apply", "-f", crd]);
    kubectl.ok(&[
        "wait",
        "crd/statefulsets.apps.kruise.io",
        "--for=condition=Established",
        "--timeout=60s",
    ]);
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
    let deadline = Instant::now() + LIMIT;
    loop {
        let out = kubectl.run(&["get", "vcm", "-n", ns, name, "-o", "json"]);
        let vcm: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        if done(&vcm) {
            return vcm;
        }
        assert!(Instant::now() < deadline, "{ns}/{name}: {vcm:#}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
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

/// The cluster's controllers and kubelet for one namespace's StatefulSet `db`.
struct Node {
    ns: String,
    claims: Api<PersistentVolumeClaim>,
    pods: Api<Pod>,
    kubectl: Kubectl,
    class: String,
    state: Arc<Mutex<NodeState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct NodeState {
    /// Claims in the order the resizer saw their request grow (or shrink).
    resized: Vec<String>,
    /// Claims whose next resize needs the pod restarted, and the pod uid seen when it did.
    file_system: BTreeMap<String, Option<String>>,
    /// Claims whose resize to the given size the resizer declares infeasible.
    infeasible: BTreeMap<String, String>,
    /// StatefulSets the garbage collector orphaned (deleted with the `orphan` finalizer).
    orphaned: Vec<String>,
}

impl Node {
    /// An apps/v1 StatefulSet `db`.
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
        kubectl.ok(&["create", "namespace", ns]);
        // No controller-manager makes the namespace's default ServiceAccount.
        kubectl.ok(&["create", "serviceaccount", "default", "-n", ns]);
        kubectl.ok_stdin(&["create", "-f", "-"], &statefulset(ns, shape));
        let node = Node {
            ns: ns.to_string(),
            claims: Api::namespaced(client.clone(), ns),
            pods: Api::namespaced(client.clone(), ns),
            kubectl: kubectl.clone(),
            class: class.to_string(),
            state: Arc::default(),
            task: tokio::spawn(async {}),
        };
        for ordinal in 0..replicas {
            for template in templates {
                node.create_claim(&format!("{template}-db-{ordinal}")).await;
            }
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = GroupVersionKind::gvk(group, version, "StatefulSet");
        let statefulsets = Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&kind));
        let task = tokio::spawn(run(
            statefulsets,
            node.claims.clone(),
            node.pods.clone(),
            node.state.clone(),
            replicas,
        ));
        Node { task, ..node }
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

    /// A claim bound at 10Gi, as the StatefulSet controller and the binder leave it.
    async fn create_claim(&self, name: &str) {
        let claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": self.class,
                "volumeName": format!("pv-{}-{name}", self.ns),
                "resources": {"requests": {"storage": "10Gi"}},
            }
        });
        self.kubectl
            .ok_stdin(&["create", "-f", "-"], &claim.to_string());
        let status = json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}}});
        self.claims
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("binding {name}: {e}"));
    }

    /// Deleted as kube-controller-manager would let it go: the `kubernetes.io/pvc-protection`
    /// finalizer the admission adds is removed at once (no pod uses it here).
    async fn delete_claim(&self, name: &str) {
        self.kubectl
            .ok(&["delete", "pvc", "-n", &self.ns, name, "--wait=false"]);
        self.kubectl.ok(&[
            "patch",
            "pvc",
            "-n",
            &self.ns,
            name,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
        let deadline = Instant::now() + LIMIT;
        while self.claims.get_opt(name).await.ok().flatten().is_some() {
            assert!(Instant::now() < deadline, "claim {name} never went");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Ok(pod) = self.pods.get(name).await
                && pod.metadata.deletion_timestamp.is_none()
            {
                return pod.metadata.uid.unwrap_or_default();
            }
            assert!(Instant::now() < deadline, "pod {name} never came");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// The StatefulSet `db` a Node plays the controllers of.
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

/// The loop of the played controllers and kubelet, every 100 ms.
async fn run(
    statefulsets: Api<DynamicObject>,
    claims: Api<PersistentVolumeClaim>,
    pods: Api<Pod>,
    state: Arc<Mutex<NodeState>>,
    replicas: i32,
) {
    loop {
        let owner = collect_garbage(&statefulsets, &pods, &state).await;
        if let Some((api_version, uid)) = owner {
            keep_pods(&pods, &api_version, &uid, replicas).await;
        }
        resize(&claims, &pods, &state).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The garbage collector: a StatefulSet deleted with the `orphan` finalizer loses it once its
/// pods' owner references are removed; pods whose owner is gone otherwise are deleted (a
/// cascading deletion). Returns the StatefulSet's apiVersion and uid while it exists and is
/// not deleted.
async fn collect_garbage(
    statefulsets: &Api<DynamicObject>,
    pods: &Api<Pod>,
    state: &Arc<Mutex<NodeState>>,
) -> Option<(String, String)> {
    let current = statefulsets.get_opt("db").await.ok()?;
    let uid = current.as_ref().and_then(|s| s.metadata.uid.clone());
    let owner_api_version = current
        .as_ref()
        .and_then(|s| s.types.as_ref())
        .map(|t| t.api_version.clone())
        .unwrap_or_default();
    let list = pods.list(&ListParams::default()).await.ok()?;
    let finalizers = current
        .as_ref()
        .and_then(|s| s.metadata.finalizers.clone())
        .unwrap_or_default();
    let deleting = current
        .as_ref()
        .is_some_and(|s| s.metadata.deletion_timestamp.is_some());
    if deleting && finalizers.iter().any(|f| f == "orphan") {
        for pod in &list.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let orphan = json!({"metadata": {"ownerReferences": null}});
            let _ = pods
                .patch(&name, &PatchParams::default(), &Patch::Merge(&orphan))
                .await;
        }
        let rest: Vec<&String> = finalizers.iter().filter(|f| *f != "orphan").collect();
        let release = json!({"metadata": {"finalizers": rest}});
        if statefulsets
            .patch("db", &PatchParams::default(), &Patch::Merge(&release))
            .await
            .is_ok()
            && let (Ok(mut state), Some(uid)) = (state.lock(), uid.clone())
        {
            state.orphaned.push(uid);
        }
        return None;
    }
    for pod in &list.items {
        let owner = controller_uid(pod);
        if owner.is_some() && owner != uid {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let _ = pods.delete(&name, &Default::default()).await;
        }
    }
    uid.filter(|_| !deleting)
        .map(|uid| (owner_api_version, uid))
}

fn controller_uid(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// The StatefulSet controller and the kubelet: every pod exists, is Ready and is owned by
/// the StatefulSet (orphans are adopted).
async fn keep_pods(pods: &Api<Pod>, api_version: &str, owner: &str, replicas: i32) {
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return;
    };
    let reference = json!([{"apiVersion": api_version, "kind": "StatefulSet", "name": "db",
                            "uid": owner, "controller": true, "blockOwnerDeletion": true}]);
    for pod in list.items.iter().filter(|p| controller_uid(p).is_none()) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let adopt = json!({"metadata": {"ownerReferences": reference}});
        let _ = pods
            .patch(&name, &PatchParams::default(), &Patch::Merge(&adopt))
            .await;
    }
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
        if pods.create(&Default::default(), &pod).await.is_ok() {
            let ready = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"}
            ]}});
            let _ = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&ready))
                .await;
        }
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
