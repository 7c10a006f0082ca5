//! The cluster as the trigger sees it: its CRDs, the apiservers' identity leases and
//! StorageVersions, and discovery, and what they say of each resource's encoding.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use svm_registry::versions::storage_version_hash;

use crate::apiservers::Instances;
use crate::discovery::{DiscoveredResource, DiscoverySnapshot};
use crate::history::Source;
use crate::plan::{Encoding, Observed, View};
use crate::settings::Settings;
use crate::watches::{Signal, Update};

/// A CRD as the trigger needs it.
#[derive(Clone, Debug)]
pub(crate) struct CrdInfo {
    pub(crate) group: String,
    pub(crate) plural: String,
    pub(crate) kind: String,
    pub(crate) storage_version: Option<String>,
    pub(crate) stored_versions: Vec<String>,
    pub(crate) object: CustomResourceDefinition,
}

impl CrdInfo {
    pub(crate) fn of(crd: CustomResourceDefinition) -> Self {
        let storage_version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone());
        let stored_versions = crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default();
        Self {
            group: crd.spec.group.clone(),
            plural: crd.spec.names.plural.clone(),
            kind: crd.spec.names.kind.clone(),
            storage_version,
            stored_versions,
            object: crd,
        }
    }

    pub(crate) fn encoding(&self, version: &str) -> Encoding {
        Encoding {
            hash: storage_version_hash(&self.group, version, &self.kind),
            encoding_version: format!("{}/{version}", self.group),
            apiserver: None,
        }
    }

    pub(crate) fn key(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }

    /// The CRD's storage version is what every apiserver encodes; its storedVersions are what
    /// objects may still be stored as.
    pub(crate) fn observed(&self, storage_version: &str) -> Observed {
        Observed {
            group: self.group.clone(),
            resource: self.plural.clone(),
            view: View::Agreed(self.encoding(storage_version)),
            source: Source::CustomResourceDefinition,
            stored: self
                .stored_versions
                .iter()
                .map(|v| self.encoding(v))
                .collect(),
        }
    }
}

/// One view of the apiservers' encodings: agreed when they all hash the same (then no one
/// apiserver is named, unless there is only one).
pub(crate) fn agreement(mut encodings: Vec<Encoding>) -> View {
    let distinct: BTreeSet<&str> = encodings.iter().map(|e| e.hash.as_str()).collect();
    if distinct.len() != 1 {
        return View::Disagreed(encodings);
    }
    let several = encodings.len() > 1;
    // One distinct hash: there is a first encoding.
    let mut agreed = encodings.swap_remove(0);
    if several {
        agreed.apiserver = None;
    }
    View::Agreed(agreed)
}

/// What the trigger knows of the cluster.
#[derive(Default)]
pub(crate) struct ClusterView {
    pub(crate) crds: BTreeMap<String, CrdInfo>,
    pub(crate) crds_synced: bool,
    /// The next reconcile counts CRDs' storedVersions (first sync, or after a watch gap).
    pub(crate) resync_crds: bool,
    pub(crate) instances: Instances,
    pub(crate) leases_synced: bool,
    /// The lease watch's failure was logged (once per outage).
    pub(crate) lease_failure_logged: bool,
    /// `(group, resource)` → `(apiserver id, encoding group/version)`.
    pub(crate) storage_versions: BTreeMap<(String, String), Vec<(String, String)>>,
    pub(crate) storage_versions_synced: bool,
    pub(crate) look: Option<DiscoverySnapshot>,
    pub(crate) need_look: bool,
    /// When the earliest change not yet reconciled happened in the cluster, as the cluster
    /// stamped it (for the detection-lag metric).
    pub(crate) changed_at: Option<jiff::Timestamp>,
    /// The encryption generation every live apiserver applies, once read and agreed.
    pub(crate) encryption: Option<crate::encryption::Generation>,
}

/// `<group>.<resource>` (`core.<resource>`) → `(group, resource)`.
pub(crate) fn storage_version_resource(name: &str) -> Option<(String, String)> {
    let (group, resource) = name.rsplit_once('.')?;
    let group = if group == "core" { "" } else { group };
    Some((group.to_string(), resource.to_string()))
}

