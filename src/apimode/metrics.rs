//! `svm_api_mode{mode}`: 1 for the mode the controllers run in (`owner`, `companion`), or for
//! why none runs (`waiting`, `refused`); 0 for the others. And
//! `svm_migrations_yielded_total{manager}`: migrations our migrator stopped working on because
//! another migrator wrote their status.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Decision;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ManagerLabel {
    pub manager: String,
}

#[derive(Clone, Default)]
pub struct ApiModeMetrics {
    pub mode: Family<ModeLabel, Gauge>,
    pub yielded: Family<ManagerLabel, Counter>,
}

impl ApiModeMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "svm_api_mode",
            "The API mode the controllers run in (owner, companion), or why none runs (waiting, refused)",
            self.mode.clone(),
        );
        registry.register(
            "svm_migrations_yielded",
            "Migrations the migrator stopped working on because another migrator wrote their status",
            self.yielded.clone(),
        );
    }

    pub fn set(&self, decision: &Decision) {
        for mode in ["owner", "companion", "waiting", "refused"] {
            self.mode
                .get_or_create(&ModeLabel { mode: mode.into() })
                .set(i64::from(mode == decision.label()));
        }
    }

    pub fn yielded_to(&self, manager: Option<&str>) {
        self.yielded
            .get_or_create(&ManagerLabel {
                manager: manager.unwrap_or("unknown").to_string(),
            })
            .inc();
    }
}
