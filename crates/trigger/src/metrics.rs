//! The trigger's Prometheus metrics (`svm_trigger_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `not_modified`, `fetched` (aggregated discovery) or `group_version` (a legacy document
    /// read by a look).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// `Discovery`, `CustomResourceDefinition`, `StorageVersionApi`, `Unvouched`,
    /// `ApiserverMetrics`.
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StorageStateLabel {
    /// The StorageState's name (`deployments.apps`, `configmaps`).
    pub storagestate: String,
}

/// Detection lag buckets: a watch sees a change within seconds, a poll within
/// `--discovery-interval`, a missed change not before the next look.
fn detection_lag_histogram() -> Histogram {
    Histogram::new([
        0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 900.0,
    ])
}

/// The trigger's metrics. Cheap to clone (the series are shared).
#[derive(Debug, Clone)]
pub struct TriggerMetrics {
    /// `svm_trigger_discovery_requests_total{result}`: discovery requests, by result
    /// (`not_modified`, `fetched`, `group_version`).
    pub discovery_requests: Family<ResultLabel, Counter>,
    /// `svm_trigger_looks_total`: looks at every group's storage-version hashes.
    pub looks: Counter,
    /// `svm_trigger_history_entries_total{source}`: hashes appended to the history, by source.
    pub history_entries: Family<SourceLabel, Counter>,
    /// `svm_trigger_migrations_created_total`: StorageVersionMigrations the trigger created.
    pub migrations_created: Counter,
    /// Resources whose StorageState says every object is in the current storage version.
    pub safe_resources: Gauge,
    /// Resources tracked.
    pub resources: Gauge,
    /// For each StorageState that is not safe: since when (Unix seconds), that is the time of
    /// the history entry that made it unsafe (the series goes when it is safe again).
    pub unsafe_since: Family<StorageStateLabel, Gauge>,
    /// The oldest `lastHeartbeatTime` of the StorageStates (Unix seconds): a trigger that has
    /// stopped refreshing them shows here.
    pub oldest_heartbeat: Gauge,
    /// From a storage-version change in the cluster to its history entry, by source.
    pub detection_lag: Family<SourceLabel, Histogram, fn() -> Histogram>,
    /// `svm_trigger_encryption_scrapes_total{result}`: reads of kube-apiserver's `/metrics`
    /// for its encryption generation, by result (`read`, `absent`, `forbidden`, `failed`).
    pub encryption_scrapes: Family<ResultLabel, Counter>,
    /// `svm_trigger_encryption_observed`: 1 while every live apiserver's encryption generation
    /// is known and agreed, else 0 (refused, not published, or not agreed yet).
    pub encryption_observed: Gauge,
}

impl Default for TriggerMetrics {
    fn default() -> Self {
        Self {
            discovery_requests: Family::default(),
            looks: Counter::default(),
            history_entries: Family::default(),
            migrations_created: Counter::default(),
            safe_resources: Gauge::default(),
            resources: Gauge::default(),
            unsafe_since: Family::default(),
            oldest_heartbeat: Gauge::default(),
            detection_lag: Family::new_with_constructor(detection_lag_histogram),
            encryption_scrapes: Family::default(),
            encryption_observed: Gauge::default(),
        }
    }
}

impl TriggerMetrics {
    /// Registers every metric into `registry`, under its full `svm_trigger_` name.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "svm_trigger_discovery_requests",
            "Discovery requests of the trigger, by result",
            self.discovery_requests.clone(),
        );
        registry.register(
            "svm_trigger_looks",
            "Looks at every group's storage-version hashes",
            self.looks.clone(),
        );
        registry.register(
            "svm_trigger_history_entries",
            "Storage-version hashes appended to the history, by source",
            self.history_entries.clone(),
        );
        registry.register(
            "svm_trigger_migrations_created",
            "StorageVersionMigrations the trigger created",
            self.migrations_created.clone(),
        );
        registry.register(
            "svm_trigger_safe_resources",
            "Resources whose stored objects are all in the current storage version",
            self.safe_resources.clone(),
        );
        registry.register(
            "svm_trigger_resources",
            "Resources the trigger keeps a StorageState for",
            self.resources.clone(),
        );
        registry.register(
            "svm_trigger_storagestate_unsafe_since_timestamp_seconds",
            "Since when (Unix time) a StorageState has not been safe, per StorageState; absent when safe",
            self.unsafe_since.clone(),
        );
        registry.register(
            "svm_trigger_oldest_heartbeat_timestamp_seconds",
            "The oldest lastHeartbeatTime of the StorageStates (Unix time)",
            self.oldest_heartbeat.clone(),
        );
        registry.register(
            "svm_trigger_detection_lag_seconds",
            "Seconds from a storage-version change in the cluster to its history entry, by source",
            self.detection_lag.clone(),
        );
        registry.register(
            "svm_trigger_encryption_scrapes",
            "Reads of kube-apiserver's /metrics for its encryption generation, by result",
            self.encryption_scrapes.clone(),
        );
        registry.register(
            "svm_trigger_encryption_observed",
            "1 while every live kube-apiserver's encryption generation is read and agreed, else 0",
            self.encryption_observed.clone(),
        );
    }
}
