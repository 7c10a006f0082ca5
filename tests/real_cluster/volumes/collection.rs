//! Kubernetes' garbage collector and namespace controller working on our own kind: the real
//! kube-controller-manager (its defaults) discovers `volumeclaimmigrations` through the
//! aggregator and reaches them with client-go's metadata client: its informers watch them
//! (watch-list, protobuf frames), its GETs and LISTs ask for PartialObjectMetadata(List) in
//! protobuf first, its deletes, `deletecollection`s and patches carry JSON bodies (client-go
//! 1.36's metadata client sends DeleteOptions and patches as JSON). Nothing here is played but
//! the kubelet, binder and resizer of [`Node`] in the deleted namespace. What
//! kube-controller-manager asked of our groups and what it was answered is read from
//! kube-apiserver's audit log (the aggregator records the code of each proxied answer) and our
//! own `/metrics`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::{KCM_USER, LIMIT, Node, STEP, migration, wait_until};
use crate::support::audit::{AuditLog, AuditedRequest};
use crate::support::controller_manager::ControllerManager;
use crate::support::kubectl::Kubectl;
use crate::support::real_cluster::RealCluster;
use crate::support::wait::eventually_async_every;

const GROUP: &str = "storage.svm-apiserver.io";

fn migrations(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let kind = GroupVersionKind::gvk(GROUP, "v1alpha1", "VolumeClaimMigration");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&kind))
}

/// A namespace holding a StatefulSet with its pods and claims, three VolumeClaimMigrations (one
/// at work on the claims, one waiting for `OnDelete`, one paused), a ConfigMap owned by one of
/// them, and a Secret is deleted: the namespace controller finds our namespaced kind in
/// discovery, deletes its objects (a `deletecollection` in the audit log) and the namespace
/// goes. Nothing of ours is left in etcd.
pub(super) async fn a_namespace_holding_our_objects_is_deleted(
    cluster: &RealCluster,
    kubectl: &Kubectl,
    client: &kube::Client,
    audit: &AuditLog,
) {
    let ns = "doomed";
    let node = Node::start(client, kubectl, ns, 2, &["data"], "expandable").await;
    node.file_system_resize_for("data-db-1");
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &migration(ns, "at-work", "OnPodRollingUpdate", &[("data", "20Gi")]),
    );
    kubectl.ok_stdin(
        &["create", "-f", "-"],
        &migration(ns, "waiting", "OnDelete", &[("data", "30Gi")]),
    );
    let mut paused: Value =
        serde_json::from_str(&migration(ns, "paused", "OnDelete", &[("data", "40Gi")]))
            .expect("migration");
    paused["spec"]["paused"] = json!(true);
    let paused_uid = create(kubectl, &paused);
    create(
        kubectl,
        &owned_config_map(ns, "of-paused", "paused", &paused_uid, false),
    );
    kubectl.ok(&[
        "create",
        "secret",
        "generic",
        "plain",
        "-n",
        ns,
        "--from-literal=k=v",
    ]);
    // Our controller is at work in it: the first claim resized.
    wait_until(kubectl, ns, "at-work", |vcm| {
        vcm["status"]["claims"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["phase"] == "Resized"))
    })
    .await;
    let prefix = cluster.svm.etcd_prefix().unwrap_or("/").to_string();
    let ours_in_etcd = || async {
        cluster
            .plane
            .etcd_get_prefix(&prefix)
            .await
            .into_iter()
            .filter(|(key, _)| key.contains("volumeclaimmigrations/doomed/"))
            .count()
    };
    assert_eq!(ours_in_etcd().await, 3);

    let started = Instant::now();
    kubectl.ok(&["delete", "namespace", ns, "--wait=false"]);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut last_seen = None;
    eventually_async_every(
        // Counted from before the delete, as the time it took is.
        LIMIT.saturating_sub(started.elapsed()),
        STEP,
        &format!("namespace {ns} gone"),
        async || match namespaces.get_opt(ns).await {
            Ok(None) => Ok(()),
            Ok(Some(seen)) => {
                let status = format!("{:#?}", seen.status);
                last_seen = Some(seen);
                Err(status)
            }
            Err(err) => panic!("GET namespace {ns}: {err}"),
        },
        async || {
            format!(
                "what is left:\n{}",
                kubectl
                    .run(&["get", "vcm,statefulset,pods,pvc,configmap,secret", "-n", ns])
                    .stdout
            )
        },
    )
    .await;
    let took = started.elapsed();
    node.stop();
    let conditions: Vec<String> = last_seen
        .and_then(|n| n.status?.conditions)
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={} ({})",
                c.type_,
                c.status,
                c.reason.unwrap_or_default()
            )
        })
        .collect();
    println!(
        "namespace {ns} gone {:.1} s after its deletion; its last conditions: {conditions:?}",
        took.as_secs_f64()
    );
    assert_eq!(ours_in_etcd().await, 0, "our objects of {ns} left in etcd");
    let listed = kubectl.ok(&["get", "vcm", "-A", "-o", "name"]);
    assert!(!listed.contains("at-work"), "{listed}");
    // The namespace controller deleted them: its deletecollection of our resource, answered.
    let collections: Vec<AuditedRequest> = audit
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == KCM_USER
                && r.component() == "namespace-controller"
                && r.verb == "deletecollection"
                && r.uri.starts_with(&format!(
                    "/apis/{GROUP}/v1alpha1/namespaces/{ns}/volumeclaimmigrations"
                ))
        })
        .collect();
    println!("the namespace controller's deletecollection of ours: {collections:?}");
    assert!(collections.iter().any(|r| r.code == 200), "{collections:?}");
}

