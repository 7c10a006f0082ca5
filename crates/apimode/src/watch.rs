//! Keeps [`GroupServing`] current: a list+watch of the cluster's APIServices (the records the
//! aggregator routes — and builds discovery — from), re-read into who serves the group after
//! every change to one of the group's APIServices. An upgraded kube-apiserver registering its
//! own, or an operator deleting ours, is seen at once, without polling.

use std::collections::BTreeMap;

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch as latest};
use tokio::task::JoinHandle;

use super::detect::{GroupServing, discovered_versions};
use svm_api::GROUP;
use svm_cluster::ClusterClient;
use svm_cluster::watches::{self, Update};

fn in_group(apiservice: &APIService) -> bool {
    apiservice.spec.as_ref().and_then(|s| s.group.as_deref()) == Some(GROUP)
}

fn name_of(apiservice: &APIService) -> String {
    apiservice.metadata.name.clone().unwrap_or_default()
}

/// Publishes who serves the group into `out` after the first list and every relevant change,
/// until `out` has no receiver left.
pub fn watch(cluster: ClusterClient, out: latest::Sender<Option<GroupServing>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, mut updates) = mpsc::channel::<Update<APIService>>(64);
        let lister = watches::watch(
            Api::<APIService>::all(cluster.kube().clone()),
            watcher::Config::default(),
            tx,
            |update| update,
        );
        let mut group = GroupApiServices::default();
        while let Some(update) = updates.recv().await {
            if !group.apply(update) || !group.listed {
                continue;
            }
            let Some(serving) = group.serving(&cluster).await else {
                continue;
            };
            let sent = out.send_if_modified(|current| {
                if current.as_ref() == Some(&serving) {
                    false
                } else {
                    *current = Some(serving);
                    true
                }
            });
            if !sent && out.is_closed() {
                break;
            }
        }
        lister.abort();
    })
}

/// The APIServices of our group, as the watch has told them.
#[derive(Default)]
struct GroupApiServices {
    by_name: BTreeMap<String, APIService>,
    /// Whether the first list came.
    listed: bool,
}

impl GroupApiServices {
    /// Takes in `update`; true when it changed what is known of the group.
    fn apply(&mut self, update: Update<APIService>) -> bool {
        match update {
            Update::Relisted(all) => {
                self.by_name = all
                    .into_iter()
                    .filter(in_group)
                    .map(|a| (name_of(&a), a))
                    .collect();
                self.listed = true;
                true
            }
            Update::Applied(apiservice) if in_group(&apiservice) => {
                self.by_name.insert(name_of(&apiservice), apiservice);
                true
            }
            Update::Deleted(apiservice) if in_group(&apiservice) => {
                self.by_name.remove(&name_of(&apiservice));
                true
            }
            Update::Applied(_) | Update::Deleted(_) => false,
            Update::Failed(err) => {
                tracing::warn!(error = %err, "the APIService watch failed; the API mode stays as it was until it is back");
                false
            }
        }
    }

    /// Who serves the group: from the APIServices, or from discovery when there are none;
    /// `None` when discovery does not answer (the mode stays as it was).
    async fn serving(&self, cluster: &ClusterClient) -> Option<GroupServing> {
        let apiservices: Vec<APIService> = self.by_name.values().cloned().collect();
        let discovered = if apiservices.is_empty() {
            match discovered_versions(cluster).await {
                Ok(versions) => versions,
                Err(err) => {
                    tracing::warn!(error = %err, "reading the discovery of {GROUP} failed; the API mode stays as it was");
                    return None;
                }
            }
        } else {
            Vec::new()
        };
        Some(GroupServing::from_apiservices(&apiservices, &discovered))
    }
}
