//! Discovery documents, built once from the registry: the legacy APIGroupList / APIGroup /
//! APIResourceList (recordings 01, 03a, 03b) and aggregated discovery v2 with its ETag
//! (recording 02a). Shapes follow kube-apiserver's built-in groups.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use svm_registry::{Registry, RestStorage};

/// Verbs of a full resource, sorted as kube-apiserver lists them for built-ins.
const RESOURCE_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: [&str; 3] = ["get", "patch", "update"];

/// Every discovery document of the served registry.
#[derive(Debug, Clone)]
pub(crate) struct Discovery {
    pub group_list: Value,
    groups: BTreeMap<String, Value>,
    resource_lists: BTreeMap<(String, String), Value>,
    pub aggregated: Value,
    /// The quoted ETag of `aggregated`.
    pub aggregated_etag: String,
}

impl Discovery {
    pub(crate) fn build(registry: &Registry) -> Self {
        let groups = served_groups(registry);
        let group_docs: Vec<Value> = groups
            .iter()
            .map(|(name, versions)| group_entry(name, versions))
            .collect();
        let group_list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": group_docs});
        let mut group_map = BTreeMap::new();
        let mut resource_lists = BTreeMap::new();
        for (group, versions) in &groups {
            let mut doc = Map::new();
            doc.insert("kind".into(), json!("APIGroup"));
            doc.insert("apiVersion".into(), json!("v1"));
            if let Value::Object(entry) = group_entry(group, versions) {
                doc.extend(entry);
            }
            group_map.insert(group.clone(), Value::Object(doc));
            for version in versions {
                let resources = resources_of(registry, group, version);
                resource_lists.insert(
                    (group.clone(), version.clone()),
                    resource_list(group, version, &resources),
                );
            }
        }
        let aggregated = aggregated_list(registry, &groups);
        let aggregated_etag = quoted_etag(&aggregated);
        Self {
            group_list,
            groups: group_map,
            resource_lists,
            aggregated,
            aggregated_etag,
        }
    }

    pub(crate) fn group(&self, group: &str) -> Option<&Value> {
        self.groups.get(group)
    }

    pub(crate) fn resource_list(&self, group: &str, version: &str) -> Option<&Value> {
        self.resource_lists
            .get(&(group.to_string(), version.to_string()))
    }
}

/// A quoted, upper-case hex SHA-512 of the compact JSON, like kube-apiserver's discovery ETags.
pub(crate) fn quoted_etag(value: &Value) -> String {
    format!("\"{}\"", hash_hex(value))
}

/// Upper-case hex SHA-512 of the compact JSON of `value`.
pub(crate) fn hash_hex(value: &Value) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Sha512::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

use svm_registry::versions::{compare_kube_versions, storage_version_hash};

/// Groups and their versions, each group's versions in kube-apiserver's priority order.
fn served_groups(registry: &Registry) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for resource in registry.iter() {
        let info = resource.info();
        let versions = groups.entry(info.group.to_string()).or_default();
        for version in info.versions {
            if !versions.iter().any(|v| v == version) {
                versions.push(version.to_string());
            }
        }
    }
    for versions in groups.values_mut() {
        versions.sort_by(|a, b| compare_kube_versions(a, b));
    }
    groups
}

fn resources_of<'a>(
    registry: &'a Registry,
    group: &str,
    version: &str,
) -> Vec<&'a Arc<dyn RestStorage>> {
    registry
        .iter()
        .filter(|r| r.info().group == group && r.info().versions.contains(&version))
        .collect()
}

fn group_version(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

/// The APIGroup body shared by APIGroupList entries and `/apis/<group>`.
fn group_entry(group: &str, versions: &[String]) -> Value {
    let listed: Vec<Value> = versions.iter().map(|v| group_version(group, v)).collect();
    let preferred = versions
        .first()
        .map(|v| group_version(group, v))
        .unwrap_or(Value::Null);
    json!({"name": group, "versions": listed, "preferredVersion": preferred})
}

fn resource_list(group: &str, version: &str, resources: &[&Arc<dyn RestStorage>]) -> Value {
    let mut entries = Vec::new();
    for resource in resources {
        let info = resource.info();
        let mut entry = Map::new();
        entry.insert("name".into(), json!(info.plural));
        entry.insert("singularName".into(), json!(info.singular));
        entry.insert("namespaced".into(), json!(info.namespaced));
        entry.insert("kind".into(), json!(info.kind));
        entry.insert("verbs".into(), json!(RESOURCE_VERBS));
        if !info.short_names.is_empty() {
            entry.insert("shortNames".into(), json!(info.short_names));
        }
        if !info.categories.is_empty() {
            entry.insert("categories".into(), json!(info.categories));
        }
        entry.insert(
            "storageVersionHash".into(),
            json!(storage_version_hash(
                info.group,
                info.storage_version,
                info.kind
            )),
        );
        entries.push(Value::Object(entry));
        if info.has_status_subresource {
            entries.push(json!({
                "name": format!("{}/status", info.plural),
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": info.kind,
                "verbs": STATUS_VERBS,
            }));
        }
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": entries,
    })
}

