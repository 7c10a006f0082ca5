//! Who serves `storagemigration.k8s.io` on the cluster, version by version, read from the
//! aggregator's own records: the APIServices of the group (a *local* one, with no
//! `spec.service`, is served by kube-apiserver itself; one with a Service by that Service —
//! ours, or someone else's). A version kube-apiserver serves while no APIService of the group
//! exists at all (after ours were deleted and before kube-apiserver re-registers its own on
//! its next start) is still answered by kube-apiserver: the group's discovery document tells.
//!
//! kube-aggregator's autoregistration never touches an APIService it did not create: ours,
//! registered before the cluster served the group, *shadows* the built-in version of the same
//! name (and kube-apiserver registers its own only on its next start after ours is gone). So
//! while ours exist, the cluster's built-in versions cannot be seen here; the guard on status
//! writes (see `guard`) is what notices kube-controller-manager then. The other way round —
//! ours applied over kube-apiserver's own APIService (`kubectl apply -k deploy/` on a cluster
//! that serves the group) — keeps the `kube-aggregator.kubernetes.io/automanaged` label on it:
//! that version is the cluster's, taken over until kube-apiserver's next start.

use http::Method;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Deserialize;

use svm_api::GROUP;
use svm_cluster::{ClusterClient, ClusterError};

/// The label our APIService manifests carry (apiservice/), to tell ours from others' in
/// messages.
pub(crate) const OUR_LABEL: (&str, &str) = ("app.kubernetes.io/name", "svm-apiserver");

/// The label kube-aggregator's autoregistration puts on the APIServices it manages
/// (`onstart` for kube-apiserver's own groups, `true` for CRDs').
pub(crate) const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";

/// Who serves each version of the group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupServing {
    /// Versions kube-apiserver serves itself, preferred first.
    pub builtin: Vec<String>,
    /// Versions the aggregator sends to a Service, preferred first.
    pub delegated: Vec<Delegated>,
}

/// A version registered to a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delegated {
    pub version: String,
    /// `namespace/name` of the Service.
    pub service: String,
    /// The APIService carries our label.
    pub ours: bool,
    /// It is kube-apiserver's own APIService (automanaged), pointed at a Service by an apply
    /// over it: the cluster serves this version itself once the APIService is restored.
    pub taken_over: bool,
}

impl GroupServing {
    /// The version companion mode uses: the cluster's preferred built-in one.
    pub fn preferred_builtin(&self) -> Option<&str> {
        self.builtin.first().map(String::as_str)
    }

    /// From the group's APIServices (any order) and, when there are none, the versions the
    /// group's discovery document lists (kube-apiserver answering for itself).
    pub fn from_apiservices(apiservices: &[APIService], discovered: &[String]) -> Self {
        let mut entries: Vec<(i32, String, Option<Delegated>)> = Vec::new();
        for apiservice in apiservices {
            let Some(spec) = &apiservice.spec else {
                continue;
            };
            if spec.group.as_deref() != Some(GROUP) {
                continue;
            }
            let version = spec.version.clone().unwrap_or_default();
            let labels = apiservice.metadata.labels.clone().unwrap_or_default();
            let delegated = spec.service.as_ref().map(|service| Delegated {
                version: version.clone(),
                service: format!(
                    "{}/{}",
                    service.namespace.as_deref().unwrap_or_default(),
                    service.name.as_deref().unwrap_or_default()
                ),
                ours: labels.get(OUR_LABEL.0).is_some_and(|v| v == OUR_LABEL.1),
                taken_over: labels.contains_key(AUTOMANAGED_LABEL),
            });
            entries.push((spec.version_priority, version, delegated));
        }
        let mut serving = GroupServing::default();
        if entries.is_empty() {
            serving.builtin = discovered.to_vec();
            return serving;
        }
        // The aggregator's order: versionPriority, highest first, then Kubernetes' version
        // order (v1 before v1beta1 before v1alpha1) on a tie.
        entries.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| svm_registry::versions::compare_kube_versions(&a.1, &b.1))
        });
        for (_, version, delegated) in entries {
            match delegated {
                Some(d) => serving.delegated.push(d),
                None => serving.builtin.push(version),
            }
        }
        serving
    }
}

#[derive(Deserialize)]
struct ApiGroupDocument {
    #[serde(default, deserialize_with = "svm_cluster::wire::null_as_empty")]
    versions: Vec<GroupVersionEntry>,
}

#[derive(Deserialize)]
struct GroupVersionEntry {
    version: String,
}

