//! Resolving a migration's `group/resource` (and optional version) to what the cluster serves,
//! through discovery: the version to talk in, whether it is namespaced, and whether it can be
//! listed and patched at all — so an impossible migration fails at once with a clear reason.

use serde::Deserialize;

use super::client::ClusterClient;
use super::error::ClusterError;

/// A resource as the cluster serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedResource {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub kind: String,
    pub namespaced: bool,
}

impl ResolvedResource {
    /// `/api/v1` or `/apis/<group>/<version>`.
    pub fn group_version_path(&self) -> String {
        group_version_path(&self.group, &self.version)
    }

    /// The collection across all namespaces.
    pub fn collection_path(&self) -> String {
        format!("{}/{}", self.group_version_path(), self.resource)
    }

    /// One object.
    pub fn object_path(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!(
                "{}/namespaces/{}/{}/{}",
                self.group_version_path(),
                path_segment(ns),
                self.resource,
                path_segment(name)
            ),
            None => format!("{}/{}", self.collection_path(), path_segment(name)),
        }
    }

    /// `configmaps`, `deployments.apps`: the form kubectl and the metrics use.
    pub fn group_resource(&self) -> String {
        group_resource(&self.group, &self.resource)
    }
}

pub fn group_resource(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// Object names are DNS subdomains or path segments already (no `/`), but `%`-escape anything
/// outside the unreserved set anyway so a strange name can never change the path.
fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The cluster does not serve it, or it cannot be migrated (no list or patch): permanent.
    #[error("{0}")]
    Unmigratable(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

#[derive(Deserialize)]
struct ApiGroup {
    #[serde(rename = "preferredVersion")]
    preferred_version: Option<GroupVersionForDiscovery>,
    #[serde(default, deserialize_with = "crate::cluster::wire::null_as_empty")]
    versions: Vec<GroupVersionForDiscovery>,
}

#[derive(Deserialize)]
struct GroupVersionForDiscovery {
    version: String,
}

#[derive(Deserialize)]
struct ApiResourceList {
    #[serde(default, deserialize_with = "crate::cluster::wire::null_as_empty")]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
struct ApiResource {
    name: String,
    #[serde(default)]
    namespaced: bool,
    #[serde(default)]
    kind: String,
    #[serde(default, deserialize_with = "crate::cluster::wire::null_as_empty")]
    verbs: Vec<String>,
}

/// Resolve `group/resource` at `version` (empty: the group's preferred version; any served
/// version will do — the apiserver re-encodes to its storage version on every write).
pub async fn resolve(
    client: &ClusterClient,
    group: &str,
    version: &str,
    resource: &str,
) -> Result<ResolvedResource, ResolveError> {
    let name = group_resource(group, resource);
    if resource.is_empty() || resource.contains('/') {
        return Err(ResolveError::Unmigratable(format!(
            "{name:?} is not a resource that can be migrated (subresources cannot be)"
        )));
    }
    let version = if !version.is_empty() {
        version.to_string()
    } else if group.is_empty() {
        "v1".to_string()
    } else {
        let found: Result<ApiGroup, _> = client.get_json(&format!("/apis/{group}")).await;
        match found {
            Ok(api_group) => api_group
                .preferred_version
                .or_else(|| api_group.versions.into_iter().next())
                .map(|v| v.version)
                .ok_or_else(|| {
                    ResolveError::Unmigratable(format!("the group {group:?} serves no version"))
                })?,
            Err(err) if err.is_not_found() => {
                return Err(ResolveError::Unmigratable(format!(
                    "the cluster does not serve the group {group:?} (resource {name})"
                )));
            }
            Err(err) => return Err(err.into()),
        }
    };
    let path = group_version_path(group, &version);
    let list: ApiResourceList = match client.get_json(&path).await {
        Ok(list) => list,
        Err(err) if err.is_not_found() => {
            return Err(ResolveError::Unmigratable(format!(
                "the cluster does not serve {path} (resource {name})"
            )));
        }
        Err(err) => return Err(err.into()),
    };
    let Some(found) = list.resources.into_iter().find(|r| r.name == resource) else {
        return Err(ResolveError::Unmigratable(format!(
            "the cluster does not serve the resource {name} in {path}"
        )));
    };
    for verb in ["list", "patch"] {
        if !found.verbs.iter().any(|v| v == verb) {
            return Err(ResolveError::Unmigratable(format!(
                "the resource {name} does not support {verb} (verbs: {}), so it cannot be migrated",
                found.verbs.join(",")
            )));
        }
    }
    Ok(ResolvedResource {
        group: group.to_string(),
        version,
        resource: resource.to_string(),
        kind: found.kind,
        namespaced: found.namespaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(group: &str, namespaced: bool) -> ResolvedResource {
        ResolvedResource {
            group: group.into(),
            version: "v1".into(),
            resource: "things".into(),
            kind: "Thing".into(),
            namespaced,
        }
    }

    #[test]
    fn paths_for_core_and_grouped_resources() {
        let core = resolved("", true);
        assert_eq!(core.collection_path(), "/api/v1/things");
        assert_eq!(
            core.object_path(Some("ns-1"), "a.b"),
            "/api/v1/namespaces/ns-1/things/a.b"
        );
        assert_eq!(core.group_resource(), "things");
        let grouped = resolved("example.test", false);
        assert_eq!(
            grouped.object_path(Some("ignored"), "x"),
            "/apis/example.test/v1/things/x"
        );
        assert_eq!(grouped.group_resource(), "things.example.test");
    }

    #[test]
    fn strange_names_cannot_change_the_path() {
        let core = resolved("", true);
        assert_eq!(
            core.object_path(Some("ns"), "a/../b?c"),
            "/api/v1/namespaces/ns/things/a%2F..%2Fb%3Fc"
        );
    }
}