/// Owner references both ways, through the real garbage collector:
/// - our VolumeClaimMigration owned by its StatefulSet, the owner deleted in the background,
///   in the foreground (the migration blocks its owner's deletion until collected) and with
///   orphan cascade (the collector takes the reference off our object with a strategic-merge
///   patch, which we apply as kube-apiserver applies it to built-in kinds; a custom resource
///   would answer 415 and be sent a merge patch instead);
/// - a ConfigMap owned by our migration, ours deleted the same three ways (ours holds the
///   `foregroundDeletion` or `orphan` finalizer until the collector removes it from our object);
/// - dependents whose owner never existed, of each side (the collector asks for the owner, we
///   answer 404): they are collected first, and show that its informers of both kinds have
///   seen every object made before them, so the owners are deleted only after that.
pub(super) async fn owner_references_to_and_from_our_objects(
    kubectl: &Kubectl,
    client: &kube::Client,
) {
    let ns = "owners";
    kubectl.ok(&["create", "namespace", ns]);
    let vcms = migrations(client, ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let mut uids: BTreeMap<String, String> = BTreeMap::new();
    for (owner, block) in [("bg", false), ("fg", true), ("orphan", false)] {
        let sts_uid = create(kubectl, &empty_statefulset(ns, owner));
        let mut vcm: Value = serde_json::from_str(&migration(
            ns,
            &format!("of-{owner}"),
            "OnDelete",
            &[("data", "20Gi")],
        ))
        .expect("migration");
        vcm["spec"]["target"]["name"] = json!(owner);
        vcm["spec"]["paused"] = json!(true);
        vcm["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner, "uid": sts_uid,
            "blockOwnerDeletion": block,
        }]);
        uids.insert(format!("of-{owner}"), create(kubectl, &vcm));
        let mut ours: Value = serde_json::from_str(&migration(
            ns,
            &format!("owner-{owner}"),
            "OnDelete",
            &[("data", "20Gi")],
        ))
        .expect("migration");
        ours["spec"]["paused"] = json!(true);
        let ours_uid = create(kubectl, &ours);
        create(
            kubectl,
            &owned_config_map(
                ns,
                &format!("of-owner-{owner}"),
                &format!("owner-{owner}"),
                &ours_uid,
                block,
            ),
        );
    }
    // The sentinels: owners that never were.
    let never = "6f1b2a4e-0000-4000-8000-000000000000";
    create(
        kubectl,
        &owned_config_map(ns, "of-ghost", "ghost", never, false),
    );
    let mut ghost_owned: Value =
        serde_json::from_str(&migration(ns, "of-ghost", "OnDelete", &[("data", "20Gi")]))
            .expect("migration");
    ghost_owned["spec"]["paused"] = json!(true);
    ghost_owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": never,
    }]);
    create(kubectl, &ghost_owned);
    let started = Instant::now();
    // When each went, as seen by the poll.
    let mut sentinels: BTreeMap<&str, Duration> = BTreeMap::new();
    eventually_async_every(
        LIMIT,
        STEP,
        "both dangling dependents collected",
        async || {
            if !sentinels.contains_key("ConfigMap owned by a missing migration")
                && maps.get_opt("of-ghost").await.ok().flatten().is_none()
            {
                sentinels.insert("ConfigMap owned by a missing migration", started.elapsed());
            }
            if !sentinels.contains_key("migration owned by a missing ConfigMap")
                && vcms.get_opt("of-ghost").await.ok().flatten().is_none()
            {
                sentinels.insert("migration owned by a missing ConfigMap", started.elapsed());
            }
            if sentinels.len() == 2 {
                Ok(())
            } else {
                Err(format!("collected {sentinels:?}"))
            }
        },
        async || {
            kubectl
                .run(&["get", "vcm,configmap", "-n", ns, "-o", "yaml"])
                .stdout
        },
    )
    .await;
    for (what, took) in &sentinels {
        println!("collected, a {what}: {:.1} s", took.as_secs_f64());
    }

    let cascade = |owner: &str| match owner {
        "fg" => "--cascade=foreground",
        "orphan" => "--cascade=orphan",
        _ => "--cascade=background",
    };
    let mut deleted: BTreeMap<String, Instant> = BTreeMap::new();
    for owner in ["bg", "fg", "orphan"] {
        kubectl.ok(&[
            "delete",
            "statefulset",
            owner,
            "-n",
            ns,
            cascade(owner),
            "--wait=false",
        ]);
        deleted.insert(format!("StatefulSet {owner}"), Instant::now());
        kubectl.ok(&[
            "delete",
            "vcm",
            &format!("owner-{owner}"),
            "-n",
            ns,
            cascade(owner),
            "--wait=false",
        ]);
        deleted.insert(format!("migration owner-{owner}"), Instant::now());
    }
    let mut settled: BTreeMap<String, Duration> = BTreeMap::new();
    eventually_async_every(
        LIMIT,
        STEP,
        &format!(
            "{:?} collected as asked",
            deleted.keys().collect::<Vec<_>>()
        ),
        async || {
            for (what, at) in &deleted {
                if settled.contains_key(what) {
                    continue;
                }
                let (kind, name) = what.split_once(' ').unwrap_or_default();
                let owner = name.trim_start_matches("owner-");
                let done = if kind == "StatefulSet" {
                    let owner_gone = statefulsets.get_opt(name).await.ok().flatten().is_none();
                    let dependent = vcms.get_opt(&format!("of-{owner}")).await.ok().flatten();
                    owner_gone
                        && match owner {
                            "orphan" => dependent.is_some_and(|d| {
                                d.metadata.owner_references.unwrap_or_default().is_empty()
                                    && d.metadata.uid.as_ref() == uids.get(&format!("of-{owner}"))
                            }),
                            _ => dependent.is_none(),
                        }
                } else {
                    let owner_gone = vcms.get_opt(name).await.ok().flatten().is_none();
                    let dependent = maps
                        .get_opt(&format!("of-owner-{owner}"))
                        .await
                        .ok()
                        .flatten();
                    owner_gone
                        && match owner {
                            "orphan" => dependent.is_some_and(|d| {
                                d.metadata.owner_references.unwrap_or_default().is_empty()
                            }),
                            _ => dependent.is_none(),
                        }
                };
                if done {
                    settled.insert(what.clone(), at.elapsed());
                }
            }
            if settled.len() == deleted.len() {
                Ok(())
            } else {
                Err(format!("settled {settled:?}"))
            }
        },
        async || {
            kubectl
                .run(&["get", "vcm,statefulset,configmap", "-n", ns, "-o", "yaml"])
                .stdout
        },
    )
    .await;
    for (what, took) in &settled {
        let owner = what.rsplit(['-', ' ']).next().unwrap_or_default();
        let how = match owner {
            "orphan" => "its dependent orphaned",
            _ => "its dependent collected",
        };
        println!(
            "{what} deleted ({}): {how}, {:.1} s",
            cascade(owner).trim_start_matches("--cascade="),
            took.as_secs_f64()
        );
    }
}

