//! The cluster side of a DataPlaneRollout: what one pass reads (the DaemonSet, its newest
//! ControllerRevision and its pods, the selected Nodes, the consumer pods, every guarded
//! replica) and the three writes (a Node cordoned with our claim, released, a pod evicted).
//! Lists are paged; every write names what it was decided on (a Node's resourceVersion, a
//! pod's uid), so a stale view never acts on a successor.

use std::collections::BTreeSet;

use http::Method;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};
use svm_api::dataplane::{DataPlaneRollout, ReplicaGuard};
use svm_cluster::{ClusterClient, ClusterError};

use crate::guards::{self, Replica};
use crate::plan::{NodeView, Observed, PodView};
use crate::read::{self, CLAIM_ANNOTATION, text};

/// Objects per page of a list.
const PAGE: usize = 500;

/// A rollout the cluster shows cannot run as written: the Failed condition says why, and
/// nothing is touched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub(crate) struct Refused {
    /// The condition's reason.
    pub reason: &'static str,
    /// For people: what is wrong and how to mend it.
    pub message: String,
}

/// Why a pass could not read what it needs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ObserveError {
    /// The rollout cannot run as written.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The cluster did not answer as needed: tried again on the next pass.
    #[error("reading the cluster")]
    Cluster(#[from] ClusterError),
}

/// What one pass read.
pub(crate) struct Observation {
    /// What the planner needs.
    pub observed: Observed,
    /// The DaemonSet, for Events.
    pub daemon_set: ObjectReference,
}

/// Reads everything one pass of `rollout` needs. `live` names every rollout that exists
/// (`namespace/name`): a claim by one that does not is stale and holds nothing.
pub(crate) async fn observe(
    cluster: &ClusterClient,
    rollout: &DataPlaneRollout,
    live: &BTreeSet<String>,
) -> Result<Observation, ObserveError> {
    let namespace = rollout.metadata.namespace.as_deref().unwrap_or_default();
    let daemon_set = daemon_set(cluster, namespace, &rollout.spec.daemon_set).await?;
    let owner_uid = text(&daemon_set, "/metadata/uid");
    let selector = selector_query(
        "the DaemonSet's spec.selector",
        &daemon_set["spec"]["selector"],
    )?;
    let revisions = owned(
        list(
            cluster,
            &format!("/apis/apps/v1/namespaces/{namespace}/controllerrevisions"),
            &selector,
        )
        .await?,
        &owner_uid,
    );
    let revision = read::newest_revision(&revisions).ok_or_else(|| {
        ClusterError::Unexpected("the DaemonSet has no ControllerRevision yet".into())
    })?;
    let pods: Vec<PodView> = owned(
        list(
            cluster,
            &format!("/api/v1/namespaces/{namespace}/pods"),
            &selector,
        )
        .await?,
        &owner_uid,
    )
    .iter()
    .map(read::pod_view)
    .collect();
    let nodes = select_nodes(cluster, rollout, &pods, live).await?;
    let names: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let consumers = consumers(cluster, rollout)
        .await?
        .into_iter()
        .filter(|p| names.contains(p.node.as_str()))
        .collect();
    let replicas = replicas(cluster, &rollout.spec.replica_guards).await?;
    Ok(Observation {
        observed: Observed {
            revision,
            nodes,
            pods,
            consumers,
            replicas,
        },
        daemon_set: reference(&daemon_set, "apps/v1", "DaemonSet"),
    })
}

/// The DaemonSet, if it exists and changes its pods only when they are deleted.
async fn daemon_set(
    cluster: &ClusterClient,
    namespace: &str,
    name: &str,
) -> Result<Value, ObserveError> {
    let path = format!("/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}");
    let found: Value = match cluster.get_json(&path).await {
        Err(err) if err.code() == Some(404) => {
            return Err(Refused {
                reason: "DaemonSetNotFound",
                message: format!("DaemonSet {namespace}/{name} does not exist"),
            }
            .into());
        }
        other => other?,
    };
    if !read::is_on_delete(&found) {
        let strategy = found
            .pointer("/spec/updateStrategy/type")
            .and_then(Value::as_str)
            .unwrap_or("RollingUpdate");
        return Err(Refused {
            reason: "NotOnDelete",
            message: format!(
                "DaemonSet {namespace}/{name} has updateStrategy {strategy}: its controller would \
                 replace pods on its own; set spec.updateStrategy.type to OnDelete so that each \
                 node's pod goes only when the rollout evicts it"
            ),
        }
        .into());
    }
    Ok(found)
}

