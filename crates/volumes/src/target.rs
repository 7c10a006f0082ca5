//! The cluster side of a VolumeClaimMigration: its StatefulSet (apps/v1 or OpenKruise's
//! apps.kruise.io/v1beta1, read as JSON: both have `spec.replicas` and
//! `spec.volumeClaimTemplates`), the claims `<template>-<statefulset>-<ordinal>`, their
//! StorageClasses and the pods `<statefulset>-<ordinal>`, read one by one (no list of a
//! namespace's claims or pods); and the writes: a claim's request, a pod's deletion, the
//! StatefulSet's deletion and creation (`spec.recreateStatefulSet`). Each deletion carries
//! preconditions naming the object as read, so that it never acts on a successor.

use std::collections::BTreeSet;

use http::Method;
use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::{Value, json};

use super::plan::{self, ClaimView, PodView};
use super::recreate::{self, PodsLeft};
use super::template::TemplateTarget;
use svm_api::volumes::{VolumeClaimMigration, quantity_bytes};
use svm_cluster::{ClusterClient, ClusterError};

/// What one pass read.
pub(super) struct Observed {
    pub view: plan::Observed,
    /// The StatefulSet, for its Events.
    pub statefulset: ObjectReference,
}

/// Reads what one pass needs: the StatefulSet (or, while it is replaced, the saved manifest),
/// its claims and their classes, the pods to watch, and how the pods were left.
pub(super) async fn observe(
    cluster: &ClusterClient,
    vcm: &VolumeClaimMigration,
) -> Result<Observed, ClusterError> {
    let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
    let (served, saved) = read_statefulset(cluster, vcm, namespace).await?;
    let seen = served.as_ref().map(seen_statefulset);
    let Some(sts) = served.as_ref().or(saved) else {
        let path = statefulset_path(vcm, namespace);
        return Err(ClusterError::Unexpected(format!("{path}: no StatefulSet")));
    };
    let mut view = plan::Observed {
        replicas: sts
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .and_then(|r| i32::try_from(r).ok())
            .unwrap_or(1),
        templates: templates(vcm, sts),
        statefulset: seen,
        ..Default::default()
    };
    read_claims(cluster, vcm, namespace, &mut view).await?;
    read_pods(cluster, vcm, namespace, &mut view).await?;
    let statefulset = statefulset_reference(vcm, namespace, sts);
    Ok(Observed { view, statefulset })
}

/// The StatefulSet as served (`None` when it is gone while being replaced) and the manifest
/// saved for its re-creation, if any.
async fn read_statefulset<'a>(
    cluster: &ClusterClient,
    vcm: &'a VolumeClaimMigration,
    namespace: &str,
) -> Result<(Option<Value>, Option<&'a Value>), ClusterError> {
    let path = statefulset_path(vcm, namespace);
    // While the StatefulSet is replaced, the saved manifest says what it will be.
    let saved = vcm
        .status
        .recreate
        .as_ref()
        .and_then(|r| r.manifest.as_ref());
    match cluster.get_json::<Value>(&path).await {
        Ok(found) => Ok((Some(found), saved)),
        Err(err) if err.code() == Some(404) && saved.is_some() => Ok((None, saved)),
        Err(err) => Err(err),
    }
}

/// The served StatefulSet as the re-create needs it.
fn seen_statefulset(object: &Value) -> recreate::Seen {
    recreate::Seen {
        uid: text_at(object, "/metadata/uid"),
        resource_version: text_at(object, "/metadata/resourceVersion"),
        deleting: object.pointer("/metadata/deletionTimestamp").is_some(),
        orphaning: object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|f| f == "orphan")),
        object: object.clone(),
    }
}

