//! The volume-claim controller's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use svm_cluster::ClusterError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabel {
    /// The HTTP code of the refused PATCH (`403` for a quota), or `error` without an answer.
    pub code: String,
}

/// The volume controller's series (`svm_volume_*`).
#[derive(Clone, Debug, Default)]
pub struct VolumeMetrics {
    /// Claim resizes asked of the cluster.
    pub resizes_started: Counter,
    /// Claims the cluster reports resized.
    pub claims_resized: Counter,
    /// Pods deleted so their file systems grow.
    pub pod_restarts: Counter,
    /// Resizes that failed, by reason.
    pub resize_failures: Family<FailureLabel, Counter>,
}

impl VolumeMetrics {
    /// Registers every series in `registry`.
    pub fn register(&self, registry: &mut Registry) {
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

    /// Counts a failed resize by what the cluster answered.
    pub fn resize_failure(&self, err: &ClusterError) {
        let code = err
            .code()
            .map_or_else(|| "error".to_string(), |c| c.to_string());
        self.resize_failures
            .get_or_create(&FailureLabel { code })
            .inc();
    }
}
