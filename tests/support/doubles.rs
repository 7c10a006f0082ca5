//! The test doubles the suites and benches start: a configured kube-double with a namespace
//! and the `widgets.example.test` CRD (served in v1 and v2, stored in v1).

use std::sync::Arc;

use kube_double::{Builder, KubeDouble};
use serde_json::Value;

/// Starts `builder`'s double with `namespace` and the widgets CRD.
pub async fn with_widgets(builder: Builder, namespace: &str) -> KubeDouble {
    let double = builder.start().await.expect("start the double");
    double.ensure_namespace(namespace).expect("namespace");
    double.create_crd(kube_double::crd::widgets()).expect("crd");
    double
}

/// What a StorageState says, judged against the double's read-back.
pub enum Verdict {
    NotSafe,
    /// It says safe at a hash the cluster no longer has (or of a resource it no longer
    /// serves): the trigger has not seen the change yet. Not a verdict about now.
    ClusterMovedOn,
    /// Safe, and every object is stored in the current storage version.
    Safe,
    /// Safe, but the double stores objects in another encoding.
    Unsafe(String),
}

pub fn verdict(engine: &Arc<kube_double::engine::Engine>, state: &Value) -> Verdict {
    let name = state["metadata"]["name"].as_str().unwrap_or_default();
    let hash = current(state);
    if hash.is_empty() || hash == "Unknown" || persisted(state) != [hash] {
        return Verdict::NotSafe;
    }
    let (group, resource) = group_resource(name);
    let gr = kube_double::resources::GroupResource::new(group.clone(), resource.clone());
    let Some(def) = engine.catalog.get(&gr) else {
        // The resource is gone (a deleted CRD): nothing is stored to be unsafe about.
        return Verdict::ClusterMovedOn;
    };
    let hash_now =
        kube_double::resources::storage_version_hash(&def.group, &def.storage_version, &def.kind);
    if hash_now != hash {
        return Verdict::ClusterMovedOn;
    }
    let expected = def.group_version(&def.storage_version);
    let summary = engine.stored_summary(&gr);
    let stale: Vec<String> = summary
        .iter()
        .filter(|((encoding, _), _)| *encoding != expected)
        .map(|((encoding, key), n)| format!("{n} in {encoding} (key {key:?})"))
        .collect();
    if stale.is_empty() {
        Verdict::Safe
    } else {
        Verdict::Unsafe(format!(
            "StorageState {name} says safe at {hash} ({expected}) but the double stores {}",
            stale.join(", ")
        ))
    }
}

fn current(state: &Value) -> &str {
    state["status"]["currentStorageVersionHash"]
        .as_str()
        .unwrap_or("")
}

fn persisted(state: &Value) -> Vec<&str> {
    state["status"]["persistedStorageVersionHashes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `configmaps` → `("", "configmaps")`, `deployments.apps` → `("apps", "deployments")`.
fn group_resource(name: &str) -> (String, String) {
    match name.split_once('.') {
        Some((resource, group)) => (group.to_string(), resource.to_string()),
        None => (String::new(), name.to_string()),
    }
}