/// Every claim of every template and ordinal that exists, and whether each claim's class
/// allows expansion.
async fn read_claims(
    cluster: &ClusterClient,
    vcm: &VolumeClaimMigration,
    namespace: &str,
    view: &mut plan::Observed,
) -> Result<(), ClusterError> {
    let target = &vcm.spec.target;
    for ordinal in 0..view.replicas.max(0) {
        for template in &view.templates {
            let name = plan::claim_name(&template.name, &target.name, ordinal);
            let path = format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}");
            if let Some(claim) = get_optional(cluster, &path).await? {
                view.claims.insert(name, claim_view(&claim));
            }
        }
    }
    let classes: BTreeSet<String> = view
        .claims
        .values()
        .filter_map(|c| c.storage_class.clone())
        .collect();
    for class in classes {
        let path = format!("/apis/storage.k8s.io/v1/storageclasses/{class}");
        if let Some(found) = get_optional(cluster, &path).await? {
            let expands = found["allowVolumeExpansion"].as_bool() == Some(true);
            view.storage_classes.insert(class, expands);
        }
    }
    Ok(())
}

/// The pods the plan watches, and — while the StatefulSet is gone — how its pods were left.
async fn read_pods(
    cluster: &ClusterClient,
    vcm: &VolumeClaimMigration,
    namespace: &str,
    view: &mut plan::Observed,
) -> Result<(), ClusterError> {
    let target = &vcm.spec.target;
    for ordinal in ordinals_with_pods_to_watch(vcm, view) {
        let name = plan::pod_name(&target.name, ordinal);
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
        if let Some(pod) = get_optional(cluster, &path).await? {
            view.pods.insert(name, pod_view(&pod));
        }
    }
    if view.statefulset.is_none() {
        let saved_uid = vcm
            .status
            .recreate
            .as_ref()
            .map(|r| r.stateful_set_uid.as_str());
        view.pods_left = pods_left(cluster, vcm, view.replicas, saved_uid.unwrap_or("")).await?;
    }
    Ok(())
}

/// The StatefulSet as its Events name it.
fn statefulset_reference(
    vcm: &VolumeClaimMigration,
    namespace: &str,
    sts: &Value,
) -> ObjectReference {
    let target = &vcm.spec.target;
    ObjectReference {
        api_version: Some(target.api_version.clone()),
        kind: Some(target.kind.clone()),
        name: Some(target.name.clone()),
        namespace: Some(namespace.to_string()),
        uid: Some(text_at(sts, "/metadata/uid")).filter(|u| !u.is_empty()),
        ..Default::default()
    }
}

fn statefulset_path(vcm: &VolumeClaimMigration, namespace: &str) -> String {
    let target = &vcm.spec.target;
    format!(
        "/apis/{}/namespaces/{namespace}/statefulsets/{}",
        target.api_version, target.name
    )
}

fn text_at(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The sizes asked for: the migration's `spec.templates`, or (empty, for an Advanced
/// StatefulSet whose templates are mutable) the target's own templates.
fn templates(vcm: &VolumeClaimMigration, sts: &Value) -> Vec<TemplateTarget> {
    let own: Vec<(String, String)> = sts
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            let name = t.pointer("/metadata/name").and_then(Value::as_str);
            let size = t
                .pointer("/spec/resources/requests/storage")
                .and_then(Value::as_str);
            (
                name.unwrap_or_default().to_string(),
                size.unwrap_or_default().to_string(),
            )
        })
        .collect();
    let own_size = |name: &str| own.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone());
    if vcm.spec.templates.is_empty() {
        return own
            .iter()
            .map(|(name, storage)| TemplateTarget {
                name: name.clone(),
                storage: storage.clone(),
                bytes: quantity_bytes(storage).unwrap_or(0),
                template_bytes: None,
                in_target: true,
            })
            .collect();
    }
    vcm.spec
        .templates
        .iter()
        .map(|t| TemplateTarget {
            name: t.name.clone(),
            storage: t.storage.clone(),
            bytes: quantity_bytes(&t.storage).unwrap_or(0),
            template_bytes: own_size(&t.name).as_deref().and_then(quantity_bytes),
            in_target: own_size(&t.name).is_some(),
        })
        .collect()
}