/// The selected Nodes in rollout order: `spec.nodes` as listed (each must exist and match
/// `spec.nodeSelector`), else every node matching it that runs one of the DaemonSet's pods
/// or is in the status already (its pod may be between two), by name.
async fn select_nodes(
    cluster: &ClusterClient,
    rollout: &DataPlaneRollout,
    pods: &[PodView],
    live: &BTreeSet<String>,
) -> Result<Vec<NodeView>, ObserveError> {
    let selector = match &rollout.spec.node_selector {
        Some(selector) => label_selector_query("spec.nodeSelector", selector)?,
        None => String::new(),
    };
    let mut found: Vec<NodeView> = list(cluster, "/api/v1/nodes", &selector)
        .await?
        .iter()
        .map(read::node_view)
        .collect();
    for node in &mut found {
        // A claim by a rollout that is gone (deleted mid-node) holds nothing.
        if node.held_by.as_ref().is_some_and(|h| !live.contains(h)) {
            node.held_by = None;
        }
    }
    if !rollout.spec.nodes.is_empty() {
        return listed_nodes(&rollout.spec.nodes, found);
    }
    let in_status: BTreeSet<&str> = rollout
        .status
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    let with_pods: BTreeSet<&str> = pods.iter().map(|p| p.node.as_str()).collect();
    found.retain(|n| with_pods.contains(n.name.as_str()) || in_status.contains(n.name.as_str()));
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// `spec.nodes` in its order; one that does not exist (or does not match the selector)
/// refuses the rollout.
fn listed_nodes(listed: &[String], found: Vec<NodeView>) -> Result<Vec<NodeView>, ObserveError> {
    let mut chosen = Vec::with_capacity(listed.len());
    let mut unknown = Vec::new();
    for name in listed {
        match found.iter().find(|n| &n.name == name) {
            Some(node) => chosen.push(node.clone()),
            None => unknown.push(name.as_str()),
        }
    }
    if !unknown.is_empty() {
        return Err(Refused {
            reason: "UnknownNodes",
            message: format!(
                "spec.nodes names nodes the cluster does not have (or that spec.nodeSelector \
                 leaves out): {}",
                unknown.join(", ")
            ),
        }
        .into());
    }
    Ok(chosen)
}

/// The consumer pods of `spec.consumers`, in its namespaces (the rollout's own when none).
async fn consumers(
    cluster: &ClusterClient,
    rollout: &DataPlaneRollout,
) -> Result<Vec<PodView>, ObserveError> {
    let Some(consumers) = &rollout.spec.consumers else {
        return Ok(Vec::new());
    };
    let selector = label_selector_query("spec.consumers.selector", &consumers.selector)?;
    let own = rollout.metadata.namespace.clone().unwrap_or_default();
    let namespaces = if consumers.namespaces.is_empty() {
        vec![own]
    } else {
        consumers.namespaces.clone()
    };
    let mut pods = Vec::new();
    for namespace in namespaces {
        let path = format!("/api/v1/namespaces/{namespace}/pods");
        pods.extend(
            list(cluster, &path, &selector)
                .await?
                .iter()
                .map(read::pod_view),
        );
    }
    Ok(pods)
}

/// Every replica every guard reads, from every namespace.
async fn replicas(
    cluster: &ClusterClient,
    guards: &[ReplicaGuard],
) -> Result<Vec<Replica>, ObserveError> {
    let mut replicas = Vec::new();
    for guard in guards {
        let resource = &guard.resource;
        let path = if resource.group.is_empty() {
            format!("/api/{}/{}", resource.version, resource.resource)
        } else {
            format!(
                "/apis/{}/{}/{}",
                resource.group, resource.version, resource.resource
            )
        };
        let items = list(cluster, &path, "")
            .await
            .map_err(|err| guard_refused(guard, &path, err))?;
        replicas.extend(items.iter().filter_map(|o| guards::read_replica(guard, o)));
    }
    Ok(replicas)
}

/// A guard's resource the cluster does not serve, or does not let us list, refuses the
/// rollout with its name; anything else is tried again.
fn guard_refused(guard: &ReplicaGuard, path: &str, err: ClusterError) -> ObserveError {
    let r = &guard.resource;
    let what = format!(
        "replica guard {:?}: {}/{} {}",
        guard.name, r.group, r.version, r.resource
    );
    match err.code() {
        Some(404) => Refused {
            reason: "GuardNotServed",
            message: format!("{what} is not served by the cluster (GET {path}: 404)"),
        }
        .into(),
        Some(403) => Refused {
            reason: "GuardForbidden",
            message: format!(
                "{what}: svm-apiserver may not list it; grant `list` on it to svm-apiserver's \
                 ServiceAccount (docs/data-plane.md, \"Permissions\")"
            ),
        }
        .into(),
        _ => err.into(),
    }
}

/// Every object of a list at `path` with `selector` (empty: all), page by page.
async fn list(
    cluster: &ClusterClient,
    path: &str,
    selector: &str,
) -> Result<Vec<Value>, ClusterError> {
    let mut items = Vec::new();
    let mut continue_token = String::new();
    loop {
        let query = page_query(selector, &continue_token);
        let page: Value = cluster.get_json(&format!("{path}?{query}")).await?;
        items.extend(page["items"].as_array().cloned().unwrap_or_default());
        continue_token = text(&page, "/metadata/continue");
        if continue_token.is_empty() {
            return Ok(items);
        }
    }
}

/// A list page's query: the page size, the selector, where the last page ended.
fn page_query(selector: &str, continue_token: &str) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("limit", &PAGE.to_string());
    if !selector.is_empty() {
        query.append_pair("labelSelector", selector);
    }
    if !continue_token.is_empty() {
        query.append_pair("continue", continue_token);
    }
    query.finish()
}

