//! Discovery, cheap and frequent (docs/design.md, "The trigger and StorageStates").
//!
//! - A *poll* asks `/api` and `/apis` for aggregated discovery (v2) with `If-None-Match`: an
//!   unchanged cluster costs two empty 304s (recordings 02a, 02b). Aggregated discovery carries
//!   no `storageVersionHash`, so a changed ETag (a resource or version came or went) only says
//!   *look*.
//! - A *look* reads the legacy per-group-version documents (`/api/v1`, `/apis/<g>/<v>`,
//!   recordings 03a, 03b), which do carry `storageVersionHash`: one GET per group in the usual
//!   case (its preferred version), more only for resources served in other versions alone.
//!
//! A cluster without aggregated discovery (before 1.26) answers the legacy lists: then every
//! poll is a look.

use std::collections::BTreeMap;

use serde::Deserialize;

use svm_cluster::{ClusterClient, ClusterError};

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const AGGREGATED_ACCEPT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

/// A resource as a legacy discovery document lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DiscoveredResource {
    pub group: String,
    /// The version whose document listed it.
    pub version: String,
    pub resource: String,
    pub kind: String,
    /// `None` for resources that are not persisted (reviews) or served by other aggregated
    /// API servers that publish none.
    pub storage_version_hash: Option<String>,
    pub verbs: Vec<String>,
}

/// The result of a look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DiscoverySnapshot {
    pub resources: BTreeMap<(String, String), DiscoveredResource>,
    /// Every group-version document answered (a failed one, e.g. an unavailable aggregated
    /// API, leaves its resources out: they must not be taken for gone).
    pub complete: bool,
    /// The cluster serves the StorageVersion API (`internal.apiserver.k8s.io`).
    pub storage_version_api: bool,
}

/// Counters of the requests discovery made (for metrics and the idle-cost benchmark).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DiscoveryCounts {
    pub not_modified: u64,
    pub fetched: u64,
    pub group_versions: u64,
}

#[derive(Debug)]
pub(crate) struct Discovery {
    client: ClusterClient,
    /// ETags of `/api` and `/apis`.
    etags: [Option<String>; 2],
    /// Per document (`/api`, `/apis`): each group's served versions in preference order, with
    /// the resources each lists, from its last fresh answer (aggregated) or group list (legacy).
    groups: [Vec<GroupVersions>; 2],
    /// The cluster answered legacy documents: every poll is a look.
    legacy: bool,
    pub counts: DiscoveryCounts,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct GroupVersions {
    group: String,
    /// Preferred first; each with the resources aggregated discovery listed (empty when
    /// unknown: legacy).
    versions: Vec<(String, Vec<String>)>,
}

#[derive(Deserialize)]
struct AggregatedList {
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    items: Vec<AggregatedGroup>,
}

#[derive(Deserialize, Default)]
struct NamedMeta {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct AggregatedGroup {
    #[serde(default)]
    metadata: NamedMeta,
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    versions: Vec<AggregatedVersion>,
}

#[derive(Deserialize)]
struct AggregatedVersion {
    version: String,
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    resources: Vec<AggregatedResource>,
}

#[derive(Deserialize)]
struct AggregatedResource {
    resource: String,
}

#[derive(Deserialize)]
struct LegacyGroupList {
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    groups: Vec<LegacyGroup>,
}

#[derive(Deserialize)]
struct LegacyGroup {
    name: String,
    #[serde(default, rename = "preferredVersion")]
    preferred_version: Option<LegacyVersion>,
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    versions: Vec<LegacyVersion>,
}

#[derive(Deserialize, Clone)]
struct LegacyVersion {
    version: String,
}

#[derive(Deserialize)]
struct LegacyApiVersions {
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    versions: Vec<String>,
}

#[derive(Deserialize)]
struct ResourceList {
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    resources: Vec<ResourceEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceEntry {
    name: String,
    #[serde(default)]
    kind: String,
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    verbs: Vec<String>,
    #[serde(default)]
    storage_version_hash: Option<String>,
}

fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

fn decode<T: serde::de::DeserializeOwned>(path: &str, body: &[u8]) -> Result<T, ClusterError> {
    serde_json::from_slice(body).map_err(ClusterError::decode(format!("GET {path}")))
}

impl Discovery {
    pub(crate) fn new(client: ClusterClient) -> Self {
        Self {
            client,
            etags: [None, None],
            groups: [Vec::new(), Vec::new()],
            legacy: false,
            counts: DiscoveryCounts::default(),
        }
    }

