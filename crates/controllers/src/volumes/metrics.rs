//! The volume-claim controller's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use svm_cluster::ClusterError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabel {
    /// The HTTP code of the refused PATCH (`403` for a quota), or `error` without an answer.
    pub code: String,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct VolumeMetrics {
    pub resizes_started: Counter,
    pub claims_resized: Counter,
    pub pod_restarts: Counter,
    pub resize_failures: Family<FailureLabel, Counter>,
}

impl VolumeMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "svm_volume_claim_resizes_started",
            "Claims whose storage request the controller raised (or lowered after a failure)",
            self.resizes_started.clone(),
        );
        registry.register(
            "svm_volume_claims_resized",
            "Claims seen reaching the size asked for",
            self.claims_resized.clone(),
        );
        registry.register(
            "svm_volume_claim_pod_restarts",
            "Pods deleted so that a claim's file system is resized when they start again",
            self.pod_restarts.clone(),
        );
        registry.register(
            "svm_volume_claim_resize_failures",
            "Claim PATCHes the cluster refused, by HTTP code",
            self.resize_failures.clone(),
        );
    }

    pub(crate) fn resize_failure(&self, err: &ClusterError) {
        let code = err
            .code()
            .map_or_else(|| "error".to_string(), |c| c.to_string());
        self.resize_failures
            .get_or_create(&FailureLabel { code })
            .inc();
    }
}
