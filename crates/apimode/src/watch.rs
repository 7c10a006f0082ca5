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
        let mut group: BTreeMap<String, APIService> = BTreeMap::new();
        let mut listed = false;
        while let Some(update) = updates.recv().await {
            let changed = match update {
                Update::Relisted(all) => {
                    group = all
                        .into_iter()
                        .filter(in_group)
                        .map(|a| (name_of(&a), a))
                        .collect();
                    listed = true;
                    true
                }
                Update::Applied(apiservice) if in_group(&apiservice) => {
                    group.insert(name_of(&apiservice), apiservice);
                    true
                }
                Update::Deleted(apiservice) if in_group(&apiservice) => {
                    group.remove(&name_of(&apiservice));
                    true
                }
                Update::Applied(_) | Update::Deleted(_) => false,
                Update::Failed(err) => {
                    tracing::warn!(error = %err, "the APIService watch failed; the API mode stays as it was until it is back");
                    false
                }
            };
            if !changed || !listed {
                continue;
            }
            let apiservices: Vec<APIService> = group.values().cloned().collect();
            let discovered = if apiservices.is_empty() {
                match discovered_versions(&cluster).await {
                    Ok(versions) => versions,
                    Err(err) => {
                        tracing::warn!(error = %err, "reading the discovery of {GROUP} failed; the API mode stays as it was");
                        continue;
                    }
                }
            } else {
                Vec::new()
            };
            let serving = GroupServing::from_apiservices(&apiservices, &discovered);
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