fn claim_view(claim: &Value) -> ClaimView {
    let text = |pointer: &str| {
        claim
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let fs_resize_pending = claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "FileSystemResizePending" && c["status"] == "True");
    let allocation = text("/status/allocatedResourceStatuses/storage");
    let infeasible = allocation.ends_with("Infeasible").then(|| {
        let said = claim
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|c| c["message"].as_str().filter(|m| !m.is_empty()));
        match said {
            Some(message) => format!("{allocation}: {message}"),
            None => allocation.clone(),
        }
    });
    ClaimView {
        uid: text("/metadata/uid"),
        resource_version: text("/metadata/resourceVersion"),
        storage_class: Some(text("/spec/storageClassName")).filter(|c| !c.is_empty()),
        requested: text("/spec/resources/requests/storage"),
        capacity: text("/status/capacity/storage"),
        fs_resize_pending,
        infeasible,
    }
}

fn pod_view(pod: &Value) -> PodView {
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    PodView {
        uid: pod
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        ready,
    }
}

/// The pods of a StatefulSet found gone while its manifest is saved: whether they show an
/// orphan deletion (every one there without an owner reference to `gone_uid`) or a cascading
/// one (one still owned by it, or none left of `replicas`).
async fn pods_left(
    cluster: &ClusterClient,
    vcm: &VolumeClaimMigration,
    replicas: i32,
    gone_uid: &str,
) -> Result<PodsLeft, ClusterError> {
    let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
    let mut found = 0;
    for ordinal in 0..replicas.max(0) {
        let name = plan::pod_name(&vcm.spec.target.name, ordinal);
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
        let Some(pod) = get_optional(cluster, &path).await? else {
            continue;
        };
        found += 1;
        let owned_by_gone = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|owner| owner["uid"] == gone_uid);
        if owned_by_gone {
            return Ok(PodsLeft::Cascaded);
        }
    }
    Ok(if replicas > 0 && found == 0 {
        PodsLeft::Cascaded
    } else {
        PodsLeft::Orphaned
    })
}

/// Pods are read only where a file-system resize waits for one, or a restart is followed.
fn ordinals_with_pods_to_watch(vcm: &VolumeClaimMigration, view: &plan::Observed) -> Vec<i32> {
    let statefulset = &vcm.spec.target.name;
    let restarted = |name: &str| {
        vcm.status
            .claims
            .iter()
            .any(|c| c.name == name && !c.restarted_pod_uid.is_empty())
    };
    (0..view.replicas.max(0))
        .filter(|ordinal| {
            view.templates.iter().any(|t| {
                let name = plan::claim_name(&t.name, statefulset, *ordinal);
                view.claims.get(&name).is_some_and(|c| c.fs_resize_pending) || restarted(&name)
            })
        })
        .collect()
}

/// A GET whose 404 is an answer: `None`.
async fn get_optional(cluster: &ClusterClient, path: &str) -> Result<Option<Value>, ClusterError> {
    match cluster.get_json::<Value>(path).await {
        Ok(found) => Ok(Some(found)),
        Err(err) if err.code() == Some(404) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Asks for `storage` on the claim (a merge patch of its request, nothing else), if it is
/// still at `resource_version`: a claim deleted and made again, or edited, since it was read
/// is a 409 and is decided again from what it is now.
pub(super) async fn resize(
    cluster: &ClusterClient,
    namespace: &str,
    claim: &str,
    storage: &str,
    resource_version: &str,
) -> Result<(), ClusterError> {
    let patch = json!({
        "metadata": {"resourceVersion": resource_version},
        "spec": {"resources": {"requests": {"storage": storage}}},
    });
    let body = serde_json::to_vec(&patch).map_err(ClusterError::encode("a claim patch"))?;
    cluster
        .request(
            Method::PATCH,
            &format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}"),
            "application/json",
            Some(("application/merge-patch+json", body)),
        )
        .await
        .map(drop)
}

/// Deletes the pod (its StatefulSet starts it again) if it still has `uid`, the uid it was
/// read with; gone already, or replaced (the precondition's 409), is as good: the pod read is
/// not running any more.
pub(super) async fn delete_pod(
    cluster: &ClusterClient,
    namespace: &str,
    pod: &str,
    uid: &str,
) -> Result<(), ClusterError> {
    let options = json!({
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": uid},
    });
    let body = serde_json::to_vec(&options).map_err(ClusterError::encode("DeleteOptions"))?;
    let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}");
    match cluster
        .request(
            Method::DELETE,
            &path,
            "application/json",
            Some(("application/json", body)),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if matches!(err.code(), Some(404 | 409)) => Ok(()),
        Err(err) => Err(err),
    }
}