/// Reads the group's APIServices, and its discovery document when it has none.
pub async fn detect(cluster: &ClusterClient) -> Result<GroupServing, ClusterError> {
    let list: k8s_openapi::List<APIService> = cluster
        .get_json("/apis/apiregistration.k8s.io/v1/apiservices")
        .await?;
    let ours: Vec<APIService> = list
        .items
        .into_iter()
        .filter(|a| a.spec.as_ref().and_then(|s| s.group.as_deref()) == Some(GROUP))
        .collect();
    let discovered = if ours.is_empty() {
        discovered_versions(cluster).await?
    } else {
        Vec::new()
    };
    Ok(GroupServing::from_apiservices(&ours, &discovered))
}

/// `/apis/storagemigration.k8s.io`: the versions kube-apiserver answers for (404: none).
pub(super) async fn discovered_versions(
    cluster: &ClusterClient,
) -> Result<Vec<String>, ClusterError> {
    let path = format!("/apis/{GROUP}");
    match cluster
        .request(Method::GET, &path, "application/json", None)
        .await
    {
        Ok(answer) => {
            let doc: ApiGroupDocument = serde_json::from_slice(&answer.body)
                .map_err(ClusterError::decode(format!("GET {path}")))?;
            Ok(doc.versions.into_iter().map(|v| v.version).collect())
        }
        Err(err) if err.is_not_found() => Ok(Vec::new()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apiservice(value: serde_json::Value) -> APIService {
        serde_json::from_value(value).expect("an APIService")
    }

    fn local(version: &str, priority: i32) -> APIService {
        // As kube-apiserver 1.36 registers it (seen on the real server).
        apiservice(json!({
            "metadata": {"name": format!("{version}.{GROUP}"),
                         "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
            "spec": {"group": GROUP, "version": version, "groupPriorityMinimum": 15800,
                     "versionPriority": priority}
        }))
    }

    fn ours(version: &str, priority: i32) -> APIService {
        apiservice(json!({
            "metadata": {"name": format!("{version}.{GROUP}"),
                         "labels": {"app.kubernetes.io/name": "svm-apiserver"}},
            "spec": {"group": GROUP, "version": version, "groupPriorityMinimum": 15800,
                     "versionPriority": priority,
                     "service": {"namespace": "svm-system", "name": "svm-apiserver", "port": 443}}
        }))
    }

    #[test]
    fn local_apiservices_are_the_clusters_own_versions() {
        let other = apiservice(json!({
            "metadata": {"name": "v1.apps"},
            "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15}
        }));
        let serving = GroupServing::from_apiservices(&[other, local("v1beta1", 9)], &[]);
        assert_eq!(serving.builtin, ["v1beta1"]);
        assert!(serving.delegated.is_empty());
        assert_eq!(serving.preferred_builtin(), Some("v1beta1"));
    }

    #[test]
    fn ours_are_delegated_and_ordered_by_priority() {
        let serving = GroupServing::from_apiservices(
            &[ours("v1alpha1", 9), ours("v1", 15), ours("v1beta1", 10)],
            &[],
        );
        assert!(serving.builtin.is_empty());
        let versions: Vec<&str> = serving
            .delegated
            .iter()
            .map(|d| d.version.as_str())
            .collect();
        assert_eq!(versions, ["v1", "v1beta1", "v1alpha1"]);
        assert!(serving.delegated.iter().all(|d| d.ours));
        assert_eq!(serving.delegated[0].service, "svm-system/svm-apiserver");
    }

    #[test]
    fn ours_applied_over_kube_apiservers_own_is_a_take_over() {
        let mut taken = local("v1beta1", 9);
        let spec = taken.spec.as_mut().expect("spec");
        spec.service = ours("v1beta1", 10).spec.and_then(|s| s.service);
        let serving = GroupServing::from_apiservices(&[taken, ours("v1", 15)], &[]);
        assert!(serving.builtin.is_empty());
        let flags: Vec<(&str, bool)> = serving
            .delegated
            .iter()
            .map(|d| (d.version.as_str(), d.taken_over))
            .collect();
        assert_eq!(flags, [("v1", false), ("v1beta1", true)]);
    }

    #[test]
    fn a_split_group_and_the_window_without_any_apiservice() {
        // Ours kept for v1alpha1 while kube-apiserver serves v1 and v1beta1 (1.37).
        let serving = GroupServing::from_apiservices(
            &[local("v1", 15), local("v1beta1", 9), ours("v1alpha1", 9)],
            &[],
        );
        assert_eq!(serving.builtin, ["v1", "v1beta1"]);
        assert_eq!(serving.delegated.len(), 1);
        // No APIService of the group: discovery answers for kube-apiserver itself.
        let serving = GroupServing::from_apiservices(&[], &["v1beta1".to_string()]);
        assert_eq!(serving.builtin, ["v1beta1"]);
        assert_eq!(
            GroupServing::from_apiservices(&[], &[]),
            GroupServing::default()
        );
    }
}
