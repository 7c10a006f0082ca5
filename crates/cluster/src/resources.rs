//! Resolving a migration's `group/resource` (and optional version) to what the cluster serves,
//! through discovery: the version to talk in, whether it is namespaced, and whether it can be
//! listed and patched at all — so an impossible migration fails at once with a clear reason.

use serde::Deserialize;

use super::client::ClusterClient;
use super::error::ClusterError;

/// A resource as the cluster serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedResource {
    /// The API group; empty for the core group.
    pub group: String,
    /// The version requests use: the one the migration names, else the first that serves it
    /// (the group's preferred first).
    pub version: String,
    /// The plural resource name.
    pub resource: String,
    /// The kind its objects have.
    pub kind: String,
    /// Whether its objects live in namespaces.
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

/// `resource.group`, or `resource` for the core group: the form kubectl and the metrics use.
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

/// Why a resource could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The cluster does not serve it, or it cannot be migrated (no list or patch): permanent.
    #[error("{0}")]
    Unmigratable(String),
    /// Asking the cluster failed (not an answer about the resource).
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

#[derive(Deserialize)]
struct ApiGroup {
    #[serde(rename = "preferredVersion")]
    preferred_version: Option<GroupVersionForDiscovery>,
    #[serde(default, deserialize_with = "crate::wire::null_as_empty")]
    versions: Vec<GroupVersionForDiscovery>,
}

#[derive(Deserialize)]
struct GroupVersionForDiscovery {
    version: String,
}

#[derive(Deserialize)]
struct ApiResourceList {
    #[serde(default, deserialize_with = "crate::wire::null_as_empty")]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
struct ApiResource {
    name: String,
    #[serde(default)]
    namespaced: bool,
    #[serde(default)]
    kind: String,
    #[serde(default, deserialize_with = "crate::wire::null_as_empty")]
    verbs: Vec<String>,
}

/// Resolve `group/resource` at `version` — or, without one, at the first version that serves
/// it: the group's preferred version, then the others in the group's order. Any served version
/// will do (the apiserver re-encodes to its storage version on every write), and a resource
/// need not be in the preferred one: a beta resource of a group whose preferred version is GA
/// (VolumeAttributesClass in storage.k8s.io/v1beta1 on a 1.33 cluster) is served only there.
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
    let versions = match version {
        "" => served_versions(client, group, &name).await?,
        given => vec![given.to_string()],
    };
    for version in &versions {
        if let Some(found) = find_in_version(client, group, version, resource, &name).await? {
            return migratable(found, group, version, resource, &name);
        }
    }
    Err(ResolveError::Unmigratable(format!(
        "the cluster does not serve the resource {name} in {}",
        versions
            .iter()
            .map(|v| group_version_path(group, v))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// The versions a group serves, preferred first.
async fn served_versions(
    client: &ClusterClient,
    group: &str,
    name: &str,
) -> Result<Vec<String>, ResolveError> {
    if group.is_empty() {
        return Ok(vec!["v1".to_string()]);
    }
    let api_group: ApiGroup = match client.get_json(&format!("/apis/{group}")).await {
        Ok(api_group) => api_group,
        Err(err) if err.is_not_found() => {
            return Err(ResolveError::Unmigratable(format!(
                "the cluster does not serve the group {group:?} (resource {name})"
            )));
        }
        Err(err) => return Err(err.into()),
    };
    let mut versions: Vec<String> = api_group
        .preferred_version
        .into_iter()
        .map(|v| v.version)
        .collect();
    for v in api_group.versions {
        if !versions.contains(&v.version) {
            versions.push(v.version);
        }
    }
    if versions.is_empty() {
        return Err(ResolveError::Unmigratable(format!(
            "the group {group:?} serves no version"
        )));
    }
    Ok(versions)
}

/// The resource's entry in one version's discovery document, if that version lists it.
async fn find_in_version(
    client: &ClusterClient,
    group: &str,
    version: &str,
    resource: &str,
    name: &str,
) -> Result<Option<ApiResource>, ResolveError> {
    let path = group_version_path(group, version);
    match client.get_json::<ApiResourceList>(&path).await {
        Ok(list) => Ok(list.resources.into_iter().find(|r| r.name == resource)),
        // A version gone since the group was read: try the next.
        Err(err) if err.is_not_found() => {
            tracing::debug!(%path, resource = name, "discovery document not served");
            Ok(None)
        }
        Err(err) => Err(err.into()),
    }
}

/// A found resource, if it can be listed and patched.
fn migratable(
    found: ApiResource,
    group: &str,
    version: &str,
    resource: &str,
    name: &str,
) -> Result<ResolvedResource, ResolveError> {
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
        version: version.to_string(),
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