/// Every request kube-controller-manager made to our groups, by controller, verb, resource and
/// code (from kube-apiserver's audit log), its error answers in full, our own counts of 4xx and
/// 5xx answers (every client's), and kube-controller-manager's error lines about our groups.
/// None may be a 5xx; a 4xx may only be a 404 (an owner the garbage collector looks for, an
/// object already gone) or a 409 (a precondition or resourceVersion no longer true).
pub(super) async fn what_kube_controller_manager_was_answered(
    cluster: &RealCluster,
    audit: &AuditLog,
    kcm: &ControllerManager,
) {
    let requests: Vec<AuditedRequest> = audit
        .requests()
        .into_iter()
        .filter(|r| r.user == KCM_USER)
        .collect();
    let mut counts: BTreeMap<(String, String, String, u16), usize> = BTreeMap::new();
    for r in &requests {
        *counts
            .entry((
                r.component().to_string(),
                r.verb.clone(),
                resource_of(&r.uri),
                r.code,
            ))
            .or_default() += 1;
    }
    println!(
        "kube-controller-manager's {} requests to our groups (audit log):",
        requests.len()
    );
    for ((component, verb, resource, code), n) in &counts {
        println!("  {component:<28} {verb:<16} {resource:<48} {code} x{n}");
    }
    let errors: Vec<&AuditedRequest> = requests.iter().filter(|r| r.code >= 400).collect();
    for r in &errors {
        println!(
            "  answered {}: {} {} {} ({})",
            r.code,
            r.component(),
            r.verb,
            r.uri,
            r.user_agent
        );
    }
    let ours: Vec<String> = cluster
        .metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("code=\"4") || l.contains("code=\"5"))
        .map(str::to_string)
        .collect();
    println!("svm-apiserver's 4xx/5xx answers to every client (its /metrics):");
    for line in &ours {
        println!("  {line}");
    }
    let kcm_errors: Vec<String> = kcm
        .errors()
        .into_iter()
        .filter(|l| l.contains(GROUP) || l.contains("storagemigration.k8s.io"))
        .collect();
    println!(
        "kube-controller-manager's error lines naming our groups: {}",
        kcm_errors.len()
    );
    for line in kcm_errors.iter().take(20) {
        println!("  {line}");
    }
    assert!(
        !requests.is_empty(),
        "no request of kube-controller-manager audited"
    );
    let unexpected: Vec<&&AuditedRequest> = errors
        .iter()
        .filter(|r| !matches!(r.code, 404 | 409))
        .collect();
    assert!(
        unexpected.is_empty(),
        "answers to kube-controller-manager other than 404/409: {unexpected:#?}"
    );
}