fn aggregated_list(registry: &Registry, groups: &BTreeMap<String, Vec<String>>) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    let resources: Vec<Value> = resources_of(registry, group, version)
                        .into_iter()
                        .map(|r| aggregated_resource(r.as_ref()))
                        .collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": group}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// One APIResourceDiscovery. Like kube-apiserver's built-ins, responseKind leaves group and
/// version empty (meaning: the enclosing group-version).
fn aggregated_resource(resource: &dyn RestStorage) -> Value {
    let info = resource.info();
    let response_kind = json!({"group": "", "version": "", "kind": info.kind});
    let mut entry = Map::new();
    entry.insert("resource".into(), json!(info.plural));
    entry.insert("responseKind".into(), response_kind.clone());
    entry.insert(
        "scope".into(),
        json!(if info.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }),
    );
    entry.insert("singularResource".into(), json!(info.singular));
    entry.insert("verbs".into(), json!(RESOURCE_VERBS));
    if !info.short_names.is_empty() {
        entry.insert("shortNames".into(), json!(info.short_names));
    }
    if !info.categories.is_empty() {
        entry.insert("categories".into(), json!(info.categories));
    }
    if info.has_status_subresource {
        entry.insert(
            "subresources".into(),
            json!([{
                "subresource": "status",
                "responseKind": response_kind,
                "verbs": STATUS_VERBS,
            }]),
        );
    }
    Value::Object(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{GROUP, registry_with, things};

    fn discovery() -> Discovery {
        Discovery::build(&registry_with(things()))
    }

    #[test]
    fn storage_version_hash_matches_kube_apiserver() {
        // Values from recording 03b.
        assert_eq!(
            storage_version_hash("example.test", "v1", "Widget"),
            "zHyf2mNf1TY="
        );
        assert_eq!(
            storage_version_hash("example.test", "v2", "Widget"),
            "N5cUTqCK6wo="
        );
        assert_eq!(storage_version_hash("", "v1", "ConfigMap"), "qFsyl6wFWjQ=");
    }

    #[test]
    fn versions_sort_like_kube() {
        let mut versions = vec!["v1alpha1", "v1", "v2beta1", "v1beta1", "v2", "foo"];
        versions.sort_by(|a, b| compare_kube_versions(a, b));
        assert_eq!(
            versions,
            vec!["v2", "v1", "v2beta1", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn group_list_and_group_prefer_the_first_version() {
        let d = discovery();
        assert_eq!(d.group_list["kind"], "APIGroupList");
        assert_eq!(d.group_list["apiVersion"], "v1");
        let group = &d.group_list["groups"][0];
        assert_eq!(group["name"], GROUP);
        assert_eq!(
            group["versions"],
            json!([
                {"groupVersion": "test.example.io/v1", "version": "v1"},
                {"groupVersion": "test.example.io/v1beta1", "version": "v1beta1"}
            ])
        );
        assert_eq!(group["preferredVersion"]["version"], "v1");
        let doc = d.group(GROUP).expect("group");
        assert_eq!(doc["kind"], "APIGroup");
        assert_eq!(doc["name"], GROUP);
        assert!(d.group("nope.io").is_none());
    }

    #[test]
    fn resource_list_has_resource_then_status() {
        let d = discovery();
        let list = d.resource_list(GROUP, "v1beta1").expect("served");
        assert_eq!(list["groupVersion"], "test.example.io/v1beta1");
        assert_eq!(list["apiVersion"], "v1");
        let resources = list["resources"].as_array().expect("array");
        assert_eq!(resources.len(), 2);
        assert_eq!(
            resources[0],
            json!({
                "name": "things", "singularName": "thing", "namespaced": false, "kind": "Thing",
                "verbs": RESOURCE_VERBS, "shortNames": ["th"], "categories": ["all"],
                "storageVersionHash": storage_version_hash(GROUP, "v1", "Thing"),
            })
        );
        assert_eq!(
            resources[1],
            json!({"name": "things/status", "singularName": "", "namespaced": false,
                   "kind": "Thing", "verbs": ["get", "patch", "update"]})
        );
        assert!(d.resource_list(GROUP, "v2").is_none());
    }

    #[test]
    fn aggregated_discovery_shape() {
        let d = discovery();
        let doc = &d.aggregated;
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        let item = &doc["items"][0];
        assert_eq!(item["metadata"]["name"], GROUP);
        assert_eq!(item["versions"][0]["version"], "v1");
        assert_eq!(item["versions"][0]["freshness"], "Current");
        let resource = &item["versions"][0]["resources"][0];
        assert_eq!(resource["resource"], "things");
        assert_eq!(
            resource["responseKind"],
            json!({"group": "", "version": "", "kind": "Thing"})
        );
        assert_eq!(resource["scope"], "Cluster");
        assert_eq!(resource["singularResource"], "thing");
        assert_eq!(resource["subresources"][0]["subresource"], "status");
        assert_eq!(resource["subresources"][0]["verbs"], json!(STATUS_VERBS));
        assert!(d.aggregated_etag.starts_with('"') && d.aggregated_etag.ends_with('"'));
        assert_eq!(d.aggregated_etag.len(), 128 + 2);
    }
}
