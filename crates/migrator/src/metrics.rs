//! The migrator's Prometheus metrics, under the names the out-of-tree
//! kube-storage-version-migrator exported (`storage_migrator_core_migrator_*`), so existing
//! dashboards keep working. Its three are registered as gauges: prometheus-client appends
//! `_total` to every counter (OpenMetrics), and upstream's names have no suffix.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// `configmaps`, `deployments.apps`.
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MigrationLabels {
    pub resource: String,
    /// `Succeeded` or `Failed`.
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `list` or `patch` (and `discovery`).
    pub verb: String,
    /// The HTTP code, or `error` when there was no answer.
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    pub resource: String,
    /// `stream` (one watch-list) or `pages` (metadata-only LISTs, the fallback).
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ManagerLabel {
    /// The other migrator's field manager (`kube-controller-manager`), or `unknown`.
    pub manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabels {
    pub resource: String,
    /// `429`, `503`, `transport`, …
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccountLabel {
    /// `priority-levels` (API Priority and Fairness's dump) or `metrics` (`/metrics`).
    pub account: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    pub status: String,
}

/// The statuses [`MigratorMetrics::migrations_by_status`] always reports (zero included).
pub(crate) const STATUSES: [&str; 4] = ["Pending", "Running", "Succeeded", "Failed"];

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

/// The migrator's series (`svm_migrator_*`).
#[derive(Debug, Clone)]
pub struct MigratorMetrics {
    /// Objects migrated per resource since the process started.
    pub migrated_objects: Family<ResourceLabel, Gauge>,
    /// The remaining-objects estimate of the running migration of each resource.
    pub remaining_objects: Family<ResourceLabel, Gauge>,
    /// Migrations that ended, by resource and outcome.
    pub migrations: Family<MigrationLabels, Gauge>,
    /// Latency of the migrator's requests, by verb and code.
    pub request_duration: Family<RequestLabels, Histogram, fn() -> Histogram>,
    /// Requests retried, by resource and reason.
    pub retries: Family<RetryLabels, Counter>,
    /// Requests whose retriable error outlived their retries (the migration pauses and
    /// resumes from its checkpoint), by resource and reason.
    pub retries_exhausted: Family<RetryLabels, Counter>,
    /// How each migration read its resource: one watch-list stream, or pages.
    pub reads: Family<ReadLabels, Counter>,
    /// Migrations being worked on now.
    pub running: Gauge,
    /// Migrations left to another migrator that wrote their status.
    pub yielded: Family<ManagerLabel, Counter>,
    /// StorageVersionMigrations in the store, by status (what `kubectl get svm` shows).
    pub migrations_by_status: Family<StatusLabel, Gauge>,
    /// 429s from API Priority and Fairness (each one halves the pool's rate).
    pub apf_rejections: Counter,
    /// The pool's request rate in force (`--qps`, or lower under APF backpressure).
    pub rate_limit: Gauge<f64, AtomicU64>,
    /// PATCHes the pool allows in flight now (`--object-concurrency`, found or fixed).
    pub patch_concurrency: Gauge,
    /// 1 while kube-apiserver's own counts say others are using it beside the migrator.
    pub apiserver_shared: Gauge,
    /// kube-apiserver's accounts of its requests read, by which account.
    pub apiserver_readings: Family<AccountLabel, Counter>,
    /// While the limit follows latency: a small request of the migrator's own, timed from
    /// outside, against the same while its PATCHes were held (0 when not known).
    pub others_slowdown: Gauge<f64, AtomicU64>,
}

impl Default for MigratorMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl MigratorMetrics {
    /// Every series, empty.
    pub fn new() -> Self {
        let yielded: Family<ManagerLabel, Counter> = Family::default();
        // Served at 0 from the start, so that the first yield to kube-controller-manager is an
        // increase an alert (`increase()`) sees, not a series born at 1.
        drop(yielded.get_or_create(&ManagerLabel {
            manager: "kube-controller-manager".into(),
        }));
        Self {
            migrated_objects: Family::default(),
            remaining_objects: Family::default(),
            migrations: Family::default(),
            request_duration: Family::new_with_constructor(latency_histogram),
            retries: Family::default(),
            retries_exhausted: Family::default(),
            reads: Family::default(),
            running: Gauge::default(),
            yielded,
            migrations_by_status: Family::default(),
            apf_rejections: Counter::default(),
            rate_limit: Gauge::default(),
            patch_concurrency: Gauge::default(),
            apiserver_shared: Gauge::default(),
            apiserver_readings: Family::default(),
            others_slowdown: Gauge::default(),
        }
    }

    /// Registers every series in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        self.register_progress(registry);
        self.register_requests(registry);
        self.register_load(registry);
    }

    /// What the migrations did: objects, outcomes, reads, migrations by status.
    fn register_progress(&self, registry: &mut Registry) {
        registry.register(
            "storage_migrator_core_migrator_migrated_objects",
            "The number of objects migrated, per resource.",
            self.migrated_objects.clone(),
        );
        registry.register(
            "storage_migrator_core_migrator_remaining_objects",
            "The estimated number of objects still to migrate, per resource.",
            self.remaining_objects.clone(),
        );
        registry.register(
            "storage_migrator_core_migrator_migrations",
            "The number of migrations that ended, per resource and status.",
            self.migrations.clone(),
        );
        registry.register(
            "svm_migrations_yielded",
            "Migrations this server's migrator stopped working on because another migrator \
             (kube-controller-manager's) wrote their status, by that writer's field manager.",
            self.yielded.clone(),
        );
        registry.register(
            "storage_migrator_core_migrator_reads",
            "Resource reads by the migrations, by resource and mode: one watch-list stream, or \
             metadata-only pages (the fallback where the cluster cannot stream, e.g. on etcd 3.4).",
            self.reads.clone(),
        );
        registry.register(
            "storage_migrator_core_migrator_running_migrations",
            "Migrations being worked on now.",
            self.running.clone(),
        );
        registry.register(
            "svm_migrator_migrations",
            "StorageVersionMigrations in the store, by status (Pending, Running, Succeeded, Failed)",
            self.migrations_by_status.clone(),
        );
    }

    /// How the migrator's requests fared: latency, retries, APF rejections.
    fn register_requests(&self, registry: &mut Registry) {
        registry.register(
            "storage_migrator_core_migrator_request_duration_seconds",
            "Latency of the migrator's requests to the kube-apiserver, by verb and code.",
            self.request_duration.clone(),
        );
        registry.register(
            "storage_migrator_core_migrator_retries",
            "Requests retried after a retriable error, by resource and reason.",
            self.retries.clone(),
        );
        registry.register(
            "svm_migrator_retries_exhausted",
            "Requests whose retriable error outlived their retries, by resource and reason; \
             their migration pauses and resumes from its checkpoint.",
            self.retries_exhausted.clone(),
        );
        registry.register(
            "svm_migrator_apf_rejections",
            "Requests rejected by API Priority and Fairness (429 with the X-Kubernetes-PF-* headers)",
            self.apf_rejections.clone(),
        );
    }

    /// The load the migrator allows itself, and what it reads of others'.
    fn register_load(&self, registry: &mut Registry) {
        registry.register(
            "svm_migrator_rate_limit_qps",
            "The migrator's request rate in force: --qps, or lower while APF rejects (0: unlimited)",
            self.rate_limit.clone(),
        );
        registry.register(
            "svm_migrator_patch_concurrency",
            "PATCHes the migrator allows in flight now (--object-concurrency: found from latency, or fixed)",
            self.patch_concurrency.clone(),
        );
        registry.register(
            "svm_migrator_apiserver_shared",
            "1 while kube-apiserver's counts show others working beside the migrator: their requests executing or queued (API Priority and Fairness gauges), or a few a second (apiserver_request_total); --object-concurrency auto then follows latency (0: at its ceiling)",
            self.apiserver_shared.clone(),
        );
        registry.register(
            "svm_migrator_apiserver_readings",
            "Readings of kube-apiserver's account of its requests at --object-concurrency auto, by account: priority-levels (API Priority and Fairness's dump, a few lines; where the migrator's requests have a priority level of their own) or metrics (the whole /metrics)",
            self.apiserver_readings.clone(),
        );
        registry.register(
            "svm_migrator_others_slowdown_ratio",
            "While --object-concurrency auto follows latency (others are there, or nothing is known): how much longer a read of one object of the resource being migrated (a metadata-only LIST, on a connection of its own) takes than while the migrator held its PATCHes (the median of a second of them); from 1.4 the PATCH limit stops growing, from 1.8 it shrinks (0: not known)",
            self.others_slowdown.clone(),
        );
    }

    /// Publishes the count of migrations in each status.
    pub fn set_statuses(&self, counts: &[(&str, i64)]) {
        for status in STATUSES {
            let n = counts
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n);
            self.migrations_by_status
                .get_or_create(&StatusLabel {
                    status: status.into(),
                })
                .set(n);
        }
    }

    /// Counts a migration's read of `resource` as `mode` (`watch-list` or `pages`).
    pub fn count_read(&self, resource: &str, mode: &str) {
        self.reads
            .get_or_create(&ReadLabels {
                resource: resource.into(),
                mode: mode.into(),
            })
            .inc();
    }

    /// Observes one request's latency by verb and answer code.
    pub fn observe_request(&self, verb: &str, code: Option<u16>, seconds: f64) {
        self.request_duration
            .get_or_create(&RequestLabels {
                verb: verb.into(),
                code: code.map_or_else(|| "error".to_string(), |c| c.to_string()),
            })
            .observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_names_appear_without_a_total_suffix() {
        let metrics = MigratorMetrics::new();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let label = ResourceLabel {
            resource: "configmaps".into(),
        };
        metrics.migrated_objects.get_or_create(&label).inc_by(3);
        metrics.remaining_objects.get_or_create(&label).set(7);
        metrics
            .migrations
            .get_or_create(&MigrationLabels {
                resource: "configmaps".into(),
                status: "Succeeded".into(),
            })
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(
                "storage_migrator_core_migrator_migrated_objects{resource=\"configmaps\"} 3"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "storage_migrator_core_migrator_remaining_objects{resource=\"configmaps\"} 7"
            ),
            "{text}"
        );
        assert!(text.contains("storage_migrator_core_migrator_migrations{resource=\"configmaps\",status=\"Succeeded\"} 1"), "{text}");
    }
}