/// The time of an object's newest write, as kube-apiserver stamps it in `managedFields`.
pub(crate) fn last_written(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<jiff::Timestamp> {
    meta.managed_fields
        .as_deref()?
        .iter()
        .filter_map(|f| f.time.as_ref())
        .map(|t| t.0)
        .max()
}

pub(crate) fn version_of(encoding_version: &str) -> &str {
    encoding_version
        .rsplit_once('/')
        .map_or(encoding_version, |(_, v)| v)
}

impl ClusterView {
    /// Remembers that something changed at `at` (the earliest wins until reconciled).
    pub(crate) fn changed(&mut self, at: Option<jiff::Timestamp>) {
        if let Some(at) = at {
            self.changed_at = Some(self.changed_at.map_or(at, |t| t.min(at)));
        }
    }

    pub(crate) fn crd_backed(&self, group: &str, resource: &str) -> Option<&CrdInfo> {
        self.crds
            .values()
            .find(|c| c.group == group && c.plural == resource)
    }

    /// What the cluster shows now, per tracked resource: CRDs from their watch, every other
    /// resource from discovery or, where apiservers publish them, StorageVersions.
    pub(crate) fn observe(&self, settings: &Settings) -> BTreeMap<(String, String), Observed> {
        let mut out: BTreeMap<_, _> = self
            .crds
            .values()
            .filter_map(|crd| Some((crd, crd.storage_version.as_ref()?)))
            .filter(|(crd, _)| !settings.ignored.contains(&crd.key()))
            .map(|(crd, version)| (crd.key(), crd.observed(version)))
            .collect();
        let Some(look) = &self.look else {
            return out;
        };
        for (key, found) in &look.resources {
            let Some(hash) = &found.storage_version_hash else {
                continue;
            };
            if out.contains_key(key) || !self.tracks(settings, key, found) {
                continue;
            }
            let (view, source) = match self.published_encodings(key, found) {
                Some(encodings) => (agreement(encodings), Source::StorageVersionApi),
                None => (self.discovered(hash), Source::Discovery),
            };
            let observed = Observed {
                group: found.group.clone(),
                resource: found.resource.clone(),
                view,
                source,
                stored: Vec::new(),
            };
            out.insert(key.clone(), observed);
        }
        out
    }

    /// Whether a discovered resource is one the trigger keeps a StorageState for: not ours,
    /// not ignored, and migratable (list and patch).
    pub(crate) fn tracks(
        &self,
        settings: &Settings,
        key: &(String, String),
        found: &DiscoveredResource,
    ) -> bool {
        let migratable = ["list", "patch"]
            .iter()
            .all(|verb| found.verbs.iter().any(|v| v == verb));
        migratable && !settings.own_groups.contains(&found.group) && !settings.ignored.contains(key)
    }

    /// The encodings the apiservers publish for a resource (StorageVersion API), once that
    /// watch has listed and only where it says something.
    pub(crate) fn published_encodings(
        &self,
        key: &(String, String),
        found: &DiscoveredResource,
    ) -> Option<Vec<Encoding>> {
        let entries = self
            .storage_versions
            .get(key)
            .filter(|entries| self.storage_versions_synced && !entries.is_empty())?;
        let encodings = entries
            .iter()
            .map(|(apiserver, encoding)| Encoding {
                hash: storage_version_hash(&found.group, version_of(encoding), &found.kind),
                encoding_version: encoding.clone(),
                apiserver: Some(apiserver.clone()),
            })
            .collect();
        Some(encodings)
    }

    /// Discovery's hash alone: it does not say which apiserver, unless there is only one.
    pub(crate) fn discovered(&self, hash: &str) -> View {
        View::Agreed(Encoding {
            hash: hash.to_string(),
            encoding_version: String::new(),
            apiserver: self.instances.sole(),
        })
    }

    /// Whether a resource with a StorageState but no observation is known to be gone (and not
    /// merely unseen: a look that missed a group, a CRD watch not yet listed).
    pub(crate) fn known_gone(&self, group: &str, resource: &str) -> bool {
        let look_complete = self.look.as_ref().is_some_and(|l| l.complete);
        let key = (group.to_string(), resource.to_string());
        let listed = self
            .look
            .as_ref()
            .is_some_and(|l| l.resources.contains_key(&key));
        self.crds_synced && look_complete && !listed && self.crd_backed(group, resource).is_none()
    }

    pub(crate) fn on_crd(&mut self, update: Update<CustomResourceDefinition>) {
        match update {
            Update::Applied(crd) => {
                let name = crd.metadata.name.clone().unwrap_or_default();
                self.changed(last_written(&crd.metadata));
                let info = CrdInfo::of(crd);
                // Two storage moves between passes (A→B→A) leave only A in the latest event;
                // the versions objects were written in are still in status.storedVersions, so
                // the next pass reads them (otherwise only a relist does).
                if self.crds.get(&name).is_none_or(|old| {
                    info.stored_versions
                        .iter()
                        .any(|v| !old.stored_versions.contains(v))
                }) {
                    self.resync_crds = true;
                }
                self.crds.insert(name, info);
            }
            Update::Deleted(crd) => {
                self.crds
                    .remove(crd.metadata.name.as_deref().unwrap_or_default());
                // Its resource leaves discovery too: the next look confirms it is gone.
                self.need_look = true;
            }
            Update::Relisted(all) => {
                self.crds = all
                    .into_iter()
                    .map(|crd| {
                        (
                            crd.metadata.name.clone().unwrap_or_default(),
                            CrdInfo::of(crd),
                        )
                    })
                    .collect();
                self.crds_synced = true;
                self.resync_crds = true;
            }
            Update::Failed(err) => {
                tracing::warn!(error = %err, "the CustomResourceDefinition watch failed; it retries");
            }
        }
    }

    pub(crate) fn on_lease(&mut self, update: Update<Lease>) {
        let identity = |lease: &Lease| {
            (
                lease.metadata.name.clone().unwrap_or_default(),
                lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default(),
            )
        };
        match update {
            Update::Applied(lease) => {
                let (name, holder) = identity(&lease);
                if self.instances.applied(&name, &holder) {
                    // The new instance's first renewal is when it started serving.
                    self.changed(
                        lease
                            .spec
                            .as_ref()
                            .and_then(|s| s.renew_time.as_ref())
                            .map(|t| t.0),
                    );
                    tracing::info!(apiserver = %name, instance = %holder, "a kube-apiserver instance started; looking again");
                    self.need_look = true;
                }
            }
            Update::Deleted(lease) => {
                let (name, _) = identity(&lease);
                tracing::info!(apiserver = %name, "a kube-apiserver instance stopped");
                self.instances.deleted(&name);
            }
            Update::Relisted(all) => {
                let leases: Vec<(String, String)> = all.iter().map(identity).collect();
                if self.instances.relisted(&leases) {
                    self.need_look = true;
                }
                self.leases_synced = true;
                self.lease_failure_logged = false;
            }
            Update::Failed(err) => {
                if !self.lease_failure_logged {
                    tracing::warn!(error = %err, "the apiserver identity lease watch failed: every discovery poll is a full look until it is back");
                    self.lease_failure_logged = true;
                }
                self.leases_synced = false;
            }
        }
    }

    pub(crate) fn on_storage_version(&mut self, update: Update<StorageVersion>) {
        let entries = |sv: &StorageVersion| -> Vec<(String, String)> {
            sv.status
                .as_ref()
                .and_then(|s| s.storage_versions.as_deref())
                .unwrap_or_default()
                .iter()
                .filter(|s| !s.api_server_id.is_empty() && !s.encoding_version.is_empty())
                .map(|s| (s.api_server_id.clone(), s.encoding_version.clone()))
                .collect()
        };
        let key = |sv: &StorageVersion| {
            storage_version_resource(sv.metadata.name.as_deref().unwrap_or_default())
        };
        match update {
            Update::Applied(sv) => {
                self.changed(last_written(&sv.metadata));
                if let Some(key) = key(&sv) {
                    self.storage_versions.insert(key, entries(&sv));
                }
            }
            Update::Deleted(sv) => {
                if let Some(key) = key(&sv) {
                    self.storage_versions.remove(&key);
                }
            }
            Update::Relisted(all) => {
                self.storage_versions = all
                    .iter()
                    .filter_map(|sv| Some((key(sv)?, entries(sv))))
                    .collect();
                self.storage_versions_synced = true;
                self.instances.set_encodings_watched(true);
            }
            Update::Failed(err) => {
                if self.storage_versions_synced {
                    tracing::warn!(error = %err, "the StorageVersion watch failed; it retries");
                }
                self.storage_versions_synced = false;
                self.instances.set_encodings_watched(false);
            }
        }
    }

    /// Whether the last look found the StorageVersion API served.
    pub(crate) fn serves_storage_versions(&self) -> bool {
        self.look.as_ref().is_some_and(|l| l.storage_version_api)
    }

    pub(crate) fn on_signal(&mut self, signal: Signal) {
        match signal {
            Signal::Crd(update) => self.on_crd(*update),
            Signal::Lease(update) => self.on_lease(update),
            Signal::StorageVersion(update) => self.on_storage_version(update),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(crate) fn storage_version_names_parse() {
        assert_eq!(
            storage_version_resource("core.configmaps"),
            Some(("".into(), "configmaps".into()))
        );
        assert_eq!(
            storage_version_resource("internal.apiserver.k8s.io.storageversions"),
            Some(("internal.apiserver.k8s.io".into(), "storageversions".into()))
        );
        assert_eq!(version_of("apps/v1"), "v1");
        assert_eq!(version_of("v1"), "v1");
    }
}
