//! The DataPlaneRollout controller's Prometheus metrics (`svm_data_plane_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use svm_api::dataplane::{DataPlaneRolloutStatus, phases};

/// An eviction, by whose pod and what came of it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// `data-plane` (the DaemonSet's pod) or `consumer`.
    pub pod: String,
    /// `accepted`, `gone` (replaced or deleted first), `budget` (a PodDisruptionBudget's 429)
    /// or `error`.
    pub result: String,
}

/// One rollout's nodes in one phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// The rollout's namespace.
    pub namespace: String,
    /// The rollout's name.
    pub name: String,
    /// The node phase.
    pub phase: String,
}

/// The series.
#[derive(Clone, Debug, Default)]
pub struct DataPlaneMetrics {
    /// Evictions asked of the cluster.
    pub evictions: Family<EvictionLabels, Counter>,
    /// Nodes that reached Upgraded.
    pub nodes_upgraded: Counter,
    /// Nodes per rollout and phase, as last written.
    pub nodes: Family<NodeLabels, Gauge>,
}

impl DataPlaneMetrics {
    /// Registers every series in `registry`; the accepted evictions start at 0, so that a
    /// rate over them is defined before the first one.
    pub fn register(&self, registry: &mut Registry) {
        for data_plane in [true, false] {
            let _ = self
                .evictions
                .get_or_create(&eviction_labels(data_plane, "accepted"));
        }
        registry.register(
            "svm_data_plane_evictions",
            "Evictions the DataPlaneRollout controller asked for, by pod (data-plane or consumer) and result",
            self.evictions.clone(),
        );
        registry.register(
            "svm_data_plane_nodes_upgraded",
            "Nodes a DataPlaneRollout brought to the DaemonSet's newest revision",
            self.nodes_upgraded.clone(),
        );
        registry.register(
            "svm_data_plane_rollout_nodes",
            "Nodes of each DataPlaneRollout in each phase",
            self.nodes.clone(),
        );
    }

    /// Counts one eviction.
    pub fn eviction(&self, data_plane: bool, result: &str) {
        self.evictions
            .get_or_create(&eviction_labels(data_plane, result))
            .inc();
    }

    /// The rollout's nodes per phase, every phase written (0 where none).
    pub fn observe(&self, namespace: &str, name: &str, status: &DataPlaneRolloutStatus) {
        for phase in phases::ALL {
            let n = status.nodes.iter().filter(|n| n.phase == *phase).count();
            self.nodes
                .get_or_create(&labels(namespace, name, phase))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// A deleted rollout's series removed.
    pub fn forget(&self, namespace: &str, name: &str) {
        for phase in phases::ALL {
            self.nodes.remove(&labels(namespace, name, phase));
        }
    }
}

fn eviction_labels(data_plane: bool, result: &str) -> EvictionLabels {
    let pod = if data_plane { "data-plane" } else { "consumer" };
    EvictionLabels {
        pod: pod.into(),
        result: result.into(),
    }
}

fn labels(namespace: &str, name: &str, phase: &str) -> NodeLabels {
    NodeLabels {
        namespace: namespace.into(),
        name: name.into(),
        phase: phase.into(),
    }
}