    /// Whether anything changed since the last poll (always true before the first one, and on
    /// a cluster without aggregated discovery).
    pub(crate) async fn poll(&mut self) -> Result<bool, ClusterError> {
        let mut changed = false;
        for (index, path) in ["/api", "/apis"].into_iter().enumerate() {
            let answer = self
                .client
                .get_if_none_match(path, AGGREGATED_ACCEPT, self.etags[index].as_deref())
                .await?;
            let Some(answer) = answer else {
                self.counts.not_modified += 1;
                continue;
            };
            self.counts.fetched += 1;
            changed = true;
            let header = |name| {
                answer
                    .headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let content_type = header(http::header::CONTENT_TYPE)
                .unwrap_or_default()
                .replace(' ', "");
            if content_type.starts_with(AGGREGATED) {
                self.legacy = false;
                self.etags[index] = header(http::header::ETAG);
                self.groups[index] = aggregated_groups(decode(path, &answer.body)?);
            } else {
                // Legacy APIVersions / APIGroupList: no ETag to ask with next time.
                self.legacy = true;
                self.etags[index] = None;
                self.groups[index] = if index == 0 {
                    core_versions(decode(path, &answer.body)?)
                } else {
                    legacy_groups(decode(path, &answer.body)?)
                };
            }
        }
        Ok(changed || self.legacy)
    }

    /// Reads every group's legacy documents for storage-version hashes.
    pub(crate) async fn look(&mut self) -> Result<DiscoverySnapshot, ClusterError> {
        if self.groups.iter().all(Vec::is_empty) {
            self.poll().await?;
        }
        let mut look = DiscoverySnapshot {
            complete: true,
            ..DiscoverySnapshot::default()
        };
        for group in self.groups.concat() {
            let mut seen: Vec<String> = Vec::new();
            for (index, (version, listed)) in group.versions.iter().enumerate() {
                // Other versions only for resources the preferred ones did not list.
                if index > 0 && !listed.is_empty() && listed.iter().all(|r| seen.contains(r)) {
                    continue;
                }
                let path = group_version_path(&group.group, version);
                self.counts.group_versions += 1;
                let answer = match self
                    .client
                    .request(http::Method::GET, &path, "application/json", None)
                    .await
                {
                    Ok(answer) => answer,
                    Err(err) => {
                        // An aggregated API that is down, or a version gone since the poll.
                        tracing::debug!(%path, error = %err, "discovery document unavailable");
                        look.complete = false;
                        continue;
                    }
                };
                let list: ResourceList = decode(&path, &answer.body)?;
                for entry in list.resources {
                    if entry.name.contains('/') || seen.contains(&entry.name) {
                        continue;
                    }
                    seen.push(entry.name.clone());
                    if group.group == "internal.apiserver.k8s.io" && entry.name == "storageversions"
                    {
                        look.storage_version_api = true;
                    }
                    look.resources.insert(
                        (group.group.clone(), entry.name.clone()),
                        DiscoveredResource {
                            group: group.group.clone(),
                            version: version.clone(),
                            resource: entry.name,
                            kind: entry.kind,
                            storage_version_hash: entry
                                .storage_version_hash
                                .filter(|h| !h.is_empty()),
                            verbs: entry.verbs,
                        },
                    );
                }
            }
        }
        Ok(look)
    }
}

/// Each group's versions and their resources, from aggregated discovery.
fn aggregated_groups(list: AggregatedList) -> Vec<GroupVersions> {
    list.items
        .into_iter()
        .map(|g| GroupVersions {
            group: g.metadata.name,
            versions: g
                .versions
                .into_iter()
                .map(|v| {
                    let names = v.resources.into_iter().map(|r| r.resource).collect();
                    (v.version, names)
                })
                .collect(),
        })
        .collect()
}

/// The core group's versions, from a legacy `/api` APIVersions.
fn core_versions(versions: LegacyApiVersions) -> Vec<GroupVersions> {
    vec![GroupVersions {
        group: String::new(),
        versions: versions
            .versions
            .into_iter()
            .map(|v| (v, Vec::new()))
            .collect(),
    }]
}

/// Each group's versions, preferred first, from a legacy `/apis` APIGroupList.
fn legacy_groups(list: LegacyGroupList) -> Vec<GroupVersions> {
    list.groups
        .into_iter()
        .map(|g| {
            let mut versions: Vec<LegacyVersion> = Vec::new();
            if let Some(preferred) = g.preferred_version.clone() {
                versions.push(preferred);
            }
            for v in g.versions {
                if !versions.iter().any(|x| x.version == v.version) {
                    versions.push(v);
                }
            }
            GroupVersions {
                group: g.name,
                versions: versions
                    .into_iter()
                    .map(|v| (v.version, Vec::new()))
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn versions(groups: &[GroupVersions]) -> Vec<(String, Vec<String>)> {
        groups
            .iter()
            .map(|g| {
                let names = g.versions.iter().map(|(v, _)| v.clone()).collect();
                (g.group.clone(), names)
            })
            .collect()
    }

    #[test]
    fn a_legacy_group_list_puts_the_preferred_version_first_once() {
        let list: LegacyGroupList = serde_json::from_value(json!({
            "kind": "APIGroupList",
            "groups": [
                {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}},
                {"name": "example.test",
                 "versions": [{"version": "v1"}, {"version": "v2"}],
                 "preferredVersion": {"version": "v2"}},
                {"name": "no.preference", "versions": [{"version": "v1beta1"}]}
            ]
        }))
        .unwrap();
        let groups = legacy_groups(list);
        assert_eq!(
            versions(&groups),
            vec![
                ("apps".to_string(), vec!["v1".to_string()]),
                ("example.test".into(), vec!["v2".into(), "v1".into()]),
                ("no.preference".into(), vec!["v1beta1".into()]),
            ]
        );
        // Legacy documents do not list resources.
        assert!(
            groups
                .iter()
                .all(|g| g.versions.iter().all(|(_, r)| r.is_empty()))
        );
    }

    #[test]
    fn legacy_core_versions_are_the_unnamed_group() {
        let core: LegacyApiVersions =
            serde_json::from_value(json!({"kind": "APIVersions", "versions": ["v1"]})).unwrap();
        assert_eq!(
            versions(&core_versions(core)),
            vec![(String::new(), vec!["v1".to_string()])]
        );
    }

    #[test]
    fn aggregated_discovery_keeps_each_versions_resources_and_reads_null_as_empty() {
        let list: AggregatedList = serde_json::from_value(json!({
            "kind": "APIGroupDiscoveryList",
            "items": [
                {"metadata": {"name": "apps"}, "versions": [
                    {"version": "v1", "resources": [{"resource": "deployments"}, {"resource": "statefulsets"}]}
                ]},
                {"metadata": {"name": "empty.test"}, "versions": [{"version": "v1", "resources": null}]}
            ]
        }))
        .unwrap();
        let groups = aggregated_groups(list);
        assert_eq!(groups[0].group, "apps");
        assert_eq!(
            groups[0].versions,
            vec![(
                "v1".to_string(),
                vec!["deployments".to_string(), "statefulsets".to_string()]
            )]
        );
        assert_eq!(groups[1].versions, vec![("v1".to_string(), Vec::new())]);
    }
}