/// The objects controlled by the object of `uid`.
fn owned(objects: Vec<Value>, uid: &str) -> Vec<Value> {
    objects
        .into_iter()
        .filter(|o| {
            o.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r["uid"] == uid && r["controller"] == true)
                })
        })
        .collect()
}

/// A label selector as a query's `labelSelector`.
fn label_selector_query(field: &str, selector: &LabelSelector) -> Result<String, Refused> {
    kube::core::Selector::try_from(selector.clone())
        .map(|s| s.to_string())
        .map_err(|err| Refused {
            reason: "InvalidSelector",
            message: format!("{field}: {err}"),
        })
}

/// A label selector in JSON (the DaemonSet's) as a query's `labelSelector`.
fn selector_query(field: &str, selector: &Value) -> Result<String, Refused> {
    let parsed: LabelSelector =
        serde_json::from_value(selector.clone()).map_err(|err| Refused {
            reason: "InvalidSelector",
            message: format!("{field}: {err}"),
        })?;
    label_selector_query(field, &parsed)
}

/// A reference to `object` for its Events.
pub(crate) fn reference(object: &Value, api_version: &str, kind: &str) -> ObjectReference {
    let optional = |pointer: &str| Some(text(object, pointer)).filter(|t| !t.is_empty());
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: optional("/metadata/name"),
        namespace: optional("/metadata/namespace"),
        uid: optional("/metadata/uid"),
        resource_version: optional("/metadata/resourceVersion"),
        ..Default::default()
    }
}

/// Cordons `node` and writes `owner`'s claim on it, on the Node as read just before (its
/// resourceVersion the precondition: a change since, another rollout's claim above all, is a
/// 409 and the next pass decides again).
pub(crate) async fn cordon(
    cluster: &ClusterClient,
    node: &str,
    owner: &str,
) -> Result<(), ClusterError> {
    let path = format!("/api/v1/nodes/{node}");
    let current: Value = cluster.get_json(&path).await?;
    let held = read::node_view(&current).held_by;
    if held.as_ref().is_some_and(|h| h != owner) {
        return Err(ClusterError::Unexpected(format!(
            "node {node} is held by DataPlaneRollout {}",
            held.unwrap_or_default()
        )));
    }
    let patch = json!({
        "metadata": {
            "resourceVersion": text(&current, "/metadata/resourceVersion"),
            "annotations": {CLAIM_ANNOTATION: owner},
        },
        "spec": {"unschedulable": true},
    });
    merge_patch(cluster, &path, &patch).await
}

