//! The trigger's Prometheus metrics (`svm_trigger_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `not_modified`, `fetched` (aggregated discovery) or `group_version` (a legacy document
    /// read by a look).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// `Discovery`, `CustomResourceDefinition`, `StorageVersionApi`, `Unvouched`.
    pub source: String,
}

#[derive(Debug, Clone, Default)]
pub struct TriggerMetrics {
    pub discovery_requests: Family<ResultLabel, Counter>,
    pub looks: Counter,
    pub history_entries: Family<SourceLabel, Counter>,
    pub migrations_created: Counter,
    /// Resources whose StorageState says every object is in the current storage version.
    pub safe_resources: Gauge,
    /// Resources tracked.
    pub resources: Gauge,
}

impl TriggerMetrics {
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
    }
}