/// Deletes the StatefulSet with orphan cascade (its pods and claims stay) if it is still the
/// object the manifest was saved from: `uid` and `resource_version` are the preconditions, so
/// an edit made since is a 409 (the caller saves the manifest again). Gone already is as good.
pub(super) async fn delete_statefulset(
    cluster: &ClusterClient,
    vcm: &VolumeClaimMigration,
    uid: &str,
    resource_version: &str,
) -> Result<Deleted, ClusterError> {
    let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
    let options = json!({
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Orphan",
        "preconditions": {"uid": uid, "resourceVersion": resource_version},
    });
    let body = serde_json::to_vec(&options).map_err(ClusterError::encode("DeleteOptions"))?;
    let path = statefulset_path(vcm, namespace);
    match cluster
        .request(
            Method::DELETE,
            &path,
            "application/json",
            Some(("application/json", body)),
        )
        .await
    {
        Ok(_) => Ok(Deleted::Accepted),
        Err(err) if err.code() == Some(404) => Ok(Deleted::AlreadyGone),
        Err(err) => Err(err),
    }
}

/// What became of the deletion of the old StatefulSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deleted {
    /// kube-apiserver accepted it: the object goes once its pods are orphaned.
    Accepted,
    /// 404: it was gone before ours arrived — someone else deleted it.
    AlreadyGone,
}

/// Creates the saved StatefulSet; `dry_run`: only asks kube-apiserver whether it would
/// (`?dryRun=All`: admitted — webhooks, policies — and validated, never stored; while the old
/// one stands, a 409 AlreadyExists is the answer of a create that got that far).
pub(super) async fn create_statefulset(
    cluster: &ClusterClient,
    vcm: &VolumeClaimMigration,
    manifest: &Value,
    dry_run: bool,
) -> Result<(), ClusterError> {
    let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
    let body =
        serde_json::to_vec(manifest).map_err(ClusterError::encode("a StatefulSet manifest"))?;
    let mut path = format!(
        "/apis/{}/namespaces/{namespace}/statefulsets",
        vcm.spec.target.api_version
    );
    if dry_run {
        path.push_str("?dryRun=All");
    }
    cluster
        .request(
            Method::POST,
            &path,
            "application/json",
            Some(("application/json", body)),
        )
        .await
        .map(drop)
}

/// The StatefulSet's resourceVersion now, `None` when it is gone (the crash tests' hook that
/// waits for an edit, `crate::hooks`): compiled with the hooks only, its one caller.
#[cfg(feature = "test-hooks")]
pub(super) async fn statefulset_resource_version(
    cluster: &ClusterClient,
    vcm: &VolumeClaimMigration,
) -> Result<Option<String>, ClusterError> {
    let namespace = vcm.metadata.namespace.as_deref().unwrap_or_default();
    let found = get_optional(cluster, &statefulset_path(vcm, namespace)).await?;
    Ok(found.map(|object| text_at(&object, "/metadata/resourceVersion")))
}