/// `/apis/<g>/<v>/namespaces/<ns>/<resource>/<name>[/<sub>]?…` → `<g>/<resource>[/<sub>]`
/// (discovery paths as they are).
fn resource_of(uri: &str) -> String {
    let path = uri.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        [
            "apis",
            group,
            _version,
            "namespaces",
            _ns,
            resource,
            rest @ ..,
        ] => {
            let sub = rest.get(1).map(|s| format!("/{s}")).unwrap_or_default();
            format!("{group}/{resource}{sub}")
        }
        ["apis", group, _version, resource, rest @ ..] => {
            let sub = rest.get(1).map(|s| format!("/{s}")).unwrap_or_default();
            format!("{group}/{resource}{sub}")
        }
        _ => path.to_string(),
    }
}

/// `kubectl create` an object; its uid.
fn create(kubectl: &Kubectl, object: &Value) -> String {
    kubectl
        .ok_stdin(
            &["create", "-f", "-", "-o", "jsonpath={.metadata.uid}"],
            &object.to_string(),
        )
        .trim()
        .to_string()
}

/// A StatefulSet of no replicas (nothing to run), an owner.
fn empty_statefulset(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 0,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "db", "image": "example.test/db:1"}]},
            },
        }
    })
}

/// A ConfigMap owned by our VolumeClaimMigration `owner`.
fn owned_config_map(ns: &str, name: &str, owner: &str, uid: &str, block: bool) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "ownerReferences": [{
                "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "VolumeClaimMigration",
                "name": owner, "uid": uid, "blockOwnerDeletion": block,
            }],
        },
        "data": {"k": "v"},
    })
}