/// Drops `owner`'s claim on `node`, and its cordon when `uncordon` (the rollout cordoned it);
/// a node not held by `owner` is left alone.
pub(crate) async fn release(
    cluster: &ClusterClient,
    node: &str,
    owner: &str,
    uncordon: bool,
) -> Result<(), ClusterError> {
    let path = format!("/api/v1/nodes/{node}");
    let current: Value = cluster.get_json(&path).await?;
    if read::node_view(&current).held_by.as_deref() != Some(owner) {
        return Ok(());
    }
    let mut patch = json!({
        "metadata": {
            "resourceVersion": text(&current, "/metadata/resourceVersion"),
            "annotations": {CLAIM_ANNOTATION: null},
        },
    });
    if uncordon {
        patch["spec"] = json!({"unschedulable": null});
    }
    merge_patch(cluster, &path, &patch).await
}

async fn merge_patch(
    cluster: &ClusterClient,
    path: &str,
    patch: &Value,
) -> Result<(), ClusterError> {
    let body = serde_json::to_vec(patch).map_err(|e| ClusterError::Unexpected(e.to_string()))?;
    cluster
        .request(
            Method::PATCH,
            path,
            "application/json",
            Some(("application/merge-patch+json", body)),
        )
        .await
        .map(drop)
}

/// What an eviction came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Evicted {
    /// The pod is being deleted.
    Accepted,
    /// It was gone, or replaced (its uid differs): nothing to evict.
    Gone,
    /// A PodDisruptionBudget refused it (429): what holds it, named.
    Refused(String),
}

/// Evicts the pod through the Eviction API, so every PodDisruptionBudget has its say, with
/// its uid as the precondition (never a bare DELETE).
pub(crate) async fn evict(
    cluster: &ClusterClient,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<Evicted, ClusterError> {
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction");
    let eviction = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {"uid": uid}},
    });
    let body =
        serde_json::to_vec(&eviction).map_err(|e| ClusterError::Unexpected(e.to_string()))?;
    let sent = cluster
        .request(
            Method::POST,
            &path,
            "application/json",
            Some(("application/json", body)),
        )
        .await;
    match sent {
        Ok(_) => Ok(Evicted::Accepted),
        Err(err) if matches!(err.code(), Some(404 | 409)) => Ok(Evicted::Gone),
        Err(err) if is_budget_refusal(&err) => {
            let budgets = budgets_of(cluster, namespace, name).await;
            Ok(Evicted::Refused(budgets.unwrap_or_else(|_| {
                format!("pod {namespace}/{name}: eviction refused: {}", said(&err))
            })))
        }
        Err(err) => Err(err),
    }
}

/// A 429 of the eviction subresource (a budget), not API Priority and Fairness's.
fn is_budget_refusal(err: &ClusterError) -> bool {
    matches!(err, ClusterError::Api { code: 429, flow_control: None, reason, .. } if !reason.is_empty())
}

fn said(err: &ClusterError) -> String {
    match err {
        ClusterError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// The PodDisruptionBudgets over the pod that allow no disruption now, each named with its
/// count (`PodDisruptionBudget ns/name: 1 of 2 pods healthy, 2 needed`).
async fn budgets_of(
    cluster: &ClusterClient,
    namespace: &str,
    pod: &str,
) -> Result<String, ClusterError> {
    let found: Value = cluster
        .get_json(&format!("/api/v1/namespaces/{namespace}/pods/{pod}"))
        .await?;
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_value(found["metadata"]["labels"].clone()).unwrap_or_default();
    let path = format!("/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets");
    let budgets = list(cluster, &path, "").await?;
    let named: Vec<String> = budgets
        .iter()
        .filter(|b| b["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) < 1)
        .filter(|b| selects(&b["spec"]["selector"], &labels))
        .map(|b| {
            let status = &b["status"];
            format!(
                "PodDisruptionBudget {namespace}/{}: {} of {} pods healthy, {} needed",
                text(b, "/metadata/name"),
                status["currentHealthy"].as_i64().unwrap_or(0),
                status["expectedPods"].as_i64().unwrap_or(0),
                status["desiredHealthy"].as_i64().unwrap_or(0)
            )
        })
        .collect();
    if named.is_empty() {
        return Err(ClusterError::Unexpected("no budget found".into()));
    }
    Ok(named.join("; "))
}

/// Whether a PodDisruptionBudget's selector (JSON) selects `labels`; an empty one selects all
/// (policy/v1).
fn selects(selector: &Value, labels: &std::collections::BTreeMap<String, String>) -> bool {
    use kube::core::SelectorExt;
    serde_json::from_value::<LabelSelector>(selector.clone())
        .ok()
        .and_then(|s| kube::core::Selector::try_from(s).ok())
        .is_some_and(|s| s.matches(labels))
}

#[cfg(test)]
mod tests;
